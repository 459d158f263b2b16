"""The run core: reaching a host's agent, starting a run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import threading
import time

import pytest

from console import cluster as cl
from console.run.runner import Run
from console.errors import RunError
from console.store.manifests import read_manifest
from tests.helpers.waiting import wait_until


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    return tmp_path


def test_a_start_that_fails_halfway_stops_what_it_started_and_can_be_resumed(homes):
    """worker-1 cannot start (its folder is taken): worker-0, already started, must not wait an hour
    for it holding its port; the error says so and how to go on."""
    script = homes / "waits.py"
    script.write_text("import signal\nsignal.pause()\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script)))
    taken = homes / "host-home" / "runs" / "half" / "worker-1"
    taken.mkdir(parents=True)
    (taken / "spec.json").write_text("{}")  # what a start leaves: a fresh start refuses the folder
    run = Run(cluster, "half")
    try:
        with pytest.raises(RunError) as err:
            run.start()
        assert "(starting run half, after worker-0 had started: stopped again)" in str(err.value)
        assert str(err.value).endswith("start it again with tfcc resume half")
        assert run.links["here"].connect().call("status", run_id="half", task="worker-0")["phase"] != "running"
    finally:
        run.detach()


def test_a_resume_whose_port_was_taken_meanwhile_gives_every_task_new_ports(homes):
    """Between two attempts another process took worker-1's port: the same TF_CONFIG would fail
    ("Could not start gRPC server"), so every task gets a new one with new ports, and the run's
    manifest keeps it. A fixed port that is taken cannot move: the error names who holds it."""
    script = homes / "waits.py"
    script.write_text("import os, signal\nopen('attempt', 'w').write(os.environ['TFCC_ATTEMPT'])\nsignal.pause()\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script)))
    run = Run(cluster, "moved")
    holder = socket.socket()
    try:
        run.start()
        before = list(run.tf_configs)
        run.stop(grace=1)
        port = json.loads(before[1])["cluster"]["worker"][1].rsplit(":", 1)[1]
        holder.bind(("0.0.0.0", int(port)))
        holder.listen()
        run.start(resume=True)
        assert "worker-1 on here: port " + port + " is in use by pid " + str(os.getpid()) in run.ports_changed
        after = run.tf_configs
        assert after != before and all(port not in c for c in after)
        assert len({json.dumps(json.loads(c)["cluster"]) for c in after}) == 1  # one cluster for all
        assert read_manifest("moved").tf_configs == after
        assert [t.attempt for t in run.tasks] == [2, 2]
        folder = homes / "host-home" / "runs" / "moved" / "worker-1"
        assert wait_until_file(folder / "work" / "attempt") == "2"  # the script's cwd: its copy of its folder
        run.stop(grace=1)

        fixed = Run.load("moved")
        fixed.cluster.tasks[0].port = int(json.loads(after[0])["cluster"]["worker"][0].rsplit(":", 1)[1])
        with socket.socket() as other:
            other.bind(("0.0.0.0", fixed.cluster.tasks[0].port))
            other.listen()
            with pytest.raises(RunError) as err:
                fixed.start(resume=True)
        assert "worker-0 on here: port" in str(err.value) and "set the task's port to \"auto\"" in str(err.value)
        fixed.detach()
    finally:
        holder.close()
        run.stop(grace=0)
        run.detach()


def wait_until_file(path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} never written"
        tick.wait(0.05)
    return path.read_text()


def test_a_damaged_spec_of_a_task_does_not_block_its_resume(homes):
    script = homes / "quick.py"
    script.write_text("pass\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script)))
    run = Run(cluster, "damaged")
    try:
        run.start()
        deadline = time.monotonic() + 30
        while any(s["phase"] != "finished" for s in run.status()):
            assert time.monotonic() < deadline
            threading.Event().wait(0.05)
        (homes / "host-home" / "runs" / "damaged" / "worker-1" / "spec.json").write_text("[1, 2")  # cut short
        (homes / "host-home" / "runs" / "damaged" / "worker-1" / "exit.json").write_text('{"returncode": 1}')
        run.start(resume=True)
        assert [t.attempt for t in run.tasks] == [2, 2]
    finally:
        run.stop(grace=0)
        run.detach()


def _sampling(run_id: str, host: str) -> bool:
    return any(t.name == f"tfcc-system-{run_id}-{host}" and t.is_alive() for t in threading.enumerate())


def test_a_hosts_load_is_sampled_while_its_tasks_are_followed_and_again_after_a_drop(homes):
    """One system stream per host, with every task of the run on it; after a dropped connection it
    comes back by itself; once the host's tasks have ended it ends too (no run waits for it)."""
    script = homes / "waits.py"
    script.write_text("import signal\nsignal.pause()\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script)))
    run = Run(cluster, "load")
    got: list = []
    try:
        run.start()
        run.follow(lambda task, message: None)
        run.sample_system(lambda host, record: got.append((time.monotonic(), host, record)), interval=0.2)
        run.sample_system(lambda host, record: got.append("a second stream"), interval=0.2)  # one per host
        assert wait_until(lambda: len(got) >= 2, 30)
        assert {host for _, host, _ in got} == {"here"}
        assert set(got[-1][2]["tasks"]) == {"worker-0", "worker-1"} and got[-1][2]["type"] == "system"
        before = run.links["here"].client
        before.channel.abort()  # the agent dies: the follows and the sampling reconnect
        assert wait_until(lambda: run.links["here"].client not in (None, before), 30)
        reconnected = time.monotonic()
        assert wait_until(lambda: any(when > reconnected for when, _, _ in got), 30)  # sampled again
        run.stop(grace=1)
        assert run.wait(30)
        assert wait_until(lambda: not _sampling("load", "here"), 5)
        assert "a second stream" not in got
    finally:
        run.stop(grace=0)
        run.detach()


def quick_run(homes, run_id: str, trainer: bool = False) -> Run:
    """A finished run of two local tasks (a script that ends at once; ``trainer``: a cluster of tfcc's trainer
    whose manifest says so, its tasks the same quick script)."""
    script = homes / "quick.py"
    script.write_text("pass\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script)))
    run = Run(cluster, run_id)
    run.start()
    assert wait_until(lambda: all(s["phase"] == "finished" for s in run.status()), 30)
    if trainer:  # the same tasks, as the trainer's: a person's resume needs a backup then
        run.cluster.training = cl.Training(workload="digits")
    return run


def fail(homes, run_id: str, task: str) -> None:
    (homes / "host-home" / "runs" / run_id / task / "exit.json").write_text('{"returncode": 1}')


def backed_up(homes, run_id: str, task: str) -> None:
    folder = homes / "host-home" / "runs" / run_id / task / "backup"
    folder.mkdir()
    (folder / "backup-40.index").write_bytes(b"an index")


def test_a_resume_over_a_vanished_run_folder_refuses_and_drops_nobodys_backups(homes):
    """A task's folder deleted by hand (a wiped disk, a new host) while the other holds a backup: resuming
    would start it from nothing and make the other drop its backups; nothing starts, the line says what to do."""
    run = quick_run(homes, "vanished")
    fail(homes, "vanished", "worker-0")
    backed_up(homes, "vanished", "worker-0")
    shutil.rmtree(homes / "host-home" / "runs" / "vanished" / "worker-1")
    try:
        with pytest.raises(RunError) as err:
            run.start(resume=True, explicit=True)
        assert str(err.value) == ("run vanished has no run folder any more for worker-1 on here: a resume would start "
                                  "it from nothing, and the other tasks would drop their backups; start a new run "
                                  "(tfcc run); the backups stay in the folders of worker-0")
        assert (homes / "host-home" / "runs" / "vanished" / "worker-0" / "backup" / "backup-40.index").exists()
        assert not (homes / "host-home" / "runs" / "vanished" / "worker-1").exists()  # nothing started
        shutil.rmtree(homes / "host-home" / "runs" / "vanished")
        with pytest.raises(RunError, match="run vanished has no run folder any more for worker-0 on here, worker-1 "
                                           "on here: there is nothing to resume from; start a new run"):
            run.start(resume=True, explicit=True)
    finally:
        run.detach()


def test_a_resume_of_the_trainers_run_copies_a_backup_into_a_vanished_folder(homes):
    """The same vanished folder in a run of tfcc's trainer: the resume copies worker-0's backup into a new folder
    for worker-1 (console/run/seeding.py) and starts both, instead of refusing."""
    run = quick_run(homes, "regrown", trainer=True)
    fail(homes, "regrown", "worker-0")
    folder = homes / "host-home" / "runs" / "regrown" / "worker-0" / "backup"
    folder.mkdir()
    for name in ("backup-40.index", "backup-40.data-00000-of-00001", "backup-40.plan.json"):
        (folder / name).write_bytes(name.encode())
    shutil.rmtree(homes / "host-home" / "runs" / "regrown" / "worker-1")
    try:
        run.start(resume=True, explicit=True)
        assert (run.seeded.step, run.seeded.donor, run.seeded.recipients) == (40, "worker-0", ["worker-1"])
        copied = homes / "host-home" / "runs" / "regrown" / "worker-1" / "backup"
        assert sorted(p.name for p in copied.iterdir()) == ["backup-40.data-00000-of-00001", "backup-40.index",
                                                            "backup-40.plan.json", "checkpoint"]
        assert [t.attempt for t in run.tasks] == [2, 1]  # both started: worker-1 in its new folder
    finally:
        run.stop(grace=0)
        run.detach()


def test_a_persons_resume_of_a_trainer_run_without_a_backup_refuses_and_a_restart_goes_on(homes):
    run = quick_run(homes, "unsaved", trainer=True)
    fail(homes, "unsaved", "worker-1")
    try:
        with pytest.raises(RunError, match=r"no task of run unsaved has a backup yet \(it trained less than its "
                                           r"backup_seconds, 30 s\): there is nothing to resume from; start a new run"):
            run.start(resume=True, explicit=True)
        assert [t.attempt for t in run.tasks] == [1, 1]  # nothing started
    finally:
        run.detach()


def test_delete_leaves_another_consoles_tasks_and_a_process_without_its_supervisor(homes, monkeypatch):
    from console import catalog

    run = quick_run(homes, "theirs")
    run.detach()
    mine = homes / "console-home"
    other = homes / "other-console"  # another console that learned of the run (its manifest copied there)
    (other / "runs").mkdir(parents=True)
    shutil.copy(mine / "runs" / "theirs.json", other / "runs" / "theirs.json")
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(other))
    with pytest.raises(RunError, match="task.s. worker-0, worker-1 of run theirs on this host were started by another "
                                       "console; delete the run from that console .nothing was deleted."):
        catalog.delete_run("theirs")
    assert (homes / "host-home" / "runs" / "theirs" / "worker-0").is_dir()
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(mine))

    script = homes / "lingers.py"  # a trainer whose supervisor is killed: it runs on, unknown to the agent
    script.write_text("import signal\nsignal.pause()\n")
    lingering = Run(cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")],
                               cl.Training(script=str(script))), "orphaned")
    lingering.start()
    folder = homes / "host-home" / "runs" / "orphaned" / "worker-0"
    try:
        child = json.loads(wait_until_file(folder / "child.json"))["pid"]
        supervisor = json.loads((folder / "state.json").read_text())["pid"]
        os.kill(supervisor, signal.SIGKILL)
        assert wait_until(lambda: lingering.status()[0]["phase"] == "lost", 30)
        with pytest.raises(RunError, match=f"worker-0 of run orphaned has a process that outlived its supervisor on "
                                           f"this host .pid {child}.; end it .kill {child}., then delete the run"):
            catalog.delete_run("orphaned")
        assert folder.is_dir()
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, NameError):
            pass
        lingering.detach()
    assert wait_until(lambda: catalog.delete_run("orphaned") is not None, 30)
    assert not folder.exists()


def test_an_elastic_runs_members_are_kept_in_its_manifest_and_loaded_again(homes):
    """Who left and each change of size survive the console: a later console's Run has the members only, the
    task that left is in the phase that says so, and a resume after a change of size gives every member a
    TF_CONFIG of the members on the ports each task had."""
    from console.store.manifests import Manifest, write_manifest
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here", port=5000 + i) for i in range(3)],
                         cl.Training(elastic=2))
    configs = [cluster.tf_config(0, members={0, 2}), cluster.tf_config(1), cluster.tf_config(2, members={0, 2})]
    resizes = [{"at": 1.0, "tasks": ["worker-0", "worker-2"], "why": "removed by you"}]
    write_manifest(Manifest("el", cluster, [(n, "here") for n in cluster.task_names()], configs,
                            {"worker-1": "removed by you"}, resizes))
    run = Run.load("el")
    assert run.left == {"worker-1": "removed by you"} and run.resizes == resizes
    assert [t.name for t in run.members] == ["worker-0", "worker-2"]
    assert [t.phase for t in run.tasks] == ["starting", "left the run", "starting"]
    assert [t.address for t in run.tasks] == ["localhost:5000", "localhost:5001", "localhost:5002"]
    assert json.loads(configs[2])["task"] == {"type": "worker", "index": 1}  # worker-2 is worker 1 of 2
    assert run.placement.member_configs(run, configs) is configs  # the same members: the run's own TF_CONFIGs
    run.rejoin([run.tasks[1]], "here answers again")
    grown = run.placement.member_configs(run, configs)  # worker-1 back: every member's TF_CONFIG on the ports each task had
    assert [json.loads(c) for c in grown] == [json.loads(cluster.tf_config(i, [5000, 5001, 5002])) for i in range(3)]
    again = read_manifest("el")
    assert again.left == {} and [r["tasks"] for r in again.resizes] == [["worker-0", "worker-2"],
                                                                         ["worker-0", "worker-1", "worker-2"]]


def test_system_samples_come_only_from_the_runs_hosts_or_as_many_nodes_as_its_job_has():
    """A host's samples name where they come from; a hostile login host could name thousands of nodes (each a
    host of the Dashboard and a history file). A run of hosts keeps its own hosts' samples; a Slurm run the first
    ``slurm.nodes`` node names, then no new one."""
    from console.run.runner import Run

    hosts = cl.Cluster([cl.Host("a", address="10.0.0.1"), cl.Host("b", address="10.0.0.2")],
                       [cl.Task("a"), cl.Task("b")], cl.Training())
    run = Run(hosts, "sampled")
    assert [run.placement.keeps_samples_of(run, name) for name in ("a", "b", "c", "login")] == [True, True, False, False]
    slurm = cl.loads('[training]\nworkload = "digits"\n[slurm]\nlogin = "login.hpc.example"\nnodes = 3\n'
                     'tasks_per_node = 2\ntime = "1:00:00"\n')
    run = Run(slurm, "sampled-slurm")
    assert [run.placement.keeps_samples_of(run, f"node{i}") for i in range(10)] == [True] * 3 + [False] * 7
    assert run.placement.keeps_samples_of(run, "node1") and not run.placement.keeps_samples_of(run, "node9")
