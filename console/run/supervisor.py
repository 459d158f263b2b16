"""Supervision of one run, once for every front end: watchdogs, judging a failure, restarts (Qt-free).

MultiWorkerMirroredStrategy cannot recover in-process: when one task dies the others fail too, and only a
restart of the whole group with the same TF_CONFIG resumes training (from the backups each task writes).
A failure is *retryable* when the process was killed or lost (a signal, an exit code of 128 or more as
Kubeflow's TFJob counts them, a vanished supervisor) or when the diagnosis of its log says so (a lost peer,
a heartbeat); it is *permanent* when the diagnosis finds an error that a restart would only repeat (a bug in
the training code, a bad configuration). Parameter-server training goes on without a worker: that worker
alone starts again.

The ``Supervisor`` is given the run and what it may do through its session (say, mark a task, follow tasks
again, handle what the follows queued); the session tells it what the tasks report and calls ``tick`` on its
own thread after each batch.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Callable

from agent.protocol import (FAILED, FINISHED, LOGS, LOST, STARTING, STATUS, STDERR, TRAINING, parse_task_name,
                            task_name)
from console import text
from console.diagnosis import CONSEQUENCES, PORT_IN_USE, diagnose
from console.errors import TfccError
from console.remote.channel import AgentTimeout
from console.run.runner import Run
from console.states import Mark, SessionKind, TaskState
from trainer.records import CAPTURED, LOST_PEER, number
from trainer.tf_config import CHIEF, EVALUATOR, TRAINING_ROLES, WORKER

log = logging.getLogger("console.run.supervisor")

WATCHDOG_SECONDS = 120.0  # how long a cluster may take to form before tfcc says who it waits for
STALL_FLOOR = 15.0  # seconds without a step that are never a stall, however quick the steps were
RESTART, OFFER = "restart", "offer"  # what a session does with failures that happened before it followed
SUSPENDED = "is stopped (SIGSTOP: a debugger, Ctrl-Z or a job scheduler froze it) and answers no peer"
LOST_AFTER = 30.0  # an elastic run goes on without a host that has not answered for this long after a failure
PROBE_SECONDS = 10.0  # how often an elastic run asks whether a host it went on without answers again
REMOVE_HOST, TAKE_BACK = "remove", "take back"  # what a person may ask of an elastic run's host
REMOVED_BY_YOU = "removed by you"  # why a task left whose host is not asked again (until a person takes it back)
FAILING = "its host caused failure after failure"  # the same, for a host that answers but keeps failing
NOT_ASKED_AGAIN = (REMOVED_BY_YOU, FAILING)


# ============================================================================ judging a failure


@dataclass
class Failure:
    """One task that ended badly, as the session saw it before anything was stopped."""

    task: str
    host: str
    phase: str
    returncode: int | None
    stderr_tail: str = ""
    failed_event: str | None = None  # the trainer's own words (its ``failed`` event)
    stalled: str | None = None       # how it stalled, when the stall watchdog stopped it


@dataclass
class Verdict:
    retryable: bool
    lines: list[str]  # one per failed task: what happened and what to do
    culprits: list[str]  # the hosts of the tasks that failed on their own (not by losing a peer)


def signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


AUTO_PORT_FIX = ("the port was one tfcc chose (port = \"auto\"), taken by another program just before TensorFlow "
                 "bound it; the restart checks the ports again and gives every task new ones where one is taken")


def _auto_port(run, task: str) -> bool:
    """Whether ``task``'s port is one tfcc chooses (``auto``) in ``run``'s cluster (no run known: no)."""
    cluster, placement = getattr(run, "cluster", None), getattr(run, "placement", None)
    if cluster is None or placement is None or not placement.picks_ports:  # a Slurm job's: its job id's
        return False
    names = cluster.task_names()
    return task in names and cluster.tasks[names.index(task)].port == "auto"


def judge(failures: list[Failure], facts=None) -> Verdict:
    """Restart or not, and the words for each failed task.

    A task killed or lost makes the group retryable (the others' errors are its consequence:
    they lost a peer); an error a restart would repeat (a diagnosis says permanent, or a plain
    exit code while nothing was killed) does not. ``facts``: what the diagnosis knows of the user's code
    (``diagnosis.CodeFacts``: the ``Run``).
    """
    lines, culprits = [], []
    killed = retryable_cause = permanent_cause = plain_error = False
    for f in failures:
        # A stalled task was killed by tfcc's own stop: its log may say more than the stall, the kill does not
        # (judged as a plain error exit: a traceback counts, the signal not).
        found = diagnose(f.stderr_tail, 1 if f.stalled else f.returncode, f.failed_event, facts)
        if found is not None and found.name == PORT_IN_USE and _auto_port(facts, f.task):
            # A port tfcc chose, taken in the moment before TensorFlow bound it: no cause of the person's. The
            # restart checks the ports again, and gives every task new ones where one is taken (Run.start).
            found = replace(found, fix=AUTO_PORT_FIX, retryable=True)
        code = f.returncode
        lost_a_peer = (found is not None and found.name in CONSEQUENCES) or (
            found is None and f.failed_event is not None and LOST_PEER in f.failed_event)
        if not lost_a_peer and f.host not in culprits:
            culprits.append(f.host)
        if f.phase == LOST or code is None or code < 0 or code >= 128 or f.stalled:
            killed = True
        if f.stalled:
            lines.append(f"{f.task} on {f.host} {f.stalled}"
                         + (f"; its log says: {found.cause}; {found.fix}" if found else ""))
            if found is not None and found.name not in CONSEQUENCES:
                retryable_cause |= found.retryable
                permanent_cause |= not found.retryable
        elif found is not None:
            lines.append(f"{f.task} on {f.host}: {found.cause}; {found.fix}")
            retryable_cause |= found.retryable
            permanent_cause |= not found.retryable
        elif f.phase == LOST or code is None:
            lines.append(f"{f.task} on {f.host}: its process vanished without an exit status (killed with its "
                         "supervisor, or the host went down)")
        elif code < 0 or code >= 128:
            how = f"killed by {signal_name(code)}" if code < 0 else f"exit code {code} (killed by a signal)"
            lines.append(f"{f.task} on {f.host}: {how}")
        elif f.failed_event and LOST_PEER in f.failed_event:  # the trainer's own word: a peer went away
            retryable_cause = True
            lines.append(f"{f.task} on {f.host}: {f.failed_event}")
        else:
            plain_error = True
            lines.append(f"{f.task} on {f.host}: exit code {code}"
                         + (f": {f.failed_event}" if f.failed_event else "") + "; see tfcc logs for its output")
    retryable = (killed or retryable_cause) and not permanent_cause and not (plain_error and not killed)
    return Verdict(retryable, lines, culprits)


class HostStreaks:
    """How many failures in a row each host has caused: Horovod leaves such a host out; tfcc names it."""

    SAY_AFTER = 2

    def __init__(self):
        self.streak: dict[str, int] = {}

    def failed(self, culprits: list[str]) -> list[tuple[str, int]]:
        """Count a failure caused on ``culprits``; each host now at ``SAY_AFTER`` or more, with its count."""
        self.streak = {host: self.streak.get(host, 0) + 1 for host in culprits}
        return [(host, n) for host, n in self.streak.items() if n >= self.SAY_AFTER]

    @staticmethod
    def words(host: str, n: int) -> str:
        return (f"host {host} caused the last {n} failures in a row: check it (memory, disk, GPU, network; "
                "tfcc check), or move its tasks to another host")


def backoff(restart: int) -> float:
    """Seconds before the ``restart``-th restart (1, 2, …): quick first, then slower."""
    return min(2.0 ** (restart - 1), 30.0)


# ============================================================================ the watchdogs


def waiting_report(run: Run, after: float, stragglers: str = "") -> str | None:
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

    def __init__(self, keep: int = 50, first: float = 0.0):
        self.times: list[float] = []
        self.first = first         # patience before the first step (0: none was waited for)
        self.saving = False        # a backup is being written (after its backing_up event)
        self.keep = keep
        self.last_at: float | None = None  # when its last step arrived (monotonic)
        self.epoch = self.index = None
        self.epoch_end = False
        self.finished = False  # its last epoch is done: what follows is no stall

    def step(self, record: dict, now: float, steps_per_epoch) -> None:
        took = number(record.get("step_time"))
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


def _evaluates(task: TaskState) -> bool:
    """Whether ``task`` is the run's evaluator (a sidecar: no part of training)."""
    return parse_task_name(task.name)[0] == EVALUATOR


# ============================================================================ the supervisor


class Supervisor:
    """The watchdogs and the restart policy of one run, on its session's thread.

    ``say(kind, words)`` tells a supervision event (a SessionKind); ``mark(task, state, words)`` what it says of
    a task now (a Mark); ``follow(tasks)`` follows ``tasks`` again (every task: None) as the current attempt's;
    ``drain()`` handles what the follows have queued (the ends of the tasks a restart stopped).
    """

    def __init__(self, run: Run, *, say: Callable[[str, str], None], mark: Callable[[TaskState, str, str], None],
                 follow: Callable[[list | None], None], drain: Callable[[], None], watchdog: float = WATCHDOG_SECONDS,
                 restarts: int | None = None, found_failures: str = RESTART):
        self.run = run
        self._say, self._mark, self._follow, self._drain = say, mark, follow, drain
        self.watchdog = watchdog
        self.found_failures = found_failures
        # Group restarts left for retryable failures (default: the cluster file's max_restarts).
        self.restarts_left = run.cluster.training.max_restarts if restarts is None else restarts
        self.attempt = 1
        self.restarting = False                  # stopping, judging or relaunching after a failure
        self.stopping_why: str | None = None     # why tfcc itself stops the tasks now (their ends say it)
        self.given_up = False
        self.stop_requested = False              # someone asked for the stop: its ends are no failures
        self.warned = False                      # the startup watchdog spoke
        self.stall_floor = STALL_FLOOR
        self.stragglers = ""                     # the tasks TensorFlow said it still waits for
        self.wake = threading.Event()            # ends the pause before a restart: a stop or a detach
        self._failed: list[TaskState] = []       # tasks of this attempt that ended badly, not yet judged
        self._failed_event: dict[str, str] = {}  # task -> the trainer's own words for its failure
        self._pace: dict[str, Pace] = {}         # task -> its step times (the stall watchdog)
        self._stalled: dict[str, str] = {}       # task -> how it stalled
        self._diverged: set[str] = set()         # tasks whose loss went non-finite (said once)
        self._stop_for_nan = False               # the run stops at its first non-finite loss (training.stop_on_nan)
        self._servers_done = False               # a parameter-server run's coordinator finished: end its servers
        self._resumed: set = set()               # attempts whose resumption was said
        self._hosts = HostStreaks()
        self._steps_per_epoch: dict[str, int] = {}
        self._epochs: dict[str, float] = {}      # task -> how many epochs it trains (its started event)
        self._stderr_from: dict[str, int] = {}   # task -> where its stderr's current attempt begins
        # A user's script (its capture says so in its launched event): its stall clock starts at its first timed
        # step, never before (what it does before, and between fit calls, is its own), and waits at least the
        # startup watchdog's time.
        self._captured: set[str] = set()
        self._opened = time.monotonic()
        self._opened_at = time.time()  # failures that ended before this were found, not seen
        # An elastic run (training.elastic): how long a host may not answer before the run goes on without it,
        # and the hosts it went on without that answer again (they rejoin at the next backup).
        self.lost_after = LOST_AFTER
        self.probe_seconds = PROBE_SECONDS
        self._back: set[str] = set()
        self._asked: list[tuple[str, str]] = []  # a person's asks, (REMOVE_HOST | TAKE_BACK, host), for the next tick
        self._probing: dict[str, threading.Thread] = {}
        self._probed = 0.0
        self._grow_due = False
        self._backups: dict[str, object] = {}  # task -> the global step of its newest backup this attempt
        self.backed_up_once = False  # some task wrote a backup while this session followed
        self.code_failed = False     # it gave up on a failure a restart would repeat (the code, its settings)

    def _start_again(self, resume: str) -> str:
        """After a failure a restart would repeat: what to do. A user's script is started anew once fixed (it
        has no backup of tfcc's to go on from; a person's resume would ship the fixed code, and says so);
        tfcc's trainer takes up its backups (``resume``)."""
        if self.run.cluster.training.user_code:
            return ("fix the cause above, then start the run again with the fixed code (tfcc run with its cluster "
                    "file, or Deploy & Start)")
        return f"fix the cause above, then {resume}"

    @property
    def settled(self) -> bool:
        """Every task has ended and nothing more is to be done (it gave up, or nothing failed)."""
        return all(t.ended for t in self.run.tasks) and not self.restarting and (self.given_up or not self._failed)

    # ------------------------------------------------------------ what the tasks report

    def launched(self, task: TaskState, script: bool) -> None:
        """A task's launch (the newest counts: a resumed run has several); ``script``: a user's, captured."""
        if script:
            self._captured.add(task.name)
        self._failed_event.pop(task.name, None)  # an earlier attempt's error is no cause now

    def formed(self, task: TaskState) -> None:
        """``task``'s cluster has formed: from now on the stall clock runs (until its first step: building the
        model, agreeing on the backup, tracing, it gets the startup watchdog's time)."""
        if task.name in self._captured:  # its stall clock starts at its first timed step
            self._pace.pop(task.name, None)
            return
        self._pace[task.name] = Pace(first=max(self.watchdog, self.stall_floor))
        self._pace[task.name].last_at = time.monotonic()

    def started(self, task: TaskState, record: dict) -> None:
        self._steps_per_epoch[task.name] = record.get("steps_per_epoch")
        self._epochs[task.name] = number(record.get("epochs"))

    def backing_up(self, task: TaskState) -> None:
        if task.name in self._pace:
            self._pace[task.name].saving = True  # a save of a big model can take long: no stall

    def backed_up(self, task: TaskState, record: dict) -> None:
        """A backup is on disk: once every training task has the same one, the moment an elastic run takes back
        the hosts that answer again."""
        self._backups[task.name] = record.get("global_step")
        self.backed_up_once = True
        if self._back and self.run.left:
            steps = {self._backups.get(t.name) for t in self._training_members()}
            # The backup at training's end leaves nothing to train on more tasks.
            end = number(self._steps_per_epoch.get(task.name)) * self._epochs.get(task.name, math.inf)
            self._grow_due = len(steps) == 1 and None not in steps and number(record.get("global_step")) < end

    def failed_event(self, task: TaskState, record: dict) -> None:
        self._failed_event[task.name] = str(record.get("error") or "")

    def fit(self, task: TaskState, running: bool) -> None:
        """A script's fit began (``running``) or ended: what it does between fits is its own."""
        pace = self._pace.get(task.name)
        if pace is None:
            return
        pace.finished = not running
        if running:
            pace.last_at = time.monotonic()

    def resumed(self, record: dict) -> None:
        """An attempt took up training at its backup: said once for the run."""
        if record.get("attempt") not in self._resumed:
            self._resumed.add(record.get("attempt"))
            self._say(SessionKind.RESUMED, f"run {self.run.run_id}: {text.resumed_text(record)}")

    def step(self, task: TaskState, step: dict) -> None:
        """A step of ``task``: the stall watchdog's clock, and the alert for a first non-finite loss."""
        # A script's steps from fit keep a pace; its printed, summary or scheduled values do not (what a
        # loop does between them, an evaluation, a save, is its own).
        timed = math.isfinite(number(step.get("step_time"))) and CAPTURED not in step
        if timed or task.name not in self._captured:
            pace = self._pace.get(task.name)
            if pace is None:
                pace = self._pace[task.name] = Pace()
            pace.step(step, time.monotonic(), self._steps_per_epoch.get(task.name))
        if "loss" not in step and "loss_avg" not in step:
            return  # a record without a loss (a user's own metrics only) says nothing of divergence
        loss = number(step.get("loss", step.get("loss_avg")))
        if not math.isfinite(loss) and task.name not in self._diverged:
            self._diverged.add(task.name)
            self._say(SessionKind.ALERT, f"{task.name}: the loss is {text.metric_text(loss)} at epoch "
                                         f"{text.count(step.get('epoch'))} step {text.count(step.get('step'))}: "
                                         "training diverged (lower the learning rate, or look at the data)")
            if self.run.cluster.training.stop_on_nan and not self.stop_requested:
                self._stop_for_nan = True

    def epoch(self, task: TaskState, record: dict) -> None:
        pace = self._pace.get(task.name)
        if pace is None:
            return
        pace.epoch_done(time.monotonic())
        # After the last epoch come the model's save and the end: no more steps to wait for.
        pace.finished = number(record.get("epoch")) + 1 >= self._epochs.get(task.name, math.inf)

    def ended(self, task: TaskState, message: dict, words: str) -> None:
        """``task``'s process ended (its phase says how; ``message``: its agent's end)."""
        if self._coordinates(task) and (task.phase == FINISHED or self.given_up or self.stop_requested):
            self._servers_done = True  # parameter-server training is over: its servers end now
        if task.phase in (FAILED, LOST) and not (message.get("stopped") or self.stop_requested):
            self._failed.append(task)  # not a stop that someone asked for (here or with tfcc stop)
            if task.name not in self._stalled:  # until the diagnosis comes
                code = (task.exit or {}).get("returncode")
                self._mark(task, Mark.FAILED, f"exit code {code}" if code is not None else words)

    # ------------------------------------------------------------ after each batch

    def tick(self) -> None:
        """What the session's thread does after each batch: the watchdogs, and supervision when a task failed."""
        for step in (self._check_stalls, self._stop_at_nan, self._end_servers, self._supervise,
                     self._check_watchdog, self._on_asks, self._probe_the_left, self._grow):
            try:
                step()
            except Exception:
                log.exception("%s of run %s", step.__name__, self.run.run_id)

    def _check_watchdog(self) -> None:
        # A session that attaches to a run gives its cluster the same time from now: the replay of
        # an old run's history is no wait, whenever its tasks started.
        if self.warned or time.monotonic() - self._opened < self.watchdog:
            return
        report = waiting_report(self.run, self.watchdog, self.stragglers)
        if report:
            self.warned = True
            self._say(SessionKind.WATCHDOG, report)

    def _check_stalls(self) -> None:
        """A training task with no new step for far longer than its steps take is stalled (a stopped
        process, a hung collective, a host that no longer answers): a failure like any other."""
        if self.given_up or self._failed:
            return
        now = time.monotonic()
        for task in self.run.tasks:
            pace = self._pace.get(task.name)
            if task.phase != TRAINING or pace is None or pace.last_at is None or pace.finished:
                continue
            silent = now - pace.last_at
            floor = max(self.stall_floor, self.watchdog) if task.name in self._captured else self.stall_floor
            if silent > pace.patience(floor):
                pace.last_at = None  # said once: what follows is the supervisor's
                why = self._why_silent(task) or ("it may wait for a collective that a peer never joined, "
                                                 "or its host is overloaded")
                self._stall(task, f"made no step for {silent:.0f} s (its steps took {pace.median():.2f} s; its "
                                  f"last was epoch {text.count(pace.epoch)} step {text.count(pace.index)}): {why}")
                self._failed.append(task)
                return

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
        for losing them: name each as what stalled, before the stop ends them."""
        for task in self.run.tasks:
            if task in failed or task.ended or task.phase == STARTING:
                continue
            if self._why_silent(task) == SUSPENDED:
                pace = self._pace.get(task.name)
                last = (f"; its last step was epoch {text.count(pace.epoch)} step {text.count(pace.index)}"
                        if pace is not None and pace.index is not None else "; it made no step yet")
                self._stall(task, f"{SUSPENDED}{last}")
                failed.append(task)

    def _stop_at_nan(self) -> None:
        """The run's own choice (training.stop_on_nan): no more steps after a non-finite loss."""
        if not self._stop_for_nan:
            return
        self._stop_for_nan = False
        self.stop_requested = True
        self.given_up = True
        self.run.stop(grace=5)
        self._say(SessionKind.GAVE_UP, f"run {self.run.run_id} stopped at its first non-finite loss, as its "
                                       "stop_on_nan asks; lower the learning rate or look at the data, then start a "
                                       "new run (the newest backups may hold the diverged weights)")

    def _coordinates(self, task: TaskState) -> bool:
        """Whether ``task`` is the coordinator (the chief) of a parameter-server run."""
        return task.name == task_name(CHIEF, 0) and self.run.cluster.parameter_server

    def _coordinator_finished(self) -> bool:
        """A parameter-server run whose chief finished: what its servers do now is no failure."""
        return any(self._coordinates(t) and t.phase == FINISHED for t in self.run.tasks)

    def _end_servers(self) -> None:
        """The coordinator finished: its workers and ps serve on until told (SIGTERM ends them well); an
        evaluator ends by itself after the last checkpoint (when training was given up: now)."""
        if not self._servers_done:
            return
        self._servers_done = False
        finished = self._coordinator_finished()
        servers = [t for t in self.run.tasks if not t.ended and not (finished and _evaluates(t))]
        # After a finished chief this stop is how they end: they end finished (else the run's stop).
        unstopped = self.run.stop_each(grace=10, only=servers, done=finished)
        if unstopped:
            self._say(SessionKind.FAILURE, f"run {self.run.run_id} finished, but its servers on "
                                           f"{', '.join(unstopped)} did not answer; tfcc stop {self.run.run_id} "
                                           "once they do")

    # ------------------------------------------------------------ a failure: judge, restart or give up

    def _supervise(self) -> None:
        """A task of this attempt ended badly: stop the rest for sure, judge, and restart every task
        from their backups when that can help and the budget allows; else the run ends here."""
        if not self._failed:
            return
        failed, self._failed = self._failed, []
        if self.given_up or self.stop_requested or self._coordinator_finished():
            return  # no (more) supervision: the run ends as its tasks do
        # (A Slurm job's step ends every task with one: its restart is always the group's.)
        if self.run.cluster.parameter_server and self.run.placement.relaunches_one and \
                all((parse_task_name(t.name)[0] == WORKER or _evaluates(t)) and not self._stalled.get(t.name)
                    for t in failed):
            self._relaunch_workers(failed)
            return
        self.restarting = True
        try:
            self._restart_after(failed)
        finally:
            self.restarting = False

    def _restart_after(self, failed: list[TaskState]) -> None:
        self._name_the_suspended(failed)
        # A task may ignore SIGTERM (a script's own handler; TensorFlow's, in a script run without the capture):
        # SIGKILL soon after. Every follow of this attempt
        # must deliver its end: one still reconnecting to a host would read beside the next attempt's.
        with self._stopping(text.STOPPED_WITH_GROUP):
            unstopped = self.run.stop_each(grace=2)
            lost: list[TaskState] = []
            found = self._lost(unstopped) if unstopped and self.elastic else None
            if found is not None:  # a host lost for good: its tasks move to a spare, or the run goes on without them
                unstopped, lost = self._replace_lost(found)
            if not self.run.wait(60):
                unstopped = unstopped or [t.host for t in self.run.members if not t.ended]
            self._drain()  # the other tasks' ends: those that failed on their own are judged with the first
        failed += [t for t in self._failed if t not in failed]
        self._failed = []
        verdict = self._judge([t for t in failed if t.name not in self.run.left])
        gone = {t.host for t in lost}
        for host, count in self._hosts.failed([h for h in verdict.culprits if h not in gone]):
            words = HostStreaks.words(host, count)
            why = f"{FAILING} (the last {count} in a row)"
            # A coordinator that answers keeps its backups on its host: it is not moved (training would start over).
            coordinator = any(self._coordinates(t) for t in self.run.members if t.host == host)
            if self.elastic and verdict.retryable and self.run.spares() and not coordinator:
                self._say(SessionKind.HOST_FAILING, words + "; its tasks move to a spare host")
                self._move(host, self.run.spares()[0], why.replace("its host", host))
            elif self.elastic and verdict.retryable and self._can_leave(host):
                self._say(SessionKind.HOST_FAILING, words + "; the run goes on without it")
                self._leave([t for t in self.run.members if t.host == host], why,
                            again="once you take it back (right click on its task in the diagram), once fixed")
            else:
                self._say(SessionKind.HOST_FAILING, words)
        run_id = self.run.run_id
        if self.found_failures == OFFER and all(self._ended_before_following(t) for t in failed):
            self.given_up = True  # a person decides: the window offers Resume
            self._say(SessionKind.OFFERED, f"run {run_id} failed while no console followed it; "
                                           + ("Resume starts every task again from their backups" if verdict.retryable
                                              else self._start_again("Resume starts every task again from their "
                                                                     "backups")))
            return
        retryable = verdict.retryable or bool(lost) or bool(self.run.moved)
        self.given_up = not retryable or self.restarts_left <= 0 or bool(unstopped)
        if unstopped:  # a restart beside a task that may still run would make two of it
            hosts = ", ".join(sorted(set(unstopped)))
            self._say(SessionKind.GAVE_UP, f"run {run_id} failed and its tasks on {hosts} could not be stopped for "
                                           f"sure (no answer); once {hosts} answers: tfcc stop {run_id}, then "
                                           f"tfcc resume {run_id}" + self._shrink_hint(unstopped))
            return
        if not retryable:
            self.code_failed = True
            self._say(SessionKind.GAVE_UP, f"run {run_id} failed; a restart would fail the same way: "
                                           + self._start_again(f"tfcc resume {run_id}"))
            return
        if self.restarts_left <= 0:
            self._say(SessionKind.GAVE_UP, (f"run {run_id} failed again after {self.attempt - 1} restart(s), the "
                                            "most its max_restarts allows" if self.attempt > 1 else
                                            f"run {run_id} failed and its max_restarts is 0 (no restarts)")
                      + f"; fix the cause above, then tfcc resume {run_id}")
            return
        delay = backoff(self.attempt)
        self._say(SessionKind.RESTARTING, f"restarting every task of run {run_id} from its last backup in "
                                          f"{delay:.0f} s (restart {self.attempt} of at most "
                                          f"{self.attempt - 1 + self.restarts_left})")
        if self.wake.wait(delay) or self.stop_requested:  # detached, or someone asked to stop meanwhile
            self.given_up = True
            return
        self.restarts_left -= 1
        self._next_attempt(f"restart {self.attempt}: from the newest common backup",
                           "attempt {attempt} started, from the newest backup every task has")

    def _next_attempt(self, mark: str, started: str, fallback=None) -> bool:
        """Start every task of the run again from their backups (a restart, or an elastic run's change of size);
        ``mark``: what each task shows meanwhile; ``started``: what is said once they started (``{attempt}``
        filled in); ``fallback(error)``: when the start fails, what may change before one more try (whether to
        try). Whether they started."""
        run_id = self.run.run_id
        self.attempt += 1
        self._backups.clear()
        for task in self.run.members:
            self._mark(task, Mark.RESTARTING, mark)
        self._relaunching(self.run.members)
        self._pace.clear()
        self._opened = time.monotonic()  # the watchdog gives the new attempt its own time
        self.warned = False
        try:
            try:
                self.run.start(resume=True)
            except TfccError as exc:
                if fallback is None or not fallback(exc):
                    raise
                log.warning("run %s: %s; starting on the others", run_id, exc)
                self.run.start(resume=True)
        except TfccError as exc:
            self.given_up = True
            self._say(SessionKind.GAVE_UP, f"run {run_id} could not be restarted: {exc}")
            for task in self.run.members:
                task.change(FAILED)
            return False
        self._follow(None)
        if self.stop_requested:  # Stop came while the tasks were starting: they stop too
            self.given_up = True
            self.run.stop_each(grace=2)
            return False
        attempt = max((t.attempt for t in self.run.members), default=self.attempt)
        ports = f" ({self.run.ports_changed})" if self.run.ports_changed else ""
        if self.run.seeded is not None:
            self._say(SessionKind.SEEDED, f"run {run_id}: {text.seeded_text(self.run.seeded)}")
        self._say(SessionKind.RESTARTED, f"run {run_id}: {started.format(attempt=attempt)}{ports}")
        return True

    # ------------------------------------------------------------ an elastic run: shrink and grow

    @property
    def elastic(self) -> int:
        """The fewest training tasks the run may go on with (training.elastic; 0: it never changes size)."""
        return self.run.cluster.training.elastic

    def _training_members(self, without: str = "") -> list[TaskState]:
        return [t for t in self.run.members if parse_task_name(t.name)[0] in TRAINING_ROLES and t.host != without]

    def _can_leave(self, host: str) -> bool:
        """Whether the run keeps at least its ``elastic`` training tasks without ``host``'s (parameter-server
        training moves a lost host's tasks, never goes on without them: its coordinator or a ps is needed)."""
        return not self.run.cluster.parameter_server and len(self._training_members(without=host)) >= self.elastic

    def _shrink_hint(self, hosts: list[str]) -> str:
        if not self.elastic:
            return ""
        if self.run.cluster.parameter_server:
            return f"; no spare host was left to move {', '.join(sorted(set(hosts)))}'s tasks to"
        return (f"; the run could not go on without {', '.join(sorted(set(hosts)))}: fewer than its elastic "
                f"{self.elastic} training tasks would be left, and no spare host")

    def _lost(self, unstopped: list[str]) -> list[str] | None:
        """The hosts in ``unstopped`` that still do not answer a stop after ``lost_after`` s (asked again
        meanwhile): lost for good (None: a detach or a stop came meanwhile)."""
        deadline = time.monotonic() + self.lost_after
        hosts = set(unstopped)
        while hosts and time.monotonic() < deadline:
            if self.wake.wait(min(2.0, max(0.0, deadline - time.monotonic()))) or self.stop_requested:
                return None  # detached or stopped meanwhile: nothing is decided
            tasks = [t for t in self.run.members if t.host in hosts]
            hosts = set(self.run.stop_each(grace=2, only=tasks))
        return sorted(hosts)

    def _replace_lost(self, hosts: list[str]) -> tuple[list[str], list[TaskState]]:
        """Each host lost for good: its tasks move to a spare host when one is listed, else the run goes on
        without them when it keeps its ``elastic`` training tasks. The hosts neither could help (their tasks may
        still run there: no restart beside them), and the tasks that left."""
        kept, left = [], []
        why = f"its host did not answer for {self.lost_after:.0f} s after the failure"
        for host in hosts:
            tasks = [t for t in self.run.members if t.host == host]
            spares = self.run.spares()
            if spares:
                self._move(host, spares[0], why.replace("its host", host))
            elif self._can_leave(host):
                self._leave(tasks, why)
                left += tasks
            else:
                kept.append(host)
        return kept, left

    def _move(self, host: str, spare: str, why: str) -> None:
        """Every task of the lost ``host`` runs on ``spare`` from the next attempt (said, and shown on each)."""
        moved = self.run.move(host, spare, why)
        names = ", ".join(t.name for t in moved)
        coordinator = any(self._coordinates(t) for t in moved)
        starts_over = (f"; {names} start{'s' if len(moved) == 1 else ''} there afresh"
                       + (" (the coordinator's backups were on that host: training starts over)" if coordinator
                          else ""))
        for task in moved:
            self._mark(task, Mark.RESTARTING, f"moved to the spare host {spare} ({why})")
        self._say(SessionKind.RESIZED, f"run {self.run.run_id}: {names} moved from {host} to the spare host {spare} "
                                       f"({why}){starts_over}")

    def _leave(self, tasks: list[TaskState], why: str, again: str = "") -> None:
        """The run goes on without ``tasks`` (said, and shown on each); they rejoin at a backup once their host
        answers again (``again``: when else)."""
        hosts = sorted({t.host for t in tasks})
        self.run.leave(tasks, why)
        self._back -= set(hosts)
        for task in tasks:
            self._mark(task, Mark.LEFT, why)
        self._say(SessionKind.RESIZED, f"run {self.run.run_id} goes on with {len(self._training_members())} "
                                       f"training tasks: {', '.join(f'{t.name} on {t.host}' for t in tasks)} left "
                                       f"the run ({why}); the same global batch is split over the tasks left; "
                                       f"{'they rejoin' if len(tasks) > 1 else 'it rejoins'} at the next backup "
                                       + (again or f"once {', '.join(hosts)} answers again"))

    # ------------------------------------------------------------ a person's remove and take back

    def removal_problem(self, host: str) -> str | None:
        """Why the run cannot go on without ``host`` now (one line that says what to do), or None."""
        if not self.elastic:
            return ("the run is not elastic: set training.elastic in its cluster file (the fewest training tasks "
                    "it goes on with) for a new run")
        if not any(t.host == host for t in self.run.members):
            return (f"no task of the run runs on {host} (it runs on "
                    f"{', '.join(sorted({t.host for t in self.run.members}))})")
        if self.run.cluster.parameter_server:
            return ("parameter-server training does not go on without a host's tasks: stop the run, move them in "
                    "its cluster file and start a new run (a lost ps or chief host moves to a spare by itself)")
        if not self._can_leave(host):
            return (f"without {host} the run would have fewer than its elastic {self.elastic} training tasks; "
                    "take out another host, or lower elastic in the cluster file of a new run")
        if self.given_up or self.stop_requested or all(t.ended for t in self.run.members):
            return "the run has ended or is stopping: start a new run without it"
        return None

    def ask(self, what: str, host: str) -> None:
        """A person asks (any thread): ``REMOVE_HOST`` (the run goes on without it, now) or ``TAKE_BACK`` (one it
        goes on without, at the next backup once it answers); done on the session's thread at its next tick."""
        self._asked.append((what, host))

    def _on_asks(self) -> None:
        while self._asked:
            what, host = self._asked.pop(0)
            if what == TAKE_BACK:
                for task in self.run.tasks:
                    if task.host == host and self.run.left.get(task.name, "").startswith(NOT_ASKED_AGAIN):
                        self.run.mark_left(task.name, "taken back by you: it rejoins at the next backup")
                self._probed = 0.0  # ask it now
                continue
            problem = self.removal_problem(host)
            if problem or self.restarting:
                self._say(SessionKind.ALERT, f"run {self.run.run_id}: cannot go on without {host}: "
                                             f"{problem or 'a restart is under way; ask again once it is done'}")
                continue
            self.restarting = True
            try:
                unstopped = self._stop_for_resize()
                leaving = [t for t in self.run.members if t.host == host]
                if [h for h in unstopped if h != host]:
                    self.given_up = True
                    self._say(SessionKind.GAVE_UP, f"run {self.run.run_id}: its tasks on {', '.join(unstopped)} "
                                                   f"could not be stopped to go on without {host}; once they answer: "
                                                   f"tfcc stop {self.run.run_id}, then tfcc resume {self.run.run_id}")
                    return
                self._leave(leaving, REMOVED_BY_YOU, again="once you take it back")
                self._next_attempt(f"going on without {host}: restarting on {len(self._training_members())} "
                                   "training tasks",
                                   f"attempt {{attempt}} started on {len(self._training_members())} training tasks, "
                                   f"without {host}")
            finally:
                self.restarting = False

    @contextmanager
    def _stopping(self, why: str):
        """While tfcc itself stops the run's tasks: the words their ends say (``stopping_why``)."""
        self.stopping_why = why
        try:
            yield
        finally:
            self.stopping_why = None

    def _stop_for_resize(self) -> list[str]:
        """Stop every member before the run restarts with other members: their ends say ``stopped`` (no failure to
        judge); the hosts that did not answer."""
        with self._stopping(text.STOPPED_FOR_RESIZE):
            unstopped = self.run.stop_each(grace=10)
            self.run.wait(60)
            self._drain()
        self._failed = []
        return unstopped

    def _probe_the_left(self) -> None:
        """Ask, now and then, each host the run went on without whether it answers again (on a thread of its own:
        a host that does not answer holds nobody up)."""
        if (not self.run.left or self.given_up or self.stop_requested or self.restarting
                or time.monotonic() - self._probed < self.probe_seconds):
            return
        self._probed = time.monotonic()
        hosts = {t.host for t in self.run.tasks if t.name in self.run.left
                 and not self.run.left[t.name].startswith(NOT_ASKED_AGAIN)} - self._back
        for host in sorted(hosts):
            if host in self._probing and self._probing[host].is_alive():
                continue
            thread = threading.Thread(target=self._probe, args=(host,), name=f"tfcc-probe-{host}", daemon=True)
            self._probing[host] = thread
            thread.start()

    def _probe(self, host: str) -> None:
        try:
            self.run.links[host].connect()
        except Exception as exc:  # any failure: it does not answer yet
            log.info("run %s: host %s does not answer yet (%s)", self.run.run_id, host, exc)
            self.run.links[host].drop()
            return
        log.info("run %s: host %s answers again", self.run.run_id, host)
        self._back.add(host)

    def _grow(self) -> None:
        """A backup was just made and hosts the run went on without answer again: the run restarts with their
        tasks too, from that backup (copied to them first)."""
        if not self._grow_due:
            return
        self._grow_due = False
        if self.given_up or self.stop_requested or self.restarting or self._failed:
            return
        joining = [t for t in self.run.tasks if t.name in self.run.left and t.host in self._back]
        if not joining:
            return
        if any(not t.cluster_formed or t.ended for t in self.run.members):
            return  # an attempt still forming, or ending: the next backup
        hosts = sorted({t.host for t in joining})
        self.restarting = True
        try:
            # What ran there before it was lost may still run (a network cut off, not a host down): stopped first.
            if self.run.stop_each(grace=2, only=joining):
                self._back -= set(hosts)
                log.info("run %s: %s answered, then not: not taken back yet", self.run.run_id, ", ".join(hosts))
                return
            words = f"{', '.join(hosts)} answers again"
            self._say(SessionKind.RESIZED, f"run {self.run.run_id}: {words}: restarting with "
                                           f"{', '.join(t.name for t in joining)} again from the backup just made")
            unstopped = self._stop_for_resize()
            if unstopped:
                self.given_up = True
                self._say(SessionKind.GAVE_UP, f"run {self.run.run_id}: its tasks on {', '.join(unstopped)} could "
                                               f"not be stopped to take {', '.join(hosts)} back; once they answer: "
                                               f"tfcc stop {self.run.run_id}, then tfcc resume {self.run.run_id}")
                return
            self._back -= set(hosts)
            self.run.rejoin(joining, words)

            def without_them(exc: TfccError) -> bool:
                """They answered, then could not start: the run goes on without them again (asked anew later)."""
                self._leave(joining, f"it could not be started again ({exc.cause})")
                return True

            self._next_attempt(f"{words}: restarting on {len(self._training_members())} training tasks",
                               f"attempt {{attempt}} started on {len(self._training_members())} training tasks, "
                               "from the backup just made", fallback=without_them)
        finally:
            self.restarting = False

    def _relaunch_workers(self, failed: list[TaskState]) -> None:
        """Parameter-server training goes on without a worker (the coordinator re-queues its steps and
        waits for it) or its evaluator: only that task is started again (the coordinator takes a worker
        back; the evaluator goes on from the newest checkpoint)."""
        verdict = self._judge(failed)
        names = ", ".join(t.name for t in failed)
        sidecar = all(_evaluates(t) for t in failed)
        run_id = self.run.run_id
        why = "the cause would repeat" if not verdict.retryable else "max_restarts used up"
        if sidecar and (not verdict.retryable or self.restarts_left <= 0):
            self._say(SessionKind.GAVE_UP, f"run {run_id}: {names} not started again ({why}); training goes on "
                                           "without evaluation: fix the cause, then a new run")
            return
        if not verdict.retryable or self.restarts_left <= 0:
            self.given_up = True  # the coordinator waits for the worker; when it fails, its servers end too
            self._say(SessionKind.GAVE_UP, f"run {run_id}: {names} not started again ({why}); the coordinator "
                                           f"waits for it up to an hour: fix the cause, then tfcc stop {run_id} and "
                                           f"tfcc resume {run_id}")
            return
        self.restarts_left -= 1
        how = ("it goes on from the newest checkpoint" if sidecar else
               "training went on without it; the coordinator takes it back")
        for task in failed:
            self._mark(task, Mark.RESTARTING, f"started again; {how}")
        self._relaunching(failed)
        try:
            self.run.relaunch(failed)
        except TfccError as exc:
            self.given_up = True
            self._say(SessionKind.GAVE_UP, f"run {run_id}: {names} could not be started again: {exc}")
            return
        self._follow(failed)
        chief = task_name(CHIEF, 0)
        if chief in self._pace:  # with one worker the coordinator makes no step until it is back
            self._pace[chief] = Pace(first=max(self.watchdog, self.stall_floor))
            self._pace[chief].last_at = time.monotonic()
        self._say(SessionKind.RESTARTED, f"run {run_id}: {names} started again, {how}")

    def _judge(self, failed: list[TaskState]) -> Verdict:
        """The verdict on ``failed``, its line for each task said (and shown on the task)."""
        verdict = judge([self._failure(t) for t in failed], self.run)
        for task, line in zip(failed, verdict.lines):
            self._mark(task, Mark.FAILED, line)  # first: a listener of the event finds the state said
            self._say(SessionKind.FAILURE, line)
        return verdict

    def _relaunching(self, tasks: list[TaskState]) -> None:
        """``tasks`` start again: a new launch, and their stderr so far (all of it was read) is the old one's."""
        for task in tasks:
            task.relaunch()
            self._stderr_from[task.name] = task.offsets[STDERR]
        self.stragglers = ""

    def _ended_before_following(self, task: TaskState) -> bool:
        ended = number((task.exit or {}).get("ended"))
        return math.isfinite(ended) and ended < self._opened_at

    def stderr_tail(self, task: TaskState) -> str:
        """The end of this attempt's part of ``task``'s stderr: an earlier attempt's errors are no cause now."""
        try:
            client = self.run.links[task.host].connect()
            status = client.call(STATUS, run_id=self.run.run_id, task=task.name)
            size = status["sizes"].get(STDERR, 0)
            begun = max(self._stderr_from.get(task.name, 0), status.get("stderr_from") or 0)
            fresh = size - begun
            if fresh > 0:
                return client.call(LOGS, run_id=self.run.run_id, task=task.name,
                                   max_bytes=min(8000, fresh))["logs"].get(STDERR, "")
        except TfccError as exc:
            log.info("no log of %s: %s", task.name, exc)
        return ""

    def _failure(self, task: TaskState) -> Failure:
        return Failure(task.name, task.host, task.phase, (task.exit or {}).get("returncode"),
                       self.stderr_tail(task), self._failed_event.pop(task.name, None),
                       self._stalled.pop(task.name, None))

    def look_at_a_finished(self, task: TaskState) -> None:
        """A task that exited 0 can still have gone wrong in a way worth saying (its data ran out, it
        could not use its GPUs): the diagnosis's signatures for a clean exit, as an alert."""
        found = diagnose(self.stderr_tail(task), 0)
        if found is not None:
            self._say(SessionKind.ALERT, f"{task.name} on {task.host} finished, but {found.cause}; {found.fix}")
