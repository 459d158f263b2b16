"""Where a run's tasks run, chosen once from its cluster: hosts of one's own, or a Slurm job."""

from __future__ import annotations

from console import cluster as cl
from console import text
from console.run.placement import placement_for
from console.run.placement.hosts import OwnHosts
from console.run.placement.slurm import SlurmJob

SLURM = ('[training]\nworkload = "digits"\n[slurm]\nlogin = "login.hpc.example"\nnodes = 2\ntasks_per_node = 2\n'
         'parameter_servers = 1\n')


def hosts_cluster() -> cl.Cluster:
    return cl.Cluster([cl.Host("a", address="10.0.0.1"), cl.Host("b", address="10.0.0.2"),
                       cl.Host("spare", address="10.0.0.3", spare=True)],
                      [cl.Task("a", role="chief"), cl.Task("b"), cl.Task("b")], cl.Training())


def test_hosts_of_ones_own_run_each_task_where_its_entry_says():
    placement = placement_for(hosts_cluster())
    assert isinstance(placement, OwnHosts) and placement.picks_ports and placement.relaunches_one
    assert [h.name for h in placement.hosts()] == ["a", "b"]  # the spare runs nothing: no link to it yet
    assert placement.task_hosts() == ["a", "b", "b"] and placement.machines() == {"a": [0], "b": [1, 2]}
    assert text.machines_words(hosts_cluster().task_names(), placement.machines()) == "1 chief, 2 workers on 2 hosts"


def test_a_slurm_job_is_followed_through_its_login_host_and_plans_its_nodes():
    cluster = cl.loads(SLURM)
    placement = placement_for(cluster)
    assert isinstance(placement, SlurmJob) and not placement.picks_ports and not placement.relaunches_one
    assert placement.picks_machines and cluster.hosts == []
    assert [(h.name, h.address) for h in placement.hosts()] == [("login.hpc.example", "login.hpc.example")]
    assert placement.task_hosts() == ["login.hpc.example"] * 4
    assert placement.machines() == {"slurm-node-0": [0, 1], "slurm-node-1": [2, 3]}
    assert text.machines_words(cluster.task_names(), placement.machines()) == "1 chief, 1 ps, 2 workers on 2 hosts"
    assert placement.export_defaults() == {"time_limit": cluster.slurm.time, "cpus_per_task": cluster.slurm.cpus_per_task}


def test_the_same_place_is_the_same_hosts_or_the_same_login_host():
    hosts, slurm = hosts_cluster(), cl.loads(SLURM)
    addresses = {(h.name, h.address, h.local) for h in hosts.hosts}
    assert placement_for(hosts).same_place(hosts, addresses)
    assert not placement_for(hosts).same_place(slurm, addresses)
    assert placement_for(slurm).same_place(cl.loads(SLURM), set())
    assert not placement_for(slurm).same_place(hosts, set())
    other = cl.loads(SLURM.replace("login.hpc.example", "login2.hpc.example"))
    assert not placement_for(slurm).same_place(other, set())


def test_a_slurm_task_runs_on_the_node_its_launch_named_and_is_planned_on_one_till_then():
    """Why slow? and the system lane name a Slurm task's machine: the node its launch's address names (its node's
    samples come under that name), else the node planned for it; never the login host it is followed through."""
    from console.states import TaskState

    placement = placement_for(cl.loads(SLURM))
    tasks = [TaskState(name, "login.hpc.example") for name in placement.cluster.task_names()]
    assert [placement.machine_of(t) for t in tasks] == ["slurm-node-0", "slurm-node-0", "slurm-node-1",
                                                         "slurm-node-1"]
    tasks[3].address = "gpu12:8889"
    assert placement.machine_of(tasks[3]) == "gpu12"
    hosts = placement_for(hosts_cluster())
    assert [hosts.machine_of(TaskState(n, h)) for n, h in (("chief-0", "a"), ("worker-0", "b"))] == ["a", "b"]
