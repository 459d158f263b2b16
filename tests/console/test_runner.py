"""The run core: the startup watchdog, reaching a host's agent."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from console import cluster as cl
from console.runner import HostLink, Run, RunError


def follow(run: Run) -> threading.Condition:
    """Follow ``run``; the condition is notified at every message."""
    changed = threading.Condition()

    def on_message(task, message):
        with changed:
            changed.notify_all()

    run.follow(on_message)
    return changed


@pytest.mark.slow
def test_watchdog_names_the_missing_task_and_its_address(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    cluster = cl.Cluster([cl.Host(name="here", local=True)],
                         [cl.Task(host="here"), cl.Task(host="here")], cl.Training(epochs=1))
    run = Run(cluster, "wd")
    run.start()
    run.links["here"].connect().call("stop", run_id="wd", task="worker-1", grace=0)
    changed = follow(run)
    try:
        with changed:
            assert changed.wait_for(lambda: run.tasks[0].launched_at is not None and run.tasks[1].phase != "starting"
                                    and run.tasks[1].exit is not None, 60)
        assert run.waiting_report(after=3600) is None  # not yet: the threshold has not passed
        report = run.waiting_report(after=0)
        assert report.startswith("worker-0 waited ")
        assert f"worker-1 at {run.tasks[1].address} on host here ended (failed)" in report
        assert "tfcc logs wd worker-1" in report
    finally:
        run.stop(grace=0.5)
        run.detach()


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    return tmp_path


def test_watchdog_covers_a_users_script_that_never_reports(homes):
    """A user's script writes none of the trainer's events: the agent's own start record counts
    (the watchdog once stayed silent for such runs)."""
    script = homes / "waits.py"
    script.write_text("import signal\nsignal.pause()  # as a script waiting for its peers would\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script)))
    run = Run(cluster, "quiet")
    run.start()
    changed = follow(run)
    try:
        with changed:
            assert changed.wait_for(lambda: all(t.launched_at is not None for t in run.tasks), 30)
        assert run.waiting_report(after=3600) is None
        report = run.waiting_report(after=0)
        assert report.startswith("worker-0, worker-1 started ")
        assert "none has said that training began" in report and "tfcc logs quiet worker-0" in report
    finally:
        run.stop(grace=0.5)
        run.detach()


def crashing_python(folder) -> str:
    """An "interpreter" that dies at start with a Python error on stderr, as a broken one would."""
    path = folder / "broken-python"
    path.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                    "echo \"ImportError: cannot import name 'runs' from 'agent'\" >&2\nexit 1\n")
    path.chmod(0o755)
    return str(path)


def test_an_agent_that_dies_at_start_says_its_last_words(homes):
    """The agent's stderr is kept in a file on its host; its last line is the error (once: "channel closed")."""
    python = crashing_python(homes)
    link = HostLink(cl.Host(name="here", local=True, python=python))
    with pytest.raises(RunError) as err:
        link.connect()
    assert str(err.value) == (f"host here: the agent did not start with {python!r} (it said: ImportError: cannot "
                              "import name 'runs' from 'agent'); set python in the host's entry to a working "
                              "Python 3.9+ interpreter")
    assert not list((homes / "host-home").glob("agent-*.err")), "the file is removed once read"


def test_an_agent_that_hangs_at_start_is_given_up_on_within_the_timeout(homes):
    """An interpreter that neither answers nor reads (stuck in an import): the connect gives up after
    its timeout and closing it waits for nothing (it once waited for the process to end)."""
    path = homes / "hanging-python"
    path.write_text("#!/bin/sh\nexec sleep 600\n")
    path.chmod(0o755)
    link = HostLink(cl.Host(name="here", local=True, python=str(path)), timeout=2)
    t0 = time.monotonic()
    with pytest.raises(RunError, match=f"^host here: no answer in 2 s from the agent started with '{path}'; check "):
        link.connect()
    assert time.monotonic() - t0 < 2 + 1.5


def test_a_connect_overtaken_by_a_drop_keeps_nothing_open(homes):
    """A detach (or the end of a check) while a host is still connecting: what that connect opens is
    closed, not left delivering a forgotten run's messages."""
    slow = homes / "slow-python"
    slow.write_text(f"#!/bin/sh\nsleep 1\nexec {sys.executable} \"$@\"\n")
    slow.chmod(0o755)
    link = HostLink(cl.Host(name="here", local=True, python=str(slow)))
    outcome = {}

    def connect():
        try:
            outcome["client"] = link.connect()
        except RunError as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=connect)
    thread.start()
    stage = threading.Event()
    while link.stage != "starting the agent":  # the agent's interpreter is starting (1 s)
        assert thread.is_alive() and not stage.wait(0.01)
    link.drop()
    thread.join(30)
    assert outcome == {"error": "host here: the connection was closed while it was being opened"}
    assert link.client is None


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
