"""The live dashboard: every metric of a run, per worker or once for the cluster, and the system lane.

Each task's progress row (``progress_view``) is above the plots, the events and logs (``events_view``) beside.

Curves are redrawn from the ``MetricsStore`` by a timer (at most 30 Hz) and only when the
store changed, never once per sample; each curve gets at most ``MAX_POINTS`` points (a
min/max reduction that keeps spikes). The reading aids (smoothing, log y, the x axis, which
plots are shown) are the person's choices: ``view()`` gives them, ``view_changed`` says
when they change, ``apply_view`` restores them.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QCheckBox, QComboBox, QHBoxLayout, QInputDialog, QLabel, QListWidget, QListWidgetItem,
                               QPushButton, QSizePolicy, QSlider, QSplitter, QVBoxLayout, QWidget)

from console.gui.colors import CLUSTER, EPOCH as EPOCH_PEN, VALIDATION, host_encoding, worker_color
from console.gui.events_view import EventsView
from console.gui.progress_view import ProgressView
from console.store.metric_ids import DEFAULT_PLOTS, EPOCH, HOST, SYSTEM, X_AXES, is_cluster_wide, plot_label, plot_of
from console.store.metrics import Marker, MetricsStore
from console.text import duration_text, marker_label, marker_text, metric_text
from trainer.tf_config import TRAINING_ROLES

REFRESH_MS = 33          # at most 30 redraws a second
MAX_POINTS = 600         # per curve and redraw: 300 min/max pairs, one per 2-3 pixels of a plot
NEW_WORKERS_PER_FRAME = 4  # rows, curves and legend entries added per redraw
NEW_CURVES_PER_FRAME = 6   # curves made per redraw (the rest the next: a run's first records bring dozens)
MIN_X_SPAN = 100           # steps a view shows at least (fewer view moves early in a run)
SLOW_REFRESH_MS = 250      # progress lines, ETA, straggler marks, the metric list and the events list
X_AXIS_NAMES = {"step": "global step", "time": "wall-clock time", "relative": "seconds since the run began"}
READOUT_CURVES = 8         # curves named in the hover read-out (the rest are counted)
FRAME_BUDGET = 0.015  # seconds of reducing new rows per frame and group of plots; the rest next frame
EVENTS_WIDTH = 330        # the events and logs pane at first (the person resizes it; the window remembers)
DETACHED = "detached"  # a bar's word once the window stopped following its run
PER_WORKER_AT_START = ("step_time",)  # every training task reports it: its curves are made at Start
LIVE_PLOTS = ("step_time", "sys:cpu_cores", "sys:memory_gb")  # a live run fills them (training, its agents' samples)
MARKER_PENS = {Marker.RESTART: ("#b00020", Qt.DashLine), Marker.STALL: ("#E69F00", Qt.DashLine),
               Marker.NAN: ("#b00020", Qt.DotLine)}

EMPTY = np.empty(0)
SAMPLE_GAP_SECONDS = 5.0  # system samples come every second: a pause this long (and 5 x the usual) is a gap
SAMPLE_GAP_FACTOR = 5


@dataclass
class RunHeader:
    """What the Dashboard's header says of the run it shows (besides what its store has: runtime, final values)."""

    run_id: str
    name: str = ""
    state: str = ""
    cluster: str = ""   # "2 workers on 2 hosts"
    settings: str = ""  # text.settings_text


class _Curve(pg.PlotCurveItem):
    """A curve whose data bounds are given with its data (pyqtgraph would recompute them with
    NaN-aware reductions four times per curve and paint)."""

    bounds = None     # (x0, x1, y0, y1, all finite) of what it shows

    def set_points(self, x: np.ndarray, y: np.ndarray, bounds=None) -> None:
        bounds = bounds or _bounds(x, y)
        self._given_bounds = self.bounds = bounds
        self.setData(x, y, connect="all" if bounds[4] else "finite")

    def clear_points(self) -> None:
        self._given_bounds = self.bounds = None
        self.setData(EMPTY, EMPTY)

    def dataBounds(self, ax, frac=1.0, orthoRange=None):  # noqa: N802 (pyqtgraph's name)
        b = getattr(self, "_given_bounds", None)
        if b is None or b[2 * ax] is None:
            return None, None
        return b[2 * ax], b[2 * ax + 1]


class _EpochCurve(pg.PlotDataItem):
    """Values per epoch (a few points): a line with each point marked."""

    bounds = None

    def set_points(self, x: np.ndarray, y: np.ndarray, bounds=None) -> None:
        self.bounds = bounds or _bounds(x, y)
        self.setData(x, y, connect="finite")

    def clear_points(self) -> None:
        self.bounds = None
        self.setData(EMPTY, EMPTY)


def _bounds(x: np.ndarray, y: np.ndarray):
    """(x0, x1, y0, y1, all finite) of points in x order."""
    finite = np.isfinite(y)
    every = bool(finite.all())
    if every:
        return float(x[0]), float(x[-1]), float(y.min()), float(y.max()), True
    if not finite.any():
        return float(x[0]), float(x[-1]), None, None, False
    return float(x[0]), float(x[-1]), float(y[finite].min()), float(y[finite].max()), False


class Dashboard(QWidget):
    view_changed = Signal(dict)  # the person changed a reading aid: view()
    renamed = Signal(str, str)   # the person named the run shown: run id, name

    def __init__(self, store: MetricsStore | None = None, parent=None):
        super().__init__(parent)
        self.store = store or MetricsStore()
        self.order: list[str] = []          # task names in cluster order (colours follow it)
        self.curves: dict[tuple[str, str], _Curve] = {}          # (owner, metric) -> its raw curve
        self.smooth_curves: dict[tuple[str, str], _Curve] = {}   # (owner, metric) -> its smoothed curve
        self.overlay_curves: dict[tuple[str, str], _Curve] = {}  # the compared run's curves
        self.plots: dict[str, pg.PlotItem] = {}                  # plot id (metric_store.plot_of) -> plot
        self.shown: list[str] = [p for p in DEFAULT_PLOTS]      # the plots the person wants, in order
        self.smoothing = 0.0
        self.log_y = False
        self.x_axis = "step"
        self.overlay: tuple[str, MetricsStore] | None = None
        self.redraws = 0
        self._drawn: dict[tuple, int] = {}    # per (owner, metric): the store's table version drawn
        self._overlay_drawn: dict[tuple, int] = {}
        self._views: dict[str, tuple] = {}    # per plot: the view range last set while following
        self.following: dict[str, bool] = {}  # per plot: does the view follow the data (no zoom/pan by hand)
        self._seen_version = -1               # the store's version drawn: -1, the first tick draws
        self._layout_plots: list[str] = []    # the plots in the layout now, in order
        self._slots: list[str] = []           # the plots wanted when they were laid out: their rows
        self._expected: set[str] = set()      # plots laid out before their numbers come (a live run's)
        self.marker_lines: list[tuple] = []   # (marker, [(plot, line)]) for each marker drawn
        self._markers_placed = -1
        self._hover_lines: list = []

        controls = QHBoxLayout()
        controls.setContentsMargins(4, 0, 4, 0)
        controls.addWidget(QLabel("Smoothing"))
        self.smoothing_slider = QSlider(Qt.Horizontal)
        self.smoothing_slider.setRange(0, 99)
        self.smoothing_slider.setMaximumWidth(140)
        self.smoothing_slider.setToolTip("A time-weighted moving average of the training curves (0: none); "
                                         "the raw curve stays faint behind it")
        self.smoothing_label = QLabel("0.00")
        controls.addWidget(self.smoothing_slider)
        controls.addWidget(self.smoothing_label)
        self.log_box = QCheckBox("log y")
        self.log_box.setToolTip("A logarithmic y axis for the training plots (values ≤ 0 are gaps)")
        controls.addWidget(self.log_box)
        controls.addWidget(QLabel("x:"))
        self.x_box = QComboBox()
        for axis in X_AXES:
            self.x_box.addItem(X_AXIS_NAMES[axis], axis)
        controls.addWidget(self.x_box)
        self.readout = QLabel("")
        self.readout.setTextFormat(Qt.PlainText)
        self.readout.setStyleSheet("color: #333")
        self.readout.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        controls.addWidget(self.readout, 1)
        self.smoothing_slider.valueChanged.connect(self._on_smoothing_slider_value_changed)
        self.log_box.toggled.connect(self._on_log_box_toggled)
        self.x_box.currentIndexChanged.connect(self._on_x_box_current_index_changed)

        self.metric_list = QListWidget()
        self.metric_list.setMaximumWidth(230)
        self.metric_list.setToolTip("The plots to show: every numeric field the run reports")
        self.metric_list.itemChanged.connect(self._on_metric_list_item_changed)

        self.plot_area = pg.GraphicsLayoutWidget()
        self.plot_area.setBackground("w")
        self.plot_area.ci.layout.setVerticalSpacing(10)
        self.legend = pg.LegendItem(offset=(-10, 10), labelTextSize="8pt", colCount=2)
        self._legend_plot = None
        self._legend_names: set = set()
        self.plot_area.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)
        self.plot_area.viewport().installEventFilter(self)

        self.progress_view = ProgressView()  # a row per task: progress, badges
        self._slow_version = -1
        self.events_view = EventsView()      # the events and each task's log tail

        plots_row = QSplitter(Qt.Horizontal)
        plots_row.addWidget(self.metric_list)
        plots_row.addWidget(self.plot_area)
        plots_row.setSizes([170, 700])
        plots_row.setStretchFactor(1, 1)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        # The run shown, in a line: its name, state, how long it went, its cluster and settings, where it ended.
        self.header = QLabel("No run yet: Deploy & Start begins one; the Runs tab opens an earlier one.")
        self.header.setTextFormat(Qt.RichText)
        self.header.setWordWrap(True)
        self.rename_button = QPushButton("Name…")
        self.rename_button.setToolTip("Give the run a name of yours (the Runs tab lists it; notes are written there)")
        self.rename_button.setEnabled(False)
        self.rename_button.clicked.connect(self._on_rename_button_clicked)
        header_row = QHBoxLayout()
        header_row.addWidget(self.header, 1)
        header_row.addWidget(self.rename_button)
        left_layout.addLayout(header_row)
        self.run_header: RunHeader | None = None
        self._detached = False
        self.notice = QLabel("")  # what the Dashboard shows now, when it is no live run (detached)
        self.notice.setWordWrap(True)
        self.notice.setStyleSheet("background: #fff4ce; color: #5c4400; padding: 4px")
        self.notice.hide()
        left_layout.addWidget(self.notice)
        left_layout.addWidget(self.progress_view)
        left_layout.addLayout(controls)
        left_layout.addWidget(plots_row, 1)
        split = self.split = QSplitter(Qt.Horizontal)
        split.addWidget(left)
        split.addWidget(self.events_view)
        split.setStretchFactor(0, 1)  # the plots take what the window gains; the events keep their width
        split.setSizes([1000 - EVENTS_WIDTH, EVENTS_WIDTH])
        split.splitterMoved.connect(self._on_split_splitter_moved)
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
        self._make_plots()

    # ------------------------------------------------------------ inputs

    @contextmanager
    def _legend_batch(self):
        """Add and remove many legend entries, then size the legend once (pyqtgraph's LegendItem
        sizes itself at every entry, going over all of them: 128 workers' entries took 0.3 s)."""
        entries = [id(label) for _, label in self.legend.items]
        size, self.legend.size = self.legend.size, (1, 1)  # a fixed size: updateSize does nothing
        try:
            yield
        finally:
            self.legend.size = size
            if [id(label) for _, label in self.legend.items] != entries:
                self.legend.updateSize()

    def set_store(self, store: MetricsStore, order: list[str], live: bool = False) -> None:
        """A new run: its store and its tasks in cluster order; ``live``: a run that goes on (its plots that every
        run fills are laid out now, before its numbers stream in)."""
        self._expected = set(LIVE_PLOTS) if live else set()
        with self._legend_batch():
            self._set_store(store, order)

    def _set_store(self, store: MetricsStore, order: list[str]) -> None:
        self.store = store
        self.order = list(order)
        rows = self.progress_view.rows()
        if rows and rows == self.order[:len(rows)]:
            # The same tasks (a reattach, or a run of the same cluster): their rows, curves and legend
            # stay, emptied; making them again for 128 workers stalled the window for a third of a second.
            self.progress_view.empty()
            for curve in [*self.curves.values(), *self.smooth_curves.values()]:
                curve.clear_points()
        else:
            for key in list(self.curves) + list(self.smooth_curves):
                self._remove_curve(key)
            self.progress_view.clear()
            self.legend.clear()
            self._legend_names.clear()
        self._clear_markers()
        self._clear_readout()
        self.set_notice("")
        self._detached = False
        self.events_view.clear_run()
        self._seen_version = self._slow_version = -1
        self._views.clear()
        self._drawn.clear()
        for task in self.order:  # known workers get their rows and step time curves now, not while data flows
            self._worker_row(task)
            for metric in PER_WORKER_AT_START:
                if plot_of(metric) in self.shown and task.rpartition("-")[0] in TRAINING_ROLES:
                    self._curve(task, metric)

    def set_header(self, header: "RunHeader | None") -> None:
        """What the header says of the run shown (None: no run)."""
        self.run_header = header
        self.rename_button.setEnabled(header is not None)
        self._show_header()

    def _show_header(self) -> None:
        h = self.run_header
        if h is None:
            return
        final = self.store.final_metrics()
        runtime = self.store.runtime()
        parts = [f"<b>{html.escape(h.name)}</b> ({html.escape(h.run_id)})" if h.name else f"<b>{html.escape(h.run_id)}</b>",
                 f"<b>{html.escape(DETACHED if self._detached else h.state)}</b>",
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
            self._show_header()
            self.renamed.emit(h.run_id, h.name)

    def set_notice(self, words: str) -> None:
        """A line above the progress that says what the Dashboard shows (empty: none)."""
        self.notice.setText(words)
        self.notice.setVisible(bool(words))

    def show_detached(self, run_id: str) -> None:
        """The run goes on without this window: it says so, how to follow it again, and no ETA counts down."""
        self.set_notice(f"Detached: run {run_id} goes on without this window, which shows it as it was. Open it "
                        "in the Runs tab (or open this profile again) to follow it again.")
        self.progress_view.freeze(DETACHED)
        self._detached = True
        self._show_header()

    def set_overlay(self, label: str, store: MetricsStore | None) -> None:
        """Draw another run's curves (a finished one, to compare) dashed behind this one's; None clears."""
        for key in list(self.overlay_curves):
            curve = self.overlay_curves.pop(key)
            self.plots[plot_of(key[1])].removeItem(curve)
            self.legend.removeItem(curve)
        self._legend_names = {n for n in self._legend_names if not n.startswith("compared: ")}
        self.overlay = (label, store) if store is not None else None
        self._overlay_drawn.clear()
        self._seen_version = -1

    def view(self) -> dict:
        """The reading aids as they are: which plots, smoothing, log y, x axis (to remember)."""
        return {"plots": list(self.shown), "smoothing": self.smoothing, "log_y": self.log_y, "x": self.x_axis,
                "events_width": self.events_width()}

    def events_width(self) -> int:
        """The events and logs pane's width, as the person left it."""
        return self.split.sizes()[1] if self.split.sizes()[1] > 0 else EVENTS_WIDTH

    def _on_split_splitter_moved(self, *_) -> None:
        self.view_changed.emit(self.view())

    def apply_view(self, view: dict) -> None:
        """Restore remembered reading aids (unknown or damaged values are left as they are)."""
        plots = view.get("plots")
        if isinstance(plots, list) and all(isinstance(p, str) for p in plots):
            self.shown = list(plots)
            self._make_plots()
            self._sync_metric_list()
        smoothing = view.get("smoothing")
        if isinstance(smoothing, (int, float)) and 0 <= smoothing < 1:
            self.smoothing_slider.setValue(round(smoothing * 100))
        if isinstance(view.get("log_y"), bool):
            self.log_box.setChecked(view["log_y"])
        if view.get("x") in X_AXES:
            self.x_box.setCurrentIndex(X_AXES.index(view["x"]))
        width = view.get("events_width")
        if type(width) is int and 120 <= width <= 3000:
            total = sum(self.split.sizes()) or 1000
            self.split.setSizes([max(200, total - width), width])
        self._relayout()
        self._redraw_all()

    # ------------------------------------------------------------ the reading aids

    def _on_smoothing_slider_value_changed(self, value: int) -> None:
        self.smoothing = value / 100
        self.smoothing_label.setText(f"{self.smoothing:.2f}")
        if not self.smoothing:
            for key in list(self.smooth_curves):
                self._remove_curve(key, smooth=True)
        for (owner, metric), curve in self.curves.items():  # smoothed: the raw curves faint behind
            if isinstance(curve, _Curve) and not metric.startswith(SYSTEM):
                curve.setPen(self._pen(owner, metric, faint=self.smoothing > 0))
        self._redraw_all()
        self.view_changed.emit(self.view())

    def _on_log_box_toggled(self, checked: bool) -> None:
        self.log_y = checked
        for plot_id, plot in self.plots.items():
            if not plot_id.startswith(SYSTEM):
                plot.getAxis("left").setLogMode(False, checked)
        self._redraw_all()
        self.view_changed.emit(self.view())

    def _on_x_box_current_index_changed(self, index: int) -> None:
        self.x_axis = X_AXES[index]
        for plot_id, plot in self.plots.items():
            self._set_x_axis(plot_id, plot)
        self._markers_placed = -1
        self._redraw_all()
        self.view_changed.emit(self.view())

    def _on_metric_list_item_changed(self, item: QListWidgetItem) -> None:
        plot_id = item.data(Qt.UserRole)
        wanted = item.checkState() == Qt.Checked
        if wanted and plot_id not in self.shown:
            self.shown.append(plot_id)
        elif not wanted and plot_id in self.shown:
            self.shown.remove(plot_id)
        else:
            return
        self._relayout()
        self._redraw_all()
        self.view_changed.emit(self.view())

    def _redraw_all(self) -> None:
        """The next frame draws every curve again (a reading aid changed): what was read is read no more."""
        self._clear_readout()
        self._drawn.clear()
        self._overlay_drawn.clear()
        self._views.clear()
        for plot_id in self.following:
            self.following[plot_id] = True
        self._seen_version = -1

    def _axis_of(self, plot_id: str) -> str:
        """The x a plot is drawn over: the system lane is over time (relative when steps are chosen)."""
        if plot_id.startswith(SYSTEM) and self.x_axis == "step":
            return "relative"
        return self.x_axis

    def _set_x_axis(self, plot_id: str, plot: pg.PlotItem) -> None:
        axis = self._axis_of(plot_id)
        wanted = pg.DateAxisItem if axis == "time" else pg.AxisItem
        if type(plot.getAxis("bottom")) is not wanted:
            plot.setAxisItems({"bottom": wanted(orientation="bottom")})
        plot.getAxis("bottom").setLabel(X_AXIS_NAMES[axis])

    # ------------------------------------------------------------ plots and curves

    def _plot(self, plot_id: str) -> pg.PlotItem:
        plot = self.plots.get(plot_id)
        if plot is None:
            plot = pg.PlotItem()
            plot.setLabel("left", plot_label(plot_id))
            plot.getAxis("left").enableAutoSIPrefix(False)  # 0.5, not 500 (x0.001)
            plot.getAxis("left").setWidth(60)  # the plots' left edges line up
            plot.setClipToView(True)
            plot.setDownsampling(auto=True, mode="peak")
            # The view follows the data by ranges set once a frame from the drawn points:
            # pyqtgraph's own auto-range re-reads every curve after each setData (most of a frame).
            plot.disableAutoRange()
            plot.getViewBox().sigRangeChangedManually.connect(
                lambda *_, plot_id=plot_id: self._on_view_range_changed_manually(plot_id))
            if self.log_y and not plot_id.startswith(SYSTEM):
                plot.getAxis("left").setLogMode(False, True)
            self._set_x_axis(plot_id, plot)
            self.plots[plot_id] = plot
            self.following[plot_id] = True
        return plot

    def _make_plots(self) -> None:
        """Make the plots the person wants now, before a run: making a plot takes pyqtgraph some 30 ms, a stall
        if done while a run's numbers stream in."""
        for plot_id in self.shown:
            self._plot(plot_id)

    def _relayout(self) -> None:
        """The shown plots, training ones first then the system lane, each group over one x axis. Each plot has
        its row (its place among those the person wants): one that comes is added alone, the others stay (laying
        every plot out again stalled the window while a run streamed in). A live run's plots that every run fills
        (step time, the hosts' CPU and memory) are laid out from its start."""
        present = set(self._plot_ids()) | self._expected
        slots = [p for p in self.shown if not p.startswith(SYSTEM)] + [p for p in self.shown if p.startswith(SYSTEM)]
        wanted = [p for p in slots if p in present]
        if wanted == self._layout_plots and slots == self._slots:
            return
        layout = self.plot_area.ci
        if slots != self._slots:  # the person changed which plots: all of them again
            for plot_id in self._layout_plots:
                layout.removeItem(self.plots[plot_id])
            laid = []
        else:
            laid = [p for p in self._layout_plots if p in wanted]
            for plot_id in self._layout_plots:
                if plot_id not in wanted:
                    layout.removeItem(self.plots[plot_id])
        for plot_id in wanted:
            if plot_id not in laid:
                layout.addItem(self._plot(plot_id), row=slots.index(plot_id), col=0)
        training = [p for p in wanted if not p.startswith(SYSTEM)]
        system = [p for p in wanted if p.startswith(SYSTEM)]
        for group in (training, system):
            for i, plot_id in enumerate(group):
                plot = self.plots[plot_id]
                link = self.plots[group[0]] if i else None
                if plot.getViewBox().linkedView(0) is not (link.getViewBox() if link else None):
                    plot.setXLink(link)
                # one x axis per group (they share it): fewer axes to redraw
                bottom = i == len(group) - 1
                if plot.getAxis("bottom").isVisible() != bottom:
                    plot.showAxis("bottom", bottom)
        if wanted and self._legend_plot is not self.plots[wanted[0]]:
            self.legend.setParentItem(self.plots[wanted[0]].getViewBox())
            self.legend.anchor((1, 0), (1, 0), offset=(-10, 10))
            self._legend_plot = self.plots[wanted[0]]
        self._layout_plots, self._slots = wanted, slots
        self._markers_placed = -1

    def _plot_ids(self) -> list[str]:
        return list(dict.fromkeys(plot_of(metric) for metric in self.store.metrics()))

    def _sync_metric_list(self) -> None:
        """The metric list offers every plot the run's numbers fill; checked: shown."""
        present = {self.metric_list.item(i).data(Qt.UserRole): self.metric_list.item(i)
                   for i in range(self.metric_list.count())}
        by_plot: dict[str, list[str]] = {}
        for metric in self.store.metrics():
            by_plot.setdefault(plot_of(metric), []).append(metric)
        self.metric_list.blockSignals(True)
        try:
            for plot_id in self._plot_ids():
                item = present.get(plot_id)
                if item is None:
                    item = QListWidgetItem(plot_id[len(SYSTEM):] + " (system)" if plot_id.startswith(SYSTEM)
                                           else plot_id)
                    item.setData(Qt.UserRole, plot_id)
                    item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
                    row = sum(_list_rank(p) < _list_rank(plot_id) for p in present)
                    self.metric_list.insertItem(row, item)  # training plots first, the system lane last
                    present[plot_id] = item
                tip = f"{plot_label(plot_id)}: " + ", ".join(by_plot.get(plot_id, ()))
                if item.toolTip() != tip:
                    item.setToolTip(tip)
                checked = Qt.Checked if plot_id in self.shown else Qt.Unchecked
                if item.checkState() != checked:
                    item.setCheckState(checked)
        finally:
            self.metric_list.blockSignals(False)

    def metric_names(self) -> list[str]:
        """Every metric the list offers (each item's plot holds these)."""
        offered = {self.metric_list.item(i).data(Qt.UserRole) for i in range(self.metric_list.count())}
        return [m for m in self.store.metrics() if plot_of(m) in offered]

    def _owner_encoding(self, owner: str) -> tuple[QColor, Qt.PenStyle]:
        if owner.startswith(HOST):
            host = owner[len(HOST):].split("/")[0]
            hosts = self.store.hosts
            index = hosts.index(host) if host in hosts else 0
            gpu = int(owner.rsplit("gpu", 1)[1] or 0) if "/gpu" in owner else None
            return host_encoding(index, gpu)
        return worker_color(self._color_index(owner)), Qt.SolidLine

    def _owner_name(self, owner: str, metric: str) -> str:
        if is_cluster_wide(metric) and not metric.startswith(EPOCH):
            return "cluster"
        if metric.startswith(EPOCH) and is_cluster_wide(metric):
            return "validation" if metric[len(EPOCH):].startswith("val_") else "epoch"
        if owner.startswith(HOST):
            name = owner[len(HOST):]
            return name.replace("/", " ") if "/gpu" in name else f"{name} (host)"
        return owner

    @staticmethod
    def _epoch_encoding(metric: str) -> tuple:
        return VALIDATION if metric[len(EPOCH):].startswith("val_") else EPOCH_PEN

    def _pen(self, owner: str, metric: str, faint: bool = False, dashed: bool = False):
        if metric.startswith(EPOCH) and is_cluster_wide(metric):
            colour, style, _ = self._epoch_encoding(metric)
        elif is_cluster_wide(metric):
            colour, style = CLUSTER
        else:
            colour, style = self._owner_encoding(owner)
        colour = QColor(colour)
        width = 2 if owner.startswith(HOST) and "/gpu" not in owner or metric.startswith(EPOCH) \
            or (is_cluster_wide(metric) and not metric.startswith(EPOCH)) else 1
        if faint:
            colour.setAlpha(60)
        return pg.mkPen(colour, width=width, style=Qt.DashLine if dashed else style)

    def _curve(self, owner: str, metric: str, smooth: bool = False) -> "_Curve":
        table = self.smooth_curves if smooth else self.curves
        curve = table.get((owner, metric))
        if curve is None:
            # PlotCurveItem, not PlotDataItem: the points are already reduced, and the
            # wrapper's per-update work was a third of a frame.
            faint = self.smoothing > 0 and not smooth and not metric.startswith(SYSTEM)
            pen = self._pen(owner, metric, faint=faint)
            if metric.startswith(EPOCH):  # a few points, one per epoch: each one shown
                curve = _EpochCurve(pen=pen, name=self._owner_name(owner, metric), symbolSize=7,
                                    symbol=self._epoch_encoding(metric)[2],
                                    symbolBrush=pen.color() if not metric[len(EPOCH):].startswith("val_")
                                    else pg.mkBrush("w"), symbolPen=pen.color())
            else:
                curve = _Curve(pen=pen, name=self._owner_name(owner, metric), skipFiniteCheck=True)
            curve.metric, curve.owner = metric, owner
            self._plot(plot_of(metric)).addItem(curve)
            table[(owner, metric)] = curve
            name = curve.opts["name"]
            if not smooth and name not in self._legend_names:
                self._legend_names.add(name)
                self.legend.addItem(curve, name)
        return curve

    def _remove_curve(self, key, smooth: bool = False) -> None:
        curve = (self.smooth_curves if smooth else self.curves).pop(key, None)
        if curve is None:
            return
        plot = self.plots.get(plot_of(key[1]))
        if plot is not None:
            plot.removeItem(curve)
        if curve.opts["name"] in self._legend_names and not smooth:
            self.legend.removeItem(curve)
            self._legend_names.discard(curve.opts["name"])
        if not smooth:
            self._remove_curve(key, smooth=True)

    def _color_index(self, task: str) -> int:
        if task not in self.order:
            self.order.append(task)
        return self.order.index(task)

    def _worker_row(self, task: str) -> None:
        if task not in self.progress_view.bars:
            self.progress_view.add_row(task, worker_color(self._color_index(task)))

    # ------------------------------------------------------------ drawing

    def _on_timer_timeout(self) -> None:
        if self.store.version == self._seen_version:
            return
        with self._legend_batch():
            self._redraw()

    def _redraw(self) -> None:
        store = self.store
        self._seen_version = store.version
        workers = list(store.workers)
        new = 0
        for task in [t for t in self.order if t in workers] + [t for t in workers if t not in self.order]:
            if task not in self.progress_view.bars:
                if new == NEW_WORKERS_PER_FRAME:  # the rest next frame: adding widgets is slow
                    self._seen_version = -1
                    continue
                new += 1
            self._worker_row(task)
        if not self._layout_plots:
            self._sync_metric_list()
            self._relayout()
        if self.isVisible():
            metrics = [m for m in store.metrics() if plot_of(m) in self._layout_plots]
            self._draw(store, metrics, self._drawn, self._curve_for)
            if self.overlay is not None:
                self._draw(self.overlay[1], metrics, self._overlay_drawn, self._overlay_curve)
            self._place_markers()
            self._follow()
        self.redraws += 1

    def _draw(self, store: MetricsStore, metrics: list[str], drawn: dict, curve_for) -> None:
        made = 0  # curves made this frame: each costs pyqtgraph a few ms, and a run's first records bring many
        by_axis: dict[str, list] = {}
        for metric in metrics:
            by_axis.setdefault(self._axis_of(plot_of(metric)), []).append(metric)
        for axis, group in by_axis.items():
            changed = store.changed(drawn, group, MAX_POINTS, axis, self.smoothing, order=self.order,
                                    budget=FRAME_BUDGET)
            if not changed.complete:
                self._seen_version = -1  # the rest next frame: the window answers meanwhile
            for (owner, metric), (x, y, smooth) in changed.items():
                if not len(x):
                    continue
                if owner not in self.progress_view.bars and not owner.startswith(HOST) and curve_for == self._curve_for:
                    if owner in store.workers:  # a worker still waiting for its row: next frame
                        drawn.pop((owner, metric), None)
                        self._seen_version = -1
                        continue
                if (owner, metric) not in (self.curves if curve_for == self._curve_for else self.overlay_curves):
                    if made == NEW_CURVES_PER_FRAME:  # the rest next frame
                        drawn.pop((owner, metric), None)
                        self._seen_version = -1
                        continue
                    made += 1
                log = self.log_y and not metric.startswith(SYSTEM)
                if metric.startswith(SYSTEM):
                    x, y = _with_gaps(x, y)
                curve = curve_for(owner, metric)
                curve.set_points(x, _logged(y, log))
                if smooth is not None and curve_for == self._curve_for and not metric.startswith(EPOCH):
                    sx, sy = smooth
                    self._curve(owner, metric, smooth=True).set_points(sx, _logged(sy, log))

    def _curve_for(self, owner: str, metric: str) -> "_Curve":
        return self._curve(owner, metric)

    def _overlay_curve(self, owner: str, metric: str) -> "_Curve":
        curve = self.overlay_curves.get((owner, metric))
        if curve is None:
            label = self.overlay[0]
            pen = self._pen(owner, metric, dashed=True)
            colour = pen.color()
            colour.setAlpha(150)
            pen.setColor(colour)
            name = f"compared: {label}"
            curve = _Curve(pen=pen, name=name, skipFiniteCheck=True)
            curve.metric, curve.owner = metric, f"{label}: {owner}"
            self._plot(plot_of(metric)).addItem(curve)
            curve.setZValue(-1)
            self.overlay_curves[(owner, metric)] = curve
            if name not in self._legend_names:
                self._legend_names.add(name)
                self.legend.addItem(curve, name)
        return curve

    def _curves_of(self, plot_id: str) -> list:
        return [c for table in (self.curves, self.smooth_curves, self.overlay_curves)
                for (owner, metric), c in table.items() if plot_of(metric) == plot_id]

    def _follow(self) -> None:
        """Keep each following plot's view around its data (x shared within each group of plots).

        A view moves only when the data leaves it, or fills too little of it, and then with
        headroom: steady views let pyqtgraph keep its cached axes and bounds between redraws.
        """
        groups: dict[bool, list[str]] = {}
        for plot_id in self._layout_plots:
            groups.setdefault(plot_id.startswith(SYSTEM), []).append(plot_id)
        for group in groups.values():
            bounds = {p: [c.bounds for c in self._curves_of(p) if c.bounds is not None] for p in group}
            xs = [b for p in group for b in bounds[p]]
            if not xs:
                continue
            x0, x1 = min(b[0] for b in xs), max(b[1] for b in xs)
            for plot_id in group:
                vb = self.plots[plot_id].getViewBox()
                if any(vb.autoRangeEnabled()):  # the person pressed the "A" button: follow again
                    vb.disableAutoRange()
                    self.following[plot_id] = True
                    self._views.pop(plot_id, None)
                ys = [v for b in bounds[plot_id] for v in b[2:4] if v is not None]
                if not self.following[plot_id] or not ys:
                    continue
                y0, y1 = min(ys), max(ys)
                span = max(y1 - y0, abs(y1) * 0.05, 1e-9)
                old = self._views.get(plot_id)
                if old is not None:
                    (vx0, vx1), (vy0, vy1) = old
                    x_ok = vx0 <= x0 and x1 <= vx1 and (x1 - x0) >= 0.5 * (vx1 - vx0)
                    y_ok = vy0 <= y0 and y1 <= vy1 and span >= 0.4 * (vy1 - vy0)
                    if x_ok and y_ok:
                        continue
                width = max(x1 - x0, 1.0)
                least = MIN_X_SPAN if self._axis_of(plot_id) == "step" else 10.0
                view = ((x0, max(x1 + 0.5 * width, x0 + least)), (y0 - 0.08 * span, y1 + 0.08 * span))
                self._views[plot_id] = view
                vb.setRange(xRange=view[0], yRange=view[1], padding=0, update=False)

    def _on_view_range_changed_manually(self, plot_id: str) -> None:
        self.following[plot_id] = False  # zoomed or panned by hand: stay there until "A"

    # ------------------------------------------------------------ markers and the read-out

    def _marker_x(self, marker, plot_id: str) -> float:
        axis = self._axis_of(plot_id)
        if axis == "step":
            return marker.step
        return marker.time - (0.0 if axis == "time" else (self.store.origin or 0.0))

    def _clear_markers(self) -> None:
        for _, lines in self.marker_lines:
            for plot, line in lines:
                plot.removeItem(line)
        self.marker_lines.clear()
        self._markers_placed = -1

    @property
    def restart_lines(self) -> list[list]:
        """Per restart: its marker line in each plot."""
        return [lines for marker, lines in self.marker_lines if marker.kind == Marker.RESTART]

    def _place_markers(self) -> None:
        """A line across every plot at each restart, stall and first non-finite value (labelled once)."""
        markers = self.store.markers_snapshot()
        if self._markers_placed == len(markers) and len(self.marker_lines) == len(markers):
            return
        self._clear_markers()
        for marker in markers:
            colour, style = MARKER_PENS[marker.kind]
            lines = []
            for i, plot_id in enumerate(self._layout_plots):
                x = self._marker_x(marker, plot_id)
                if not math.isfinite(x):
                    continue
                word = marker_label(marker)
                line = pg.InfiniteLine(pos=x, angle=90, pen=pg.mkPen(colour, width=1, style=style),
                                       label=word if i == 0 else None,
                                       labelOpts={"position": 0.9, "color": colour, "anchors": [(0, 0), (0, 0)]})
                line.setToolTip(marker_text(marker))
                plot = self.plots[plot_id]
                plot.addItem(line, ignoreBounds=True)
                lines.append((plot, line))
            self.marker_lines.append((marker, lines))
        self._markers_placed = len(markers)

    def _on_scene_mouse_moved(self, pos) -> None:
        for plot_id in self._layout_plots:
            plot = self.plots[plot_id]
            if plot.sceneBoundingRect().contains(pos):
                x = plot.getViewBox().mapSceneToView(pos).x()
                self.readout.setText(self.readout_at(plot_id, x))
                self._show_hover_line(plot_id, x)
                return
        self._clear_readout()  # between the plots: nothing is read

    def _clear_readout(self) -> None:
        """No read-out and no line across the plots (the mouse left them; the axis, plots or run changed)."""
        self.readout.setText("")
        for plot, line in self._hover_lines:
            plot.removeItem(line)
        self._hover_lines = []

    def eventFilter(self, watched, event):  # noqa: N802 (Qt's name): the mouse left the plots
        if event.type() == QEvent.Leave and watched is self.plot_area.viewport():
            self._clear_readout()
        return super().eventFilter(watched, event)

    def _show_hover_line(self, plot_id: str, x: float) -> None:
        for plot, line in self._hover_lines:
            plot.removeItem(line)
        self._hover_lines = []
        group = plot_id.startswith(SYSTEM)
        for other in self._layout_plots:
            if other.startswith(SYSTEM) == group:
                line = pg.InfiniteLine(pos=x, angle=90, pen=pg.mkPen("#888", width=1))
                self.plots[other].addItem(line, ignoreBounds=True)
                self._hover_lines.append((self.plots[other], line))

    def readout_at(self, plot_id: str, x: float) -> str:
        """Each curve's value in a plot at ``x`` (the nearest drawn point), as one line."""
        axis = self._axis_of(plot_id)
        where = (f"step {x:.0f}" if axis == "step" else
                 dt.datetime.fromtimestamp(x).strftime("%H:%M:%S") if axis == "time" else f"{x:.1f} s")
        parts = []
        for curve in [c for c in self._curves_of(plot_id) if c not in self.smooth_curves.values()]:
            xs, ys = curve.xData, curve.yData
            if xs is None or not len(xs):
                continue
            i = int(np.clip(np.searchsorted(xs, x), 1, len(xs) - 1)) if len(xs) > 1 else 0
            if len(xs) > 1 and abs(xs[i - 1] - x) <= abs(xs[i] - x):
                i -= 1
            smooth = self.smooth_curves.get((curve.owner, curve.metric))
            y = float(ys[i])
            if self.log_y and not plot_id.startswith(SYSTEM):
                y = 10 ** y if math.isfinite(y) else y
            words = f"{curve.owner if curve in self.overlay_curves.values() else curve.opts['name']} " \
                    f"{metric_text(y, 4)}"
            if smooth is not None and smooth.yData is not None and len(smooth.yData):
                j = int(np.clip(np.searchsorted(smooth.xData, xs[i]), 0, len(smooth.yData) - 1))
                sy = float(smooth.yData[j])
                if self.log_y and math.isfinite(sy):
                    sy = 10 ** sy
                words += f" (smoothed {metric_text(sy, 4)})"
            parts.append(words)
        more = len(parts) - READOUT_CURVES
        shown = " · ".join(parts[:READOUT_CURVES]) + (f" · … {more} more" if more > 0 else "")
        return f"{plot_label(plot_id).split(' (')[0]} at {where}: {shown}" if parts else ""

    # ------------------------------------------------------------ progress, badges, events

    def _on_slow_timer_timeout(self) -> None:
        """Progress lines with ETA, badges, the metric list and events: a few times a second is enough."""
        store = self.store
        if store.version == self._slow_version:
            return
        self._slow_version = store.version
        self._sync_metric_list()
        self._relayout()
        if not self._detached:  # a late batch does not bring the ETA back
            self.progress_view.show_store(store)
        self._show_header()
        self.events_view.show_store(store)

    def showEvent(self, event):  # noqa: N802 (Qt's name): curves were not fed while hidden
        self._seen_version = self._slow_version = -1
        self._drawn.clear()
        self._overlay_drawn.clear()
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


def _list_rank(plot_id: str) -> tuple:
    """Where a plot stands in the metric list: the usual ones first, then by name; the system lane last."""
    return (plot_id.startswith(SYSTEM), DEFAULT_PLOTS.index(plot_id) if plot_id in DEFAULT_PLOTS else len(DEFAULT_PLOTS),
            plot_id)


def _with_gaps(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Samples with a gap where none came for a while (the console was detached, a host unreachable): a point
    of NaN there, so that the line breaks instead of drawing what nobody measured."""
    if len(x) < 3:
        return x, y
    steps = np.diff(x)
    gap = max(SAMPLE_GAP_FACTOR * float(np.median(steps)), SAMPLE_GAP_SECONDS)
    at = np.nonzero(steps > gap)[0]
    if not len(at):
        return x, y
    return (np.insert(x.astype(np.float64), at + 1, (x[at] + x[at + 1]) / 2),
            np.insert(y.astype(np.float64), at + 1, np.nan))


def _logged(y: np.ndarray, log: bool) -> np.ndarray:
    """y as drawn: its log10 on a log axis (values <= 0 become gaps)."""
    if log:
        y = np.where(y > 0, np.log10(np.where(y > 0, y, 1.0)), np.nan)
    return y
