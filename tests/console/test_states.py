"""A task's phase changes through one door: the transition table's edges and no others, every change told,
a relaunch the only way back from an end; and nothing outside console/states.py assigns a phase."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent.protocol import (ALIVE, ENDED, ERROR, FAILED, FINISHED, LEFT, LOST, NOT_STARTED, PENDING, RUNNING,
                            STARTING, STOPPED, TRAINING, WAITING)
from console.states import TRANSITIONS, PhaseError, RunState, TaskState, run_state

ROOT = Path(__file__).resolve().parents[2]
PHASES = (STARTING, PENDING, RUNNING, WAITING, TRAINING, FINISHED, FAILED, LOST, ERROR, STOPPED, LEFT)
# The edges a run takes: a launch, its cluster, its end; a resumed run's history read from the first record
# (a later attempt's launch after training); a task that ends before anything came of it; a Slurm job's task
# pending until its node starts it.
EDGES = {(STARTING, RUNNING), (STARTING, WAITING), (STARTING, TRAINING), (RUNNING, WAITING), (RUNNING, TRAINING),
         (WAITING, TRAINING), (TRAINING, WAITING), (STARTING, PENDING), (PENDING, RUNNING), (PENDING, WAITING),
         (PENDING, TRAINING)} | {(p, end) for p in (STARTING, PENDING, RUNNING, WAITING, TRAINING)
                                 for end in ENDED if end != LEFT}


def test_the_table_has_every_phase_and_exactly_the_runs_edges():
    assert set(TRANSITIONS) == set(PHASES)
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == EDGES
    assert all(not TRANSITIONS[end] for end in ENDED)  # an end is final but for a relaunch


@pytest.mark.parametrize("old", PHASES)
@pytest.mark.parametrize("new", PHASES)
def test_a_change_takes_an_edge_of_the_table_or_is_refused_and_told_once(old, new):
    task = TaskState("worker-0", "here", phase=old)
    told = []
    task.on_change = lambda t, a, b: told.append((t.name, a, b))
    if new == old:
        assert task.change(new) is False and told == []  # the same phase is no change
    elif (old, new) in EDGES:
        assert task.change(new) is True and task.phase == new
        assert told == [("worker-0", old, new)]
    else:
        with pytest.raises(PhaseError, match=f"no way from {old!r} to {new!r}"):
            task.change(new)
        assert task.phase == old and told == []


@pytest.mark.parametrize("end", ENDED)
def test_a_relaunch_is_the_way_back_from_an_end_and_starts_afresh(end):
    task = TaskState("worker-1", "here", phase=TRAINING)
    task.launched_at, task.cluster_formed = 12.0, True
    task.leave() if end == LEFT else task.change(end)
    task.exit = {"returncode": -9}
    told = []
    task.on_change = lambda t, a, b: told.append((a, b))
    task.relaunch()
    assert (task.phase, task.exit, task.launched_at, task.cluster_formed) == (STARTING, None, None, False)
    assert told == [(end, STARTING)]
    assert task.change(RUNNING)


@pytest.mark.parametrize("old", PHASES)
def test_leaving_an_elastic_run_is_its_own_door_from_any_phase_told_once(old):
    task = TaskState("worker-2", "here", phase=old)
    told = []
    task.on_change = lambda t, a, b: told.append((a, b))
    if old != LEFT:
        with pytest.raises(PhaseError):
            task.change(LEFT)  # not a process's end: only ``leave`` says it
    task.leave()
    task.leave()
    assert task.phase == LEFT and task.ended
    assert told == ([] if old == LEFT else [(old, LEFT)])


def test_a_phase_that_is_no_phase_is_refused():
    with pytest.raises(PhaseError):
        TaskState("worker-0", "here", phase="training hard")
    with pytest.raises(PhaseError):
        TaskState("worker-0", "here").change(NOT_STARTED)  # the agent's word for a folder that is not there


def test_the_phase_cannot_be_set_by_hand():
    with pytest.raises(AttributeError):
        TaskState("worker-0", "here").phase = TRAINING


def test_a_runs_state_follows_its_tasks():
    assert run_state([], []) == RunState.RUNNING
    assert run_state([TRAINING, FINISHED], [False, False]) == RunState.RUNNING
    assert run_state([FINISHED, FINISHED], [False, False]) == RunState.FINISHED
    assert run_state([FINISHED, FAILED], [False, True]) == RunState.STOPPED
    assert run_state([LOST, FAILED], [False, False]) == RunState.FAILED
    assert run_state([STOPPED, FINISHED], [False, False]) == RunState.STOPPED  # a stopped phase says it alone
    # A task that failed on its own fails the run, though tfcc then stopped its peer: stopped is a stop alone.
    assert run_state([FAILED, STOPPED], [False, True]) == RunState.FAILED
    assert run_state([FAILED, FAILED], [False, True]) == RunState.FAILED  # the agent's words for the same
    assert run_state([STOPPED, STOPPED], [True, True]) == RunState.STOPPED
    assert set(ALIVE) & set(ENDED) == set()
    # An elastic run's state is its members': those that left count for nothing while some are in it.
    assert run_state([FINISHED, LEFT, FINISHED], [False] * 3) == RunState.FINISHED
    assert run_state([TRAINING, LEFT], [False] * 2) == RunState.RUNNING
    assert run_state([FAILED, LEFT], [False] * 2) == RunState.FAILED


def phase_assignments(tree: ast.AST) -> list[int]:
    """Lines that assign a ``phase`` attribute (``x.phase = …``, ``x.phase, y = …``, ``x.phase += …``)."""
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for each in ast.walk(target):
                if isinstance(each, ast.Attribute) and each.attr in ("phase", "_phase") \
                        and isinstance(each.ctx, ast.Store):
                    found.append(node.lineno)
    return found


def test_no_phase_is_assigned_outside_the_states_module():
    assigned = []
    for package in ("console", "trainer", "agent"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "console" / "states.py":
                continue
            assigned += [f"{path.relative_to(ROOT)}:{line}" for line in phase_assignments(ast.parse(path.read_text()))]
    assert assigned == [], "a phase changes only through TaskState.change or relaunch (console/states.py)"


def test_the_assignment_finder_finds_each_way_to_assign():
    """The check above cannot pass by finding nothing: each form of assignment is found."""
    source = ("task.phase = 'x'\n"
              "task.phase, task.exit = 'x', None\n"
              "self._phase = 'y'\n"
              "task.phase: str = 'z'\n"
              "phase = task.phase\n")
    assert phase_assignments(ast.parse(source)) == [1, 2, 3, 4]
