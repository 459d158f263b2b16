"""A task's whole log in a window of its own: as a terminal shows it, with find and Save.

Read from the task's host on a thread (``RunControl`` asks, ``show_logs`` fills it); saved on a thread too: the
window never waits on the network or the disk.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtGui import QFont, QKeySequence, QShortcut
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton,
                               QVBoxLayout, QWidget)

from console.errors import describe
from console.terminal import shown_lines
from console.files import write_atomically

log = logging.getLogger("console.gui")

# Of each stream: one agent message carries both, JSON-escaped (a control character is 6 bytes there), within
# console.remote.channel.MAX_MESSAGE (8 MiB).
WHOLE_LOG_BYTES = 512 << 10


def shown_log(words: str, run_id: str, task: str) -> str:
    """A stream's text (its newest ``WHOLE_LOG_BYTES``) as a terminal shows it, said when its start is cut (on the
    reading thread: a long log's rendering never holds up the window)."""
    head = ""
    if len(words.encode("utf-8", "replace")) >= WHOLE_LOG_BYTES:
        head = (f"(its newest {WHOLE_LOG_BYTES >> 10} KB; tfcc logs {run_id} {task} --bytes N prints more)\n")
    return head + "\n".join(shown_lines(words))


class LogWindow(QWidget):
    """The whole log of ``task`` of run ``run_id`` (stdout, then stderr), find (Ctrl+F, Enter: next) and Save…."""

    saved = Signal(str)  # what became of a save, in words (from a thread)

    def __init__(self, run_id: str, task: str, threads, parent=None):
        super().__init__(parent)
        self.threads = threads
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
        self.text.setPlainText("\n\n".join(f"==> {stream} <==\n{words}" if stream else words
                                             for stream, words in said))
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

    def save_to(self, path):
        """Write what the window shows to ``path`` (on a thread; ``saved`` says how it went)."""
        content = self.text.toPlainText() + "\n"

        def write():
            try:
                write_atomically(Path(path), content)
                words = f"Saved to {path}"
            except Exception as exc:  # noqa: BLE001 - said in the window; the log has the traceback
                log.exception("saving a log")
                words = f"Not saved: {describe(exc)}"
            try:
                self.saved.emit(words)
            except RuntimeError:  # the window was closed meanwhile: nobody to tell
                log.info("%s (its window closed)", words)

        return self.threads.start("save-log", write)
