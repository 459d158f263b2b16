"""The Dashboard's series: each curve made once with its pen and name, compared runs' dashed, the series list."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from console.gui.colors import CLUSTER, EPOCH as EPOCH_PEN, VALIDATION, compared_color, host_encoding, worker_color
from console.gui.curves import Curve, EpochCurve
from console.store.metric_ids import EPOCH, HOST, SYSTEM, is_cluster_wide, plot_of
from console.store.metrics import MetricsStore


class PlotSeries:
    """The curves of every series: a worker's, the cluster's, the epochs', a host's, a compared run's; their pens
    and names, and the series list that hides or shows them. A part of ``Dashboard`` (its state is the Dashboard's,
    set in ``Dashboard.__init__``)."""

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

    def _curve(self, owner: str, metric: str, smooth: bool = False) -> "Curve":
        table = self.smooth_curves if smooth else self.curves
        curve = table.get((owner, metric))
        if curve is None:
            # PlotCurveItem, not PlotDataItem: the points are already reduced, and the
            # wrapper's per-update work was a third of a frame.
            faint = self.smoothing > 0 and not smooth and not metric.startswith(SYSTEM)
            pen = self._pen(owner, metric, faint=faint)
            if metric.startswith(EPOCH):  # a few points, one per epoch: each one shown
                curve = EpochCurve(pen=pen, name=self._owner_name(owner, metric), symbolSize=7,
                                    symbol=self._epoch_encoding(metric)[2],
                                    symbolBrush=pen.color() if not metric[len(EPOCH):].startswith("val_")
                                    else pg.mkBrush("w"), symbolPen=pen.color())
            else:
                curve = Curve(pen=pen, name=self._owner_name(owner, metric), skipFiniteCheck=True)
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

    def _overlay_curve(self, run_id: str, owner: str, metric: str) -> "Curve":
        """A compared run's curve: dashed, in the run's colour, behind the run shown's."""
        curve = self.overlay_curves.get((run_id, owner, metric))
        if curve is None:
            colour = self.compared_colour(run_id)
            pen = pg.mkPen(colour, width=2 if metric.startswith(EPOCH) else 1.5, style=Qt.DashLine)
            name = self._compared_names[run_id]
            curve = Curve(pen=pen, name=name, skipFiniteCheck=True)
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

    def _on_series_list_toggled(self, name: str, shown: bool) -> None:
        (self.hidden.discard if shown else self.hidden.add)(name)
        for curve in self._all_curves():
            if curve.opts["name"] == name:
                curve.setVisible(shown)
        self._clear_readout()
        self._views.clear()

    def _all_curves(self) -> list:
        return [*self.curves.values(), *self.smooth_curves.values(), *self.overlay_curves.values()]
