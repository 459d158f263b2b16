"""Above the plots when a run failed: which task, where in the user's code, what it raised, and what to do.

The traceback is a click away, the frames of Python, TensorFlow, Keras and tfcc folded (``diagnosis.code_error``);
every line is cut to the width it is given (its tooltip has it whole), so a long failure never widens the window.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QFrame, QHBoxLayout, QPlainTextEdit,
                               QPushButton, QVBoxLayout)

from console.diagnosis import CodeError
from console.gui.elided import ElidedLabel

CODE_BUG_NEXT = "Fix it in {file}, then Run ▸ Deploy & Start (F5): a restart or Resume would fail the same way."


def failure_words(task: str, words: str) -> tuple[str, str]:
    """Supervision's words of a failed task (``worker-0 on host: cause; fix``) as (cause, next step)."""
    cause = words.split(": ", 1)[1] if words.startswith(f"{task} ") and ": " in words else words
    cause, _, fix = cause.partition("; ")
    return cause, fix


class TracebackDialog(QDialog):
    """A task's last traceback: the user's frames, the others folded (a box shows them all)."""

    def __init__(self, task: str, error: CodeError, whole: str, parent=None):
        super().__init__(parent)
        self.setWindowTitle(f"{task}: {error.exception}"[:120])
        self.resize(900, 520)
        self.folded, self.whole = error.traceback, whole
        self.text = QPlainTextEdit(self.folded)
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.text.setFont(QFont("monospace", 9))
        self.every_frame = QCheckBox("show every frame (Python's, TensorFlow's, Keras's, tfcc's)")
        self.every_frame.toggled.connect(self._on_every_frame_toggled)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text, 1)
        row = QHBoxLayout()
        row.addWidget(self.every_frame)
        row.addStretch(1)
        row.addWidget(buttons)
        layout.addLayout(row)

    def _on_every_frame_toggled(self, checked: bool) -> None:
        self.text.setPlainText(self.whole if checked else self.folded)


class FailureView(QFrame):
    """The failed task, the user's file:line and its code, the exception, the next step; Traceback… and Log."""

    log_asked = Signal(str)  # the person wants the failed task's log: its name

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setFrameShape(QFrame.StyledPanel)
        self.setStyleSheet("FailureView { background: #fdecee; border: 1px solid #e0a0a8 }")
        self.task = ""
        self.error: CodeError | None = None
        self._whole = ""
        self._dialog: TracebackDialog | None = None
        self.title = ElidedLabel()
        self.title.setStyleSheet("color: #b00020; font-weight: bold")
        self.where = ElidedLabel()
        self.where.setFont(QFont("monospace", 10))
        self.exception = ElidedLabel()
        self.exception.setStyleSheet("color: #7a0016")
        self.next_step = ElidedLabel()
        self.traceback_button = QPushButton("Traceback…")
        self.traceback_button.setToolTip("The task's last traceback: your frames, the others folded")
        self.traceback_button.clicked.connect(self._on_traceback_button_clicked)
        self.log_button = QPushButton("Log")
        self.log_button.setToolTip("The failed task's log, beside the plots")
        self.log_button.clicked.connect(self._on_log_button_clicked)
        lines = QVBoxLayout()
        lines.setSpacing(1)
        for label in (self.title, self.where, self.exception, self.next_step):
            lines.addWidget(label)
        buttons = QVBoxLayout()
        buttons.addWidget(self.traceback_button)
        buttons.addWidget(self.log_button)
        buttons.addStretch(1)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.addLayout(lines, 1)
        layout.addLayout(buttons)
        self.hide()

    def show_failure(self, task: str, words: str, error: CodeError | None, whole_traceback: str = "") -> None:
        """``task`` failed: supervision's ``words`` of it, and where in the user's code (None: not in it)."""
        self.task, self.error, self._whole = task, error, whole_traceback
        cause, fix = failure_words(task, words)
        if error is not None:
            self.title.setText(f"{task} failed: an error in your code")
            self.where.setText(f"{error.where}   {error.code}" if error.code else error.where)
            self.exception.setText(error.exception)
            self.next_step.setText(CODE_BUG_NEXT.format(file=error.file))
        else:
            self.title.setText(f"{task} failed")
            self.where.setText(cause)
            self.exception.setText("")
            self.next_step.setText(fix[:1].upper() + fix[1:] if fix else "")
        self.where.setVisible(bool(self.where.text()))
        self.exception.setVisible(bool(self.exception.text()))
        self.next_step.setVisible(bool(self.next_step.text()))
        self.traceback_button.setEnabled(error is not None)
        self.show()

    def clear(self) -> None:
        self.task, self.error, self._whole = "", None, ""
        self.hide()

    def _on_traceback_button_clicked(self) -> None:
        if self.error is None:
            return
        self._dialog = TracebackDialog(self.task, self.error, self._whole or self.error.traceback, self)
        self._dialog.setAttribute(Qt.WA_DeleteOnClose)
        self._dialog.show()

    def _on_log_button_clicked(self) -> None:
        if self.task:
            self.log_asked.emit(self.task)
