"""How a run and its tasks are: task phases and their one door, marks, run states, session events (Qt-free).

The one door a task's phase changes through and its transition table, what supervision marks on a task, a
run's states, and what a run session tells its listeners.

A task's phase (``agent.protocol``'s words) changes only in ``TaskState.change`` (an edge of ``TRANSITIONS``),
``TaskState.relaunch`` (the only way back from an ended phase) or ``TaskState.leave`` (an elastic run goes on
without it, whatever its phase); every change is told to the task's ``on_change``. Nothing else assigns a phase.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from agent.protocol import (ENDED, ERROR, FAILED, FINISHED, LEFT, LOST, PENDING, RUNNING, STARTING, STOPPED,
                            STREAMS, TRAINING, WAITING)

# --------------------------------------------------------------------------- a task's phase

_ENDS = tuple(p for p in ENDED if p != LEFT)  # a process's ends; leaving the run is ``TaskState.leave``'s

TRANSITIONS: dict[str, frozenset] = {
    # STARTING -> RUNNING: its agent follows it; -> WAITING: its launched record; -> TRAINING: its cluster
    # formed (an earlier attempt's record, read after a relaunch); -> an end: it ended before anything came.
    STARTING: frozenset({PENDING, RUNNING, WAITING, TRAINING, *_ENDS}),
    # PENDING (a Slurm job's task its node has not started) -> RUNNING, WAITING: its node started it.
    PENDING: frozenset({RUNNING, WAITING, TRAINING, *_ENDS}),
    # RUNNING -> WAITING: the trainer launched; -> TRAINING: a script's capture saw training at once.
    RUNNING: frozenset({WAITING, TRAINING, *_ENDS}),
    WAITING: frozenset({TRAINING, *_ENDS}),
    # TRAINING -> WAITING: a later attempt's launch, read in a run's history from its first record.
    TRAINING: frozenset({WAITING, *_ENDS}),
    # An ended task changes no more: only TaskState.relaunch takes it back to STARTING.
    FINISHED: frozenset(), FAILED: frozenset(), LOST: frozenset(), ERROR: frozenset(), STOPPED: frozenset(),
    LEFT: frozenset(),
}


class PhaseError(RuntimeError):
    """A phase change that is no edge of TRANSITIONS: a bug, never a host's doing."""


class TaskState:
    """One task of a run as the console knows it: where it is read up to, and its phase."""

    def __init__(self, name: str, host: str, address: str = "", phase: str = STARTING):
        if phase not in TRANSITIONS:
            raise PhaseError(f"{name}: {phase!r} is no phase")
        self.name = name
        self.host = host
        self.address = address
        self.offsets: dict[str, int] = {stream: 0 for stream in STREAMS}
        self.records = 0                      # records received of it
        self.launched_at: float | None = None
        self.cluster_formed = False
        self.exit: dict | None = None         # its agent's exit record once it ended
        self.attempt = 0                      # which launch of the run its process is (the agent counts them)
        self._phase = phase
        # Told of every change: (task, old phase, new phase). The run session says it to its listeners.
        self.on_change: Callable[[TaskState, str, str], None] | None = None

    def __repr__(self) -> str:
        return f"TaskState({self.name!r}, {self.host!r}, phase={self._phase!r})"

    @property
    def phase(self) -> str:
        return self._phase

    @property
    def ended(self) -> bool:
        return self._phase in ENDED

    def change(self, phase: str) -> bool:
        """Move to ``phase`` along an edge of TRANSITIONS; whether it changed (the same phase is no change)."""
        old = self._phase
        if phase == old:
            return False
        if phase not in TRANSITIONS[old]:
            raise PhaseError(f"{self.name}: no way from {old!r} to {phase!r}")
        self._phase = phase
        if self.on_change is not None:
            self.on_change(self, old, phase)
        return True

    def leave(self) -> None:
        """An elastic run goes on without the task (its host was lost, or kept failing): it ends here, whatever
        it was doing; ``relaunch`` takes it back when it rejoins."""
        old = self._phase
        if old == LEFT:
            return
        self._phase = LEFT
        if self.on_change is not None:
            self.on_change(self, old, LEFT)

    def relaunch(self) -> None:
        """The task starts again (a restart, or a parameter-server worker taken back): a new launch."""
        old = self._phase
        self._phase, self.exit, self.launched_at, self.cluster_formed = STARTING, None, None, False
        if old != STARTING and self.on_change is not None:
            self.on_change(self, old, STARTING)


# --------------------------------------------------------------------------- what a task's follow says
# Besides its agent's messages (agent.protocol: following, metrics, log, end), a follow says:

RECONNECTING = "reconnecting"  # its host could not be reached, or the connection dropped: it tries again
RECONNECTED = "reconnected"    # reached again: it reads on from where it stopped
FOLLOW_ERROR = "error"         # it cannot follow the task any more (a refused host key, the agent's refusal)


# --------------------------------------------------------------------------- what supervision marks on a task


class Mark:
    """What supervision says of a task now (a badge in the window, a ``state`` session event)."""

    RUNNING = "running"
    STALLED = "stalled"
    FAILED = "failed"
    RESTARTING = "restarting"
    STOPPING = "stopping"  # a stop was asked for: it gets SIGTERM, then SIGKILL after the grace
    STOPPED = "stopped"    # that stop ended it
    LEFT = "left"          # an elastic run went on without it (its host lost, or failing): it rejoins when back
    ALL = (RUNNING, STALLED, FAILED, RESTARTING, STOPPING, STOPPED, LEFT)
    CALM = (STOPPING, STOPPED)  # asked for: no alarm


# --------------------------------------------------------------------------- a run's state


class RunState:
    """A run's state as ``tfcc runs`` and the Runs panel show it."""

    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"
    UNKNOWN = "unknown"
    ENDED = (FINISHED, FAILED, STOPPED)
    ALL = (RUNNING, FINISHED, FAILED, STOPPED, UNKNOWN)


class Supervision:
    """What supervision of a live run is doing now, beside its tasks' phases (supervisor's ``SupervisorStates``
    beside ``ProcessStates``). One door sets it (``console.run.supervisor.Supervisor.change``), against ``EDGES``."""

    WATCHING = "watching"      # the attempt runs: watchdogs on, a failure is judged
    RESTARTING = "restarting"  # after a failure: stopping the rest, judging, starting every task again
    RESIZING = "resizing"      # an elastic run changes its size (a host removed by a person, or taken back)
    GIVEN_UP = "given up"      # nothing more is tried: the run ends as its tasks do
    STOPPING = "stopping"      # a stop was asked for (a person's, or the run's own at a non-finite loss): its
    #                            tasks' ends are no failures, and nothing starts again
    ALL = (WATCHING, RESTARTING, RESIZING, GIVEN_UP, STOPPING)
    BUSY = (RESTARTING, RESIZING)     # the run's tasks are being stopped and started by supervision
    OVER = (GIVEN_UP, STOPPING)       # supervision does nothing more
    EDGES = {
        WATCHING: (RESTARTING, RESIZING, GIVEN_UP, STOPPING),
        RESTARTING: (WATCHING, GIVEN_UP, STOPPING),
        RESIZING: (WATCHING, GIVEN_UP, STOPPING),
        GIVEN_UP: (STOPPING,),  # a person stops a run that was given up (its servers may still serve)
        STOPPING: (),
    }


class GaveUp:
    """Why supervision gave a run up, where code acts on it (the words said are the event's)."""

    CAUSE_REPEATS = "cause repeats"  # a restart would fail the same way (the code, its settings)
    OTHER = "other"                  # no restarts left, tasks that did not answer, a start that failed, ...


class Leave:
    """Why a task is out of an elastic run, as code acts on it (kept in the run's manifest). A person removed its
    host, or it kept failing: it is not asked again until a person takes it back; lost or not started: it rejoins
    once its host answers; taken back: it rejoins at the next backup."""

    REMOVED = "removed"        # a person removed its host
    FAILING = "failing"        # its host caused failure after failure
    LOST = "lost"              # its host did not answer after a failure
    NOT_STARTED = "not started"  # it answered, then could not be started again
    TAKEN_BACK = "taken back"  # a person took its host back: it rejoins at the next backup
    ALL = (REMOVED, FAILING, LOST, NOT_STARTED, TAKEN_BACK)
    NOT_ASKED_AGAIN = (REMOVED, FAILING)


class Left(str):
    """Why a task is out of an elastic run: the words shown (the string itself, as a person reads it) and the
    ``reason`` (a Leave) that code acts on: rewording never changes what is done."""

    reason: str

    def __new__(cls, words: str, reason: str):
        if reason not in Leave.ALL:
            raise ValueError(f"no such reason to leave a run: {reason!r}")
        left = super().__new__(cls, words)
        left.reason = reason
        return left

    def __reduce__(self):  # a copy, a pickle: the words and the reason
        return Left, (str(self), self.reason)

    @classmethod
    def read(cls, words: str, reason=None) -> "Left":
        """A manifest's: its reason where it has one; an older manifest's sentence, read once by its words."""
        if reason in Leave.ALL:
            return cls(words, reason)
        for start, found in (("removed by you", Leave.REMOVED), ("its host caused failure after failure", Leave.FAILING),
                             ("taken back by you", Leave.TAKEN_BACK)):
            if words.startswith(start):
                return cls(words, found)
        return cls(words, Leave.NOT_STARTED if "could not be started again" in words else Leave.LOST)


def run_state(phases: list[str], stopped: list[bool]) -> str:
    """A run's state from its tasks' phases (and whether a stop ended each); the tasks that left an elastic run
    count for nothing while others are in it. A task that failed on its own makes the run failed, even when
    tfcc then stopped its peers (a stop ended them, but the run failed); stopped is a stop with no failure."""
    kept = [(p, s) for p, s in zip(phases, stopped) if p != LEFT]
    if kept and len(kept) < len(phases):
        phases, stopped = [p for p, _ in kept], [s for _, s in kept]
    if not phases or any(p not in ENDED for p in phases):
        return RunState.RUNNING
    if all(p == FINISHED for p in phases):
        return RunState.FINISHED
    if any(p == FAILED and not s for p, s in zip(phases, stopped)):
        return RunState.FAILED
    if any(stopped) or STOPPED in phases:
        return RunState.STOPPED
    return RunState.FAILED


# --------------------------------------------------------------------------- what a session tells


class SessionKind:
    """A ``SessionEvent``'s kind."""

    RECORDS = "records"                    # a batch of a task's decoded records (``records``, ``batch``)
    TRAINING_STARTED = "training_started"  # the first ``started`` event of each attempt (its batch plan)
    LOG = "log"                            # a task's output (``stream``, ``text``)
    CONNECTION = "connection"              # a task's follow lost or regained its host (``message``, ``text``)
    PHASE = "phase"                        # a task's phase changed (``message``: ``from``, ``to``)
    TASK_ENDED = "task_ended"              # a task's process ended (``message``: its agent's end, ``text``)
    WATCHDOG = "watchdog"                  # the cluster has not formed in time: who waits for whom (``text``)
    STATE = "state"                        # what supervision marks on a task now (``message["state"]``, a Mark)
    SYSTEM = "system"                      # a host's load (``host``, ``message``: its agent's system record)
    ENDED = "ended"                        # every task ended and all they sent was handled
    JOB = "job"                            # a Slurm run's job changed: ``message`` its state, reason, nodes; ``text``
    EXPLAINED = "explained"                # a breakdown asked for came back: ``message`` a console.speed.Verdict's
                                           # as_dict(), ``text`` its lines (why_slow)
    # Supervision's (``text``; ``message`` has the ``attempt``): ``resumed`` says where an attempt took up
    # training; ``offered`` that a run failed while no console followed it, and how to restart it.
    ALERT = "alert"
    STALLED = "stalled"
    FAILURE = "failure"
    HOST_FAILING = "host_failing"
    RESTARTING = "restarting"
    RESTARTED = "restarted"
    RESUMED = "resumed"
    OFFERED = "offered"
    GAVE_UP = "gave_up"
    EXPOSED = "exposed"  # a task serves TensorFlow on a public address (console.exposure): the risk and the fix
    SEEDED = "seeded"    # a resume copied the backup the tasks resume from to those that lacked it (console.run.seeding)
    RESIZED = "resized"  # an elastic run went on without some tasks, or took them back (training.elastic)
    CODE_SHIPPED = "code_shipped"  # a person's resume of a script's run: its tasks' copies of its files, brought up to date
    # Where the tasks were when a stall was seen (console.hangs): ``text`` one line a group, ``message["where"]`` the
    # report's as_dict() with each task's stack (kept in the run's history).
    WHERE = "where"
    SUPERVISION = (ALERT, STALLED, FAILURE, HOST_FAILING, RESTARTING, RESTARTED, RESUMED, OFFERED, GAVE_UP, EXPOSED,
                   SEEDED, RESIZED, CODE_SHIPPED, WHERE)
    ALARMS = (ALERT, STALLED, FAILURE, HOST_FAILING, OFFERED, GAVE_UP, EXPOSED)  # to look at
    # The console's own notes of a run, kept in its history beside what the tasks sent.
    NOTED = (*SUPERVISION, WATCHDOG, JOB)


@dataclass
class SessionEvent:
    """What a run session tells its listeners; ``kind`` is one of SessionKind's."""

    kind: str
    task: TaskState | None = None
    records: list = field(default_factory=list)
    stream: str = ""
    text: str = ""
    message: dict = field(default_factory=dict)
    host: str = ""
    batch: object = None  # with RECORDS: the records sorted by type once (trainer.records.Batch)


Listener = Callable[[SessionEvent], None]
