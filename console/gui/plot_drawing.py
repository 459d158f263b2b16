"""The Dashboard's frame: what changed in the stores drawn (at most 30 times a second), and views that follow the data.

Each curve gets at most ``MAX_POINTS`` points (a min/max reduction that keeps spikes); a frame makes a few rows and
curves and reduces for a budget of time, the rest the next frame, so that the window answers meanwhile.
"""

from __future__ import annotations

import math

from console.gui.curves import logged, robust_bounds, spiky, with_gaps
from console.store.metric_ids import EPOCH, HOST, SYSTEM, is_cluster_wide, plot_of
from console.store.metrics import MetricsStore
from console.threads import WINDOW

MAX_POINTS = 600         # per curve and redraw: 300 min/max pairs, one per 2-3 pixels of a plot
NEW_WORKERS_PER_FRAME = 4  # progress rows added per redraw
NEW_CURVES_PER_FRAME = 6   # curves made per redraw (the rest the next: a run's first records bring dozens)
MIN_X_SPAN = 100           # steps a view shows at least (fewer view moves early in a run)
FRAME_BUDGET = 0.015  # seconds of reducing new rows per frame and group of plots; the rest next frame


class PlotDrawing:
    """Each frame draws what changed since the last, and moves the views that follow the data. A part of
    ``Dashboard`` (its state is the Dashboard's, set in ``Dashboard.__init__``)."""

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
                    x, y = with_gaps(x, y)
                curve = self._curve(owner, metric) if own else self._overlay_curve(run_id, owner, metric)
                y = logged(y, log)
                curve.set_points(x, y, robust_bounds(x, y) if spiky(metric) else None)
                if smooth is not None and own and not metric.startswith(EPOCH):
                    sx, sy = smooth
                    sy = logged(sy, log)
                    self._curve(owner, metric, smooth=True).set_points(
                        sx, sy, robust_bounds(sx, sy) if spiky(metric) else None)
                if own and is_cluster_wide(metric):  # drawn once: from the task that says it now (the first in
                    for stale in [k for k in self.curves if k[1] == metric and k[0] != owner]:  # order that has)
                        self._remove_curve(stale)
                        drawn.pop(stale, None)

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
