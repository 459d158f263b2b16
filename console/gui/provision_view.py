"""Make ready in the Check tab: the button beside the problems it fixes, each host's way through a provision
(console/provision.py) as it goes, a bar for the bytes pushed, and each host's line at the end."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QFrame, QHBoxLayout, QHeaderView, QLabel,
                               QProgressBar, QPushButton, QTableWidget, QVBoxLayout, QWidget)

from console import provision as pv
from console.checks import Problem
from console.gui.cells import cell
from console.gui.colors import ALARM
from console.gui.jobs import ProvisionJob
from console.text import size_text

HINT = ("Make ready makes the Python environment the run needs on every host: this console resolves the versions, "
        "fetches the wheels once and pushes each host what it lacks; the hosts need no index. A host that has it "
        "already is left as it is.")
# Each stage of a host's provision in words (the ends in bold in the table: how it ended).
STAGE_WORDS = {pv.CONNECTING: "connecting", pv.RESOLVING: "resolving the versions", pv.FETCHING: "fetching the wheels",
               pv.PUSHING: "pushing the wheels", pv.DOWNLOADING: "downloading the wheels itself",
               pv.PREPARING: "preparing the environment",
               pv.INSTALLING: "installing", pv.CHECKING: "reading the versions back",
               pv.READY: "ready (had it)", pv.MADE: "made", pv.FAILED: "FAILED", pv.SKIPPED: "skipped",
               pv.CANCELLED: "cancelled"}
COLUMNS = ("host", "stage", "pushed", "result")
PUSH_STEPS = 1000   # the bar counts thousandths: a GPU build's gigabytes overflow a bar's int
MAX_TABLE_HEIGHT = 240


def stage_text(result: pv.HostResult) -> str:
    """Where a host is, in words: "installing 6 packages", "resolving the versions for cpython3.11-…"."""
    words = STAGE_WORDS.get(result.stage, result.stage)
    if result.stage == pv.INSTALLING and result.installing:
        return f"installing {result.installing} packages"
    if result.stage == pv.DOWNLOADING and result.downloaded:
        return f"{words} ({size_text(result.downloaded)})"
    if result.stage == pv.RESOLVING and result.platform:
        return f"{words} for {result.platform}" + (" (GPU build)" if result.gpu else "")
    return words


def pushed_text(result: pv.HostResult) -> str:
    """What went to a host, at its end: "37 MB pushed", "nothing pushed", "12 MB of 37 MB pushed"."""
    if not result.to_push:
        return "nothing pushed" if result.ok else ""
    if result.pushed >= result.to_push:
        return f"{size_text(result.pushed)} pushed"
    return f"{size_text(result.pushed)} of {size_text(result.to_push)} pushed"


def summary_text(report: pv.Report) -> str:
    """How a provision ended, in one line."""
    made = sum(1 for h in report.hosts if h.stage == pv.MADE)
    had = sum(1 for h in report.hosts if h.stage == pv.READY)
    skipped = sum(1 for h in report.hosts if h.stage == pv.SKIPPED)
    moved = (f"{size_text(report.fetched)} fetched, " if report.fetched else "") \
        + f"{size_text(report.pushed)} pushed in {report.seconds:.1f} s"  # (find_links' wheels are not fetched)
    if any(h.stage == pv.CANCELLED for h in report.hosts):
        return f"Make ready was cancelled: nothing half made is used ({moved}); Make ready again to go on."
    failed = [h for h in report.hosts if not h.ok]
    if failed:
        return (f"{len(failed)} of {len(report.hosts)} host(s) not ready ({', '.join(h.name for h in failed)}): "
                f"each one's line says why and what to do; the others are ready ({moved}).")
    if report.differs:
        return f"Every host has an environment, but versions differ between them: {'; '.join(report.differs)}."
    if skipped and not made and not had:
        return ("Nothing was made: every host's python is set in the cluster file, so its tasks run that interpreter "
                "(install the packages there, or remove python to let tfcc make the environment).")
    return (f"Every host is ready: {made} made, {had} had it already"
            + (f", {skipped} skipped (its python is set)" if skipped else "") + f" ({moved}).")


class ProvisionView(QFrame):
    """Make ready and how it goes: hidden while the last check found nothing it fixes and nothing was made.

    ``asked`` says the person asked to make the hosts ready (the check control starts ``job`` for the cluster it
    checked); Cancel cancels ``job``. Rows follow ``job``'s signals, one per host."""

    asked = Signal(list)  # Make ready was clicked: the packages offered that the person left ticked (pip's words)

    def __init__(self, job: ProvisionJob, parent=None):
        super().__init__(parent)
        self.setFrameShape(QFrame.StyledPanel)
        self.job = job
        self.fixable: list[Problem] = []  # the last report's problems Make ready fixes
        self.running = False              # a provision goes on
        self.checking = False             # a check goes on: nothing to offer till it ends
        self.results: dict[str, pv.HostResult] = {}  # each host's newest result, in the order they came
        self.button = QPushButton("Make ready")
        self.button.setToolTip(HINT)
        self.button.clicked.connect(self._on_button_clicked)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("End the provision on every host: nothing half made is used")
        self.cancel_button.clicked.connect(self._on_cancel_button_clicked)
        self.offers = QWidget()  # a module the code imports that a host lacks: its package, ticked, to add
        self.offers_layout = QHBoxLayout(self.offers)
        self.offers_layout.setContentsMargins(0, 0, 0, 0)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.PlainText)  # the hosts' words among them: shown, never read as markup
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setSelectionMode(QAbstractItemView.NoSelection)
        self.table.setFocusPolicy(Qt.NoFocus)  # read, not edited: no current cell drawn
        self.table.setWordWrap(True)
        header = self.table.horizontalHeader()
        for column, mode in enumerate((QHeaderView.ResizeToContents, QHeaderView.Interactive, QHeaderView.Fixed,
                                       QHeaderView.Stretch)):
            header.setSectionResizeMode(column, mode)
        self.table.setColumnWidth(1, 200)
        self.table.setColumnWidth(2, 170)
        top = QHBoxLayout()
        top.addWidget(self.button)
        top.addWidget(self.cancel_button)
        top.addWidget(self.status, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addWidget(self.offers)
        layout.addWidget(self.table)
        for event in ("started", "progressed", "finished", "failed"):  # _on_job_<event>
            getattr(job, event).connect(getattr(self, f"_on_job_{event}"))
        self._show()

    # ------------------------------------------------------------------ what the check control says

    def offer(self, fixable: list[Problem]) -> None:
        """The last check's report: ``fixable``, the problems Make ready fixes (none: nothing offered)."""
        self.fixable = list(fixable)
        self.checking = False
        while self.offers_layout.count():
            item = self.offers_layout.takeAt(0)
            if item.widget() is not None:  # (the stretch after the boxes is none)
                item.widget().deleteLater()
        for package in dict.fromkeys(p.package for p in self.fixable if p.package):
            box = QCheckBox(f"add {package} to [environment]")
            box.setChecked(True)
            box.setToolTip(f"The code imports it and a host lacks it: Make ready installs {package} with the rest "
                           "(the cluster then lists it in its [environment]; save the cluster to keep it)")
            box.setProperty("package", package)
            self.offers_layout.addWidget(box)
        if self.offers_layout.count():
            self.offers_layout.addStretch(1)
        if not self.running and not self.results:
            self._status(self._offer_text())
        self._show()

    def check_started(self) -> None:
        """A check began: nothing is offered till its report (the rows of a provision stay)."""
        self.checking = True
        self._show()

    def clear(self) -> None:
        """A check the person asked for: the rows of an earlier provision go."""
        self.results = {}
        self.table.setRowCount(0)
        self._status("")
        self._show()

    # ------------------------------------------------------------------ the person

    def offered(self) -> list[str]:
        """The packages offered that are ticked."""
        boxes = (self.offers_layout.itemAt(i).widget() for i in range(self.offers_layout.count()))
        return [b.property("package") for b in boxes if isinstance(b, QCheckBox) and b.isChecked()]

    def _on_button_clicked(self) -> None:
        self.asked.emit(self.offered())

    def _on_cancel_button_clicked(self) -> None:
        self.cancel_button.setEnabled(False)
        self._status("Cancelling: each host ends its step; nothing half made is used…")
        self.job.cancel()

    # ------------------------------------------------------------------ the job

    def _on_job_started(self) -> None:
        self.running = True
        self.results = {}
        self.table.setRowCount(0)
        self.cancel_button.setEnabled(True)
        self._status("Making the hosts ready…")
        self._show()

    def _on_job_progressed(self, result: pv.HostResult) -> None:
        if not self.running:  # a late copy from a provision that ended
            return
        new = result.name not in self.results
        if new:
            self.table.insertRow(self.table.rowCount())
        self.results[result.name] = result
        self._draw_row(list(self.results).index(result.name), result)
        if new:
            self._show()

    def _on_job_finished(self, report: pv.Report) -> None:
        self.running = False
        for result in report.hosts:  # the report's own: every host at its end, whatever a signal missed
            if result.name not in self.results:
                self.table.insertRow(self.table.rowCount())
            self.results[result.name] = result
            self._draw_row(list(self.results).index(result.name), result)
        failed = any(h.stage == pv.FAILED for h in report.hosts) or bool(report.differs)
        self._status(summary_text(report), alarm=failed)  # a cancel is no failure
        self._show()

    def _on_job_failed(self, line: str) -> None:
        self.running = False
        self._status(f"Make ready could not run: {line}", alarm=True)
        self._show()

    # ------------------------------------------------------------------ drawing

    def _draw_row(self, row: int, result: pv.HostResult) -> None:
        ended = result.stage in pv.ENDS
        alarm = result.stage == pv.FAILED
        stage = cell(stage_text(result))
        line = cell(result.line, result.line)
        for item in (stage, line):
            if alarm:
                item.setForeground(QColor(ALARM))
        if ended:
            font = stage.font()
            font.setBold(True)
            stage.setFont(font)
        self.table.setItem(row, 0, cell(result.name))
        self.table.setItem(row, 1, stage)
        self.table.setItem(row, 3, line)
        if ended:
            self.table.removeCellWidget(row, 2)
            self.table.setItem(row, 2, cell(pushed_text(result)))
        else:
            self.table.setItem(row, 2, cell(""))
            bar = self.table.cellWidget(row, 2)
            if not isinstance(bar, QProgressBar):
                bar = QProgressBar()
                self.table.setCellWidget(row, 2, bar)
            if result.stage == pv.PUSHING and result.to_push:
                bar.setRange(0, PUSH_STEPS)
                bar.setValue(min(PUSH_STEPS, result.pushed * PUSH_STEPS // result.to_push))
                bar.setFormat(f"{size_text(result.pushed)} of {size_text(result.to_push)}")
            elif result.stage in (pv.PREPARING, pv.INSTALLING, pv.CHECKING):  # pushed: the bytes are there
                bar.setRange(0, PUSH_STEPS)
                bar.setValue(PUSH_STEPS)
                bar.setFormat(f"{size_text(result.pushed)} pushed" if result.to_push else "nothing to push")
            else:
                bar.setRange(0, 0)  # busy: nothing counted yet
        self.table.resizeRowToContents(row)
        self._fit_table()

    def _fit_table(self) -> None:
        """As tall as its rows, up to ``MAX_TABLE_HEIGHT`` (then it scrolls): the report below keeps its room."""
        rows = sum(self.table.rowHeight(r) for r in range(self.table.rowCount()))
        height = self.table.horizontalHeader().height() + rows + 2 * self.table.frameWidth() + 2
        self.table.setFixedHeight(min(MAX_TABLE_HEIGHT, height))

    def _status(self, words: str, alarm: bool = False) -> None:
        self.status.setText(words)
        self.status.setStyleSheet(f"color: {ALARM}" if alarm else "")

    def _offer_text(self) -> str:
        count = len(self.fixable)
        return (f"Make ready fixes {'the problem' if count == 1 else f'{count} of the problems'} marked below: "
                "it makes the run's Python environment on every host, offline" if count else "")

    def _show(self) -> None:
        """The button while the last report has a problem it fixes and nothing runs; Cancel while it runs; the
        rows once there are; the whole frame only when any of them is."""
        offered = bool(self.fixable) and not self.running and not self.checking
        self.button.setVisible(offered)
        self.offers.setVisible(offered and bool(self.offers_layout.count()))
        self.cancel_button.setVisible(self.running)
        self.table.setVisible(bool(self.results))
        self.setVisible(offered or self.running or bool(self.results) or bool(self.status.text()))
