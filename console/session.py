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
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from agent.protocol import ENDED, ERROR, RUNNING, STARTING, TRAINING, WAITING
from console import text
from console.metrics_store import MetricsStore
from console.runner import WATCHDOG_SECONDS, Run, TaskState

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
    ``task_ended`` (``message``, ``text``), ``watchdog`` (``text``), ``ended`` (every task ended).
    """

    kind: str
    task: TaskState | None = None
    records: list = field(default_factory=list)
    stream: str = ""
    text: str = ""
    message: dict = field(default_factory=dict)


Listener = Callable[[SessionEvent], None]


class RunSession:
    """Follow ``run``; ``store`` (optional) gets every record, listeners get ``SessionEvent``\\ s."""

    def __init__(self, run: Run, store: MetricsStore | None = None, watchdog: float = WATCHDOG_SECONDS):
        self.run = run
        self.store = store
        self.watchdog = watchdog
        self.started_record: dict | None = None  # the run's first "started" event (its batch plan)
        self.warned = False
        self._listeners: list[Listener] = []
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._detached = threading.Event()
        self._opened = time.monotonic()

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def follow(self, poll: float = 0.2) -> None:
        """Follow every task from where it was last read (from its first record, for a new session)."""
        self.run.follow(self._on_run_message, poll)  # first: the session's thread ends when they have
        thread = threading.Thread(target=self._loop, name=f"tfcc-session-{self.run.run_id}", daemon=True)
        thread.start()
        self._thread = thread  # only once started: a detach joins it

    def wait(self, timeout: float | None = None) -> bool:
        """Whether every task's follow has ended and all it sent has been handled."""
        return self._done.wait(timeout)

    def detach(self) -> None:
        """Stop following (the run goes on)."""
        self._detached.set()
        self.run.detach()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def stop(self, grace: float = 10.0) -> list[dict]:
        return self.run.stop(grace)

    # ------------------------------------------------------------ the session's thread

    def _on_run_message(self, task: TaskState, message: dict) -> None:
        self._queue.put((task, message))  # on a follow thread: nothing more, whatever the listeners do

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
                for task, message in batch:
                    if self._detached.is_set():
                        return
                    try:
                        self._handle(task, message)
                    except Exception:  # a bug must not end the session: the log has it
                        log.exception("handling a message of %s", task.name)
                try:
                    self._check_watchdog()
                except Exception:
                    log.exception("the watchdog of run %s", self.run.run_id)
                if not batch and self.run.wait(0) and self._queue.empty():
                    if all(t.phase in ENDED for t in self.run.tasks):
                        self._tell(SessionEvent("ended"))
                    return
        finally:
            self._done.set()  # whatever happened: nobody waits for this session for ever

    def _handle(self, task: TaskState, message: dict) -> None:
        kind = message.get("type")
        if kind == "metrics":
            records = [decode_line(line) for line in message["lines"]]
            self._records(task, records)
        elif kind == "following":
            started = text.metric_value(message.get("started"))
            if task.launched_at is None and math.isfinite(started):
                task.launched_at = started  # the agent started it: user scripts count too
            if task.phase == STARTING:
                task.phase = RUNNING
        elif kind == "log":
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
            if self.store is not None:
                self.store.note(task.name, task.phase, f"process ended: {words}")
            self._tell(SessionEvent("task_ended", task, text=words, message=message))

    def _records(self, task: TaskState, records: list[dict]) -> None:
        task.records += len(records)
        started = None
        for r in records:
            name = r.get("event")
            if name == "launched":  # the newest launch counts (a resumed run has several)
                when = text.metric_value(r.get("time"))
                task.launched_at = when if math.isfinite(when) else task.launched_at
                task.cluster_formed = False
                task.phase = WAITING
            elif name == "cluster_formed":
                task.cluster_formed = True
                task.phase = TRAINING
            elif name == "started" and self.started_record is None:
                self.started_record = started = r
        if self.store is not None:
            self.store.ingest(task.name, records)
        self._tell(SessionEvent("records", task, records=records))
        if started is not None:
            self._tell(SessionEvent("training_started", task, records=[started]))

    def _check_watchdog(self) -> None:
        # A session that attaches to a run gives its cluster the same time from now: the replay of
        # an old run's history is no wait, whenever its tasks started.
        if self.warned or time.monotonic() - self._opened < self.watchdog:
            return
        report = self.run.waiting_report(self.watchdog)
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
