""""Why is it slow?" in the window: a stacked bar per worker (where its step time goes), the verdict's lines, the
run's scaling efficiency, and each measurement's parts over the steps (console.speed; docs/why-slow.md)."""

from __future__ import annotations

import html

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QScrollArea, QVBoxLayout, QWidget

from console import speed
from console.gui.colors import STEP_PARTS, worker_color

HINT = ("Where each worker's step time goes: input, compute, all-reduce, waiting for a slower peer. Every worker "
        f"pauses a few seconds at the same step to measure; the verdict comes {speed.ANSWER_WORDS}.")
BAR_PX = 26       # a worker's row in the bars
BAR_AXIS_PX = 72  # the bars' axis, its label and margins: the label under the ticks, never over what follows
KIND_WORDS = {speed.INPUT_BOUND: "input-bound", speed.STRAGGLER: "a straggler",
              speed.COMMUNICATION_BOUND: "communication-bound", speed.HEALTHY: "healthy",
              speed.UNMEASURED: "not measured"}


class SpeedView(QWidget):
    """The newest breakdown of the run followed, and the earlier ones over its steps. ``asked``: the person pressed
    Why slow? (the run control asks the session, off this thread)."""

    asked = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.bars: dict[str, dict[str, float]] = {}  # task -> part -> share of its step (the newest breakdown)
        self.findings: list[str] = []
        self.scaling = ""
        self.history: list[tuple[int, dict[str, float]]] = []  # (step measured at, task -> share spent waiting)
        self.order: list[str] = []  # the run's tasks in cluster order (their colours)
        self.button = QPushButton("Why slow?")
        self.button.setToolTip(HINT)
        self.button.setEnabled(False)
        self.button.clicked.connect(self._on_button_clicked)
        self.status = QLabel("Ask while the run trains.")
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.RichText)
        top = self._top = QHBoxLayout()
        top.addWidget(self.button)
        top.addWidget(self.status, 1)
        self.bar_plot = pg.PlotWidget(background="w")
        self.bar_plot.setMouseEnabled(False, False)
        self.bar_plot.hideButtons()
        self.bar_plot.setXRange(0, 100, padding=0.02)
        self.bar_plot.getAxis("bottom").setLabel("% of the step")
        self.bar_plot.setMinimumHeight(90)
        self.bar_plot.hide()  # until a breakdown comes: no empty axes
        self.bar_plot.getPlotItem().invertY(True)  # the first worker on top, as everywhere else
        self.bar_plot.getAxis("left").setWidth(64)
        self.legend = QLabel(" ".join(f'<span style="color:{STEP_PARTS[p]}">■</span> {speed.PART_WORDS[p]}'
                                      for p in speed.PARTS))
        self.legend.setWordWrap(True)
        self.verdict = QLabel(HINT)
        self.verdict.setWordWrap(True)
        self.verdict.setTextFormat(Qt.RichText)
        self.verdict.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.verdict.setAlignment(Qt.AlignTop | Qt.AlignLeft)
        self.history_plot = pg.PlotWidget(background="w")
        self.history_plot.setMouseEnabled(False, False)
        self.history_plot.hideButtons()
        self.history_plot.setYRange(0, 100, padding=0.02)
        self.history_plot.getAxis("left").setLabel("% waiting")
        self.history_plot.getAxis("bottom").setLabel("step measured at")
        self.history_plot.setFixedHeight(110)
        self.history_plot.hide()
        # Everything in one area that scrolls: a long verdict, or a panel shorter than the bars, is never cut nor
        # drawn over (a layout squeezed below its content overlaps its parts).
        content = QWidget()
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.scroll.setWidget(content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.scroll)
        layout = QVBoxLayout(content)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(QLabel("<b>Why slow?</b>"))
        layout.addLayout(top)
        layout.addWidget(self.bar_plot)
        layout.addWidget(self.legend)
        layout.addWidget(self.verdict, 1)  # the verdict first: the bars are as tall as their workers need
        layout.addWidget(self.history_plot)

    # ------------------------------------------------------------------ what the run control says

    def set_available(self, available: bool) -> None:
        """Whether a run is followed that may be asked (it trains, or will)."""
        self.button.setEnabled(available)

    def add_beside(self, button: QWidget) -> None:
        """Another ask of the run (Where are they?) beside Why slow?."""
        self._top.insertWidget(1, button)

    def clear(self, order: list[str] | None = None) -> None:
        """A new run (its tasks in cluster order): nothing measured yet."""
        self.order = list(order or [])
        self.bars, self.findings, self.scaling, self.history = {}, [], "", []
        self.bar_plot.clear()
        self.bar_plot.hide()
        self.history_plot.clear()
        self.history_plot.hide()
        self.verdict.setText(HINT)
        self.status.setText("Ask while the run trains.")

    def measuring(self) -> None:
        self.button.setEnabled(False)
        self.status.setText("Measuring: every worker pauses a few seconds at the same step…")

    def refused(self, words: str) -> None:
        self.button.setEnabled(True)
        self.status.setText(html.escape(words))

    def show_verdict(self, verdict: dict) -> None:
        """A breakdown came (console.speed.Verdict.as_dict())."""
        self.button.setEnabled(True)
        workers = [w for w in verdict.get("workers", []) if isinstance(w, dict) and w.get("step")]
        self.bars = {w["task"]: {p: 100.0 * (w.get(p) or 0.0) / w["step"] for p in speed.PARTS} for w in workers}
        self.findings = [str(f) for f in verdict.get("findings", [])]
        self.scaling = ""
        if verdict.get("speedup") is not None and verdict.get("efficiency") is not None and len(workers) > 1:
            self.scaling = speed.scaling_text(verdict["speedup"], len(workers), verdict["efficiency"])
        kind = speed.KIND_WORDS.get(verdict.get("kind"), str(verdict.get("kind")))
        took = verdict.get("took")
        self.status.setText(f"<b>{html.escape(kind)}</b>" + (f" — measured at step {verdict.get('at_step')}"
                            if verdict.get("at_step") is not None else "")
                            + (f", {took:.0f} s after asking" if isinstance(took, (int, float)) else ""))
        lines = [html.escape(line) for line in self.findings]
        if self.scaling:
            lines.append(f"<b>{html.escape(self.scaling)}</b>")
        self.verdict.setText("<br>".join(f"• {line}" for line in lines))
        if self.bars:  # each worker's share spent waiting (input, all-reduce, slower peers), at the step measured
            step = int(verdict.get("at_step") or 0)
            self.history.append((step, {t: sum(b[p] for p in speed.WAITING) for t, b in self.bars.items()}))
        self._draw()

    # ------------------------------------------------------------------ drawing

    def _draw(self) -> None:
        plot = self.bar_plot
        plot.clear()
        plot.setVisible(bool(self.bars))
        tasks = list(self.bars)
        left = [0.0] * len(tasks)
        for part in speed.PARTS:
            widths = [self.bars[t][part] for t in tasks]
            colour = QColor(STEP_PARTS[part])
            plot.addItem(pg.BarGraphItem(x0=left, y=list(range(len(tasks))), height=0.6, width=widths,
                                         brush=colour, pen=pg.mkPen(colour.darker(130))))
            left = [a + b for a, b in zip(left, widths)]
        plot.getAxis("left").setTicks([[(i, t) for i, t in enumerate(tasks)]])
        plot.setYRange(-0.6, max(0.6, len(tasks) - 0.4), padding=0)
        plot.setFixedHeight(BAR_AXIS_PX + BAR_PX * max(1, len(tasks)))
        self.history_plot.clear()
        if len(self.history) > 1:
            self.history_plot.show()
            for task in dict.fromkeys(t for _, shares in self.history for t in shares):
                points = [(step, shares[task]) for step, shares in self.history if task in shares]
                colour = worker_color(self.order.index(task) if task in self.order else len(self.order))
                self.history_plot.plot([p[0] for p in points], [p[1] for p in points], symbol="o", symbolSize=5,
                                       pen=pg.mkPen(colour, width=2), symbolBrush=colour, name=task)

    def _on_button_clicked(self) -> None:
        self.measuring()
        self.asked.emit()
