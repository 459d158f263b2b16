"""Beside the plots: the run's events as they come, alarms in red, and each task's log tail.

The events are what the tasks and the console said of the run (console.text words them); the logs are a tab
per task.
"""

from __future__ import annotations

import datetime as dt
import time

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QListWidget, QListWidgetItem, QPlainTextEdit, QTabWidget

from agent.protocol import ERROR, FAILED, LOST, STDOUT
from console.states import RECONNECTING, SessionKind
from console.store.metrics import MetricsStore
from console.text import event_line

LOG_LINES = 2000  # per task's log tail
# Events shown in red: a task's bad end, a lost host, what supervision wants looked at.
ALARMS = (FAILED, ERROR, LOST, SessionKind.WATCHDOG, RECONNECTING, *SessionKind.ALARMS)


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
        """The events ``store`` has that are not listed yet, at the bottom."""
        events = store.events_snapshot()
        for e in events[self._seen:]:
            when = dt.datetime.fromtimestamp(e["time"] or time.time()).strftime("%H:%M:%S")
            item = QListWidgetItem(f"{when}  {e['task']}: {event_line(e)}")
            if e["event"] in ALARMS:
                item.setForeground(Qt.red)
            self.events.addItem(item)
        if len(events) > self._seen:
            self.events.scrollToBottom()
        self._seen = len(events)

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
