"""The watchdogs' measures: who a forming cluster waits for, and how long a task's silence is a stall (Qt-free).

TensorFlow's own wait for a missing peer is silent for up to an hour; a task with no new step for far longer
than its steps take is stalled (a stopped process, a hung collective, a host that no longer answers).
"""

from __future__ import annotations

import logging
import math
import time

from agent.protocol import FINISHED, STARTING, STATUS, TRAINING, parse_task_name
from console import hangs, text
from console.errors import TfccError
from console.remote.channel import AgentTimeout
from console.run.where import WHERE_WAIT, where
from console.states import Mark, SessionKind, TaskState
from trainer.records import number
from trainer.tf_config import EVALUATOR

log = logging.getLogger("console.run.supervisor")

WHERE_EVERY = 10.0       # seconds between the stall watchdog's asks of where the tasks are
WHERE_APART = 18.0       # asks that find the same hang for this long call it (a pause at one line may be a task's
                         # own work: a save, an upload)
MISMATCH_SECONDS = 30.0  # workers in different distributed calls this long: a hang (an evaluate may just be slow)
WATCHDOG_SECONDS = 120.0  # how long a cluster may take to form before tfcc says who it waits for
STALL_FLOOR = 15.0  # seconds without a step that are never a stall, however quick the steps were
SUSPENDED = hangs.STATE_WORDS[hangs.STOPPED]
SAME_BATCH = 0.05  # seconds: a loop's printed values this close came in one read, not one step each


def waiting_report(run, after: float, stragglers: str = "") -> str | None:
    """The startup watchdog: who waits for whom, once the cluster has not formed after ``after`` s.

    TensorFlow's own wait is silent for up to an hour. ``stragglers``: the tasks TensorFlow itself
    said it still waits for (its coordination service's log), when it said so.
    """
    waiting = [t for t in run.members if t.launched_at is not None and not t.cluster_formed and not t.ended]
    if not waiting or any(t.cluster_formed or t.phase == FINISHED for t in run.members):
        return None  # a task that trained to its end had its cluster
    waited = time.time() - min(t.launched_at for t in waiting)
    if waited < after:
        return None
    missing = [t for t in run.members if t.launched_at is None or t.ended]
    names = ", ".join(t.name for t in waiting)
    if missing:
        who = "; ".join(f"{t.name} at {t.address} on host {t.host} "
                        + (f"ended ({t.phase})" if t.ended else "has not started") for t in missing)
        return (f"{names} waited {waited:.0f} s for the cluster to form: {who}. "
                f"See tfcc logs {run.run_id} {missing[0].name}; restart the run when it is fixed")
    if stragglers:
        return (f"{names} waited {waited:.0f} s for the cluster to form: TensorFlow still waits for "
                f"{stragglers} although every task started: a port may be blocked between hosts "
                "(tfcc check tests every pair)")
    if not any(t.records for t in run.tasks):
        # A script that reports nothing (its capture off) and whose TensorFlow said nothing of its
        # cluster: nothing tells a healthy one from one that waits. Say nothing rather than cry wolf.
        return None
    return (f"{names} waited {waited:.0f} s for the cluster to form although every task started: a port may be "
            "blocked between hosts (tfcc check tests every pair)")


class Pace:
    """How fast a task makes steps: the stall watchdog waits many of them, never less than a floor."""

    def __init__(self, keep: int = 50, first: float = 0.0, untimed: bool = False):
        self.times: list[float] = []
        self.untimed = untimed     # its steps carry no time (a loop's printed values): their intervals are its pace
        self.first = first         # patience before the first step (0: none was waited for)
        self.saving = False        # a backup is being written (after its backing_up event)
        self.keep = keep
        self.last_at: float | None = None  # when its last step arrived (monotonic)
        self.epoch = self.index = None
        self.epoch_end = False
        self.finished = False  # its last epoch is done: what follows is no stall

    def step(self, record: dict, now: float, steps_per_epoch) -> None:
        took = number(record.get("step_time"))
        if self.untimed:
            took = now - self.last_at if self.last_at is not None else math.nan
            if took < SAME_BATCH:  # values read together (a summary file, a burst of prints): no step's time
                took = math.nan
        if math.isfinite(took) and took > 0:
            self.times = (self.times + [took])[-self.keep:]
        self.last_at, self.epoch, self.index = now, record.get("epoch"), record.get("step")
        self.first, self.saving = 0.0, False
        # After an epoch's last step come its validation and backup, which can take long.
        self.epoch_end = isinstance(self.index, int) and self.index + 1 == steps_per_epoch

    def epoch_done(self, now: float) -> None:
        self.last_at, self.epoch_end = now, False

    def median(self) -> float:
        return sorted(self.times)[len(self.times) // 2] if self.times else 0.0

    def patience(self, floor: float) -> float:
        """How long without a step is a stall: 50 x the median step, at least ``floor``; ten times
        that after an epoch's last step (validation comes then) or while a backup is written;
        before the first step, the time it was given (``first``)."""
        if not self.times and self.first:
            return self.first
        return max(floor, 50 * self.median()) * (10 if self.epoch_end or self.saving else 1)


def evaluates(task: TaskState) -> bool:
    """Whether ``task`` is the run's evaluator (a sidecar: no part of training)."""
    return parse_task_name(task.name)[0] == EVALUATOR


class Watchdogs:
    """The supervisor's watchdogs (a mixin of ``console.run.supervisor.Supervisor``, on its run and words): the
    startup watchdog, and the stall watchdog with what a silent task's host says of it."""

    def _check_watchdog(self) -> None:
        # A session that attaches to a run gives its cluster the same time from now: the replay of
        # an old run's history is no wait, whenever its tasks started.
        if self._watchdog_said == self.attempt or time.monotonic() - self._opened < self.watchdog:
            return
        report = waiting_report(self.run, self.watchdog, self.stragglers)
        if report:
            self._watchdog_said = self.attempt
            self._say(SessionKind.WATCHDOG, report)

    def _check_stalls(self) -> None:
        """A training task with no new step for far longer than its steps take is stalled (a stopped
        process, a hung collective, a host that no longer answers): a failure like any other.

        Once a task has made no step for its patience at the floor (``stall_floor``; a user's script gets the
        startup watchdog's time before a stall is called without more), every task is asked where it is
        (console.hangs), again every ``WHERE_EVERY`` s: asks that find the same tasks stuck at the same places for
        ``WHERE_APART`` s are a hang now; else the stall is called at the task's full patience, with where they
        are."""
        if self.given_up or self._failed:
            return
        now = time.monotonic()
        silent: dict[str, float] = {}
        due = None
        for task in self.run.tasks:
            pace = self._pace.get(task.name)
            if task.phase != TRAINING or pace is None or pace.last_at is None or pace.finished:
                continue
            took = now - pace.last_at
            floor = max(self.stall_floor, self.watchdog) if task.name in self._captured else self.stall_floor
            if took > pace.patience(self.stall_floor):
                silent[task.name] = took
            if took > pace.patience(floor) and due is None and not pace.untimed:
                due = task
        if not silent:
            self._located.clear()  # what an earlier ask found is of a stall that ended
            return
        report = None
        if due is not None or now - self._located_at >= WHERE_EVERY:
            report = self._locate(silent)
        hang = False
        if report is not None and report.stuck:  # every ask back to one this far back found the same
            for at, earlier in reversed(self._located[:-1]):
                if not report.same(earlier):
                    break
                if now - at >= (MISMATCH_SECONDS if report.mismatch else WHERE_APART):
                    hang = True
                    break
        if due is None and not hang:
            return
        stuck = [t for t in self.run.tasks if report is not None and t.name in report.stuck and t.name in silent]
        task = stuck[0] if hang and stuck else (due or next(t for t in self.run.tasks if t.name in silent))
        pace = self._pace[task.name]
        for other in self.run.tasks:
            if other.name in silent:
                self._pace[other.name].last_at = None  # said once: what follows is the supervisor's
        if report is not None and report.verdict:
            self._say(SessionKind.WHERE, "where the tasks are: " + "; ".join(report.lines),
                      {"where": report.as_dict()})
            if report.places:
                self._hangs[self.attempt] = report.places
            why = report.verdict
            for other in stuck[1:]:
                self._mark(other, Mark.STALLED, next(g.words for g in report.groups if other.name in g.tasks))
        else:
            why = self._why_silent(task) or ("it may wait for a collective that a peer never joined, "
                                              "or its host is overloaded")
        self._stall(task, f"made no step for {silent[task.name]:.0f} s (its steps took {pace.median():.2f} s; its "
                          f"last was epoch {text.count(pace.epoch)} step {text.count(pace.index)}): {why}")
        self._failed.append(task)

    def _locate(self, silent: dict[str, float]):
        """Where the tasks are now (console.run.where), kept with when it was asked; None if it could not be had."""
        self._located_at = time.monotonic()
        try:
            report = where(self.run, WHERE_WAIT, silent, before=self._located[-1][1] if self._located else None)
        except Exception:
            log.exception("could not ask where the tasks of run %s are", self.run.run_id)
            return None
        self._located = (self._located + [(self._located_at, report)])[-4:]
        return report

    def hang_repeats(self) -> tuple[str, ...]:
        """The places in the user's code where this attempt hung as the one before it did (a restart would meet
        the same hang), or ()."""
        places = self._hangs.get(self.attempt, ())
        return places if places and self._hangs.get(self.attempt - 1) == places else ()

    def _stall(self, task: TaskState, words: str) -> None:
        """``task`` is stalled (``words``: how, and the likely cause): said and shown; the caller judges it."""
        self._stalled[task.name] = words
        self._say(SessionKind.STALLED, f"{task.name} on {task.host} {words}")
        self._mark(task, Mark.STALLED, words)

    def _why_silent(self, task: TaskState) -> str:
        """Why a running task makes no step, where its host can tell: its process is stopped, or the
        host does not answer; "" when neither."""
        try:
            status = self.run.links[task.host].connect().call(STATUS, timeout=10, run_id=self.run.run_id,
                                                              task=task.name)
        except TfccError as exc:
            if isinstance(exc, AgentTimeout):  # gone silent: the next call connects anew (or fails fast)
                self.run.links[task.host].drop()
            return f"its host does not answer ({exc})"
        if status.get("suspended"):
            return SUSPENDED
        return ""

    def _name_the_suspended(self, failed: list[TaskState]) -> None:
        """Tasks whose process is stopped (SIGSTOP) look alive to everyone but their peers, which fail
        for losing them: name each as what stalled, before the stop ends them, with where every task is."""
        stopped = [t for t in self.run.tasks if t not in failed and not t.ended and t.phase != STARTING
                   and self._why_silent(t) == SUSPENDED]
        report = self._locate({}) if stopped else None
        if report is not None and report.verdict:  # said first, as the stall watchdog's: then what stalled
            self._say(SessionKind.WHERE, "where the tasks are: " + "; ".join(report.lines),
                      {"where": report.as_dict()})
        for task in stopped:
            pace = self._pace.get(task.name)
            last = (f"; its last step was epoch {text.count(pace.epoch)} step {text.count(pace.index)}"
                    if pace is not None and pace.index is not None else "; it made no step yet")
            self._stall(task, f"{SUSPENDED}{last}")
            failed.append(task)
