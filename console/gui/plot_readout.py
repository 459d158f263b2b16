"""The Dashboard's lines across its plots: a marker at each restart, stall and first non-finite value, and the read-out
at the cursor (a line across every plot over the same x, and the value table of the plot under it)."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from console.gui.plot_grid import plot_title
from console.store.metric_ids import SYSTEM
from console.store.metrics import Marker
from console.text import marker_label, marker_text

READOUT_CURVES = 12        # rows of the value table at the cursor (the rest are counted)
MARKER_PENS = {Marker.RESTART: ("#b00020", Qt.DashLine), Marker.STALL: ("#E69F00", Qt.DashLine),
               Marker.NAN: ("#b00020", Qt.DotLine)}


class PlotReadout:
    """The markers drawn across the plots, and what is read at the cursor. A part of ``Dashboard`` (its state is the
    Dashboard's, set in ``Dashboard.__init__``)."""

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
