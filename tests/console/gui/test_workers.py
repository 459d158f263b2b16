"""The window's run session: what it makes of the core's follow messages."""

from __future__ import annotations

from console.gui.workers import RunSession, Threads
from console.runner import TaskState


def test_a_lost_connection_and_its_return_are_events_of_the_run(qtbot):
    session = RunSession(Threads())
    task = TaskState("worker-1", "gpu-b")
    session._on_run_message(task, {"type": "reconnecting", "host": "gpu-b", "error": "connection refused"})
    session._on_run_message(task, {"type": "reconnected", "host": "gpu-b", "after": 8.4})
    assert [(e["task"], e["event"], e["text"]) for e in session.store.events] == [
        ("worker-1", "reconnecting", "lost the connection to host gpu-b (connection refused); reconnecting "
                                     "(the task goes on there)"),
        ("worker-1", "reconnected", "reconnected to host gpu-b after 8 s; following on from where it stopped")]
