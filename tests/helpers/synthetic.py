"""A synthetic metrics stream for load tests and benchmarks of the dashboard (Qt-free).

``feed`` plays ``workers`` workers into a ``MetricsStore`` from a thread, as a
run's follow threads would: every ``1 / rate`` seconds each worker delivers
``burst`` step records (what one follow message carries after a pause).
"""

from __future__ import annotations

import math
import random
import threading
import time

from console.store.metrics import MetricsStore


def step_record(worker: int, global_step: int, steps_per_epoch: int, rng: random.Random) -> dict:
    step_time = 0.1 * (1.6 if worker == 1 else 1.0) * (1 + 0.1 * rng.random())
    return {"type": "step", "task_type": "worker", "task_index": worker, "time": time.time(),
            "epoch": (global_step - 1) // steps_per_epoch, "step": (global_step - 1) % steps_per_epoch,
            "global_step": global_step, "loss": 2.3 * math.exp(-global_step / 3000) + 0.05 * rng.random(),
            "step_time": step_time, "global_batch": 256, "examples_per_sec": 256 / 16 / step_time,
            "global_examples_per_sec": 256 / step_time}


def started_record(worker: int, workers: int, steps: int, steps_per_epoch: int) -> dict:
    return {"type": "event", "event": "started", "task_type": "worker", "task_index": worker, "time": time.time(),
            "strategy": "multi_worker_mirrored", "num_workers": workers, "replicas_per_worker": 1, "num_replicas": workers,
            "per_replica_batch": 16, "per_worker_batch": 16, "global_batch": 16 * workers,
            "steps_per_epoch": steps_per_epoch, "epochs": math.ceil(steps / steps_per_epoch)}


def feed(store: MetricsStore, workers: int, steps: int, rate: float = 10.0, burst: int = 1,
         stop: threading.Event | None = None, steps_per_epoch: int = 1000, first_step: int = 1,
         total_steps: int | None = None, staggered: bool = False) -> threading.Thread:
    """Start a thread that delivers steps ``first_step`` .. ``first_step + steps - 1`` of each
    worker (of a run of ``total_steps``); returns the (started) thread. ``staggered``: each
    tick serves one worker in turn (``rate`` is then per worker), as unsynchronised follow
    threads deliver; else every worker at each tick."""
    stop = stop or threading.Event()
    names = [f"worker-{i}" for i in range(workers)]

    def run():
        rng = random.Random(1)
        if first_step == 1:
            for i, name in enumerate(names):
                store.ingest(name, [started_record(i, workers, total_steps or steps, steps_per_epoch)])
        delivered = 0
        start = time.monotonic()
        tick = 0
        ticks_per_round = len(names) if staggered else 1
        while delivered < steps and not stop.is_set():
            count = min(burst, steps - delivered)
            for r in range(ticks_per_round):
                serve = [r] if staggered else range(len(names))
                for i in serve:
                    store.ingest(names[i], [step_record(i, first_step + delivered + k, steps_per_epoch, rng)
                                            for k in range(count)])
                tick += 1
                # keeps the pace; wakes on stop
                stop.wait(max(0.0, start + tick / (rate * ticks_per_round) - time.monotonic()))
            delivered += count

    thread = threading.Thread(target=run, name="tfcc-synthetic-feed", daemon=True)
    thread.start()
    return thread
