"""Live metrics of a run, per worker, in bounded buffers (Qt-free).

Follow threads ``ingest`` records as they arrive; a view reads ``series`` at its
own pace (at most 30 times a second) and redraws only when ``version`` moved.
Each (worker, metric) keeps its newest ``capacity`` points; a view asks for at
most ``max_points`` and gets a min/max ("peak") reduction that keeps spikes.
"""

from __future__ import annotations

import csv
import threading
import time
from dataclasses import dataclass, field

import numpy as np

METRICS = ("loss", "step_time", "examples_per_sec")
LABELS = {"loss": "loss (global batch)", "step_time": "step time (s)", "examples_per_sec": "examples / s (per worker)"}


class Series:
    """A ring of (x, y) float points: the newest ``capacity`` are kept."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._x = np.empty(2 * capacity)
        self._y = np.empty(2 * capacity)
        self._start = 0
        self._end = 0

    def __len__(self) -> int:
        return self._end - self._start

    def append(self, x: float, y: float) -> None:
        if self._end == len(self._x):  # compact: keep the newest capacity points at the front
            keep = self.capacity - 1
            self._x[:keep] = self._x[self._end - keep:self._end]
            self._y[:keep] = self._y[self._end - keep:self._end]
            self._start, self._end = 0, keep
        self._x[self._end] = x
        self._y[self._end] = y
        self._end += 1
        if self._end - self._start > self.capacity:
            self._start += 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x[self._start:self._end].copy(), self._y[self._start:self._end].copy()


def peak_reduce(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points: each bucket's min and max, in order (spikes stay visible)."""
    n = len(x)
    if n <= max_points:
        return x, y
    buckets = max(1, max_points // 2)
    size = -(-n // buckets)
    pad = buckets * size - n
    yy = np.concatenate([y, np.full(pad, y[-1])]).reshape(buckets, size)
    xx = np.concatenate([x, np.full(pad, x[-1])]).reshape(buckets, size)
    lo = np.argmin(np.where(np.isnan(yy), np.inf, yy), axis=1)
    hi = np.argmax(np.where(np.isnan(yy), -np.inf, yy), axis=1)
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
        self.started: dict | None = None  # the first "started" event (the batch plan)
        self.version = 0

    def _worker(self, task: str) -> None:
        if task not in self.progress:
            self.workers.append(task)
            self.progress[task] = WorkerProgress()

    def ingest(self, task: str, records: list[dict]) -> None:
        """Add a task's records (from its metrics file) in order."""
        with self._lock:
            self._worker(task)
            prog = self.progress[task]
            for r in records:
                kind = r.get("type")
                if kind == "step":
                    x = float(r.get("global_step", 0))
                    for metric in METRICS:
                        value = r.get(metric, r.get("loss_avg") if metric == "loss" else None)
                        if value is None:
                            value = float("nan")
                        key = (task, metric)
                        series = self._series.get(key)
                        if series is None:
                            series = self._series[key] = Series(self.capacity)
                        series.append(x, value)
                    prog.epoch, prog.step, prog.global_step = r.get("epoch", 0), r.get("step", 0), int(x)
                    prog.last_time = r.get("time")
                    if prog.first_time is None:
                        prog.first_time = prog.last_time
                    if r.get("step_time") is not None:
                        prog.recent_step_times.append(r["step_time"])
                        del prog.recent_step_times[:-self.RECENT]
                elif kind == "epoch":
                    self.epochs.append({"task": task, **r})
                    self.events.append({"time": r.get("time"), "task": task, "event": "epoch",
                                        "text": f"epoch {r.get('epoch', 0) + 1} done, loss {_fmt(r.get('loss'))}"
                                        + (f", val_accuracy {_fmt(r.get('val_accuracy'))}"
                                           if r.get("val_accuracy") is not None else "")})
                elif kind == "event":
                    name = r.get("event")
                    if name == "started":
                        prog.steps_per_epoch = r.get("steps_per_epoch") or 0
                        prog.epochs = r.get("epochs") or 0
                        if self.started is None:
                            self.started = dict(r)
                    self.events.append({"time": r.get("time"), "task": task, "event": name,
                                        "text": describe_event(r)})
            self.version += 1

    def note(self, task: str, event: str, text: str, when: float | None = None) -> None:
        """An event the console saw itself (a task ended, a connection dropped)."""
        with self._lock:
            self.events.append({"time": when or time.time(), "task": task, "event": event, "text": text})
            self.version += 1

    def series(self, task: str, metric: str, max_points: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            s = self._series.get((task, metric))
            x, y = s.arrays() if s is not None else (np.empty(0), np.empty(0))
        return peak_reduce(x, y, max_points) if max_points else (x, y)

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


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def describe_event(r: dict) -> str:
    name = r.get("event")
    if name == "launched":
        return f"launched (pid {r.get('pid')}), waiting for the cluster"
    if name == "cluster_formed":
        return f"cluster formed: {r.get('strategy')}, {r.get('num_replicas')} replicas"
    if name == "started":
        return (f"training started: global batch {r.get('global_batch')} = {r.get('num_workers')} workers x "
                f"{r.get('replicas_per_worker')} replicas x {r.get('per_replica_batch')}")
    if name == "finished":
        return "finished" + (f", model saved to {r['model']}" if r.get("model") else "")
    if name == "failed":
        return f"FAILED: {r.get('error')}"
    return str(name)
