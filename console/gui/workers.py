"""Background work for the window: checks, runs and host-key questions, reported as signals.

Nothing here blocks the UI thread: one-shot work (a check, a stop) runs on a
thread of its own, each task of a run is followed by ``Run.follow``'s threads,
and every result comes back as a Qt signal (emitted from those threads, so Qt
queues it to the UI thread). Step metrics do not travel as signals at all: they
go into a ``MetricsStore`` that the dashboard reads on its timer.
"""

from __future__ import annotations

import logging
import threading
import time

from PySide6.QtCore import QObject, QTimer, Signal

from console import checks
from console import cluster as cl
from console.metrics_store import MetricsStore
from console.runner import ENDED, WATCHDOG_SECONDS, Run, RunError, connection_words, known_runs, new_run_id

log = logging.getLogger("console.gui")


class Threads:
    """The window's background threads, joined on quit."""

    def __init__(self):
        self._threads: list[threading.Thread] = []

    def start(self, name: str, target, *args) -> threading.Thread:
        self._threads = [t for t in self._threads if t.is_alive()]
        thread = threading.Thread(target=target, args=args, name=f"tfcc-gui-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def busy(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def join(self, timeout: float = 10.0) -> bool:
        end = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)


class HostKeyAsker(QObject):
    """Asks the person about an unknown host key from an SSH thread, and waits for the answer.

    ``asked`` reaches the UI thread, which shows the fingerprint and calls ``answer``.
    A question nobody answers in ``timeout`` seconds is a no.
    """

    asked = Signal(str, str, str)  # host, key type, SHA256 fingerprint

    def __init__(self, timeout: float = 600.0, parent=None):
        super().__init__(parent)
        self.timeout = timeout
        self._lock = threading.Lock()  # one question at a time
        self._answered = threading.Event()
        self._answer = False

    def __call__(self, hostname: str, key_type: str, fingerprint: str) -> bool:
        with self._lock:
            self._answered.clear()
            self._answer = False
            self.asked.emit(hostname, key_type, fingerprint)
            if not self._answered.wait(self.timeout):
                log.warning("nobody answered about the host key of %s", hostname)
                return False
            return self._answer

    def answer(self, trust: bool) -> None:
        self._answer = trust
        self._answered.set()


class CheckJob(QObject):
    """A pre-flight check on a thread."""

    progressed = Signal(int, int, str)   # done, total, what
    finished = Signal(object)            # checks.Report
    failed = Signal(str)

    def __init__(self, threads: Threads, ask_host_key, parent=None):
        super().__init__(parent)
        self.threads = threads
        self.ask_host_key = ask_host_key

    def start(self, cluster: cl.Cluster, deadline: float = 20.0) -> None:
        self.threads.start("check", self._run, cluster, deadline)

    def _run(self, cluster: cl.Cluster, deadline: float) -> None:
        try:
            report = checks.check(cluster, deadline=deadline, ask_host_key=self.ask_host_key,
                                  on_progress=lambda d, t, w: self.progressed.emit(d, t, w))
        except Exception as exc:  # a check that cannot even start: say why
            log.exception("check failed")
            self.failed.emit(str(exc))
            return
        self.finished.emit(report)


class RunSession(QObject):
    """One run seen from the window: start or attach, follow every task, stop or detach."""

    run_started = Signal(str)             # run id (its tasks are starting)
    start_failed = Signal(str)            # why, in words
    deploy_progressed = Signal(str, int, int)  # host, bytes sent, bytes total
    records_received = Signal(str, list)  # task, its non-step records (events and epochs)
    log_received = Signal(str, str, str)  # task, stream, text
    task_ended = Signal(str, str)         # task, phase
    watchdog_fired = Signal(str)
    stopped = Signal()
    ended = Signal()                      # every task has ended

    def __init__(self, threads: Threads, ask_host_key=None, parent=None):
        super().__init__(parent)
        self.threads = threads
        self.ask_host_key = ask_host_key
        self.run: Run | None = None
        self.store = MetricsStore()
        self._watchdog = QTimer(self)
        self._watchdog.setInterval(1000)
        self._watchdog.timeout.connect(self._on_watchdog_timeout)
        self._warned = False
        self.start_failed.connect(self._on_self_start_failed)

    @property
    def active(self) -> bool:
        return self.run is not None and any(t.phase not in ENDED for t in self.run.tasks)

    # ------------------------------------------------------------ start / attach

    def start(self, cluster: cl.Cluster, run_id: str | None = None) -> None:
        if self.run is not None:  # a previous run, ended or not: stop following it
            self.detach()
        self.store = MetricsStore()
        self._warned = False
        run = Run(cluster, run_id or new_run_id(), self.ask_host_key)
        self.run = run
        self.threads.start("start", self._start, run)

    def _start(self, run: Run) -> None:
        try:
            run.start(on_progress=self.deploy_progressed.emit)
        except Exception as exc:
            log.exception("start failed")
            run.detach()
            self.start_failed.emit(f"the run could not start: {exc}")
            return
        self.run_started.emit(run.run_id)
        run.follow(self._messages_of(run))

    def _on_self_start_failed(self, _message: str) -> None:
        self.run = None  # its connections were closed by the thread that failed

    def attach(self, run: Run) -> None:
        """Follow a run that is already going, from its first record (its whole history)."""
        if self.run is not None:
            self.detach()
        self.store = MetricsStore()
        self._warned = True  # an attached run has long been launched
        self.run = run
        run.follow(self._messages_of(run))
        self.run_started.emit(run.run_id)

    def _messages_of(self, run: Run):
        """The follow callback of ``run``: its messages count only while it is this session's run
        (a follow thread of a detached run may still deliver one)."""
        def on_message(task, message: dict) -> None:
            if run is self.run:
                self._on_run_message(task, message)
        return on_message

    def _on_run_message(self, task, message: dict) -> None:
        kind = message.get("type")
        if kind == "metrics":
            records = message["records"]
            self.store.ingest(task.name, records)
            others = [r for r in records if r.get("type") != "step"]
            if others:
                self.records_received.emit(task.name, others)
        elif kind == "log":
            self.log_received.emit(task.name, message["stream"], message.get("text", ""))
        elif kind in ("reconnecting", "reconnected"):
            self.store.note(task.name, kind, connection_words(task, message))
        elif kind in ("end", "error"):
            phase = message.get("phase") or "error"
            code = (message.get("exit") or {}).get("returncode")
            self.store.note(task.name, phase, f"process ended: {phase}"
                            + (f" (exit code {code})" if code not in (None, 0) else "")
                            + (f": {message['error']}" if message.get("error") else ""))
            self.task_ended.emit(task.name, phase)
            if self.run is not None and all(t.phase in ENDED for t in self.run.tasks):
                self.ended.emit()

    def _on_watchdog_timeout(self) -> None:
        if self.run is None or self._warned:
            return
        report = self.run.waiting_report(WATCHDOG_SECONDS)
        if report:
            self._warned = True
            self.store.note("console", "watchdog", report)
            self.watchdog_fired.emit(report)

    # ------------------------------------------------------------ stop / detach

    def stop(self) -> None:
        run = self.run
        if run is None:
            return
        self.threads.start("stop", self._stop, run)

    def _stop(self, run: Run) -> None:
        try:
            run.stop()
        except Exception as exc:
            log.exception("stop failed")
            self.store.note("console", "error", f"stopping failed: {exc}")
        self.stopped.emit()

    def detach(self) -> None:
        """Stop following (the run goes on). The connections close on a thread (``threads`` joins it)."""
        run, self.run = self.run, None
        self._watchdog.stop()
        if run is not None:
            self.threads.start("detach", run.detach)

    def follow_watchdog(self) -> None:
        self._watchdog.start()


def running_runs(cluster: cl.Cluster, ask_host_key=None, limit: int = 20) -> list[Run]:
    """Runs this console started on ``cluster``'s hosts that still have a task going (blocking)."""
    found = []
    addresses = {(h.name, h.address, h.local) for h in cluster.hosts}
    for run_id in list(reversed(known_runs()))[:limit]:
        try:
            run = Run.load(run_id, ask_host_key)
        except (RunError, cl.ClusterFileError, ValueError, KeyError):
            continue
        if not {(h.name, h.address, h.local) for h in run.cluster.hosts} <= addresses:
            run.detach()
            continue
        try:
            phases = [s["phase"] for s in run.status()]
        except Exception as exc:
            log.info("run %s: no status (%s)", run_id, exc)
            run.detach()
            continue
        if any(p not in ENDED for p in phases):
            for task in run.tasks:
                task.phase = "starting"
            found.append(run)
        else:
            run.detach()
    return found
