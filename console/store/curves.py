"""The metrics store's curves: every source's table on one time axis, read for drawing and for a CSV (Qt-free).

A table is keyed by (owner, kind) (console.store.metrics says which); times are kept as float32 seconds from
the first time seen, and the views ask for wall time, time since the run's first record, or the global step.
"""

from __future__ import annotations

import csv
import math
import time
from contextlib import AbstractContextManager

import numpy as np

from console.store.metric_ids import EPOCH, SYSTEM, SYSTEM_METRICS, is_cluster_wide
from console.store.snapshot import Snapshot
from console.store.table import Table
from trainer.records import GLOBAL_STEP, number

LATEST = 1e11  # seconds since 1970: the year 5138; a later time is none a clock gives
_CURSOR = (None, None)  # the key of ``changed``'s ``seen`` that says where a call with a budget stopped


def _cell(text: str) -> str:
    """A host-given name as a CSV cell no spreadsheet runs: one that starts as a formula is quoted with '."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class Changes(dict):
    """What ``Curves.changed`` found; ``complete`` false: more is left for the next call."""

    complete = True


class Curves:
    """Every source's ``Table`` by (owner, kind), and the time axis they share: the run's earliest record
    (``origin``), its newest (``latest``) and the time the rows count from (``base``).

    It shares the store's lock: the methods said to be "under the lock" are called holding it, the others
    take it themselves.
    """

    def __init__(self, lock: AbstractContextManager, capacity: int):
        self._lock = lock
        self.capacity = capacity
        self.tables: dict[tuple[str, str], Table] = {}
        self.origin: float | None = None  # the time of the run's earliest record (relative time is from it)
        self.latest: float | None = None  # the newest record's time (with origin: how long the run has gone)
        self.base: float | None = None    # times are kept as float32 seconds from this (the first time seen)

    def clear(self) -> None:
        """No table and no time (under the lock)."""
        self.tables.clear()
        self.base = self.origin = self.latest = None

    def table(self, owner: str, kind: str) -> Table:
        """The table of (owner, kind), a new one if there is none (under the lock)."""
        table = self.tables.get((owner, kind))
        if table is None:
            table = self.tables[(owner, kind)] = Table(self.capacity, wide_x=kind == "sys")
        return table

    def times(self, records: list[dict]) -> np.ndarray:
        """The records' times as kept (from ``base``); the earliest so far is the origin (under the lock)."""
        ts = np.array([number(r.get("time")) for r in records])
        ts[~((ts >= 0) & (ts < LATEST))] = np.nan  # a time no clock gives (a host's 1e300) is no time
        finite = ts[np.isfinite(ts)]
        if len(finite):
            first, last = float(finite.min()), float(finite.max())
            self.origin = first if self.origin is None else min(self.origin, first)
            self.latest = last if self.latest is None else max(self.latest, last)
            if self.base is None:
                self.base = first
        return ts - (self.base or 0.0)

    def cut_after(self, task: str, step: float) -> None:
        """A task's step and epoch rows after ``step`` go (a restart redoes them) (under the lock)."""
        for kind in ("step", "epoch"):
            table = self.tables.get((task, kind))
            if table is not None:
                table.cut_after(step)

    # ------------------------------------------------------------ kept in a snapshot

    def kept(self) -> dict:
        """The snapshot's fields of the curves: each table's columns, and the times (under the lock)."""
        return {"tables": [(owner, kind, table.columns()) for (owner, kind), table in self.tables.items()],
                "origin": self.origin, "base": self.base}

    def rows(self, tables: list[tuple[str, str, list[str]]]):
        """Each of ``tables``' rows as the snapshot keeps them, one table's copy at a time under the lock: a
        snapshot of a big run costs no second store."""
        for owner, kind, columns in tables:
            with self._lock:
                table = self.tables[(owner, kind)]
                rows = slice(table._start, table._end)
                arrays = {"x": table._x[rows].copy(), "t": table._t[rows].copy()}
                arrays.update({str(j): table._cols[c][rows].copy() for j, c in enumerate(columns)})
            yield arrays

    def take_up(self, state: Snapshot) -> None:
        """The times of a snapshot (its rows come with ``add_rows``) (under the lock)."""
        self.base, self.origin = state.base, state.origin

    def add_rows(self, owner: str, kind: str, xs: np.ndarray, ts: np.ndarray, arrays: dict) -> None:
        """A snapshot's rows of one table (under the lock)."""
        self.table(owner, kind).extend(xs, ts, arrays)
        if len(ts) and np.isfinite(ts).any():  # the newest time, as ingest keeps it
            last = float(np.nanmax(ts)) + (self.base or 0.0)
            self.latest = last if self.latest is None else max(self.latest, last)

    # ------------------------------------------------------------ reading

    @staticmethod
    def where(metric: str) -> tuple[str, str]:
        """(table kind, column) of a metric id."""
        if metric.startswith(SYSTEM):
            return "sys", metric
        if metric.startswith(EPOCH):
            return "epoch", metric[len(EPOCH):]
        return "step", metric

    def metrics(self) -> list[str]:
        """Every metric id with a value so far, steps first, then epochs, then the system lane."""
        with self._lock:
            found = {"step": set(), "epoch": set(), "sys": set()}
            for (_, kind), table in self.tables.items():
                found[kind].update(table.columns())
        return (sorted(found["step"]) + sorted(EPOCH + c for c in found["epoch"])
                + [m for m in SYSTEM_METRICS if m in found["sys"]])

    def owners(self, metric: str) -> list[str]:
        """Who has values of ``metric``: tasks in the order they came, then hosts and GPUs."""
        kind, column = self.where(metric)
        with self._lock:
            return [owner for (owner, k), t in self.tables.items() if k == kind and column in t._cols]

    def series(self, owner: str, metric: str, max_points: int | None = None,
               x: str = "step") -> tuple[np.ndarray, np.ndarray]:
        """A copy of a metric's points (x in ``X_AXES`` terms), or at most ``max_points`` of them."""
        kind, column = self.where(metric)
        with self._lock:
            table = self.tables.get((owner, kind))
            if table is None or column not in table._cols:
                return np.empty(0), np.empty(0)
            xs, ys = table.reduced(column, max_points, self._axis(x, kind)) if max_points \
                else table.arrays(column, self._axis(x, kind))
            return self._shift(xs, x, kind), ys

    def point_at(self, owner: str, metric: str, x: float, axis: str = "step") -> tuple | None:
        """The row of a metric nearest ``x`` (in ``axis``'s terms): (global step, or None for a system sample; wall
        time, or None; value), or None without rows. What the value table at the cursor says of a series."""
        kind, column = self.where(metric)
        with self._lock:
            table = self.tables.get((owner, kind))
            if table is None or column not in table._cols or not len(table):
                return None
            xs = self._shift(table.x_of(self._axis(axis, kind)), axis, kind)
            i = int(np.clip(np.searchsorted(xs, x), 0, len(xs) - 1))
            if i and abs(xs[i - 1] - x) <= abs(xs[i] - x):
                i -= 1
            step = None if kind == "sys" else float(table.x_of("step")[i])
            when = float(table.x_of("time")[i]) + (self.base or 0.0)
            value = float(table._cols[column][table._start + i])
        return step, when if math.isfinite(when) else None, value

    @staticmethod
    def _axis(x: str, kind: str) -> str:
        return "time" if kind == "sys" or x != "step" else "step"

    def _shift(self, xs: np.ndarray, x: str, kind: str) -> np.ndarray:
        """Times are kept from ``base``: wall time adds it back, relative time counts from the origin."""
        # float64 first: a float32 time plus a float64 base stays float32 under NumPy 2 (128 s apart at 1.7e9)
        if x == "time":
            return xs.astype(np.float64) + (self.base or 0.0)
        if x == "relative" or kind == "sys":
            return xs.astype(np.float64) + ((self.base or 0.0) - (self.origin or 0.0))
        return xs

    def changed(self, seen: dict, metrics, max_points: int, x: str = "step",
                smoothing: float = 0.0, order: list[str] | None = None, budget: float | None = None) -> Changes:
        """Every series of ``metrics`` with rows that ``seen`` ({(owner, metric): table version}) has
        not seen: {(owner, metric): (x, y, smoothed y or None)}, at most ``max_points`` each, read
        under one hold of the lock (follow threads wait for one short read, not one per curve).
        Updates ``seen``. A cluster-wide metric comes from one task only: the first of ``order``
        (the cluster's task order) that has it. ``smoothed`` is (x, y) of the smoothed curve,
        reduced on its own. With ``budget`` (seconds), it stops once that much time went by and
        says so (``complete`` false): the rest comes at the next call, a view's next frame (a
        reattach brings every curve's whole history at once)."""
        deadline = None if budget is None else time.perf_counter() + budget
        wanted = {}
        for metric in metrics:
            kind, column = self.where(metric)
            wanted.setdefault(kind, []).append((metric, column))
        out = Changes()
        with self._lock:
            reference = {m: self._reference(m, order) for m in metrics if is_cluster_wide(m)}
            tables = list(self.tables.items())
            first = seen.get(_CURSOR, 0) % len(tables) if tables else 0  # where the last call stopped
            for i in range(len(tables)):
                (owner, kind), table = tables[(first + i) % len(tables)]
                for metric, column in wanted.get(kind, ()):
                    if column not in table._cols or seen.get((owner, metric)) == table.version:
                        continue
                    if out and deadline is not None and time.perf_counter() > deadline:  # one at least
                        out.complete = False
                        seen[_CURSOR] = (first + i) % len(tables)  # the next call begins here: each in turn
                        return out
                    if metric in reference and reference[metric] != owner:
                        continue
                    seen[(owner, metric)] = table.version
                    axis = self._axis(x, kind)
                    xs, ys = table.reduced(column, max_points, axis)
                    smooth = None
                    if smoothing > 0 and kind != "sys":
                        sx, sy = table.reduced(column, max_points, axis, smoothing)
                        smooth = (self._shift(sx, x, kind), sy)
                    out[(owner, metric)] = (self._shift(xs, x, kind), ys, smooth)
        return out

    def _reference(self, metric: str, order: list[str] | None) -> str | None:
        """The task a cluster-wide metric is read from (under the lock)."""
        kind, column = self.where(metric)
        for owner in (order or []):
            table = self.tables.get((owner, kind))
            if table is not None and column in table._cols:
                return owner
        return next((owner for (owner, k), t in self.tables.items() if k == kind and column in t._cols), None)

    def reference(self, metric: str, order: list[str] | None = None) -> str | None:
        """The task whose values of a cluster-wide ``metric`` stand for the cluster."""
        with self._lock:
            return self._reference(metric, order)

    def points(self, owner: str, metric: str = "loss") -> int:
        kind, column = self.where(metric)
        with self._lock:
            table = self.tables.get((owner, kind))
            return len(table) if table is not None and column in table._cols else 0

    def runtime(self) -> float | None:
        """Seconds from the run's first record to its newest (None before two times)."""
        if self.origin is None or self.latest is None:
            return None
        return self.latest - self.origin

    def write_csv(self, path) -> int:
        """Every point of every series, the system lane too, as CSV rows in long form
        (source, kind, global_step, time, metric, value); returns the rows written."""
        with self._lock:
            dumps = []
            for (owner, kind), table in self.tables.items():
                xs = table.x_of("step").copy()
                ts = table.x_of("time").astype(np.float64) + (self.base or 0.0)  # float64: see _shift
                dumps.append((owner, kind, xs, ts, {c: table._cols[c][table._start:table._end].astype(float)
                                                    for c in table.columns()}))
        rows = 0
        with open(path, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["source", "kind", GLOBAL_STEP, "time", "metric", "value"])
            for owner, kind, xs, ts, cols in dumps:
                prefix = {"step": "", "epoch": EPOCH, "sys": ""}[kind]
                step_texts = ["" if kind == "sys" or not math.isfinite(x) else str(int(x)) for x in xs]
                time_texts = [f"{t:.3f}" if math.isfinite(t) else "" for t in ts]
                for column, values in cols.items():
                    name = _cell(prefix + column)
                    for i, v in enumerate(values):
                        out.writerow([_cell(owner), kind, step_texts[i], time_texts[i], name,
                                      "" if np.isnan(v) else f"{v:.7g}"])
                        rows += 1
        return rows
