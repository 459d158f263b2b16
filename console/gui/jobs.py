"""Background jobs of the window: checks, Make ready, runs and host-key questions, reported as signals.

Nothing here blocks the UI thread: one-shot work (a check, a provision, a stop) runs on a
thread of its own, each task of a run is followed by ``Run.follow``'s threads,
and every result comes back as a Qt signal (emitted from those threads, so Qt
queues it to the UI thread). Step metrics do not travel as signals at all: they
go into a ``MetricsStore`` that the dashboard reads on its timer.
"""

from __future__ import annotations

import logging
import threading
import time

from PySide6.QtCore import QObject, Signal

from agent.protocol import ERROR, FINISHED
from console import checks
from console import cluster as cl
from console import provision
from console.errors import TfccError, describe
from console.run.placement import placement_for
from console.run.runner import Run
from console.run.session import RunSession
from console.run.supervisor import OFFER, REMOVE_HOST, RESTART, WATCHDOG_SECONDS
from console.run.where import where
from console.states import SessionEvent, SessionKind
from console.store.cache import CONSOLE_TASK
from console.store.manifests import new_run_id
from console.store.metrics import MetricsStore
from console.gui.events_view import LogTails

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

    ``asked`` reaches the UI thread with the question's number, which shows the host and fingerprint and calls
    ``answer`` with that number: an answer counts only for its own question. A question nobody answers in
    ``timeout`` seconds is a no, and ``expired`` says so (the window closes its dialog).
    """

    asked = Signal(int, str, str, str)  # the question's number, host, key type, SHA256 fingerprint
    expired = Signal(int)               # that question was given up on (a no): its dialog goes

    def __init__(self, timeout: float = 600.0, parent=None):
        super().__init__(parent)
        self.timeout = timeout
        self._lock = threading.Lock()   # one question at a time
        self._state = threading.Lock()  # guards the question asked now and its answer
        self._number = 0
        self._open: int | None = None   # the question waiting for its answer
        self._answered = threading.Event()
        self._answer = False

    def __call__(self, hostname: str, key_type: str, fingerprint: str) -> bool:
        with self._lock:
            with self._state:
                self._number += 1
                number = self._open = self._number
                self._answered.clear()
                self._answer = False
            self.asked.emit(number, hostname, key_type, fingerprint)
            answered = self._answered.wait(self.timeout)
            with self._state:
                self._open = None
                trust = answered and self._answer
            if not answered:
                log.warning("nobody answered about the host key of %s", hostname)
                self.expired.emit(number)
            return trust

    def answer(self, number: int, trust: bool) -> None:
        """The person's answer to question ``number``; one to a question no longer asked counts for nothing."""
        with self._state:
            if number != self._open:
                log.info("an answer to host-key question %d, which is not the one asked: ignored", number)
                return
            self._answer = trust
            self._answered.set()

    def refuse_all(self) -> None:
        """The window goes: whatever is asked now is a no."""
        with self._state:
            if self._open is not None:
                self._answer = False
                self._answered.set()


def place_report(cluster: cl.Cluster, ask_host_key, deadline: float) -> checks.Report | None:
    """The pre-flight of the place the tasks run, as a check's report: a Slurm login host's Slurm would take the
    job, or the one line that says why not (nothing is submitted); None where the hosts themselves are checked."""
    started = time.monotonic()
    placement = placement_for(cluster)
    try:
        if placement.preflight(ask_host_key, timeout=max(deadline, 30.0)) is None:
            return None
        problems = []
    except TfccError as exc:
        problems = [checks.Problem(placement.name, exc.cause, exc.fix or "")]
    return checks.Report([], [], {}, problems, time.monotonic() - started)


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
            report = place_report(cluster, self.ask_host_key, deadline)
            if report is None:
                report = checks.check(cluster, deadline=deadline, ask_host_key=self.ask_host_key,
                                      on_progress=lambda d, t, w: self.progressed.emit(d, t, w))
        except Exception as exc:  # a check that cannot even start: say why
            log.exception("check failed")
            self.failed.emit(str(exc))
            return
        self.finished.emit(report)


class ProvisionJob(QObject):
    """Make ready (``console.provision.Provision``) on a thread: each host's progress, and the report, as signals.

    ``progressed`` carries a host's ``HostResult`` (a copy) each time it changes, from that host's thread; Qt
    queues it to the UI thread. ``cancel`` asks the provision to end, on a thread of its own (it tells the hosts)."""

    started = Signal()                   # a provision began (on the UI thread, in ``start``)
    progressed = Signal(object)          # provision.HostResult
    finished = Signal(object)            # provision.Report
    failed = Signal(str)                 # it could not run at all: why, in one line

    def __init__(self, threads: Threads, ask_host_key, parent=None, timeout: float = 20.0):
        super().__init__(parent)
        self.threads = threads
        self.ask_host_key = ask_host_key
        self.timeout = timeout
        self._lock = threading.Lock()    # guards the provision going on and a cancel asked before it began
        self._provision: provision.Provision | None = None
        self._cancel_asked = False

    def start(self, cluster: cl.Cluster) -> None:
        """Make ``cluster``'s hosts ready (a copy: the setup goes on editing its own)."""
        with self._lock:
            self._cancel_asked = False
        self.started.emit()
        self.threads.start("provision", self._run, cluster)

    def cancel(self) -> None:
        """End the provision going on (nothing half made is used); no wait here."""
        with self._lock:
            self._cancel_asked = True
            job = self._provision
        if job is not None:
            self.threads.start("provision-cancel", job.cancel)

    def _run(self, cluster: cl.Cluster) -> None:
        try:  # made here: its spec may read a requirements file
            job = provision.Provision(cluster, self.ask_host_key, self.progressed.emit, self.timeout)
            with self._lock:
                self._provision = job
                cancel = self._cancel_asked
            if cancel:
                job.cancel()
            report = job.run()
        except TfccError as exc:
            self.failed.emit(describe(exc))
            return
        except Exception as exc:  # noqa: BLE001 - one line in the window; the log has the traceback
            log.exception("make ready failed")
            self.failed.emit(describe(exc))
            return
        finally:
            with self._lock:
                self._provision = None
        self.finished.emit(report)


class RunBridge(QObject):
    """The window's view of one run: start or attach, then the core ``console.run.session.RunSession``
    follows it (decoding, phases, the store, the watchdog) and this bridge turns its events into
    Qt signals (emitted on the session's thread; Qt queues them to the UI thread)."""

    run_started = Signal(str)             # run id (its tasks are starting)
    start_failed = Signal(str)            # why, in words
    _start_failed_for = Signal(object, str)  # the session whose start failed, why (to the UI thread)
    deploy_progressed = Signal(str, int, int)  # host, bytes sent, bytes total
    training_started = Signal(dict)       # each attempt's first "started" record (its batch plan)
    logs_received = Signal()              # tasks wrote: ``take_logs`` has their lines (said once till taken)
    task_ended = Signal(str, str)         # task, how it ended in words (console.text)
    watchdog_fired = Signal(str)
    supervised = Signal(str, str)         # a supervision event's kind (SessionKind.SUPERVISION), its words
    states_changed = Signal()             # what supervision says of the tasks changed (the store has it)
    stopped = Signal()
    ended = Signal()                      # every task has ended
    why_slow_asked = Signal()             # every training task has the ask: the verdict follows
    explained = Signal(dict)              # a breakdown asked for came (console.speed.Verdict.as_dict())
    why_slow_refused = Signal(str)        # the run cannot be asked now: why, and what to do
    located = Signal(dict)                # where the tasks are, as asked (console.hangs.Report.as_dict())
    hang_located = Signal(dict)           # where the tasks were when the stall watchdog called a hang (the same)
    where_refused = Signal(str)           # where the tasks are could not be asked: why, and what to do

    def __init__(self, threads: Threads, ask_host_key=None, parent=None):
        super().__init__(parent)
        self.threads = threads
        self.ask_host_key = ask_host_key
        self.core: RunSession | None = None
        self.store = MetricsStore()
        self._logs = LogTails()
        self._start_failed_for.connect(self._on_self_start_failed_for)

    def take_logs(self) -> list[tuple[str, list[str], int, str]]:
        """What the tasks wrote since the last take (``LogTails.take``): on the window's thread, at its pace."""
        return self._logs.take()

    @property
    def run(self) -> Run | None:
        return None if self.core is None else self.core.run

    @property
    def active(self) -> bool:
        """A task still runs, or the supervisor is restarting them (Stop stays possible)."""
        core = self.core
        return core is not None and (core.restarting or any(not t.ended for t in core.run.tasks))

    @property
    def resumable(self) -> bool:
        """The run ended with tasks that did not finish (failed, stopped, given up): Resume can go on."""
        core = self.core
        return core is not None and core.settled and any(t.phase != FINISHED for t in core.run.members)

    @property
    def code_failed(self) -> bool:
        """Supervision gave up on an error a restart would repeat (the code, its settings)."""
        core = self.core
        return core is not None and core.supervisor.code_failed

    def ask_host(self, what: str, host: str) -> None:
        """A person asks an elastic run to go on without ``host`` (REMOVE_HOST) or to take it back (TAKE_BACK):
        queued for supervision (no wait); a RunError says at once why it cannot be."""
        if self.core is None:
            return
        if what == REMOVE_HOST:
            self.core.remove_host(host)
        else:
            self.core.take_back(host)

    def why_slow(self) -> None:
        """Ask the run where its workers' step time goes (on a thread: the agents are asked); ``explained`` brings
        the verdict, ``why_slow_refused`` why it cannot be asked now."""
        core = self.core
        if core is None:
            self.why_slow_refused.emit("No run is followed: start one, or open a running one from the Runs tab")
            return
        problem = core.measure_problem()  # what the session knows: no wait
        if problem:
            self.why_slow_refused.emit(f"Not now: {problem[0]}; {problem[1]}")
            return
        self.threads.start("why-slow", self._why_slow, core)

    def _why_slow(self, core: RunSession) -> None:
        try:
            core.why_slow()
            self.why_slow_asked.emit()
        except TfccError as exc:
            self.why_slow_refused.emit(describe(exc))
        except Exception as exc:  # noqa: BLE001 - said in the window; the log has the traceback
            log.exception("asking why the run is slow")
            self.why_slow_refused.emit(f"could not ask: {exc}")

    def where(self) -> None:
        """Ask every task of the run where it is (on a thread: each task's host is asked, for seconds); ``located``
        brings the report, ``where_refused`` why it could not be had."""
        core = self.core
        if core is None or not self.active:
            self.where_refused.emit("No run is going on: start one, or open a running one from the Runs tab")
            return
        self.threads.start("where", self._where, core)

    def _where(self, core: RunSession) -> None:
        try:
            said = where(core.run, looks=2).as_dict()  # two looks: one catches a healthy task mid-line
        except TfccError as exc:
            self.where_refused.emit(describe(exc))
            return
        except Exception as exc:  # noqa: BLE001 - said in the window; the log has the traceback
            log.exception("asking where the tasks are")
            self.where_refused.emit(f"could not ask where the tasks are: {exc}")
            return
        if core is self.core:
            self.located.emit(said)
        else:  # the window follows another run now (or none): this one's answer is no use to it
            self.where_refused.emit(f"Run {core.run.run_id} is followed no more: ask again about the run shown")

    def start(self, cluster: cl.Cluster, run_id: str | None = None) -> None:
        self.detach()  # a previous run, ended or not: stop following it
        self.store = MetricsStore()
        self.core = self._session(Run(cluster, run_id or new_run_id(), self.ask_host_key))
        self.threads.start("start", self._start, self.core)

    def _start(self, core: RunSession, resume: bool = False) -> None:
        try:
            core.run.start(on_progress=self.deploy_progressed.emit, resume=resume, explicit=resume)
        except Exception as exc:
            log.exception("start failed")
            core.run.detach()
            self._start_failed_for.emit(core, f"the run could not {'resume' if resume else 'start'}: {exc}")
            return
        self.run_started.emit(core.run.run_id)
        core.follow()

    def _on_self_start_failed_for(self, core: RunSession, message: str) -> None:
        if core is self.core:  # not a run already detached from (a new one may be starting)
            self.core = None   # its connections were closed by the thread that failed
            self.start_failed.emit(message)

    def attach(self, run: Run) -> None:
        """Follow a run found on its hosts, from its first record (its whole history). A failure
        that happened while no console followed it is offered for a restart, not restarted."""
        self.detach()
        self.store = MetricsStore()
        self.core = self._session(run, OFFER)
        self.core.follow()
        self.run_started.emit(run.run_id)

    def resume(self) -> None:
        """Start the followed run's tasks again from their backups (a new attempt), and follow it anew."""
        run = self.run
        if run is None:
            return
        self.detach()
        self.store = MetricsStore()  # the whole history again, then the new attempt's records
        self.core = self._session(Run(run.cluster, run.run_id, self.ask_host_key))  # the manifest: on the thread
        self.threads.start("resume", self._start, self.core, True)

    def _session(self, run: Run, found_failures: str = RESTART) -> RunSession:
        core = RunSession(run, self.store, WATCHDOG_SECONDS, found_failures=found_failures)
        self._logs = LogTails()  # what an earlier run wrote and was not shown yet is not this one's

        def on_event(event: SessionEvent) -> None:
            if core is not self.core:  # a run this window no longer follows
                return
            if event.kind == SessionKind.TRAINING_STARTED:
                self.training_started.emit(event.records[0])
            elif event.kind == SessionKind.LOG:
                if self._logs.add(event.task.name, event.stream, event.text):
                    self.logs_received.emit()
            elif event.kind == SessionKind.TASK_ENDED:
                self.task_ended.emit(event.task.name, event.text)
            elif event.kind == SessionKind.WATCHDOG:
                self.watchdog_fired.emit(event.text)
            elif event.kind == SessionKind.WHERE:  # a stall the watchdog found: where the tasks were
                self.supervised.emit(event.kind, event.text)
                if isinstance(event.message.get("where"), dict):
                    self.hang_located.emit(event.message["where"])
            elif event.kind in SessionKind.SUPERVISION or event.kind == SessionKind.JOB:
                self.supervised.emit(event.kind, event.text)  # a Slurm job's state: the status bar too
            elif event.kind == SessionKind.STATE:
                self.states_changed.emit()
            elif event.kind == SessionKind.ENDED:
                self.ended.emit()
            elif event.kind == SessionKind.EXPLAINED:
                self.explained.emit(event.message)

        core.subscribe(on_event)
        return core

    def stop(self) -> None:
        if self.core is not None:
            self.threads.start("stop", self._stop, self.core)

    def _stop(self, core: RunSession) -> None:
        try:
            core.stop()
        except Exception as exc:
            log.exception("stop failed")
            self.store.note(CONSOLE_TASK, ERROR, f"stopping failed: {exc}")
        self.stopped.emit()

    def detach(self) -> None:
        """Stop following (the run goes on). The connections close on a thread (``threads`` joins it)."""
        core, self.core = self.core, None
        if core is not None:
            self.threads.start("detach", core.detach)
