"""``tfcc run/attach/stop`` on local hosts: real agents, real detached TensorFlow workers."""

from __future__ import annotations

import io
import logging
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent import runs
from console import cluster as cl
from console.cli import Printer, main
from console.remote.link import CONNECT_TIMEOUT
from console.states import TaskState
from console.states import SessionEvent
from tests.helpers.cli import tfcc
from tests.helpers.waiting import bound, wait_for, wait_until
from trainer.metrics import read_records

ROOT = Path(__file__).resolve().parents[2]

QUICK = """
[training]
epochs = {epochs}
per_replica_batch = 16
backup_seconds = 2

[[hosts]]
name = "local"
local = true

[[tasks]]
host = "local"

[[tasks]]
host = "local"
"""


@pytest.fixture
def homes(local_homes, monkeypatch):
    monkeypatch.setenv("PATH", os.environ["PATH"])  # tests may narrow it; restored afterwards
    return local_homes


def cluster_file(tmp_path, epochs: int) -> str:
    path = tmp_path / f"quick{epochs}.toml"
    path.write_text(QUICK.format(epochs=epochs))
    return str(path)


def task_dirs(homes, run_id):
    return sorted((homes / "host-home" / "runs" / run_id).iterdir())


@pytest.mark.slow
def test_embedded_default_runs_and_its_json_stream_has_every_step(homes, capsys):
    """The README's first command: ``tfcc`` with no cluster file trains digits on two local workers; its
    ``--json`` stream has every step and the host's load.

    PATH holds only the system's folders: the workers must run with tfcc's own
    interpreter, not whatever ``python3`` comes first (on a fresh machine, one
    without TensorFlow).
    """
    os.environ["PATH"] = os.defpath  # restored by the homes fixture's monkeypatch below
    assert main(["run", "--json", "--run-id", "r1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    stream = [json.loads(line) for line in lines]  # every line parses
    for folder in task_dirs(homes, "r1"):
        in_file = read_records(folder / "metrics.jsonl")
        streamed = [{k: v for k, v in r.items() if k not in ("task", "host")}
                    for r in stream if r.get("task") == folder.name and r.get("type") in ("step", "epoch", "event")]
        assert streamed == in_file
        assert sum(r["type"] == "step" for r in in_file) == 5 * (1438 // 64)  # 5 epochs, global batch 64
    assert [r["type"] for r in stream if r["type"] == "end"] == ["end", "end"]
    finished = [r for r in stream if r.get("event") == "finished" and r["task"] == "worker-0"][0]
    assert finished["metrics"]["val_accuracy"] >= 0.95
    assert_system_records(stream)


def assert_system_records(stream: list[dict]) -> None:
    """``tfcc run --json`` streams the host's load about once a second while its tasks run
    (docs/metrics.md, "system"): CPU and memory of the host, CPU and memory of each task."""
    system = [r for r in stream if r["type"] == "system"]
    assert system and {r["host"] for r in system} == {"local"}
    for r in system:
        assert r["cpus"] == os.cpu_count() and 0 <= r["cpu_percent"] <= 100
        assert 0 < r["memory_used_bytes"] < r["memory_total_bytes"]
        assert 0 < r["memory_available_bytes"] < r["memory_total_bytes"]
    most = {}  # each task's largest memory (its last sample may come as its trainer has ended)
    for r in system:
        for name, task in r["tasks"].items():
            if task["cpu_percent"] is not None and task["rss_bytes"]:
                most[name] = max(most.get(name, 0), task["rss_bytes"])
    assert set(most) == {"worker-0", "worker-1"}
    # A TensorFlow worker holds far more than 100 MiB once it has imported TensorFlow.
    assert max(most.values()) > 100 << 20


def _stop_everything(homes, run_id):
    for folder in task_dirs(homes, run_id):
        runs.stop(run_id, folder.name, grace=0.5)


def console_until_steps(homes, epochs: int, run_id: str, steps: int = 1) -> subprocess.Popen:
    """``tfcc run --json`` in its own process, read until ``steps`` step records have come."""
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", "run", cluster_file(homes, epochs), "--json",
                             "--run-id", run_id], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    seen = 0
    for line in proc.stdout:
        seen += json.loads(line).get("type") == "step"
        if seen >= steps:
            return proc
    proc.kill()
    pytest.fail(f"tfcc run ended after {seen} step records")


@pytest.mark.slow
def test_attach_after_the_console_dies_replays_every_line_once(homes, capsys):
    proc = console_until_steps(homes, 2, "r2", steps=10)  # kill the console once training is under way
    try:
        proc.kill()
        proc.wait()
        status = [runs.status("r2", d.name)["phase"] for d in task_dirs(homes, "r2")]
        assert status == ["running", "running"]  # the run outlived its console
        assert main(["attach", "r2", "--json"]) == 0
        stream = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        for folder in task_dirs(homes, "r2"):
            in_file = read_records(folder / "metrics.jsonl")
            replayed = [{k: v for k, v in r.items() if k not in ("task", "host")}
                        for r in stream if r.get("task") == folder.name and r.get("type") in ("step", "epoch", "event")]
            assert replayed == in_file  # from the first record, each exactly once
            assert in_file[-1]["event"] == "finished"
    finally:
        proc.kill()
        _stop_everything(homes, "r2")


@pytest.mark.slow
def test_only_tensorflows_ports_listen_during_a_run_and_stop_ends_every_process(homes, capsys):
    proc = console_until_steps(homes, 20, "r3")
    try:
        tfcc_pids = {proc.pid}
        task_ports = set()
        for folder in task_dirs(homes, "r3"):
            state = json.loads((folder / "state.json").read_text())
            tfcc_pids |= set(runs.group_members(state["pgid"]))  # supervisor and trainer
            task_ports.add(int(json.loads((folder / "tf_config.json").read_text())["cluster"]["worker"][
                int(folder.name.rsplit("-", 1)[1])].rsplit(":", 1)[1]))
        children = open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()
        tfcc_pids |= {int(c) for c in children}  # the local agent
        assert len(tfcc_pids) >= 6
        assert _listening_ports_of(tfcc_pids) == task_ports  # the agent and the console listen on none

        proc.kill()
        proc.wait()
        pids = []
        for folder in task_dirs(homes, "r3"):
            pids.append(json.loads((folder / "state.json").read_text())["pid"])
            pids.append(json.loads((folder / "child.json").read_text())["pid"])
        assert all(runs.proc_start_time(p) is not None for p in pids)
        t0 = time.monotonic()
        assert main(["stop", "r3", "--grace", "2"]) == 0
        assert time.monotonic() - t0 < 2 * (2 + bound(10))  # each task within its grace period and a little
        assert [p for p in pids if runs.proc_start_time(p) is not None] == []
        assert "worker-0 on local: stopped" in capsys.readouterr().out
    finally:
        proc.kill()
        _stop_everything(homes, "r3")


@pytest.mark.slow
def test_unknown_run_and_bad_cluster_file_say_what_to_do(homes, capsys, tmp_path):
    assert main(["attach", "nope"]) == 2
    assert "no run 'nope' is known to this console; tfcc runs lists them" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text(QUICK.format(epochs=1).replace("[[tasks]]\nhost = \"local\"\n\n[[tasks]]", "[[tasks]]\nhost = \"gone\"\n\n[[tasks]]"))
    assert main(["run", str(bad)]) == 2
    assert "tasks[0].host 'gone' is not a host of this cluster (hosts: local)" in capsys.readouterr().err


def _listening_ports_of(pids: set[int]) -> set[int]:
    inodes = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":
                    inodes[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
    ports = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                ports.add(inodes[target[8:-1]])
    return ports


@pytest.mark.slow
def test_check_json_on_the_default_cluster(homes, capsys):
    assert main(["check", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ready"] and report["problems"] == []
    (host,) = report["hosts"]
    assert host["ok"] and host["probe"]["tensorflow"].startswith("2.21.") and host["probe"]["gpus"] == []
    assert [t["name"] for t in report["tasks"]] == ["worker-0", "worker-1"]
    assert all(t["address"].startswith("localhost:") for t in report["tasks"])


def test_plain_tfcc_opens_the_window(monkeypatch):
    """The README's first command: ``tfcc`` with no arguments opens the window (on the last profile)."""
    import console.gui.app

    opened = []
    monkeypatch.setattr(console.gui.app, "main", lambda path=None: opened.append(path) or 0)
    assert main([]) == 0 and opened == [None]
    assert main(["gui"]) == 0 and opened == [None, None]


def test_gui_with_a_bad_cluster_file_says_why_before_any_window(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[hosts]]\nname = 'a'\n\n[[tasks]]\nhost = 'a'\n")
    assert main(["gui", str(bad)]) == 2
    assert "has no address" in capsys.readouterr().err


def test_a_diverged_loss_prints_nan_and_the_console_goes_on():
    """A diverged loss is null in the metrics file; the printer once died on it (TypeError) and
    the console exited while the run went on detached."""
    out = io.StringIO()
    printer = Printer(as_json=False, out=out)
    task = TaskState("worker-0", "local", phase="training")
    steps = [{"type": "step", "epoch": 0, "step": 4, "global_step": 5, "loss": None, "step_time": None},
             {"type": "epoch", "epoch": 0, "loss": None, "val_loss": float("nan"), "val_accuracy": 0.5},
             {"type": "unreadable", "raw": "[1, 2]"}]
    printer.on_event(SessionEvent("records", task, records=steps))
    printer.status_line(SimpleNamespace(tasks=[task]))
    assert out.getvalue().splitlines() == [
        "worker-0: epoch 1 done  loss nan  val_loss nan  val_accuracy 0.5000",
        "worker-0: a line of its metrics file is not a record, skipped: '[1, 2]'",
        "  worker-0 e1 5/? loss nan ? ms"]


@pytest.mark.slow
def test_stop_on_the_embedded_default_ends_every_task_within_seconds_each_backed_up_after_the_same_step(homes, capsys):
    """Stop: each task finishes its step, every task stops after the same one, backs up there and ends, well within
    the grace (bench/stop_time.py has the figure: goal 2 s); nothing trained is lost, and the run is stopped."""
    from console import cluster as cl
    from console.run.runner import Run

    cluster = cl.default()
    cluster.training.epochs = 100  # still training when the stop comes
    run = Run(cluster, "halt")
    run.start()
    folders = task_dirs(homes, "halt")
    try:
        def training() -> bool:
            return all((f / "metrics.jsonl").exists() and any(r["type"] == "step" and r["global_step"] >= 5
                                                              for r in read_records(f / "metrics.jsonl"))
                       for f in folders)
        wait_for(training, 180, lambda: "no training")
        asked = time.time()
        assert main(["stop", "halt"]) == 0
    finally:
        run.detach()
    ends = [json.loads((f / "exit.json").read_text()) for f in folders]
    assert max(e["ended"] for e in ends) - asked < bound(5), ends
    assert [e["returncode"] for e in ends] == [143, 143], "each ended on its own, after its backup (no SIGKILL)"
    records = [read_records(f / "metrics.jsonl") for f in folders]
    last = [max(r["global_step"] for r in mine if r["type"] == "step") for mine in records]
    assert last[0] == last[1]
    assert all([r for r in mine if r.get("event") == "backed_up"][-1]["global_step"] == last[0] for mine in records)
    capsys.readouterr()
    assert main(["runs", "--json"]) == 0
    assert [r["state"] for r in json.loads(capsys.readouterr().out) if r["run_id"] == "halt"] == ["stopped"]


@pytest.mark.slow
def test_a_stopped_run_is_refused_as_new_and_resumed_from_its_backups(homes, capsys):
    """A run id names one run: reusing it is refused (it once reran into the same folders, exit 0);
    ``tfcc resume`` is the way back, and training goes on from the tasks' last backups."""
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", "run", cluster_file(homes, 2), "--json",
                             "--run-id", "again"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        per_epoch, backed_up = {}, set()
        for line in proc.stdout:  # until both workers have backed up their first epoch's end
            record = json.loads(line)
            if record.get("event") == "started":
                per_epoch[record["task"]] = record["steps_per_epoch"]
            elif record.get("event") == "backed_up" and record["global_step"] >= per_epoch[record["task"]]:
                backed_up.add(record["task"])
            if len(backed_up) == 2:
                break
        proc.kill()
        proc.wait()
        assert main(["stop", "again", "--grace", "2"]) == 0
        capsys.readouterr()

        manifest = homes / "console-home" / "runs" / "again.json"
        before = manifest.read_bytes()
        assert main(["run", cluster_file(homes, 2), "--run-id", "again"]) == 2
        assert capsys.readouterr().err.splitlines() == [
            "tfcc: error: run again exists already; resume it with tfcc resume again, or choose another --run-id"]
        assert manifest.read_bytes() == before

        assert main(["resume", "again", "--json"]) == 0
        stream = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        for folder in task_dirs(homes, "again"):
            in_file = read_records(folder / "metrics.jsonl")
            replayed = [{k: v for k, v in r.items() if k not in ("task", "host")}
                        for r in stream if r.get("task") == folder.name and r.get("type") in ("step", "epoch", "event")]
            assert replayed == in_file  # the first part's records, then the resumed part's, each once
            launches = [i for i, r in enumerate(in_file) if r.get("event") == "launched"]
            assert len(launches) == 2
            resumed_epochs = [r["epoch"] for r in in_file[launches[1]:] if r["type"] == "epoch"]
            assert resumed_epochs == [1]  # from its backup (its second epoch), not from the start
            assert in_file[-1]["event"] == "finished"

        assert main(["resume", "again"]) == 2
        assert "run again finished: every task ended well; start a new run to train again" in capsys.readouterr().err
    finally:
        proc.kill()
        _stop_everything(homes, "again")


def test_the_status_line_survives_records_with_odd_fields():
    out = io.StringIO()
    printer = Printer(as_json=False, out=out)
    task = TaskState("worker-0", "local", phase="training")
    printer.on_event(SessionEvent("records", task, records=[
        {"type": "event", "event": "started"},
        {"type": "step", "epoch": "0", "step": None, "loss": "low", "step_time": "fast"}]))
    printer.status_line(SimpleNamespace(tasks=[task]))
    assert out.getvalue().splitlines()[-1] == "  worker-0 e? ?/? loss nan ? ms"


def test_verbose_prints_what_tfcc_does_and_only_then(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path))
    monkeypatch.setattr("console.cli.cmd_runs", lambda ns: logging.getLogger("console.run.runner").info("working") or 0)
    assert main(["--verbose", "runs"]) == 0
    assert capsys.readouterr().err == "tfcc: console.run.runner: working\n"
    assert main(["runs"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_a_bug_at_step_10_is_named_not_restarted_and_the_exit_is_non_zero(homes, capsys):
    script = Path(__file__).parent / "data" / "raises_at_step_10.py"
    path = homes / "bug.toml"
    path.write_text(QUICK.format(epochs=1).replace("[training]\n", f"[training]\nscript = {str(script)!r}\n"))
    assert main(["run", str(path), "--run-id", "bug"]) == 1
    said = capsys.readouterr()
    err = said.out + said.err  # the supervisor's lines come with the run's (stdout), the end on stderr
    assert (f"error in the training code at {script}:17 (`raise ValueError(\"labels must be 0 or 1, got 7 in batch "
            "10\")`): ValueError: labels must be 0 or 1, got 7 in batch 10") in err, err
    assert "restarting" not in err
    # A script of the user's is started again once fixed: tfcc has no backup of it to go on from.
    assert ("run bug failed; a restart would fail the same way: fix the cause above, then start the run again with "
            "the fixed code") in err
    assert err.splitlines()[-1] == f"tfcc: once the code is fixed, start the run again: tfcc run {path}"
    # where a person looks next: the task's own logs, its traceback among them
    assert main(["logs", "bug", "worker-1"]) == 0
    out = capsys.readouterr().out
    assert "==> worker-1 on local: stdout.log <==" in out and "==> worker-1 on local: stderr.log <==" in out
    assert "ValueError: labels must be 0 or 1, got 7 in batch 10" in out and "worker-0" not in out
    assert main(["logs", "bug", "worker-7"]) == 2
    assert "run bug has no task 'worker-7'; its tasks are worker-0, worker-1" in capsys.readouterr().err


def test_a_script_fixed_after_its_failure_and_resumed_runs_the_fixed_code_and_says_so(homes, capsys, tmp_path):
    """A resume of a script's run ships the code as it is now (each task's copy brought up to date, what the script
    wrote there kept) and says which files changed: the old copy would fail the same way."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "helper.py").write_text("LOSS = 0.5\n")
    (folder / "train.py").write_text("import helper\nprint(f'epoch 0: loss={helper.LOSS}')\nprint(best_loss)\n")
    path = tmp_path / "project.toml"
    path.write_text(f"[training]\nscript = {str(folder / 'train.py')!r}\n\n[[hosts]]\nname = \"local\"\n"
                    "local = true\n\n[[tasks]]\nhost = \"local\"\n")
    assert main(["run", str(path), "--run-id", "fixme"]) == 1
    assert "NameError: name 'best_loss' is not defined" in "".join(capsys.readouterr())
    fixed = "import helper\nbest_loss = helper.LOSS\nprint(f'epoch 0: loss={best_loss}')\n"
    (folder / "train.py").write_text(fixed)
    assert main(["resume", "fixme"]) == 0
    said = "".join(capsys.readouterr())
    assert (f"run fixme: the tasks run the code of {folder} as it is now: 1 file changed since the last start "
            "(train.py)") in said, said
    work = homes / "host-home" / "runs" / "fixme" / "worker-0" / "work"
    assert (work / "train.py").read_text() == fixed and runs.status("fixme", "worker-0")["phase"] == "finished"


PARAMETER_SERVER = """
[training]
epochs = 3

[[hosts]]
name = "local"
local = true

[[tasks]]
host = "local"
role = "chief"

[[tasks]]
host = "local"

[[tasks]]
host = "local"

[[tasks]]
host = "local"
role = "ps"

[[tasks]]
host = "local"
role = "evaluator"
"""


@pytest.mark.slow
def test_a_parameter_server_cluster_trains_digits_and_every_task_ends_well(homes, capsys, monkeypatch):
    """chief + 2 workers + 1 ps + an evaluator on this machine: the chief coordinates and reports steps, the
    servers say they serve, and when the chief has finished tfcc ends the servers (they serve until told);
    the evaluator evaluates each epoch's checkpoint and ends by itself. Each task's records (the trainer's
    side: tests/trainer has no parameter-server run of its own) say what it did."""
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    path = homes / "ps.toml"
    path.write_text(PARAMETER_SERVER)
    assert main(["run", str(path), "--json", "--run-id", "pss"]) == 0
    stream = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ends = {r["task"]: r["phase"] for r in stream if r.get("type") == "end"}
    assert ends == {"chief-0": "finished", "worker-0": "finished", "worker-1": "finished", "ps-0": "finished",
                    "evaluator-0": "finished"}
    # The evaluator evaluated the chief's checkpoints up to the last epoch's, and ended by itself.
    evaluated = [r for r in stream if r.get("event") == "evaluated"]
    assert evaluated and {r["task"] for r in evaluated} == {"evaluator-0"} and evaluated[-1]["epoch"] == 2
    assert evaluated[-1]["metrics"]["val_accuracy"] >= 0.90
    serving = {r["task"] for r in stream if r.get("event") == "serving"}
    assert serving == {"worker-0", "worker-1", "ps-0"}
    alive = [r for r in stream if r.get("type") == "alive"]  # liveness: CPU and memory of every task
    assert {r["task"] for r in alive} == {"chief-0", "worker-0", "worker-1", "ps-0"}
    assert all(r["rss_bytes"] > 0 and r["cpu_percent"] >= 0 for r in alive)
    steps = [r for r in stream if r.get("type") == "step"]
    assert steps and {r["task"] for r in steps} == {"chief-0"}
    finished = next(r for r in stream if r.get("event") == "finished" and r["task"] == "chief-0")
    assert finished["metrics"]["val_accuracy"] >= 0.90

    folders = {folder.name: folder for folder in task_dirs(homes, "pss")}
    records = read_records(folders["chief-0"] / "metrics.jsonl")
    events = [r["event"] for r in records if r["type"] == "event"]
    assert events[:3] == ["launched", "cluster_formed", "started"] and events[-1] == "finished"
    started = next(r for r in records if r.get("event") == "started")
    assert started["strategy"] == "parameter_server" and started["asynchronous"] is True
    assert (started["num_workers"], started["per_worker_batch"], started["global_batch"]) == (2, 32, 32)
    assert started["learning_rate"] == started["base_learning_rate"]  # a step's batch does not grow with workers
    placed = started["variables"]  # every variable of the model, on the (one) ps
    assert placed and all(v["ps"] == 0 and v["bytes"] > 0 for v in placed)
    assert sum(v["bytes"] for v in placed) == 4 * sum(math.prod(v["shape"]) for v in placed)
    assert all(r["loss_avg"] > 0 and r["step_time"] > 0 for r in records if r["type"] == "step")
    assert {r["epoch"] for r in records if r["type"] == "epoch"} == {0, 1, 2}
    assert [r["epoch"] for r in records if r.get("event") == "backed_up"] == [0, 1, 2]
    for server in ("worker-0", "worker-1", "ps-0"):  # told to end by tfcc: a clean end, not a failure
        theirs = [r["event"] for r in read_records(folders[server] / "metrics.jsonl") if r["type"] == "event"]
        assert theirs == ["launched", "serving", "finished"], server
    # The evaluator read the chief's checkpoints and evaluated at least the last epoch's, each once, in order.
    evaluator = read_records(folders["evaluator-0"] / "metrics.jsonl")
    evaluated = [r for r in evaluator if r.get("event") == "evaluated"]
    assert evaluated[-1]["global_step"] == 3 * started["steps_per_epoch"]
    assert [e["epoch"] for e in evaluated] == sorted({e["epoch"] for e in evaluated})
    assert abs(evaluated[-1]["metrics"]["val_accuracy"] - records[-1]["metrics"]["val_accuracy"]) < 0.02
    theirs = [r["event"] for r in evaluator if r["type"] == "event"]
    assert theirs[:2] == ["launched", "evaluating"] and theirs[-1] == "finished"


def test_system_records_are_printed_as_json_lines_only():
    record = {"type": "system", "time": 1700000000.5, "cpus": 8, "cpu_percent": 12.5,
              "memory_total_bytes": 16 << 30, "memory_used_bytes": 4 << 30, "memory_available_bytes": 12 << 30,
              "swap_used_bytes": 0, "gpus": [], "tasks": {"worker-0": {"pid": 12, "cpu_percent": 99.0,
                                                                      "rss_bytes": 1 << 30, "gpus": None}}}
    event = SessionEvent("system", host="gpu-a", message=record)
    out = io.StringIO()
    Printer(as_json=True, out=out).on_event(event)
    line = out.getvalue()
    assert line.startswith('{"type": "system", "host": "gpu-a", ') and json.loads(line) == {**record, "host": "gpu-a"}
    quiet = io.StringIO()
    Printer(as_json=False, out=quiet).on_event(event)
    assert quiet.getvalue() == ""


# --------------------------------------------------------------------------- runs, delete


def test_runs_shows_state_cluster_start_duration_and_final_metrics(homes, capsys):
    from console.cluster import Cluster, Host, Task, Training
    from console.run.runner import Run
    from console.store.manifests import Manifest, write_manifest
    from tests.helpers.scripted import finished_run, scripted_cluster

    finished_run(homes, "done-1", epochs=2, steps=10)
    finished_run(homes, "done-2", epochs=1, steps=10, seed=3.0)
    going = Run(scripted_cluster(homes, forever=True, tasks=1), "going")
    going.start()
    far = Cluster([Host(name="far", address="10.255.255.1")], [Task(host="far", port=2222)], Training(epochs=1))
    write_manifest(Manifest("silent", far, [("worker-0", "far")], [far.tf_config(0)]))  # drops every packet
    try:
        t0 = time.monotonic()
        assert main(["runs", "--timeout", "4"]) == 0
        # a dead host is waited for at most --timeout, not its connect's own 10 s (console.remote.link)
        assert time.monotonic() - t0 < 4 + bound(4) < CONNECT_TIMEOUT
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split()[:4] == ["run", "state", "start", "duration"]
        assert "val_accuracy" in lines[0] and "cluster (host: tasks)" in lines[0]
        row = {line.split()[0]: line for line in lines[1:] if not line.startswith(" ")}
        assert row["done-1"].split()[1] == "finished"
        assert row["done-1"].split()[-7:] == ["0.0500", "0.6000", "0.1500", "0.7000", "here:", "worker-0,", "worker-1"]
        assert row["done-2"].split()[-7:-3] == ["0.3000", "0.5000", "0.4000", "0.6000"]
        assert row["going"].split()[1] == "running" and row["going"].endswith("here: worker-0")
        assert row["silent"].split()[1] == "unknown"
        after = {line.split()[0]: lines[i + 1] for i, line in enumerate(lines[:-1]) if not line.startswith(" ")}
        assert after["going"].split() == ["tasks", "now:", "worker-0", "running"]
        note = after["silent"].strip()  # the host's own error, or that it gave no answer in time
        assert note.startswith("note: far: cannot connect to 10.255.255.1") or note.endswith("no answer in 4 s")

        assert main(["runs", "--json", "--timeout", "4"]) == 0
        listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
        assert listed["done-1"]["state"] == "finished" and listed["done-1"]["hosts"] == {"here": ["worker-0", "worker-1"]}
        assert listed["done-1"]["metrics"]["val_accuracy"] == 0.7 and listed["done-1"]["duration"] >= 0
        assert listed["going"]["phases"] == {"worker-0": "running"}
    finally:
        going.stop(grace=0.5)
        going.detach()


def test_a_run_that_ended_while_no_console_followed_it_lists_its_real_end_finals_and_duration(homes, capsys):
    """A console followed the run's first epoch and went; the run trained on and finished. The next listing asks
    its hosts, reads what the tasks wrote since, and says its end, final metrics and duration: never the first
    epoch's numbers as if they were its last."""
    from console.store.cache import read_summary
    from tests.helpers.scripted import ended_unfollowed

    ended_unfollowed(homes, "away")
    assert read_summary("away")[0].get("state") in (None, "running"), "the console left it running"
    assert main(["runs", "--json", "--timeout", str(bound(30))]) == 0
    listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}["away"]
    assert listed["state"] == "finished"
    assert listed["metrics"] == {"loss": 1 / 30, "accuracy": 0.7, "val_loss": 1 / 30 + 0.1, "val_accuracy": 0.8}
    assert listed["end"] is not None and listed["duration"] == pytest.approx(listed["end"] - listed["start"])
    assert main(["runs", "--timeout", str(bound(30))]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("away "))
    assert row.split()[1] == "finished" and "0.0333" in row.split() and "0.8000" in row.split()


def test_delete_asks_first_and_removes_the_runs_folders_and_history(homes, capsys, monkeypatch):
    from console.store.cache import cache_dir
    from console.run.runner import Run
    from console.store.manifests import manifest_path
    from tests.helpers.scripted import finished_run, scripted_cluster

    finished_run(homes, "old", epochs=1, steps=5)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    assert main(["delete", "old"]) == 2  # no terminal to ask, no --yes: nothing happens
    assert "tfcc: error: deleting run old needs a yes; add --yes to delete it" in capsys.readouterr().err
    assert (homes / "host-home" / "runs" / "old").is_dir() and manifest_path("old").exists()

    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "no")
    assert main(["delete", "old"]) == 1
    assert (homes / "host-home" / "runs" / "old").is_dir()
    monkeypatch.setattr("builtins.input", lambda prompt: "yes")
    assert main(["delete", "old"]) == 0
    assert capsys.readouterr().out.splitlines() == ["here: deleted worker-0, worker-1",
                                                    "run old: manifest and history deleted from this console"]
    assert not (homes / "host-home" / "runs" / "old").exists()
    assert not manifest_path("old").exists() and not cache_dir("old").exists()
    assert main(["delete", "old", "--yes"]) == 2
    assert "no run 'old' is known to this console" in capsys.readouterr().err

    going = Run(scripted_cluster(homes, forever=True, tasks=1), "busy")
    going.start()
    try:
        assert main(["delete", "busy", "--yes"]) == 2
        assert ("tfcc: error: run busy still runs (worker-0); nothing was deleted; stop it first (tfcc stop busy), "
                "then delete it") in capsys.readouterr().err
        assert (homes / "host-home" / "runs" / "busy" / "worker-0").is_dir()
    finally:
        going.stop(grace=0.5)
        going.detach()


def test_what_a_task_writes_reaches_the_terminal_as_text_never_as_escape_sequences(homes, capsys):
    """A task (or a hostile host) that writes terminal escapes: ``tfcc logs`` and the run's lines show them,
    they do not run (no colour, no title, no bell); a progress bar's carriage returns end lines."""
    script = homes / "noisy.py"
    script.write_text("import sys\n"
                      "print('\\x1b]0;owned\\x07\\x1b[2Jcleared', flush=True)\n"
                      "print('50%\\r100%', flush=True)\n"
                      "sys.stderr.write('\\x1b[31mred\\x1b[0m\\n')\n")
    path = homes / "noisy.toml"
    path.write_text(f'[training]\nscript = {str(script)!r}\ncapture = false\n'
                    '[[hosts]]\nname = "here"\nlocal = true\n[[tasks]]\nhost = "here"\n')
    assert main(["run", str(path), "--run-id", "noisy"]) == 0
    capsys.readouterr()
    assert main(["logs", "noisy"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;owned\\x07\\x1b[2Jcleared" in out and "50%\n100%" in out and "\\x1b[31mred\\x1b[0m" in out


def test_runs_says_each_change_of_an_elastic_runs_size(homes, capsys):
    import dataclasses

    from console.store.manifests import read_manifest, write_manifest
    from tests.helpers.scripted import finished_run

    finished_run(homes, "grew", epochs=1, steps=5)
    saved = read_manifest("grew")
    resizes = [{"at": 1.0, "tasks": ["worker-0"], "why": "its host did not answer for 30 s after the failure"},
               {"at": 2.0, "tasks": ["worker-0", "worker-1"], "why": "here answers again"}]
    write_manifest(dataclasses.replace(saved, resizes=resizes))
    assert main(["runs", "--timeout", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("grew"))
    assert lines[at + 1].strip() == (
        "size: 2 tasks → 1 (worker-1 left: its host did not answer for 30 s after the failure) → 2 (worker-1 back: "
        "here answers again)")
    assert main(["runs", "--json", "--timeout", "5"]) == 0
    assert {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}["grew"]["resizes"] == resizes


def test_text_a_host_sent_reaches_the_terminal_shown_not_run(capsys, monkeypatch, tmp_path):
    """An error, a note or a line whose words a host chose (a hostile one: a title change, a screen clear, a
    carriage return that hides what came before) is printed with its control characters shown, by every command:
    the CLI's streams have one sanitiser."""
    from console import catalog
    from console.store.cache import HistoryError

    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console"))
    said = "host h0: \x1b]0;owned\x07\x1b[2Jall is well\rrm -rf ~"

    def overview(*args, **kwargs):
        raise HistoryError(said, "check that the host is up and reachable, then try again")

    monkeypatch.setattr(catalog, "overview", overview)
    assert main(["runs"]) == 2
    err = capsys.readouterr().err
    assert err == ("tfcc: error: host h0: \\x1b]0;owned\\x07\\x1b[2Jall is well\nrm -rf ~; check that the host is up "
                   "and reachable, then try again\n")
    assert sys.stdout is not None and not hasattr(sys.stdout, "_stream"), "the streams are back as they were"


# A user's script that hangs on one worker: its data never comes (no TensorFlow needed to hang).
HANGS = """\
import json, os, threading

ready = threading.Event()


def next_batch():
    ready.wait()  # the data that never comes


if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    next_batch()
else:
    threading.Event().wait(120)
"""


def test_tfcc_where_says_where_each_task_of_a_running_script_is_and_refuses_an_ended_run(homes, capsys):
    """A user's script, unchanged, under tfcc's capture: ``tfcc where`` prints each task's threads, down to the line
    of the user's own file where it waits; the run goes on. An ended run and an unknown one: one line each."""
    from console.run.runner import Run

    script = homes / "hangs.py"
    script.write_text(HANGS)
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script)))
    run = Run(cluster, "hung")
    run.start()
    try:
        assert wait_until(lambda: all(s["phase"] == "running" for s in run.status()), 30)
        code, out, err = tfcc(["where", "hung", "--wait", "10"], capsys)
        assert code == 0, err
        assert "==> worker-0 on here <==" in out and "==> worker-1 on here <==" in out, out
        one = out.split("==> worker-1 on here <==")[1]
        assert "hangs.py:7 in next_batch" in one and "hangs.py:11 in <module>" in one, one
        assert all(s["phase"] == "running" for s in run.status())  # asked, not disturbed
        code, out, _ = tfcc(["where", "hung", "--json"], capsys)
        said = json.loads(out.strip().splitlines()[-1])
        assert [(t["task"], t["state"]) for t in said["tasks"]] == [("worker-0", "answered"), ("worker-1", "answered")]
    finally:
        run.stop(grace=1)
        run.detach()
    assert wait_until(lambda: all(s["phase"] != "running" for s in Run.load("hung").status()), 30)
    code, _, err = tfcc(["where", "hung"], capsys)
    assert code != 0 and "tfcc: error: run hung has ended: its tasks are nowhere now; tfcc logs hung shows how each " \
                         "ended" in err, err
    code, _, err = tfcc(["where", "nosuch"], capsys)
    assert code != 0 and "no run 'nosuch' is known to this console" in err, err


def _step_times(folder: Path) -> list[tuple[float, float]]:
    """(when it was written, its step_time) of each timed step in a task's metrics file so far."""
    path = folder / "metrics.jsonl"
    return [(r["time"], r["step_time"]) for r in (read_records(path) if path.exists() else [])
            if r.get("type") == "step" and isinstance(r.get("step_time"), (int, float)) and "time" in r]


@pytest.mark.slow
def test_tfcc_where_on_a_healthy_run_says_each_place_and_the_steps_keep_their_pace(homes, capsys):
    """tfcc's trainer, two workers training: ``tfcc where`` asked again and again prints each worker in fit's step at
    the trainer's line, says no verdict (nothing differs), and the steps taken meanwhile keep their pace."""
    from console.run.runner import Run

    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(epochs=200))
    run = Run(cluster, "calm")
    run.start()
    try:
        folder = task_dirs(homes, "calm")[0]
        assert wait_until(lambda: len(_step_times(folder)) >= 40, 180), "no steps"
        before = _step_times(folder)
        asked_from = time.time()
        for _ in range(6):
            code, out, err = tfcc(["where", "calm"], capsys)
            assert code == 0, err
            head = out.split("\n==>")[0].strip().splitlines()
            assert len(head) == 1 and head[0].startswith("worker-0 and worker-1 are in fit's step (trainer/train.py:"), out
            assert "==> worker-0 on here <==" in out and "> trainer/train.py:" in out, out
        asked_to = time.time()
        assert wait_until(lambda: _step_times(folder)[-1][0] > asked_to, 30)
        during = [took for at, took in _step_times(folder) if asked_from <= at <= asked_to]
        earlier = sorted(took for _, took in before[10:])
        during.sort()
        assert len(during) >= 5, during
        # The median step while being asked, against the median before (a busy 2-core machine: a generous margin;
        # bench/stacks_readiness.py measures the cost).
        assert during[len(during) // 2] <= 2 * earlier[len(earlier) // 2] + 0.01, (during, earlier)
    finally:
        run.stop(grace=1)
        run.detach()


@pytest.mark.parametrize("file, said", [
    ('[slurm]\nlogin = "login.example"\n', "tfcc: error: tfcc makes environments on hosts of its own, not on a Slurm "
     "cluster's nodes; make the environment on the cluster's shared file system and set python in [slurm] to its "
     "interpreter"),
    ('[environment]\nrequirements = "reqs.txt"\n[[hosts]]\nname = "here"\nlocal = true\n[[tasks]]\nhost = "here"\n',
     "tfcc: error: reqs.txt line 1 is an option (-r), which tfcc does not read; list requirements only; put an index "
     "in [environment] index and wheel folders in find_links"),
])
def test_tfcc_provision_refuses_what_it_cannot_make_in_one_line(tmp_path, monkeypatch, capsys, file, said):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reqs.txt").write_text("-r other.txt\n")
    (tmp_path / "cluster.toml").write_text(file)
    code, out, err = tfcc(["provision", "cluster.toml"], capsys)
    assert code == 2 and out == "" and err.strip() == said
