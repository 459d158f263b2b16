"""Beside the plots: the run's events as they come, alarms in red, and each task's log tail.

The events are what the tasks and the console said of the run (console.text words them); the logs are a tab
per task.
"""

from __future__ import annotations

import collections
import datetime as dt
import math
import threading
import time

import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QTextCursor
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QLineEdit, QListView, QListWidget, QListWidgetItem,
                               QPlainTextEdit, QTabWidget, QToolButton, QVBoxLayout, QWidget)

from agent.protocol import ERROR, FAILED, LOST, STDERR, STDOUT
from console.states import RECONNECTING, SessionKind
from console.store.metrics import MetricsStore
from console.terminal import Terminal, shown_lines
from console.text import event_line
from trainer.records import number

LOG_LINES = 2000  # per task's log tail
LOG_PER_TAKE = 200  # lines of a task the window takes at once (at most every LOG_TAKE_MS): the rest are counted
LOG_TAKE_MS = 100
LOG_WIDTH = 2000  # characters of a log line shown (a megabyte's line would take the text view seconds to lay out)
MAX_SHOWN = 2000  # events in the list (the store keeps more; a run's history has them all)
PER_TICK = 200    # events listed per refresh at most: a flood shows its newest, and a line says how many not
# Events shown in red: a task's bad end, a lost host, what supervision wants looked at.
ALARMS = (FAILED, ERROR, LOST, SessionKind.WATCHDOG, RECONNECTING, *SessionKind.ALARMS)


def _clock(when) -> str:
    """An event's time of day; now for none or one that is no time (a host's ``"soon"``, NaN)."""
    when = number(when)
    try:
        return dt.datetime.fromtimestamp(when if math.isfinite(when) else time.time()).strftime("%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return dt.datetime.now().strftime("%H:%M:%S")


def marked(stream: str, lines: list[str]) -> list[str]:
    """A task's ``lines`` on ``stream`` as the log view shows them: stdout's as they are, stderr's marked, each
    cut at ``LOG_WIDTH``."""
    mark = "" if stream == STDOUT else f"[{stream.removesuffix('.log')}] "
    return [mark + (line if len(line) <= LOG_WIDTH else f"{line[:LOG_WIDTH]}… ({len(line) - LOG_WIDTH} more "
                    "characters)") for line in lines]


def log_lines(stream: str, text: str) -> list[str]:
    """``text`` a task wrote on ``stream`` (whole: a log read from its file) as the log view's lines, as a
    terminal shows them (``console.terminal``: a progress bar is its last state)."""
    return marked(stream, shown_lines(text))


# What TensorFlow and CUDA say as every process starts, whatever the run does: hidden unless asked for (a healthy
# run's log tail was nothing else). Matched at a line's start, after tfcc's "[stderr] " mark.
NOISE = re.compile(
    r"^(\[stderr\] )?("
    r"[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.]+:\d+\]"  # absl info and warnings (E, an error, stays shown)
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] (tensorflow|external|xla)/"  # TensorFlow's older C++ lines
    r"|WARNING: All log messages before absl::InitializeLog"
    r"|To enable the following instructions:|This TensorFlow binary is optimized)")


def is_noise(line: str) -> bool:
    """Whether ``line`` (as ``log_lines`` gives it) is start-up noise of TensorFlow or CUDA."""
    return bool(NOISE.match(line))


class LogTails:
    """What tasks wrote that the window has not shown yet: each task's newest ``LOG_PER_TAKE`` lines, and how many
    older ones went unshown (a person reads no faster; ``tfcc logs`` has every line), and the line each is
    writing now (a progress bar: its newest state only). Filled on the session's thread, taken on the window's at
    its pace: a task that writes faster than a text view can show costs a tail, not a queue of every message
    (thread-safe). Each task's streams are read as a terminal shows them (``console.terminal``)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._terminals: dict[tuple[str, str], Terminal] = {}  # (task, stream): fed on the session's thread only
        self._tails: dict[str, collections.deque] = {}
        self._dropped: dict[str, int] = {}
        self._open: dict[str, str] = {}  # task -> the line it is writing now ("": none), since the last take
        # task -> each stream's open line, the one changed last at the end (session's thread only)
        self._opens: dict[str, dict[str, str]] = {}

    def add(self, task: str, stream: str, text: str) -> bool:
        """Keep ``text``'s lines; whether the window must be told (nothing was waiting before)."""
        terminal = self._terminals.get((task, stream))
        if terminal is None:
            terminal = self._terminals[(task, stream)] = Terminal()
        opens = self._opens.setdefault(task, {})
        was = opens.get(stream, "")
        lines = marked(stream, terminal.feed(text))
        now = marked(stream, [terminal.open])[0] if terminal.open else ""
        if now != was:  # the stream whose line changed last is the one a terminal would show being written
            opens.pop(stream, None)
            opens[stream] = now
        elif not lines:
            return False
        shown = next((line for line in reversed(opens.values()) if line), "")
        with self._lock:
            told = bool(self._tails) or bool(self._open)
            tail = self._tails.setdefault(task, collections.deque(maxlen=LOG_PER_TAKE))
            over = len(tail) + len(lines) - LOG_PER_TAKE
            if over > 0:
                self._dropped[task] = self._dropped.get(task, 0) + over
            tail.extend(lines)
            self._open[task] = shown
        return not told

    def take(self) -> list[tuple[str, list[str], int, str]]:
        """Each task's waiting lines, how many went unshown before them, and the line it is writing now ("":
        none); nothing waits after."""
        with self._lock:
            taken = [(task, list(self._tails.get(task, ())), self._dropped.pop(task, 0), self._open.get(task, ""))
                     for task in dict.fromkeys([*self._tails, *self._open])]
            self._tails.clear()
            self._open.clear()
        return taken


class EventsView(QTabWidget):
    """The *Events* tab (``events``) and the *Logs* tab (``logs``: ``log_views`` by task)."""

    whole_log_asked = Signal(str)  # the person wants a task's whole log (its own window): the task
    wide_toggled = Signal(bool)    # the person wants the events and logs as wide as the Dashboard (or not)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.events = QListWidget()
        self.events.setWordWrap(True)
        self.events.setLayoutMode(QListView.Batched)  # a long list is laid out a part at a time, not at once
        self.events.setBatchSize(100)
        self.logs = QTabWidget()
        self.log_views: dict[str, QPlainTextEdit] = {}
        self._log_lines: dict[str, collections.deque] = {}  # each task's lines, noise too (the filter may change)
        self._received: dict[str, int] = {}  # each task's lines received so far (only grows, unlike the tail kept)
        self._open_lines: dict[str, str] = {}  # each task's line being written (a progress bar), "" for none
        self._open_shown: set[str] = set()     # tasks whose view ends with that line (replaced as it changes)
        self.log_search = QLineEdit()
        self.log_search.setPlaceholderText("Find in this log (Enter: next)")
        self.log_search.setClearButtonEnabled(True)
        self.log_search.returnPressed.connect(self._on_log_search_return_pressed)
        self.hide_noise = QCheckBox("hide noise")
        self.hide_noise.setToolTip("Hide what TensorFlow and CUDA say as every process starts (oneDNN, cuDNN, "
                                   "CPU instructions): the lines tfcc logs keeps whole")
        self.hide_noise.setChecked(True)
        self.hide_noise.toggled.connect(self._on_hide_noise_toggled)
        self.wide_button = QToolButton()
        self.wide_button.setText("Wide")
        self.wide_button.setCheckable(True)
        self.wide_button.setToolTip("The events and logs as wide as the Dashboard (the plots hide till "
                                    "pressed again)")
        self.wide_button.toggled.connect(self.wide_toggled)
        self.whole_button = QToolButton()
        self.whole_button.setText("Whole log…")
        self.whole_button.setToolTip("This task's whole log in a window of its own, with find and Save")
        self.whole_button.clicked.connect(self._on_whole_button_clicked)
        logs_page = QWidget()
        logs_layout = QVBoxLayout(logs_page)
        logs_layout.setContentsMargins(0, 2, 0, 0)
        tools = QHBoxLayout()
        tools.addWidget(self.log_search, 1)
        tools.addWidget(self.hide_noise)
        tools.addWidget(self.whole_button)
        tools.addWidget(self.wide_button)
        logs_layout.addLayout(tools)
        logs_layout.addWidget(self.logs, 1)
        self.addTab(self.events, "Events")
        self.addTab(logs_page, "Logs")
        self._seen = 0  # the store's events listed so far

    def clear_run(self) -> None:
        """A new run: no events, no logs."""
        self.events.clear()
        self.logs.clear()
        self.log_views.clear()
        self._log_lines.clear()
        self._received.clear()
        self._open_lines.clear()
        self._open_shown.clear()
        self._seen = 0

    def show_store(self, store: MetricsStore) -> None:
        """The events ``store`` has that are not listed yet, at the bottom: at most ``PER_TICK`` a refresh (a
        line says how many more came meanwhile), the newest ``MAX_SHOWN`` kept. A host that floods events
        costs the window no more than a busy run."""
        events, total = store.events_since(self._seen)
        if total == self._seen:
            return
        missed = total - self._seen - min(len(events), PER_TICK)
        self._seen = total
        if missed > 0:
            item = QListWidgetItem(f"… {missed} more event{'s' * (missed != 1)} meanwhile, not listed "
                                   "(the newest are; the tasks' metrics files have them all)")
            item.setForeground(Qt.gray)
            self.events.addItem(item)
        for e in events[-PER_TICK:]:
            item = QListWidgetItem(f"{_clock(e.get('time'))}  {e.get('task')}: {event_line(e)}")
            if e.get("event") in ALARMS:
                item.setForeground(Qt.red)
            self.events.addItem(item)
        over = self.events.count() - MAX_SHOWN
        if over > 0:
            self.events.model().removeRows(0, over)  # at once: one by one is a shift of the whole list each
        self.events.scrollToBottom()

    def append_log(self, task: str, stream: str, text: str) -> None:
        """``text`` a task wrote on ``stream`` (agent.protocol's: stdout as it is, stderr's lines marked)."""
        self.append_lines(task, log_lines(stream, text))

    def append_lines(self, task: str, lines: list[str], dropped: int = 0, open_line: str | None = None) -> None:
        """A task's log lines (``log_lines``'), after ``dropped`` that were never shown (a line says so).
        ``open_line``: the line the task is writing now ("": none; None: as it was), shown last and replaced as
        it changes (a progress bar updates in place, as in a terminal)."""
        if dropped:
            lines = [f"… {dropped} line{'s' * (dropped != 1)} not shown (tfcc logs has them)"] + lines
        view = self._log_view(task)
        self._log_lines[task].extend(lines)
        self._received[task] = self._received.get(task, 0) + len(lines)
        if open_line is not None:
            self._open_lines[task] = open_line
        self._take_open_line(task, view)
        shown = self._shown(lines)
        if shown:  # one append: a chatty task costs one layout, not one per line
            view.appendPlainText("\n".join(shown))
        self._put_open_line(task, view)

    def _shown(self, lines) -> list[str]:
        return [line for line in lines if not is_noise(line)] if self.hide_noise.isChecked() else list(lines)

    def _take_open_line(self, task: str, view: QPlainTextEdit) -> None:
        """The open line shown last goes (what comes next is after it, or replaces it)."""
        if task not in self._open_shown:
            return
        self._open_shown.discard(task)
        cursor = QTextCursor(view.document())
        cursor.movePosition(QTextCursor.End)
        cursor.select(QTextCursor.BlockUnderCursor)  # with the line break before it
        cursor.removeSelectedText()

    def _put_open_line(self, task: str, view: QPlainTextEdit) -> None:
        shown = self._shown([self._open_lines.get(task, "")] if self._open_lines.get(task) else [])
        if shown:
            view.appendPlainText(shown[0])
            self._open_shown.add(task)

    def _on_hide_noise_toggled(self, _checked: bool) -> None:
        for task, view in self.log_views.items():
            view.setPlainText("\n".join(self._shown(self._log_lines[task])))
            self._open_shown.discard(task)
            self._put_open_line(task, view)

    def _on_log_search_return_pressed(self) -> None:
        """The next place of the search text in the log shown (from the top again after the last)."""
        view, words = self.logs.currentWidget(), self.log_search.text()
        if not isinstance(view, QPlainTextEdit) or not words:
            return
        if not view.find(words):
            cursor = view.textCursor()
            cursor.movePosition(cursor.MoveOperation.Start)
            view.setTextCursor(cursor)
            view.find(words)

    def _on_whole_button_clicked(self) -> None:
        task = self.shown_task()
        if task:
            self.whole_log_asked.emit(task)

    def shown_task(self) -> str:
        """The task whose log tab is in front ("" : none)."""
        view = self.logs.currentWidget()
        return next((task for task, v in self.log_views.items() if v is view), "")

    def show_log(self, task: str) -> None:
        """``task``'s log in front (the Logs tab, its own tab)."""
        self.setCurrentIndex(1)
        view = self.log_views.get(task)
        if view is not None:
            self.logs.setCurrentWidget(view)

    def log_count(self, task: str) -> int:
        """Lines of ``task`` received so far (noise too; it only grows), and whether it writes one now."""
        return 2 * self._received.get(task, 0) + bool(self._open_lines.get(task))

    def stderr_text(self, task: str) -> str:
        """What ``task`` wrote on stderr, as kept (its newest ``LOG_LINES``), without the view's mark."""
        mark = f"[{STDERR.removesuffix('.log')}] "
        return "\n".join(line[len(mark):] for line in self._log_lines.get(task, ()) if line.startswith(mark))

    def _log_view(self, task: str) -> QPlainTextEdit:
        view = self.log_views.get(task)
        if view is None:
            view = QPlainTextEdit()
            view.setReadOnly(True)
            view.setMaximumBlockCount(LOG_LINES)
            view.setFont(QFont("monospace", 8))
            self.log_views[task] = view
            self._log_lines[task] = collections.deque(maxlen=LOG_LINES)
            self.logs.addTab(view, task)
        return view
