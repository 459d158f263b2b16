"""The window's check and Make ready: off the UI thread; a check's report marks the setup and comes forward in the
Check tab, and Make ready (console/provision.py) is offered there for the problems it fixes, then checks again."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QTabWidget

from console import checks
from console import cluster as cl
from console import environments
from console.gui.check_view import CheckView
from console.gui.jobs import CheckJob, HostKeyAsker, Threads
from console.gui.setup_form import SetupForm


class CheckControl(QObject):
    """Starts a check of a valid cluster and shows how it goes and what it found; makes the checked cluster's hosts
    ready when the person asks (``provisioner``, the Check tab's Make ready), then checks it again."""

    reported = Signal(str)                # a line for the status bar
    progressed = Signal(int, int, str)    # done, total, the progress bar's format
    progress_ended = Signal()
    actions_changed = Signal()            # a check or a provision began or ended: what the window offers changes
    checked = Signal()                    # the report is shown: the setup's marks changed

    def __init__(self, threads: Threads, asker: HostKeyAsker, setup: SetupForm, check_view: CheckView,
                 tabs: QTabWidget, parent=None):
        super().__init__(parent)
        self.setup, self.check_view, self.tabs = setup, check_view, tabs
        self.provision_view = check_view.provision_view
        self.provisioner = self.provision_view.job
        self.checker = CheckJob(threads, asker, self)
        self.checking = False
        self.provisioning = False
        self.cluster: cl.Cluster | None = None  # the cluster checked last (a copy): Make ready makes it ready
        self.checker.progressed.connect(self._on_checker_progressed)
        self.checker.finished.connect(self._on_checker_finished)
        self.checker.failed.connect(self._on_checker_failed)
        self.provisioner.finished.connect(self._on_provisioner_finished)
        self.provisioner.failed.connect(self._on_provisioner_failed)
        self.provision_view.asked.connect(self._on_provision_view_asked)

    @property
    def busy(self) -> bool:
        """A check or a provision is under way."""
        return self.checking or self.provisioning

    def start(self, cluster: cl.Cluster) -> None:
        """Check ``cluster`` (valid, and a copy: the setup goes on editing its own)."""
        self.provision_view.clear()  # a check of the person's: an earlier provision's rows go
        self._check(cluster)

    def forget(self) -> None:
        """Another cluster is edited: the last check spoke of other hosts, so Make ready is offered no more."""
        if not self.provisioning:  # (one going on checks its own cluster again when it ends)
            self.cluster = None
            self.provision_view.clear()  # its rows spoke of those hosts too
        self.provision_view.offer([])

    def _check(self, cluster: cl.Cluster) -> None:
        self.cluster = cluster
        self.setup.report = None
        self.provision_view.check_started()
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
        self.provision_view.offer([])
        self.progress_ended.emit()
        self.reported.emit(f"The check could not run: {message}")
        self.actions_changed.emit()

    def _on_checker_finished(self, report) -> None:
        self.checking = False
        self.progress_ended.emit()
        self.setup.set_report(report)
        self.check_view.show_report(report)
        self.provision_view.offer([p for p in report.problems if p.remedy == checks.MAKE_READY])
        self.checked.emit()
        self.reported.emit(f"Ready: every check passed in {report.seconds:.1f} s" if report.ready
                           else f"{len(report.problems)} problem(s) found; see the Check tab")
        self.tabs.setCurrentWidget(self.check_view)  # what the person asked for, in front

    # ------------------------------------------------------------ Make ready (console.provision)

    def _on_provision_view_asked(self, packages: list) -> None:
        if self.busy or self.cluster is None:  # the button shows only after a check's report: a late click
            return
        self.provisioning = True  # (before the edit below: an edit withdraws an offer, not this provision)
        if packages:  # the code's imports a host lacks, offered and left ticked: the cluster's [environment] too
            environments.add_packages(self.cluster, packages)
            self.setup.add_packages(packages)
        self.progressed.emit(0, 0, "making the hosts ready")
        self.reported.emit("Making the hosts ready…")
        self.provisioner.start(self.cluster)
        self.actions_changed.emit()

    def _on_provisioner_finished(self, report) -> None:
        """Made (or not): the check runs again, so its table shows what each host holds now."""
        self.provisioning = False
        self.progress_ended.emit()
        failed = [h.name for h in report.hosts if not h.ok]
        said = (f"{len(failed)} host(s) not ready ({', '.join(failed)})" if failed else
                "versions differ between the hosts" if report.differs else "every host is ready")
        self.reported.emit(f"Make ready: {said}; checking again…")
        self._check(self.cluster)

    def _on_provisioner_failed(self, message: str) -> None:
        self.provisioning = False
        self.progress_ended.emit()
        self.reported.emit(f"Make ready could not run: {message}")
        self.actions_changed.emit()
