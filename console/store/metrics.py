"""Live metrics of a run, per task and host, in bounded tables (Qt-free; records in, no words out).

The session ``ingest``-s each task's records as they arrive (and ``ingest_system`` the hosts' system
samples); a view reads ``changed`` at its own pace (at most 30 times a second) and redraws only what moved.
``MetricsStore`` holds the lock and sends each record to its part: the curves (console.store.curves: each
source's ``Table``, metric ids console.store.metric_ids'), the system lane (console.store.system), the tasks'
progress (console.store.tasks), the events and epochs (console.store.journal) and supervision's states and the
markers (console.store.marks). Events and markers are kept as data: the views word them (console.text).
``save`` and ``restore`` keep the whole store as a snapshot (console.store.snapshot); ``write_csv`` exports it.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import zipfile

import numpy as np

from console.store import snapshot as snapshots
from console.store.curves import LATEST, Curves
from console.store.journal import Journal
from console.store.marks import Marker, Marks  # noqa: F401 (its callers import Marker from here)
from console.store.snapshot import Snapshot
from console.store.system import MAX_GPUS, SystemLane  # noqa: F401 (and MAX_GPUS)
from console.store.tasks import Tasks, WorkerProgress
from console.threads import give_way
from trainer.records import GLOBAL_STEP, LOSS_FIELDS, PLACE_FIELDS, Batch, Event, RecordType, number


def _when(record: dict) -> float | None:
    """A record's time as the events list keeps it: a time a clock gives, else None (a host's ``"soon"``, NaN)."""
    when = number(record.get("time"))
    return when if 0 <= when < LATEST else None


def _count(value) -> int:
    """A record's count (steps per epoch, epochs) as a whole number: 0 for none, text, NaN or one below 0."""
    value = number(value)
    return int(value) if math.isfinite(value) and 0 <= value < 1e15 else 0


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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


def _part(part: str, name: str) -> property:
    """What a part of the store holds or does, asked of the store under the name it has always had."""
    return property(lambda self: getattr(getattr(self, part), name))


class MetricsStore:
    """Every task's step and epoch metrics, the system lane, events and markers of one run; thread-safe.

    Tables are keyed by (owner, kind): owner a task's name, or ``host:<name>`` (and
    ``host:<name>/gpu<i>``) for the system lane; kind ``step``, ``epoch`` or ``sys``. A metric id
    names a column of one kind (``loss`` a step column, ``epoch:val_loss`` an epoch one,
    ``sys:cpu_cores`` a system one).

    Its parts share its one lock (any thread may ask the store): a change takes it, hands each record to its
    part and moves ``version``; what is read is read from the parts, as each says.
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
        self.curves = Curves(self._lock, capacity)
        self.system_lane = SystemLane(self.curves)
        self.tasks = Tasks(self._lock)
        self.journal = Journal(self._lock, self.MAX_EVENTS, self.EVENT_BYTES, self.MAX_EPOCHS, self.EPOCH_BYTES)
        self.marks = Marks(self._lock, self.MAX_MARKERS)
        self.version = 0

    # What callers ask of the parts, under the names they have always had (each part says how it reads).
    workers = _part("tasks", "workers")
    progress = _part("tasks", "progress")
    alive = _part("tasks", "alive")
    stragglers = _part("tasks", "stragglers")
    alive_snapshot = _part("tasks", "alive_snapshot")
    hosts = _part("system_lane", "hosts")
    gpus_used = _part("system_lane", "gpus_used")
    epochs = _part("journal", "epochs")
    events = _part("journal", "events")
    events_snapshot = _part("journal", "events_snapshot")
    events_since = _part("journal", "events_since")
    final_metrics = _part("journal", "final_metrics")
    states = _part("marks", "states")
    markers = _part("marks", "markers")
    restarts = _part("marks", "restarts")
    states_snapshot = _part("marks", "states_snapshot")
    markers_snapshot = _part("marks", "markers_snapshot")
    origin = _part("curves", "origin")
    latest = _part("curves", "latest")
    runtime = _part("curves", "runtime")
    metrics = _part("curves", "metrics")
    owners = _part("curves", "owners")
    series = _part("curves", "series")
    point_at = _part("curves", "point_at")
    changed = _part("curves", "changed")
    reference = _part("curves", "reference")
    points = _part("curves", "points")
    write_csv = _part("curves", "write_csv")

    def _clear(self) -> None:
        """Empty the store (a snapshot that could not be read whole)."""
        with self._lock:
            for part in (self.curves, self.tasks, self.system_lane, self.journal, self.marks):
                part.clear()
            self.version += 1

    # ------------------------------------------------------------ records in

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
            prog = self.tasks.of(task)
            if columns is not None:
                self.curves.table(task, "step").extend(xs, self.curves.times(steps),
                                                       self._room(task, "step", columns))
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
                    self.marks.not_finite(task, r, key)
            self.version += 1
        for start in range(0, len(others), self.CHUNK):  # a view waits for one chunk at most, not a flood's whole
            self._lock.hand_over()
            if start % (8 * self.CHUNK) == 0 and start:
                give_way()  # a flood of events: the window's thread first, every 256
            with self._lock:
                self._others(task, others[start:start + self.CHUNK], self.tasks.progress[task])
                self.version += 1
        self._lock.hand_over()

    def _others(self, task: str, others: list[dict], prog: WorkerProgress) -> None:
        """A task's records but its steps (under the lock); their epoch rows added at once."""
        events = self.journal.events
        rows: list[dict] = []
        for r in others:
            kind = r.get("type")
            if kind == RecordType.EPOCH:
                self.journal.epochs.append({"task": task, **r})
                rows.append(r)
                said_by = self.journal.epoch_said_by(task, r, cluster=len(self.tasks.workers) > 1)
                if said_by is not None:
                    events.append({"time": _when(r), "task": said_by, "event": kind, "record": r})
            elif kind == RecordType.ALIVE:
                self.tasks.alive[task] = r
            elif kind == RecordType.UNREADABLE:
                events.append({"time": None, "task": task, "event": kind, "record": r})
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
                    events.append({"time": _when(r), "task": task,
                                   "event": name if isinstance(name, str) else "?", "record": r})
        if rows:
            self._epoch_rows(task, rows, prog)

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
        self.curves.table(task, "epoch").extend(np.array(ats, dtype=float), self.curves.times(rows),
                                                self._room(task, "epoch", _columns(rows)))

    def _room(self, task: str, kind: str, columns: dict) -> dict:
        """``columns`` but those a task's table has no room for (``MAX_COLUMNS``; said once) (under the lock)."""
        table = self.curves.table(task, kind)
        new = [c for c in columns if c not in table._cols]
        room = self.MAX_COLUMNS - len(table._cols)
        if len(new) <= room:
            return columns
        if (kind, task, "columns") not in self.marks.diverged:
            self.marks.diverged.add((kind, task, "columns"))
            self.journal.events.append({"time": time.time(), "task": task, "event": "columns", "text": (
                f"it reports more than {self.MAX_COLUMNS} metrics: the others are not kept ("
                + ", ".join(new[room:room + 5]) + (", …" if len(new) - room > 5 else "") + ")")})
        dropped = set(new[max(room, 0):])
        return {c: v for c, v in columns.items() if c not in dropped}

    def _resumed(self, task: str, r: dict) -> None:
        """An attempt took up training at a backup's step: its curves go on from there (the steps after
        it that the failed attempt made are redone, so they leave the plot, as TensorBoard purges them)."""
        step = number(r.get(GLOBAL_STEP))
        if not math.isfinite(step):
            return
        self.curves.cut_after(task, step)
        self.marks.resumed(task, r, step)

    def ingest_system(self, host: str, record: dict, tasks: set[str] | None = None) -> None:
        """A host's system sample (docs/metrics.md, ``system``): its CPU and memory, each GPU's
        load, and each of its tasks' CPU and memory, as rows of the system lane. A host cannot grow the tables:
        only ``tasks`` (the run's tasks there; None: any) get rows, and at most ``MAX_GPUS`` GPUs a host, each an
        index below ``MAX_GPUS * 4``."""
        with self._lock:
            self.system_lane.add(host, record, tasks)
            self.version += 1

    def set_state(self, task: str, state: str, words: str = "") -> None:
        """What supervision says of a task now (a ``Mark``; ``RUNNING`` clears it): a badge in the window; a
        stall is also a marker at the task's last step."""
        with self._lock:
            prog = self.tasks.progress.get(task)
            self.marks.set_state(task, state, words, float(prog.global_step if prog else 0))
            self.version += 1

    def note(self, task: str, event: str, text: str, when: float | None = None) -> None:
        """An event the console saw itself (a task ended, a connection dropped)."""
        with self._lock:
            self.journal.note({"time": when or time.time(), "task": task, "event": event, "text": text})
            self.version += 1

    # ------------------------------------------------------------ snapshots

    def save(self, folder, **where) -> None:
        """Keep the whole store in ``folder`` as a snapshot (console.store.snapshot) that ``restore`` gives back
        without a record decoded again; ``where``: Snapshot's fields of where the session read each task to."""
        with self._lock:
            state = Snapshot(**self.curves.kept(), **self.tasks.kept(), **self.system_lane.kept(),
                             **self.journal.kept(), **self.marks.kept(), **where)
        # Copies of the lists, not of the records: a record is never changed once kept. (A deep copy by a JSON
        # round trip held the lock, and the interpreter, for a third of a second after a flood of events.)
        snapshots.write(folder, state, self.curves.rows(state.tables))

    def restore(self, folder, state: Snapshot | None = None) -> Snapshot:
        """Fill this (empty) store from the snapshot in ``folder`` (``state``: read already); returns it.
        Table by table: a view drawing meanwhile waits for one table's copy at most. Raises ``OSError`` or
        ``ValueError`` for a missing or damaged snapshot (the store is then as it was: empty)."""
        state = state or snapshots.read(folder)
        if state is None:
            raise ValueError(f"no snapshot of a run's metrics in {folder}")
        with self._lock:
            if self.curves.tables or self.tasks.progress:
                raise ValueError("a snapshot is restored into an empty store only")
        try:
            tables = snapshots.table_arrays(folder, state)
            first = next(tables, None)  # the arrays are checked before the first comes
            with self._lock:  # what is small first: the view shows the tasks as their curves come
                for part in (self.curves, self.tasks, self.journal, self.marks, self.system_lane):
                    part.take_up(state)
                self.version += 1
            if first is not None:
                for owner, kind, arrays in itertools.chain([first], tables):  # read one table, then add it
                    xs, ts = arrays.pop("x"), arrays.pop("t")
                    give_way()  # a reattach's tables: the window's thread first between two
                    self._lock.hand_over()
                    with self._lock:
                        self.curves.add_rows(owner, kind, xs, ts, arrays)
                        self.version += 1
        except (KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as exc:
            self._clear()
            raise ValueError(f"the snapshot in {folder} is damaged: {exc!r}") from exc
        except BaseException:
            self._clear()  # nothing of a snapshot that could not be read whole
            raise
        return state
