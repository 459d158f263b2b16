"""The Dashboard's header: the run shown in a line (name, state, how long it went, cluster, settings, final values)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QInputDialog, QLabel, QPushButton, QWidget

from console.store.metrics import MetricsStore
from console.text import duration_text, metric_text

DETACHED = "detached"  # a bar's word once the window stopped following its run


@dataclass
class RunHeader:
    """What the Dashboard's header says of the run it shows (besides what its store has: runtime, final values)."""

    run_id: str
    name: str = ""
    state: str = ""
    cluster: str = ""   # "2 workers on 2 hosts"
    settings: str = ""  # text.settings_text


class RunHeaderLine(QWidget):
    """The run shown, in a line, and a button to give it a name of the person's."""

    renamed = Signal(str, str)  # the person named the run shown: run id, name

    def __init__(self, parent=None):
        super().__init__(parent)
        self.run_header: RunHeader | None = None
        self.header = QLabel("No run yet: Deploy & Start begins one; the Runs tab opens an earlier one.")
        self.header.setTextFormat(Qt.RichText)
        self.header.setWordWrap(True)
        self.rename_button = QPushButton("Name…")
        self.rename_button.setToolTip("Give the run a name of yours (the Runs tab lists it; notes are written there)")
        self.rename_button.setEnabled(False)
        self.rename_button.clicked.connect(self._on_rename_button_clicked)
        header_row = QHBoxLayout(self)
        header_row.setContentsMargins(0, 0, 0, 0)
        header_row.addWidget(self.header, 1)
        header_row.addWidget(self.rename_button)

    def set_run(self, header: RunHeader | None) -> None:
        """The run shown (None: no run); ``show_run`` words it."""
        self.run_header = header
        self.rename_button.setEnabled(header is not None)

    def show_run(self, store: MetricsStore, detached: bool) -> None:
        """The line for the run shown, with what its store has (runtime, final values); ``detached``: its state is
        that this window follows it no more."""
        h = self.run_header
        if h is None:
            return
        final = store.final_metrics()
        runtime = store.runtime()
        parts = [f"<b>{html.escape(h.name)}</b> ({html.escape(h.run_id)})" if h.name else f"<b>{html.escape(h.run_id)}</b>",
                 f"<b>{html.escape(DETACHED if detached else h.state)}</b>",
                 duration_text(runtime) if runtime is not None else "", html.escape(h.cluster),
                 html.escape(h.settings),
                 ", ".join(f"{k} {metric_text(v)}" for k, v in final.items())]
        words = " · ".join(p for p in parts if p)
        if self.header.text() != words:
            self.header.setText(words)

    def _on_rename_button_clicked(self) -> None:
        h = self.run_header
        if h is None:
            return
        name, ok = QInputDialog.getText(self, "Name the run", f"A name for run {h.run_id} (empty: none):", text=h.name)
        if ok:
            h.name = name.strip()
            self.renamed.emit(h.run_id, h.name)
