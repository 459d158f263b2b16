"""Live metrics of a run, per task and host, in bounded tables (Qt-free; records in, no words out).

The session ``ingest``-s each task's records as they arrive (and ``ingest_system`` the hosts' system
samples); a view reads ``changed`` at its own pace (at most 30 times a second) and redraws only what moved.
Each source (a task's steps, its epochs, a host's or a task's system samples) is a ``Table``
(console.store.table); metric ids are console.store.metric_ids'. Events and markers are kept as data: the
views word them (console.text). ``save`` and ``restore`` keep the whole store as a snapshot
(console.store.snapshot); ``write_csv`` exports it.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import threading
import time
import zipfile
from dataclasses import dataclass, field

import numpy as np

from console.states import Mark
from console.store import snapshot as snapshots
from console.store.metric_ids import CLUSTER_TASK, EPOCH, HOST, SYSTEM, SYSTEM_METRICS, is_cluster_wide
from console.store.snapshot import Snapshot
from console.store.table import Table
from console.threads import give_way
from trainer.records import FIT, GLOBAL_STEP, LOSS_FIELDS, PLACE_FIELDS, Batch, Event, RecordType, number


def _cell(text: str) -> str:
    """A host-given name as a CSV cell no spreadsheet runs: one that starts as a formula is quoted with '."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


_LATEST = 1e11  # seconds since 1970: the year 5138; a later time is none a clock gives


def _when(record: dict) -> float | None:
    """A record's time as the events list keeps it: a time a clock gives, else None (a host's ``"soon"``, NaN)."""
    when = number(record.get("time"))
    return when if 0 <= when < _LATEST else None


def _weight(value) -> int:
    """About the bytes ``value`` (a decoded record) takes in memory: linear in its size, close enough for a
    budget (a host's record may be a megabyte of one string or a thousand fields)."""
    if isinstance(value, str):
        return 50 + len(value)
    if isinstance(value, dict):
        return 100 + sum(100 + _weight(v) for v in value.values())
    if isinstance(value, list):
        return 60 + sum(8 + _weight(v) for v in value)
    return 32


class Newest:
    """The newest items of a stream within a count and an estimated size (``_weight``): a host that floods
    events, or sends huge ones, costs no more; ``total`` counts every item ever added. A list to read."""

    def __init__(self, most: int, budget: int):
        self.most, self.budget = most, budget
        self._items: list = []
        self._sizes: list[int] = []
        self._size = 0
        self.total = 0

    def append(self, item) -> None:
        size = _weight(item)
        self._items.append(item)
        self._sizes.append(size)
        self._size += size
        self.total += 1
        if len(self._items) > self.most or self._size > self.budget:
            # The oldest go, a tenth more than needed: dropping is rare, and linear when it happens.
            cut, size = 0, self._size
            while cut < len(self._items) and (len(self._items) - cut > self.most - self.most // 10
                                              or size > self.budget - self.budget // 10):
                size -= self._sizes[cut]
                cut += 1
            del self._items[:cut], self._sizes[:cut]
            self._size = size

    def extend(self, items) -> None:
        for item in items:
            self.append(item)

    def clear(self) -> None:
        self._items.clear()
        self._sizes.clear()
        self._size = self.total = 0

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def __getitem__(self, index):
        return self._items[index]

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    __hash__ = None


def _count(value) -> int:
    """A record's count (steps per epoch, epochs) as a whole number: 0 for none, text, NaN or one below 0."""
    value = number(value)
    return int(value) if math.isfinite(value) and 0 <= value < 1e15 else 0


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
    after: dict | None = None  # after the last epoch: the event of what the task does now (saving, saved, finished)

    @property
    def fraction(self) -> float:
        total = self.steps_per_epoch * self.epochs
        return min(1.0, max(0.0, self.global_step / total)) if total else 0.0  # a step a host made up: still 0..1

    def eta(self) -> float | None:
        """Seconds left at the recent pace, or None before there is a pace."""
        total = self.steps_per_epoch * self.epochs
        if not total or not self.recent_step_times:
            return None
        pace = float(np.median(self.recent_step_times))
        return max(0, total - self.global_step) * pace


@dataclass(frozen=True)
class Marker:
    """Something to see on the time axis (console.text words it): ``kind`` is ``NAN`` (``metric`` became
    ``value``), ``STALL`` (``words``: supervision's) or ``RESTART`` (``attempt`` took up training here)."""

    NAN, STALL, RESTART = "nan", "stall", "restart"

    kind: str
    task: str
    step: float
    time: float
    metric: str = ""
    value: float | None = None
    attempt: int | None = None
    words: str = ""
    changed: dict | None = None  # RESTART: what changed since the backup (an elastic run's size: ``num_workers``)


def _columns(records: list[dict]) -> dict[str, np.ndarray]:
    """Every numeric field of ``records`` as a column (a field a record lacks, or holds as null or
    text, reads NaN there)."""
    names: dict[str, None] = {}
    for r in records:
        for k, v in r.items():
            if k not in PLACE_FIELDS and (v is None or _is_number(v)) and k not in names:
                names[k] = None
    with np.errstate(over="ignore"):  # a value past float32's range is kept as inf
        return {name: np.array([number(r.get(name)) for r in records], dtype=np.float32) for name in names
                if any(_is_number(r.get(name)) for r in records) or name in LOSS_FIELDS}


MAX_GPUS = 16  # GPU rows a host's samples may make (a machine has at most 16; more is a host making them up)
FINAL_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy")  # what a run header says it ended at
_CURSOR = (None, None)  # the key of ``changed``'s ``seen`` that says where a call with a budget stopped


class _FairLock:
    """The store's lock, which a writer hands over between its chunks.

    Python's lock lets the thread that releases it take it again at once: a session thread adding a flood
    chunk by chunk kept the window's thread waiting on it for 370 ms (bench/hostile_host.py --why). A thread
    that has to wait says so (``waiting``), and ``hand_over`` (a writer, between two holds) steps aside until
    the waiting ones have had their turn."""

    __slots__ = ("_lock", "waiting")

    def __init__(self):
        self._lock = threading.Lock()
        self.waiting = 0

    def __enter__(self):
        if not self._lock.acquire(blocking=False):
            self.waiting += 1
            try:
                self._lock.acquire()
            finally:
                self.waiting -= 1
        return self

    def __exit__(self, *exc):
        self._lock.release()

    def hand_over(self, most: float = 0.05) -> None:
        """Wait (not holding the lock) while another thread waits for it, ``most`` seconds at most."""
        if not self.waiting:
            return
        end = time.monotonic() + most
        while self.waiting and time.monotonic() < end:
            time.sleep(0.0002)


class Changes(dict):
    """What ``MetricsStore.changed`` found; ``complete`` false: more is left for the next call."""

    complete = True


class MetricsStore:
    """Every task's step and epoch metrics, the system lane, events and markers of one run; thread-safe.

    Tables are keyed by (owner, kind): owner a task's name, or ``host:<name>`` (and
    ``host:<name>/gpu<i>``) for the system lane; kind ``step``, ``epoch`` or ``sys``. A metric id
    names a column of one kind (``loss`` a step column, ``epoch:val_loss`` an epoch one,
    ``sys:cpu_cores`` a system one).
    """

    RECENT = 20  # steps in the pace and straggler windows
    MAX_MARKERS = 1000
    MAX_EVENTS = 20_000      # the events list keeps the newest (a host that floods events costs no more)
    EVENT_BYTES = 8 << 20    # and within about this much memory
    MAX_EPOCHS = 100_000     # epoch records kept (their values are in the bounded tables too)
    EPOCH_BYTES = 8 << 20
    MAX_COLUMNS = 256        # metrics per task and kind: a host that invents fields costs no more
    CHUNK = 32               # records but steps handled per hold of the lock

    def __init__(self, capacity: int = 200_000):
        self.capacity = capacity
        self._lock = _FairLock()
        self._tables: dict[tuple[str, str], Table] = {}
        self.workers: list[str] = []
        self.hosts: list[str] = []            # hosts with system samples, in the order they came
        self._gpus: dict[str, set] = {}       # host -> the GPU indexes its samples made rows of (MAX_GPUS at most)
        self.progress: dict[str, WorkerProgress] = {}
        self.epochs = Newest(self.MAX_EPOCHS, self.EPOCH_BYTES)
        # {"time", "task", "event", and "record": a task's record, or "text": the console's own words}
        self.events = Newest(self.MAX_EVENTS, self.EVENT_BYTES)
        self.restarts: list[tuple[int, float]] = []  # (attempt, global step it resumed from), for markers
        self.markers: list[Marker] = []
        self.states: dict[str, tuple[str, str]] = {}  # task -> (state, words): what supervision says of it
        self.alive: dict[str, dict] = {}  # task -> its newest liveness record (parameter-server workers and ps)
        self.gpus_used: dict[str, set | None] = {}   # host -> the GPU indices its tasks see (None: all)
        self.origin: float | None = None  # the time of the run's earliest record (relative time is from it)
        self.latest: float | None = None  # the newest record's time (with origin: how long the run has gone)
        self._base: float | None = None   # times are kept as float32 seconds from this (the first time seen)
        self.version = 0
        self._diverged: set = set()
        self._noted: set = set()  # ids of the events the console noted itself (note): not in a snapshot
        self._said: dict = {}     # (attempt, epoch) -> the first task's record: a cluster's epoch is one event

    def _clear(self) -> None:
        """Empty the store (a snapshot that could not be read whole)."""
        with self._lock:
            self._tables.clear()
            for kept in (self.workers, self.hosts, self.epochs, self.events, self.restarts, self.markers):
                kept.clear()
            for kept in (self.progress, self.states, self.alive, self.gpus_used):
                kept.clear()
            self._diverged.clear()
            self._noted.clear()
            self._said.clear()
            self._base = self.origin = self.latest = None
            self.version += 1

    def _worker(self, task: str) -> None:
        if task not in self.progress:
            self.workers.append(task)
            self.progress[task] = WorkerProgress()

    def _table(self, owner: str, kind: str) -> Table:
        table = self._tables.get((owner, kind))
        if table is None:
            table = self._tables[(owner, kind)] = Table(self.capacity, wide_x=kind == "sys")
        return table

    def _times(self, records: list[dict]) -> np.ndarray:
        """The records' times as kept (from ``_base``); the earliest so far is the origin (under the lock)."""
        ts = np.array([number(r.get("time")) for r in records])
        ts[~((ts >= 0) & (ts < _LATEST))] = np.nan  # a time no clock gives (a host's 1e300) is no time
        finite = ts[np.isfinite(ts)]
        if len(finite):
            first, last = float(finite.min()), float(finite.max())
            self.origin = first if self.origin is None else min(self.origin, first)
            self.latest = last if self.latest is None else max(self.latest, last)
            if self._base is None:
                self._base = first
        return ts - (self._base or 0.0)

    def ingest(self, task: str, records: list[dict] | Batch) -> None:
        """Add a task's records (from its metrics file) in order (a ``Batch`` of them: sorted once already).

        Step values are gathered into columns before the lock is taken, so a view reading the
        store waits microseconds, not the time it takes to go through a long message.
        """
        batch = records if isinstance(records, Batch) else Batch(records)
        for part in batch.split_at_resumes():  # each attempt's steps after its cut
            self._ingest(task, part)

    def _ingest(self, task: str, batch: Batch) -> None:
        steps, others = batch.steps, batch.others
        columns = None
        if steps:
            xs = np.array([number(r.get(GLOBAL_STEP, 0)) for r in steps])
            if not np.isfinite(xs).all():  # a step that says no step (a host's "one"): not a point anywhere
                steps = [r for r, x in zip(steps, np.isfinite(xs)) if x]
                xs = xs[np.isfinite(xs)]
        if steps:
            columns = _columns(steps)
            step_times = columns.get("step_time")
            step_times = [] if step_times is None else [float(t) for t in step_times[-self.RECENT:] if np.isfinite(t)]
            broken = [(r, k) for r in steps for k in LOSS_FIELDS
                      if k in r and not math.isfinite(number(r[k]))]
        with self._lock:
            self._worker(task)
            prog = self.progress[task]
            if columns is not None:
                self._table(task, "step").extend(xs, self._times(steps), self._room(task, "step", columns))
                last = steps[-1]
                epoch, step = (number(last.get(k)) for k in ("epoch", "step"))
                prog.epoch = int(epoch) if math.isfinite(epoch) else prog.epoch
                prog.step = int(step) if math.isfinite(step) else prog.step
                prog.global_step = int(xs[-1]) if math.isfinite(xs[-1]) else prog.global_step
                prog.last_time = _when(last)
                if prog.first_time is None:
                    prog.first_time = _when(steps[0])
                prog.recent_step_times.extend(step_times)
                del prog.recent_step_times[:-self.RECENT]
                for r, key in broken:
                    self._mark(task, r, key)
            self.version += 1
        for start in range(0, len(others), self.CHUNK):  # a view waits for one chunk at most, not a flood's whole
            self._lock.hand_over()
            if start % (8 * self.CHUNK) == 0 and start:
                give_way()  # a flood of events: the window's thread first, every 256
            with self._lock:
                self._others(task, others[start:start + self.CHUNK], self.progress[task])
                self.version += 1
        self._lock.hand_over()

    def _others(self, task: str, others: list[dict], prog: WorkerProgress) -> None:
        """A task's records but its steps (under the lock); their epoch rows added at once."""
        rows: list[dict] = []
        for r in others:
            kind = r.get("type")
            if kind == RecordType.EPOCH:
                self.epochs.append({"task": task, **r})
                rows.append(r)
                said_by = self._epoch_said_by(task, r)
                if said_by is not None:
                    self.events.append({"time": _when(r), "task": said_by, "event": kind, "record": r})
            elif kind == RecordType.ALIVE:
                self.alive[task] = r
            elif kind == RecordType.UNREADABLE:
                self.events.append({"time": None, "task": task, "event": kind, "record": r})
            elif kind == RecordType.EVENT:
                name = r.get("event")
                if name == Event.RESUMED:
                    self._resumed(task, r)
                if name == Event.STARTED:
                    prog.steps_per_epoch = _count(r.get("steps_per_epoch"))
                    prog.epochs = _count(r.get("epochs"))
                    prog.after = None
                elif name in Event.AFTER_TRAINING:
                    prog.after = r
                if name == Event.EVALUATED and isinstance(r.get("metrics"), dict):
                    rows.append({**r["metrics"], "time": r.get("time"), "epoch": r.get("epoch"),
                                 GLOBAL_STEP: r.get(GLOBAL_STEP)})
                if name not in Event.QUIET:
                    self.events.append({"time": _when(r), "task": task,
                                        "event": name if isinstance(name, str) else "?", "record": r})
        if rows:
            self._epoch_rows(task, rows, prog)

    def _epoch_said_by(self, task: str, r: dict) -> str | None:
        """Whom the events list names for ``r`` (an epoch), or None to say it not again: the workers of a
        synchronous cluster each say the same epoch with the same numbers, said once, as the cluster's; a
        worker whose numbers differ says its own."""
        key = (repr(r.get("attempt")), repr(r.get(FIT)), repr(r.get("epoch")))  # a script's later fit: its own
        first = self._said.get(key)
        if first is None:
            if len(self._said) >= self.MAX_EVENTS:  # a host that invents epochs: the oldest are forgotten
                self._said.pop(next(iter(self._said)))
            self._said[key] = (task, r)
            return CLUSTER_TASK if len(self.workers) > 1 else task
        if first[0] != task and all(first[1].get(k) == v for k, v in r.items()
                                    if k not in PLACE_FIELDS and is_cluster_wide(EPOCH + k)):
            return None
        return task

    def _epoch_rows(self, task: str, rows: list[dict], prog: WorkerProgress) -> None:
        """Epochs' values on the step axis (each at its epoch's last step), in one extend of the table."""
        ats = []
        for r in rows:
            at = number(r.get(GLOBAL_STEP))
            epoch = number(r.get("epoch"))
            if not math.isfinite(at):
                at = (epoch + 1) * prog.steps_per_epoch if prog.steps_per_epoch and math.isfinite(epoch) \
                    else float(prog.global_step)
            ats.append(at)
        self._table(task, "epoch").extend(np.array(ats, dtype=float), self._times(rows),
                                          self._room(task, "epoch", _columns(rows)))

    def _room(self, task: str, kind: str, columns: dict) -> dict:
        """``columns`` but those a task's table has no room for (``MAX_COLUMNS``; said once) (under the lock)."""
        table = self._table(task, kind)
        new = [c for c in columns if c not in table._cols]
        room = self.MAX_COLUMNS - len(table._cols)
        if len(new) <= room:
            return columns
        if (kind, task, "columns") not in self._diverged:
            self._diverged.add((kind, task, "columns"))
            self.events.append({"time": time.time(), "task": task, "event": "columns", "text": (
                f"it reports more than {self.MAX_COLUMNS} metrics: the others are not kept ("
                + ", ".join(new[room:room + 5]) + (", …" if len(new) - room > 5 else "") + ")")})
        dropped = set(new[max(room, 0):])
        return {c: v for c, v in columns.items() if c not in dropped}

    def _mark(self, task: str, r: dict, metric: str) -> None:
        """A task's first non-finite value: a marker at its step."""
        if (Marker.NAN, task) in self._diverged or len(self.markers) >= self.MAX_MARKERS:
            return  # the first per task: a diverged run is not a thousand markers
        self._diverged.add((Marker.NAN, task))
        step = number(r.get(GLOBAL_STEP))
        when = number(r.get("time"))
        value = number(r.get(metric))
        self.markers.append(Marker(Marker.NAN, task, step, when if math.isfinite(when) else time.time(), metric=metric,
                                   value=None if math.isnan(value) else value))

    def ingest_system(self, host: str, record: dict, tasks: set[str] | None = None) -> None:
        """A host's system sample (docs/metrics.md, ``system``): its CPU and memory, each GPU's
        load, and each of its tasks' CPU and memory, as rows of the system lane. A host cannot grow the tables:
        only ``tasks`` (the run's tasks there; None: any) get rows, and at most ``MAX_GPUS`` GPUs a host, each an
        index below ``MAX_GPUS * 4``."""
        now = np.array([number(record.get("time"))])
        value = number

        def row(owner: str, values: dict) -> None:
            table = self._table(owner, "sys")
            table.extend(now, kept, {k: np.array([v], dtype=np.float32) for k, v in values.items()})

        cpus = value(record.get("cpus"))
        gb = 1e-9
        with self._lock:
            kept = self._times([record])
            if host not in self.hosts:
                self.hosts.append(host)
            row(HOST + host, {"sys:cpu_cores": value(record.get("cpu_percent")) / 100 * cpus,
                              "sys:memory_gb": value(record.get("memory_used_bytes")) * gb,
                              "sys:memory_available_gb": value(record.get("memory_available_bytes")) * gb,
                              "sys:swap_gb": value(record.get("swap_used_bytes")) * gb})
            used: set | None = set()
            for task, t in (record.get("tasks") or {}).items():
                if not isinstance(t, dict) or (tasks is not None and task not in tasks):
                    continue
                row(task, {"sys:cpu_cores": value(t.get("cpu_percent")) / 100,
                           "sys:memory_gb": value(t.get("rss_bytes")) * gb})
                gpus = t.get("gpus")
                if isinstance(gpus, list) and used is not None:
                    used.update(str(g) for g in gpus)
                else:
                    used = None
            self.gpus_used[host] = used or None
            known = self._gpus.setdefault(host, set())
            for gpu in record.get("gpus") or []:
                if not isinstance(gpu, dict):
                    continue
                index = gpu.get("index")
                if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 4 * MAX_GPUS:
                    continue  # no GPU index a machine has
                if used and str(index) not in used:
                    continue  # a GPU no task of the run uses
                if index not in known:
                    if len(known) >= MAX_GPUS:
                        continue
                    known.add(index)
                row(f"{HOST}{host}/gpu{index}",
                    {"sys:gpu_percent": value(gpu.get("utilization_percent")),
                     "sys:gpu_memory_gb": value(gpu.get("memory_used_bytes")) * gb})
            self.version += 1

    def _resumed(self, task: str, r: dict) -> None:
        """An attempt took up training at a backup's step: its curves go on from there (the steps after
        it that the failed attempt made are redone, so they leave the plot, as TensorBoard purges them)."""
        step = number(r.get(GLOBAL_STEP))
        if not math.isfinite(step):
            return
        for kind in ("step", "epoch"):
            table = self._tables.get((task, kind))
            if table is not None:
                table.cut_after(step)
        attempt = r.get("attempt")
        if not any(a == attempt for a, _ in self.restarts):
            self.restarts.append((attempt, step))
            changed = r.get("changed")
            self.markers.append(Marker(Marker.RESTART, task, step, number(r.get("time")),
                                       attempt=attempt if isinstance(attempt, int) else None,
                                       changed=changed if isinstance(changed, dict) else None))

    def set_state(self, task: str, state: str, words: str = "") -> None:
        """What supervision says of a task now (a ``Mark``; ``RUNNING`` clears it): a badge in the window; a
        stall is also a marker at the task's last step."""
        with self._lock:
            if state == Mark.RUNNING:
                self.states.pop(task, None)
            else:
                if state == Mark.STALLED and self.states.get(task, ("",))[0] != Mark.STALLED:
                    prog = self.progress.get(task)
                    self.markers.append(Marker(Marker.STALL, task, float(prog.global_step if prog else 0),
                                               time.time(), words=words))
                self.states[task] = (state, words)
            self.version += 1

    def note(self, task: str, event: str, text: str, when: float | None = None) -> None:
        """An event the console saw itself (a task ended, a connection dropped)."""
        with self._lock:
            noted = {"time": when or time.time(), "task": task, "event": event, "text": text}
            self.events.append(noted)
            self._noted.add(id(noted))
            self.version += 1

    # ------------------------------------------------------------ reading

    @staticmethod
    def _where(metric: str) -> tuple[str, str]:
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
            for (_, kind), table in self._tables.items():
                found[kind].update(table.columns())
        return (sorted(found["step"]) + sorted(EPOCH + c for c in found["epoch"])
                + [m for m in SYSTEM_METRICS if m in found["sys"]])

    def owners(self, metric: str) -> list[str]:
        """Who has values of ``metric``: tasks in the order they came, then hosts and GPUs."""
        kind, column = self._where(metric)
        with self._lock:
            return [owner for (owner, k), t in self._tables.items() if k == kind and column in t._cols]

    def series(self, owner: str, metric: str, max_points: int | None = None,
               x: str = "step") -> tuple[np.ndarray, np.ndarray]:
        """A copy of a metric's points (x in ``X_AXES`` terms), or at most ``max_points`` of them."""
        kind, column = self._where(metric)
        with self._lock:
            table = self._tables.get((owner, kind))
            if table is None or column not in table._cols:
                return np.empty(0), np.empty(0)
            xs, ys = table.reduced(column, max_points, self._axis(x, kind)) if max_points \
                else table.arrays(column, self._axis(x, kind))
            return self._shift(xs, x, kind), ys

    def point_at(self, owner: str, metric: str, x: float, axis: str = "step") -> tuple | None:
        """The row of a metric nearest ``x`` (in ``axis``'s terms): (global step, or None for a system sample; wall
        time, or None; value), or None without rows. What the value table at the cursor says of a series."""
        kind, column = self._where(metric)
        with self._lock:
            table = self._tables.get((owner, kind))
            if table is None or column not in table._cols or not len(table):
                return None
            xs = self._shift(table.x_of(self._axis(axis, kind)), axis, kind)
            i = int(np.clip(np.searchsorted(xs, x), 0, len(xs) - 1))
            if i and abs(xs[i - 1] - x) <= abs(xs[i] - x):
                i -= 1
            step = None if kind == "sys" else float(table.x_of("step")[i])
            when = float(table.x_of("time")[i]) + (self._base or 0.0)
            value = float(table._cols[column][table._start + i])
        return step, when if math.isfinite(when) else None, value

    @staticmethod
    def _axis(x: str, kind: str) -> str:
        return "time" if kind == "sys" or x != "step" else "step"

    def _shift(self, xs: np.ndarray, x: str, kind: str) -> np.ndarray:
        """Times are kept from ``_base``: wall time adds it back, relative time counts from the origin."""
        # float64 first: a float32 time plus a float64 base stays float32 under NumPy 2 (128 s apart at 1.7e9)
        if x == "time":
            return xs.astype(np.float64) + (self._base or 0.0)
        if x == "relative" or kind == "sys":
            return xs.astype(np.float64) + ((self._base or 0.0) - (self.origin or 0.0))
        return xs

    def changed(self, seen: dict, metrics, max_points: int, x: str = "step",
                smoothing: float = 0.0, order: list[str] | None = None, budget: float | None = None) -> "Changes":
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
            kind, column = self._where(metric)
            wanted.setdefault(kind, []).append((metric, column))
        out = Changes()
        with self._lock:
            reference = {m: self._reference(m, order) for m in metrics if is_cluster_wide(m)}
            tables = list(self._tables.items())
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
        kind, column = self._where(metric)
        for owner in (order or []):
            table = self._tables.get((owner, kind))
            if table is not None and column in table._cols:
                return owner
        return next((owner for (owner, k), t in self._tables.items() if k == kind and column in t._cols), None)

    def reference(self, metric: str, order: list[str] | None = None) -> str | None:
        """The task whose values of a cluster-wide ``metric`` stand for the cluster."""
        with self._lock:
            return self._reference(metric, order)

    def points(self, owner: str, metric: str = "loss") -> int:
        kind, column = self._where(metric)
        with self._lock:
            table = self._tables.get((owner, kind))
            return len(table) if table is not None and column in table._cols else 0

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

    def runtime(self) -> float | None:
        """Seconds from the run's first record to its newest (None before two times)."""
        if self.origin is None or self.latest is None:
            return None
        return self.latest - self.origin

    def final_metrics(self) -> dict:
        """The newest epoch's cluster-wide values (loss, accuracy, their validation ones): what a run ended at."""
        with self._lock:
            last = self.epochs[-1] if len(self.epochs) else {}
        return {k: v for k, v in last.items() if k in FINAL_METRICS and isinstance(v, (int, float))
                and not isinstance(v, bool) and math.isfinite(v)}

    def events_snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.events)

    def events_since(self, seen: int) -> tuple[list[dict], int]:
        """The events after the first ``seen`` ever kept (those still kept), and how many were ever kept."""
        with self._lock:
            new = self.events.total - seen
            return (list(self.events[-new:]) if new > 0 else []), self.events.total

    def markers_snapshot(self) -> list[Marker]:
        with self._lock:
            return list(self.markers)

    # ------------------------------------------------------------ snapshots

    def save(self, folder, **where) -> None:
        """Keep the whole store in ``folder`` as a snapshot (console.store.snapshot) that ``restore`` gives back
        without a record decoded again; ``where``: Snapshot's fields of where the session read each task to."""
        with self._lock:
            keys = list(self._tables)
            state = Snapshot(
                tables=[(owner, kind, self._tables[(owner, kind)].columns()) for owner, kind in keys],
                workers=list(self.workers), hosts=list(self.hosts),
                progress={k: dataclasses.asdict(v) for k, v in self.progress.items()},
                # What the console said itself (its notes, supervision's states and stalls) is said again by
                # the session that takes the run up, or read from its history: not kept here.
                epochs=list(self.epochs), events=[e for e in self.events if id(e) not in self._noted],
                restarts=list(self.restarts),
                markers=[dataclasses.asdict(m) for m in self.markers if m.kind != Marker.STALL],
                alive=dict(self.alive),
                gpus_used={h: None if g is None else sorted(g) for h, g in self.gpus_used.items()},
                origin=self.origin, base=self._base, diverged=sorted(self._diverged), **where)
        # Copies of the lists, not of the records: a record is never changed once kept. (A deep copy by a JSON
        # round trip held the lock, and the interpreter, for a third of a second after a flood of events.)

        def tables():  # one table's copy at a time: a snapshot of a big run costs no second store
            for key, (_, _, columns) in zip(keys, state.tables):
                with self._lock:
                    table = self._tables[key]
                    rows = slice(table._start, table._end)
                    arrays = {"x": table._x[rows].copy(), "t": table._t[rows].copy()}
                    arrays.update({str(j): table._cols[c][rows].copy() for j, c in enumerate(columns)})
                yield arrays

        snapshots.write(folder, state, tables())

    def restore(self, folder, state: Snapshot | None = None) -> Snapshot:
        """Fill this (empty) store from the snapshot in ``folder`` (``state``: read already); returns it.
        Table by table: a view drawing meanwhile waits for one table's copy at most. Raises ``OSError`` or
        ``ValueError`` for a missing or damaged snapshot (the store is then as it was: empty)."""
        state = state or snapshots.read(folder)
        if state is None:
            raise ValueError(f"no snapshot of a run's metrics in {folder}")
        with self._lock:
            if self._tables or self.progress:
                raise ValueError("a snapshot is restored into an empty store only")
        try:
            tables = snapshots.table_arrays(folder, state)
            first = next(tables, None)  # the arrays are checked before the first comes
            with self._lock:  # what is small first: the view shows the tasks as their curves come
                self._base, self.origin = state.base, state.origin
                self.workers[:] = list(state.workers)
                self.hosts[:] = list(state.hosts)
                self.progress.update({k: WorkerProgress(**v) for k, v in state.progress.items()})
                self.epochs.extend(state.epochs)
                self.events.extend(state.events)
                self.restarts.extend(state.restarts)
                self.markers.extend(Marker(**m) for m in state.markers)
                self.states.update(state.states)
                self.alive.update(state.alive)
                self.gpus_used.update({h: None if g is None else set(g) for h, g in state.gpus_used.items()})
                self._diverged.update(state.diverged)
                self.version += 1
            if first is not None:
                for owner, kind, arrays in itertools.chain([first], tables):  # read one table, then add it
                    xs, ts = arrays.pop("x"), arrays.pop("t")
                    give_way()  # a reattach's tables: the window's thread first between two
                    self._lock.hand_over()
                    with self._lock:
                        self._table(owner, kind).extend(xs, ts, arrays)
                        if len(ts) and np.isfinite(ts).any():  # the newest time, as ingest keeps it
                            last = float(np.nanmax(ts)) + (self._base or 0.0)
                            self.latest = last if self.latest is None else max(self.latest, last)
                        self.version += 1
        except (KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as exc:
            self._clear()
            raise ValueError(f"the snapshot in {folder} is damaged: {exc!r}") from exc
        except BaseException:
            self._clear()  # nothing of a snapshot that could not be read whole
            raise
        return state

    def write_csv(self, path) -> int:
        """Every point of every series, the system lane too, as CSV rows in long form
        (source, kind, global_step, time, metric, value); returns the rows written."""
        with self._lock:
            dumps = []
            for (owner, kind), table in self._tables.items():
                xs = table.x_of("step").copy()
                ts = table.x_of("time").astype(np.float64) + (self._base or 0.0)  # float64: see _shift
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
