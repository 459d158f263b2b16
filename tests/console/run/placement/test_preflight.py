"""A Slurm cluster file's pre-flight on a real Slurm cluster (tests.helpers.slurmcluster): the login host's Slurm
would take the job, or one line says why not and what to do, and nothing is submitted."""

from __future__ import annotations

import sys

import pytest

from console import cluster as cl
from console.run.placement import preflight as slurm
from tests.helpers.cli import tfcc

pytestmark = pytest.mark.timeout(300)  # the first test's also brings the module's Slurm cluster up

SLURM_FILE = """
[training]
workload = "digits"
epochs = 1

[slurm]
login = "{login}"
user = "root"
key = "{key}"
nodes = {nodes}
time = "{time}"
{more}
"""


@pytest.fixture
def login(slurm_cluster, ssh_env):
    """The cluster's login host, its key known to this console (as after a first accepted connection)."""
    slurm_cluster.hosts.known_hosts(ssh_env / "known_hosts")
    yield slurm_cluster
    slurm_cluster.cancel_all()
    slurm_cluster.wait_for_no_jobs()


@pytest.fixture
def nothing_submitted(login):
    """The test submits no job (the controller knows of none more after it)."""
    before = login.job_ids()
    yield login
    assert login.job_ids() == before, "a pre-flight submitted a job"


def cluster_file(tmp_path, cluster, host=None, nodes=2, time="10:00", more="") -> str:
    host = host or cluster.login
    path = tmp_path / "slurm.toml"
    path.write_text(SLURM_FILE.format(login=host.address, key=cluster.hosts.client_key, nodes=nodes, time=time,
                                      more=more))
    return str(path)


def test_check_says_the_login_hosts_slurm_would_take_the_job(nothing_submitted, login, tmp_path, capsys):
    code, out, err = tfcc(["check", cluster_file(tmp_path, login, more='partition = "debug"\naccount = "lab"')],
                          capsys)
    assert code == 0, err
    assert "debug*" in out and "up" in out and "2:00:00" in out  # the partitions, the default starred
    assert f"ready: Slurm on {login.login.address} would take the job: 2 node(s) x 1 task(s) in debug" in out
    assert "nothing submitted" in out


def test_the_preflight_reads_the_partitions(nothing_submitted, login, tmp_path):
    answer = slurm.preflight(cl.load(cluster_file(tmp_path, login)))
    (debug,) = answer.partitions
    assert (debug.name, debug.up, debug.nodes, debug.time_limit, debug.default) == ("debug", True, 2, "2:00:00", True)
    assert answer.partition("") is debug and answer.start  # sbatch --test-only said when it would start


@pytest.mark.parametrize("settings, words", [
    (dict(more='partition = "nope"'),
     "has no partition 'nope' (it has debug (default)); set slurm.partition to one of them"),
    (dict(time="5:00:00"),
     "Slurm refuses the time limit 5:00:00 in partition debug (its limit is 2:00:00"),
    (dict(nodes=3),
     "slurm.nodes is 3, but partition debug has 2 nodes; ask for at most 2"),
    (dict(more="cpus_per_task = 64"),
     "partition debug cannot hold 2 node(s) of 1 task(s) with 64 CPUs each"),
])
def test_a_job_slurm_would_refuse_is_one_line_and_nothing_is_submitted(nothing_submitted, login, tmp_path, capsys,
                                                                       settings, words):
    for command in ("check", "run"):
        code, out, err = tfcc([command, cluster_file(tmp_path, login, **settings)], capsys)
        assert code != 0 and out == ""
        assert len(err.strip().splitlines()) == 1 and words in err, err


def test_a_login_host_without_slurm_is_one_line(nothing_submitted, login, tmp_path, capsys):
    host = login.hosts.hosts[1]
    with login.without_slurm(host):
        code, out, err = tfcc(["check", cluster_file(tmp_path, login, host=host)], capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert f"{host.address} has no Slurm commands (no sbatch, squeue, scancel, sinfo, scontrol on its PATH)" in err
    assert "set slurm.login to the host you submit jobs from" in err


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tfcc_run_of_a_slurm_cluster_file_trains_digits_on_both_nodes(login, tmp_path, capsys):
    """The README's Slurm path: tfcc run submits the job from the login host and follows it to its end."""
    path = cluster_file(tmp_path, login, more=f'python = "{sys.executable}"\ncpus_per_task = 1')
    code, out, err = tfcc(["run", path, "--run-id", "slurm-cli"], capsys)
    assert code == 0, err[-3000:]
    assert "tfcc: run slurm-cli started: 2 tasks, Slurm job" in err
    assert "Slurm job" in out and f"running on {login.node_list}" in out
    for task in ("worker-0", "worker-1"):
        assert f"{task}: finished" in out
