"""The live dashboard: per-worker loss, step time and throughput, progress, stragglers, events, logs.

Curves are redrawn from the ``MetricsStore`` by a timer (at most 30 Hz) and only
when the store changed, never once per sample; each curve gets at most
``MAX_POINTS`` points (a min/max reduction that keeps spikes).
"""

from __future__ import annotations

import datetime as dt
import logging
import time

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QGridLayout, QLabel, QListWidget, QListWidgetItem, QPlainTextEdit, QProgressBar,
                               QSplitter, QTabWidget, QVBoxLayout, QWidget)

from console.gui.colors import worker_color
from console.metrics_store import LABELS, METRICS, MetricsStore

log = logging.getLogger("console.gui")
REFRESH_MS = 33          # at most 30 redraws a second
MAX_POINTS = 1500        # per curve and redraw
LOG_LINES = 2000         # per worker's log tail


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA …"
    seconds = int(seconds)
    return f"ETA {seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"ETA {seconds // 60}:{seconds % 60:02d}"


class Dashboard(QWidget):
    refreshed = Signal()  # after a redraw that changed something

    def __init__(self, store: MetricsStore | None = None, parent=None):
        super().__init__(parent)
        self.store = store or MetricsStore()
        self.order: list[str] = []          # task names in cluster order (colours follow it)
        self.curves: dict[tuple[str, str], pg.PlotDataItem] = {}
        self.plots: dict[str, pg.PlotItem] = {}
        self.redraws = 0
        self._seen_version = -1
        self._seen_events = 0

        self.plot_area = pg.GraphicsLayoutWidget()
        self.plot_area.setBackground("w")
        for row, metric in enumerate(METRICS):
            plot = self.plot_area.addPlot(row=row, col=0)
            plot.setLabel("left", LABELS[metric])
            plot.setLabel("bottom", "global step")
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.addLegend(offset=(-10, 10), labelTextSize="8pt")
            plot.setClipToView(True)
            plot.setDownsampling(auto=True, mode="peak")
            if row:
                plot.setXLink(self.plots[METRICS[0]])
            self.plots[metric] = plot

        self.progress_box = QWidget()
        self.progress_grid = QGridLayout(self.progress_box)
        self.progress_grid.setContentsMargins(4, 4, 4, 4)
        self.progress_bars: dict[str, QProgressBar] = {}
        self.straggler_labels: dict[str, QLabel] = {}

        self.events = QListWidget()
        self.events.setWordWrap(True)
        self.logs = QTabWidget()
        self.log_views: dict[str, QPlainTextEdit] = {}
        side = QTabWidget()
        side.addTab(self.events, "Events")
        side.addTab(self.logs, "Logs")
        self.side_tabs = side

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.progress_box)
        left_layout.addWidget(self.plot_area, 1)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(left)
        split.addWidget(side)
        split.setSizes([760, 340])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self._on_timer_timeout)
        self.timer.start()

    # ------------------------------------------------------------ inputs

    def set_store(self, store: MetricsStore, order: list[str]) -> None:
        """A new run: its store and its tasks in cluster order."""
        self.store = store
        self.order = list(order)
        for curve_key, curve in self.curves.items():
            self.plots[curve_key[1]].removeItem(curve)
        for plot in self.plots.values():
            if plot.legend is not None:
                plot.legend.clear()
        self.curves.clear()
        for widget in list(self.progress_bars.values()) + list(self.straggler_labels.values()):
            self.progress_grid.removeWidget(widget)
            widget.deleteLater()
        self.progress_bars.clear()
        self.straggler_labels.clear()
        self.events.clear()
        self.logs.clear()
        self.log_views.clear()
        self._seen_version = -1
        self._seen_events = 0

    def append_log(self, task: str, stream: str, text: str) -> None:
        view = self._log_view(task)
        for line in text.splitlines():
            view.appendPlainText(f"[{stream}] {line}" if stream != "stdout" else line)

    # ------------------------------------------------------------ drawing

    def _color_index(self, task: str) -> int:
        if task not in self.order:
            self.order.append(task)
        return self.order.index(task)

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

    def _worker_row(self, task: str) -> None:
        if task in self.progress_bars:
            return
        row = len(self.progress_bars)
        name = QLabel(f"<b style='color:{worker_color(self._color_index(task)).name()}'>■</b> {task}")
        bar = QProgressBar()
        bar.setRange(0, 1000)
        bar.setFormat("waiting for the cluster")
        bar.setTextVisible(True)
        slow = QLabel("")
        slow.setStyleSheet("color: #b00020; font-weight: bold")
        self.progress_grid.addWidget(name, row, 0)
        self.progress_grid.addWidget(bar, row, 1)
        self.progress_grid.addWidget(slow, row, 2)
        self.progress_bars[task] = bar
        self.straggler_labels[task] = slow

    def _on_timer_timeout(self) -> None:
        store = self.store
        if store.version == self._seen_version:
            return
        self._seen_version = store.version
        visible = self.isVisible()
        workers = list(store.workers)
        for task in [t for t in self.order if t in workers] + [t for t in workers if t not in self.order]:
            self._worker_row(task)
            colour = worker_color(self._color_index(task))
            for metric in METRICS:
                key = (task, metric)
                curve = self.curves.get(key)
                if curve is None:
                    curve = self.plots[metric].plot(name=task, pen=pg.mkPen(colour, width=1))
                    curve.setSkipFiniteCheck(True)
                    self.curves[key] = curve
                if visible:
                    x, y = store.series(task, metric, MAX_POINTS)
                    curve.setData(x, y)
            prog = store.progress[task]
            bar = self.progress_bars[task]
            if prog.steps_per_epoch:
                bar.setValue(int(prog.fraction * 1000))
                bar.setFormat(f"epoch {prog.epoch + 1}/{prog.epochs}  step {prog.step + 1}/{prog.steps_per_epoch}"
                              f"  {prog.fraction * 100:.0f}%  {_fmt_eta(prog.eta())}")
        slow = set(store.stragglers())
        for task, label in self.straggler_labels.items():
            label.setText("straggler: step time well above the others'" if task in slow else "")
        events = store.events_snapshot()
        for e in events[self._seen_events:]:
            when = dt.datetime.fromtimestamp(e["time"] or time.time()).strftime("%H:%M:%S")
            item = QListWidgetItem(f"{when}  {e['task']}: {e['text']}")
            if e["event"] in ("failed", "error", "lost", "watchdog"):
                item.setForeground(Qt.red)
            self.events.addItem(item)
        if len(events) > self._seen_events:
            self.events.scrollToBottom()
        self._seen_events = len(events)
        self.redraws += 1
        self.refreshed.emit()

    def showEvent(self, event):  # noqa: N802 (Qt's name): curves were not fed while hidden
        self._seen_version = -1
        super().showEvent(event)

    # ------------------------------------------------------------ export

    def export_csv(self, path) -> int:
        return self.store.write_csv(path)

    def export_png(self, path) -> bool:
        return self.plot_area.grab().save(str(path))
