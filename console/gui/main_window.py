"""The main window: composes the setup form, dashboard, runs panel, diagram, check view and file actions, and
wires them."""

from __future__ import annotations

import copy
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMessageBox, QProgressBar, QSplitter, QStyle, QTabWidget

from agent.protocol import FAILED, FINISHED
from console import cluster as cl
from console.gui.check_view import CheckView
from console.gui.dashboard import Dashboard
from console.gui.diagram import ClusterDiagram
from console.gui.dialogs import FingerprintDialog
from console.gui.file_actions import FileActions
from console.gui.jobs import CheckJob, HostKeyAsker, RunBridge, Threads
from console.gui.runs_panel import RunsPanel
from console.gui.setup_form import SetupForm
from console.profiles import Profiles
from console.catalog import running_runs
from console.store.cache import CONSOLE_TASK


class MainWindow(QMainWindow):
    """The setup form beside the Dashboard, Runs, Cluster and Check tabs; Check, Deploy & Start, Stop, Detach."""

    runs_found = Signal(list)  # runs still going on this profile's hosts (from a thread)

    def __init__(self, cluster_path: str | Path | None = None, profiles: Profiles | None = None):
        super().__init__()
        self.resize(1400, 860)
        self.profiles = profiles or Profiles()
        self.threads = Threads()
        self.asker = HostKeyAsker(parent=self)
        self.fingerprint_dialog: FingerprintDialog | None = None
        self.checker = CheckJob(self.threads, self.asker, self)
        self.session = RunBridge(self.threads, self.asker, self)
        self.cluster = cl.Cluster([], [])  # the one being edited: the setup form edits it in place
        self.checking = False
        self.started_event: dict | None = None  # the run's "started" record, once it came

        self.setup = SetupForm()
        self.dashboard = Dashboard()
        self.dashboard.apply_view(self.profiles.view)  # the reading aids as the person left them
        self._view_saver = QTimer(self, singleShot=True, interval=1000)  # a dragged slider: one save
        self.diagram = ClusterDiagram()
        self.check_view = CheckView()
        self.runs_panel = RunsPanel(self.threads, self.asker)
        self.files = FileActions(self, self.profiles, self.threads, self.dashboard, lambda: self.cluster)
        self.tabs = QTabWidget()
        for page, title in ((self.dashboard, "Dashboard"), (self.runs_panel, "Runs"), (self.diagram, "Cluster"),
                            (self.check_view, "Check")):
            self.tabs.addTab(page, title)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.setup)
        split.addWidget(self.tabs)
        split.setSizes([470, 930])
        self.setCentralWidget(split)
        self._build_bars()
        self._connect_signals()

        last = self.profiles.last if self.profiles.last and Path(self.profiles.last).exists() else None
        path = cluster_path if cluster_path is not None else last
        if path is None or not self.files.open(path):
            self.set_cluster(cl.default(), None)

    def _build_bars(self) -> None:
        """The File menu (the file actions' own), the toolbar and the status bar's progress."""
        menu = self.menuBar().addMenu("&File")
        self.files.add_to(menu)
        menu.addSeparator()
        self.act_quit = QAction("&Quit", self, shortcut=QKeySequence.Quit)
        menu.addAction(self.act_quit)
        icon = self.style().standardIcon
        self.act_check = QAction(icon(QStyle.SP_BrowserReload), "Check", self, shortcut="Ctrl+K")
        self.act_check.setToolTip("Check every host: SSH, Python, TensorFlow, GPUs, ports free and reachable (Ctrl+K)")
        self.act_start = QAction(icon(QStyle.SP_MediaPlay), "Deploy && Start", self, shortcut="F5")
        self.act_start.setToolTip("Upload what is missing, start every task and follow them (F5)")
        self.act_stop = QAction(icon(QStyle.SP_MediaStop), "Stop", self, shortcut="Shift+F5")
        self.act_resume = QAction(icon(QStyle.SP_BrowserReload), "Resume", self, shortcut="Ctrl+R")
        self.act_resume.setToolTip("Start every task of the run again from the newest backup they all have, "
                                   "as a new attempt (Ctrl+R)")
        self.act_detach = QAction(icon(QStyle.SP_DialogCloseButton), "Detach", self)
        self.act_detach.setToolTip("Stop following the run; it goes on, and reappears when this profile is opened")
        bar = self.addToolBar("Actions")
        bar.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        bar.addActions([self.act_check, self.act_start, self.act_stop, self.act_resume, self.act_detach])
        self.progress = QProgressBar(maximumWidth=260)
        self.progress.hide()
        self.statusBar().addPermanentWidget(self.progress)

    def _connect_signals(self) -> None:
        self.act_quit.triggered.connect(self.close)
        self.act_check.triggered.connect(self._on_check_triggered)
        self.act_start.triggered.connect(self._on_start_triggered)
        self.act_stop.triggered.connect(self._on_stop_triggered)
        self.act_resume.triggered.connect(self._on_resume_triggered)
        self.act_detach.triggered.connect(self._on_detach_triggered)
        self.setup.cluster_changed.connect(self._on_setup_cluster_changed)
        self.files.opened.connect(self._on_files_opened)
        self.files.title_changed.connect(self.setWindowTitle)
        self.files.reported.connect(self.statusBar().showMessage)
        self.asker.asked.connect(self._on_asker_asked)
        self.checker.progressed.connect(self._on_checker_progressed)
        self.checker.finished.connect(self._on_checker_finished)
        self.checker.failed.connect(self._on_checker_failed)
        self.runs_found.connect(self._on_runs_found)
        self.runs_panel.reported.connect(self.statusBar().showMessage)
        for event in ("open_requested", "history_loaded", "comparison_loaded", "running_found"):
            getattr(self.runs_panel, event).connect(getattr(self, f"_on_runs_panel_{event}"))
        self.dashboard.view_changed.connect(self._on_dashboard_view_changed)
        self._view_saver.timeout.connect(self._on_view_saver_timeout)
        for event in ("run_started", "start_failed", "deploy_progressed", "training_started", "log_received",
                      "task_ended", "watchdog_fired", "supervised", "states_changed", "stopped",
                      "ended"):  # _on_session_<event>
            getattr(self.session, event).connect(getattr(self, f"_on_session_{event}"))

    def _on_dashboard_view_changed(self, view: dict) -> None:
        self._view_saver.start()

    def _on_view_saver_timeout(self) -> None:
        self.profiles.set_view(self.dashboard.view())

    # ================================================================= the cluster

    def set_cluster(self, cluster: cl.Cluster, path: Path | None) -> None:
        """Edit ``cluster``, as it is in ``path`` (None: not saved yet)."""
        self.cluster = cluster
        self.setup.set_cluster(cluster)
        self.files.set_path(path)
        self._show_settings()

    def _on_files_opened(self, cluster: cl.Cluster, path: Path | None) -> None:
        self.set_cluster(cluster, path)
        if path is not None:
            self.look_for_runs()

    def _on_setup_cluster_changed(self) -> None:
        self.files.set_dirty(True)
        self._show_settings()

    def _show_settings(self) -> None:
        """The diagram follows the settings until a run reports its own numbers."""
        if self.started_event is None:
            self.diagram.set_cluster(copy.deepcopy(self.cluster), self.setup.gpus_by_host())
        self._update_actions()

    # ================================================================= check

    def _valid_cluster(self) -> cl.Cluster | None:
        """A copy of the cluster to check or start, or None when it cannot work (the Check tab says why)."""
        try:
            cl.validate(self.cluster)
        except cl.ClusterFileError as exc:
            self.statusBar().showMessage(f"Cannot go on: {exc}")
            self.check_view.show_refusal(str(exc))
            self.tabs.setCurrentWidget(self.check_view)
            return None
        return copy.deepcopy(self.cluster)

    def _on_check_triggered(self) -> None:
        cluster = self._valid_cluster()
        if cluster is None:
            return
        self.setup.report = None
        self._show_progress(0, len(cluster.hosts) + 1, "checking %v/%m")
        self.statusBar().showMessage("Checking the hosts…")
        self.checking = True
        self.checker.start(cluster)
        self._update_actions()

    def _on_checker_progressed(self, done: int, total: int, what: str) -> None:
        self._show_progress(done, total, "checking %v/%m")
        self.statusBar().showMessage(f"Checking: {what}")

    def _on_checker_failed(self, message: str) -> None:
        self.checking = False
        self.progress.hide()
        self.statusBar().showMessage(f"The check could not run: {message}")
        self._update_actions()

    def _on_checker_finished(self, report) -> None:
        self.checking = False
        self.progress.hide()
        self.setup.set_report(report)
        self.check_view.show_report(report)
        self._show_settings()
        self.statusBar().showMessage(
            f"Ready: every check passed in {report.seconds:.1f} s" if report.ready
            else f"{len(report.problems)} problem(s) found; see the Check tab")
        if not report.ready:
            self.tabs.setCurrentWidget(self.check_view)

    # ================================================================= following a run (RunBridge)

    def _on_start_triggered(self) -> None:
        cluster = self._valid_cluster()
        if cluster is None:
            return
        self.started_event = None
        self.session.start(cluster)
        self.dashboard.set_store(self.session.store, cluster.task_names())
        self._show_progress(0, 0, "deploying")
        self.statusBar().showMessage("Deploying and starting…")
        self.tabs.setCurrentWidget(self.dashboard)
        self._update_actions()

    def _on_session_deploy_progressed(self, host: str, sent: int, total: int) -> None:
        self._show_progress(sent, max(1, total), f"deploying to {host}: %p%")

    def _on_session_run_started(self, run_id: str) -> None:
        self.progress.hide()
        self.statusBar().showMessage(f"Run {run_id}: tasks started; waiting for the cluster to form")
        self._update_actions()

    def _on_session_start_failed(self, message: str) -> None:
        self.progress.hide()
        self.statusBar().showMessage(message)
        self.session.store.note(CONSOLE_TASK, FAILED, message)
        self._update_actions()

    def _on_session_training_started(self, r: dict) -> None:
        self.started_event = r
        run = self.session.run
        addresses = {t.name: t.address for t in run.tasks if t.address} if run else {}
        if run is not None:
            self.diagram.set_cluster(copy.deepcopy(run.cluster), self.setup.gpus_by_host())
        self.diagram.set_run(r, addresses)
        said = [r["strategy"]] if r.get("strategy") else []
        said += [f"global batch {r['global_batch']}"] if r.get("global_batch") else []  # a loop's has none
        self.statusBar().showMessage("Training: " + ", ".join(said) if said else "Training started")

    def _on_session_log_received(self, task: str, stream: str, text: str) -> None:
        self.dashboard.append_log(task, stream, text)

    def _on_session_task_ended(self, task: str, words: str) -> None:
        self.statusBar().showMessage(f"{task}: {words}")
        self._update_actions()

    def _on_session_watchdog_fired(self, message: str) -> None:
        self.statusBar().showMessage(message)

    def _on_session_supervised(self, kind: str, words: str) -> None:
        """Supervision said something: the status bar says it."""
        self.statusBar().showMessage(words)
        if kind in ("offered", "gave_up", "restarting", "restarted"):
            self._update_actions()

    def _on_session_states_changed(self) -> None:
        self.diagram.set_states(self.session.store.states_snapshot())

    def _on_session_stopped(self) -> None:
        self.statusBar().showMessage("Run stopped")
        self._update_actions()

    def _on_session_ended(self) -> None:
        run = self.session.run
        if run is not None:
            failed = [t.name for t in run.tasks if t.phase != FINISHED]
            self.statusBar().showMessage(f"Run {run.run_id} ended" + (
                f"; not finished: {', '.join(failed)} (Resume starts every task again from their backups)"
                if failed else ": every task finished"))
        if self.runs_panel.isVisible():  # its state there is the run's now
            self.runs_panel.refresh()
        self._update_actions()

    def _on_stop_triggered(self) -> None:
        self.statusBar().showMessage("Stopping every task (SIGTERM, then SIGKILL after 10 s)…")
        self.session.stop()

    def _on_resume_triggered(self) -> None:
        run = self.session.run
        if run is None:
            return
        self.started_event = None
        self.session.resume()
        self.dashboard.set_store(self.session.store, run.cluster.task_names())
        self.diagram.set_states({})
        self.statusBar().showMessage(f"Resuming run {run.run_id} from its backups…")
        self._update_actions()

    def _on_detach_triggered(self) -> None:
        run = self.session.run
        self.session.detach()
        if run is not None:
            self.statusBar().showMessage(f"Detached; run {run.run_id} goes on (open this profile to see it again)")
        self.started_event = None
        self._update_actions()

    def look_for_runs(self) -> None:
        """In the background: runs still going on this profile's hosts come back with their history."""
        cluster = copy.deepcopy(self.cluster)
        self.threads.start("reattach", lambda: self.runs_found.emit(running_runs(cluster, self.asker,
                                                                                 failed_too=True)))

    def _on_runs_found(self, runs: list) -> None:
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
        self.dashboard.set_store(self.session.store, newest.cluster.task_names())
        self.statusBar().showMessage(f"Reattached to run {newest.run_id}")
        self._update_actions()

    # ================================================================= the Runs panel

    def _on_runs_panel_open_requested(self, run_id: str) -> None:
        """Show a run in the Dashboard: the one followed now as it is; another after asking, when a run is
        followed (it goes on: Detach), its whole history loaded on a thread."""
        run = self.session.run
        if run is not None and run.run_id == run_id:
            self.dashboard.set_store(self.session.store, run.cluster.task_names())
            self.tabs.setCurrentWidget(self.dashboard)
            return
        if run is not None and self.session.active:
            answer = QMessageBox.question(
                self, "A run is followed",
                f"Run {run.run_id} is still going and this window follows it. Detach from it (it goes on; "
                f"opening this profile again follows it) and show run {run_id}?",
                QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
            if answer != QMessageBox.Yes:
                return
            self._on_detach_triggered()
        self.runs_panel.load(run_id)

    def _on_runs_panel_history_loaded(self, run_id: str, store, order: list) -> None:
        if self.session.active:  # a run started meanwhile: it keeps the Dashboard
            self.statusBar().showMessage(f"Run {run_id} not shown: a run is followed now (Detach first)")
            return
        self.session.detach()  # an ended run's session: Resume and Detach are about it no more
        self.started_event = None
        self.dashboard.set_store(store, order)
        self.tabs.setCurrentWidget(self.dashboard)
        self.statusBar().showMessage(f"Run {run_id}: its whole history")
        self._update_actions()

    def _on_runs_panel_comparison_loaded(self, run_id: str, store) -> None:
        self.dashboard.set_overlay(run_id, store)
        self.runs_panel.set_compared(run_id if store is not None else None)
        if store is not None:
            self.tabs.setCurrentWidget(self.dashboard)
        self.statusBar().showMessage(f"Compared with run {run_id} (dashed)" if store is not None
                                     else "No run compared")

    def _on_runs_panel_running_found(self, run) -> None:
        if self.session.active:  # a run started meanwhile: leave it be
            self.threads.start("drop", run.detach)
            return
        self._on_runs_found([run])
        self.tabs.setCurrentWidget(self.dashboard)

    def _show_progress(self, value: int, maximum: int, text: str) -> None:
        self.progress.setRange(0, maximum)
        self.progress.setValue(value)
        self.progress.setFormat(text)
        self.progress.show()

    def _update_actions(self) -> None:
        running = self.session.run is not None and self.session.active
        has_tasks = bool(self.cluster.tasks)
        self.act_check.setEnabled(has_tasks and not self.checking)
        self.act_start.setEnabled(has_tasks and not running)
        self.act_stop.setEnabled(running)
        run = self.session.run
        self.act_resume.setEnabled(run is not None and not running and self.session.resumable)
        self.act_detach.setEnabled(run is not None)

    def _on_asker_asked(self, host: str, key_type: str, fingerprint: str) -> None:
        dialog = FingerprintDialog(host, key_type, fingerprint, self)
        dialog.finished.connect(lambda result: self.asker.answer(result == FingerprintDialog.Accepted))
        self.fingerprint_dialog = dialog
        dialog.open()

    def closeEvent(self, event):  # noqa: N802 (Qt's name)
        if not self.files.maybe_discard():
            event.ignore()
            return
        self.asker.answer(False)
        if self._view_saver.isActive():  # a change not saved yet
            self._view_saver.stop()
            self._on_view_saver_timeout()
        self.dashboard.timer.stop()
        self.dashboard.slow_timer.stop()  # its widgets go with the window: no late tick on them
        self.runs_panel.stop_tensorboards()
        self.session.detach()   # the run goes on; its follow threads end here
        self.threads.join(timeout=10)
        super().closeEvent(event)
