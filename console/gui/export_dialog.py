"""File → Export cluster as…: a format, its options, a folder, and a preview of every file it writes."""

from __future__ import annotations

import copy
import html
import logging
import threading
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFileDialog,
                               QHBoxLayout, QLabel, QLineEdit, QListWidget, QPlainTextEdit, QPushButton,
                               QSpinBox, QSplitter, QVBoxLayout, QWidget)

from console import cluster as cl
from console import export
from console.gui.dialogs import form_of

log = logging.getLogger("console.gui")


class _Rendered(QObject):
    """A render's thread says its result through this (no parent: a dialog closed meanwhile is disconnected)."""

    finished = Signal(int, object, object)  # the render's number, its Export, its ExportError


class ExportDialog(QDialog):
    """Choose how to export ``cluster``; the preview shows what ``export.render`` makes of it as
    the choices change. Accepted, ``chosen()`` has what to write and where (the caller writes it,
    off the UI thread).

    A render reads the user's code from disk: it runs on a thread of its own, once typing pauses
    (``RENDER_DELAY_MS``); a render that a newer choice overtook is dropped. Export waits for the
    preview of the choices shown. One render runs at a time: choices made meanwhile are rendered
    when it ends (a big code folder is read once, not once a pause)."""

    OPTIONS_OF = {"scripts": (), "slurm": ("time_limit", "port_base", "name"), "tfjob": ("image", "name"),
                  "trainjob": ("image", "name")}
    RENDER_DELAY_MS = 250

    rendered = Signal()  # the preview shows the choices made (or why they cannot be exported)

    def __init__(self, cluster: cl.Cluster, folder: Path, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Export cluster as")
        self.resize(900, 600)
        self.cluster = copy.deepcopy(cluster)  # as it was when asked: the window may change its own meanwhile
        self.current: export.Export | None = None
        self._asked = 0      # the newest render asked for
        self._shown = 0      # the newest render shown
        self._in_flight = False  # a render's thread runs
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(self.RENDER_DELAY_MS)
        self._render_timer.timeout.connect(self._on_render_timer_timeout)

        self.format = QComboBox()
        for fmt in export.FORMATS:
            self.format.addItem(export.FORMAT_LABELS[fmt], fmt)
        defaults = export.Options()
        self.image = QLineEdit(defaults.image)
        self.image.setPlaceholderText("registry/image:tag with TensorFlow, tf-keras and tfcc's trainer")
        self.time_limit = QLineEdit(defaults.time_limit)
        self.port_base = QSpinBox()
        self.port_base.setRange(1024, 65000)
        self.port_base.setValue(defaults.port_base)
        self.name = QLineEdit(defaults.name)
        self.folder = QLineEdit(str(folder))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._on_browse_clicked)
        self.force = QCheckBox("replace what the folder holds")
        where = QHBoxLayout()
        where.addWidget(self.folder, 1)
        where.addWidget(browse)

        self._rows = {"image": self.image, "time_limit": self.time_limit, "port_base": self.port_base,
                      "name": self.name}
        form = form_of(("Format", self.format), ("Image", self.image), ("Time limit", self.time_limit),
                       ("Port base", self.port_base), ("Name", self.name), ("Folder", where), ("", self.force))
        self._form = form

        self.files = QListWidget()
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.text.setFont(QFont("monospace"))
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.files)
        split.addWidget(self.text)
        split.setSizes([180, 720])
        self.notes = QLabel()
        self.notes.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.Cancel)
        self.btn_export = self.buttons.addButton("Export", QDialogButtonBox.AcceptRole)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(split, 1)
        layout.addWidget(self.notes)
        layout.addWidget(self.buttons)

        self.format.currentIndexChanged.connect(self._on_choice_changed)
        for field in (self.image, self.time_limit, self.name, self.folder):  # the folder: its files are no code's
            field.textChanged.connect(self._on_choice_changed)
        self.port_base.valueChanged.connect(self._on_choice_changed)
        self.files.currentRowChanged.connect(self._on_files_current_row_changed)
        self._on_choice_changed()
        self._render_timer.stop()
        self._on_render_timer_timeout()  # the first preview at once

    def options(self) -> export.Options:
        return export.Options(image=self.image.text().strip(), time_limit=self.time_limit.text().strip(),
                              port_base=self.port_base.value(), name=self.name.text().strip() or "tfcc",
                              into=Path(self.folder.text()).expanduser() if self.folder.text().strip() else None)

    def chosen(self) -> tuple[export.Export, Path, bool]:
        """What to write, where, and whether to replace what is there."""
        return self.current, Path(self.folder.text()).expanduser(), self.force.isChecked()

    @property
    def rendering(self) -> bool:
        """A preview of newer choices is on its way."""
        return self._render_timer.isActive() or self._in_flight or self._shown != self._asked

    def _on_choice_changed(self, *_) -> None:
        fmt = self.format.currentData()
        for key, widget in self._rows.items():
            shown = key in self.OPTIONS_OF[fmt]
            self._form.setRowVisible(widget, shown)  # the row, label and spacing too
        self.btn_export.setEnabled(False)  # until the preview shows these choices
        self._render_timer.start()

    def _on_render_timer_timeout(self) -> None:
        self._asked += 1
        if self._in_flight:
            return  # rendered once the running one ends
        self._start_render()

    def _start_render(self) -> None:
        self._in_flight = True
        said = self._said = _Rendered()  # held here too: dropped on this thread, not the render's
        said.finished.connect(self._on_render_finished)
        threading.Thread(target=self._render, args=(said, self._asked, self.format.currentData(), self.options()),
                         name="tfcc-gui-export-render", daemon=True).start()

    def _render(self, said: _Rendered, number: int, fmt: str, options: export.Options) -> None:
        """On the render's thread: the export of ``fmt``, or why not."""
        rendered, error = None, None
        try:
            rendered = export.render(fmt, self.cluster, options)
        except export.ExportError as exc:
            error = exc
        except Exception as exc:  # a bug: said in one line, the traceback in the log
            log.exception("rendering the export's preview failed")
            error = export.ExportError(f"the preview failed ({exc})", "see the log file")
        said.finished.emit(number, rendered, error)

    def _on_render_finished(self, number: int, rendered: export.Export | None, error) -> None:
        self._in_flight = False
        if number < self._asked:  # newer choices were made meanwhile: rendered now (unless typing goes on)
            if not self._render_timer.isActive():
                self._start_render()
            return
        self._shown = number
        self.current = rendered
        if rendered is None:
            self.files.clear()
            self.text.setPlainText("")
            self.notes.setText(f"<span style='color:#b00020'>{html.escape(str(error))}</span>")
            self.btn_export.setEnabled(False)
            self.rendered.emit()
            return
        shown_name = self.files.currentItem().text() if self.files.currentItem() else None
        self.files.blockSignals(True)
        self.files.clear()
        self.files.addItems(rendered.names)
        self.files.blockSignals(False)
        names = rendered.names
        self.files.setCurrentRow(names.index(shown_name) if shown_name in names else 0)
        self.notes.setText("<br>".join(map(html.escape, rendered.notes)))
        self.btn_export.setEnabled(not self._render_timer.isActive())
        self.rendered.emit()

    def _on_files_current_row_changed(self, row: int) -> None:
        if self.current is None or row < 0:
            return
        name = self.files.item(row).text()
        copied = self.current.copies.get(name)
        self.text.setPlainText(self.current.files[name] if copied is None else
                               f"{name}: a copy of {copied} (your code, written as it is)")

    def _on_browse_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Export into", self.folder.text())
        if folder:
            self.folder.setText(folder)
