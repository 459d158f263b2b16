"""One run in progress, for every front end (Qt-free).

A ``RunSession`` follows a ``Run``: the follow threads only queue what the agents send (so a slow consumer
never holds up an agent's replies, ``stop`` included); the session's own thread decodes each metrics line
once, sorts each batch of records once (``trainer.records.Batch``), keeps the tasks' phases, feeds the
metrics store and this console's history of the run, tells its ``Supervisor`` what the tasks report, and
tells its listeners in ``SessionEvent``\\ s (console.states). The CLI's printer and the window's Qt bridge are
such listeners. A session that takes up a run this console followed before starts from the snapshot its
predecessor left (console.store) and reads each task on from there.
"""

from __future__ import annotations

import logging
import math
import queue
import re
import threading
import time

from agent.protocol import (END, ENDED, ERROR, FAILED, FINISHED, FOLLOWING, LOG_MESSAGE, LOST, METRICS,
                            METRICS_MESSAGE, PENDING, RUNNING, STARTING, STDERR, STOPPED, TRAINING, WAITING,
                            task_name)
from console import speed, text
from console.errors import RunError
from console.run.breakdowns import Breakdowns
from console.run.runner import Run
from console.run.supervisor import (OFFER, REMOVE_HOST, REPLAY, RESTART, TAKE_BACK, WATCHDOG_SECONDS,  # noqa: F401
                                    Supervisor)  # (OFFER, REPLAY: its choices)
from console.states import (FOLLOW_ERROR, RECONNECTED, RECONNECTING, Listener, Mark, SessionEvent, SessionKind,
                            TaskState)
from console.store.cache import CONSOLE_TASK, History
from console.store.metrics import MetricsStore
from console.threads import give_way
from trainer.records import CAPTURED, FROM_PRINT, SCRIPT_WORKLOAD, Batch, Event, RecordType, decode_line, number
from trainer.tf_config import CHIEF

log = logging.getLogger("console.run.session")

SYSTEM_QUEUED = "system"  # a host's system record, queued beside the follows' messages
JOB_QUEUED = "slurm_job"  # a Slurm run's job changed (its placement's watch), queued likewise
# TensorFlow's own words (its coordination service's log, on stderr) for a cluster that formed, and for
# one whose leader still waits (naming the tasks it waits for, on the next line): a script that reports
# nothing of itself (capture off) is judged by them.
TF_FORMED = re.compile(r"Barrier\(WaitForAllTasks[^)]*\) has passed with status: OK")
TF_WAITING = re.compile(r"Waiting for (\d+)/(\d+) tasks to connect")
TF_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
TF_SERVING = re.compile(r"Started server with target: grpc://")


LINES_PER_PIECE = 500  # a follow's message is decoded and handled this many lines at a time
BUSY_SECONDS = 0.01   # the session handles messages this long at most without a pause as long (a flood, a
PAUSE_SECONDS = 0.01  # long history replayed: the window's thread gets the interpreter half the time, whole)
MAX_KEPT = 5000  # a task's records kept for the snapshot (its events and epochs: a flood of them costs no more)


def _thin(kept: list[dict]) -> None:
    """Keep the newest half of ``kept`` and, of the older ones, the newest moments of a task's life (what a
    snapshot's supervision is taken up from): an epoch or evaluation of long ago is in the store already."""
    half = MAX_KEPT // 2
    older = [r for r in kept[:-half] if r.get("type") == RecordType.EVENT and r.get("event") in Event.LIFE]
    kept[:] = older[-half:] + kept[-half:]


def _later(before: dict, now: dict) -> bool:
    """Whether a ``started`` event is of a later attempt than ``before`` (an elastic run's new size, a task moved to
    a spare host: the diagram draws each attempt's own)."""
    return number(now.get("attempt")) > number(before.get("attempt"))


def _trains(record: dict) -> bool:
    """Whether a step or epoch record shows training under way: any but a printed line that names no
    epoch or step (a script may print a value before its cluster forms)."""
    return record.get(CAPTURED) != FROM_PRINT or "epoch" in record or "step" in record


class RunSession(Breakdowns):
    """Follow ``run``; ``store`` (optional) gets every record, listeners get ``SessionEvent``\\ s."""

    system_interval = 1.0  # seconds between a host's system records

    def __init__(self, run: Run, store: MetricsStore | None = None, watchdog: float = WATCHDOG_SECONDS,
                 restarts: int | None = None, found_failures: str = RESTART):
        self.run = run
        self.store = store
        self.stopped_by_you = False  # this session's stop ended the run (a person's: not supervision's)
        self.supervisor = Supervisor(run, say=self._say, mark=self._mark, follow=self._follow_again,
                                     drain=self._drain, watchdog=watchdog, restarts=restarts,
                                     found_failures=found_failures)
        for task in run.tasks:
            task.on_change = self._on_task_changed
        self._script = run.cluster.training.user_code
        self._tf_log: dict[str, str] = {}         # task -> the end of its stderr while its cluster forms
        # The first "started" event (its batch plan) of the newest attempt.
        self.started_record: dict | None = None
        self._listeners: list[Listener] = []
        # What it receives, kept in this console's state folder (console.store.cache); None: not kept.
        self.history: History | None = History(run)
        self._listeners.append(lambda event: self.history is not None and self.history.on_event(event))
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._busy_since = time.monotonic()  # when the session last paused or waited (``_share``)
        self._thread: threading.Thread | None = None
        self._poll = 0.2
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
        # Breakdowns asked for (why_slow): the asks out (a front end's thread starts one), and where training is.
        self._asks = speed.Asks(self._ask_context)
        self._systems: dict[str, dict] = {}  # host -> its newest system record (the verdict's notes)
        self._watching_job = False  # a Slurm run: its job's state is watched (once)
        self._asking = threading.Lock()
        self._newest_step = -1
        self._fits: set[str] = set()  # tasks whose script trains in Keras fit (a breakdown measures in it)
        self.verdict: speed.Verdict | None = None  # the newest

    @property
    def attempt(self) -> int:
        """Which attempt of the run is followed (a restart makes a new one)."""
        return self.supervisor.attempt

    @property
    def restarting(self) -> bool:
        return self.supervisor.restarting

    @property
    def settled(self) -> bool:
        """Every task has ended and the supervisor has nothing more to do (gave up, or nothing failed)."""
        return self.supervisor.settled

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

    def detach(self) -> None:
        """Stop following (the run goes on)."""
        with self._following:
            self._detached.set()
        self.supervisor.wake.set()
        self.run.detach()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def remove_host(self, host: str) -> None:
        """Go on without ``host`` now (an elastic run: its tasks leave, the others restart from their newest
        backup); a RunError that says why not, at once, when the run cannot (supervision does it on its thread)."""
        problem = self.supervisor.removal_problem(host)
        if problem:
            raise RunError(f"run {self.run.run_id} cannot go on without {host}: {problem}")
        self.supervisor.ask(REMOVE_HOST, host)

    def take_back(self, host: str) -> None:
        """Take back ``host``, which the run goes on without: its tasks rejoin at the next backup once it answers."""
        if not any(t.host == host for t in self.run.tasks if t.name in self.run.left):
            away = sorted({t.host for t in self.run.tasks if t.name in self.run.left})
            raise RunError(f"run {self.run.run_id} has no task on {host} that left it",
                           f"take back one of the hosts it goes on without: {', '.join(away)}" if away
                           else "every task is in the run")
        self.supervisor.ask(TAKE_BACK, host)

    def stop(self, grace: float = 10.0) -> list[dict]:
        """Stop every task (the person asked: their ends are no failures to restart from)."""
        self.stopped_by_you = True
        self.supervisor.stop_asked()
        if self.store is not None:  # every task says "stopping…" at once (the store: any thread may ask)
            self.store.note(CONSOLE_TASK, Mark.STOPPING, text.STOPPING_WORDS.format(grace=grace))
            for task in self.run.members:
                if not task.ended:
                    self.store.set_state(task.name, Mark.STOPPING, text.STOPPING_WORDS.format(grace=grace))
        return self.run.stop(grace)

    # ------------------------------------------------------------ the session's thread

    def _follower(self, attempt: int):
        def on_run_message(task: TaskState, message: dict) -> None:
            self._queue.put((attempt, task, message))  # on a follow thread: nothing more, whatever listeners do
        return on_run_message

    def _on_system(self, host: str, record: dict) -> None:
        """A host's system record, on its sampling thread: queued like the follows' messages."""
        self._queue.put((self.attempt, None, {"type": SYSTEM_QUEUED, "host": host, "record": record}))

    def _follow_again(self, tasks: list[TaskState] | None) -> None:
        """Follow ``tasks`` (None: every task) as the current attempt's, and the hosts' load with them (and the
        place's own state of the run: a Slurm job's)."""
        self.run.follow(self._follower(self.attempt), self._poll, only=tasks)
        self.run.sample_system(self._on_system, self.system_interval)
        if not self._watching_job:
            self._watching_job = True
            self.run.placement.watch(self.run, lambda job: self._queue.put((self.attempt, None,
                                                                            {"type": JOB_QUEUED, "job": job})))

    def _main(self) -> None:
        try:
            try:
                self._restore()
            except Exception:  # a bug must not end the session: it reads from the first records instead
                log.exception("taking up run %s from its snapshot", self.run.run_id)
            if self.run.exposed:  # said once a session, first: before the run's first lines
                self._say(SessionKind.EXPOSED, self.run.exposed)
            if self.run.seeded is not None:  # a person's resume copied a backup first
                self._say(SessionKind.SEEDED, f"run {self.run.run_id}: {text.seeded_text(self.run.seeded)}")
            if self.run.code_refreshed:  # a person's resume of a script's run: the code it runs now
                self._say(SessionKind.CODE_SHIPPED, f"run {self.run.run_id}: {self.run.code_refreshed}")
            with self._following:
                if not self._detached.is_set():  # before the loop: it ends when the follows have
                    self._follow_again(None)
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
        snapshot = self.history.restore_store(self.store)
        if snapshot is None:
            return
        try:
            for task in self.run.tasks:  # every offset first: then what supervision needs
                offset = snapshot.offsets.get(task.name)
                if isinstance(offset, int) and offset > 0:
                    task.offsets[METRICS] = self._read_to[task.name] = offset
            for task in self.run.tasks:
                records = snapshot.kept.get(task.name) or []
                records = [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []
                if records:
                    self._records(task, Batch(records), ingest=False)
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
        self.history.save_store(self.store, dict(self._read_to), self._kept)

    def _loop(self) -> None:
        try:
            while not self._detached.is_set():
                idle = self._queue.empty()
                try:
                    batch = [self._queue.get(timeout=0.5)]
                except queue.Empty:
                    batch = []
                if idle:
                    self._busy_since = time.monotonic()  # it waited: a pause
                while True:  # whatever else has come meanwhile, in order
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                for item in batch:
                    if self._detached.is_set():
                        return
                    self._dispatch(*item)
                    self._share()
                if batch and self.history is not None:
                    self.history.flush()  # once a batch: appends are buffered till here
                self.supervisor.tick()
                self._look_at_asks()
                if not batch and self.run.wait(0) and self._queue.empty():
                    if all(t.ended for t in self.run.tasks):
                        self._tell(SessionEvent(SessionKind.ENDED))
                    return
        finally:
            try:
                self._save()
            except Exception:
                log.exception("keeping a snapshot of run %s", self.run.run_id)
            if self.history is not None:
                self.history.close()
            self._done.set()  # whatever happened: nobody waits for this session for ever

    def _share(self) -> None:
        """After ``BUSY_SECONDS`` of handling without a pause, pause for ``PAUSE_SECONDS``: a host that sends
        more than the console can handle (its backlog held at the agents) leaves the window's thread the
        interpreter a part of the time, whole (Python lets one thread run at a time)."""
        if give_way():  # the window's thread was handling its events: it went first
            self._busy_since = time.monotonic()
            return
        now = time.monotonic()
        if now - self._busy_since >= BUSY_SECONDS:
            time.sleep(PAUSE_SECONDS)
            self._busy_since = time.monotonic()

    def _dispatch(self, attempt: int, task: TaskState, message: dict) -> None:
        try:
            if attempt == self.attempt or message.get("type") in (METRICS_MESSAGE, LOG_MESSAGE, SYSTEM_QUEUED,
                                                                  JOB_QUEUED):
                self._handle(task, message)  # an earlier attempt's records still count, not its ends
        except Exception:  # a bug must not end the session: the log has it
            log.exception("handling a message of %s", task.name if task is not None else message.get("host"))
        finally:
            if message.get("type") in (METRICS_MESSAGE, LOG_MESSAGE, SYSTEM_QUEUED):
                self.run.backlog.handled(message)  # held follows go on once the backlog is small again

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
        if kind == METRICS_MESSAGE:
            if self.history is not None:
                self.history.lines(task.name, message["lines"], message.get("offset"), message.get("skipped") or 0)
            if isinstance(message.get("offset"), int):  # as the cache counts them: the two agree
                self._read_to[task.name] = message["offset"]
            self._received = True
            lines = message["lines"]
            for start in range(0, len(lines), LINES_PER_PIECE):  # a message of thousands of lines in pieces,
                if start:                                         # the window's thread first between them
                    give_way()
                self._records(task, Batch([decode_line(line) for line in lines[start:start + LINES_PER_PIECE]]))
        elif kind == JOB_QUEUED:  # task is None: a Slurm run's job changed
            job = message["job"]
            words = f"run {self.run.run_id}: {text.job_words(job)}"
            if self.store is not None:  # the window's events list says it
                self.store.note(CONSOLE_TASK, SessionKind.JOB, words)
            self._tell(SessionEvent(SessionKind.JOB, text=words, message=job))
        elif kind == SYSTEM_QUEUED:  # task is None: the record is the host's
            host, record = message["host"], message["record"]
            self._systems[host] = record
            if self.store is not None:  # the run's own tasks there only
                self.store.ingest_system(host, record, tasks=self.run.tasks_sampled_on(host))
            self._tell(SessionEvent(SessionKind.SYSTEM, host=host, message=record))
        elif kind == FOLLOWING:
            started = number(message.get("started"))
            if task.launched_at is None and math.isfinite(started):
                task.launched_at = started  # the agent started it: user scripts count too
            if task.phase == STARTING:  # a Slurm job's task may wait for its node: pending till it starts
                task.change(PENDING if message.get("phase") == PENDING else RUNNING)
        elif kind == LOG_MESSAGE:
            if self._script and message["stream"] == STDERR and not all(t.cluster_formed for t in self.run.tasks):
                self._read_tensorflow_signs(task, message.get("text", ""))
            self._tell(SessionEvent(SessionKind.LOG, task, stream=message["stream"], text=message.get("text", "")))
        elif kind in (RECONNECTING, RECONNECTED):
            words = text.connection_text(task.host, message)
            if self.store is not None:
                self.store.note(task.name, kind, words)
            self._tell(SessionEvent(SessionKind.CONNECTION, task, text=words, message=message))
        elif kind in (END, FOLLOW_ERROR):
            if task.ended:  # one launch ends once: its follow says no more after its end
                log.warning("%s: a second end of one launch, ignored: %s", task.name, message)
                return
            phase = message.get("phase")
            task.exit = message.get("exit")
            asked = self.supervisor.stop_requested
            code = (task.exit or {}).get("returncode")
            # tfcc's stop of a group after a failure met a task that exited with an error of its own (an exit
            # code, not the stop's signal): it failed too, and says so.
            own_error = not asked and isinstance(code, int) and not isinstance(code, bool) and 0 < code < 128
            if phase in (FAILED, LOST) and (asked or message.get("stopped") or (task.exit or {}).get("stopped")) \
                    and not own_error:
                phase = STOPPED  # a stop someone asked for is no failure, whatever signal ended it
            task.change(phase if phase in ENDED else ERROR)
            if task.phase == STOPPED:
                words = (text.STOPPED_BY_YOU if self.stopped_by_you else text.STOPPED_BY_TFCC if asked
                         else self.supervisor.stopping_why or text.STOPPED_ELSEWHERE)
                if self.store is not None:
                    self.store.set_state(task.name, Mark.STOPPED, words)
            else:
                words = text.outcome_text(task.phase, task.exit, message.get("error"))
            self.supervisor.ended(task, message, words)
            if self.store is not None:
                self.store.note(task.name, task.phase, f"process ended: {words}")
            self._tell(SessionEvent(SessionKind.TASK_ENDED, task, text=words, message=message))
            if task.phase == FINISHED:
                self.supervisor.look_at_a_finished(task)

    def _records(self, task: TaskState, batch: Batch, ingest: bool = True) -> None:
        """A task's records: phases, supervision, the store (unless ``ingest`` is false: records a
        snapshot kept, whose metrics the store has), listeners."""
        task.records += len(batch)
        supervisor = self.supervisor
        kept = self._kept.setdefault(task.name, [])
        for r in batch:
            name = r.get("event")
            kind = r.get("type")
            if kind in (RecordType.STEP, RecordType.ALIVE):  # in its place among the events, the newest of a run
                if kept and kept[-1].get("type") == kind:
                    kept[-1] = r
                else:
                    kept.append(r)
            elif kind != RecordType.UNREADABLE:
                kept.append(r)
                if len(kept) > MAX_KEPT:
                    _thin(kept)
            if kind == RecordType.STEP:
                if not task.cluster_formed and _trains(r):
                    self._formed(task)  # a script whose capture saw training before any strategy
                supervisor.step(task, r)
                if ingest and number(r.get("attempt")) == self.attempt:
                    self._stepped(r)
            elif kind == RecordType.BREAKDOWN:
                if ingest:
                    self._breakdown(task, r)
            elif kind == RecordType.EPOCH:
                if not task.cluster_formed and _trains(r):
                    self._formed(task)
                supervisor.epoch(task, r)
            elif kind != RecordType.EVENT:
                continue
            elif name == Event.LAUNCHED:  # the newest launch counts (a resumed run has several)
                supervisor.launched(task, r.get("workload") == SCRIPT_WORKLOAD)
                when = number(r.get("time"))
                task.launched_at = when if math.isfinite(when) else task.launched_at
                self.run.placement.launched(task, r)  # where it runs now, when its place chose it (Slurm's node)
                task.cluster_formed = False
                if self._moves(task):
                    task.change(WAITING)
            elif name == Event.CLUSTER_FORMED:
                self._formed(task)
            elif name in Event.UP:  # a server of parameter-server training, or its evaluator: up
                self._up(task)
            elif name == Event.BACKING_UP:
                supervisor.backing_up(task)
            elif name == Event.BACKED_UP and ingest:
                supervisor.backed_up(task, r)
            elif name == Event.STARTED:
                if self.started_record is None or _later(self.started_record, r):
                    self.started_record = r
                supervisor.started(task, r)
            elif name == Event.FAILED:
                supervisor.failed_event(task, r)
            elif name in (Event.TRAIN_BEGIN, Event.TRAIN_END):  # a script's fit: what it does between is its own
                supervisor.fit(task, name == Event.TRAIN_BEGIN)
                if name == Event.TRAIN_BEGIN:
                    self._fits.add(task.name)
            elif name == Event.RESUMED:
                supervisor.resumed(r)
        if self.store is not None and ingest:
            self.store.ingest(task.name, batch)
        self._tell(SessionEvent(SessionKind.RECORDS, task, records=batch.records, batch=batch))
        if batch.started is not None and batch.started is self.started_record:
            self._tell(SessionEvent(SessionKind.TRAINING_STARTED, task, records=[batch.started]))

    def _formed(self, task: TaskState) -> None:
        """``task``'s cluster has formed: it trains."""
        if self._up(task):
            self.supervisor.formed(task)

    def _up(self, task: TaskState) -> bool:
        """``task`` is up: its cluster formed, or it serves (a worker or ps of parameter-server training,
        which the coordinator drives; an evaluator). Whether it moved (an ended launch does not)."""
        if not self._moves(task):
            return False
        task.cluster_formed = True
        task.change(TRAINING)
        self._mark(task, Mark.RUNNING)
        return True

    def _moves(self, task: TaskState) -> bool:
        """Whether ``task``'s records may still move its phase: not once its launch has ended (a record
        after its end, which no agent sends, is kept all the same; it moves nothing, clears no badge)."""
        if task.ended:
            log.warning("%s: a record after its end (%s) moves it no more", task.name, task.phase)
            return False
        return True

    def _read_tensorflow_signs(self, task: TaskState, text_: str) -> None:
        """What TensorFlow's own log says of a script's cluster: formed (its leader's barrier passed: every
        task joined), a parameter-server worker or ps serving, or the tasks the leader still waits for."""
        seen = self._tf_log[task.name] = (self._tf_log.get(task.name, "") + text_)[-8192:]
        if TF_FORMED.search(seen):
            self.supervisor.stragglers = ""
            for each in self.run.tasks:
                if not each.cluster_formed and not each.ended:
                    self._formed(each)
            return
        if TF_SERVING.search(seen) and self.run.cluster.parameter_server and task.name != task_name(CHIEF, 0):
            self._up(task)
            return
        waiting = None
        for waiting in TF_WAITING.finditer(seen):
            pass
        if waiting is None:
            return
        if waiting.group(1) == "0":
            self.supervisor.stragglers = ""
            return
        # "Example stragglers:" and their names follow on the next lines.
        names = [task_name(role, int(index)) for role, index in TF_TASK.findall(seen[waiting.end():])]
        self.supervisor.stragglers = (", ".join(dict.fromkeys(names))
                                      or f"{waiting.group(1)} of its {waiting.group(2)} tasks")

    def _on_task_changed(self, task: TaskState, old: str, new: str) -> None:
        """A task's phase changed (on the session's thread): a relaunch's log says nothing of the old cluster."""
        if new == STARTING:
            self._tf_log.pop(task.name, None)
        self._tell(SessionEvent(SessionKind.PHASE, task, message={"from": old, "to": new}))

    def _mark(self, task: TaskState, state: str, words: str = "") -> None:
        """What the window's badges show of ``task`` (a Mark): running, stalled, failed (with why), restarting."""
        if self.store is not None:
            self.store.set_state(task.name, state, words)
        self._tell(SessionEvent(SessionKind.STATE, task, text=words, message={"state": state}))

    def _say(self, kind: str, words: str, message: dict | None = None) -> None:
        """A supervision event (a SessionKind), in the store and to listeners (``message``: what it says beside its
        words). A run given up: its place takes away what would start its tasks again (a Slurm job, whose script
        would, with nobody following)."""
        if kind == SessionKind.GAVE_UP:
            self.run.placement.given_up(self.run)
        if self.store is not None:
            self.store.note(CONSOLE_TASK, kind, words)
        self._tell(SessionEvent(kind, text=words, message={**(message or {}), "type": kind, "attempt": self.attempt}))

    def _tell(self, event: SessionEvent) -> None:
        if self._detached.is_set():
            return
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                log.exception("a listener of run %s failed on %s", self.run.run_id, event.kind)
