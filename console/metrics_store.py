"""Live metrics of a run, per worker, in bounded buffers (Qt-free).

Follow threads ``ingest`` records as they arrive; a view reads ``series`` at its
own pace (at most 30 times a second) and redraws only when ``version`` moved.
Each (worker, metric) keeps its newest ``capacity`` points; a view asks for at
most ``max_points`` and gets a min/max ("peak") reduction that keeps spikes.
"""

from __future__ import annotations

import csv
import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from console import text

METRICS = ("loss", "step_time", "examples_per_sec")
LABELS = {"loss": "loss (global batch, all workers)", "step_time": "step time (s)", "examples_per_sec": "examples / s (per worker)"}


class Series:
    """A ring of (x, y) float points: the newest ``capacity`` are kept.

    ``reduced`` gives at most ``max_points`` points for drawing. Buckets are a power
    of two points wide, so the reduction of full buckets is kept and only new points
    are reduced on the next read (a redraw costs the same at 100 points or 100,000).
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._x = np.empty(2 * capacity)
        self._y = np.empty(2 * capacity)
        self._start = 0
        self._end = 0
        self._dropped = 0          # points that fell off the front, ever
        self._appended = 0         # points appended, ever
        self._cuts = 0             # times a restart cut the newest points
        self._cache_key = None     # (bucket size, dropped) the cached reduction is for
        self._cache_x = np.empty(0)
        self._cache_y = np.empty(0)
        self._cache_upto = 0       # points (from the front) covered by the cache

    def __len__(self) -> int:
        return self._end - self._start

    @property
    def appended(self) -> int:
        return self._appended

    def append(self, x: float, y: float) -> None:
        if self._end == len(self._x):  # compact: keep the newest capacity points at the front
            keep = self.capacity - 1
            self._x[:keep] = self._x[self._end - keep:self._end]
            self._y[:keep] = self._y[self._end - keep:self._end]
            self._start, self._end = 0, keep
        self._x[self._end] = x
        self._y[self._end] = y
        self._end += 1
        self._appended += 1
        if self._end - self._start > self.capacity:
            self._start += 1
            self._dropped += 1

    def extend(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """Append many points at once (array copies: a follow message's steps in microseconds)."""
        n = len(xs)
        self._appended += n
        if n > self.capacity:
            self._dropped += n - self.capacity
            xs, ys, n = xs[-self.capacity:], ys[-self.capacity:], self.capacity
        if self._end + n > len(self._x):  # compact: the newest points to the front
            keep = min(len(self), self.capacity - n)
            self._dropped += len(self) - keep
            self._x[:keep] = self._x[self._end - keep:self._end]
            self._y[:keep] = self._y[self._end - keep:self._end]
            self._start, self._end = 0, keep
        self._x[self._end:self._end + n] = xs
        self._y[self._end:self._end + n] = ys
        self._end += n
        over = self._end - self._start - self.capacity
        if over > 0:
            self._start += over
            self._dropped += over

    @property
    def version(self) -> int:
        """Moves with every change: appends, and a restart's cut."""
        return self._appended + self._cuts

    def cut_after(self, x: float) -> int:
        """Drop the newest points beyond ``x`` (a restart redoes them from ``x``); how many went."""
        xs = self._x[self._start:self._end]
        keep = int(np.searchsorted(xs, x, side="right"))
        gone = len(xs) - keep
        if gone:
            self._end = self._start + keep
            self._cuts += 1
            self._cache_key, self._cache_upto = None, 0
            self._cache_x, self._cache_y = np.empty(0), np.empty(0)
        return gone

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x[self._start:self._end].copy(), self._y[self._start:self._end].copy()

    def reduced(self, max_points: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = self._x[self._start:self._end], self._y[self._start:self._end]
        n = len(x)
        if n <= max_points:
            return x.copy(), y.copy()
        bucket = 1
        while n / bucket > (max_points - 2) / 2:  # 2: the first and last points are always drawn
            bucket *= 2
        key = (bucket, self._dropped)
        if key != self._cache_key:
            self._cache_key, self._cache_upto = key, 0
            self._cache_x, self._cache_y = np.empty(0), np.empty(0)
        full = n // bucket * bucket
        if full > self._cache_upto:
            nx, ny = _bucket_peaks(x[self._cache_upto:full], y[self._cache_upto:full], bucket)
            self._cache_x = np.concatenate([self._cache_x, nx])
            self._cache_y = np.concatenate([self._cache_y, ny])
            self._cache_upto = full
        parts_x, parts_y = [x[:1], self._cache_x], [y[:1], self._cache_y]
        if full < n:
            tx, ty = _bucket_peaks(x[full:], y[full:], n - full)
            parts_x.append(tx)
            parts_y.append(ty)
        parts_x.append(x[-1:])
        parts_y.append(y[-1:])
        return np.concatenate(parts_x), np.concatenate(parts_y)


def _bucket_peaks(x: np.ndarray, y: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Each ``size``-point bucket's min and max points, in x order (``len(x)`` is a multiple of size)."""
    buckets = len(x) // size
    yy = y.reshape(buckets, size)
    xx = x.reshape(buckets, size)
    nan = np.isnan(yy)
    lo = np.argmin(np.where(nan, np.inf, yy), axis=1)
    hi = np.argmax(np.where(nan, -np.inf, yy), axis=1)
    first, second = np.minimum(lo, hi), np.maximum(lo, hi)
    rows = np.arange(buckets)
    out_x = np.empty(2 * buckets)
    out_y = np.empty(2 * buckets)
    out_x[0::2], out_x[1::2] = xx[rows, first], xx[rows, second]
    out_y[0::2], out_y[1::2] = yy[rows, first], yy[rows, second]
    return out_x, out_y


@dataclass
class WorkerProgress:
    epoch: int = 0
    step: int = 0
    steps_per_epoch: int = 0
    epochs: int = 0
    global_step: int = 0
    first_time: float | None = None
    last_time: float | None = None
    recent_step_times: list = field(default_factory=list)

    @property
    def fraction(self) -> float:
        total = self.steps_per_epoch * self.epochs
        return min(1.0, self.global_step / total) if total else 0.0

    def eta(self) -> float | None:
        """Seconds left at the recent pace, or None before there is a pace."""
        total = self.steps_per_epoch * self.epochs
        if not total or not self.recent_step_times:
            return None
        pace = float(np.median(self.recent_step_times))
        return max(0, total - self.global_step) * pace


class MetricsStore:
    """Every worker's step metrics, epochs and events for one run; thread-safe."""

    RECENT = 20  # steps in the pace and straggler windows

    def __init__(self, capacity: int = 200_000):
        self.capacity = capacity
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], Series] = {}
        self.workers: list[str] = []
        self.progress: dict[str, WorkerProgress] = {}
        self.epochs: list[dict] = []
        self.events: list[dict] = []   # {"time", "task", "event", "text"}
        self.restarts: list[tuple[int, float]] = []  # (attempt, global step it resumed from), for markers
        self.states: dict[str, tuple[str, str]] = {}  # task -> (state, words): what supervision says of it
        self.alive: dict[str, dict] = {}  # task -> its newest liveness record (parameter-server workers and ps)
        self.version = 0

    def _worker(self, task: str) -> None:
        if task not in self.progress:
            self.workers.append(task)
            self.progress[task] = WorkerProgress()

    def ingest(self, task: str, records: list[dict]) -> None:
        """Add a task's records (from its metrics file) in order.

        Step values are gathered into arrays before the lock is taken, so a view reading the
        store waits microseconds, not the time it takes to go through a long message.
        """
        cuts = [i for i, r in enumerate(records) if r.get("event") == "resumed"]
        if cuts and cuts[-1] != len(records) - 1 or len(cuts) > 1:  # each attempt's steps after its cut
            start = 0
            for i in cuts:
                self.ingest(task, records[start:i + 1])
                start = i + 1
            if start < len(records):
                self.ingest(task, records[start:])
            return
        steps = [r for r in records if r.get("type") == "step"]
        columns = None
        if steps:
            xs = np.array([text.metric_value(r.get("global_step", 0)) for r in steps])
            columns = {}
            for metric in METRICS:
                values = [r.get(metric, r.get("loss_avg") if metric == "loss" else None) for r in steps]
                columns[metric] = np.array([text.metric_value(v) for v in values], dtype=float)
            step_times = [t for t in (text.metric_value(r.get("step_time")) for r in steps) if math.isfinite(t)]
        with self._lock:
            self._worker(task)
            prog = self.progress[task]
            if columns is not None:
                for metric, ys in columns.items():
                    key = (task, metric)
                    series = self._series.get(key)
                    if series is None:
                        series = self._series[key] = Series(self.capacity)
                    series.extend(xs, ys)
                last = steps[-1]
                epoch, step = (text.metric_value(last.get(k)) for k in ("epoch", "step"))
                prog.epoch = int(epoch) if math.isfinite(epoch) else prog.epoch
                prog.step = int(step) if math.isfinite(step) else prog.step
                prog.global_step = int(xs[-1]) if math.isfinite(xs[-1]) else prog.global_step
                prog.last_time = last.get("time")
                if prog.first_time is None:
                    prog.first_time = steps[0].get("time")
                prog.recent_step_times.extend(step_times[-self.RECENT:])
                del prog.recent_step_times[:-self.RECENT]
            for r in records:
                kind = r.get("type")
                if kind == "epoch":
                    self.epochs.append({"task": task, **r})
                    self.events.append({"time": r.get("time"), "task": task, "event": "epoch",
                                        "text": text.epoch_text(r)})
                elif kind == "alive":
                    self.alive[task] = r
                elif kind == "unreadable":
                    self.events.append({"time": None, "task": task, "event": "unreadable",
                                        "text": text.unreadable_text(r)})
                elif kind == "event":
                    name = r.get("event")
                    if name == "resumed":
                        self._resumed(task, r)
                    if name == "started":
                        prog.steps_per_epoch = r.get("steps_per_epoch") or 0
                        prog.epochs = r.get("epochs") or 0
                    if name not in text.QUIET_EVENTS:
                        self.events.append({"time": r.get("time"), "task": task, "event": name,
                                            "text": text.event_text(r)})
            self.version += 1

    def _resumed(self, task: str, r: dict) -> None:
        """An attempt took up training at a backup's step: its curves go on from there (the steps after
        it that the failed attempt made are redone, so they leave the plot, as TensorBoard purges them)."""
        step = text.metric_value(r.get("global_step"))
        if not math.isfinite(step):
            return
        for metric in METRICS:
            series = self._series.get((task, metric))
            if series is not None:
                series.cut_after(step)
        attempt = r.get("attempt")
        if not any(a == attempt for a, _ in self.restarts):
            self.restarts.append((attempt, step))

    def set_state(self, task: str, state: str, words: str = "") -> None:
        """What supervision says of a task now (``running`` clears it): a badge in the window."""
        with self._lock:
            if state == "running":
                self.states.pop(task, None)
            else:
                self.states[task] = (state, words)
            self.version += 1

    def note(self, task: str, event: str, text: str, when: float | None = None) -> None:
        """An event the console saw itself (a task ended, a connection dropped)."""
        with self._lock:
            self.events.append({"time": when or time.time(), "task": task, "event": event, "text": text})
            self.version += 1

    def series(self, task: str, metric: str, max_points: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """A copy of the points, or at most ``max_points`` of them (bucket minima and maxima)."""
        with self._lock:
            s = self._series.get((task, metric))
            if s is None:
                return np.empty(0), np.empty(0)
            return s.reduced(max_points) if max_points else s.arrays()

    def changed_series(self, seen: dict, max_points: int) -> dict:
        """Every series with points that ``seen`` ({(task, metric): appended count}) has not
        seen, reduced to ``max_points``, read under one hold of the lock (follow threads wait
        for one short read, not for one per curve). Updates ``seen``."""
        out = {}
        with self._lock:
            for key, s in self._series.items():
                if seen.get(key) != s.version:
                    seen[key] = s.version
                    out[key] = s.reduced(max_points)
        return out

    def points(self, task: str, metric: str) -> int:
        with self._lock:
            s = self._series.get((task, metric))
            return len(s) if s is not None else 0

    def stragglers(self, factor: float = 1.5, min_steps: int = 10) -> list[str]:
        """Workers whose recent median step time stays ``factor`` times above the others' median."""
        with self._lock:
            paces = {w: float(np.median(p.recent_step_times)) for w, p in self.progress.items()
                     if len(p.recent_step_times) >= min_steps}
        if len(paces) < 2:
            return []
        slow = []
        for worker, pace in paces.items():
            others = [v for w, v in paces.items() if w != worker]
            if pace > factor * float(np.median(others)):
                slow.append(worker)
        return slow

    def alive_snapshot(self) -> dict[str, dict]:
        with self._lock:
            return dict(self.alive)

    def states_snapshot(self) -> dict[str, tuple[str, str]]:
        with self._lock:
            return dict(self.states)

    def events_snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.events)

    def write_csv(self, path) -> int:
        """Every step point of every worker as CSV rows (worker, global_step, metrics...); returns rows."""
        with self._lock:
            workers = list(self.workers)
            columns = {(w, m): self._series[(w, m)].arrays() for w in workers for m in METRICS
                       if (w, m) in self._series}
        rows = 0
        with open(path, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["worker", "global_step", *METRICS])
            for w in workers:
                if (w, METRICS[0]) not in columns:
                    continue
                xs = columns[(w, METRICS[0])][0]
                values = [columns[(w, m)][1] for m in METRICS]
                for i, x in enumerate(xs):
                    out.writerow([w, int(x), *("" if np.isnan(v[i]) else repr(float(v[i])) for v in values)])
                    rows += 1
        return rows
