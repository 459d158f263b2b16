"""The metrics store's system lane: the hosts' samples of their CPU, memory and GPUs as rows (Qt-free).

A host cannot grow the store with them: only the run's own tasks get rows, and at most ``MAX_GPUS`` GPUs a host.
"""

from __future__ import annotations

import numpy as np

from console.store.curves import Curves
from console.store.metric_ids import HOST
from console.store.snapshot import Snapshot
from trainer.records import number

MAX_GPUS = 16  # GPU rows a host's samples may make (a machine has at most 16; more is a host making them up)


class SystemLane:
    """The hosts with system samples, in the order they came, and the GPUs each one's tasks see; the rows go
    to ``curves`` (owner ``host:<name>``, ``host:<name>/gpu<i>`` or a task; kind ``sys``). Every method is
    called under the store's lock."""

    def __init__(self, curves: Curves):
        self._curves = curves
        self.hosts: list[str] = []            # hosts with system samples, in the order they came
        self._gpus: dict[str, set] = {}       # host -> the GPU indexes its samples made rows of (MAX_GPUS at most)
        self.gpus_used: dict[str, set | None] = {}   # host -> the GPU indices its tasks see (None: all)

    def clear(self) -> None:
        """No host (the GPUs each made rows of are remembered, as they always were)."""
        self.hosts.clear()
        self.gpus_used.clear()

    def add(self, host: str, record: dict, tasks: set[str] | None) -> None:
        """A host's system sample (docs/metrics.md, ``system``): its CPU and memory, each GPU's load, and each of
        its tasks' CPU and memory, as rows. Only ``tasks`` (the run's tasks there; None: any) get rows, and at
        most ``MAX_GPUS`` GPUs a host, each an index below ``MAX_GPUS * 4``."""
        now = np.array([number(record.get("time"))])
        value = number

        def row(owner: str, values: dict) -> None:
            table = self._curves.table(owner, "sys")
            table.extend(now, kept, {k: np.array([v], dtype=np.float32) for k, v in values.items()})

        cpus = value(record.get("cpus"))
        gb = 1e-9
        kept = self._curves.times([record])
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

    def kept(self) -> dict:
        """The snapshot's fields of the system lane."""
        return {"hosts": list(self.hosts),
                "gpus_used": {h: None if g is None else sorted(g) for h, g in self.gpus_used.items()}}

    def take_up(self, state: Snapshot) -> None:
        """The system lane of a snapshot (its rows come with the curves')."""
        self.hosts[:] = list(state.hosts)
        self.gpus_used.update({h: None if g is None else set(g) for h, g in state.gpus_used.items()})
