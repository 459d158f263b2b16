"""``tfcc run`` of a Slurm cluster file on a real Slurm cluster (tests.helpers.slurmcluster): the run is one job
submitted from the login host; every task is followed live through it (the nodes share its files), the job's
state is said (pending with Slurm's reason, then running on the nodes Slurm chose), a task killed mid-epoch is
started again by the job and the run finishes, ``tfcc stop`` cancels the job, ``tfcc attach`` after a detach
delivers every record once."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from agent import protocol
from console import catalog
from console import cluster as cl
from console.run.runner import Run
from console.run.session import RunSession
from console.states import SessionKind
from tests.helpers.cli import tfcc
from tests.helpers.waiting import wait_for
from trainer.metrics import read_records

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SLURM_FILE = """
[training]
workload = "digits"
epochs = {epochs}
per_replica_batch = 16
max_restarts = 2
backup_seconds = 2

[slurm]
login = "{login}"
user = "root"
key = "{key}"
python = "{python}"
nodes = 2
cpus_per_task = 1
time = "10:00"
"""


@pytest.fixture
def slurm(slurm_cluster, ssh_env, monkeypatch):
    """The cluster, its login host's key known to this console; the queue emptied after each test."""
    slurm_cluster.hosts.known_hosts(ssh_env / "known_hosts")
    yield slurm_cluster
    slurm_cluster.cancel_all()
    slurm_cluster.wait_for_no_jobs()


def slurm_cluster_file(tmp_path: Path, slurm, epochs: int = 2) -> Path:
    path = tmp_path / "slurm.toml"
    path.write_text(SLURM_FILE.format(login=slurm.login.address, key=slurm.hosts.client_key, python=sys.executable,
                                      epochs=epochs))
    return path


def run_folder(slurm, run_id: str) -> Path:
    return slurm.login.tfcc_home / "runs" / run_id


class Events:
    """What a session told, kept (on the session's thread) for the test to look at."""

    def __init__(self, session: RunSession):
        self.all: list = []
        self.lock = threading.Lock()
        session.subscribe(self.on_event)

    def on_event(self, event) -> None:
        with self.lock:
            self.all.append(event)

    def of(self, kind: str) -> list:
        with self.lock:
            return [e for e in self.all if e.kind == kind]

    def steps(self, task: str) -> list[dict]:
        return [r for e in self.of(SessionKind.RECORDS) if e.task.name == task for r in e.records
                if r.get("type") == "step"]




def trainer_pid(folder: Path) -> int | None:
    want = f"{protocol.RUN_DIR_VARIABLE}={folder}".encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and want in (entry / "environ").read_bytes().split(b"\0") and \
                    b"trainer" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    return None


def test_a_slurm_run_trains_on_two_nodes_followed_live(slurm, tmp_path):
    run = Run(cl.load(slurm_cluster_file(tmp_path, slurm)), "slurm-a")
    run.start()
    session = RunSession(run)
    events = Events(session)
    session.follow()
    try:
        assert session.wait(400), f"the run did not end: {[t.phase for t in run.tasks]}"
    finally:
        session.detach()
    assert [t.phase for t in run.tasks] == [protocol.FINISHED, protocol.FINISHED]
    for task in ("worker-0", "worker-1"):  # live records from both nodes, each step once
        steps = events.steps(task)
        assert steps and len({(s["epoch"], s["step"]) for s in steps}) == len(steps)
    # the system lane: each node's load and its task's processes, sampled on the node, streamed by the login host
    samples = {e.host: e.message for e in events.of(SessionKind.SYSTEM)}
    assert set(samples) == set(slurm.nodes), set(samples)
    assert {task for s in samples.values() for task in s["tasks"]} == {"worker-0", "worker-1"}
    assert all(s["cpus"] and s["memory_total_bytes"] for s in samples.values())
    jobs = [e.message for e in events.of(SessionKind.JOB)]
    assert any(j["state"] == "RUNNING" and j["nodes"] == slurm.node_list for j in jobs), jobs
    nodes = {json.loads((run_folder(slurm, "slurm-a") / t / "state.json").read_text())["slurm_node"]
             for t in ("worker-0", "worker-1")}
    assert nodes == set(slurm.nodes)
    # each task's address is the node Slurm chose (its launched record's TF_CONFIG): the diagram draws them there
    port = 8888 + int(run.placement.job["job_id"]) % 500 * 64  # each job its own ports (agent/slurm.py)
    assert sorted(t.address for t in run.tasks) == [f"{node}:{port}" for node in slurm.nodes]


def test_a_task_killed_mid_epoch_is_started_again_by_the_job_and_the_run_finishes(slurm, tmp_path):
    run = Run(cl.load(slurm_cluster_file(tmp_path, slurm, epochs=4)), "slurm-b")  # killed in its first
    run.start()
    session = RunSession(run)
    events = Events(session)
    session.follow()
    folder = run_folder(slurm, "slurm-b") / "worker-1"
    try:
        wait_for(lambda: len(events.steps("worker-1")) > 20 and trainer_pid(folder), 300,
                 lambda: f"worker-1 made no steps: {[t.phase for t in run.tasks]}")
        # Killed once both tasks hold a backup (an order of events: a task without one refuses the next attempt)
        wait_for(lambda: all("backed_up" in [r.get("event") for r in
                                             read_records(folder.parent / task / "metrics.jsonl")]
                             for task in ("worker-0", "worker-1")), 120, lambda: "the tasks did not both back up")
        os.kill(trainer_pid(folder), signal.SIGKILL)
        assert session.wait(400), f"the run did not end: {[t.phase for t in run.tasks]}"
    finally:
        session.detach()
    said = [e.text for e in events.of(SessionKind.RESTARTED)]
    if not said:
        pytest.fail("no restart: " + "\n".join(e.text for e in events.all if e.kind in SessionKind.SUPERVISION))
    assert [t.phase for t in run.tasks] == [protocol.FINISHED, protocol.FINISHED]
    records = read_records(folder / "metrics.jsonl")
    assert any(r.get("event") == "resumed" for r in records) and records[-1]["event"] == "finished"


def test_a_pending_job_says_its_reason_and_tfcc_stop_cancels_it_leaving_nothing(slurm, tmp_path, capsys):
    blocker = slurm.command("sbatch", "--parsable", "--exclusive", "-N2", "--time=10", "--output=/dev/null", "--wrap", "sleep 600",
                            host=slurm.login).stdout.strip()
    wait_for(lambda: any(j["id"] == blocker and j["state"] == "RUNNING" for j in slurm.jobs()), 60,
             lambda: str(slurm.jobs()))
    run = Run(cl.load(slurm_cluster_file(tmp_path, slurm)), "slurm-c")
    run.start()
    session = RunSession(run)
    events = Events(session)
    session.follow()
    try:
        wait_for(lambda: any(e.message.get("reason") in ("Resources", "Priority") for e in events.of(SessionKind.JOB)),
                 60, lambda: str([e.text for e in events.of(SessionKind.JOB)]))
        pending = next(e for e in events.of(SessionKind.JOB) if e.message.get("reason"))
        assert pending.message["state"] == "PENDING" and f"Slurm job {run.placement.job['job_id']}: pending" in pending.text
        wait_for(lambda: all(t.phase == protocol.PENDING for t in run.tasks), 30,
                 lambda: str([t.phase for t in run.tasks]))
        slurm.command("scancel", blocker, host=slurm.login)
        wait_for(lambda: all(t.phase in (protocol.WAITING, protocol.TRAINING) for t in run.tasks), 300,
                 lambda: str([t.phase for t in run.tasks]))
        # the Runs panel's "still going on this cluster": found by its login host (not by stand-in nodes)
        going = catalog.running_runs(cl.load(slurm_cluster_file(tmp_path, slurm)))
        assert [r.run_id for r in going] == ["slurm-c"]
        elsewhere = cl.load(slurm_cluster_file(tmp_path, slurm))
        elsewhere.slurm.login = "another-login"
        assert catalog.running_runs(elsewhere) == []
        for r in going:
            r.detach()
        code, out, err = tfcc(["stop", "slurm-c"], capsys)
        assert code == 0, err
        assert session.wait(120)
    finally:
        session.detach()
    assert all(t.phase == protocol.STOPPED for t in run.tasks), [t.phase for t in run.tasks]
    wait_for(lambda: not any(trainer_pid(run_folder(slurm, "slurm-c") / t) for t in ("worker-0", "worker-1")), 60,
             lambda: "a task still runs after tfcc stop")
    wait_for(lambda: not [j for j in slurm.jobs() if j["name"] == "tfcc-slurm-c"], 60,
             lambda: f"the job is still queued: {slurm.jobs()}")
    code, out, err = tfcc(["logs", "slurm-c"], capsys)  # the tasks' logs, then the job's own output
    assert code == 0 and f"==> Slurm job {run.placement.job['job_id']}: " in out and "tfcc: attempt 1" in out, (out, err)


def test_a_pending_job_cancelled_outside_tfcc_ends_its_tasks(slurm, tmp_path):
    """scancel by hand (or any end before its script ran): the tasks are lost, not pending for ever."""
    blocker = slurm.command("sbatch", "--parsable", "--exclusive", "-N2", "--time=10", "--output=/dev/null", "--wrap",
                            "sleep 600", host=slurm.login).stdout.strip()
    wait_for(lambda: any(j["id"] == blocker and j["state"] == "RUNNING" for j in slurm.jobs()), 60,
             lambda: str(slurm.jobs()))
    cluster = cl.load(slurm_cluster_file(tmp_path, slurm))
    cluster.training.max_restarts = 0
    run = Run(cluster, "slurm-e")
    run.start()
    session = RunSession(run)
    session.follow()
    try:
        wait_for(lambda: all(t.phase == protocol.PENDING for t in run.tasks), 60, lambda: str([t.phase for t in run.tasks]))
        slurm.command("scancel", run.placement.job["job_id"], host=slurm.login)
        assert session.wait(120), [t.phase for t in run.tasks]
    finally:
        session.detach()
    assert all(t.phase == protocol.LOST for t in run.tasks), [t.phase for t in run.tasks]


def test_attach_after_a_detach_delivers_every_record_once(slurm, tmp_path, capsys):
    run = Run(cl.load(slurm_cluster_file(tmp_path, slurm, epochs=3)), "slurm-d")
    run.start()
    first = RunSession(run)
    seen = Events(first)
    first.follow()
    wait_for(lambda: len(seen.steps("worker-0")) > 5, 300, lambda: str([t.phase for t in run.tasks]))
    first.detach()
    run.detach()
    code, out, err = tfcc(["attach", "slurm-d", "--json"], capsys)
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for task in ("worker-0", "worker-1"):
        got = [(r["epoch"], r["step"]) for r in lines if r.get("task") == task and r.get("type") == "step"]
        written = [(r["epoch"], r["step"]) for r in read_records(run_folder(slurm, "slurm-d") / task / "metrics.jsonl")
                   if r["type"] == "step"]
        assert got == written  # every record once, in order, the ones before the detach too


def test_a_users_two_file_fit_script_runs_unchanged_on_slurm(slurm, tmp_path, capsys):
    """The main case: a script of the user's own (tests/data/scripts/mwms_fit: main.py imports mnist_setup.py and
    reads config.json), shipped with its folder to the login host; each task runs in its own copy on its node,
    TF_CONFIG from Slurm, its metrics captured from the outside."""
    import shutil

    folder = tmp_path / "mwms_fit"
    shutil.copytree(Path(__file__).resolve().parents[2] / "data" / "scripts" / "mwms_fit", folder,
                    ignore=shutil.ignore_patterns("logs", "saved_model", "__pycache__"))
    path = tmp_path / "script.toml"
    path.write_text(f'[training]\nscript = "{folder / "main.py"}"\nargs = ["--epochs", "2"]\n'
                    f'[slurm]\nlogin = "{slurm.login.address}"\nuser = "root"\nkey = "{slurm.hosts.client_key}"\n'
                    f'python = "{sys.executable}"\nnodes = 2\ncpus_per_task = 1\ntime = "10:00"\n')
    code, out, err = tfcc(["run", str(path), "--json", "--run-id", "slurm-script"], capsys)
    stream = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    ends = {r["task"]: r.get("phase") for r in stream if r.get("type") == "end"}
    assert code == 0 and set(ends.values()) == {"finished"}, (err[-3000:], ends)
    for task in ("worker-0", "worker-1"):
        steps = [r for r in stream if r.get("task") == task and r.get("type") == "step"]
        assert len(steps) == 2 * 10  # config.json: 10 steps an epoch
        started = next(r for r in stream if r.get("task") == task and r.get("event") == "started")
        assert (started["num_workers"], started["global_batch"], started["keras"]) == (2, 64, "tf-keras")
    # what the chief wrote stays in its own copy of the script's folder, in its run folder
    assert (run_folder(slurm, "slurm-script") / "worker-0" / "work" / "saved_model" / "digits").is_dir()


def test_a_package_module_runs_on_slurm_as_python_m_runs_it(slurm, tmp_path, capsys):
    """``module = "trainer.task"``: the workdir (the package's parent) ships to the login host, each task runs
    ``python -m trainer.task`` in its own copy on its node, its relative import working and its printed numbers
    captured. (A package that needs no TensorFlow: what is shown is how it is run, not training.)"""
    package = tmp_path / "project" / "trainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("LOSS = 0.25\n")
    (package / "task.py").write_text(
        "import argparse, json, os\nfrom . import model\n\n"
        "parser = argparse.ArgumentParser()\nparser.add_argument('--job-dir', default='out')\n"
        "args = parser.parse_args()\n"
        "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        "print(f'epoch 0: loss={model.LOSS * (index + 1)}')\n")
    path = tmp_path / "module.toml"
    path.write_text(f'[training]\nmodule = "trainer.task"\nworkdir = "{tmp_path / "project"}"\n'
                    f'args = ["--job-dir", "gs://bucket/out"]\n'
                    f'[slurm]\nlogin = "{slurm.login.address}"\nuser = "root"\nkey = "{slurm.hosts.client_key}"\n'
                    f'python = "{sys.executable}"\nnodes = 2\ncpus_per_task = 1\ntime = "10:00"\n')
    code, out, err = tfcc(["run", str(path), "--json", "--run-id", "slurm-module"], capsys)
    stream = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    ends = {r["task"]: r.get("phase") for r in stream if r.get("type") == "end"}
    assert code == 0 and ends == {"worker-0": "finished", "worker-1": "finished"}, (err[-3000:], ends)
    for index, task in enumerate(("worker-0", "worker-1")):
        launched = next(r for r in stream if r.get("task") == task and r.get("event") == "launched")
        assert launched["script"] == "trainer.task"
        epochs = [r for r in stream if r.get("task") == task and r.get("type") == "epoch"]
        assert [(r["epoch"], r["loss"], r["captured"]) for r in epochs] == [(0, 0.25 * (index + 1), "print")]


def test_a_hang_on_a_slurm_node_is_named_at_the_users_line(slurm, tmp_path, capsys):
    """Issue 40 on Slurm: a user's script whose worker-1 waits for ever in its generator (tests/data/scripts/hangs/
    generator_event) on its node; the stall watchdog asks every task where it is through the shared folder and names
    worker-1 at data.py's line, worker-0 waiting for it in fit; the history keeps the stacks; the run is given up
    (max_restarts = 0) and the job ends."""
    import shutil

    folder = tmp_path / "generator_event"
    shutil.copytree(Path(__file__).resolve().parents[2] / "data" / "scripts" / "hangs" / "generator_event", folder,
                    ignore=shutil.ignore_patterns("__pycache__"))
    line = next(n for n, text in enumerate((folder / "data.py").read_text().splitlines(), 1)
                if "tfcc-test: hangs here" in text)
    fit = next(n for n, text in enumerate((folder / "main.py").read_text().splitlines(), 1) if "model.fit(" in text)
    path = tmp_path / "hang.toml"
    path.write_text(f'[training]\nscript = "{folder / "main.py"}"\nmax_restarts = 0\n'
                    f'[slurm]\nlogin = "{slurm.login.address}"\nuser = "root"\nkey = "{slurm.hosts.client_key}"\n'
                    f'python = "{sys.executable}"\nnodes = 2\ncpus_per_task = 1\ntime = "10:00"\n')
    run = Run(cl.load(path), "slurm-hang")
    run.start()
    session = RunSession(run)
    events = Events(session)
    session.follow()
    try:
        wait_for(lambda: events.of(SessionKind.WHERE), 400,
                 lambda: "no hang named: " + " | ".join(e.text for e in events.all if e.kind in SessionKind.SUPERVISION))
        assert session.wait(120), f"the run did not end: {[t.phase for t in run.tasks]}"
    finally:
        session.detach()
        run.stop(grace=0)
    where = events.of(SessionKind.WHERE)[0]
    assert where.message["where"]["stuck"] == ["worker-1"], where.text
    assert where.text == (f"where the tasks are: worker-1 is stuck in data.py:{line} (`downloaded.wait()`); "
                          f"worker-0 waits for it in fit's step (main.py:{fit} `model.fit`)"), where.text
    stalled = [e.text for e in events.of(SessionKind.STALLED)]
    assert len(stalled) == 1 and stalled[0].startswith("worker-1 on ") and f"data.py:{line}" in stalled[0], stalled
    kept = [json.loads(text) for text in (catalog.cache_dir("slurm-hang") / "console.jsonl").read_text().splitlines()]
    stacks = next(n["where"] for n in kept if n.get("event") == SessionKind.WHERE)["tasks"]
    assert [t["task"] for t in stacks] == ["worker-0", "worker-1"]
    assert f"  > data.py:{line} in generate    downloaded.wait()" in stacks[1]["stack"], stacks[1]["stack"]
