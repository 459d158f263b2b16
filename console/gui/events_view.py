"""Beside the plots: the run's events as they come, alarms in red, and each task's log tail.

The events are what the tasks and the console said of the run (console.text words them); the logs are a tab
per task.
"""

from __future__ import annotations

import datetime as dt
import math
import time

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QListWidget, QListWidgetItem, QPlainTextEdit, QTabWidget

from agent.protocol import ERROR, FAILED, LOST, STDOUT
from console.states import RECONNECTING, SessionKind
from console.store.metrics import MetricsStore
from console.text import event_line
from trainer.records import number

LOG_LINES = 2000  # per task's log tail
MAX_SHOWN = 5000  # events in the list
# Events shown in red: a task's bad end, a lost host, what supervision wants looked at.
ALARMS = (FAILED, ERROR, LOST, SessionKind.WATCHDOG, RECONNECTING, *SessionKind.ALARMS)


def _clock(when) -> str:
    """An event's time of day; now for none or one that is no time (a host's ``"soon"``, NaN)."""
    when = number(when)
    try:
        return dt.datetime.fromtimestamp(when if math.isfinite(when) else time.time()).strftime("%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return dt.datetime.now().strftime("%H:%M:%S")


class EventsView(QTabWidget):
    """The *Events* tab (``events``) and the *Logs* tab (``logs``: ``log_views`` by task)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.events = QListWidget()
        self.events.setWordWrap(True)
        self.logs = QTabWidget()
        self.log_views: dict[str, QPlainTextEdit] = {}
        self.addTab(self.events, "Events")
        self.addTab(self.logs, "Logs")
        self._seen = 0  # the store's events listed so far

    def clear_run(self) -> None:
        """A new run: no events, no logs."""
        self.events.clear()
        self.logs.clear()
        self.log_views.clear()
        self._seen = 0

    def show_store(self, store: MetricsStore) -> None:
        """The events ``store`` has that are not listed yet, at the bottom (the list keeps the newest
        ``MAX_SHOWN``: a host that floods events costs the window no more)."""
        events, total = store.events_since(self._seen)
        for e in events[-MAX_SHOWN:]:
            item = QListWidgetItem(f"{_clock(e.get('time'))}  {e.get('task')}: {event_line(e)}")
            if e.get("event") in ALARMS:
                item.setForeground(Qt.red)
            self.events.addItem(item)
        over = self.events.count() - MAX_SHOWN
        for _ in range(max(0, over)):
            self.events.takeItem(0)
        if events:
            self.events.scrollToBottom()
        self._seen = total

    def append_log(self, task: str, stream: str, text: str) -> None:
        """``text`` a task wrote on ``stream`` (agent.protocol's: stdout as it is, stderr's lines marked)."""
        lines = text.splitlines()
        if lines:  # one append per message: a chatty task costs one layout, not one per line
            mark = stream.removesuffix(".log")
            self._log_view(task).appendPlainText(
                "\n".join(lines) if stream == STDOUT else "\n".join(f"[{mark}] {line}" for line in lines))

    def _log_view(self, task: str) -> QPlainTextEdit:
        view = self.log_views.get(task)
        if view is None:
            view = QPlainTextEdit()
            view.setReadOnly(True)
            view.setMaximumBlockCount(LOG_LINES)
            view.setFont(QFont("monospace", 8))
            self.log_views[task] = view
            self.logs.addTab(view, task)
        return view
