"""The run's supervision state (console.states.Supervision): one door, along its table, edge by edge."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from console.states import Supervision


def _supervisor(state: str):
    from console.run.supervisor import Supervisor

    run = SimpleNamespace(run_id="r", cluster=SimpleNamespace(training=SimpleNamespace(max_restarts=1)))
    supervisor = Supervisor(run, say=lambda *a: None, mark=lambda *a: None, follow=lambda *a: None,
                            drain=lambda: None)
    supervisor._state = state  # the test's own way in: every state as a start
    told = []
    supervisor.listeners.append(lambda old, new: told.append((old, new)))
    return supervisor, told


@pytest.mark.parametrize("old,new", list(itertools.product(Supervision.ALL, Supervision.ALL)))
def test_each_edge_of_the_supervision_table(old, new):
    supervisor, told = _supervisor(old)
    if old == new:
        assert supervisor.change(new) is False and told == []
    elif new in Supervision.EDGES[old]:
        assert supervisor.change(new) is True and supervisor.state == new and told == [(old, new)]
    else:
        with pytest.raises(ValueError, match=f"from {old} to {new}"):
            supervisor.change(new)
        assert supervisor.state == old and told == []


def test_the_table_names_every_state_and_only_states():
    assert set(Supervision.EDGES) == set(Supervision.ALL)
    assert all(set(ends) <= set(Supervision.ALL) for ends in Supervision.EDGES.values())
    assert Supervision.EDGES[Supervision.STOPPING] == ()  # a stop asked for stays what it is


def test_a_restarts_end_does_not_undo_a_stop_asked_for_meanwhile():
    supervisor, told = _supervisor(Supervision.RESTARTING)
    supervisor.stop_asked()  # a person's Stop, on another thread, while the restart runs
    assert supervisor.change(Supervision.WATCHING, only_from=Supervision.RESTARTING) is False
    assert supervisor.state == Supervision.STOPPING and supervisor.stop_requested and supervisor.given_up
    supervisor.give_up()  # a stop stays a stop
    assert supervisor.state == Supervision.STOPPING and told == [(Supervision.RESTARTING, Supervision.STOPPING)]


def test_giving_up_and_a_stop_on_another_thread_never_meet_outside_the_table():
    """A restart gives up on the session's thread while a person's Stop comes on the window's: whichever is first,
    the door checks and moves at once, and a stop asked for stays what it is."""
    import threading

    for first_stop in (True, False):
        supervisor, told = _supervisor(Supervision.RESTARTING)
        go = threading.Barrier(2)
        errors = []

        def stop():
            go.wait()
            supervisor.stop_asked()

        def give_up():
            go.wait()
            try:
                supervisor.give_up()
            except ValueError as exc:  # an edge outside the table: what a check-then-move would meet
                errors.append(exc)

        threads = [threading.Thread(target=f) for f in ((stop, give_up) if first_stop else (give_up, stop))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert errors == [] and supervisor.state == Supervision.STOPPING and supervisor.stop_requested


def test_a_stop_between_the_check_and_the_restart_ends_supervision_without_an_edge_outside_the_table():
    """A task failed; while the supervisor looks (is the run over? has the coordinator finished?), a person's Stop
    comes on another thread: the restart does not begin, and nothing raises."""
    supervisor, told = _supervisor(Supervision.WATCHING)
    supervisor.run.cluster.parameter_server = False
    supervisor._failed = [SimpleNamespace(name="worker-0", host="here")]

    def stopped_meanwhile():
        supervisor.stop_asked()
        return False

    supervisor._coordinator_finished = stopped_meanwhile
    supervisor._supervise()
    assert supervisor.state == Supervision.STOPPING and told == [(Supervision.WATCHING, Supervision.STOPPING)]

