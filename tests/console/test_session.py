"""The run session: records decoded once off the agents' reply path, phases, the watchdog."""

from __future__ import annotations

import json
import threading
import time

import pytest

from console import cluster as cl
from console.metrics_store import MetricsStore
from console.runner import Run
from console.session import RunSession, decode_line


def wait_until(predicate, timeout: float) -> bool:
    """Whether ``predicate()`` came true within ``timeout`` seconds (checked every 20 ms)."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        tick.wait(0.02)
    return True


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
        assert run.waiting_report(after=3600) is None  # not yet: the threshold has not passed
        report = run.waiting_report(after=0)
        assert report.startswith("worker-0 waited ")
        assert f"worker-1 at {run.tasks[1].address} on host here ended (failed)" in report
        assert "tfcc logs wd worker-1" in report
    finally:
        run.stop(grace=0.5)
        session.detach()


def test_watchdog_covers_a_users_script_that_never_reports(homes):
    """A user's script writes none of the trainer's events: the agent's own start record counts
    (the watchdog once stayed silent for such runs)."""
    script = homes / "waits.py"
    script.write_text("import signal\nsignal.pause()  # as a script waiting for its peers would\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script)))
    run = Run(cluster, "quiet")
    run.start()
    session = RunSession(run)
    session.follow()
    try:
        assert wait_until(lambda: all(t.launched_at is not None for t in run.tasks), 30)
        assert run.waiting_report(after=3600) is None
        report = run.waiting_report(after=0)
        assert report.startswith("worker-0, worker-1 started ")
        assert "none has said that training began" in report and "tfcc logs quiet worker-0" in report
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
                         cl.Training(script=str(script), args=list(args)))
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
    session.follow()
    try:
        assert session.wait(30)
    finally:
        session.detach()
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
        assert time.monotonic() - t0 < 5, "the stop waited for the store"
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
    assert [(e["task"], e["event"], e["text"]) for e in session.store.events] == [
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
    assert session.run.waiting_report(after=0) is None
