"""The metrics store's marks: what supervision says of each task, and the markers on the time axis (Qt-free).

Kept as data: console.text words them.
"""

from __future__ import annotations

import dataclasses
import math
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass

from console.states import Mark
from console.store.snapshot import Snapshot
from trainer.records import GLOBAL_STEP, number


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


class Marks:
    """Each task's state as supervision says it, the markers (``most`` at most) and the restarts they mark, and
    what was said once of a task (its first non-finite value, its metrics past the columns' bound).

    It shares the store's lock: the methods said to be "under the lock" are called holding it, the others
    take it themselves.
    """

    def __init__(self, lock: AbstractContextManager, most: int):
        self._lock = lock
        self.most = most
        self.states: dict[str, tuple[str, str]] = {}  # task -> (state, words): what supervision says of it
        self.markers: list[Marker] = []
        self.restarts: list[tuple[int, float]] = []  # (attempt, global step it resumed from), for markers
        self.diverged: set = set()  # (what, task, …) said once: a first non-finite value, metrics not kept

    def clear(self) -> None:
        """No state, marker or restart, nothing said (under the lock)."""
        self.states.clear()
        self.markers.clear()
        self.restarts.clear()
        self.diverged.clear()

    def set_state(self, task: str, state: str, words: str, step: float) -> None:
        """What supervision says of a task now (a ``Mark``; ``RUNNING`` clears it); a stall is also a marker at
        ``step``, the task's last (under the lock)."""
        if state == Mark.RUNNING:
            self.states.pop(task, None)
        else:
            if state == Mark.STALLED and self.states.get(task, ("",))[0] != Mark.STALLED:
                self.markers.append(Marker(Marker.STALL, task, step, time.time(), words=words))
            self.states[task] = (state, words)

    def not_finite(self, task: str, r: dict, metric: str) -> None:
        """A task's first non-finite value: a marker at its step (under the lock)."""
        if (Marker.NAN, task) in self.diverged or len(self.markers) >= self.most:
            return  # the first per task: a diverged run is not a thousand markers
        self.diverged.add((Marker.NAN, task))
        step = number(r.get(GLOBAL_STEP))
        when = number(r.get("time"))
        value = number(r.get(metric))
        self.markers.append(Marker(Marker.NAN, task, step, when if math.isfinite(when) else time.time(), metric=metric,
                                   value=None if math.isnan(value) else value))

    def resumed(self, task: str, r: dict, step: float) -> None:
        """An attempt took up training at a backup's ``step``: a marker, once an attempt (under the lock)."""
        attempt = r.get("attempt")
        if not any(a == attempt for a, _ in self.restarts):
            self.restarts.append((attempt, step))
            changed = r.get("changed")
            self.markers.append(Marker(Marker.RESTART, task, step, number(r.get("time")),
                                       attempt=attempt if isinstance(attempt, int) else None,
                                       changed=changed if isinstance(changed, dict) else None))

    def states_snapshot(self) -> dict[str, tuple[str, str]]:
        with self._lock:
            return dict(self.states)

    def markers_snapshot(self) -> list[Marker]:
        with self._lock:
            return list(self.markers)

    def kept(self) -> dict:
        """The snapshot's fields of the marks (under the lock)."""
        # Supervision's states and stalls are said again by the session that takes the run up: not kept here.
        return {"restarts": list(self.restarts),
                "markers": [dataclasses.asdict(m) for m in self.markers if m.kind != Marker.STALL],
                "diverged": sorted(self.diverged)}

    def take_up(self, state: Snapshot) -> None:
        """The marks of a snapshot (under the lock)."""
        self.restarts.extend(state.restarts)
        self.markers.extend(Marker(**m) for m in state.markers)
        self.states.update(state.states)
        self.diverged.update(state.diverged)
