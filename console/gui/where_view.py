""""Where are they?" in the window: where each task of a running run is now (console.run.where reads, console.hangs
words): the verdict, a line a group (the stuck ones in the alarm colour) and each task's whole stack, its own frames
marked. It shows a report's dict (``Report.as_dict()``): an ask's, or the one a 'where' event carries when the stall
watchdog called a hang."""

from __future__ import annotations

import html
import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPlainTextEdit,
                               QPushButton, QSplitter, QVBoxLayout, QWidget)

from console.gui.colors import ALARM
from console.hangs import ANSWERED

HINT = ("Where each task's threads are now, down to the line of your code that waits: every task is asked (a few "
        "seconds); training goes on undisturbed.")
ASKING = "Asking each task where it is…"
NOTHING_DIFFERS = "Nothing stands out: no task is anywhere the others are not (each one's place is below)."
STACK_HINT = "Select a task to see its whole stack, thread by thread: your frames marked >, tfcc's folded."


def group_lines(where: dict) -> list[tuple[str, bool]]:
    """A report's dict as (line, stuck) a group. A dict without ``groups`` (kept before they were) marks a line
    stuck by the task it starts with."""
    groups = where.get("groups")
    if isinstance(groups, list) and all(isinstance(g, dict) for g in groups):
        return [(line, bool(g.get("stuck"))) for line, g in zip(_strings(where.get("lines")), groups)]
    stuck = set(_strings(where.get("stuck")))
    return [(line, line.split(" ", 1)[0].rstrip(",") in stuck) for line in _strings(where.get("lines"))]


def _strings(value) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


class WhereView(QFrame):
    """The newest answer to "where are they?" of the run followed. ``button`` (placed beside Why slow?) and Ask
    again ask (``ask``): ``asked`` says so, and the run control asks the session, off this thread."""

    asked = Signal()   # the person asked where the tasks are (``wanted``: the task whose stack to show, or "")
    opened = Signal()  # the view was hidden and shows now (its place gives it room)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setFrameShape(QFrame.StyledPanel)
        self.where: dict | None = None    # the report shown (Report.as_dict())
        self.lines: list[tuple[str, bool]] = []  # its groups' lines, and whether each is stuck
        self.wanted = ""                  # the task whose stack to show once the answer comes
        self.available = False            # a run goes on that may be asked
        self.waiting = False              # an ask is out
        self.button = QPushButton("Where are they?")
        self.button.setToolTip(HINT)
        self.button.setEnabled(False)
        self.button.clicked.connect(self._on_button_clicked)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.PlainText)  # a host's words among them: shown, never read as markup
        self.again_button = QPushButton("Ask again")
        self.again_button.setToolTip(HINT)
        self.again_button.clicked.connect(self._on_again_button_clicked)
        self.close_button = QPushButton("Close")
        self.close_button.setToolTip("Hide this view (the plots take its room); Where are they? asks again")
        self.close_button.clicked.connect(self._on_close_button_clicked)
        self.verdict = QLabel()
        self.verdict.setWordWrap(True)
        self.verdict.setTextFormat(Qt.PlainText)
        self.verdict.setStyleSheet("font-weight: bold")
        self.verdict.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.groups = QLabel()
        self.groups.setWordWrap(True)
        self.groups.setTextFormat(Qt.RichText)
        self.groups.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.tasks = QListWidget()
        self.tasks.setToolTip("Each task: select one to see its stack")
        self.tasks.currentItemChanged.connect(self._on_tasks_current_item_changed)
        self.stack = QPlainTextEdit()
        self.stack.setReadOnly(True)
        self.stack.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.stack.setFont(QFont("monospace", 9))
        self.stack.setPlaceholderText(STACK_HINT)
        split = self.split = QSplitter(Qt.Horizontal)
        split.addWidget(self.tasks)
        split.addWidget(self.stack)
        split.setStretchFactor(1, 1)
        split.setSizes([170, 700])
        top = QHBoxLayout()
        title = QLabel("<b>Where are they?</b>")
        top.addWidget(title)
        top.addWidget(self.status, 1)
        top.addWidget(self.again_button)
        top.addWidget(self.close_button)
        said = QWidget()  # the verdict and the groups: as tall as their lines, never squeezed under the stacks
        said_layout = QVBoxLayout(said)
        said_layout.setContentsMargins(0, 0, 0, 0)
        said_layout.setSpacing(2)
        said_layout.addWidget(self.verdict)
        said_layout.addWidget(self.groups)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addWidget(said)
        layout.addWidget(split, 1)
        self.hide()  # until asked, or a hang is found

    # ------------------------------------------------------------------ what the run control says

    def set_available(self, available: bool) -> None:
        """Whether a run goes on that may be asked."""
        self.available = available
        self._enable()

    def clear(self) -> None:
        """Another run is shown: nothing asked of it yet."""
        self.where, self.lines, self.wanted, self.waiting = None, [], "", False
        self.verdict.setText("")
        self.groups.setText("")
        self.tasks.clear()
        self.stack.setPlainText("")
        self.status.setText("")
        self._enable()
        self.hide()

    def ask(self, task: str = "") -> None:
        """Ask where the tasks are; ``task``: whose stack to show when the answer comes (else the one selected)."""
        self.wanted = task or self.selected_task()
        self.waiting = True
        self._enable()
        self._status(ASKING)
        if self.where is None:
            self.verdict.setText(ASKING)
        self._open()
        self.asked.emit()

    def refused(self, words: str) -> None:
        """The tasks could not be asked: ``words`` say why and what to do."""
        self.waiting = False
        self._enable()
        self._status(words, alarm=True)
        if self.where is None:
            self.verdict.setText("")
        self._open()

    def show_report(self, where: dict, found: str = "") -> None:
        """A report came (``Report.as_dict()``): asked now, or ``found`` by the stall watchdog (its words)."""
        if not found:  # the answer to the ask that is out (a hang found meanwhile leaves it out)
            self.waiting = False
        self._enable()
        self.where = where
        self.lines = group_lines(where)
        verdict = where.get("verdict")
        self.verdict.setText(str(verdict) if verdict else NOTHING_DIFFERS)
        self.groups.setText("<br>".join(
            f"<span style='color:{ALARM}'><b>●</b> {html.escape(line)}</span>" if stuck
            else f"<span style='color:#333'>○ {html.escape(line)}</span>" for line, stuck in self.lines))
        clock = time.strftime("%H:%M:%S")
        self._status(f"{found} at {clock}" if found else f"Asked at {clock}; the run goes on undisturbed")
        stuck = set(_strings(where.get("stuck")))
        wanted = self.wanted or self.selected_task()
        if not self.waiting:
            self.wanted = ""  # shown: a later report keeps whatever the person selects
        self.tasks.blockSignals(True)  # filled whole, then the one wanted selected once
        self.tasks.clear()
        for task in (t for t in where.get("tasks") or [] if isinstance(t, dict)):
            name = str(task.get("task", ""))
            state = str(task.get("state", ""))
            item = QListWidgetItem(name + ("   stuck" if name in stuck else "" if state == ANSWERED else f"   {state}"))
            item.setData(Qt.UserRole, name)
            # (a tooltip is rich text: a host's words are escaped)
            item.setToolTip(html.escape(f"{name} on {task.get('host', '')}"
                                        + (f": {task['place']}" if task.get("place") else "")))
            if name in stuck:
                item.setForeground(QColor(ALARM))
            self.tasks.addItem(item)
        self.tasks.blockSignals(False)
        names = [self.tasks.item(i).data(Qt.UserRole) for i in range(self.tasks.count())]
        first_stuck = next((n for n in names if n in stuck), names[0] if names else "")
        self.select(wanted if wanted in names else first_stuck)
        self._open()

    # ------------------------------------------------------------------ reading it

    def selected_task(self) -> str:
        item = self.tasks.currentItem()
        return item.data(Qt.UserRole) if item is not None else ""

    def select(self, task: str) -> None:
        """Show ``task``'s stack (nothing when the report has no such task)."""
        for i in range(self.tasks.count()):
            if self.tasks.item(i).data(Qt.UserRole) == task:
                self.tasks.setCurrentRow(i)
                self._show_stack(task)
                return
        self.stack.setPlainText("")

    def _show_stack(self, name: str) -> None:
        task = next((t for t in (self.where or {}).get("tasks") or [] if isinstance(t, dict) and t.get("task") == name),
                    None)
        if task is None:
            self.stack.setPlainText("")
            return
        head = f"{name} on {task.get('host', '')}" + (f": {task['place']}" if task.get("place") else "")
        self.stack.setPlainText("\n".join([head, ""] + _strings(task.get("stack"))))

    def _on_tasks_current_item_changed(self, item, _previous) -> None:
        if item is not None:
            self._show_stack(item.data(Qt.UserRole))

    # ------------------------------------------------------------------ its parts

    def _enable(self) -> None:
        for button in (self.button, self.again_button):
            button.setEnabled(self.available and not self.waiting)

    def _status(self, words: str, alarm: bool = False) -> None:
        self.status.setStyleSheet(f"color: {ALARM}" if alarm else "color: #444")
        self.status.setText(words)

    def _open(self) -> None:
        if self.isHidden():
            self.show()
            self.opened.emit()

    def _on_close_button_clicked(self) -> None:
        self.hide()

    def _on_button_clicked(self) -> None:
        self.ask()

    def _on_again_button_clicked(self) -> None:
        self.ask()
