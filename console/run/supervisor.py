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
import threading
import time
from contextlib import contextmanager
from typing import Callable

from agent.protocol import FAILED, FINISHED, LOST, STDERR, parse_task_name, task_name
from console import text
from console.errors import TfccError
from console.run.elastic import FAILING, LOST_AFTER, PROBE_SECONDS, Due, Elastic
from console.run.judging import HostStreaks, Judging, backoff
from console.run.runner import Run
from console.run.watchdogs import STALL_FLOOR, WATCHDOG_SECONDS, Pace, Watchdogs, evaluates
# What the session, the window and the tests take from here (each declared in its own room):
from console.run.elastic import REMOVE_HOST, TAKE_BACK  # noqa: F401,E402
from console.run.judging import Failure, judge  # noqa: F401,E402
from console.run.watchdogs import SUSPENDED, waiting_report  # noqa: F401,E402
from console.states import GaveUp, Leave, Left, Mark, SessionKind, Supervision, TaskState
from trainer.records import CAPTURED, GLOBAL_STEP, LOSS, LOSS_AVG, number, step_loss
from trainer.tf_config import CHIEF, WORKER

log = logging.getLogger("console.run.supervisor")

# What a session does with failures that happened before it followed: restart them as max_restarts says, offer the
# restart (a person decides), or, replaying a run's history, only say them: a replay never acts on the run's tasks
# (they may run again meanwhile: a person's resume).
RESTART, OFFER, REPLAY = "restart", "offer", "replay"


# ============================================================================ the supervisor


class Supervisor(Judging, Watchdogs, Elastic):
    """The watchdogs and the restart policy of one run, on its session's thread.

    What it is doing is one state (a ``console.states.Supervision``), set only by ``change`` against the table's
    edges; ``transition`` (the session calls it after each batch) holds every automatic edge.

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
        self.acts = found_failures != REPLAY  # stops, starts, resizes the run (a replay judges and says only)
        # Group restarts left for retryable failures (default: the cluster file's max_restarts).
        self.restarts_left = run.cluster.training.max_restarts if restarts is None else restarts
        self.attempt = 1
        self._state = Supervision.WATCHING
        self._changing = threading.Lock()        # the door: a person's stop comes on another thread
        self.listeners: list[Callable[[str, str], None]] = []  # told (old, new) at each change
        self.gave_up_because: str | None = None  # a GaveUp, once given up
        self._due: set[str] = set()              # automatic work a report made due (a Due), for ``transition``
        self.stopping_why: str | None = None     # why tfcc itself stops the tasks now (their ends say it)
        self._watchdog_said = 0                  # the attempt whose forming the startup watchdog spoke of
        self.stall_floor = STALL_FLOOR
        self.stragglers = ""                     # the tasks TensorFlow said it still waits for
        self.wake = threading.Event()            # ends the pause before a restart: a stop or a detach
        self._failed: list[TaskState] = []       # tasks of this attempt that ended badly, not yet judged
        self._failed_event: dict[str, str] = {}  # task -> the trainer's own words for its failure
        self._pace: dict[str, Pace] = {}         # task -> its step times (the stall watchdog)
        self._stalled: dict[str, str] = {}       # task -> how it stalled
        self._located: list = []                 # (when, console.hangs.Report): the stall watchdog's newest asks
        self._located_at = -math.inf
        self._hangs: dict[int, tuple] = {}       # attempt -> the places in the user's code where it hung
        self._diverged: set[str] = set()         # tasks whose loss went non-finite (said once)
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
        self._backups: dict[str, object] = {}  # task -> the global step of its newest backup this attempt
        self.backups_seen = 0  # backups written while this session followed

    # ------------------------------------------------------------ the state: one door

    @property
    def state(self) -> str:
        return self._state

    def change(self, new: str, only_from: str | None = None, unless: tuple = ()) -> bool:
        """The one door: move to ``new`` (a Supervision) along an edge of ``Supervision.EDGES`` and tell the
        listeners; with ``only_from``, only from that state (a restart's end does not undo a stop that came
        meanwhile); never from a state in ``unless``. Checked and moved at once (a person's stop comes on another
        thread). Whether it moved; an edge the table lacks is a bug (ValueError)."""
        with self._changing:
            old = self._state
            if old == new or old in unless or (only_from is not None and old != only_from):
                return False
            if new not in Supervision.EDGES[old]:
                raise ValueError(f"run {self.run.run_id}: supervision cannot go from {old} to {new}")
            self._state = new
        log.info("run %s: supervision %s -> %s", self.run.run_id, old, new)
        for listener in list(self.listeners):
            try:
                listener(old, new)
            except Exception:
                log.exception("a listener of run %s's supervision", self.run.run_id)
        return True

    def give_up(self, because: str = GaveUp.OTHER) -> None:
        """Nothing more is tried (unless a stop was asked for already: that stays what it is)."""
        moved = self.change(Supervision.GIVEN_UP, unless=Supervision.OVER)  # * -> GIVEN_UP
        if moved or self.gave_up_because is None:  # (a stop asked for meanwhile: why it gave up is still so)
            self.gave_up_because = because

    def stop_asked(self) -> None:
        """A stop was asked for (any thread): the tasks' ends are no failures, and nothing starts again."""
        self.change(Supervision.STOPPING)  # * -> STOPPING
        self.wake.set()

    @property
    def restarting(self) -> bool:
        """Supervision stops and starts the run's tasks now (a restart, a change of size)."""
        return self._state in Supervision.BUSY

    @property
    def given_up(self) -> bool:
        """Supervision does nothing more: given up, or a stop was asked for."""
        return self._state in Supervision.OVER

    @property
    def stop_requested(self) -> bool:
        return self._state == Supervision.STOPPING

    @property
    def code_failed(self) -> bool:
        """It gave up on a failure a restart would repeat (the code, its settings)."""
        return self.gave_up_because == GaveUp.CAUSE_REPEATS

    @property
    def backed_up_once(self) -> bool:
        """Some task wrote a backup while this session followed."""
        return self.backups_seen > 0

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
        self._backups[task.name] = record.get(GLOBAL_STEP)
        self.backups_seen += 1
        if self._back and self.run.left:
            steps = {self._backups.get(t.name) for t in self._training_members()}
            # The backup at training's end leaves nothing to train on more tasks.
            end = number(self._steps_per_epoch.get(task.name)) * self._epochs.get(task.name, math.inf)
            if len(steps) == 1 and None not in steps and number(record.get(GLOBAL_STEP)) < end:
                self._due.add(Due.GROW)
            else:
                self._due.discard(Due.GROW)

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
        pace = self._pace.get(task.name)
        if timed or task.name not in self._captured:
            if pace is None or pace.untimed:
                pace = self._pace[task.name] = Pace()
            pace.step(step, time.monotonic(), self._steps_per_epoch.get(task.name))
        elif pace is None or pace.untimed:
            # A custom loop's printed or summary values: their pace is the time between them. What a loop does
            # between them is its own, so their silence alone is no stall: only where the tasks are can say it is.
            if pace is None:
                pace = self._pace[task.name] = Pace(untimed=True)
            pace.step(step, time.monotonic(), self._steps_per_epoch.get(task.name))
        if LOSS not in step and LOSS_AVG not in step:
            return  # a record without a loss (a user's own metrics only) says nothing of divergence
        loss = number(step_loss(step))  # (a loss written as null is no finite loss)
        if not math.isfinite(loss) and task.name not in self._diverged:
            self._diverged.add(task.name)
            self._say(SessionKind.ALERT, f"{task.name}: the loss is {text.metric_text(loss)} at epoch "
                                         f"{text.count(step.get('epoch'))} step {text.count(step.get('step'))}: "
                                         "training diverged (lower the learning rate, or look at the data)")
            if self.run.cluster.training.stop_on_nan and not self.stop_requested:
                self._due.add(Due.STOP_AT_NAN)

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
            self._due.add(Due.END_SERVERS)  # parameter-server training is over: its servers end now
        if task.phase in (FAILED, LOST) and not (message.get("stopped") or self.stop_requested):
            self._failed.append(task)  # not a stop that someone asked for (here or with tfcc stop)
            if task.name not in self._stalled:  # until the diagnosis comes
                code = (task.exit or {}).get("returncode")
                self._mark(task, Mark.FAILED, f"exit code {code}" if code is not None else words)

    # ------------------------------------------------------------ after each batch

    def tick(self) -> None:
        """What the session's thread does after each batch (``transition``)."""
        self.transition()

    def transition(self) -> None:
        """Every automatic edge, in one place, in this order (each step's own guard says from which state):
        a stall is a failure (WATCHING); the run's own stop at a non-finite loss (WATCHING -> STOPPING); a
        finished coordinator's servers end; a failure is judged (WATCHING -> RESTARTING -> WATCHING or
        GIVEN_UP; a parameter-server worker alone: WATCHING, or -> GIVEN_UP); the startup watchdog speaks; a
        person's remove or take back (WATCHING -> RESIZING -> WATCHING or GIVEN_UP); the hosts an elastic run
        went on without are asked; a backup all share takes back those that answer (WATCHING -> RESIZING ->
        WATCHING or GIVEN_UP)."""
        steps = (self._check_stalls, self._stop_at_nan, self._end_servers, self._supervise, self._check_watchdog,
                 self._on_asks, self._probe_the_left, self._grow) if self.acts else (self._supervise,)
        for step in steps:
            try:
                step()
            except Exception:
                log.exception("%s of run %s", step.__name__, self.run.run_id)

    def _stop_at_nan(self) -> None:
        """The run's own choice (training.stop_on_nan): no more steps after a non-finite loss."""
        if Due.STOP_AT_NAN not in self._due:
            return
        self._due.discard(Due.STOP_AT_NAN)
        self.change(Supervision.STOPPING)  # WATCHING -> STOPPING (the run's own: stop_on_nan)
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
        if Due.END_SERVERS not in self._due:
            return
        self._due.discard(Due.END_SERVERS)
        finished = self._coordinator_finished()
        servers = [t for t in self.run.tasks if not t.ended and not (finished and evaluates(t))]
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
                all((parse_task_name(t.name)[0] == WORKER or evaluates(t)) and not self._stalled.get(t.name)
                    for t in failed):
            if self.acts:
                self._relaunch_workers(failed)
            else:
                self._judge(failed)
            return
        if not self.change(Supervision.RESTARTING, only_from=Supervision.WATCHING):  # WATCHING -> RESTARTING
            return  # a stop asked for meanwhile (another thread): its ends are no failures
        try:
            self._restart_after(failed)
        finally:
            self.change(Supervision.WATCHING, only_from=Supervision.RESTARTING)  # RESTARTING -> WATCHING

    def _restart_after(self, failed: list[TaskState]) -> None:
        self._name_the_suspended(failed)
        # A task may ignore SIGTERM (a script's own handler; TensorFlow's, in a script run without the capture):
        # SIGKILL soon after. Every follow of this attempt
        # must deliver its end: one still reconnecting to a host would read beside the next attempt's.
        unstopped, lost = [], []
        with self._stopping(text.STOPPED_WITH_GROUP):
            if self.acts:
                unstopped = self.run.stop_each(grace=2)
                found = self._lost(unstopped) if unstopped and self.elastic else None
                if found is not None:  # a host lost for good: its tasks move to a spare, or the run goes on without
                    unstopped, lost = self._replace_lost(found)  # them
                if not self.run.wait(60):
                    unstopped = unstopped or [t.host for t in self.run.members if not t.ended]
            self._drain()  # the other tasks' ends: those that failed on their own are judged with the first
        failed += [t for t in self._failed if t not in failed]
        self._failed = []
        verdict = self._judge([t for t in failed if t.name not in self.run.left])
        gone = {t.host for t in lost}
        for host, count in self._hosts.failed([h for h in verdict.culprits if h not in gone]):
            words = HostStreaks.words(host, count)
            why = Left(f"{FAILING} (the last {count} in a row)", Leave.FAILING)
            # A coordinator that answers keeps its backups on its host: it is not moved (training would start over).
            coordinator = any(self._coordinates(t) for t in self.run.members if t.host == host)
            if self.acts and self.elastic and verdict.retryable and self.run.spares() and not coordinator:
                self._say(SessionKind.HOST_FAILING, words + "; its tasks move to a spare host")
                self._move(host, self.run.spares()[0], f"{host} caused failure after failure (the last {count} in a "
                                                       "row)")
            elif self.acts and self.elastic and verdict.retryable and self._can_leave(host):
                self._say(SessionKind.HOST_FAILING, words + "; the run goes on without it")
                self._leave([t for t in self.run.members if t.host == host], why,
                            again="once you take it back (right click on its task in the diagram), once fixed")
            else:
                self._say(SessionKind.HOST_FAILING, words)
        run_id = self.run.run_id
        if self.found_failures in (OFFER, REPLAY) and all(self._ended_before_following(t) for t in failed):
            self.give_up()  # RESTARTING -> GIVEN_UP: a person decides (the window offers Resume)
            self._say(SessionKind.OFFERED, f"run {run_id} failed while no console followed it; "
                                           + ("Resume starts every task again from their backups" if verdict.retryable
                                              else self._start_again("Resume starts every task again from their "
                                                                     "backups")))
            return
        # A hang in the user's code where the attempt before hung too: a restart meets it again (as a code bug).
        repeats = self.hang_repeats()
        retryable = (verdict.retryable or bool(lost) or bool(self.run.moved)) and not repeats
        if not retryable or self.restarts_left <= 0 or unstopped:  # RESTARTING -> GIVEN_UP
            self.give_up(GaveUp.CAUSE_REPEATS if not retryable and not unstopped else GaveUp.OTHER)
        if unstopped:  # a restart beside a task that may still run would make two of it
            hosts = ", ".join(sorted(set(unstopped)))
            self._say(SessionKind.GAVE_UP, f"run {run_id} failed and its tasks on {hosts} could not be stopped for "
                                           f"sure (no answer); once {hosts} answers: tfcc stop {run_id}, then "
                                           f"tfcc resume {run_id}" + self._shrink_hint(unstopped))
            return
        if repeats:
            self._say(SessionKind.GAVE_UP, f"run {run_id} hung at {', '.join(repeats)} in attempt {self.attempt - 1} "
                                           f"and again in attempt {self.attempt}: a restart would hang there again; "
                                           + self._start_again(f"tfcc resume {run_id}"))
            return
        if not retryable:
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
            self.give_up()  # RESTARTING -> GIVEN_UP (a stop asked for stays STOPPING)
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
        try:
            try:
                self.run.start(resume=True)
            except TfccError as exc:
                if fallback is None or not fallback(exc):
                    raise
                log.warning("run %s: %s; starting on the others", run_id, exc)
                self.run.start(resume=True)
        except TfccError as exc:
            self.give_up()
            self._say(SessionKind.GAVE_UP, f"run {run_id} could not be restarted: {exc}")
            for task in self.run.members:
                task.change(FAILED)
            return False
        self._follow(None)
        if self.stop_requested:  # Stop came while the tasks were starting: they stop too
            self.run.stop_each(grace=2)
            return False
        attempt = max((t.attempt for t in self.run.members), default=self.attempt)
        ports = f" ({self.run.ports_changed})" if self.run.ports_changed else ""
        if self.run.seeded is not None:
            self._say(SessionKind.SEEDED, f"run {run_id}: {text.seeded_text(self.run.seeded)}")
        self._say(SessionKind.RESTARTED, f"run {run_id}: {started.format(attempt=attempt)}{ports}")
        return True

    @contextmanager
    def _stopping(self, why: str):
        """While tfcc itself stops the run's tasks: the words their ends say (``stopping_why``)."""
        self.stopping_why = why
        try:
            yield
        finally:
            self.stopping_why = None

    def _relaunch_workers(self, failed: list[TaskState]) -> None:
        """Parameter-server training goes on without a worker (the coordinator re-queues its steps and
        waits for it) or its evaluator: only that task is started again (the coordinator takes a worker
        back; the evaluator goes on from the newest checkpoint)."""
        verdict = self._judge(failed)
        names = ", ".join(t.name for t in failed)
        sidecar = all(evaluates(t) for t in failed)
        run_id = self.run.run_id
        why = "the cause would repeat" if not verdict.retryable else "max_restarts used up"
        if sidecar and (not verdict.retryable or self.restarts_left <= 0):
            self._say(SessionKind.GAVE_UP, f"run {run_id}: {names} not started again ({why}); training goes on "
                                           "without evaluation: fix the cause, then a new run")
            return
        if not verdict.retryable or self.restarts_left <= 0:
            # WATCHING -> GIVEN_UP: the coordinator waits for the worker; when it fails, its servers end too
            self.give_up()
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
            self.give_up()  # WATCHING -> GIVEN_UP
            self._say(SessionKind.GAVE_UP, f"run {run_id}: {names} could not be started again: {exc}")
            return
        self._follow(failed)
        chief = task_name(CHIEF, 0)
        if chief in self._pace:  # with one worker the coordinator makes no step until it is back
            self._pace[chief] = Pace(first=max(self.watchdog, self.stall_floor))
            self._pace[chief].last_at = time.monotonic()
        self._say(SessionKind.RESTARTED, f"run {run_id}: {names} started again, {how}")

    def _relaunching(self, tasks: list[TaskState]) -> None:
        """``tasks`` start again: a new launch, and their stderr so far (all of it was read) is the old one's."""
        for task in tasks:
            task.relaunch()
            self._stderr_from[task.name] = task.offsets[STDERR]
        self.stragglers = ""

    def _ended_before_following(self, task: TaskState) -> bool:
        ended = number((task.exit or {}).get("ended"))
        return math.isfinite(ended) and ended < self._opened_at
