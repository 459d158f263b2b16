"""The metrics store's journal: a run's events and epoch records, the newest within a count and a size (Qt-free).

Each event is ``{"time", "task", "event", and "record": a task's record, or "text": the console's own words}``;
console.text words them.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager

from console.store.metric_ids import CLUSTER_TASK, EPOCH, is_cluster_wide
from console.store.snapshot import Snapshot
from trainer.records import FIT, PLACE_FIELDS

FINAL_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy")  # what a run header says it ended at


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


class Journal:
    """The events list and the epochs list, each ``Newest``; which epochs were said (a cluster's epoch is one
    event), and which events the console noted itself (``note``).

    It shares the store's lock: the methods said to be "under the lock" are called holding it, the others
    take it themselves.
    """

    def __init__(self, lock: AbstractContextManager, most_events: int, event_bytes: int, most_epochs: int,
                 epoch_bytes: int):
        self._lock = lock
        self.most_said = most_events
        self.epochs = Newest(most_epochs, epoch_bytes)
        self.events = Newest(most_events, event_bytes)
        self._noted: set = set()  # ids of the events the console noted itself (note): not in a snapshot
        self._said: dict = {}     # (attempt, epoch) -> the first task's record: a cluster's epoch is one event

    def clear(self) -> None:
        """No event or epoch, nothing said (under the lock)."""
        self.epochs.clear()
        self.events.clear()
        self._noted.clear()
        self._said.clear()

    def note(self, noted: dict) -> None:
        """An event the console saw itself (under the lock)."""
        self.events.append(noted)
        self._noted.add(id(noted))

    def epoch_said_by(self, task: str, r: dict, cluster: bool) -> str | None:
        """Whom the events list names for ``r`` (an epoch), or None to say it not again: the workers of a
        synchronous cluster (``cluster``: more than one worker) each say the same epoch with the same numbers,
        said once, as the cluster's; a worker whose numbers differ says its own (under the lock)."""
        key = (repr(r.get("attempt")), repr(r.get(FIT)), repr(r.get("epoch")))  # a script's later fit: its own
        first = self._said.get(key)
        if first is None:
            if len(self._said) >= self.most_said:  # a host that invents epochs: the oldest are forgotten
                self._said.pop(next(iter(self._said)))
            self._said[key] = (task, r)
            return CLUSTER_TASK if cluster else task
        if first[0] != task and all(first[1].get(k) == v for k, v in r.items()
                                    if k not in PLACE_FIELDS and is_cluster_wide(EPOCH + k)):
            return None
        return task

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

    def kept(self) -> dict:
        """The snapshot's fields of the journal (under the lock)."""
        # What the console noted itself is noted again by the session that takes the run up, or read from its
        # history: not kept here.
        return {"epochs": list(self.epochs), "events": [e for e in self.events if id(e) not in self._noted]}

    def take_up(self, state: Snapshot) -> None:
        """The journal of a snapshot (under the lock)."""
        self.epochs.extend(state.epochs)
        self.events.extend(state.events)
