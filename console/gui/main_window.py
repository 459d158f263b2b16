"""The main window: composes the setup form, the tabs, the file actions, the check and the run, and wires them."""

from __future__ import annotations

import copy
from pathlib import Path

from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtWidgets import QFrame, QMainWindow, QMessageBox, QScrollArea, QSplitter, QTabWidget

from console import cluster as cl
from console.gui.about import about_text, open_guide
from console.gui.check_control import CheckControl
from console.gui.check_view import CheckView
from console.gui.dashboard import Dashboard
from console.gui.diagram import ClusterDiagram
from console.gui.file_actions import FileActions
from console.gui.host_keys import HostKeyDialogs
from console.gui.jobs import HostKeyAsker, ProvisionJob, Threads
from console.gui.run_control import RunControl
from console.gui.runs_panel import RunsPanel
from console.gui.setup_form import SetupForm
from console.gui.window_bars import WindowBars
from console.profiles import Profiles


DEFAULT_SIZE = (1400, 860)  # a first window's size on a screen that has the room
FRAME = (16, 48)            # what a window manager's frame and title bar take around it, at most
SETUP_WIDTH = 470
CODE_TO_COME = "(your code)"  # stands in the diagram for a script or module whose path is not set yet


def _screen_key(available: QSize) -> str:
    """A screen's size as the remembered window sizes are keyed: ``1440x900`` (its available room)."""
    return f"{available.width()}x{available.height()}"


class MainWindow(QMainWindow):
    """The setup form beside the Dashboard, Runs, Cluster and Check tabs; Check, Deploy & Start, Stop, Detach."""

    def __init__(self, cluster_path: str | Path | None = None, profiles: Profiles | None = None):
        super().__init__()
        self.profiles = profiles or Profiles()
        self.threads = Threads()
        self.asker = HostKeyAsker(parent=self)
        self.host_keys = HostKeyDialogs(self.asker, self)
        self.cluster = cl.Cluster([], [])  # the one being edited: the setup form edits it in place

        self.setup = SetupForm()
        self.dashboard = Dashboard()
        self.dashboard.apply_view(self.profiles.view)  # the reading aids as the person left them
        self._view_saver = QTimer(self, singleShot=True, interval=1000)  # a dragged slider: one save
        self.diagram = ClusterDiagram()
        self.check_view = CheckView(ProvisionJob(self.threads, self.asker, self))
        self.runs_panel = RunsPanel(self.threads, self.asker)
        self.files = FileActions(self, self.profiles, self.threads, self.dashboard, lambda: self.cluster)
        self.tabs = QTabWidget()
        for page, title in ((self.dashboard, "Dashboard"), (self.runs_panel, "Runs"), (self.diagram, "Cluster"),
                            (self.check_view, "Check")):
            self.tabs.addTab(page, title)
        # The setup, a side panel that scrolls (it never makes the window wider than the screen); a run's plots
        # take its room.
        self.setup_panel = QScrollArea()
        self.setup_panel.setWidgetResizable(True)
        self.setup_panel.setFrameShape(QFrame.NoFrame)
        self.setup_panel.setWidget(self.setup)
        split = self.split = QSplitter(Qt.Horizontal)
        split.addWidget(self.setup_panel)
        split.addWidget(self.tabs)
        split.setCollapsible(1, False)
        split.setStretchFactor(1, 1)
        split.setSizes([SETUP_WIDTH, DEFAULT_SIZE[0] - SETUP_WIDTH])
        self.setCentralWidget(split)
        self.check_control = CheckControl(self.threads, self.asker, self.setup, self.check_view, self.tabs, self)
        self.checker = self.check_control.checker
        self.run_control = RunControl(self.threads, self.asker, self.dashboard, self.diagram, self.runs_panel,
                                      self.tabs, self.setup.gpus_by_host, self)
        self.session = self.run_control.session  # the run this window follows
        self._build_bars()
        self._connect_signals()
        self.fit_to_screen(self.screen().availableGeometry().size())

        last = self.profiles.last if self.profiles.last and Path(self.profiles.last).exists() else None
        path = cluster_path if cluster_path is not None else last
        if path is None or not self.files.open(path):
            self.set_cluster(cl.default(), None)
        self.run_control.offer_last_run()  # the empty Dashboard offers it once its hosts said how it ended

    def _build_bars(self) -> None:
        bars = WindowBars(self, self.files, self.tabs)  # the menus and the toolbar: their actions are the window's
        self.file_menu, self.view_actions, self.progress = bars.file_menu, bars.view_actions, bars.progress
        self.act_check, self.act_start, self.act_stop = bars.check, bars.start, bars.stop
        self.act_resume, self.act_detach, self.act_quit = bars.resume, bars.detach, bars.quit
        self.act_setup, self.act_side, self.act_docs, self.act_about = bars.setup, bars.side, bars.docs, bars.about

    @property
    def checking(self) -> bool:
        """A check is under way."""
        return self.check_control.checking

    @property
    def fingerprint_dialog(self):
        """The newest host key question's dialog (None: none asked yet)."""
        return self.host_keys.dialog

    def _connect_signals(self) -> None:
        self.act_quit.triggered.connect(self.close)
        self.act_check.triggered.connect(self._on_check_triggered)
        self.act_start.triggered.connect(self._on_start_triggered)
        self.act_stop.triggered.connect(self._on_stop_triggered)
        self.act_resume.triggered.connect(self.run_control.resume)
        self.act_detach.triggered.connect(self.run_control.detach)
        self.setup.cluster_changed.connect(self._on_setup_cluster_changed)
        self.files.opened.connect(self._on_files_opened)
        self.files.title_changed.connect(self.setWindowTitle)
        self.files.reported.connect(self.statusBar().showMessage)
        self.act_docs.triggered.connect(self._on_docs_triggered)
        self.act_about.triggered.connect(self._on_about_triggered)
        self.host_keys.reported.connect(self.statusBar().showMessage)
        for control in (self.check_control, self.run_control):
            control.reported.connect(self.statusBar().showMessage)
            control.progressed.connect(self._show_progress)
            control.progress_ended.connect(self.progress.hide)
            control.actions_changed.connect(self._update_actions)
        self.check_control.checked.connect(self._show_settings)
        self.runs_panel.reported.connect(self.statusBar().showMessage)
        self.dashboard.view_changed.connect(self._on_dashboard_view_changed)
        self._view_saver.timeout.connect(self._on_view_saver_timeout)
        self.run_control.run_shown.connect(self._on_run_control_run_shown)
        self.act_setup.toggled.connect(self._on_act_setup_toggled)
        self.act_side.toggled.connect(self.dashboard.set_side_panel_shown)
        self.dashboard.side_panel_toggled.connect(self.act_side.setChecked)
        self.split.splitterMoved.connect(self._on_split_splitter_moved)

    def _on_dashboard_view_changed(self, view: dict) -> None:
        self._view_saver.start()

    def _on_view_saver_timeout(self) -> None:
        self.profiles.set_view(self.dashboard.view())

    # ================================================================= room for the plots

    def fit_to_screen(self, available: QSize) -> None:
        """Open at the size the person left for a screen of this size, else ``DEFAULT_SIZE``; never larger than
        the screen's available room (its panels off), less the window's frame."""
        remembered = self.profiles.window_size(_screen_key(available))
        width, height = remembered or DEFAULT_SIZE
        self.resize(min(width, available.width() - FRAME[0]), min(height, available.height() - FRAME[1]))

    def _on_run_control_run_shown(self) -> None:
        """A run is shown: its plots take the setup's room (Ctrl+0 or the toolbar's Setup brings it back)."""
        self.act_setup.setChecked(False)

    def _on_act_setup_toggled(self, shown: bool) -> None:
        self.setup_panel.setVisible(shown)
        if shown and self.split.sizes()[0] == 0:  # dragged shut before: back at its width
            total = sum(self.split.sizes())
            self.split.setSizes([SETUP_WIDTH, max(200, total - SETUP_WIDTH)])

    def _on_split_splitter_moved(self, *_) -> None:
        """Dragged shut, the setup is folded (its action says so)."""
        self.act_setup.setChecked(self.split.sizes()[0] > 0)

    # ================================================================= the cluster

    def set_cluster(self, cluster: cl.Cluster, path: Path | None) -> None:
        """Edit ``cluster``, as it is in ``path`` (None: not saved yet)."""
        self.cluster = cluster
        self.setup.set_cluster(cluster)
        self.check_control.forget()  # Make ready was offered for the hosts of the cluster checked
        self.files.set_path(path)
        self._show_settings()

    def _on_files_opened(self, cluster: cl.Cluster, path: Path | None) -> None:
        self.run_control.detached_from = None  # another profile: its own runs (looked for below)
        self.set_cluster(cluster, path)
        if path is not None:
            self.run_control.look_for_runs(self.cluster)

    def _on_setup_cluster_changed(self) -> None:
        self.files.set_dirty(True)
        self.check_control.forget()  # Make ready was offered for the cluster as it was checked
        self._show_settings()

    def _show_settings(self) -> None:
        """The diagram follows the settings (a run's own numbers while they are its settings; a line below when not).
        A script or module chosen whose path is not set yet is drawn as a script: its batch unknown till it reports
        (never the trainer's split, nor the last run's)."""
        shown = copy.deepcopy(self.cluster)
        if self.setup.code_chosen() and not shown.training.user_code:
            shown.training.module = CODE_TO_COME
        self.diagram.set_cluster(shown, self.setup.gpus_by_host())
        self._update_actions()

    # ================================================================= check (console.gui.check_control)

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
        if cluster is not None:
            self.check_control.start(cluster)

    # ================================================================= a run (console.gui.run_control)

    def _on_stop_triggered(self) -> None:
        """Stop the run, once the person said yes: a stop ends every task (its backups stay: Resume goes on)."""
        run = self.session.run
        if run is None:
            return
        answer = QMessageBox.question(
            self, "Stop the run?",
            f"Stop run {run.run_id}? Every task gets SIGTERM, then SIGKILL after 10 s. Its backups stay: "
            "Resume goes on from the newest.", QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
        if answer == QMessageBox.Yes:
            self.run_control.stop()

    def _on_start_triggered(self) -> None:
        cluster = self._valid_cluster()
        if cluster is not None:
            self.run_control.start(cluster)

    def _show_progress(self, value: int, maximum: int, text: str) -> None:
        self.progress.setRange(0, maximum)
        self.progress.setValue(value)
        self.progress.setFormat(text)
        self.progress.show()

    def _update_actions(self) -> None:
        running = self.run_control.running
        has_tasks = bool(self.cluster.tasks)
        self.act_check.setEnabled(has_tasks and not self.check_control.busy)
        detached, making = self.run_control.detached_from, self.check_control.provisioning  # (Make ready)
        self.act_start.setEnabled(has_tasks and not running and detached is None and not making)
        self.act_start.setToolTip(
            f"Run {detached} of this profile goes on (detached): open it in the Runs tab to follow it again, and "
            "stop it there before starting another" if detached else
            "Upload what is missing, start every task and follow them (F5)")
        self.act_stop.setEnabled(running)
        self.act_resume.setEnabled(self.run_control.resumable)
        self.act_detach.setEnabled(running)  # an ended run has nothing to detach from

    # ================================================================= help (console.gui.about)

    def _on_docs_triggered(self) -> None:
        """The guide in the desktop's viewer; with none, where it is."""
        self.docs_box = open_guide(self)

    def _on_about_triggered(self) -> None:
        QMessageBox.about(self, "About tfcc", about_text())

    def closeEvent(self, event):  # noqa: N802 (Qt's name)
        if not self.files.maybe_discard():
            event.ignore()
            return
        self.asker.refuse_all()
        if self._view_saver.isActive():  # a change not saved yet
            self._view_saver.stop()
            self._on_view_saver_timeout()
        if not self.isMaximized() and not self.isFullScreen():
            self.profiles.set_window_size(_screen_key(self.screen().availableGeometry().size()),
                                          (self.width(), self.height()))
        self.dashboard.timer.stop()
        self.dashboard.slow_timer.stop()  # its widgets go with the window: no late tick on them
        self.runs_panel.stop_tensorboards()
        for window in list(self.run_control.log_windows):  # the logs opened from here go with the window
            window.close()
        self.session.detach()   # the run goes on; its follow threads end here
        self.check_control.provisioner.cancel()  # a provision ends with the window: nothing half made is used
        self.threads.join(timeout=10)
        super().closeEvent(event)
