"""The Dashboard's plots as cards in a grid: making them, their x axes, where each stands, the list that offers them."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QListWidgetItem

from console.gui.curves import YAxis
from console.gui.reading_aids import X_AXIS_NAMES
from console.store.metric_ids import DEFAULT_PLOTS, SYSTEM, plot_label, plot_of

MIN_PLOT_HEIGHT = 200      # a plot card's least height: more cards than fit scroll
MIN_PLOT_WIDTH = 360       # a card's least width: the grid has as many columns as fit (up to MAX_COLUMNS)
MAX_COLUMNS = 3
CARD_SPACING = 12


class PlotGrid:
    """The plots as cards in a grid, one shown alone at a double-click. A part of ``Dashboard`` (its state is the
    Dashboard's, set in ``Dashboard.__init__``)."""

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

    def _plot(self, plot_id: str) -> pg.PlotItem:
        plot = self.plots.get(plot_id)
        if plot is None:
            plot = pg.PlotItem(axisItems={"left": YAxis(orientation="left")})
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


def plot_title(plot_id: str) -> str:
    """A plot card's title: what it shows, with its unit; the system lane's say so."""
    label = plot_label(plot_id)
    return f"{label} · system" if plot_id.startswith(SYSTEM) else label


def _list_rank(plot_id: str) -> tuple:
    """Where a plot stands in the metric list: the usual ones first, then by name; the system lane last."""
    return (plot_id.startswith(SYSTEM), DEFAULT_PLOTS.index(plot_id) if plot_id in DEFAULT_PLOTS else len(DEFAULT_PLOTS),
            plot_id)
