"""A task's whole log in a window of its own: as a terminal shows it, with find and Save.

Read from the task's host on a thread (``RunControl`` asks, ``show_logs`` fills it); saved on a thread too: the
window never waits on the network or the disk.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtGui import QFont, QKeySequence, QShortcut
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton,
                               QVBoxLayout, QWidget)

from console.errors import describe
from console.terminal import shown_lines
from console.files import write_atomically

log = logging.getLogger("console.gui")

WHOLE_LOG_BYTES = 3 << 20  # of each stream: one agent message carries both (console.remote.channel.MAX_MESSAGE)


class LogWindow(QWidget):
    """The whole log of ``task`` of run ``run_id`` (stdout, then stderr), find (Ctrl+F, Enter: next) and Save…."""

    saved = Signal(str)  # what became of a save, in words (from a thread)

    def __init__(self, run_id: str, task: str, parent=None):
        super().__init__(parent)
        self.setWindowTitle(f"{task} of run {run_id}: its log")
        self.run_id, self.task = run_id, task
        self.resize(1000, 640)
        self.text = QPlainTextEdit(f"Reading the log of {task} from its host…")
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.text.setFont(QFont("monospace", 9))
        self.find_box = QLineEdit()
        self.find_box.setPlaceholderText("Find (Enter: next)")
        self.find_box.setClearButtonEnabled(True)
        self.find_box.returnPressed.connect(self._on_find_box_return_pressed)
        QShortcut(QKeySequence.Find, self, activated=self.find_box.setFocus)
        self.save_button = QPushButton("Save…")
        self.save_button.setEnabled(False)
        self.save_button.clicked.connect(self._on_save_button_clicked)
        self.status = QLabel("")
        self.saved.connect(self.status.setText)
        tools = QHBoxLayout()
        tools.addWidget(self.find_box, 1)
        tools.addWidget(self.save_button)
        layout = QVBoxLayout(self)
        layout.addLayout(tools)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.status)

    def show_logs(self, said: list) -> None:
        """[(stream, text)] as the agent read them (a stream "" : a line of tfcc's, e.g. why it could not be read)."""
        parts = []
        for stream, words in said:
            if not stream:
                parts.append(words)
                continue
            cut = len(words.encode("utf-8", "replace")) >= WHOLE_LOG_BYTES
            head = f"==> {stream} <=="
            if cut:
                head += (f" (its newest {WHOLE_LOG_BYTES >> 20} MB; tfcc logs {self.run_id} {self.task} --bytes "
                         "N prints more)")
            parts.append("\n".join([head, *shown_lines(words)]))
        self.text.setPlainText("\n\n".join(parts))
        self.save_button.setEnabled(any(stream for stream, _ in said))

    def _on_find_box_return_pressed(self) -> None:
        words = self.find_box.text()
        if words and not self.text.find(words):
            cursor = self.text.textCursor()
            cursor.movePosition(cursor.MoveOperation.Start)
            self.text.setTextCursor(cursor)
            self.text.find(words)

    def _on_save_button_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the log", str(Path.cwd() / f"{self.task}.log"),
                                              "Logs (*.log *.txt);;All files (*)")
        if path:
            self.save_to(path)

    def save_to(self, path) -> threading.Thread:
        """Write what the window shows to ``path`` (on a thread; ``saved`` says how it went)."""
        content = self.text.toPlainText() + "\n"

        def write():
            try:
                write_atomically(Path(path), content)
            except Exception as exc:  # noqa: BLE001 - said in the window; the log has the traceback
                log.exception("saving a log")
                self.saved.emit(f"Not saved: {describe(exc)}")
                return
            self.saved.emit(f"Saved to {path}")

        thread = threading.Thread(target=write, name="tfcc-gui-save-log", daemon=True)
        thread.start()
        return thread
