"""The window's check: off the UI thread; its report marks the setup and comes forward in the Check tab."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QTabWidget

from console import cluster as cl
from console.gui.check_view import CheckView
from console.gui.jobs import CheckJob, HostKeyAsker, Threads
from console.gui.setup_form import SetupForm


class CheckControl(QObject):
    """Starts a check of a valid cluster and shows how it goes and what it found."""

    reported = Signal(str)                # a line for the status bar
    progressed = Signal(int, int, str)    # done, total, the progress bar's format
    progress_ended = Signal()
    actions_changed = Signal()            # a check began or ended: what the window offers changes
    checked = Signal()                    # the report is shown: the setup's marks changed

    def __init__(self, threads: Threads, asker: HostKeyAsker, setup: SetupForm, check_view: CheckView,
                 tabs: QTabWidget, parent=None):
        super().__init__(parent)
        self.setup, self.check_view, self.tabs = setup, check_view, tabs
        self.checker = CheckJob(threads, asker, self)
        self.checking = False
        self.checker.progressed.connect(self._on_checker_progressed)
        self.checker.finished.connect(self._on_checker_finished)
        self.checker.failed.connect(self._on_checker_failed)

    def start(self, cluster: cl.Cluster) -> None:
        """Check ``cluster`` (valid, and a copy: the setup goes on editing its own)."""
        self.setup.report = None
        self.progressed.emit(0, len(cluster.hosts) + 1, "checking %v/%m")
        self.reported.emit("Checking the hosts…")
        self.checking = True
        self.checker.start(cluster)
        self.actions_changed.emit()

    def _on_checker_progressed(self, done: int, total: int, what: str) -> None:
        self.progressed.emit(done, total, "checking %v/%m")
        self.reported.emit(f"Checking: {what}")

    def _on_checker_failed(self, message: str) -> None:
        self.checking = False
        self.progress_ended.emit()
        self.reported.emit(f"The check could not run: {message}")
        self.actions_changed.emit()

    def _on_checker_finished(self, report) -> None:
        self.checking = False
        self.progress_ended.emit()
        self.setup.set_report(report)
        self.check_view.show_report(report)
        self.checked.emit()
        self.reported.emit(f"Ready: every check passed in {report.seconds:.1f} s" if report.ready
                           else f"{len(report.problems)} problem(s) found; see the Check tab")
        self.tabs.setCurrentWidget(self.check_view)  # what the person asked for, in front
