"""The live dashboard: per-worker loss, step time and throughput, progress, stragglers, events, logs.

Curves are redrawn from the ``MetricsStore`` by a timer (at most 30 Hz) and only
when the store changed, never once per sample; each curve gets at most
``MAX_POINTS`` points (a min/max reduction that keeps spikes).
"""

from __future__ import annotations

import datetime as dt
import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QFont, QPainter
from PySide6.QtWidgets import (QGridLayout, QLabel, QListWidget, QListWidgetItem, QPlainTextEdit, QSizePolicy,
                               QSplitter, QTabWidget, QVBoxLayout, QWidget)

from agent.protocol import ERROR, FAILED, LOST, WAITING
from console.text import alive_text, state_text
from console.session import SUPERVISION_ALARMS
from console.gui.colors import worker_color
from console.metrics_store import LABELS, METRICS, MetricsStore

REFRESH_MS = 33          # at most 30 redraws a second
MAX_POINTS = 600         # per curve and redraw: 300 min/max pairs, one per 2-3 pixels of a plot
LOG_LINES = 2000         # per worker's log tail
NEW_WORKERS_PER_FRAME = 4  # rows, curves and legend entries added per redraw
MIN_X_SPAN = 100           # steps a view shows at least (fewer view moves early in a run)
SLOW_REFRESH_MS = 250      # progress lines, ETA, straggler marks and the events list


class _Curve(pg.PlotCurveItem):
    """A curve whose data bounds are given with its data (pyqtgraph would recompute them with
    NaN-aware reductions four times per curve and paint)."""

    bounds = None     # (x0, x1, y0, y1, all finite) of what it shows

    def set_points(self, x: np.ndarray, y: np.ndarray, bounds) -> None:
        self._given_bounds = self.bounds = bounds
        self.setData(x, y, connect="all" if bounds[4] else "finite")

    def dataBounds(self, ax, frac=1.0, orthoRange=None):  # noqa: N802 (pyqtgraph's name)
        b = getattr(self, "_given_bounds", None)
        if b is None or b[2 * ax] is None:
            return None, None
        return b[2 * ax], b[2 * ax + 1]


def _bounds(x: np.ndarray, y: np.ndarray):
    """(x0, x1, y0, y1, all finite) of points in x order."""
    finite = np.isfinite(y)
    every = bool(finite.all())
    if every:
        return float(x[0]), float(x[-1]), float(y.min()), float(y.max()), True
    if not finite.any():
        return float(x[0]), float(x[-1]), None, None, False
    return float(x[0]), float(x[-1]), float(y[finite].min()), float(y[finite].max()), False


class ProgressLine(QWidget):
    """An epoch progress bar with its text, repainted with the frame (QProgressBar repaints
    synchronously on every setValue: 1 ms each, 32 workers a third of a frame)."""

    def __init__(self, colour: QColor, parent=None):
        super().__init__(parent)
        self.colour = colour
        self._value = 0.0
        self._text = WAITING
        self.setMinimumHeight(18)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)

    def value(self) -> float:
        return self._value

    def text(self) -> str:
        return self._text

    def set_progress(self, value: float, text: str) -> None:
        if value != self._value or text != self._text:
            self._value, self._text = value, text
            self.update()

    def paintEvent(self, event):  # noqa: N802 (Qt's name)
        p = QPainter(self)
        r = self.rect().adjusted(0, 1, -1, -2)
        p.setPen(QColor("#999"))
        p.setBrush(QColor("#f4f4f4"))
        p.drawRect(r)
        filled = QColor(self.colour)
        filled.setAlpha(90)
        p.fillRect(r.adjusted(1, 1, -r.width() + int(r.width() * self._value), 0), filled)
        p.setPen(QColor("#222"))
        p.drawText(r, Qt.AlignCenter, self._text)
        p.end()


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA …"
    seconds = int(seconds)
    return f"ETA {seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"ETA {seconds // 60}:{seconds % 60:02d}"


class Dashboard(QWidget):
    def __init__(self, store: MetricsStore | None = None, parent=None):
        super().__init__(parent)
        self.store = store or MetricsStore()
        self.order: list[str] = []          # task names in cluster order (colours follow it)
        self.curves: dict[tuple[str, str], pg.PlotDataItem] = {}
        self.plots: dict[str, pg.PlotItem] = {}
        self.redraws = 0
        self._drawn: dict[tuple, int] = {}    # per (task, metric): the store's append count drawn
        self._views: dict[str, tuple] = {}    # per plot: the view range last set while following
        self.following: dict[str, bool] = {}  # per plot: does the view follow the data (no zoom/pan by hand)
        self._seen_version = -1               # the store's version drawn: -1, the first tick draws
        self._seen_events = 0

        self.plot_area = pg.GraphicsLayoutWidget()
        self.plot_area.setBackground("w")
        self.plot_area.ci.layout.setVerticalSpacing(14)  # stacked plots: their axis labels apart
        for row, metric in enumerate(METRICS):
            plot = self.plot_area.addPlot(row=row, col=0)
            plot.setLabel("left", LABELS[metric])
            if row == len(METRICS) - 1:
                plot.setLabel("bottom", "global step")
            else:  # one x axis for the three plots (they share it): two fewer axes to redraw
                plot.hideAxis("bottom")
            if row == 0:  # one legend (colours are the same in every plot): 16 text items, not 48
                self.legend = plot.addLegend(offset=(-10, 10), labelTextSize="8pt", colCount=2)
            plot.setClipToView(True)
            plot.setDownsampling(auto=True, mode="peak")
            # The view follows the data by ranges set once a frame from the drawn points:
            # pyqtgraph's own auto-range re-reads every curve after each setData (most of a frame).
            plot.disableAutoRange()
            plot.getViewBox().sigRangeChangedManually.connect(
                lambda *_, metric=metric: self._on_view_range_changed_manually(metric))
            self.plots[metric] = plot
            self.following[metric] = True

        self.progress_box = QWidget()
        self.progress_grid = QGridLayout(self.progress_box)
        self.progress_grid.setContentsMargins(4, 4, 4, 4)
        self.progress_bars: dict[str, ProgressLine] = {}
        self._slow_version = -1
        self.straggler_labels: dict[str, QLabel] = {}  # per worker: its supervision state, or "straggler"
        self.restart_lines: list[list] = []              # per restart: its marker in each plot

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
        self.slow_timer = QTimer(self)
        self.slow_timer.setInterval(SLOW_REFRESH_MS)
        self.slow_timer.timeout.connect(self._on_slow_timer_timeout)
        # The timers run while the dashboard is shown (showEvent/hideEvent): hidden, it draws nothing.

    # ------------------------------------------------------------ inputs

    def set_store(self, store: MetricsStore, order: list[str]) -> None:
        """A new run: its store and its tasks in cluster order."""
        self.store = store
        self.order = list(order)
        for curve_key, curve in self.curves.items():
            self.plots[curve_key[1]].removeItem(curve)
        self.legend.clear()
        self.curves.clear()
        for widget in list(self.progress_bars.values()) + list(self.straggler_labels.values()):
            self.progress_grid.removeWidget(widget)
            widget.deleteLater()
        self.progress_bars.clear()
        self.straggler_labels.clear()
        for lines in self.restart_lines:
            for plot, line in lines:
                plot.removeItem(line)
        self.restart_lines.clear()
        self.events.clear()
        self.logs.clear()
        self.log_views.clear()
        self._seen_version = self._slow_version = -1
        self._seen_events = 0
        self._views.clear()
        self._drawn.clear()
        for task in self.order:  # known workers get their rows and curves now, not while data flows
            self._worker_row(task)
            for metric in METRICS:
                self._curve(task, metric)

    def append_log(self, task: str, stream: str, text: str) -> None:
        lines = text.splitlines()
        if lines:  # one append per message: a chatty task costs one layout, not one per line
            self._log_view(task).appendPlainText(
                "\n".join(lines) if stream == "stdout" else "\n".join(f"[{stream}] {line}" for line in lines))

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

    def _curve(self, task: str, metric: str) -> "_Curve":
        curve = self.curves.get((task, metric))
        if curve is None:
            # PlotCurveItem, not PlotDataItem: the points are already reduced, and the
            # wrapper's per-update work was a third of a frame.
            colour = worker_color(self._color_index(task))
            curve = _Curve(pen=pg.mkPen(colour, width=1), name=task, skipFiniteCheck=True)
            self.plots[metric].addItem(curve)
            self.curves[(task, metric)] = curve
        return curve

    def _worker_row(self, task: str) -> None:
        if task in self.progress_bars:
            return
        row = len(self.progress_bars)
        name = QLabel(f"<b style='color:{worker_color(self._color_index(task)).name()}'>■</b> {task}")
        bar = ProgressLine(worker_color(self._color_index(task)))
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
        bounds: dict[str, list] = {m: [] for m in METRICS}
        workers = list(store.workers)
        new = 0
        for task in [t for t in self.order if t in workers] + [t for t in workers if t not in self.order]:
            if task not in self.progress_bars:
                if new == NEW_WORKERS_PER_FRAME:  # the rest next frame: adding widgets is slow
                    self._seen_version = -1
                    continue
                new += 1
            self._worker_row(task)
            for metric in METRICS:
                self._curve(task, metric)
        if visible:
            for key, (x, y) in self.store.changed_series(self._drawn, MAX_POINTS).items():
                curve = self.curves.get(key)
                if curve is not None and len(x):
                    curve.set_points(x, y, _bounds(x, y))
                elif curve is None:
                    self._drawn.pop(key, None)  # a worker still waiting for its row: next frame
            for (task, metric), curve in self.curves.items():
                if curve.bounds is not None:
                    bounds[metric].append(curve.bounds)
        if visible:
            self._follow(bounds)
        self.redraws += 1

    def _on_slow_timer_timeout(self) -> None:
        """Progress lines with ETA, straggler marks and events: a few times a second is enough."""
        store = self.store
        if store.version == self._slow_version:
            return
        self._slow_version = store.version
        alive = store.alive_snapshot()
        for task, bar in self.progress_bars.items():
            prog = store.progress.get(task)
            if task in alive and not (prog is not None and prog.steps_per_epoch):  # a server: no steps of its own
                bar.set_progress(0.0, alive_text(alive[task]))
            elif prog is not None and prog.steps_per_epoch:
                bar.set_progress(prog.fraction,
                                 f"epoch {prog.epoch + 1}/{prog.epochs}  step {prog.step + 1}/{prog.steps_per_epoch}"
                                 f"  {prog.fraction * 100:.0f}%  {_fmt_eta(prog.eta())}")
        slow = set(store.stragglers())
        states = store.states_snapshot()
        for task, label in self.straggler_labels.items():
            state, why = states.get(task, ("", ""))
            text = state_text(state, why) if state else (
                "straggler: step time well above the others'" if task in slow else "")
            if label.text() != text:
                label.setText(text)
                label.setToolTip(why)
        self._mark_restarts(store.restarts)
        events = store.events_snapshot()
        for e in events[self._seen_events:]:
            when = dt.datetime.fromtimestamp(e["time"] or time.time()).strftime("%H:%M:%S")
            item = QListWidgetItem(f"{when}  {e['task']}: {e['text']}")
            if e["event"] in (FAILED, ERROR, LOST, "watchdog", "reconnecting", *SUPERVISION_ALARMS):
                item.setForeground(Qt.red)
            self.events.addItem(item)
        if len(events) > self._seen_events:
            self.events.scrollToBottom()
        self._seen_events = len(events)

    def _mark_restarts(self, restarts: list) -> None:
        """A dashed line across every plot at each step an attempt resumed from."""
        for attempt, step in restarts[len(self.restart_lines):]:
            lines = []
            for metric, plot in self.plots.items():
                line = pg.InfiniteLine(pos=step, angle=90, pen=pg.mkPen("#b00020", width=1, style=Qt.DashLine),
                                       label=f"attempt {attempt}" if metric == METRICS[0] else None,
                                       labelOpts={"position": 0.9, "color": "#b00020", "anchors": [(0, 0), (0, 0)]})
                plot.addItem(line, ignoreBounds=True)
                lines.append((plot, line))
            self.restart_lines.append(lines)

    def _follow(self, bounds: dict[str, list]) -> None:
        """Keep each following plot's view around its data (x shared by the three plots).

        A view moves only when the data leaves it, or fills too little of it, and then with
        headroom: steady views let pyqtgraph keep its cached axes and bounds between redraws.
        """
        xs = [b for metric in METRICS for b in bounds[metric]]
        if not xs:
            return
        x0, x1 = min(b[0] for b in xs), max(b[1] for b in xs)
        for metric, plot in self.plots.items():
            vb = plot.getViewBox()
            if any(vb.autoRangeEnabled()):  # the person pressed the "A" button: follow again
                vb.disableAutoRange()
                self.following[metric] = True
                self._views.pop(metric, None)
            ys = [v for b in bounds[metric] for v in b[2:4] if v is not None]
            if not self.following[metric] or not ys:
                continue
            y0, y1 = min(ys), max(ys)
            span = max(y1 - y0, abs(y1) * 0.05, 1e-9)
            old = self._views.get(metric)
            if old is not None:
                (vx0, vx1), (vy0, vy1) = old
                x_ok = vx0 <= x0 and x1 <= vx1 and (x1 - x0) >= 0.5 * (vx1 - vx0)
                y_ok = vy0 <= y0 and y1 <= vy1 and span >= 0.4 * (vy1 - vy0)
                if x_ok and y_ok:
                    continue
            width = max(x1 - x0, 1.0)
            view = ((x0, max(x1 + 0.5 * width, x0 + MIN_X_SPAN)), (y0 - 0.08 * span, y1 + 0.08 * span))
            self._views[metric] = view
            vb.setRange(xRange=view[0], yRange=view[1], padding=0, update=False)

    def _on_view_range_changed_manually(self, metric: str) -> None:
        self.following[metric] = False  # zoomed or panned by hand: stay there until "A"

    def showEvent(self, event):  # noqa: N802 (Qt's name): curves were not fed while hidden
        self._seen_version = self._slow_version = -1
        self._drawn.clear()
        self.timer.start()
        self.slow_timer.start()
        super().showEvent(event)

    def hideEvent(self, event):  # noqa: N802 (Qt's name)
        self.timer.stop()
        self.slow_timer.stop()
        super().hideEvent(event)

    # ------------------------------------------------------------ export

    def export_csv(self, path) -> int:
        return self.store.write_csv(path)

    def export_png(self, path) -> bool:
        return self.plot_area.grab().save(str(path))
