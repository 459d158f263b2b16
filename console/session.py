"""One run in progress, for every front end (Qt-free).

A ``RunSession`` follows a ``Run``: the follow threads only queue what the agents send
(so a slow consumer never holds up an agent's replies, ``stop`` included); the session's
own thread decodes each metrics line once, keeps the tasks' phases, feeds the metrics
store, watches for a cluster that does not form, and tells its listeners in plain
``SessionEvent``\\ s. The CLI's printer and the window's Qt bridge are such listeners.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from agent.protocol import (ENDED, ERROR, FAILED, FINISHED, LOST, METRICS, RUNNING, STARTING, STDERR, TRAINING,
                            WAITING,
                            parse_task_name, task_name)
from console import supervision, text
from console.cluster import EVALUATOR
from console.diagnosis import diagnose
from console.errors import TfccError
from console.history import History
from console.metrics_store import MetricsStore
from console.runner import WATCHDOG_SECONDS, Run, TaskState
from console.supervision import Failure
from trainer.metrics import CAPTURED, FROM_PRINT, SCRIPT_WORKLOAD

log = logging.getLogger("console.session")


def decode_line(line: str) -> dict:
    """One line of a metrics file as a record: a JSON object with a string ``type``, else an
    ``unreadable`` record that keeps the line (a damaged file loses nothing it has)."""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if isinstance(record, dict) and isinstance(record.get("type"), str):
        return record
    return {"type": "unreadable", "raw": line}


@dataclass
class SessionEvent:
    """What a session tells its listeners.

    ``kind`` is one of: ``records`` (a batch of a task's decoded records), ``training_started``
    (the first ``started`` event of the run, in ``records``), ``log`` (``stream``, ``text``),
    ``connection`` (a task's follow lost or regained its host: ``message``, ``text``),
    ``task_ended`` (``message``, ``text``), ``watchdog`` (``text``), ``ended`` (every task ended),
    ``state`` (what supervision says of a task now: ``message["state"]``, ``text`` why);
    the supervisor's ``failure`` (one per failed task: cause and fix), ``restarting``, ``restarted``
    and ``gave_up`` (``text``; ``message`` has the ``attempt``); ``system`` (a host's load: ``host``
    is the cluster's name of the host, ``message`` its agent's system record, docs/metrics.md).
    """

    kind: str
    task: TaskState | None = None
    records: list = field(default_factory=list)
    stream: str = ""
    text: str = ""
    message: dict = field(default_factory=dict)
    host: str = ""


Listener = Callable[[SessionEvent], None]
# The supervisor's events: ``resumed`` says where an attempt took up training (its step); ``offered``
# that a run failed while no console followed it, and how to restart it (the window asks first).
SUPERVISION = ("alert", "stalled", "failure", "host_failing", "restarting", "restarted", "resumed", "offered",
               "gave_up")
SUPERVISION_ALARMS = ("alert", "stalled", "failure", "host_failing", "offered", "gave_up")  # to look at
RESTART, OFFER = "restart", "offer"  # what a session does with failures that happened before it followed
STALL_FLOOR = 15.0  # seconds without a step that are never a stall, however quick the steps were
# TensorFlow's own words (its coordination service's log, on stderr) for a cluster that formed, and for
# one whose leader still waits (naming the tasks it waits for, on the next line): a script that reports
# nothing of itself (capture off) is judged by them.
TF_FORMED = re.compile(r"Barrier\(WaitForAllTasks[^)]*\) has passed with status: OK")
TF_WAITING = re.compile(r"Waiting for (\d+)/(\d+) tasks to connect")
TF_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
TF_SERVING = re.compile(r"Started server with target: grpc://")
SUSPENDED = "is stopped (SIGSTOP: a debugger, Ctrl-Z or a job scheduler froze it) and answers no peer"


def _trains(record: dict) -> bool:
    """Whether a step or epoch record shows training under way: any but a printed line that names no
    epoch or step (a script may print a value before its cluster forms)."""
    return record.get(CAPTURED) != FROM_PRINT or "epoch" in record or "step" in record


def _evaluates(task: TaskState) -> bool:
    """Whether ``task`` is the run's evaluator (a sidecar: no part of training)."""
    return parse_task_name(task.name)[0] == EVALUATOR


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
        took = text.metric_value(record.get("step_time"))
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


class RunSession:
    """Follow ``run``; ``store`` (optional) gets every record, listeners get ``SessionEvent``\\ s."""

    system_interval = 1.0  # seconds between a host's system records

    def __init__(self, run: Run, store: MetricsStore | None = None, watchdog: float = WATCHDOG_SECONDS,
                 restarts: int | None = None, found_failures: str = RESTART):
        self.run = run
        self.found_failures = found_failures
        self.store = store
        self.watchdog = watchdog
        # Group restarts left for retryable failures (default: the cluster file's max_restarts).
        self.restarts_left = run.cluster.training.max_restarts if restarts is None else restarts
        self.attempt = 1
        self._failed: list[TaskState] = []     # tasks of this attempt that ended badly, not yet judged
        self._failed_event: dict[str, str] = {}  # task -> the trainer's own words for its failure
        self._given_up = False
        self._stop_requested = False
        self._pace: dict[str, Pace] = {}          # task -> its step times (the stall watchdog)
        self._stalled: dict[str, str] = {}        # task -> how it stalled
        self._diverged: set[str] = set()          # tasks whose loss went non-finite (said once)
        self._stop_for_nan = False                # the run stops at its first non-finite loss (training.stop_on_nan)
        self._servers_done = False                # a parameter-server run's coordinator finished: end its servers
        self._resumed: set = set()                # attempts whose resumption was said
        self._hosts = supervision.HostStreaks()
        self._steps_per_epoch: dict[str, int] = {}
        self._epochs: dict[str, float] = {}       # task -> how many epochs it trains (its started event)
        self._stderr_from: dict[str, int] = {}    # task -> where its stderr's current attempt begins
        self.stall_floor = STALL_FLOOR
        # A user's script (the capture says so in its launched event): its stall clock starts at its first
        # timed step, never before (what it does before, and between fit calls, is its own), and waits at
        # least the startup watchdog's time.
        self._script = bool(run.cluster.training.script)
        self._captured: set[str] = set()          # tasks run by tfcc's capture (a user's script)
        self._stragglers = ""                     # the tasks TensorFlow said it still waits for
        self._tf_log: dict[str, str] = {}         # task -> the end of its stderr while its cluster forms
        self.started_record: dict | None = None  # the run's first "started" event (its batch plan)
        self.warned = False
        self._listeners: list[Listener] = []
        # What it receives, kept in this console's state folder (console.history); None: not kept.
        self.history: History | None = History(run)
        self._listeners.append(lambda event: self.history is not None and self.history.on_event(event))
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._detached = threading.Event()
        self._following = threading.Lock()  # a detach and the start of the follows: one after the other
        self._read_to: dict[str, int] = {}   # task -> the byte offset of its metrics file handled up to
        # task -> what supervision needs again when a later session takes the run up from a snapshot
        # of the store: the task's records but steps and liveness, of which the last of each run is kept
        # (in file order: a backup after the last step, a resumed attempt's launch, say what they say)
        self._kept: dict[str, list[dict]] = {}
        self._restored = False   # the store came from a snapshot
        self._received = False   # metrics arrived after that (else the snapshot is still the whole store)
        self._wake = threading.Event()  # ends the pause before a restart: a stop or a detach
        self.restarting = False         # stopping, judging or relaunching after a failure
        self._opened = time.monotonic()
        self._opened_at = time.time()  # failures that ended before this were found, not seen

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def follow(self, poll: float = 0.2) -> None:
        """Follow every task from where it was last read: from its first record for a new session,
        or, where this console's history of the run has a snapshot of its metrics, from where the
        snapshot ends (the store is filled from it first, on the session's thread)."""
        self._poll = poll
        thread = threading.Thread(target=self._main, name=f"tfcc-session-{self.run.run_id}", daemon=True)
        thread.start()
        self._thread = thread  # only once started: a detach joins it

    def wait(self, timeout: float | None = None) -> bool:
        """Whether every task's follow has ended and all it sent has been handled."""
        return self._done.wait(timeout)

    @property
    def settled(self) -> bool:
        """Every task has ended and the supervisor has nothing more to do (gave up, or nothing failed)."""
        return (all(t.phase in ENDED for t in self.run.tasks) and not self.restarting
                and (self._given_up or not self._failed))

    def detach(self) -> None:
        """Stop following (the run goes on)."""
        with self._following:
            self._detached.set()
        self._wake.set()
        self.run.detach()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def stop(self, grace: float = 10.0) -> list[dict]:
        """Stop every task (the person asked: their ends are no failures to restart from)."""
        self._stop_requested = True
        self._wake.set()
        return self.run.stop(grace)

    # ------------------------------------------------------------ the session's thread

    def _follower(self, attempt: int):
        def on_run_message(task: TaskState, message: dict) -> None:
            self._queue.put((attempt, task, message))  # on a follow thread: nothing more, whatever listeners do
        return on_run_message

    def _on_system(self, host: str, record: dict) -> None:
        """A host's system record, on its sampling thread: queued like the follows' messages."""
        self._queue.put((self.attempt, None, {"type": "system", "host": host, "record": record}))

    def _main(self) -> None:
        try:
            try:
                self._restore()
            except Exception:  # a bug must not end the session: it reads from the first records instead
                log.exception("taking up run %s from its snapshot", self.run.run_id)
            with self._following:
                if not self._detached.is_set():
                    self.run.follow(self._follower(self.attempt), self._poll)  # before the loop: it ends
                    self.run.sample_system(self._on_system, self.system_interval)  # when the follows have
        except BaseException:
            if self.history is not None:
                self.history.close()
            self._done.set()
            raise
        self._loop()

    def _restore(self) -> None:
        """Take the run up from this console's snapshot of its store, if there is one to trust: the
        metrics from it, supervision from the records it kept, the follows from its offsets."""
        if self.store is None or self.history is None:
            return
        extra = self.history.restore_store(self.store)
        if not extra:
            return
        try:
            offsets, kept = extra.get("offsets"), extra.get("kept") or {}
            if not isinstance(offsets, dict) or not isinstance(kept, dict):
                raise ValueError("a snapshot without offsets")
            for task in self.run.tasks:  # every offset first: then what supervision needs
                offset = offsets.get(task.name)
                if isinstance(offset, int) and offset > 0:
                    task.offsets[METRICS] = self._read_to[task.name] = offset
            for task in self.run.tasks:
                records = kept.get(task.name) or []
                records = [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []
                if records:
                    self._records(task, records, ingest=False)
        except Exception:
            # Back to the first records: the store empty, every task read from its start, the cache's
            # count of lines seen as it was (nothing twice in either).
            self.store._clear()
            for task in self.run.tasks:
                task.offsets[METRICS] = 0
                task.records = 0
            self._read_to.clear()
            self._kept.clear()
            self.history.forget_seen()
            raise
        self._restored = True
        log.info("run %s: taken up from its snapshot", self.run.run_id)

    def _save(self) -> None:
        """At the session's end: the store, with where each task was read up to, for the next session."""
        if self.store is None or self.history is None or not self._read_to:
            return
        if self._restored and not self._received:
            return  # the snapshot it started from is still all there is: no second copy to write
        self.history.save_store(self.store, {"offsets": dict(self._read_to), "kept": self._kept})

    def _loop(self) -> None:
        try:
            while not self._detached.is_set():
                try:
                    batch = [self._queue.get(timeout=0.5)]
                except queue.Empty:
                    batch = []
                while True:  # whatever else has come meanwhile, in order
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                for item in batch:
                    if self._detached.is_set():
                        return
                    self._dispatch(*item)
                if batch and self.history is not None:
                    self.history.flush()  # once a batch: appends are buffered till here
                try:
                    self._check_stalls()
                except Exception:
                    log.exception("the stall watchdog of run %s", self.run.run_id)
                if self._stop_for_nan:
                    self._stop_at_nan()
                if self._servers_done:
                    try:
                        self._end_servers()
                    except Exception:
                        log.exception("ending the servers of run %s", self.run.run_id)
                if self._failed:
                    try:
                        self._supervise()
                    except Exception:
                        log.exception("supervising run %s", self.run.run_id)
                try:
                    self._check_watchdog()
                except Exception:
                    log.exception("the watchdog of run %s", self.run.run_id)
                if not batch and self.run.wait(0) and self._queue.empty():
                    if all(t.phase in ENDED for t in self.run.tasks):
                        self._tell(SessionEvent("ended"))
                    return
        finally:
            try:
                self._save()
            except Exception:
                log.exception("keeping a snapshot of run %s", self.run.run_id)
            if self.history is not None:
                self.history.close()
            self._done.set()  # whatever happened: nobody waits for this session for ever

    def _dispatch(self, attempt: int, task: TaskState, message: dict) -> None:
        try:
            if attempt == self.attempt or message.get("type") in ("metrics", "log", "system"):
                self._handle(task, message)  # an earlier attempt's records still count, not its ends
        except Exception:  # a bug must not end the session: the log has it
            log.exception("handling a message of %s", task.name if task is not None else message.get("host"))

    def _drain(self) -> None:
        """Handle whatever the follows have queued (the session's thread only)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            self._dispatch(*item)

    def _handle(self, task: TaskState, message: dict) -> None:
        kind = message.get("type")
        if kind == "metrics":
            if self.history is not None:
                self.history.lines(task.name, message["lines"], message.get("offset"))
            if isinstance(message.get("offset"), int):  # as the cache counts them: the two agree
                self._read_to[task.name] = message["offset"]
            self._received = True
            records = [decode_line(line) for line in message["lines"]]
            self._records(task, records)
        elif kind == "system":  # task is None: the record is the host's
            host, record = message["host"], message["record"]
            ingest = getattr(self.store, "ingest_system", None)
            if ingest is not None:
                ingest(host, record)
            self._tell(SessionEvent("system", host=host, message=record))
        elif kind == "following":
            started = text.metric_value(message.get("started"))
            if task.launched_at is None and math.isfinite(started):
                task.launched_at = started  # the agent started it: user scripts count too
            if task.phase == STARTING:
                task.phase = RUNNING
        elif kind == "log":
            if self._script and message["stream"] == STDERR and not all(t.cluster_formed for t in self.run.tasks):
                self._read_tensorflow_signs(task, message.get("text", ""))
            self._tell(SessionEvent("log", task, stream=message["stream"], text=message.get("text", "")))
        elif kind in ("reconnecting", "reconnected"):
            words = text.connection_text(task.host, message)
            if self.store is not None:
                self.store.note(task.name, kind, words)
            self._tell(SessionEvent("connection", task, text=words, message=message))
        elif kind in ("end", "error"):
            task.phase = message.get("phase") or ERROR
            task.exit = message.get("exit")
            words = text.outcome_text(task.phase, task.exit, message.get("error"))
            if self._coordinates(task) and (task.phase == FINISHED or self._given_up or self._stop_requested):
                self._servers_done = True  # parameter-server training is over: its servers end now
            if task.phase in (FAILED, LOST) and not (message.get("stopped") or self._stop_requested):
                self._failed.append(task)  # not a stop that someone asked for (here or with tfcc stop)
                if task.name not in self._stalled:  # until the diagnosis comes
                    code = (task.exit or {}).get("returncode")
                    self._state(task, "failed", f"exit code {code}" if code is not None else words)
            if self.store is not None:
                self.store.note(task.name, task.phase, f"process ended: {words}")
            self._tell(SessionEvent("task_ended", task, text=words, message=message))
            if task.phase == FINISHED:
                self._look_at_a_finished(task)

    def _records(self, task: TaskState, records: list[dict], ingest: bool = True) -> None:
        """A task's records: phases, supervision, the store (unless ``ingest`` is false: records a
        snapshot kept, whose metrics the store has), listeners."""
        task.records += len(records)
        started = None
        kept = self._kept.setdefault(task.name, [])
        for r in records:
            name = r.get("event")
            kind = r.get("type")
            if kind in ("step", "alive"):  # in its place among the events, the newest of a run of them only
                if kept and kept[-1].get("type") == kind:
                    kept[-1] = r
                else:
                    kept.append(r)
            elif kind != "unreadable":
                kept.append(r)
            if name == "launched":  # the newest launch counts (a resumed run has several)
                if r.get("workload") == SCRIPT_WORKLOAD:
                    self._captured.add(task.name)
                self._failed_event.pop(task.name, None)  # an earlier attempt's error is no cause now
                when = text.metric_value(r.get("time"))
                task.launched_at = when if math.isfinite(when) else task.launched_at
                task.cluster_formed = False
                task.phase = WAITING
            elif name == "cluster_formed":
                self._formed(task)
            elif name in ("serving", "evaluating"):  # a server of parameter-server training, or its evaluator: up
                self._up(task)
            elif name == "backing_up" and task.name in self._pace:
                self._pace[task.name].saving = True  # a save of a big model can take long: no stall
            elif name == "started" and self.started_record is None:
                self.started_record = started = r
            elif name == "failed":
                self._failed_event[task.name] = str(r.get("error") or "")
            elif name == "train_end" and task.name in self._pace:  # a script's fit ended: what follows is its own
                self._pace[task.name].finished = True
            elif name == "train_begin" and task.name in self._pace:
                self._pace[task.name].finished = False
                self._pace[task.name].last_at = time.monotonic()
            elif kind in ("step", "epoch") and not task.cluster_formed and _trains(r):
                self._formed(task)  # a script whose capture saw training before any strategy
            elif name == "resumed" and r.get("attempt") not in self._resumed:
                self._resumed.add(r.get("attempt"))
                self._say("resumed", f"run {self.run.run_id}: {text.resumed_text(r)}")
            if r.get("type") == "step":
                self._progress(task, r)
            elif r.get("type") == "epoch" and task.name in self._pace:
                pace = self._pace[task.name]
                pace.epoch_done(time.monotonic())
                # After the last epoch come the model's save and the end: no more steps to wait for.
                pace.finished = text.metric_value(r.get("epoch")) + 1 >= self._epochs.get(task.name, math.inf)
            if name == "started":
                self._steps_per_epoch[task.name] = r.get("steps_per_epoch")
                self._epochs[task.name] = text.metric_value(r.get("epochs"))
        if self.store is not None and ingest:
            self.store.ingest(task.name, records)
        self._tell(SessionEvent("records", task, records=records))
        if started is not None:
            self._tell(SessionEvent("training_started", task, records=[started]))

    def _formed(self, task: TaskState) -> None:
        """``task``'s cluster has formed: it trains."""
        self._up(task)
        if task.name in self._captured:  # its stall clock starts at its first timed step
            self._pace.pop(task.name, None)
            return
        # From now on the stall clock runs: until its first step (building the model, agreeing
        # on the backup, tracing) a task gets the startup watchdog's time.
        self._pace[task.name] = Pace(first=max(self.watchdog, self.stall_floor))
        self._pace[task.name].last_at = time.monotonic()

    def _up(self, task: TaskState) -> None:
        """``task`` is up: its cluster formed, or it serves (a worker or ps of parameter-server training,
        which the coordinator drives; an evaluator)."""
        task.cluster_formed = True
        task.phase = TRAINING
        self._state(task, "running")

    def _read_tensorflow_signs(self, task: TaskState, text_: str) -> None:
        """What TensorFlow's own log says of a script's cluster: formed (its leader's barrier passed: every
        task joined), a parameter-server worker or ps serving, or the tasks the leader still waits for."""
        seen = self._tf_log[task.name] = (self._tf_log.get(task.name, "") + text_)[-8192:]
        if TF_FORMED.search(seen):
            self._stragglers = ""
            for each in self.run.tasks:
                if not each.cluster_formed and each.phase not in ENDED:
                    self._formed(each)
            return
        if TF_SERVING.search(seen) and self.run.cluster.parameter_server and not self._coordinates(task):
            self._up(task)
            return
        waiting = None
        for waiting in TF_WAITING.finditer(seen):
            pass
        if waiting is None:
            return
        if waiting.group(1) == "0":
            self._stragglers = ""
            return
        # "Example stragglers:" and their names follow on the next lines.
        names = [task_name(role, int(index)) for role, index in TF_TASK.findall(seen[waiting.end():])]
        self._stragglers = ", ".join(dict.fromkeys(names)) or f"{waiting.group(1)} of its {waiting.group(2)} tasks"

    # ------------------------------------------------------------ supervision

    def _progress(self, task: TaskState, step: dict) -> None:
        """A step of ``task``: the stall watchdog's clock, and the alert for a first non-finite loss."""
        # A script's steps from fit keep a pace; its printed, summary or scheduled values do not (what a
        # loop does between them, an evaluation, a save, is its own).
        timed = math.isfinite(text.metric_value(step.get("step_time"))) and CAPTURED not in step
        if timed or task.name not in self._captured:
            pace = self._pace.get(task.name)
            if pace is None:
                pace = self._pace[task.name] = Pace()
            pace.step(step, time.monotonic(), self._steps_per_epoch.get(task.name))
        if "loss" not in step and "loss_avg" not in step:
            return  # a record without a loss (a user's own metrics only) says nothing of divergence
        loss = text.metric_value(step.get("loss", step.get("loss_avg")))
        if not math.isfinite(loss) and task.name not in self._diverged:
            self._diverged.add(task.name)
            self._say("alert", f"{task.name}: the loss is {text.metric_text(loss)} at epoch "
                               f"{text.count(step.get('epoch'))} step {text.count(step.get('step'))}: training "
                               "diverged (lower the learning rate, or look at the data)")
            if self.run.cluster.training.stop_on_nan and not self._stop_requested:
                self._stop_for_nan = True

    def _coordinates(self, task: TaskState) -> bool:
        """Whether ``task`` is the coordinator (the chief) of a parameter-server run."""
        return task.name == task_name("chief", 0) and self.run.cluster.parameter_server

    def _end_servers(self) -> None:
        """The coordinator finished: its workers and ps serve on until told (SIGTERM ends them well); an
        evaluator ends by itself after the last checkpoint (when training was given up: now)."""
        self._servers_done = False
        finished = self._coordinator_finished()
        servers = [t for t in self.run.tasks if t.phase not in ENDED and not (finished and _evaluates(t))]
        # After a finished chief this stop is how they end: they end finished (else the run's stop).
        unstopped = self.run.stop_each(grace=10, only=servers, done=finished)
        if unstopped:
            self._say("failure", f"run {self.run.run_id} finished, but its servers on {', '.join(unstopped)} "
                                 f"did not answer; tfcc stop {self.run.run_id} once they do")

    def _stop_at_nan(self) -> None:
        """The run's own choice (training.stop_on_nan): no more steps after a non-finite loss."""
        self._stop_for_nan = False
        self._stop_requested = True
        self._given_up = True
        self.run.stop(grace=5)
        self._say("gave_up", f"run {self.run.run_id} stopped at its first non-finite loss, as its stop_on_nan "
                             "asks; lower the learning rate or look at the data, then start a new run (the "
                             "newest backups may hold the diverged weights)")

    def _check_stalls(self) -> None:
        """A training task with no new step for far longer than its steps take is stalled (a stopped
        process, a hung collective, a host that no longer answers): a failure like any other."""
        if self._given_up or self._failed:
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
        self._say("stalled", f"{task.name} on {task.host} {words}")
        self._state(task, "stalled", words)

    def _why_silent(self, task: TaskState) -> str:
        """Why a running task makes no step, where its host can tell: its process is stopped, or the
        host does not answer; "" when neither."""
        try:
            status = self.run.links[task.host].connect().call("status", run_id=self.run.run_id, task=task.name)
        except TfccError as exc:
            return f"its host does not answer ({exc})"
        if status.get("suspended"):
            return SUSPENDED
        return ""

    def _name_the_suspended(self, failed: list[TaskState]) -> None:
        """Tasks whose process is stopped (SIGSTOP) look alive to everyone but their peers, which fail
        for losing them: name each as what stalled, before the stop ends them."""
        for task in self.run.tasks:
            if task in failed or task.phase in ENDED or task.phase == STARTING:
                continue
            if self._why_silent(task) == SUSPENDED:
                pace = self._pace.get(task.name)
                last = (f"; its last step was epoch {text.count(pace.epoch)} step {text.count(pace.index)}"
                        if pace is not None and pace.index is not None else "; it made no step yet")
                self._stall(task, f"{SUSPENDED}{last}")
                failed.append(task)

    def _supervise(self) -> None:
        """A task of this attempt ended badly: stop the rest for sure, judge, and restart every task
        from their backups when that can help and the budget allows; else the run ends here."""
        failed, self._failed = self._failed, []
        if self._given_up or self._stop_requested or self._coordinator_finished():
            return  # no (more) supervision: the run ends as its tasks do
        if self.run.cluster.parameter_server and all((t.name.startswith("worker-") or _evaluates(t))
                                                     and not self._stalled.get(t.name) for t in failed):
            self._relaunch_workers(failed)
            return
        self.restarting = True
        try:
            self._restart_after(failed)
        finally:
            self.restarting = False

    def _restart_after(self, failed: list[TaskState]) -> None:
        self._name_the_suspended(failed)
        # TensorFlow ignores SIGTERM while it waits: SIGKILL soon after. Every follow of this attempt
        # must deliver its end: one still reconnecting to a host would read beside the next attempt's.
        unstopped = self.run.stop_each(grace=2)
        if not self.run.wait(60):
            unstopped = unstopped or [t.host for t in self.run.tasks if t.phase not in ENDED]
        self._drain()  # the other tasks' ends: those that failed on their own are judged with the first
        failed += [t for t in self._failed if t not in failed]
        self._failed = []
        verdict = self._judge(failed)
        for line in self._hosts.failed(verdict.culprits):
            self._say("host_failing", line)
        if self.found_failures == OFFER and all(self._ended_before_following(t) for t in failed):
            self._given_up = True  # a person decides: the window offers Resume
            self._say("offered", f"run {self.run.run_id} failed while no console followed it; "
                                 + ("Resume starts every task again from their backups" if verdict.retryable else
                                    "fix the cause above, then Resume starts every task again from their backups"))
            return
        self._given_up = not verdict.retryable or self.restarts_left <= 0 or bool(unstopped)
        if unstopped:  # a restart beside a task that may still run would make two of it
            hosts = ", ".join(sorted(set(unstopped)))
            self._say("gave_up", f"run {self.run.run_id} failed and its tasks on {hosts} could not be stopped for "
                                 f"sure (no answer); once {hosts} answers: tfcc stop {self.run.run_id}, then "
                                 f"tfcc resume {self.run.run_id}")
            return
        if not verdict.retryable:
            self._say("gave_up", f"run {self.run.run_id} failed; a restart would fail the same way: fix the cause "
                                 f"above, then tfcc resume {self.run.run_id}")
            return
        if self.restarts_left <= 0:
            self._say("gave_up", (f"run {self.run.run_id} failed again after {self.attempt - 1} restart(s), the "
                                  "most its max_restarts allows" if self.attempt > 1 else
                                  f"run {self.run.run_id} failed and its max_restarts is 0 (no restarts)")
                      + f"; fix the cause above, then tfcc resume {self.run.run_id}")
            return
        delay = supervision.backoff(self.attempt)
        self._say("restarting", f"restarting every task of run {self.run.run_id} from its last backup in "
                                f"{delay:.0f} s (restart {self.attempt} of at most "
                                f"{self.attempt - 1 + self.restarts_left})")
        if self._wake.wait(delay) or self._stop_requested:  # detached, or someone asked to stop meanwhile
            self._given_up = True
            return
        self.restarts_left -= 1
        self.attempt += 1
        for task in self.run.tasks:
            self._state(task, "restarting", f"restart {self.attempt - 1}: from the newest common backup")
        self._relaunching(self.run.tasks)
        self._pace.clear()
        self._opened = time.monotonic()  # the watchdog gives the new attempt its own time
        self.warned = False
        try:
            self.run.start(resume=True)
        except TfccError as exc:
            self._say("gave_up", f"run {self.run.run_id} could not be restarted: {exc}")
            for task in self.run.tasks:
                task.phase = FAILED
            return
        self.run.follow(self._follower(self.attempt), self._poll)
        self.run.sample_system(self._on_system, self.system_interval)
        if self._stop_requested:  # Stop came while the tasks were starting: they stop too
            self._given_up = True
            self.run.stop_each(grace=2)
            return
        attempt = max((t.attempt for t in self.run.tasks), default=self.attempt)
        ports = f" ({self.run.ports_changed})" if self.run.ports_changed else ""
        self._say("restarted", f"run {self.run.run_id}: attempt {attempt} started, from the newest backup "
                               f"every task has{ports}")

    def _coordinator_finished(self) -> bool:
        """A parameter-server run whose chief finished: what its servers do now is no failure."""
        return any(self._coordinates(t) and t.phase == FINISHED for t in self.run.tasks)

    def _relaunch_workers(self, failed: list[TaskState]) -> None:
        """Parameter-server training goes on without a worker (the coordinator re-queues its steps and
        waits for it) or its evaluator: only that task is started again (the coordinator takes a worker
        back; the evaluator goes on from the newest checkpoint)."""
        verdict = self._judge(failed)
        names = ", ".join(t.name for t in failed)
        sidecar = all(_evaluates(t) for t in failed)
        if sidecar and (not verdict.retryable or self.restarts_left <= 0):
            self._say("gave_up", f"run {self.run.run_id}: {names} not started again ("
                                 + ("the cause would repeat" if not verdict.retryable else "max_restarts used up")
                                 + "); training goes on without evaluation: fix the cause, then a new run")
            return
        if not verdict.retryable or self.restarts_left <= 0:
            self._given_up = True  # the coordinator waits for the worker; when it fails, its servers end too
            self._say("gave_up", f"run {self.run.run_id}: {names} not started again ("
                                 + ("the cause would repeat" if not verdict.retryable else "max_restarts used up")
                                 + "); the coordinator waits for it up to an hour: fix the cause, then "
                                   f"tfcc stop {self.run.run_id} and tfcc resume {self.run.run_id}")
            return
        self.restarts_left -= 1
        how = ("it goes on from the newest checkpoint" if sidecar else
               "training went on without it; the coordinator takes it back")
        for task in failed:
            self._state(task, "restarting", f"started again; {how}")
        self._relaunching(failed)
        try:
            self.run.relaunch(failed)
        except TfccError as exc:
            self._given_up = True
            self._say("gave_up", f"run {self.run.run_id}: {names} could not be started again: {exc}")
            return
        self.run.follow(self._follower(self.attempt), self._poll, only=failed)
        self.run.sample_system(self._on_system, self.system_interval)
        chief = task_name("chief", 0)
        if chief in self._pace:  # with one worker the coordinator makes no step until it is back
            self._pace[chief] = Pace(first=max(self.watchdog, self.stall_floor))
            self._pace[chief].last_at = time.monotonic()
        self._say("restarted", f"run {self.run.run_id}: {names} started again, {how}")

    def _judge(self, failed: list[TaskState]) -> supervision.Verdict:
        """The verdict on ``failed``, its line for each task said (and shown on the task)."""
        verdict = supervision.judge([self._failure(t) for t in failed], self.run.not_shipped)
        for task, line in zip(failed, verdict.lines):
            self._state(task, "failed", line)  # first: a listener of the event finds the state said
            self._say("failure", line)
        return verdict

    def _relaunching(self, tasks: list[TaskState]) -> None:
        """``tasks`` start again: a new launch, and their stderr so far (all of it was read) is the old one's."""
        for task in tasks:
            task.phase, task.exit, task.launched_at, task.cluster_formed = STARTING, None, None, False
            self._stderr_from[task.name] = task.offsets[STDERR]
            self._tf_log.pop(task.name, None)  # an earlier attempt's log says nothing of this one's cluster
        self._stragglers = ""

    def _ended_before_following(self, task: TaskState) -> bool:
        ended = text.metric_value((task.exit or {}).get("ended"))
        return math.isfinite(ended) and ended < self._opened_at

    def _stderr_tail(self, task: TaskState) -> str:
        """The end of this attempt's part of ``task``'s stderr: an earlier attempt's errors are no cause now."""
        try:
            client = self.run.links[task.host].connect()
            status = client.call("status", run_id=self.run.run_id, task=task.name)
            size = status["sizes"].get(STDERR, 0)
            begun = max(self._stderr_from.get(task.name, 0), status.get("stderr_from") or 0)
            fresh = size - begun
            if fresh > 0:
                return client.call("logs", run_id=self.run.run_id, task=task.name,
                                   max_bytes=min(8000, fresh))["logs"].get(STDERR, "")
        except TfccError as exc:
            log.info("no log of %s: %s", task.name, exc)
        return ""

    def _failure(self, task: TaskState) -> Failure:
        return Failure(task.name, task.host, task.phase, (task.exit or {}).get("returncode"),
                       self._stderr_tail(task), self._failed_event.pop(task.name, None),
                       self._stalled.pop(task.name, None))

    def _look_at_a_finished(self, task: TaskState) -> None:
        """A task that exited 0 can still have gone wrong in a way worth saying (its data ran out, it
        could not use its GPUs): the diagnosis's signatures for a clean exit, as an alert."""
        found = diagnose(self._stderr_tail(task), 0)
        if found is not None:
            self._say("alert", f"{task.name} on {task.host} finished, but {found.cause}; {found.fix}")

    def _state(self, task: TaskState, state: str, words: str = "") -> None:
        """What the window's badges show of ``task``: running, stalled, failed (with why), restarting."""
        if self.store is not None:
            self.store.set_state(task.name, state, words)
        self._tell(SessionEvent("state", task, text=words, message={"state": state}))

    def _say(self, kind: str, words: str) -> None:
        """A supervision event (failure, restarting, restarted, gave_up), in the store and to listeners."""
        if self.store is not None:
            self.store.note("console", kind, words)
        self._tell(SessionEvent(kind, text=words, message={"type": kind, "attempt": self.attempt}))

    def _check_watchdog(self) -> None:
        # A session that attaches to a run gives its cluster the same time from now: the replay of
        # an old run's history is no wait, whenever its tasks started.
        if self.warned or time.monotonic() - self._opened < self.watchdog:
            return
        report = self.run.waiting_report(self.watchdog, self._stragglers)
        if report:
            self.warned = True
            if self.store is not None:
                self.store.note("console", "watchdog", report)
            self._tell(SessionEvent("watchdog", text=report))

    def _tell(self, event: SessionEvent) -> None:
        if self._detached.is_set():
            return
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                log.exception("a listener of run %s failed on %s", self.run.run_id, event.kind)
