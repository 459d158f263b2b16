"""The metrics store's tasks: each one's progress through its training, and its newest liveness record (Qt-free)."""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np

from console.store.snapshot import Snapshot


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


class Tasks:
    """The tasks with records, in the order they came (``workers``), each one's ``WorkerProgress``, and its
    newest liveness record (``alive``: parameter-server workers and ps).

    It shares the store's lock: the methods said to be "under the lock" are called holding it, the others
    take it themselves.
    """

    def __init__(self, lock: AbstractContextManager):
        self._lock = lock
        self.workers: list[str] = []
        self.progress: dict[str, WorkerProgress] = {}
        self.alive: dict[str, dict] = {}  # task -> its newest liveness record (parameter-server workers and ps)

    def clear(self) -> None:
        """No task (under the lock)."""
        self.workers.clear()
        self.progress.clear()
        self.alive.clear()

    def of(self, task: str) -> WorkerProgress:
        """The task's progress; a task not seen before comes last (under the lock)."""
        if task not in self.progress:
            self.workers.append(task)
            self.progress[task] = WorkerProgress()
        return self.progress[task]

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

    def kept(self) -> dict:
        """The snapshot's fields of the tasks (under the lock)."""
        return {"workers": list(self.workers), "progress": {k: dataclasses.asdict(v) for k, v in self.progress.items()},
                "alive": dict(self.alive)}

    def take_up(self, state: Snapshot) -> None:
        """The tasks of a snapshot (under the lock)."""
        self.workers[:] = list(state.workers)
        self.progress.update({k: WorkerProgress(**v) for k, v in state.progress.items()})
        self.alive.update(state.alive)
