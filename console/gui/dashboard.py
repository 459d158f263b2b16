"""The live dashboard: every metric of a run, per worker or once for the cluster, and the system lane.

Each task's progress row (``progress_view``) is above the plots, the events and logs (``events_view``) beside, Why
slow? (``speed_view``) under them; Where are they? (``where_view``) opens over the plots when asked.
The plots are the Dashboard's parts of one kind of work each: the grid of cards (``plot_grid``), the series and
their curves (``plot_series``), the frame that draws them (``plot_drawing``), the markers and the read-out at
the cursor (``plot_readout``); the bars over them are ``reading_aids``.

Curves are redrawn from the ``MetricsStore`` by a timer (at most 30 Hz) and only when the
store changed, never once per sample. The reading aids (smoothing, log y, the x axis, which
plots are shown) are the person's choices: ``view()`` gives them, ``view_changed`` says
when they change, ``apply_view`` restores them.
"""

from __future__ import annotations

import html

import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QImage
from PySide6.QtWidgets import (QFrame, QLabel, QListWidget, QListWidgetItem, QScrollArea, QSplitter, QStackedWidget,
                               QVBoxLayout, QWidget)

from console import diagnosis
from console.gui.colors import worker_color
from console.gui.curves import Curve, PlotArea
from console.gui.events_view import EventsView
from console.gui.failure_view import FailureView
from console.gui.picture import run_picture
from console.gui.plot_drawing import PlotDrawing
from console.gui.plot_grid import CARD_SPACING, PlotGrid
from console.gui.plot_parts import SeriesList, ValueTable
from console.gui.plot_readout import PlotReadout
from console.gui.plot_series import PlotSeries
from console.gui.progress_view import ProgressView
from console.gui.reading_aids import CompareChips, ViewControls
from console.gui.run_header import DETACHED, RunHeader, RunHeaderLine
from console.gui.speed_view import SpeedView
from console.gui.where_view import WhereView
from console.states import Mark
from console.store.metric_ids import DEFAULT_PLOTS, SYSTEM, X_AXES, plot_of
from console.store.metrics import MetricsStore
from console.threads import WINDOW
from trainer.tf_config import TRAINING_ROLES

REFRESH_MS = 33          # at most 30 redraws a second
SLOW_REFRESH_MS = 250      # progress lines, ETA, straggler marks, the metric list and the events list
WHERE_SHARE = 0.5         # of the room under the header, the Where view's when it opens (over the plots)
EVENTS_WIDTH = 330        # the events and logs pane at first (the person resizes it; the window remembers)
PER_WORKER_AT_START = ("step_time",)  # every training task reports it: its curves are made at Start
LIVE_PLOTS = ("step_time", "sys:cpu_cores", "sys:memory_gb")  # a live run fills them (training, its agents' samples)

NO_RUN = ("<p style='font-size:13pt'><b>No run yet</b></p><p>Set the hosts and tasks in the <b>Setup panel</b> "
          "(View ▸ Setup panel, Ctrl+0), then "
          "<b>Run ▸ Check</b> (Ctrl+K) to test them and <b>Run ▸ Deploy &amp; Start</b> (F5) to train: each plot "
          "fills here as the numbers come.</p><p>The <b>Runs</b> tab opens an earlier run.</p>")


class Dashboard(PlotGrid, PlotSeries, PlotDrawing, PlotReadout, QWidget):
    """The page of a run: its header and progress over the plots, the events, logs and Why slow? beside them."""

    view_changed = Signal(dict)  # the person changed a reading aid: view()
    renamed = Signal(str, str)   # the person named the run shown: run id, name
    comparison_removed = Signal(str)  # the person took a compared run away (its chip's ×): its run id
    side_panel_toggled = Signal(bool)  # the events, logs and Why slow? panel was shown (True) or collapsed
    offered_run_opened = Signal(str)   # the person opened the run the empty Dashboard offered: its id

    def __init__(self, store: MetricsStore | None = None, parent=None):
        super().__init__(parent)
        # The state of the whole page, its plot parts' (plot_grid, plot_series, plot_drawing, plot_readout) too.
        self.store = store or MetricsStore()
        self.order: list[str] = []          # task names in cluster order (colours follow it)
        self.curves: dict[tuple[str, str], Curve] = {}          # (owner, metric) -> its raw curve
        self.smooth_curves: dict[tuple[str, str], Curve] = {}   # (owner, metric) -> its smoothed curve
        self.overlay_curves: dict[tuple[str, str, str], Curve] = {}  # (run id, owner, metric) -> a compared run's
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

        controls = self.controls = ViewControls()  # the reading aids' bar; its widgets are named here too
        self.smoothing_slider, self.smoothing_label = controls.smoothing_slider, controls.smoothing_label
        self.log_box, self.x_box = controls.log_box, controls.x_box
        self.fit_button, self.all_button = controls.fit_button, controls.all_button
        self.fit_button.clicked.connect(self._on_fit_button_clicked)
        self.all_button.clicked.connect(self._on_all_button_clicked)
        self.chip_row = CompareChips()  # the runs compared
        self.chips = self.chip_row.chips
        self.chip_row.chip_clicked.connect(self._on_chip_row_chip_clicked)
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
        self.plot_area = PlotArea()
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
        self.where_view = WhereView()        # where are they? (asked beside Why slow?; opens over the plots)
        self.speed_view.add_beside(self.where_view.button)
        self.where_view.opened.connect(self._on_where_view_opened)

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
        self.header_line = RunHeaderLine()
        self.header, self.rename_button = self.header_line.header, self.header_line.rename_button
        self.header_line.renamed.connect(self._on_header_line_renamed)
        left_layout.addWidget(self.header_line)
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
        plots = QWidget()  # each task's progress, the reading aids and the plots: under the Where view, when shown
        plots_layout = QVBoxLayout(plots)
        plots_layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.progress_view, controls, self.chip_row):
            plots_layout.addWidget(widget)
        plots_layout.addWidget(plots_row, 1)
        body = self.body = QSplitter(Qt.Vertical)
        body.addWidget(self.where_view)
        body.addWidget(plots)
        body.setCollapsible(1, False)
        body.setStretchFactor(1, 1)
        left_layout.addWidget(body, 1)
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
        self.where_view.clear()
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
        self.header_line.set_run(header)
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

    @property
    def run_header(self) -> RunHeader | None:
        """The run shown, as the header says it (None: no run)."""
        return self.header_line.run_header

    def _show_header(self) -> None:
        self.header_line.show_run(self.store, self._detached)

    def _on_header_line_renamed(self, run_id: str, name: str) -> None:
        self._show_header()
        self.renamed.emit(run_id, name)

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

    def _show_chips(self) -> None:
        self.chip_row.show_runs([(run_id, self._compared_names[run_id], self.compared_colour(run_id))
                                 for run_id in self.compared])

    def _on_chip_row_chip_clicked(self, run_id: str) -> None:
        self.remove_comparison(run_id)
        self.comparison_removed.emit(run_id)

    def chip_texts(self) -> list[str]:
        """What the compare chips say, in order."""
        return self.chip_row.texts()

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
            if isinstance(curve, Curve) and not metric.startswith(SYSTEM):
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

    def eventFilter(self, watched, event):  # noqa: N802 (Qt's name): the mouse left the plots; the grid's width
        if event.type() == QEvent.Leave and watched in (self.plot_area.viewport(), self.plot_scroll.viewport()):
            self._clear_readout()
        elif event.type() == QEvent.Resize and watched is self.plot_scroll.viewport():
            if self._layout_plots and self._fitting_columns() != self._columns:
                self._relayout()
        return super().eventFilter(watched, event)

    # ------------------------------------------------------------ progress, badges, events

    def _worker_row(self, task: str) -> None:
        if task not in self.progress_view.bars:
            self.progress_view.add_row(task, worker_color(self._color_index(task)))

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

    def _on_where_view_opened(self) -> None:
        """The Where view opens over the plots with half the room, its verdict and groups whole (the person drags
        the line between them)."""
        total = sum(self.body.sizes()) or self.body.height()
        want = max(self.where_view.minimumSizeHint().height(), total * WHERE_SHARE)
        self.body.setSizes([int(want), max(0, int(total - want))])

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
        key = [(name, pen) for name, (_, pen, _symbol) in sorted(self._series.items(), key=lambda kv: (kv[1][0], kv[0]))
               if name not in self.hidden]
        return run_picture(self.plot_area.grab().toImage(), self.font(), self.run_header, self.store, key)

    def export_png(self, path) -> bool:
        """``picture()`` saved as PNG at ``path`` (a person's export: see FileActions, which saves it on a thread)."""
        return self.picture().save(str(path))
