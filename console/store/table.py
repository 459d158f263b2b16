"""The store's tables: one source's rows, bounded, reduced for drawing and smoothed (numpy only).

A ``Table`` holds (global step, time, one float32 column per field) rows, the newest ``capacity`` of them.
``reduced`` gives at most ``max_points`` of a column by a min/max ("peak") reduction that keeps spikes, and
``smoothed`` a time-weighted exponential moving average of it, both extended as rows come rather than
computed again.
"""

from __future__ import annotations

import math

import numpy as np


class Table:
    """Rows of (x: global step, t: time since the store's origin, one float32 column per field);
    the newest ``capacity`` rows are kept.

    ``reduced`` gives at most ``max_points`` points of a column for drawing. Buckets are a power
    of two rows wide, so the reduction of full buckets is kept and only new rows are reduced on
    the next read (a redraw costs the same at 100 rows or 100,000). A column that appears late
    (a user's metric) reads NaN before its first row.
    """

    EXACT_32 = 2 ** 24  # float32 holds every whole number up to this: global steps, exactly

    def __init__(self, capacity: int, wide_x: bool = False):
        self.capacity = capacity
        # x: a global step (float32, 4 bytes a row, until a step passes EXACT_32) or, ``wide_x``, a time
        self._x = np.empty(2 * capacity, dtype=np.float64 if wide_x else np.float32)
        self._t = np.empty(2 * capacity, dtype=np.float32)  # seconds from the store's origin: ms at a day
        self._cols: dict[str, np.ndarray] = {}
        self._start = 0
        self._end = 0
        self._dropped = 0          # rows that fell off the front, ever
        self._appended = 0         # rows appended, ever
        self._cuts = 0             # times a restart cut the newest rows
        self._peaks: dict = {}     # (column, smoothing) -> (bucket, dropped, upto, indices of peaks)
        self._smooth: dict = {}    # column -> _Smoothing

    def __len__(self) -> int:
        return self._end - self._start

    @property
    def appended(self) -> int:
        return self._appended

    @property
    def version(self) -> int:
        """Moves with every change: appends, and a restart's cut."""
        return self._appended + self._cuts

    def columns(self) -> list[str]:
        return list(self._cols)

    def _column(self, name: str) -> np.ndarray:
        col = self._cols.get(name)
        if col is None:
            col = self._cols[name] = np.empty(2 * self.capacity, dtype=np.float32)
            col[self._start:self._end] = np.nan
        return col

    def extend(self, xs: np.ndarray, ts: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Append rows: their steps, times and each field's values (a field not given reads NaN)."""
        n = len(xs)
        if not n:
            return
        self._appended += n
        if n > self.capacity:
            self._dropped += n - self.capacity
            xs, ts = xs[-self.capacity:], ts[-self.capacity:]
            values = {k: v[-self.capacity:] for k, v in values.items()}
            n = self.capacity
        for name in values:
            self._column(name)
        if self._x.dtype == np.float32 and np.nanmax(np.abs(xs), initial=0.0) > self.EXACT_32:
            self._x = self._x.astype(np.float64)  # steps float32 cannot hold exactly
        if self._end + n > len(self._x):  # compact: the newest rows to the front
            keep = min(len(self), self.capacity - n)
            self._dropped += len(self) - keep
            src = slice(self._end - keep, self._end)
            for arr in (self._x, self._t, *self._cols.values()):
                arr[:keep] = arr[src]
            self._start, self._end = 0, keep
        new = slice(self._end, self._end + n)
        self._x[new] = xs
        self._t[new] = ts
        for name, col in self._cols.items():
            v = values.get(name)
            col[new] = np.nan if v is None else v
        self._end += n
        over = self._end - self._start - self.capacity
        if over > 0:
            self._start += over
            self._dropped += over

    def cut_after(self, x: float) -> int:
        """Drop the newest rows beyond step ``x`` (a restart redoes them from ``x``); how many went."""
        xs = self._x[self._start:self._end]
        keep = int(np.searchsorted(xs, x, side="right"))
        gone = len(xs) - keep
        if gone:
            self._end = self._start + keep
            self._cuts += 1
            self._peaks.clear()
            self._smooth.clear()
        return gone

    def last_x(self) -> float:
        return float(self._x[self._end - 1]) if len(self) else -math.inf

    def x_of(self, which: str) -> np.ndarray:
        """The rows' x in one of ``X_AXES`` terms (``time``: the store adds its origin)."""
        return (self._x if which == "step" else self._t)[self._start:self._end]

    def arrays(self, column: str, which: str = "step") -> tuple[np.ndarray, np.ndarray]:
        col = self._cols.get(column)
        x = self.x_of(which).copy()
        if col is None:
            return x, np.full(len(x), np.nan)
        return x, col[self._start:self._end].astype(float)

    def smoothed(self, column: str, weight: float, which: str) -> np.ndarray:
        """The column smoothed: a debiased time-weighted EMA over ``which`` (see ``_Smoothing``),
        kept and extended as rows arrive."""
        s = self._smooth.get(column)
        if s is None or s.key != (weight, which) or s.dropped_at_start > self._dropped:
            s = self._smooth[column] = _Smoothing(weight, which)
        return s.values(self, column)

    def reduced(self, column: str, max_points: int, which: str = "step",
                smoothing: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """At most ``max_points`` points of ``column`` (smoothed with weight ``smoothing`` > 0)."""
        x = self.x_of(which)
        if smoothing > 0:
            y = self.smoothed(column, smoothing, which)
        else:
            col = self._cols.get(column)
            y = col[self._start:self._end] if col is not None else np.full(len(x), np.nan, dtype=np.float32)
        n = len(x)
        if n <= max_points:
            return x.copy(), y.astype(float)
        bucket = 1
        while n / bucket > (max_points - 2) / 2:  # 2: the first and last points are always drawn
            bucket *= 2
        key = (column, smoothing, which if smoothing > 0 else None)
        cached = self._peaks.get(key)
        if cached is None or cached[:2] != (bucket, self._dropped):
            cached = (bucket, self._dropped, 0, np.empty(0, dtype=np.int64))
        _, _, upto, idx = cached
        full = n // bucket * bucket
        if full > upto:
            idx = np.concatenate([idx, upto + _bucket_peaks(y[upto:full], bucket)])
            upto = full
        self._peaks[key] = (bucket, self._dropped, upto, idx)
        parts = [np.zeros(1, dtype=np.int64), idx]
        if full < n:
            parts.append(full + _bucket_peaks(y[full:], n - full))
        parts.append(np.array([n - 1]))
        every = np.concatenate(parts)
        return x[every], y[every].astype(float)


def _bucket_peaks(y: np.ndarray, size: int) -> np.ndarray:
    """Each ``size``-row bucket's min and max rows, in order (``len(y)`` is a multiple of size)."""
    buckets = len(y) // size
    yy = y.reshape(buckets, size)
    nan = np.isnan(yy)
    lo = np.argmin(np.where(nan, np.inf, yy), axis=1)
    hi = np.argmax(np.where(nan, -np.inf, yy), axis=1)
    base = np.arange(buckets) * size
    out = np.empty(2 * buckets, dtype=np.int64)
    out[0::2], out[1::2] = base + np.minimum(lo, hi), base + np.maximum(lo, hi)
    return out


class _Smoothing:
    """A debiased, time-weighted exponential moving average of one column, extended as rows come.

    Each point weighs as much as the stretch of x it stands for (its distance from the previous
    one), and decays by exp(-Δx / tau): dense and sparse stretches count alike, unlike a per-point
    EMA (TensorBoard's), which lets dense stretches pull the curve. Dividing by the summed weights
    removes the start-up bias. ``weight`` (0-1) is the per-point EMA weight it matches on evenly
    spaced points: tau = -median Δx / ln(weight). Non-finite points are skipped (the raw curve
    shows them as gaps).
    """

    def __init__(self, weight: float, which: str):
        self.key = (weight, which)
        self.weight = min(max(weight, 1e-6), 0.999)
        self.which = which
        self.tau: float | None = None
        self.spacing = 1.0
        self.values_: np.ndarray = np.empty(0, dtype=np.float32)
        self.upto = 0                    # rows (counted from the start of the table, ever) done
        self.dropped_at_start = 0
        self.carry: tuple | None = None  # (x, numerator, denominator) at the last row done

    def values(self, table: Table, column: str) -> np.ndarray:
        n_all = table._dropped + len(table)       # rows ever kept, counting the dropped
        x = table.x_of(self.which)
        col = table._cols.get(column)
        if col is None:
            return np.full(len(x), np.nan, dtype=np.float32)
        y = col[table._start:table._end]
        if self.tau is None:
            head = x[:2000]
            gaps = np.diff(head)
            gaps = gaps[np.isfinite(gaps) & (gaps > 0)]
            spacing = float(np.median(gaps)) if len(gaps) else 1.0
            self.tau = -spacing / math.log(self.weight)
            self.spacing = spacing
            self.dropped_at_start = table._dropped
        new_from = max(self.upto, table._dropped) - table._dropped  # a row index into x / y
        if new_from < len(x):
            out, self.carry = _ema(x[new_from:], y[new_from:], self.tau, self.spacing, self.carry,
                                   x[new_from - 1] if new_from else None)
            self.values_ = np.concatenate([self.values_, out])
            self.upto = n_all
        keep = len(x)
        if len(self.values_) > keep:  # rows fell off the front
            self.values_ = self.values_[-keep:]
        return self.values_


def _ema(x: np.ndarray, y: np.ndarray, tau: float, spacing: float, carry, x_before) -> tuple[np.ndarray, tuple]:
    """The time-weighted EMA of rows (x, y) going on from ``carry`` (the first row of all weighs
    ``spacing``, a typical gap); vectorised in blocks whose x spans at most 500 tau (exp stays finite)."""
    x = np.maximum.accumulate(np.asarray(x, dtype=float))
    y = np.asarray(y, dtype=float)
    gaps = np.diff(x, prepend=x[0] if x_before is None else x_before)
    weights = np.minimum(gaps, 5 * tau)
    if x_before is None:
        weights[0] = spacing
    good = np.isfinite(y) & np.isfinite(x)
    wy = np.where(good, weights * np.where(good, y, 0.0), 0.0)
    w = np.where(good, weights, 0.0)
    out = np.empty(len(x), dtype=np.float32)
    i = 0
    while i < len(x):
        xr, num, den = carry if carry is not None else (x[i], 0.0, 0.0)
        j = max(i + 1, int(np.searchsorted(x, xr + 500 * tau, side="right")))
        grow = np.exp(np.minimum((x[i:j] - xr) / tau, 700.0))
        n = (num + np.cumsum(wy[i:j] * grow)) / grow
        d = (den + np.cumsum(w[i:j] * grow)) / grow
        with np.errstate(invalid="ignore", divide="ignore"):
            out[i:j] = np.where(d > 0, n / d, np.nan)
        carry = (float(x[j - 1]), float(n[-1]), float(d[-1]))
        i = j
    return out, carry
