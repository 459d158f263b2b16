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
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFrame, QHBoxLayout, QInputDialog, QLabel, QListWidget,
                               QListWidgetItem, QPushButton, QScrollArea, QSizePolicy, QSlider, QSplitter,
                               QStackedWidget,
                               QToolButton, QVBoxLayout, QWidget)

from console import diagnosis
from console.gui.colors import (CLUSTER, EPOCH as EPOCH_PEN, VALIDATION, compared_color, host_encoding,
                                worker_color)
from console.gui.events_view import EventsView
from console.gui.failure_view import FailureView
from console.gui.plot_parts import SeriesList, ValueTable
from console.gui.progress_view import ProgressView
from console.gui.speed_view import SpeedView
from console.store.metric_ids import DEFAULT_PLOTS, EPOCH, HOST, SYSTEM, X_AXES, is_cluster_wide, plot_label, plot_of
from console.states import Mark
from console.store.metrics import Marker, MetricsStore
from console.text import duration_text, marker_label, marker_text, metric_text
from console.threads import WINDOW
from trainer.tf_config import TRAINING_ROLES

REFRESH_MS = 33          # at most 30 redraws a second
MAX_POINTS = 600         # per curve and redraw: 300 min/max pairs, one per 2-3 pixels of a plot
NEW_WORKERS_PER_FRAME = 4  # progress rows added per redraw
NEW_CURVES_PER_FRAME = 6   # curves made per redraw (the rest the next: a run's first records bring dozens)
MIN_X_SPAN = 100           # steps a view shows at least (fewer view moves early in a run)
SLOW_REFRESH_MS = 250      # progress lines, ETA, straggler marks, the metric list and the events list
X_AXIS_NAMES = {"step": "global step", "time": "wall-clock time", "relative": "seconds since the run began"}
READOUT_CURVES = 12        # rows of the value table at the cursor (the rest are counted)
MIN_PLOT_HEIGHT = 200      # a plot card's least height: more cards than fit scroll
MIN_PLOT_WIDTH = 360       # a card's least width: the grid has as many columns as fit (up to MAX_COLUMNS)
MAX_COLUMNS = 3
CARD_SPACING = 12
FRAME_BUDGET = 0.015  # seconds of reducing new rows per frame and group of plots; the rest next frame
EVENTS_WIDTH = 330        # the events and logs pane at first (the person resizes it; the window remembers)
DETACHED = "detached"  # a bar's word once the window stopped following its run
PER_WORKER_AT_START = ("step_time",)  # every training task reports it: its curves are made at Start
LIVE_PLOTS = ("step_time", "sys:cpu_cores", "sys:memory_gb")  # a live run fills them (training, its agents' samples)
MARKER_PENS = {Marker.RESTART: ("#b00020", Qt.DashLine), Marker.STALL: ("#E69F00", Qt.DashLine),
               Marker.NAN: ("#b00020", Qt.DotLine)}

EMPTY = np.empty(0)
NO_RUN = ("<p style='font-size:13pt'><b>No run yet</b></p><p>Set the hosts and tasks in the <b>Setup panel</b> "
          "(View ▸ Setup panel, Ctrl+0), then "
          "<b>Run ▸ Check</b> (Ctrl+K) to test them and <b>Run ▸ Deploy &amp; Start</b> (F5) to train: each plot "
          "fills here as the numbers come.</p><p>The <b>Runs</b> tab opens an earlier run.</p>")
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


NEWEST_SHOWN = 5  # a robust range holds the newest points whatever they are (a slowdown that lasts is no spike)


def _spiky(metric: str) -> bool:
    """A duration (a step's time, a wait): its first steps (tracing, a warm-up) or a pause spike far above the
    rest, which must not set the plot's range."""
    return plot_of(metric) == "step_time" or metric.endswith(("_time", "_seconds", "_ms"))


def _robust_bounds(x: np.ndarray, y: np.ndarray):
    """``_bounds`` with a y top that spikes do not set: the highest value under Tukey's far fence (the third
    quartile plus three interquartile ranges, at least 5 % of it); a spike is still drawn, above the view."""
    bounds = _bounds(x, y)
    finite = y[np.isfinite(y)]
    if len(finite) < 8 or bounds[3] is None:
        return bounds
    q1, q3 = np.quantile(finite, (0.25, 0.75))
    fence = q3 + 3 * max(q3 - q1, 0.05 * abs(q3))
    top = max(float(finite[finite <= fence].max()), float(finite[-NEWEST_SHOWN:].max()))  # a lasting change shows
    if not top > bounds[2]:
        return bounds  # most values alike (a metric mostly 0): nothing to call a spike
    return bounds[0], bounds[1], bounds[2], top, bounds[4]


class _YAxis(pg.AxisItem):
    """A y axis that, logarithmic, labels the decades only (1, 0.1, 0.01: the ticks between them unlabelled),
    and every tick when less than a decade is shown."""

    def logTickValues(self, minVal, maxVal, size, stdTicks):  # noqa: N802 (pyqtgraph's name and arguments)
        """pyqtgraph's decades and their 2..9 marks; a range that holds fewer than two of those (inside one decade)
        gets ticks at round values instead (0.32, 0.34, ...), so that the axis still says its numbers."""
        ticks = super().logTickValues(minVal, maxVal, size, stdTicks)
        if sum(len(values) for _, values in ticks) >= 2 or not (abs(minVal) < 300 and abs(maxVal) < 300):
            return ticks  # (a range a host made up, beyond a float's powers of ten: pyqtgraph's own)
        low, high = 10.0 ** minVal, 10.0 ** maxVal
        if not high > low > 0:
            return ticks
        step = 10.0 ** math.floor(math.log10((high - low) / 2))
        for factor in (5, 2, 1, 0.5, 0.2):  # the widest round step that gives at least three ticks
            if (high - low) / (step * factor) >= 3:
                step *= factor
                break
        first = math.ceil(low / step)
        values = [k * step for k in range(first, first + 12) if low < k * step < high]
        return [(None, [math.log10(v) for v in values])]

    def tickStrings(self, values, scale, spacing):  # noqa: N802 (pyqtgraph's name)
        if not self.logMode:
            return super().tickStrings(values, scale, spacing)
        low, high = sorted(self.range)
        if not all(abs(v) < 300 for v in values):  # a range a host made up: no power of ten a float holds
            return ["" for _ in values]
        if high - low < 1:
            return [f"{10 ** v:.3g}" for v in values]
        return [f"{10.0 ** round(v):g}" if abs(v - round(v)) < 1e-6 else "" for v in values]


class _PlotArea(pg.GraphicsLayoutWidget):
    """The plots' canvas; its paint is the window's work, which the reading threads give way to."""

    def paintEvent(self, event):  # noqa: N802 (Qt's name)
        WINDOW.busy()
        super().paintEvent(event)


class Dashboard(QWidget):
    view_changed = Signal(dict)  # the person changed a reading aid: view()
    renamed = Signal(str, str)   # the person named the run shown: run id, name
    comparison_removed = Signal(str)  # the person took a compared run away (its chip's ×): its run id
    side_panel_toggled = Signal(bool)  # the events, logs and Why slow? panel was shown (True) or collapsed
    offered_run_opened = Signal(str)   # the person opened the run the empty Dashboard offered: its id

    def __init__(self, store: MetricsStore | None = None, parent=None):
        super().__init__(parent)
        self.store = store or MetricsStore()
        self.order: list[str] = []          # task names in cluster order (colours follow it)
        self.curves: dict[tuple[str, str], _Curve] = {}          # (owner, metric) -> its raw curve
        self.smooth_curves: dict[tuple[str, str], _Curve] = {}   # (owner, metric) -> its smoothed curve
        self.overlay_curves: dict[tuple[str, str, str], _Curve] = {}  # (run id, owner, metric) -> a compared run's
        self.plots: dict[str, pg.PlotItem] = {}                  # plot id (metric_store.plot_of) -> plot
        self.shown: list[str] = [p for p in DEFAULT_PLOTS]      # the plots the person wants, in order
        self.smoothing = 0.0
        self.log_y = False
        self.x_axis = "step"
        self.compared: dict[str, MetricsStore] = {}  # run id -> its store, drawn dashed in its own colour
        self._compared_names: dict[str, str] = {}    # run id -> how the series list and chips name it
        self._compared_index: dict[str, int] = {}    # run id -> its colour's place (kept while it is compared)
        self.hidden: set[str] = set()                # the series the person hid (by name)
        self._series: dict[str, tuple] = {}          # name -> (rank, pen, symbol): the series list's entries
        self.expanded: str | None = None             # the one plot shown alone (a double-click), or None
        self.live = False                            # a run that goes on: its views leave room ahead
        self._columns = 1                            # the grid's columns now
        self.redraws = 0
        self._drawn: dict[tuple, int] = {}    # per (owner, metric): the store's table version drawn
        self._overlay_drawn: dict[str, dict] = {}  # per compared run: its own _drawn
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
        self.smoothing_slider.setMinimumWidth(80)  # a slider, never a nub that reads as a box
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
        self.x_box.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.x_box.setMinimumContentsLength(12)  # the longest name is cut in the box, whole in its list
        for axis in X_AXES:
            self.x_box.addItem(X_AXIS_NAMES[axis], axis)
        controls.addWidget(self.x_box)
        self.fit_button = QPushButton("Fit")
        self.fit_button.setToolTip("Every plot around its data again, as a finished run is shown (after a zoom "
                                   "or pan by hand)")
        self.fit_button.clicked.connect(self._on_fit_button_clicked)
        controls.addWidget(self.fit_button)
        self.all_button = QPushButton("All plots")
        self.all_button.setToolTip("Show every plot again (a double-click on a plot shows it alone)")
        self.all_button.clicked.connect(self._on_all_button_clicked)
        self.all_button.hide()
        controls.addWidget(self.all_button)
        controls.addStretch(1)
        # The runs compared with the one shown, on a line of their own: a chip each, in its colour, with × to take
        # it away. The line never widens the window (chips past its width are cut; the Series list has them all).
        self.chip_row = QWidget()
        self.chip_row.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        chip_line = QHBoxLayout(self.chip_row)
        chip_line.setContentsMargins(4, 0, 4, 0)
        chip_line.addWidget(QLabel("Compared:"))
        self.chips = QHBoxLayout()
        chip_line.addLayout(self.chips)
        chip_line.addStretch(1)
        self.chip_row.hide()
        self.smoothing_slider.valueChanged.connect(self._on_smoothing_slider_value_changed)
        self.log_box.toggled.connect(self._on_log_box_toggled)
        self.x_box.currentIndexChanged.connect(self._on_x_box_current_index_changed)

        self.metric_list = QListWidget()
        self.metric_list.setMaximumWidth(230)
        self.metric_list.setToolTip("The plots to show: every numeric field the run reports")
        self.metric_list.itemChanged.connect(self._on_metric_list_item_changed)

        self.series_list = SeriesList()
        self.series_list.toggled.connect(self._on_series_list_toggled)

        # The plots: titled cards with a least height in a grid that scrolls, over the same x per unit.
        self.plot_area = _PlotArea()
        self.plot_area.setBackground("w")
        self.plot_area.ci.layout.setVerticalSpacing(CARD_SPACING)
        self.plot_area.ci.layout.setHorizontalSpacing(CARD_SPACING)
        self.plot_area.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)
        self.plot_area.scene().sigMouseClicked.connect(self._on_scene_mouse_clicked)
        self.plot_area.viewport().installEventFilter(self)
        self.plot_scroll = QScrollArea()
        self.plot_scroll.setWidgetResizable(True)
        self.plot_scroll.setFrameShape(QFrame.NoFrame)
        self.plot_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.plot_scroll.setWidget(self.plot_area)
        self.plot_scroll.viewport().installEventFilter(self)
        self.empty_state = QLabel(NO_RUN)
        self.empty_state.setTextFormat(Qt.RichText)
        self.empty_state.setAlignment(Qt.AlignCenter)
        self.empty_state.setWordWrap(True)
        self.empty_state.setStyleSheet("background: white; color: #333; padding: 40px")
        self.empty_state.linkActivated.connect(self._on_empty_state_link_activated)
        self.plot_stack = QStackedWidget()
        self.plot_stack.addWidget(self.empty_state)
        self.plot_stack.addWidget(self.plot_scroll)

        self.progress_view = ProgressView()  # a row per task: progress, badges
        self._slow_version = -1
        self.events_view = EventsView()      # the events and each task's log tail
        self.speed_view = SpeedView()        # why is it slow? (asked for: the run control wires it)

        lists = QSplitter(Qt.Vertical)  # beside the plots: which plots, and which series in them
        for title, widget in (("Plots", self.metric_list), ("Series", self.series_list)):
            box = QWidget()
            box_layout = QVBoxLayout(box)
            box_layout.setContentsMargins(0, 0, 0, 0)
            box_layout.setSpacing(2)
            box_layout.addWidget(QLabel(f"<b>{title}</b>"))
            box_layout.addWidget(widget)
            lists.addWidget(box)
        lists.setMaximumWidth(230)
        plots_row = QSplitter(Qt.Horizontal)
        plots_row.addWidget(lists)
        plots_row.addWidget(self.plot_stack)
        plots_row.setSizes([170, 700])
        plots_row.setStretchFactor(1, 1)
        left = self.left = QWidget()
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
        self.failure_view = FailureView()  # a failed run: where in the user's code, what it raised, what to do
        self.failure_view.log_asked.connect(self._on_failure_view_log_asked)
        self._failure_shown: tuple | None = None  # what the failure view was made from
        left_layout.addWidget(self.failure_view)
        left_layout.addWidget(self.progress_view)
        left_layout.addLayout(controls)
        left_layout.addWidget(self.chip_row)
        left_layout.addWidget(plots_row, 1)
        right = self.right = QSplitter(Qt.Vertical)  # beside the plots: what happened, and why it is slow
        right.addWidget(self.events_view)
        right.addWidget(self.speed_view)
        right.setStretchFactor(0, 3)
        right.setStretchFactor(1, 2)
        split = self.split = QSplitter(Qt.Horizontal)
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(0, 1)  # the plots take what the window gains; the events keep their width
        split.setCollapsible(0, False)
        split.setSizes([1000 - EVENTS_WIDTH, EVENTS_WIDTH])
        self._events_width = EVENTS_WIDTH  # as the person left it (a drag), whatever squeezed it since
        split.splitterMoved.connect(self._on_split_splitter_moved)
        self.events_view.wide_toggled.connect(self._on_events_view_wide_toggled)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)
        self.value_table = ValueTable(self)  # floats over the plots at the cursor

        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self._on_timer_timeout)
        self.slow_timer = QTimer(self)
        self.slow_timer.setInterval(SLOW_REFRESH_MS)
        self.slow_timer.timeout.connect(self._on_slow_timer_timeout)
        # The timers run while the dashboard is shown (showEvent/hideEvent): hidden, it draws nothing.
        self._make_plots()

    # ------------------------------------------------------------ inputs

    def set_store(self, store: MetricsStore, order: list[str], live: bool = False) -> None:
        """A new run: its store and its tasks in cluster order; ``live``: a run that goes on (its plots that every
        run fills are laid out now, before its numbers stream in)."""
        # A live run: every plot the person wants is laid out now, before its numbers stream in (a plot laid out
        # as its first numbers came moved every card while the window was busiest); those that stay empty go
        # when the run ends.
        self._expected = set(self.shown) | set(LIVE_PLOTS) if live else set()
        self.live = live
        self.speed_view.clear(order)
        self.speed_view.set_available(live)
        self._set_store(store, order)

    def _set_store(self, store: MetricsStore, order: list[str]) -> None:
        self.store = store
        self.order = list(order)
        rows = self.progress_view.rows()
        if rows and rows == self.order[:len(rows)]:
            # The same tasks (a reattach, or a run of the same cluster): their rows, curves and series
            # stay, emptied; making them again for 128 workers stalled the window for a third of a second.
            self.progress_view.empty()
            for curve in [*self.curves.values(), *self.smooth_curves.values()]:
                curve.clear_points()
        else:
            for key in list(self.curves) + list(self.smooth_curves):
                self._remove_curve(key)
            self.progress_view.clear()
        self._clear_markers()
        self._clear_readout()
        self.set_notice("")
        self._detached = False
        self.events_view.clear_run()
        self.progress_view.ended = False
        self.failure_view.clear()
        self._failure_shown = None
        self._seen_version = self._slow_version = -1
        self._views.clear()
        self._drawn.clear()
        for plot_id in self.following:
            self.following[plot_id] = True
        self._show_empty_state()
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
        self._show_empty_state()

    def _show_empty_state(self) -> None:
        """No run and nothing to draw: what to do instead of empty plots; else the plots."""
        empty = self.run_header is None and not self._expected and not self.store.metrics()
        self.plot_stack.setCurrentWidget(self.empty_state if empty else self.plot_scroll)

    def offer_run(self, run_id: str, words: str) -> None:
        """No run shown yet: the empty Dashboard offers ``run_id`` (``words``: what it says of it), with a link that
        opens it (``offered_run_opened``)."""
        self.empty_state.setText(f"<p style='font-size:13pt'><b>{html.escape(words)}</b></p>"
                                 f"<p><a href='open:{html.escape(run_id)}'>Open it</a> (its whole history), or "
                                 "start a new run: <b>Run ▸ Deploy &amp; Start</b> (F5).</p>"
                                 "<p>The <b>Runs</b> tab lists every run.</p>")

    def _on_empty_state_link_activated(self, link: str) -> None:
        if link.startswith("open:"):
            self.offered_run_opened.emit(link.removeprefix("open:"))

    def set_ended(self) -> None:
        """The run shown went as far as it goes: each plot fits its data (no room ahead kept)."""
        self.live = False
        self.progress_view.ended = True
        self.speed_view.set_available(False)
        self._expected = set()
        self._slow_version = -1  # the empty plots go at the next tick
        self._views.clear()
        self._seen_version = -1  # the next frame fits them, whether or not more numbers come

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

    def add_comparison(self, run_id: str, store: MetricsStore, name: str = "") -> None:
        """Draw another run's curves dashed behind this one's, in a colour of its own, with a chip to take it away
        (``name``: the person's name for it). The run shown keeps the x range."""
        if run_id in self.compared:
            self.remove_comparison(run_id)
        self.compared[run_id] = store
        self._compared_names[run_id] = f"run {name or run_id}"
        used = set(self._compared_index.values())
        self._compared_index[run_id] = min(i for i in range(len(used) + 1) if i not in used)
        self._overlay_drawn[run_id] = {}
        self._show_chips()
        self._seen_version = -1

    def remove_comparison(self, run_id: str) -> None:
        """Draw a compared run no more (unknown: nothing happens)."""
        if self.compared.pop(run_id, None) is None:
            return
        for key in [k for k in self.overlay_curves if k[0] == run_id]:
            curve = self.overlay_curves.pop(key)
            self.plots[plot_of(key[2])].removeItem(curve)
        self._series.pop(self._compared_names.pop(run_id), None)
        self._compared_index.pop(run_id, None)
        self._overlay_drawn.pop(run_id, None)
        self._show_chips()
        self._sync_series()
        self._seen_version = -1

    def compared_colour(self, run_id: str) -> QColor:
        """The colour a compared run is drawn in (its place among the runs compared)."""
        return compared_color(self._compared_index[run_id])

    def _show_chips(self) -> None:
        while self.chips.count():
            widget = self.chips.takeAt(0).widget()
            if widget is not None:
                widget.deleteLater()
        for run_id in self.compared:
            chip = QToolButton()
            chip.setText(f"┅ {self._compared_names[run_id]}  ✕")
            chip.setToolTip(f"Run {run_id} is drawn dashed in this colour; click to compare it no more")
            chip.setStyleSheet(f"QToolButton {{ color: {self.compared_colour(run_id).name()}; font-weight: bold; "
                               "border: 1px solid #bbb; border-radius: 9px; padding: 1px 8px }")
            chip.clicked.connect(lambda *_, run_id=run_id: self._on_chip_clicked(run_id))
            self.chips.addWidget(chip)
        self.chip_row.setVisible(bool(self.compared))

    def _on_chip_clicked(self, run_id: str) -> None:
        self.remove_comparison(run_id)
        self.comparison_removed.emit(run_id)

    def chip_texts(self) -> list[str]:
        """What the compare chips say, in order."""
        return [self.chips.itemAt(i).widget().text() for i in range(self.chips.count())
                if self.chips.itemAt(i).widget() is not None]

    def view(self) -> dict:
        """The reading aids as they are: which plots, smoothing, log y, x axis (to remember)."""
        return {"plots": list(self.shown), "smoothing": self.smoothing, "log_y": self.log_y, "x": self.x_axis,
                "events_width": self.events_width()}

    def events_width(self) -> int:
        """The events and logs pane's width, as the person left it (a drag): never one a long line or a narrow
        window forced on it."""
        return self._events_width

    def _on_split_splitter_moved(self, *_) -> None:
        width = self.split.sizes()[1]
        if width > 0:
            self._events_width = width
        self.side_panel_toggled.emit(width > 0)
        self.view_changed.emit(self.view())

    def side_panel_shown(self) -> bool:
        return self.split.sizes()[1] > 0

    def set_side_panel_shown(self, shown: bool) -> None:
        """The events, logs and Why slow? panel beside the plots, at the width the person left it; or collapsed
        (the plots take the whole width)."""
        if shown == self.side_panel_shown() and not self.events_view.wide_button.isChecked():
            return
        self.events_view.wide_button.setChecked(False)  # wide and folded would leave nothing shown
        total = sum(self.split.sizes()) or self.width()
        if shown:
            self.split.setSizes([max(200, total - self._events_width), self._events_width])
        else:
            self.split.setSizes([total, 0])
        self.side_panel_toggled.emit(shown)

    def _on_events_view_wide_toggled(self, wide: bool) -> None:
        """The events and logs as wide as the Dashboard (the plots hidden), or beside the plots again."""
        self.left.setVisible(not wide)

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
            self._events_width = width
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
        for drawn in self._overlay_drawn.values():
            drawn.clear()
        self._views.clear()
        for plot_id in self.following:
            self.following[plot_id] = True
        self._seen_version = -1

    def _on_fit_button_clicked(self) -> None:
        self._redraw_all()

    def _on_all_button_clicked(self) -> None:
        self.expand(None)

    def expand(self, plot_id: str | None) -> None:
        """Show ``plot_id`` alone, over the whole plot area (None: every plot again)."""
        self.expanded = plot_id
        self.all_button.setVisible(plot_id is not None)
        self._relayout()
        self._redraw_all()

    def _on_scene_mouse_clicked(self, event) -> None:
        if not event.double():
            return
        for plot_id in self._layout_plots:
            if self.plots[plot_id].sceneBoundingRect().contains(event.scenePos()):
                self.expand(None if self.expanded == plot_id else plot_id)
                return

    def _on_series_list_toggled(self, name: str, shown: bool) -> None:
        (self.hidden.discard if shown else self.hidden.add)(name)
        for curve in self._all_curves():
            if curve.opts["name"] == name:
                curve.setVisible(shown)
        self._clear_readout()
        self._views.clear()

    def _all_curves(self) -> list:
        return [*self.curves.values(), *self.smooth_curves.values(), *self.overlay_curves.values()]

    def _axis_of(self, plot_id: str) -> str:
        """The x a plot is drawn over: the system lane is over time (relative when steps are chosen)."""
        if plot_id.startswith(SYSTEM) and self.x_axis == "step":
            return "relative"
        return self.x_axis

    def _set_x_axis(self, plot_id: str, plot: pg.PlotItem) -> None:
        """The plot's x axis; its label only where it is not the one chosen (the system lane over seconds when
        steps are): the controls name the x."""
        axis = self._axis_of(plot_id)
        wanted = pg.DateAxisItem if axis == "time" else pg.AxisItem
        if type(plot.getAxis("bottom")) is not wanted:
            plot.setAxisItems({"bottom": wanted(orientation="bottom")})
        bottom = plot.getAxis("bottom")
        if axis != self.x_axis:
            bottom.setLabel(X_AXIS_NAMES[axis])
        else:
            bottom.showLabel(False)

    # ------------------------------------------------------------ plots and curves

    def _plot(self, plot_id: str) -> pg.PlotItem:
        plot = self.plots.get(plot_id)
        if plot is None:
            plot = pg.PlotItem(axisItems={"left": _YAxis(orientation="left")})
            # A card: its title says what it shows (and the unit); no y label to overprint its neighbour's.
            plot.setTitle(plot_title(plot_id), size="10pt", color="#1a1a1a")
            plot.setMinimumHeight(MIN_PLOT_HEIGHT)
            plot.getAxis("left").enableAutoSIPrefix(False)  # 0.5, not 500 (x0.001)
            plot.getAxis("left").setWidth(56)  # the plots' left edges line up
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
        """The shown plots as cards in a grid, training ones first then the system lane; every plot over the same
        x unit shares one x range. Each plot has its place (among those the person wants): one that comes is
        added alone, the others stay (laying every plot out again stalled the window while a run streamed in). A
        live run's plots that every run fills (step time, the hosts' CPU and memory) are laid out from its start.
        A plot expanded (a double-click) is shown alone."""
        present = set(self._plot_ids()) | self._expected
        slots = [p for p in self.shown if not p.startswith(SYSTEM)] + [p for p in self.shown if p.startswith(SYSTEM)]
        wanted = [p for p in slots if p in present]
        if self.expanded is not None and self.expanded not in wanted:
            self.expanded = None
            self.all_button.hide()
        if self.expanded is not None:
            wanted, slots = [self.expanded], [self.expanded]
        columns = self._fitting_columns()
        if wanted == self._layout_plots and slots == self._slots and columns == self._columns:
            return
        layout = self.plot_area.ci
        if slots != self._slots or columns != self._columns:  # other plots or another grid: all of them again
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
                row, col = divmod(slots.index(plot_id), columns)
                layout.addItem(self._plot(plot_id), row=row, col=col)
        groups: dict[str, list[str]] = {}
        for plot_id in wanted:
            groups.setdefault(self._axis_of(plot_id), []).append(plot_id)
        for group in groups.values():
            for i, plot_id in enumerate(group):
                plot = self.plots[plot_id]
                link = self.plots[group[0]] if i else None
                if plot.getViewBox().linkedView(0) is not (link.getViewBox() if link else None):
                    plot.setXLink(link)
        rows = len({slots.index(p) // columns for p in wanted})
        self.plot_area.setMinimumHeight(0 if self.expanded else rows * (MIN_PLOT_HEIGHT + CARD_SPACING))
        self._layout_plots, self._slots, self._columns = wanted, slots, columns
        self._markers_placed = -1

    def _fitting_columns(self) -> int:
        """As many columns as cards of the least width fit beside each other (one, for a plot shown alone)."""
        if self.expanded is not None:
            return 1
        width = self.plot_scroll.viewport().width()
        return max(1, min(MAX_COLUMNS, width // MIN_PLOT_WIDTH))

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
            if name in self.hidden:
                curve.setVisible(False)
            if not smooth and name not in self._series:
                self._series[name] = (self._series_rank(owner, metric), self._pen(owner, metric),
                                      self._epoch_encoding(metric)[2] if metric.startswith(EPOCH)
                                      and is_cluster_wide(metric) else None)
        return curve

    def _series_rank(self, owner: str, metric: str) -> tuple:
        """Where a series stands in the series list: the cluster's, epochs and validation first, then the workers
        in cluster order, the hosts, the compared runs."""
        name = self._owner_name(owner, metric)
        if name in ("cluster", "epoch", "validation"):
            return (0, ("cluster", "epoch", "validation").index(name))
        if owner.startswith(HOST):
            host = owner[len(HOST):].split("/")[0]
            return (2, self.store.hosts.index(host) if host in self.store.hosts else len(self.store.hosts))
        return (1, self._color_index(owner))

    def _sync_series(self) -> None:
        """The series list has each series drawn now (those of curves gone, no more)."""
        self.series_list.show_series(self._series, self.hidden)

    def _remove_curve(self, key, smooth: bool = False) -> None:
        curve = (self.smooth_curves if smooth else self.curves).pop(key, None)
        if curve is None:
            return
        plot = self.plots.get(plot_of(key[1]))
        if plot is not None:
            plot.removeItem(curve)
        if not smooth:
            name = curve.opts["name"]
            if not any(c.opts["name"] == name for c in self.curves.values()):
                self._series.pop(name, None)
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
        WINDOW.busy()  # a timer's work: the reading threads give way till the loop waits again (console.threads)
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
            self._draw(store, metrics, self._drawn)
            for run_id, compared in list(self.compared.items()):
                self._draw(compared, metrics, self._overlay_drawn[run_id], run_id)
            self._place_markers()
            self._follow()
        self.redraws += 1

    def _draw(self, store: MetricsStore, metrics: list[str], drawn: dict, run_id: str | None = None) -> None:
        """Draw what changed in ``store``: the run shown's, or (``run_id``) a compared run's."""
        own = run_id is None
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
                if owner not in self.progress_view.bars and not owner.startswith(HOST) and own:
                    if owner in store.workers:  # a worker still waiting for its row: next frame
                        drawn.pop((owner, metric), None)
                        self._seen_version = -1
                        continue
                if ((owner, metric) not in self.curves) if own else \
                        ((run_id, owner, metric) not in self.overlay_curves):
                    if made == NEW_CURVES_PER_FRAME:  # the rest next frame
                        drawn.pop((owner, metric), None)
                        self._seen_version = -1
                        continue
                    made += 1
                log = self.log_y and not metric.startswith(SYSTEM)
                if metric.startswith(SYSTEM):
                    x, y = _with_gaps(x, y)
                curve = self._curve(owner, metric) if own else self._overlay_curve(run_id, owner, metric)
                y = _logged(y, log)
                curve.set_points(x, y, _robust_bounds(x, y) if _spiky(metric) else None)
                if smooth is not None and own and not metric.startswith(EPOCH):
                    sx, sy = smooth
                    sy = _logged(sy, log)
                    self._curve(owner, metric, smooth=True).set_points(
                        sx, sy, _robust_bounds(sx, sy) if _spiky(metric) else None)
                if own and is_cluster_wide(metric):  # drawn once: from the task that says it now (the first in
                    for stale in [k for k in self.curves if k[1] == metric and k[0] != owner]:  # order that has)
                        self._remove_curve(stale)
                        drawn.pop(stale, None)

    def _overlay_curve(self, run_id: str, owner: str, metric: str) -> "_Curve":
        """A compared run's curve: dashed, in the run's colour, behind the run shown's."""
        curve = self.overlay_curves.get((run_id, owner, metric))
        if curve is None:
            colour = self.compared_colour(run_id)
            pen = pg.mkPen(colour, width=2 if metric.startswith(EPOCH) else 1.5, style=Qt.DashLine)
            name = self._compared_names[run_id]
            curve = _Curve(pen=pen, name=name, skipFiniteCheck=True)
            curve.metric, curve.owner, curve.run_id = metric, owner, run_id
            self._plot(plot_of(metric)).addItem(curve)
            curve.setZValue(-1)
            if name in self.hidden:
                curve.setVisible(False)
            self.overlay_curves[(run_id, owner, metric)] = curve
            if name not in self._series:
                self._series[name] = ((3, self._compared_index[run_id]), pen, None)
        return curve

    def _curves_of(self, plot_id: str, compared: bool = True) -> list:
        """The curves of a plot (``compared``: the compared runs' too)."""
        own = [c for table in (self.curves, self.smooth_curves) for (_, metric), c in table.items()
               if plot_of(metric) == plot_id]
        return own + [c for (_, _, metric), c in self.overlay_curves.items() if plot_of(metric) == plot_id] \
            if compared else own

    def _follow(self) -> None:
        """Keep each following plot's view around its data: the plots over the same x unit share one x range,
        the run shown's (a longer compared run does not take it over); hidden series count for nothing. A live
        run's views leave room ahead; a finished run's fit its data.

        A view moves only when the data leaves it, or fills too little of it, and then with
        headroom: steady views let pyqtgraph keep its cached axes and bounds between redraws.
        """
        groups: dict[str, list[str]] = {}
        for plot_id in self._layout_plots:
            groups.setdefault(self._axis_of(plot_id), []).append(plot_id)
        ahead = 0.5 if self.live else 0.0
        for group in groups.values():
            bounds = {p: [c.bounds for c in self._curves_of(p) if c.bounds is not None and c.isVisible()]
                      for p in group}
            own = [c.bounds for p in group for c in self._curves_of(p, compared=False)
                   if c.bounds is not None and c.isVisible()]
            xs = own or [b for p in group for b in bounds[p]]
            if not xs:
                continue
            x0, x1 = min(b[0] for b in xs), max(b[1] for b in xs)
            for plot_id in group:
                vb = self.plots[plot_id].getViewBox()
                if any(vb.autoRangeEnabled()):  # the person pressed the "A" button: follow again
                    vb.disableAutoRange()
                    self.following[plot_id] = True
                    self._views.pop(plot_id, None)
                ys = [v for b in bounds[plot_id] if b[1] >= x0 and b[0] <= x1 for v in b[2:4] if v is not None]
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
                least = (MIN_X_SPAN if self._axis_of(plot_id) == "step" else 10.0) if self.live else 0.0
                end = max(x1 + ahead * width, x0 + least) if self.live else x1 + 0.02 * width
                view = ((x0 - (0 if self.live else 0.02 * width), end), (y0 - 0.08 * span, y1 + 0.08 * span))
                if not all(math.isfinite(v) for pair in view for v in pair):
                    continue  # steps or values a host made up (±1e308): the view stays where it is
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
                rows = self.readout_rows(plot_id, x)
                at = self.plot_area.mapTo(self, self.plot_area.mapFromScene(pos))
                more = max(0, len(rows) - READOUT_CURVES)
                self.value_table.show_rows(f"{plot_title(plot_id)} at {self._x_words(plot_id, x)}",
                                           rows[:READOUT_CURVES], more, at)
                self._show_hover_line(plot_id, x)
                return
        self._clear_readout()  # between the plots: nothing is read

    def _clear_readout(self) -> None:
        """No value table and no line across the plots (the mouse left them; the axis, plots or run changed)."""
        self.value_table.clear_rows()
        for plot, line in self._hover_lines:
            plot.removeItem(line)
        self._hover_lines = []

    def eventFilter(self, watched, event):  # noqa: N802 (Qt's name): the mouse left the plots; the grid's width
        if event.type() == QEvent.Leave and watched in (self.plot_area.viewport(), self.plot_scroll.viewport()):
            self._clear_readout()
        elif event.type() == QEvent.Resize and watched is self.plot_scroll.viewport():
            if self._layout_plots and self._fitting_columns() != self._columns:
                self._relayout()
        return super().eventFilter(watched, event)

    def _show_hover_line(self, plot_id: str, x: float) -> None:
        for plot, line in self._hover_lines:
            plot.removeItem(line)
        self._hover_lines = []
        axis = self._axis_of(plot_id)
        for other in self._layout_plots:
            if self._axis_of(other) == axis:
                line = pg.InfiniteLine(pos=x, angle=90, pen=pg.mkPen("#888", width=1))
                self.plots[other].addItem(line, ignoreBounds=True)
                self._hover_lines.append((self.plots[other], line))

    def _x_words(self, plot_id: str, x: float) -> str:
        axis = self._axis_of(plot_id)
        if axis == "step":
            return f"step {x:.0f}"
        if axis == "time":
            try:
                return dt.datetime.fromtimestamp(x).strftime("%H:%M:%S")
            except (OverflowError, OSError, ValueError):
                return "?"
        return f"{x:.1f} s"

    def readout_rows(self, plot_id: str, x: float) -> list[dict]:
        """Per visible series of a plot, the point nearest ``x``: {series, colour, value, smoothed, step, time}
        (smoothed: None without smoothing; step: None for a system sample), the run shown's first."""
        axis = self._axis_of(plot_id)
        rows = []
        for curve in [c for c in self._curves_of(plot_id) if c not in self.smooth_curves.values()]:
            if not curve.isVisible() or curve.xData is None or not len(curve.xData):
                continue
            run_id = getattr(curve, "run_id", None)
            store = self.compared.get(run_id) if run_id else self.store
            point = store.point_at(curve.owner, curve.metric, x, axis) if store is not None else None
            if point is None:
                continue
            step, when, value = point
            smoothed = None
            smooth = self.smooth_curves.get((curve.owner, curve.metric))
            if run_id is None and smooth is not None and smooth.yData is not None and len(smooth.yData):
                j = int(np.clip(np.searchsorted(smooth.xData, x), 0, len(smooth.yData) - 1))
                if j and abs(smooth.xData[j - 1] - x) <= abs(smooth.xData[j] - x):
                    j -= 1
                smoothed = float(smooth.yData[j])
                if self.log_y and not plot_id.startswith(SYSTEM):
                    smoothed = 10 ** smoothed if math.isfinite(smoothed) else smoothed
            name = curve.opts["name"]
            series = f"{name}: {self._owner_name(curve.owner, curve.metric)}" if run_id else name
            rows.append({"series": series, "colour": curve.opts["pen"].color().name(), "value": value,
                         "smoothed": smoothed, "step": step, "time": when})
        return rows

    # ------------------------------------------------------------ progress, badges, events

    def _on_slow_timer_timeout(self) -> None:
        """Progress lines with ETA, badges, the metric list and events: a few times a second is enough."""
        WINDOW.busy()
        store = self.store
        if self.series_list.count() != len(self._series) or self._series.keys() != set(self.series_list.names()):
            self._sync_series()  # curves came or went (a compared run's too)
        self._show_failure(store)
        if store.version == self._slow_version:
            return
        self._slow_version = store.version
        self._sync_metric_list()
        self._relayout()
        self._show_empty_state()
        if not self._detached:  # a late batch does not bring the ETA back
            self.progress_view.show_store(store)
        self._show_header()
        self.events_view.show_store(store)

    def _show_failure(self, store: MetricsStore) -> None:
        """The failure view on the first failed task in cluster order whose stderr went through the user's code
        (else the first failed one); none while no task is marked failed (a restart takes it away)."""
        failed = {task: why for task, (state, why) in store.states_snapshot().items() if state == Mark.FAILED}
        if not failed:
            if self._failure_shown is not None:
                self.failure_view.clear()
                self._failure_shown = None
            return
        tasks = [t for t in self.order if t in failed] + [t for t in failed if t not in self.order]
        key = (tuple(failed.items()), tuple(self.events_view.log_count(t) for t in tasks))
        if key == self._failure_shown:
            return
        self._failure_shown = key
        found = [(t, diagnosis.code_error(self.events_view.stderr_text(t))) for t in tasks]
        task, error = next(((t, e) for t, e in found if e is not None), (tasks[0], None))
        whole = diagnosis.last_traceback(self.events_view.stderr_text(task), own=True) if error is not None else ""
        self.failure_view.show_failure(task, failed[task], error, whole)

    def _on_failure_view_log_asked(self, task: str) -> None:
        self.events_view.show_log(task)
        if self.split.sizes()[1] == 0:  # the panel collapsed: open again
            self.set_side_panel_shown(True)

    def showEvent(self, event):  # noqa: N802 (Qt's name): curves were not fed while hidden
        self._seen_version = self._slow_version = -1
        self._drawn.clear()
        for drawn in self._overlay_drawn.values():
            drawn.clear()
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

    def picture(self) -> QImage:
        """The plots as a picture that stands alone: the run (name, state, duration, cluster, settings) over them, the
        key of every series drawn and the run's final values under them."""
        plots = self.plot_area.grab().toImage()
        width = max(plots.width(), 900)
        font = QFont(self.font())
        font.setPointSize(10)
        metrics = QFontMetrics(font)
        line = metrics.height() + 4
        h = self.run_header
        title = (f"{h.name} ({h.run_id})" if h is not None and h.name else h.run_id if h is not None else "tfcc")
        about = [part for part in (h.state if h else "", duration_text(self.store.runtime())
                                   if self.store.runtime() is not None else "", h.cluster if h else "",
                                   h.settings if h else "") if part]
        final = self.store.final_metrics()
        values = "final: " + "  ".join(f"{k} {metric_text(v)}" for k, v in final.items()) if final else ""
        key = [(name, pen) for name, (_, pen, _symbol) in sorted(self._series.items(), key=lambda kv: (kv[1][0], kv[0]))
               if name not in self.hidden]
        per_row = max(1, width // 260)
        key_rows = -(-len(key) // per_row)
        image = QImage(width, 2 * line + plots.height() + (key_rows + 2) * line + 8, QImage.Format_RGB32)
        image.fill(Qt.white)
        painter = QPainter(image)
        painter.setFont(font)
        painter.setPen(QColor("#222"))
        bold = QFont(font)
        bold.setBold(True)
        painter.setFont(bold)
        painter.drawText(8, line - 4, title)
        painter.setFont(font)
        painter.drawText(8, 2 * line - 4, " · ".join(about))
        painter.drawImage(0, 2 * line, plots)
        y = 2 * line + plots.height() + 4
        for i, (name, pen) in enumerate(key):
            row, col = divmod(i, per_row)
            x, top = 8 + col * 260, y + row * line
            painter.setPen(pg.mkPen(pen))
            painter.drawLine(x, top + line // 2, x + 28, top + line // 2)
            painter.setPen(QColor("#222"))
            painter.drawText(x + 34, top + line - 6, metrics.elidedText(name, Qt.ElideRight, 220))
        painter.drawText(8, y + key_rows * line + line - 6, values)
        painter.end()
        return image

    def export_png(self, path) -> bool:
        """``picture()`` saved as PNG at ``path`` (a person's export: see FileActions, which saves it on a thread)."""
        return self.picture().save(str(path))


def plot_title(plot_id: str) -> str:
    """A plot card's title: what it shows, with its unit; the system lane's say so."""
    label = plot_label(plot_id)
    return f"{label} · system" if plot_id.startswith(SYSTEM) else label


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
