"""The run session: records decoded once off the agents' reply path, phases, the watchdog."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import pytest

from console import cluster as cl
from console.store.metrics import MetricsStore
from console.run.runner import Run
from console.run.session import RunSession
from console.run.supervisor import OFFER, REPLAY, RESTART, waiting_report
from console.states import SessionKind
from console import text
from console.text import event_line
from trainer.records import decode_line
from tests.helpers.scripted import follow_to_end
from tests.helpers.waiting import bound, wait_until
from trainer.metrics import read_records



@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    return tmp_path


@pytest.mark.slow
def test_watchdog_names_the_missing_task_and_its_address(homes, monkeypatch):
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    cluster = cl.Cluster([cl.Host(name="here", local=True)],
                         [cl.Task(host="here"), cl.Task(host="here")], cl.Training(epochs=1))
    run = Run(cluster, "wd")
    run.start()
    run.links["here"].connect().call("stop", run_id="wd", task="worker-1", grace=0)
    session = RunSession(run)
    session.follow()
    try:
        assert wait_until(lambda: run.tasks[0].launched_at is not None and run.tasks[1].phase != "starting"
                          and run.tasks[1].exit is not None, 60)
        assert waiting_report(run, after=3600) is None  # not yet: the threshold has not passed
        report = waiting_report(run, after=0)
        assert report.startswith("worker-0 waited ")
        assert f"worker-1 at {run.tasks[1].address} on host here ended (stopped)" in report
        assert "tfcc logs wd worker-1" in report
    finally:
        run.stop(grace=0.5)
        session.detach()


def test_watchdog_is_quiet_for_a_script_that_reports_nothing_and_says_nothing(homes):
    """A script with its capture off whose TensorFlow says nothing of its cluster: nothing tells a
    healthy one from one that waits, so the watchdog says nothing (it once cried wolf for every such
    script: "none has said that training began")."""
    script = homes / "waits.py"
    script.write_text("import signal\nsignal.pause()  # as a script waiting for its peers would\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script), capture=False))
    run = Run(cluster, "quiet")
    run.start()
    session = RunSession(run)
    session.follow()
    try:
        assert wait_until(lambda: all(t.launched_at is not None for t in run.tasks), 30)
        assert waiting_report(run, after=0) is None
    finally:
        run.stop(grace=0.5)
        session.detach()


WAITING_LOG = ("I0000 00:00:1795579851.385107   11529 coordination_service.cc:502] Waiting for 1/2 tasks to "
               "connect.\nI0000 00:00:1795579851.385118   11529 coordination_service.cc:505] Example stragglers:\n")
FORMED_LOG = ("I0000 00:00:1795579860.170105   11527 coordination_service.cc:1472] "
              "Barrier(WaitForAllTasks::1280300645967507314::0) has passed with status: OK\n")


def test_watchdog_reads_tensorflows_own_log_of_a_scripts_cluster(homes):
    """TensorFlow's coordination service names the tasks it still waits for, and says when every task
    joined: the watchdog names the straggler, then knows the cluster formed (capture off)."""
    script = homes / "waits.py"
    script.write_text("import os, signal, sys, time\n"
                      "if os.environ['TFCC_TASK'] == 'worker-0':  # the leader: the coordination service's log\n"
                      f"    sys.stderr.write({WAITING_LOG!r}); sys.stderr.flush()\n"
                      "    time.sleep(0.3)  # the names come on the next line, maybe in the next chunk read\n"
                      "    sys.stderr.write('/job:worker/replica:0/task:1\\n'); sys.stderr.flush()\n"
                      "signal.pause()\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script), capture=False))
    run = Run(cluster, "signs")
    run.start()
    session = RunSession(run)
    session.follow()
    try:
        assert wait_until(lambda: session.supervisor.stragglers == "worker-1", 30), session.supervisor.stragglers
        report = waiting_report(run, 0, session.supervisor.stragglers)
        assert report.endswith("TensorFlow still waits for worker-1 although every task started: a port may be "
                               "blocked between hosts (tfcc check tests every pair)")
        session._read_tensorflow_signs(run.tasks[0], FORMED_LOG)
        assert all(t.cluster_formed and t.phase == "training" for t in run.tasks)
        assert waiting_report(run, after=0, stragglers=session.supervisor.stragglers) is None
    finally:
        run.stop(grace=0.5)
        session.detach()


@pytest.mark.slow
def test_a_healthy_script_with_capture_off_is_known_formed_from_tensorflows_log(homes, monkeypatch, tmp_path):
    """A real two-worker MultiWorkerMirrored script that reports nothing: once TensorFlow's log says
    every task joined, no watchdog however short would warn."""
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)  # TensorFlow's log as a host has it
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    script = tmp_path / "mwms.py"
    script.write_text("import signal, tensorflow as tf\n"
                      "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
                      "signal.pause()  # formed: now it would train, saying nothing\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script), capture=False, keras="tf-keras"))
    run = Run(cluster, "formed")
    run.start()
    session = RunSession(run)
    session.follow()
    try:
        assert wait_until(lambda: all(t.cluster_formed for t in run.tasks), 120)
        assert waiting_report(run, after=0, stragglers=session.supervisor.stragglers) is None
        assert not any(t.records for t in run.tasks)
    finally:
        run.stop(grace=0.5)
        session.detach()



WRITER = """import json, os, pathlib, sys, time
path = pathlib.Path(os.environ["TFCC_RUN_DIR"]) / "metrics.jsonl"
count, forever = int(sys.argv[1]), sys.argv[2] == "forever"
with open(path, "a") as f:
    step = 0
    while step < count or forever:
        f.write(json.dumps({"type": "step", "step": step, "global_step": step + 1, "loss": 1 / (step + 1)}) + "\\n")
        f.flush()
        step += 1
        if forever:
            time.sleep(0.02)
"""


def writer_run(homes, name: str, *args: str) -> Run:
    """A run of one local task whose script appends step records to its metrics file."""
    script = homes / "writer.py"
    script.write_text(WRITER)
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")],
                         cl.Training(script=str(script), args=list(args), capture=False))
    return Run(cluster, name)


def test_each_metrics_line_is_decoded_once_in_the_console(homes, monkeypatch):
    run = writer_run(homes, "once", "300", "once")
    run.start()
    lines = set()
    folder = homes / "host-home" / "runs" / "once" / "worker-0"
    seen: dict[str, int] = {}
    real = json.loads

    def counting(s, *args, **kwargs):
        if isinstance(s, str) and s in lines:
            seen[s] = seen.get(s, 0) + 1
        return real(s, *args, **kwargs)

    assert wait_until(lambda: (folder / "exit.json").exists(), 30)
    lines.update((folder / "metrics.jsonl").read_text().splitlines())
    assert len(lines) == 300
    monkeypatch.setattr(json, "loads", counting)
    session = RunSession(run, MetricsStore())
    follow_to_end(session, 30)
    assert seen == {line: 1 for line in lines}  # each line once: not again by a consumer
    assert len(session.store.series("worker-0", "loss")[0]) == 300


class SlowStore(MetricsStore):
    """A store whose ingest waits until released (a busy window, a slow disk)."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def ingest(self, task, records):
        self.entered.set()
        self.release.wait(60)
        super().ingest(task, records)


def test_a_slow_store_does_not_hold_up_a_stop(homes):
    """Records are handled off the channel's reader thread: a stop's reply is not queued behind them."""
    run = writer_run(homes, "busy", "0", "forever")
    run.start()
    store = SlowStore()
    session = RunSession(run, store)
    session.follow()
    try:
        assert store.entered.wait(30)
        t0 = time.monotonic()
        (answer,) = run.stop(grace=1)
        assert time.monotonic() - t0 < bound(20), "the stop waited for the store"  # which holds it for 60 s
        assert answer["stopped"] and not store.release.is_set()
    finally:
        store.release.set()
        session.detach()
        run.stop(grace=0)


def test_decode_line_keeps_what_it_cannot_read():
    assert decode_line('{"type": "step", "loss": NaN}')["type"] == "step"
    for bad in ("[1, 2]", '{"loss": 1}', "not json", '{"type": 3}'):
        assert decode_line(bad) == {"type": "unreadable", "raw": bad}


def test_a_lost_connection_and_its_return_are_events_of_the_run(homes):
    cluster = cl.Cluster([cl.Host(name="gpu-b", address="10.0.0.2")], [cl.Task(host="gpu-b")])
    session = RunSession(Run(cluster, "r"), MetricsStore())
    events = []
    session.subscribe(events.append)
    task = session.run.tasks[0]
    session._handle(task, {"type": "reconnecting", "host": "gpu-b", "error": "connection refused"})
    session._handle(task, {"type": "reconnected", "host": "gpu-b", "after": 8.4})
    expected = ["lost the connection to host gpu-b (connection refused); reconnecting (the task goes on there)",
                "reconnected to host gpu-b after 8 s; following on from where it stopped"]
    assert [(e["task"], e["event"], event_line(e)) for e in session.store.events] == [
        ("worker-0", "reconnecting", expected[0]), ("worker-0", "reconnected", expected[1])]
    assert [(e.kind, e.text) for e in events] == [("connection", expected[0]), ("connection", expected[1])]


def test_a_launch_time_that_is_not_a_number_is_ignored_not_fatal(homes):
    """A user's script may write its own "launched" event; the watchdog's clock takes numbers only
    (a string there once killed the session's thread, and `tfcc run` waited for ever)."""
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")])
    session = RunSession(Run(cluster, "r"))
    task = session.run.tasks[0]
    session._handle(task, {"type": "metrics", "offset": 10,
                           "lines": ['{"type": "event", "event": "launched", "time": "2024-01-01T00:00:00"}']})
    assert task.launched_at is None and task.phase == "waiting for the cluster"
    assert waiting_report(session.run, after=0) is None


# --------------------------------------------------------------------------- supervision


def supervised(run: Run) -> tuple[RunSession, list]:
    session = RunSession(run, MetricsStore())
    events = []
    session.subscribe(lambda e: events.append((e.kind, e.text)) if e.kind in SessionKind.SUPERVISION else None)
    return session, events


def supervised_digits(name: str, epochs: int) -> tuple[Run, RunSession, list]:
    """A started 2-worker digits run on this machine, with its supervised session (not yet following)."""
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(epochs=epochs, per_replica_batch=16, backup_seconds=2.0))
    run = Run(cluster, name)
    run.start()
    return (run, *supervised(run))


def supervised_to_the_end(run: Run, timeout: float, resume: bool = False) -> tuple[RunSession, list]:
    """Start (or resume) ``run`` and follow it under supervision until its session ends."""
    run.start(resume=resume)
    session, events = supervised(run)
    session.follow()
    try:
        assert session.wait(timeout)
    finally:
        session.detach()
    return session, events


def script_run(homes, name: str, code: str, restarts: int | None = None, tasks: int = 2) -> Run:
    """A run of ``code`` as the user's script (no capture) on ``tasks`` local tasks."""
    script = homes / "task.py"
    script.write_text(code)
    training = cl.Training(script=str(script), capture=False)
    if restarts is not None:
        training.max_restarts = restarts
    return Run(cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here") for _ in range(tasks)],
                          training), name)


def test_a_bug_in_the_code_is_not_restarted(homes):
    """worker-0 raises; worker-1 is still busy (it would raise later): the run is given up, not restarted;
    worker-0 failed, and worker-1 says tfcc stopped it with its group (not that someone asked)."""
    run = script_run(homes, "bug", "import json, os, time\n"
                                   "if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 1:\n"
                                   "    time.sleep(120)\n"
                                   "raise ValueError('the data has 3 columns, the model wants 4')\n", 3)
    ended = {}
    session, events = supervised(run)
    session.subscribe(lambda e: ended.setdefault(e.task.name, e.text) if e.kind == SessionKind.TASK_ENDED else None)
    run.start()
    session.follow()
    try:
        assert session.wait(60)
    finally:
        session.detach()
    kinds = [k for k, _ in events]
    assert "restarting" not in kinds and kinds[-1] == "gave_up"
    # The user's own line is named (the file as it is here), then the error.
    assert any("error in the training code at " in t and ".py:" in t
               and "): ValueError: the data has 3 columns, the model wants 4" in t
               for k, t in events if k == "failure"), events
    assert "a restart would fail the same way" in events[-1][1]
    assert [t.phase for t in run.tasks] == ["failed", "stopped"]
    assert ended["worker-1"] == text.STOPPED_WITH_GROUP


def test_the_restart_budget_ends_with_one_clear_message(homes):
    """Tasks that are killed every time: retryable, restarted as often as max_restarts says, then given up."""
    run = script_run(homes, "doomed", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", 1)
    session, events = supervised_to_the_end(run, 120)
    kinds = [k for k, _ in events]
    assert kinds.count("restarted") == 1 and kinds[-1] == "gave_up"
    assert any("killed by SIGKILL" in t for k, t in events if k == "failure")
    assert events[-1][1].startswith("run doomed failed again after 1 restart(s), the most its max_restarts allows")
    assert session.attempt == 2 and all(t.phase != "finished" for t in run.tasks)
    # Both failures were this host's own doing: said once it is two in a row.
    assert [t for k, t in events if k == "host_failing"] == [
        "host here caused the last 2 failures in a row: check it (memory, disk, GPU, network; tfcc check), "
        "or move its tasks to another host"]
    assert [t.attempt for t in run.tasks] == [2, 2]  # the agent counts the launches


def signal_task(homes, run_id: str, task: str, sig: int) -> float:
    """Send ``sig`` to a local task's own process (not its supervisor); when, on the monotonic clock."""
    child = json.loads((homes / "host-home" / "runs" / run_id / task / "child.json").read_text())["pid"]
    os.kill(child, sig)
    return time.monotonic()


def common_backups(backups: set) -> set:
    """The global steps both workers have backed up."""
    return {g for t, g in backups if t == "worker-0"} & {g for t, g in backups if t == "worker-1"}


def test_a_non_finite_loss_is_an_alert_once_per_task(homes):
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")])
    session, events = supervised(Run(cluster, "nan"))
    task = session.run.tasks[0]
    lines = ['{"type": "step", "epoch": 0, "step": 3, "loss": 0.5}', '{"type": "step", "epoch": 0, "step": 4, '
             '"loss": null}', '{"type": "step", "epoch": 0, "step": 5, "loss": NaN}']
    session._handle(task, {"type": "metrics", "offset": 100, "lines": lines})
    assert events == [("alert", "worker-0: the loss is nan at epoch 1 step 5: training diverged (lower the "
                                "learning rate, or look at the data)")]


@pytest.mark.slow
def test_a_frozen_worker_is_named_and_the_group_restarted(homes, monkeypatch):
    """SIGSTOP one worker: within seconds the console names what stalled, restarts every task, and the run
    finishes (TensorFlow's own heartbeat fails the peer after ~6 s; nothing recovers in-process)."""
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    run, session, events = supervised_digits("frozen", epochs=2)  # frozen in its first
    backups = set()
    session.subscribe(lambda e: backups.update((e.task.name, r["global_step"]) for r in e.records
                                               if r.get("event") == "backed_up") if e.kind == "records" else None)
    session.follow()
    try:
        assert wait_until(lambda: common_backups(backups), 180)
        frozen = signal_task(homes, "frozen", "worker-1", signal.SIGSTOP)
        assert wait_until(lambda: any(k == "stalled" for k, _ in events), 60), events
        assert time.monotonic() - frozen < bound(45), events  # the peer's heartbeat (~6 s) or the stall watchdog
        assert session.wait(300)
    finally:
        session.detach()
        run.stop(grace=0)
    said = " | ".join(t for _, t in events)
    # The stall names the task, its host, its last step and the cause, whoever noticed first (the
    # peer's lost heartbeats, after ~6 s, or the stall watchdog).
    stalled = [t for k, t in events if k == "stalled"]
    assert len(stalled) == 1 and re.match(r"worker-1 on here (is stopped \(SIGSTOP.*; its last step was epoch \d+ "
                                          r"step \d+|made no step for .*its last was epoch \d+ step \d+)", stalled[0]), said
    assert "restarted" in [k for k, _ in events], said
    assert [t.phase for t in run.tasks] == ["finished", "finished"], said


def test_after_the_last_epoch_no_stall_is_seen(homes):
    """The model's save after the last epoch can take long on a busy machine: that is no stall
    (it once restarted a run that was only saving)."""
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")])
    session, events = supervised(Run(cluster, "saving"))
    session.supervisor.stall_floor = 0.0
    task = session.run.tasks[0]
    lines = ['{"type": "event", "event": "cluster_formed"}',
             '{"type": "event", "event": "started", "epochs": 2, "steps_per_epoch": 2}',
             '{"type": "step", "epoch": 1, "step": 1, "loss": 0.5, "step_time": 0.01}',
             '{"type": "epoch", "epoch": 1, "loss": 0.5}']
    session._handle(task, {"type": "metrics", "offset": 100, "lines": lines})
    assert task.phase == "training"
    session.supervisor._pace[task.name].last_at -= 1000  # a long save
    session.supervisor._check_stalls()
    assert events == [] and session.supervisor._failed == []
    session.supervisor._pace[task.name].finished = False  # the same silence within training is a stall
    session.supervisor._check_stalls()
    assert [k for k, _ in events] == ["stalled"]


def test_a_stop_someone_asked_for_is_no_failure_to_restart(homes):
    """``tfcc stop RUN`` from another console (or Stop in the window) while this session supervises:
    the tasks' ends are not failures, nothing is restarted (a Stop once restarted the run)."""
    run = script_run(homes, "asked", "import signal\nsignal.pause()\n", 3)
    run.start()
    session, events = supervised(run)
    session.follow()
    try:
        assert wait_until(lambda: all(t.launched_at is not None for t in run.tasks), 30)
        Run.load("asked").stop(grace=1)  # as another console's tfcc stop does
        assert session.wait(60)
    finally:
        session.detach()
    assert events == [] and session.attempt == 1
    assert [t.phase for t in run.tasks] == ["stopped"] * len(run.tasks), "a stop someone asked for is no failure"
    assert {e["text"] for e in session.store.events_snapshot() if e["event"] == "stopped"} == {
        "process ended: stopped on request (tfcc stop, or another console)"}


NAN_SCRIPT = """
import signal
from trainer.metrics import MetricsWriter
import os
w = MetricsWriter(os.path.join(os.environ["TFCC_RUN_DIR"], "metrics.jsonl"))
for i, loss in enumerate([0.5, 0.4, float("nan")]):
    w.write({"type": "step", "epoch": 0, "step": i, "global_step": i + 1, "loss": loss})
w.close()
signal.pause()  # a diverged run goes on making (useless) steps
"""


@pytest.mark.parametrize("stop_on_nan", [True, False])
def test_a_run_can_choose_to_stop_at_its_first_non_finite_loss(homes, stop_on_nan):
    run = script_run(homes, f"nan{int(stop_on_nan)}", NAN_SCRIPT, 3)
    run.cluster.training.stop_on_nan = stop_on_nan
    run.start()
    session, events = supervised(run)
    session.follow()
    try:
        # Stopped at the first non-finite loss, the other task may not have written its own yet.
        alerts = 1 if stop_on_nan else 2
        assert wait_until(lambda: sum(k == "alert" for k, _ in events) >= alerts, 60), events
        if stop_on_nan:
            assert session.wait(60)
        else:
            assert not session.wait(1)  # an alert only: the run goes on
    finally:
        session.detach()
        run.stop(grace=0)
    kinds = [k for k, _ in events]
    assert "restarting" not in kinds
    if stop_on_nan:
        said = [t for k, t in events if k == "gave_up"]
        assert len(said) == 1 and "stopped at its first non-finite loss, as its stop_on_nan asks" in said[0]
        assert all(t.phase != "running" for t in run.tasks)
    else:
        assert "gave_up" not in kinds


@pytest.mark.parametrize("found_failures", [OFFER, RESTART, REPLAY])
def test_a_failure_from_before_a_session_attached_is_offered_or_restarted(homes, found_failures):
    """The run failed while no console followed it: the window's session names the cause and offers the
    restart (a person decides); the CLI's attach restarts it as the run's max_restarts says; a replay of its
    history (the Runs panel's) says the same as the window, and never reaches the run's tasks but to read them (a
    person's resume may be starting them again meanwhile)."""
    run = script_run(homes, "away", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", 1)
    run.start()
    assert wait_until(lambda: all(s["phase"] == "failed" for s in run.status()), 30)
    run.detach()
    later = Run.load("away")
    if found_failures == REPLAY:
        def acted(*args, **kwargs):
            raise AssertionError("a replay stopped or started the run's tasks")
        later.stop_each = later.stop = later.start = later.relaunch = acted
    session = RunSession(later, MetricsStore(), found_failures=found_failures)
    events = []
    session.subscribe(lambda e: events.append((e.kind, e.text)) if e.kind in SessionKind.SUPERVISION else None)
    follow_to_end(session, 60)
    kinds = [k for k, _ in events]
    if found_failures == RESTART:
        assert kinds.count("restarted") == 1 and kinds[-1] == "gave_up", events
        assert [t.attempt for t in later.tasks] == [2, 2]
        return
    assert "restarting" not in kinds and kinds[-1] == "offered", events
    assert events[-1][1] == "run away failed while no console followed it; Resume starts every task again from " \
                            "their backups"
    assert any("killed by SIGKILL" in t for k, t in events if k == "failure")


def test_an_earlier_attempts_error_is_no_diagnosis_of_a_later_one(homes):
    """Attempt 1 raised a ValueError (permanent: given up); after tfcc resume, attempt 2 is killed. A new
    session must judge the kill (retryable: restarted), not the old traceback still in the task's stderr."""
    code = ("import os, signal, sys\n"
            "if os.environ['TFCC_ATTEMPT'] == '1':\n"
            "    raise ValueError('the data has 3 columns')\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    run = script_run(homes, "again", code, 1)
    _, events = supervised_to_the_end(run, 60)
    assert events[-1][0] == "gave_up" and "a restart would fail the same way" in events[-1][1]
    later = Run.load("again")
    session, events = supervised_to_the_end(later, 120, resume=True)
    failures = [t for k, t in events if k == "failure"]
    assert failures and all("killed by SIGKILL" in t and "ValueError" not in t for t in failures), events
    assert [k for k, _ in events].count("restarted") == 1


def test_with_max_restarts_0_a_failure_is_named_and_not_restarted(homes):
    run = script_run(homes, "never", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", 0)
    _, events = supervised_to_the_end(run, 60)
    assert [k for k, _ in events if k in ("restarting", "restarted")] == []
    assert any("killed by SIGKILL" in t for k, t in events if k == "failure")
    assert events[-1] == ("gave_up", "run never failed and its max_restarts is 0 (no restarts); fix the cause "
                                     "above, then tfcc resume never")


def test_a_stop_during_the_pause_before_a_restart_wins(homes, monkeypatch):
    """Every task had ended and a restart was due after its pause when the person pressed Stop: no restart."""
    monkeypatch.setattr("console.run.supervisor.backoff", lambda restart: 60.0)  # Stop comes within the pause
    run = script_run(homes, "pause", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", 3)
    run.start()
    session, events = supervised(run)
    session.follow()
    try:
        assert wait_until(lambda: any(k == "restarting" for k, _ in events), 30)
        assert session.restarting
        session.stop(grace=1)
        assert session.wait(30)
    finally:
        session.detach()
    assert "restarted" not in [k for k, _ in events] and session.attempt == 1
    # each task killed itself, or (still starting when the other one did) was stopped by tfcc with its group
    assert session.settled and "failed" in [t.phase for t in run.tasks], [t.phase for t in run.tasks]
    assert all(t.phase in ("failed", "lost", "stopped") for t in run.tasks), [t.phase for t in run.tasks]


def test_a_stall_is_said_once_and_a_save_or_the_first_step_is_waited_for_longer(homes):
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")], cl.Training(max_restarts=0))
    session, events = supervised(Run(cluster, "slow"))
    session.supervisor.stall_floor, session.supervisor.watchdog = 1.0, 100.0
    task = session.run.tasks[0]
    session._handle(task, {"type": "metrics", "offset": 1, "lines": [
        '{"type": "event", "event": "cluster_formed"}',
        '{"type": "event", "event": "started", "epochs": 2, "steps_per_epoch": 50}']})
    pace = session.supervisor._pace[task.name]
    pace.last_at -= 50   # building the model, agreeing on the backup: no step yet, well within the watchdog
    session.supervisor._check_stalls()
    assert events == []
    session._handle(task, {"type": "metrics", "offset": 2, "lines": [
        '{"type": "step", "epoch": 0, "step": 3, "loss": 0.5, "step_time": 0.01}',
        '{"type": "event", "event": "backing_up", "global_step": 4}']})
    pace.last_at -= 5    # a save takes 5 s: more than the floor, less than ten times it
    session.supervisor._check_stalls()
    assert events == []
    pace.last_at -= 10
    session.supervisor._check_stalls()
    session.supervisor._check_stalls()
    assert [k for k, _ in events] == ["stalled"] and session.supervisor._failed == [task]  # said once


def parameter_server_run_killed(homes, name: str, victim: str, after_epochs: int) -> tuple[Run, list]:
    """chief + 2 workers + ps training digits under supervision; ``victim`` SIGKILLed once the chief has
    finished ``after_epochs`` epochs (of ``after_epochs + 2``); followed to the end."""
    cluster = cl.Cluster([cl.Host(name="here", local=True)],
                         [cl.Task(host="here", role="chief"), cl.Task(host="here"), cl.Task(host="here"),
                          cl.Task(host="here", role="ps")], cl.Training(epochs=after_epochs + 2, per_replica_batch=32))
    run = Run(cluster, name)
    run.start()
    session, events = supervised(run)
    epochs = []
    session.subscribe(lambda e: epochs.extend(r for r in e.records if r.get("type") == "epoch")
                      if e.kind == "records" else None)
    session.follow()
    try:
        assert wait_until(lambda: len(epochs) >= after_epochs, 180)
        signal_task(homes, name, victim, signal.SIGKILL)
        assert wait_until(lambda: any(k == "restarted" for k, _ in events), 60), events
        assert session.wait(300)
    finally:
        session.detach()
        run.stop(grace=0)
    return run, events


@pytest.mark.slow
def test_parameter_server_training_goes_on_without_a_killed_worker_and_takes_it_back(homes, monkeypatch):
    """Kill a worker of chief + 2 workers + ps: the coordinator goes on with the other worker, tfcc
    starts only that worker again (no group restart), and the run finishes with every task well."""
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    run, events = parameter_server_run_killed(homes, "pskill", "worker-1", 1)
    said = " | ".join(f"{k}: {t}" for k, t in events)
    assert [k for k, _ in events if k in ("restarting", "restarted")] == ["restarted"], said  # no group restart
    assert "worker-1 started again, training went on without it" in said
    assert any("worker-1 on here: the task was killed by SIGKILL" in t for k, t in events if k == "failure"), said
    assert [t.phase for t in run.tasks] == ["finished"] * 4, said
    assert [t.attempt for t in run.tasks] == [1, 1, 2, 1]
    final = read_records(homes / "host-home" / "runs" / "pskill" / "chief-0" / "metrics.jsonl")[-1]
    assert final["event"] == "finished" and final["metrics"]["val_accuracy"] >= 0.90


@pytest.mark.slow
def test_a_killed_ps_restarts_the_group_from_the_epoch_backup(homes, monkeypatch):
    """A ps holds the variables: without it the coordinator cannot go on. Every task is started again and
    the chief resumes after its last epoch backup."""
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    run, events = parameter_server_run_killed(homes, "pskilled", "ps-0", 3)
    said = " | ".join(f"{k}: {t}" for k, t in events)
    assert [k for k, _ in events if k in ("restarting", "restarted", "resumed")] == \
        ["restarting", "restarted", "resumed"], said
    assert [t.phase for t in run.tasks] == ["finished"] * 4, said
    records = read_records(homes / "host-home" / "runs" / "pskilled" / "chief-0" / "metrics.jsonl")
    backed_up = [r["epoch"] for r in records if r.get("attempt") == 1 and r.get("event") == "backed_up"]
    resumed = [r for r in records if r.get("event") == "resumed"]
    second = [r for r in records if r.get("attempt") == 2 and r["type"] == "epoch"]
    # From the last epoch backup of attempt 1, said so, and the next epoch is the first trained again.
    assert len(resumed) == 1 and resumed[0]["attempt"] == 2 and resumed[0]["epoch"] == backed_up[-1], said
    assert second and second[0]["epoch"] == backed_up[-1] + 1
    assert records[-1]["event"] == "finished" and records[-1]["metrics"]["val_accuracy"] >= 0.90


# --------------------------------------------------------------------------- the system lane


class SystemStore(MetricsStore):
    """A store that keeps the system records it is given."""

    def __init__(self):
        super().__init__()
        self.system: list = []

    def ingest_system(self, host, record, tasks=None):
        self.system.append((host, record))
        parent = getattr(super(), "ingest_system", None)
        if parent is not None:
            parent(host, record, tasks)


def test_each_hosts_load_goes_to_the_store_and_the_listeners_while_the_run_is_followed(homes):
    run = writer_run(homes, "load", "0", "forever")
    run.start()
    store = SystemStore()
    session = RunSession(run, store)
    events = []
    session.subscribe(lambda e: events.append(e) if e.kind == "system" else None)
    session.follow()
    try:
        assert wait_until(lambda: len(store.system) >= 2 and len(events) >= 2, 30)
        host, record = store.system[0]
        assert host == "here" and record["type"] == "system" and "id" not in record
        assert record["memory_total_bytes"] > 0 and record["cpu_percent"] is not None
        assert set(record["tasks"]) == {"worker-0"} and record["tasks"]["worker-0"]["rss_bytes"] > 0
        assert (events[0].host, events[0].message, events[0].task) == ("here", record, None)
        run.stop(grace=1)
        assert session.wait(30)  # the run's end does not wait for a sample
        assert wait_until(lambda: not any(t.name == "tfcc-system-load-here" for t in threading.enumerate()), 5)
    finally:
        session.detach()
        run.stop(grace=0)


def test_sampling_goes_on_after_a_restart(homes):
    """A restart follows the tasks again, and samples their host again: the new attempt's processes."""
    run = script_run(homes, "again", "import os, signal\nif os.environ['TFCC_ATTEMPT'] == '1':\n"
                                     "    os.kill(os.getpid(), signal.SIGKILL)\nsignal.pause()\n", 1)
    run.start()
    store = SystemStore()
    session = RunSession(run, store)
    restarted = []
    session.subscribe(lambda e: restarted.append(time.time()) if e.kind == "restarted" else None)
    session.follow()
    try:
        assert wait_until(lambda: restarted, 60)

        def children() -> set:  # the second attempt's processes, once started
            return {json.loads((homes / "host-home" / "runs" / "again" / t / "child.json").read_text())["pid"]
                    for t in ("worker-0", "worker-1")}

        assert wait_until(lambda: any(r["time"] > restarted[0] and {t["pid"] for t in r["tasks"].values()}
                                      == children() for _, r in store.system), 30)
    finally:
        session.detach()
        run.stop(grace=0)


def test_records_after_a_tasks_end_are_kept_and_move_it_no_more(homes):
    """No agent sends a record after a task's end; if one came, its data is kept, its phase and badge stay."""
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")])
    session = RunSession(Run(cluster, "late"), MetricsStore())
    task = session.run.tasks[0]
    session._handle(task, {"type": "metrics", "offset": 10, "lines": [
        '{"type": "event", "event": "launched"}', '{"type": "event", "event": "cluster_formed"}']})
    session._handle(task, {"type": "end", "phase": "failed", "exit": {"returncode": 1}})
    assert task.phase == "failed" and session.store.states_snapshot()["worker-0"] == ("failed", "exit code 1")
    session._handle(task, {"type": "metrics", "offset": 20, "lines": [
        '{"type": "event", "event": "launched"}', '{"type": "event", "event": "cluster_formed"}',
        '{"type": "step", "global_step": 1, "loss": 0.5}']})
    assert task.phase == "failed" and session.store.states_snapshot()["worker-0"] == ("failed", "exit code 1")
    assert session.store.points("worker-0") == 1 and task.records == 5



FLOOD = """import json, os, pathlib, signal
folder = pathlib.Path(os.environ["TFCC_RUN_DIR"])
with open(folder / "metrics.jsonl", "w") as f:
    for start in range(0, 150_000, 10_000):
        f.write("".join(json.dumps({"type": "step", "global_step": g, "time": 1000.0 + g, "loss": 1.0,
                                    "pad": "p" * 40}) + "\\n" for g in range(start + 1, start + 10_001)))
(folder / "written").touch()
while not (folder / "release").exists():
    signal.sigtimedwait([], 0.05) if hasattr(signal, "sigtimedwait") else None
"""


def test_a_console_that_falls_behind_holds_the_follows_and_loses_nothing(homes, monkeypatch):
    """A task writes 150,000 records (15 MB) at once while the session's consumer is held up: the follows are
    held at the agent with what was delivered near the backlog's mark (not the file), and once the consumer
    goes on every record comes, once."""
    from console.run.runner import Backlog
    monkeypatch.setattr(Backlog, "HIGH", 256 << 10)
    monkeypatch.setattr(Backlog, "LOW", 64 << 10)
    run = script_run(homes, "flood", FLOOD, tasks=1)
    run.start()
    store = MetricsStore()
    session = RunSession(run, store)
    held_up, go_on = threading.Event(), threading.Event()

    def slow_consumer(event):  # on the session's thread: it handles nothing while this waits
        if event.kind == SessionKind.RECORDS and not go_on.is_set():
            held_up.set()
            go_on.wait(60)

    session.subscribe(slow_consumer)
    folder = homes / "host-home" / "runs" / "flood" / "worker-0"
    session.follow()
    try:
        assert held_up.wait(30)
        assert wait_until(lambda: (folder / "written").exists() and run.backlog.holds >= 1, 30)
        # The agent holds the follow: what it sent before it heard is all that waits (a wait that must time out).
        assert not wait_until(lambda: run.backlog.size > 4 << 20, 1.0)
        assert run.backlog.peak < 4 << 20 < (folder / "metrics.jsonl").stat().st_size
        go_on.set()
        assert wait_until(lambda: store.points("worker-0", "loss") == 150_000, 60)
        (folder / "release").touch()
        assert session.wait(30)
    finally:
        go_on.set()
        session.detach()
    assert list(store.series("worker-0", "loss")[0]) == [float(g) for g in range(1, 150_001)]
    assert run.backlog.size == 0


EVENT_FLOOD = """import json, os, time
with open(os.path.join(os.environ["TFCC_RUN_DIR"], "metrics.jsonl"), "w") as f:
    for name in ("launched", "cluster_formed"):
        f.write(json.dumps({"type": "event", "event": name, "time": time.time()}) + "\\n")
    f.write("".join(json.dumps({"type": "event", "event": "evaluated", "epoch": i, "metrics": {"loss": 1.0}})
                    + "\\n" for i in range(30_000)))
    f.write(json.dumps({"type": "step", "global_step": 1, "loss": 0.5}) + "\\n")
"""


def test_a_flood_of_events_keeps_what_a_snapshot_needs_within_its_bound(homes):
    """30,000 events of one task: the session keeps at most MAX_KEPT records of it for the run's snapshot, and
    among them the moments its supervision is taken up from (launched, cluster formed)."""
    from console.run.session import MAX_KEPT
    run = script_run(homes, "events", EVENT_FLOOD, tasks=1)
    run.start()
    session = RunSession(run, MetricsStore())
    follow_to_end(session, 60)
    kept = session._kept["worker-0"]
    assert len(kept) <= MAX_KEPT
    assert [r["event"] for r in kept[:2]] == ["launched", "cluster_formed"]
    assert kept[-2]["epoch"] == 29_999 and kept[-1]["type"] == "step"
    assert session.store.events.total >= 30_000 and len(session.store.events) <= session.store.MAX_EVENTS


def test_a_run_on_a_public_address_is_said_first_with_the_risk_and_the_fix(homes, monkeypatch):
    """A run whose task address resolves to a public one: its session says so before anything else (the CLI's
    lines and the window's events have it), once."""
    from console import exposure
    from tests.helpers.scripted import scripted_cluster
    monkeypatch.setattr(exposure, "resolve", lambda host: ["35.201.3.4"])
    run = Run(scripted_cluster(homes, epochs=1, steps=3, tasks=1), "public")
    run.start()
    assert run.exposed.startswith("worker-0 (localhost = 35.201.3.4) serves TensorFlow on a public address")
    session = RunSession(run, MetricsStore())
    said = []
    session.subscribe(lambda e: said.append(e))
    follow_to_end(session, 30)
    assert said[0].kind == SessionKind.EXPOSED and said[0].text == run.exposed
    assert [e.kind for e in said].count(SessionKind.EXPOSED) == 1
    assert [e["text"] for e in session.store.events_snapshot() if e["event"] == SessionKind.EXPOSED] == [run.exposed]


HOSTILE_SYSTEM_AGENT = """\
import json, sys
out = sys.stdout.buffer
request = json.loads(sys.stdin.readline())  # the console's "system" request
for k in range(12):
    tasks = {"worker-0": {"cpu_percent": 100.0, "rss_bytes": 5e8}}
    gpus = [{"index": i, "utilization_percent": 90, "memory_used_bytes": 2e9} for i in range(16)]
    if HOSTILE and k % 2:  # every other sample, 10,000 made-up tasks and GPUs
        tasks.update({f"made-up-{i}": {"cpu_percent": 1.0, "rss_bytes": 1e6} for i in range(10_000)})
        gpus += [{"index": i, "utilization_percent": 50, "memory_used_bytes": 1e9} for i in range(10_000)]
    out.write(json.dumps({"id": request["id"], "type": "system", "time": 1000.0 + k, "cpus": 2, "cpu_percent": 50.0,
                          "memory_used_bytes": 1e9, "tasks": tasks, "gpus": gpus}).encode() + b"\\n")
    out.flush()
out.write(json.dumps({"id": request["id"], "type": "end"}).encode() + b"\\n")
out.flush()
sys.stdin.readline()  # until the console closes the channel
"""


def _system_stream(tmp_path, monkeypatch, hostile: bool) -> tuple[MetricsStore, int]:
    """A stand-in agent's 12 system samples (``hostile``: every other one naming 10,000 made-up tasks and GPUs) over
    the real channel, through the run's sampling and the session's handling into a store: it, and the peak of what
    Python allocated meanwhile (tracemalloc: the decoding and numpy's tables too)."""
    import tracemalloc

    from console.remote.channel import AgentClient
    from console.remote.local import local_agent

    root = tmp_path / ("hostile" if hostile else "clean")
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "__main__.py").write_text(HOSTILE_SYSTEM_AGENT.replace("HOSTILE", str(hostile)))
    client = AgentClient(local_agent(agent_root=root), timeout=30)
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training())
    run = Run(cluster, "hostile-system")
    store = MetricsStore()
    session = RunSession(run, store)
    ended = threading.Event()
    monkeypatch.setattr(run.links["here"], "connect", lambda *a, **k: client)
    monkeypatch.setattr(run, "_followed", lambda host: not ended.is_set())
    handled = []

    def on_system(host, record):  # as the session's thread takes them off its queue
        message = {"type": "system", "host": host, "record": record}
        session._handle(None, message)
        run.backlog.handled(message)
        handled.append(record["time"])
        if len(handled) == 12:
            ended.set()

    tracemalloc.start()
    try:
        run.sample_system(on_system, interval=0.1)
        assert ended.wait(bound(60)), handled
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        client.close()
    return store, peak


def test_a_hostile_hosts_system_stream_over_the_channel_grows_no_table(tmp_path, monkeypatch):
    """A stand-in agent over the real channel streams system samples naming 10,000 made-up tasks and GPU indexes
    (every other one; four such samples made 22,001 tables and 372 MB before). The console holds what it holds for
    a host of 16 GPUs that sends only its own, and the decoding of one sample at a time beside it (peak within
    32 MB of that host's); no made-up task or GPU gets a row, and the run's own samples still plot."""
    from console.store.metrics import MAX_GPUS

    _, clean = _system_stream(tmp_path, monkeypatch, hostile=False)
    store, hostile = _system_stream(tmp_path, monkeypatch, hostile=True)
    assert hostile < clean + (32 << 20), f"{hostile / 2**20:.0f} MB, a host's own {clean / 2**20:.0f} MB"
    assert store.owners("sys:cpu_cores") == ["host:here", "worker-0"]
    assert store.owners("sys:gpu_percent") == [f"host:here/gpu{i}" for i in range(MAX_GPUS)]
    cores = store.series("worker-0", "sys:cpu_cores", x="time")[1]
    assert list(cores) == [1.0] * 12, "every sample's own task plots"
