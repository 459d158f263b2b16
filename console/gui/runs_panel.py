"""The Runs panel: every run this console started, and what can be done with one.

Each run's state, cluster, start, duration and final metrics; Open, Compare, Delete…, Open TensorBoard, Refresh.

The list, a run's history, a deletion (``console.catalog``) and TensorBoard (``console.tensorboard``)
are worked out on threads (``jobs.Threads``) and come back as signals. Opening a run goes through the
window (``open_requested``: it may be following a live run, and asks first); it then calls ``load``.
"""

from __future__ import annotations

import html
import logging

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QColor, QDesktopServices, QIcon, QPixmap
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QMessageBox, QPushButton,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from console import text
from console.catalog import RunInfo, delete_run, load_store, overview
from console.errors import describe
from console.gui.jobs import Threads
from console.run.runner import Run
from console.states import RunState
from console.store.labels import set_label
from console.tensorboard import Servers

log = logging.getLogger("console.gui")

# What tells runs apart first (name, state, where they ended), then how they were set up; the notes last.
COLUMNS = ("Run", "Name", "State", "Loss", "Accuracy", "Val accuracy", "Duration", "Start", "Settings", "Cluster",
           "Notes")
METRIC_COLUMNS = {"Loss": "loss", "Accuracy": "accuracy", "Val accuracy": "val_accuracy"}
LABELS = {COLUMNS.index("Name"): "name", COLUMNS.index("Notes"): "notes"}  # the person's own, edited in place
NUMBERS = range(COLUMNS.index("Loss"), COLUMNS.index("Duration") + 1)  # right-aligned
SETTINGS_WIDTH = 260  # the settings column at first (its cells' tooltips have them whole)
HISTORY_LOG_BYTES = 64 << 10  # the end of each log of a run opened from the history (tfcc logs has more)


class RunsPanel(QWidget):
    """The runs of this console in a table, and what can be done with them."""

    open_requested = Signal(str)                # the person asked to see a run (the window decides)
    history_loaded = Signal(str, object, list)  # run id, a MetricsStore with its whole history, its tasks
    logs_loaded = Signal(str, str, list)        # run id, task, [(stream, text)] of the end of its logs (after history)
    comparison_loaded = Signal(str, object)     # run id, its store to overlay (None: the overlay is cleared)
    running_found = Signal(object)              # a run still going that was asked for: a Run to follow live
    deleted = Signal(str)                       # a run was deleted (its id)
    tensorboard_started = Signal(str, str)      # run id, the URL it answers on
    reported = Signal(str)                      # what happened, in words (the status bar)
    labelled = Signal(str)                      # the person named a run or wrote its notes (its id)
    _listed = Signal(object)                    # [RunInfo] from the list's thread; None: it could not be made
    _failed = Signal(str)                       # a job's one line, from its thread

    def __init__(self, threads: Threads, ask_host_key=None, parent=None):
        super().__init__(parent)
        self.threads = threads
        self.ask_host_key = ask_host_key
        self.tensorboards = Servers()
        self.infos: dict[str, RunInfo] = {}
        self.compared: dict[str, QColor] = {}  # the runs the Dashboard compares, with the colour of each
        self.listing = False

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        # A name or notes cell is edited in place (F2, or a click on the selected cell); the rest are read only.
        self.table.setEditTriggers(QAbstractItemView.EditKeyPressed | QAbstractItemView.SelectedClicked)
        self.table.verticalHeader().hide()
        self.table.setSortingEnabled(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setSectionResizeMode(COLUMNS.index("Cluster"), QHeaderView.Stretch)
        header.setSectionResizeMode(COLUMNS.index("Settings"), QHeaderView.Interactive)
        self.table.setColumnWidth(COLUMNS.index("Settings"), SETTINGS_WIDTH)
        self.table.setWordWrap(False)
        self._filling = False  # the table is being filled: its changes are none of the person's
        self.open_button = QPushButton("Open")
        self.open_button.setToolTip("Show the run's whole history in the Dashboard (a run still going: follow it)")
        self.compare_button = QPushButton("Compare")
        self.compare_button.setToolTip("Draw this run's curves dashed, in a colour of its own, behind the run shown "
                                       "(several runs can be; again: no more)")
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setToolTip("Delete the run's folders on its hosts and its history here (asks first)")
        self.tensorboard_button = QPushButton("Open TensorBoard")
        self.tensorboard_button.setToolTip("Copy the chief's TensorBoard logs here and open TensorBoard "
                                           "(on 127.0.0.1) in the browser")
        self.refresh_button = QPushButton("Refresh")
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.tensorboard_line = QLabel()  # where the TensorBoard started last answers (selectable, a link)
        self.tensorboard_line.setTextFormat(Qt.RichText)
        self.tensorboard_line.setOpenExternalLinks(True)
        self.tensorboard_line.setTextInteractionFlags(Qt.TextBrowserInteraction)
        self.tensorboard_line.hide()
        buttons = QHBoxLayout()
        for button in (self.open_button, self.compare_button, self.delete_button, self.tensorboard_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(self.refresh_button)
        layout = QVBoxLayout(self)
        layout.addLayout(buttons)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.note)
        layout.addWidget(self.tensorboard_line)

        self.open_button.clicked.connect(self._on_open_button_clicked)
        self.compare_button.clicked.connect(self._on_compare_button_clicked)
        self.delete_button.clicked.connect(self._on_delete_button_clicked)
        self.tensorboard_button.clicked.connect(self._on_tensorboard_button_clicked)
        self.refresh_button.clicked.connect(self.refresh)
        self.table.itemSelectionChanged.connect(self._on_table_item_selection_changed)
        self.table.itemDoubleClicked.connect(self._on_table_item_double_clicked)
        self.table.itemChanged.connect(self._on_table_item_changed)
        self._listed.connect(self._on_self_listed)
        self._failed.connect(self._on_self_failed)
        self.tensorboard_started.connect(self._on_self_tensorboard_started)
        self._update_buttons()

    # ------------------------------------------------------------ the list

    def refresh(self) -> None:
        """List the runs again, on a thread (the hosts of runs not known to have ended are asked, briefly)."""
        if self.listing:
            return
        self.listing = True
        self.refresh_button.setEnabled(False)
        self.threads.start("runs-list", self._list)

    def _list(self) -> None:
        try:
            infos = overview(self.ask_host_key)
        except Exception as exc:  # a listing that cannot be made: one line, the table as it was
            self._listed.emit(None)
            self._failed.emit(f"The runs cannot be listed: {describe(exc)}")
            return
        self._listed.emit(infos)

    def _on_self_listed(self, infos: list | None) -> None:
        self.listing = False
        self.refresh_button.setEnabled(True)
        if infos is None:
            return
        chosen = self.selected_run()
        self.infos = {i.run_id: i for i in infos}
        self._filling = True
        self.table.setRowCount(0)
        for info in reversed(infos):  # the newest first
            row = self.table.rowCount()
            self.table.insertRow(row)
            cells = [info.run_id, info.name, info.state]
            cells += [text.metric_text(info.metrics[m]) if m in info.metrics else "-"
                      for m in METRIC_COLUMNS.values()]
            cells += [text.duration_text(info.duration), text.start_text(info.start), info.settings or "-",
                      info.cluster_text or "-", info.notes.replace("\n", " ")]
            for column, value in enumerate(cells):
                item = QTableWidgetItem(value)
                item.setData(Qt.UserRole, info.run_id)
                if column == 0 and info.run_id in self.compared:
                    item.setIcon(_swatch(self.compared[info.run_id]))
                    item.setToolTip("Compared on the Dashboard: dashed, in this colour")
                if column in LABELS:
                    item.setToolTip("Yours to write: F2 (or a click on the selected cell) edits it")
                else:
                    item.setFlags(item.flags() & ~Qt.ItemIsEditable)
                    if info.note or column == COLUMNS.index("Settings"):
                        item.setToolTip("\n".join(filter(None, [value if column == COLUMNS.index("Settings")
                                                                 else "", info.note])))
                if column in NUMBERS:
                    item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                self.table.setItem(row, column, item)
            if info.run_id == chosen:
                self.table.selectRow(row)
        self._filling = False
        self.note.setText("" if infos else "No runs yet: Deploy & Start begins one.")
        self._update_buttons()

    def rows(self) -> list[list[str]]:
        """The table as it is shown (for tests and screenshots)."""
        return [[self.table.item(r, c).text() for c in range(self.table.columnCount())]
                for r in range(self.table.rowCount())]

    def selected_run(self) -> str | None:
        items = self.table.selectedItems()
        return items[0].data(Qt.UserRole) if items else None

    def select(self, run_id: str) -> None:
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).data(Qt.UserRole) == run_id:
                self.table.selectRow(row)
                return

    def _on_table_item_double_clicked(self, item: QTableWidgetItem) -> None:
        """A double click opens the run; on its name or notes it edits them."""
        if item.column() in LABELS:
            self.table.editItem(item)
        else:
            self._on_open_button_clicked()

    def _on_table_item_changed(self, item: QTableWidgetItem) -> None:
        """The person named a run or wrote its notes: kept (console.store.labels), on a thread."""
        if self._filling or item.column() not in LABELS:
            return
        run_id, what = item.data(Qt.UserRole), LABELS[item.column()]
        info = self.infos.get(run_id)
        if info is not None:
            setattr(info, what, item.text())
        self.threads.start("label", self._label, run_id, what, item.text())
        self.labelled.emit(run_id)

    def _label(self, run_id: str, what: str, words: str) -> None:
        try:
            set_label(run_id, **{what: words})
        except Exception as exc:
            self._failed.emit(f"The run's {what} could not be kept: {describe(exc)}")

    def _on_table_item_selection_changed(self) -> None:
        self._update_buttons()

    def _update_buttons(self) -> None:
        chosen = self.selected_run()
        for button in (self.open_button, self.compare_button, self.delete_button, self.tensorboard_button):
            button.setEnabled(chosen is not None)
        running = chosen is not None and self.infos.get(chosen) is not None and \
            self.infos[chosen].state == RunState.RUNNING
        self.delete_button.setEnabled(chosen is not None and not running)
        self.compare_button.setText("Uncompare" if chosen is not None and chosen in self.compared else "Compare")

    # ------------------------------------------------------------ open, compare

    def _on_open_button_clicked(self, *_) -> None:
        run_id = self.selected_run()
        if run_id is not None:
            self.open_requested.emit(run_id)

    def load(self, run_id: str) -> None:
        """Load the run for the Dashboard on a thread: its whole history (``history_loaded``), or a run
        still going as a Run to follow live (``running_found``)."""
        info = self.infos.get(run_id)
        self.reported.emit(f"Loading run {run_id}…")
        self.threads.start("runs-open", self._load, run_id, info is not None and info.state == RunState.RUNNING)

    def _load(self, run_id: str, running: bool) -> None:
        try:
            if running:
                self.running_found.emit(Run.load(run_id, self.ask_host_key))
                return
            store, order = load_store(run_id, self.ask_host_key)
        except Exception as exc:
            self._failed.emit(f"Run {run_id} cannot be opened: {describe(exc)}")
            return
        self.history_loaded.emit(run_id, store, order)
        self._logs(run_id)

    def _logs(self, run_id: str) -> None:
        """The end of each task's logs, from its host (a finished run's Logs tab is not blank); a host that does not
        answer: a line that says so, and how to read them later."""
        try:
            run = Run.load(run_id, self.ask_host_key)
        except Exception as exc:
            self.logs_loaded.emit(run_id, "", [("", f"The logs could not be read: {describe(exc)}")])
            return
        try:
            for task in run.tasks:
                try:
                    said = run.logs(task.name, HISTORY_LOG_BYTES)  # shown as a terminal would
                except Exception as exc:
                    said = [("", f"The log could not be read from {task.host}: {describe(exc)} (tfcc logs {run_id} "
                                 f"{task.name} reads it once the host answers)")]
                self.logs_loaded.emit(run_id, task.name, said)
        finally:
            run.detach()

    def _on_compare_button_clicked(self) -> None:
        run_id = self.selected_run()
        if run_id is None:
            return
        if run_id in self.compared:
            self.comparison_loaded.emit(run_id, None)
            return
        self.reported.emit(f"Loading run {run_id} to compare…")
        self.threads.start("runs-compare", self._compare, run_id)

    def _compare(self, run_id: str) -> None:
        try:
            store, _ = load_store(run_id, self.ask_host_key)
        except Exception as exc:
            self._failed.emit(f"Run {run_id} cannot be compared: {describe(exc)}")
            return
        self.comparison_loaded.emit(run_id, store)

    def set_compared(self, compared: dict) -> None:
        """The runs the Dashboard compares now ({run id: its colour}): each marked in the table with its colour."""
        self.compared = dict(compared)
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            colour = self.compared.get(item.data(Qt.UserRole))
            item.setIcon(_swatch(colour) if colour is not None else QIcon())
            item.setToolTip("Compared on the Dashboard: dashed, in this colour" if colour is not None else "")
        self._update_buttons()

    def compared_rows(self) -> dict[str, str]:
        """The runs the table marks as compared, with their colour's name (for tests)."""
        return {self.table.item(r, 0).text(): self.compared[self.table.item(r, 0).text()].name()
                for r in range(self.table.rowCount()) if not self.table.item(r, 0).icon().isNull()}

    # ------------------------------------------------------------ delete

    def _on_delete_button_clicked(self) -> None:
        run_id = self.selected_run()
        if run_id is None:
            return
        info = self.infos.get(run_id)
        hosts = ", ".join(info.hosts) if info is not None and info.hosts else "its hosts"
        answer = QMessageBox.question(
            self, "Delete run",
            f"Delete run {run_id}?\n\nIts folders on {hosts} (metrics, logs, backups, the saved model) and this "
            "console's history of it are deleted. This cannot be undone.",
            QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
        if answer != QMessageBox.Yes:
            return
        self.reported.emit(f"Deleting run {run_id}…")
        self.threads.start("runs-delete", self._delete, run_id)

    def _delete(self, run_id: str) -> None:
        try:
            said = delete_run(run_id, self.ask_host_key)
        except Exception as exc:
            self._failed.emit(f"Run {run_id} was not deleted: {describe(exc)}")
            return
        log.info("deleted run %s: %s", run_id, "; ".join(said))
        self.deleted.emit(run_id)
        self.reported.emit(f"Run {run_id} deleted")
        self._listed.emit(overview(self.ask_host_key, ask=False))

    # ------------------------------------------------------------ TensorBoard

    def _on_tensorboard_button_clicked(self) -> None:
        run_id = self.selected_run()
        if run_id is None:
            return
        self.reported.emit(f"Copying the TensorBoard logs of run {run_id} and starting TensorBoard…")
        self.threads.start("runs-tensorboard", self._tensorboard, run_id)

    def _tensorboard(self, run_id: str) -> None:
        try:
            url = self.tensorboards.open(run_id, self.ask_host_key)
        except Exception as exc:
            self._failed.emit(f"TensorBoard cannot be opened: {describe(exc)}")
            return
        self.tensorboard_started.emit(run_id, url)

    def _on_self_tensorboard_started(self, run_id: str, url: str) -> None:
        """In the browser; the address stays under the list (selectable: no browser may have opened), until the
        window quits or another run's TensorBoard starts."""
        self.reported.emit(f"TensorBoard of run {run_id}: {url}")
        opened = QDesktopServices.openUrl(QUrl(url))
        self.tensorboard_line.show()
        self.tensorboard_line.setText(f"TensorBoard of run {html.escape(run_id)} answers at <a href='{html.escape(url)}'>"
                          f"{html.escape(url)}</a>" + ("" if opened else " (no browser opened it: open that address "
                                                                        "in one)"))

    def stop_tensorboards(self) -> None:
        """Stop every TensorBoard this panel started, those still starting too, on a thread (the window quits)."""
        self.threads.start("tensorboard-stop", self.tensorboards.stop_all)

    # ------------------------------------------------------------ inside

    def _on_self_failed(self, message: str) -> None:
        self.reported.emit(message)
        self.note.setText(message)

    def showEvent(self, event):  # noqa: N802 (Qt's name): the list as it is now, each time it is shown
        super().showEvent(event)
        self.refresh()


def _swatch(colour: QColor) -> QIcon:
    """A square of a compared run's colour."""
    pixmap = QPixmap(12, 12)
    pixmap.fill(colour)
    return QIcon(pixmap)
