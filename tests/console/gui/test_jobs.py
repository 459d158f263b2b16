"""The window's bridge to the run session: the core's events as Qt signals, for the run it follows."""

from __future__ import annotations

from console import cluster as cl
from console.gui.jobs import RunBridge, Threads
from console.run.runner import Run
from console.states import SessionEvent


def test_the_bridge_signals_the_followed_runs_events_and_drops_a_detached_ones(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path))
    bridge = RunBridge(Threads())
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")])
    old = bridge._session(Run(cluster, "old"))
    bridge.core = current = bridge._session(Run(cluster, "new"))
    started = {"type": "event", "event": "started", "global_batch": 32}
    with qtbot.waitSignal(bridge.training_started, timeout=30_000) as got:
        current._tell(SessionEvent("training_started", records=[started]))
    assert got.args == [started]
    with qtbot.waitSignal(bridge.watchdog_fired, timeout=500, raising=False) as late:
        old._tell(SessionEvent("watchdog", text="from a run this window no longer follows"))
    assert not late.signal_triggered
