"""The stall watchdog's asks of where the tasks are (console.run.watchdogs): a hang is called when the asks agree
for long enough, said with where each task is and kept; one that moves is no hang; a hang at the same place of the
user's code in two attempts in a row repeats. (tests/console/run/test_hangs.py runs real seeded hangs.)"""

from __future__ import annotations

import pytest

from console import cluster as cl
from console import hangs
from console.run import watchdogs
from console.run.runner import Run
from console.run.session import RunSession
from console.states import SessionKind
from console.store.metrics import MetricsStore


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    return tmp_path


def report(line: int) -> hangs.Report:
    """worker-1 stuck in the user's data.py at ``line``, worker-0 in fit's step (as console.hangs reads them)."""
    def answer(task: str, innermost: tuple) -> dict:
        work = f"/h/runs/r/{task}/work"
        frames = [innermost, (f"{work}/main.py", 57, "main"), (f"{work}/main.py", 90, "<module>")]
        text = "Thread 0x1 (most recent call first):\n" + "".join(
            f'  File "{path.format(work=work)}", line {n} in {func}\n' for path, n, func in frames)
        return {"state": "answered", "stacks": text, "work": work, "code": []}

    fit = ("/venv/lib/python3.11/site-packages/tf_keras/src/engine/training.py", 1807, "fit")
    return hangs.read([("worker-0", "here", answer("worker-0", fit)),
                       ("worker-1", "here", answer("worker-1", ("{work}/data.py", line, "batches")))],
                      None, silent={"worker-1": 20.0})


def stalling(homes, monkeypatch, answers: list[hangs.Report], step: str = '"step_time": 0.01'):
    """A supervised session of a user's script's two tasks, worker-1 silent for 30 s; ``where`` answers in turn.
    ``step``: what its step records hold besides their place and loss (a time; or a loop's printed values)."""
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script="train.py", max_restarts=0))
    session = RunSession(Run(cluster, "asked"), MetricsStore())
    events = []
    session.subscribe(lambda e: events.append((e.kind, e.text, e.message)) if e.kind in SessionKind.SUPERVISION
                      else None)
    asked = iter(answers)
    monkeypatch.setattr(watchdogs, "where", lambda run, wait, silent, before: next(asked))
    sup = session.supervisor
    sup.stall_floor, sup.watchdog = 1.0, 1000.0
    for task in session.run.tasks:
        sup.launched(task, script=True)
        task.change("running")
        task.change("training")
        session._handle(task, {"type": "metrics", "offset": 1, "lines": [
            '{"type": "event", "event": "started", "epochs": 2, "steps_per_epoch": 50}',
            '{"type": "step", "epoch": 0, "step": 3, "loss": 0.5, %s}' % step]})
    sup._pace["worker-1"].last_at -= 30
    return session, events


def later(sup, seconds: float) -> None:
    """As if every ask so far was made ``seconds`` earlier."""
    sup._located = [(at - seconds, r) for at, r in sup._located]
    sup._located_at -= seconds


def test_asks_that_agree_for_long_enough_call_the_hang_with_where_each_task_is(homes, monkeypatch):
    session, events = stalling(homes, monkeypatch, [report(42), report(42), report(42)])
    sup = session.supervisor
    sup._check_stalls()  # the first ask: no verdict yet
    assert events == [] and sup._failed == []
    later(sup, watchdogs.WHERE_EVERY)
    sup._check_stalls()  # agrees, but not for long enough
    assert events == []
    later(sup, watchdogs.WHERE_APART)
    sup._check_stalls()
    kinds = [k for k, _, _ in events]
    assert kinds == [SessionKind.WHERE, SessionKind.STALLED], events
    assert events[0][1] == ("where the tasks are: worker-1 is stuck in data.py:42; worker-0 waits for it in fit's "
                            "step (main.py:57)")
    assert events[0][2]["where"]["stuck"] == ["worker-1"] and events[0][2]["where"]["tasks"][1]["stack"]
    assert events[1][1].startswith("worker-1 on here made no step for 30 s (its steps took 0.01 s; its last was epoch "
                                   "1 step 4): worker-1 is stuck in data.py:42; worker-0 waits for it")
    assert [t.name for t in sup._failed] == ["worker-1"] and sup._hangs == {1: ("data.py:42",)}
    sup._check_stalls()  # said once
    assert len(events) == 2


def test_a_task_that_moves_between_asks_is_no_hang_until_its_patience_ends(homes, monkeypatch):
    session, events = stalling(homes, monkeypatch, [report(42), report(43), report(44), report(44)])
    sup = session.supervisor
    for _ in range(3):
        sup._check_stalls()
        later(sup, watchdogs.WHERE_APART)
    assert events == [] and sup._failed == []
    sup.watchdog = 1.0  # its full patience over: the stall is called with where the tasks are now
    sup._check_stalls()
    assert [k for k, _, _ in events] == [SessionKind.WHERE, SessionKind.STALLED]
    assert "data.py:44" in events[1][1]


def test_a_hang_at_the_same_place_in_two_attempts_in_a_row_repeats(homes, monkeypatch):
    session, _ = stalling(homes, monkeypatch, [])
    sup = session.supervisor
    sup._hangs = {1: ("data.py:42",)}
    assert sup.hang_repeats() == ()  # the first attempt: a restart may help
    sup.attempt, sup._hangs[2] = 2, ("data.py:42",)
    assert sup.hang_repeats() == ("data.py:42",)
    sup._hangs[2] = ("data.py:50",)
    assert sup.hang_repeats() == ()


def test_a_loops_printed_values_are_no_stall_by_their_silence_only_by_where_the_tasks_are(homes, monkeypatch):
    """A custom loop's printed values have no step time: their silence, however long, calls no stall (the loop may
    evaluate, save); the asks still run, and a hang they agree on is called."""
    healthy = hangs.read([(t, "here", {"state": "answered", "stacks": "", "work": "/w", "code": []})
                          for t in ("worker-0", "worker-1")], None, silent={"worker-1": 200.0})
    session, events = stalling(homes, monkeypatch, [healthy] * 4 + [report(66)] * 3, step='"captured": "print"')
    sup = session.supervisor
    assert sup._pace["worker-1"].untimed
    sup._pace["worker-1"].last_at -= 170
    sup.watchdog = 1.0  # its full patience long over
    for _ in range(4):
        sup._check_stalls()
        later(sup, watchdogs.WHERE_APART)
    assert events == [] and sup._failed == []
    for _ in range(3):
        sup._check_stalls()
        later(sup, watchdogs.WHERE_APART)
    assert [k for k, _, _ in events] == [SessionKind.WHERE, SessionKind.STALLED]
    assert "worker-1 is stuck in data.py:66" in events[1][1]
