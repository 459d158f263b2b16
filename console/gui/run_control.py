"""Following a run in the window: start, stop, resume, detach, reattach, and what its session says.

A run found on the profile's hosts or opened from the Runs panel is followed here too; what the run's session
says is shown in the Dashboard and the diagram, and in words through ``reported``.
"""

from __future__ import annotations

import copy
import logging
from typing import Callable

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QMessageBox, QTabWidget, QWidget

from agent.protocol import FAILED, FINISHED, STOPPED
from console import cluster as cl
from console.catalog import overview, running_runs
from console.errors import TfccError, describe
from console import speed, text
from console.gui.dashboard import Dashboard, RunHeader
from console.gui.events_view import LOG_TAKE_MS
from console.gui.diagram import ClusterDiagram
from console.gui.jobs import RunBridge, Threads
from console.gui.log_window import WHOLE_LOG_BYTES, LogWindow, shown_log
from console.run.runner import Run
from console.run.supervisor import REMOVE_HOST
from console.gui.runs_panel import RunsPanel
from console.states import RunState, SessionKind, run_state
from console.store.labels import set_label
from console.store.cache import CONSOLE_TASK

log = logging.getLogger("console.gui")

LAST_RUN_SECONDS = 30.0  # the hosts of the last run may take this long to say how it is (in the background)
# Supervision's events after which what can be done with the run changes.
CHANGES_ACTIONS = (SessionKind.OFFERED, SessionKind.GAVE_UP, SessionKind.RESTARTING, SessionKind.RESTARTED)


class RunControl(QObject):
    """The run this window follows (``session``) and the parts that show it.

    ``reported`` carries what happened in words (the status bar), ``progressed`` a deploy's progress (value,
    maximum, format) and ``progress_ended`` its end; ``actions_changed`` says the run's state moved (what can
    be done with it).
    """

    reported = Signal(str)
    progressed = Signal(int, int, str)
    progress_ended = Signal()
    actions_changed = Signal()
    run_shown = Signal()        # the Dashboard shows a run now (started, reattached or opened)
    _runs_found = Signal(list)  # runs still going on this profile's hosts (from a thread)
    _whole_log_read = Signal(object, list)  # a log window, what its task's host said [(stream, text)]
    _last_run_found = Signal(object)  # the newest run this console knows, as its hosts say it ended (a RunInfo)

    def __init__(self, threads: Threads, ask_host_key, dashboard: Dashboard, diagram: ClusterDiagram,
                 runs_panel: RunsPanel, tabs: QTabWidget, gpus_by_host: Callable[[], dict], parent: QWidget):
        super().__init__(parent)
        self.threads = threads
        self.asker = ask_host_key
        self.session = RunBridge(threads, ask_host_key, self)
        self.dashboard, self.diagram, self.runs_panel, self.tabs = dashboard, diagram, runs_panel, tabs
        self.gpus_by_host = gpus_by_host
        self.started_event: dict | None = None  # the run's "started" record, once it came
        for event in ("run_started", "start_failed", "deploy_progressed", "training_started", "logs_received",
                      "task_ended", "watchdog_fired", "supervised", "states_changed", "stopped",
                      "ended", "why_slow_asked", "explained", "why_slow_refused", "located", "hang_located",
                      "where_refused"):  # _on_session_<event>
            getattr(self.session, event).connect(getattr(self, f"_on_session_{event}"))
        for event in ("open_requested", "history_loaded", "logs_loaded", "comparison_loaded", "running_found"):
            getattr(runs_panel, event).connect(getattr(self, f"_on_runs_panel_{event}"))
        self._runs_found.connect(self._on_self_runs_found)
        diagram.host_asked.connect(self._on_diagram_host_asked)
        diagram.where_asked.connect(self._on_diagram_where_asked)
        dashboard.speed_view.asked.connect(self._on_speed_view_asked)
        dashboard.where_view.asked.connect(self._on_where_view_asked)
        self.actions_changed.connect(self._on_self_actions_changed)
        dashboard.renamed.connect(self._on_dashboard_renamed)
        dashboard.comparison_removed.connect(self._on_dashboard_comparison_removed)
        dashboard.events_view.whole_log_asked.connect(self._on_events_view_whole_log_asked)
        self._whole_log_read.connect(self._on_self_whole_log_read)
        self._last_run_found.connect(self._on_self_last_run_found)
        dashboard.offered_run_opened.connect(self._on_runs_panel_open_requested)
        self.log_windows: list[LogWindow] = []  # open ones
        self.detached_from: str | None = None  # the run this window detached from (it goes on there)
        self._log_timer = QTimer(self, singleShot=True, interval=LOG_TAKE_MS)
        self._log_timer.timeout.connect(self._on_log_timer_timeout)

    @property
    def running(self) -> bool:
        return self.session.run is not None and self.session.active

    @property
    def resumable(self) -> bool:
        """The run shown ended unfinished and Resume can help: not after an error a restart would repeat (the
        code, its settings: fixed, it is started anew)."""
        return self.session.run is not None and not self.running and self.session.resumable \
            and not self._code_to_fix()

    # ------------------------------------------------------------ what the person asks

    def _code_to_fix(self) -> bool:
        """The run shown is a person's own code that failed in a way a restart would repeat: fixed, it is started
        anew (tfcc holds no backup of its training to resume from)."""
        run = self.session.run
        return run is not None and self.session.code_failed and run.cluster.training.user_code

    def start(self, cluster: cl.Cluster) -> None:
        self.started_event = None
        self._drop_other_workloads(cluster)
        self.session.start(cluster)
        self._show(self.session.store, cluster.task_names(), live=True)
        self.progressed.emit(0, 0, "deploying")
        self.reported.emit("Deploying and starting…")
        self.actions_changed.emit()

    def _drop_other_workloads(self, cluster: cl.Cluster) -> None:
        """A run of another workload (data, model or script) is no baseline for this one: its comparison goes."""
        workload = cluster.training.trains
        for run_id in list(self.dashboard.compared):
            info = self.runs_panel.infos.get(run_id)
            if info is not None and info.workload and info.workload != workload:
                self.dashboard.remove_comparison(run_id)
                self.reported.emit(f"Run {run_id} compared no more: it trained {info.workload}, this run {workload}")
        self._show_compared()

    def stop(self) -> None:
        self.reported.emit("Stopping every task (SIGTERM, then SIGKILL after 10 s)…")
        self.session.stop()

    def _on_speed_view_asked(self) -> None:
        self.session.why_slow()

    def _on_session_why_slow_asked(self) -> None:
        self.reported.emit(f"Asked every worker where its step time goes: the verdict comes {speed.ANSWER_WORDS}")

    def _on_session_explained(self, verdict: dict) -> None:
        self.dashboard.speed_view.show_verdict(verdict)
        findings = verdict.get("findings") or []
        if findings:
            self.reported.emit(f"Why slow: {findings[0]}")

    def _on_session_why_slow_refused(self, words: str) -> None:
        self.dashboard.speed_view.refused(words)
        self.reported.emit(words)

    def _on_self_actions_changed(self) -> None:
        """While a run goes on its tasks may be asked where they are: beside Why slow?, and a task's right click."""
        self.dashboard.where_view.set_available(self.running)
        self.diagram.set_where_available(self.running)

    def _on_where_view_asked(self) -> None:
        self.session.where()  # on a thread: each task's host is asked

    def _on_diagram_where_asked(self, task: str) -> None:
        """A task's right click in the diagram: where the tasks are, in the Dashboard, ``task``'s stack shown."""
        self.tabs.setCurrentWidget(self.dashboard)
        self.dashboard.where_view.ask(task)

    def _on_session_located(self, where: dict) -> None:
        self.dashboard.where_view.show_report(where)
        lines = where.get("lines") or []
        said = where.get("verdict") or (lines[0] if lines else "")
        self.reported.emit(f"Where are they? {said}" if said else "Where are they? Every task answered")

    def _on_session_hang_located(self, where: dict) -> None:
        """The stall watchdog called a hang: where the tasks were then (its words are in the status bar already)."""
        self.dashboard.where_view.show_report(where, found="Found by the stall watchdog (no step for too long)")

    def _on_session_where_refused(self, words: str) -> None:
        self.dashboard.where_view.refused(words)
        self.reported.emit(words)

    def _on_diagram_host_asked(self, what: str, host: str) -> None:
        try:
            self.session.ask_host(what, host)
        except TfccError as exc:
            self.reported.emit(describe(exc))
            return
        self.reported.emit(f"Going on without {host}: every other task restarts from its newest backup…"
                           if what == REMOVE_HOST else f"Taking {host} back at the next backup once it answers…")

    def resume(self) -> None:
        run = self.session.run
        if run is None:
            return
        self.started_event = None
        self.session.resume()
        self._set_store(self.session.store, run.cluster.task_names(), live=True)
        self.diagram.set_states({})
        self.reported.emit(f"Resuming run {run.run_id} from its backups…")
        self.actions_changed.emit()

    def detach(self) -> None:
        run = self.session.run
        going = self.running
        self.session.detach()
        if run is not None:
            self.reported.emit(f"Detached; run {run.run_id} goes on (open this profile to see it again)")
            if going:
                self.detached_from = run.run_id
                self.dashboard.show_detached(run.run_id)
        self.started_event = None
        self.actions_changed.emit()

    def look_for_runs(self, cluster: cl.Cluster) -> None:
        """In the background: runs still going on ``cluster``'s hosts come back with their history."""
        cluster = copy.deepcopy(cluster)
        self.threads.start("reattach", lambda: self._runs_found.emit(running_runs(cluster, self.asker,
                                                                                  failed_too=True)))

    def _on_self_runs_found(self, runs: list) -> None:
        if not runs:
            return
        if self.session.active:  # already following a run that goes on: leave it be
            for run in runs:
                self.threads.start("drop", run.detach)
            return
        newest, others = runs[0], runs[1:]
        for run in others:
            self.threads.start("drop", run.detach)
        self.started_event = None
        self.session.attach(newest)
        self._set_store(self.session.store, newest.cluster.task_names(), live=True)
        self.reported.emit(f"Reattached to run {newest.run_id}")
        self.actions_changed.emit()

    def offer_last_run(self) -> None:
        """In the background: the newest run this console knows, once its hosts said how it ended (a run that
        ended while no window followed it has its end read now); the empty Dashboard offers it."""
        self.threads.start("last-run", self._find_last_run)

    def _find_last_run(self) -> None:
        try:
            infos = overview(self.asker, timeout=LAST_RUN_SECONDS)
        except Exception:  # noqa: BLE001 - nothing offered; the Runs tab says what is wrong
            log.exception("looking for the last run")
            return
        started = [i for i in infos if i.start is not None]
        if started:
            self._last_run_found.emit(max(started, key=lambda i: i.start))

    def _on_self_last_run_found(self, info) -> None:
        if self.session.run is not None or self.dashboard.run_header is not None or info.state not in RunState.ENDED:
            return  # a run is shown (or reattached meanwhile); one still running is reattached, not offered
        known = [f"in {text.duration_text(info.duration)}"] if info.duration is not None else []
        known += [f"{k} {text.metric_text(v)}" for k, v in info.metrics.items() if k in ("loss", "accuracy")]
        name = f"{info.name} ({info.run_id})" if info.name else info.run_id
        said = f"Run {name} {info.state} while you were away" if info.caught_up else \
            f"Your last run, {name}, {info.state}"
        self.dashboard.offer_run(info.run_id, said + (": " + ", ".join(known) if known else ""))

    def _show(self, store, order: list[str], live: bool = False) -> None:
        """``store`` in the Dashboard, brought forward (``live``: its run goes on)."""
        self._set_store(store, order, live)
        self.tabs.setCurrentWidget(self.dashboard)

    def _set_store(self, store, order: list[str], live: bool) -> None:
        """The Dashboard shows ``store``; a live one: this window follows a run again (none is left detached)."""
        if live:
            self.detached_from = None
        self.dashboard.set_store(store, order, live)
        if live:
            self._show_header(RunState.RUNNING)
        self.run_shown.emit()

    def _on_dashboard_renamed(self, run_id: str, name: str) -> None:
        """The person named the run shown: kept (on a thread), and the Runs tab lists it so."""
        known = self.runs_panel.infos.get(run_id)
        if known is not None:
            known.name = name
        self.threads.start("label", self._keep_name, run_id, name)

    def _keep_name(self, run_id: str, name: str) -> None:
        try:
            set_label(run_id, name=name)
        except Exception as exc:
            log.warning("the name of run %s could not be kept: %s", run_id, exc)
            self.reported.emit(f"The run's name could not be kept: {describe(exc)}")

    def _show_header(self, state: str) -> None:
        """The Dashboard's header on the run this window follows (its name as the Runs tab knows it)."""
        run = self.session.run
        if run is None:
            self.dashboard.set_header(None)
            return
        known = self.runs_panel.infos.get(run.run_id)
        self.dashboard.set_header(RunHeader(run.run_id, known.name if known else "", state,
                                            text.machines_words(run.cluster.task_names(), run.placement.machines()),
                                            text.settings_text(run.cluster)))

    # ------------------------------------------------------------ what the session says

    def _on_session_deploy_progressed(self, host: str, sent: int, total: int) -> None:
        self.progressed.emit(sent, max(1, total), f"deploying to {host}: %p%")

    def _on_session_run_started(self, run_id: str) -> None:
        self._show_header(RunState.RUNNING)
        self.progress_ended.emit()
        self.reported.emit(f"Run {run_id}: tasks started; waiting for the cluster to form")
        self.actions_changed.emit()

    def _on_session_start_failed(self, message: str) -> None:
        self.progress_ended.emit()
        self.reported.emit(message)
        self.session.store.note(CONSOLE_TASK, FAILED, message)
        self.actions_changed.emit()

    def _on_session_training_started(self, r: dict) -> None:
        self.started_event = r
        run = self.session.run
        addresses = {t.name: t.address for t in run.tasks if t.address} if run else {}
        if run is not None:
            self.diagram.set_cluster(copy.deepcopy(run.cluster), self.gpus_by_host())
        self.diagram.set_run(r, addresses, set(run.left) if run is not None else ())
        said = [r["strategy"]] if r.get("strategy") else []
        said += [f"global batch {r['global_batch']}"] if r.get("global_batch") else []  # a loop's has none
        self.reported.emit("Training: " + ", ".join(said) if said else "Training started")

    def _on_session_logs_received(self) -> None:
        if not self._log_timer.isActive():  # what comes meanwhile is taken with it: one append a task per tick
            self._log_timer.start()

    def _on_log_timer_timeout(self) -> None:
        for task, lines, dropped, open_line in self.session.take_logs():
            self.dashboard.events_view.append_lines(task, lines, dropped, open_line)

    def _on_session_task_ended(self, task: str, words: str) -> None:
        self.reported.emit(f"{task}: {words}")
        self.actions_changed.emit()

    def _on_session_watchdog_fired(self, message: str) -> None:
        self.reported.emit(message)

    def _on_session_supervised(self, kind: str, words: str) -> None:
        """Supervision said something: the status bar says it."""
        self.reported.emit(words)
        if kind in CHANGES_ACTIONS:
            self.actions_changed.emit()

    def _on_session_states_changed(self) -> None:
        self.diagram.set_states(self.session.store.states_snapshot())

    def _on_session_stopped(self) -> None:
        """Every agent answered the stop; the run's end (``ended``) says how it ended, once it came."""
        if self.session.active:
            self.reported.emit("Stopped: waiting for the tasks' ends…")
        self.actions_changed.emit()

    def _on_session_ended(self) -> None:
        self.dashboard.set_ended()
        run = self.session.run
        if run is not None:
            failed = [t.name for t in run.members if t.phase not in (FINISHED, STOPPED)]
            stopped = any(t.phase == STOPPED for t in run.members)
            self._show_header(run_state([t.phase for t in run.tasks], [t.phase == STOPPED for t in run.tasks]))
            again = ("fix the code, then Deploy & Start (F5)" if self._code_to_fix() else
                     "Resume starts every task again from their backups")
            self.reported.emit(f"Run {run.run_id} " + (
                f"ended; not finished: {', '.join(failed)} ({again})"
                if failed else "stopped (Resume goes on from the newest backups)" if stopped
                else "ended: every task finished"))
        if self.runs_panel.isVisible():  # its state there is the run's now
            self.runs_panel.refresh()
        self.actions_changed.emit()

    # ------------------------------------------------------------ a whole log

    def _on_events_view_whole_log_asked(self, task: str) -> None:
        """``task``'s whole log of the run shown, in a window of its own (read from its host on a thread)."""
        header = self.dashboard.run_header
        if header is None:
            return
        window = LogWindow(header.run_id, task, self.threads)
        window.setAttribute(Qt.WA_DeleteOnClose)
        window.destroyed.connect(lambda *_: self.log_windows.remove(window) if window in self.log_windows else None)
        self.log_windows.append(window)
        window.show()
        self.threads.start("whole-log", self._read_whole_log, window, header.run_id, task)

    def _read_whole_log(self, window: LogWindow, run_id: str, task: str) -> None:
        try:
            run = Run.load(run_id, self.asker)
        except Exception as exc:  # noqa: BLE001 - said in its window; the log has the traceback
            log.exception("reading a whole log")
            self._whole_log_read.emit(window, [("", f"The log could not be read: {describe(exc)}")])
            return
        try:
            said = [(stream, shown_log(words, run_id, task)) for stream, words in run.logs(task, WHOLE_LOG_BYTES)]
        except Exception as exc:  # noqa: BLE001
            log.exception("reading a whole log")
            said = [("", f"The log could not be read: {describe(exc)} (tfcc logs {run_id} {task} reads it once "
                         "its host answers)")]
        finally:
            run.detach()
        self._whole_log_read.emit(window, said)

    def _on_self_whole_log_read(self, window: LogWindow, said: list) -> None:
        if window in self.log_windows:  # not closed meanwhile
            window.show_logs(said)

    # ------------------------------------------------------------ the Runs panel

    def _on_runs_panel_open_requested(self, run_id: str) -> None:
        """Show a run in the Dashboard: the one followed now as it is; another after asking, when a run is
        followed (it goes on: Detach), its whole history loaded on a thread."""
        run = self.session.run
        if run is not None and run.run_id == run_id:
            self._show(self.session.store, run.cluster.task_names(), live=self.session.active)
            return
        if run is not None and self.session.active:
            answer = QMessageBox.question(
                self.parent(), "A run is followed",
                f"Run {run.run_id} is still going and this window follows it. Detach from it (it goes on; "
                f"opening this profile again follows it) and show run {run_id}?",
                QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
            if answer != QMessageBox.Yes:
                return
            self.detach()
        self.runs_panel.load(run_id)

    def _on_runs_panel_history_loaded(self, run_id: str, store, order: list) -> None:
        if self.session.active:  # a run started meanwhile: it keeps the Dashboard
            self.reported.emit(f"Run {run_id} not shown: a run is followed now (Detach first)")
            return
        self.session.detach()  # an ended run's session: Resume and Detach are about it no more
        self.started_event = None
        self._show(store, order)
        info = self.runs_panel.infos.get(run_id)
        self.dashboard.set_header(RunHeader(run_id, info.name if info else "", info.state if info else "",
                                            text.hosts_words(info.hosts) if info else "",
                                            info.settings if info else ""))
        self.reported.emit(f"Run {run_id}: its whole history")
        self.actions_changed.emit()

    def _on_runs_panel_logs_loaded(self, run_id: str, task: str, said: list) -> None:
        """The end of a task's logs of the run opened from the history (still the one shown)."""
        header = self.dashboard.run_header
        if header is None or header.run_id != run_id or self.session.active:
            return
        for stream, words in said:
            if stream:
                self.dashboard.events_view.append_log(task, stream, words)
            else:
                self.dashboard.events_view.append_lines(task or CONSOLE_TASK, [words])

    def _on_runs_panel_comparison_loaded(self, run_id: str, store) -> None:
        if store is None:
            self.dashboard.remove_comparison(run_id)
        else:
            info = self.runs_panel.infos.get(run_id)
            self.dashboard.add_comparison(run_id, store, info.name if info else "")
        self._show_compared()
        self.reported.emit(f"Compared with run {run_id} (dashed, in its colour)" if store is not None
                           else f"Run {run_id} compared no more")

    def _on_dashboard_comparison_removed(self, run_id: str) -> None:
        self._show_compared()
        self.reported.emit(f"Run {run_id} compared no more")

    def _show_compared(self) -> None:
        self.runs_panel.set_compared({r: self.dashboard.compared_colour(r) for r in self.dashboard.compared})

    def _on_runs_panel_running_found(self, run) -> None:
        if self.session.active:  # a run started meanwhile: leave it be
            self.threads.start("drop", run.detach)
            return
        self._on_self_runs_found([run])
        self.tabs.setCurrentWidget(self.dashboard)
