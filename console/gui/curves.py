"""The Dashboard's pyqtgraph items (its curves, y axis and canvas) and what a curve shows: bounds, gaps, a log y."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg

from console.store.metric_ids import plot_of
from console.threads import WINDOW

EMPTY = np.empty(0)
SAMPLE_GAP_SECONDS = 5.0  # system samples come every second: a pause this long (and 5 x the usual) is a gap
SAMPLE_GAP_FACTOR = 5


class Curve(pg.PlotCurveItem):
    """A curve whose data bounds are given with its data (pyqtgraph would recompute them with
    NaN-aware reductions four times per curve and paint)."""

    bounds = None     # (x0, x1, y0, y1, all finite) of what it shows

    def set_points(self, x: np.ndarray, y: np.ndarray, bounds=None) -> None:
        bounds = bounds or bounds_of(x, y)
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


class EpochCurve(pg.PlotDataItem):
    """Values per epoch (a few points): a line with each point marked."""

    bounds = None

    def set_points(self, x: np.ndarray, y: np.ndarray, bounds=None) -> None:
        self.bounds = bounds or bounds_of(x, y)
        self.setData(x, y, connect="finite")

    def clear_points(self) -> None:
        self.bounds = None
        self.setData(EMPTY, EMPTY)


def bounds_of(x: np.ndarray, y: np.ndarray):
    """(x0, x1, y0, y1, all finite) of points in x order."""
    finite = np.isfinite(y)
    every = bool(finite.all())
    if every:
        return float(x[0]), float(x[-1]), float(y.min()), float(y.max()), True
    if not finite.any():
        return float(x[0]), float(x[-1]), None, None, False
    return float(x[0]), float(x[-1]), float(y[finite].min()), float(y[finite].max()), False


NEWEST_SHOWN = 5  # a robust range holds the newest points whatever they are (a slowdown that lasts is no spike)


def spiky(metric: str) -> bool:
    """A duration (a step's time, a wait): its first steps (tracing, a warm-up) or a pause spike far above the
    rest, which must not set the plot's range."""
    return plot_of(metric) == "step_time" or metric.endswith(("_time", "_seconds", "_ms"))


def robust_bounds(x: np.ndarray, y: np.ndarray):
    """``bounds_of`` with a y top that spikes do not set: the highest value under Tukey's far fence (the third
    quartile plus three interquartile ranges, at least 5 % of it); a spike is still drawn, above the view."""
    bounds = bounds_of(x, y)
    finite = y[np.isfinite(y)]
    if len(finite) < 8 or bounds[3] is None:
        return bounds
    q1, q3 = np.quantile(finite, (0.25, 0.75))
    fence = q3 + 3 * max(q3 - q1, 0.05 * abs(q3))
    top = max(float(finite[finite <= fence].max()), float(finite[-NEWEST_SHOWN:].max()))  # a lasting change shows
    if not top > bounds[2]:
        return bounds  # most values alike (a metric mostly 0): nothing to call a spike
    return bounds[0], bounds[1], bounds[2], top, bounds[4]


class YAxis(pg.AxisItem):
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


class PlotArea(pg.GraphicsLayoutWidget):
    """The plots' canvas; its paint is the window's work, which the reading threads give way to."""

    def paintEvent(self, event):  # noqa: N802 (Qt's name)
        WINDOW.busy()
        super().paintEvent(event)


def with_gaps(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def logged(y: np.ndarray, log: bool) -> np.ndarray:
    """y as drawn: its log10 on a log axis (values <= 0 become gaps)."""
    if log:
        y = np.where(y > 0, np.log10(np.where(y > 0, y, 1.0)), np.nan)
    return y
