"""The dashboard under a heavy stream: 128 workers x 100,000 steps of history, then 64 of them live.

A synthetic feed (tests.helpers.synthetic) plays the workers into the metrics store
while the dashboard is shown (offscreen) and redraws on its timer: first the history
as a reattach delivers it (500 steps per message, as fast as it comes), then
``--live-workers`` workers at ``--live-rate`` steps/s each. Prints the event loop's
longest stall (a 5 ms QTimer probe; goal <= 50 ms live, <= 100 ms during the replay),
the refresh rate while data flows (goal >= 25 redraws/s), the replay's duration (goal
<= 3 s), the time one redraw takes, and the process's peak memory (goal <= 600 MB).

    QT_QPA_PLATFORM=offscreen python bench/dashboard_load.py [--workers 128] [--steps 100000]
        [--live-workers 64] [--live-rate 100] [--live-seconds 5]
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=128)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--live-workers", type=int, default=64)
    ap.add_argument("--live-rate", type=float, default=100.0, help="steps/s of each live worker")
    ap.add_argument("--live-seconds", type=float, default=5.0)
    ns = ap.parse_args()
    app = QApplication.instance() or QApplication([])
    from console.gui.app import configure_process

    configure_process()  # as the window does

    from console.gui.dashboard import Dashboard
    from console.metrics_store import MetricsStore
    from tests.helpers.synthetic import feed

    store = MetricsStore()
    board = Dashboard(store)
    board.resize(1400, 900)
    board.show()
    board.set_store(store, [f"worker-{i}" for i in range(ns.workers)])
    app.processEvents()
    gc.freeze()  # as the window does after start-up

    redraw_times: list[float] = []
    original = board._on_timer_timeout

    def timed_redraw():
        before = board.redraws
        t0 = time.perf_counter()
        original()
        if board.redraws != before:
            redraw_times.append(time.perf_counter() - t0)

    board.timer.timeout.disconnect()
    board.timer.timeout.connect(timed_redraw)
    gaps: list[float] = []
    last = [time.perf_counter()]
    probe = QTimer()
    probe.setInterval(5)

    def tick():
        now = time.perf_counter()
        gaps.append(now - last[0] - 0.005)
        last[0] = now

    probe.timeout.connect(tick)

    live_steps = int(ns.live_rate * ns.live_seconds)

    def phase(workers: int, steps: int, first: int, rate: float, burst: int, staggered: bool = False):
        """Stream, measuring stalls and redraws while the data flows."""
        gaps.clear()
        before = len(redraw_times)
        last[0] = time.perf_counter()
        probe.start()
        t0 = time.perf_counter()
        feeder = feed(store, workers, steps, rate=rate, burst=burst, first_step=first,
                      total_steps=ns.steps + live_steps, staggered=staggered)
        while feeder.is_alive():
            app.processEvents()
        seconds = time.perf_counter() - t0
        probe.stop()
        return max(gaps), (len(redraw_times) - before) / seconds, seconds, sum(g > 0.05 for g in gaps), len(gaps)

    # 1. The history arrives as a reattach delivers it: each follow message carries up to
    #    500 steps of a worker, as fast as the agents send them.
    history = phase(ns.workers, ns.steps, 1, rate=1000.0, burst=500)
    # 2. Live: some workers report --live-rate steps a second on top of that history, in
    #    messages of 10 steps, each worker on its own clock (the data changes more often than
    #    the dashboard redraws).
    live = phase(ns.live_workers, live_steps, ns.steps + 1, rate=ns.live_rate / 10, burst=10, staggered=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    points = sum(store.points(w, "step_time") for w in store.workers)
    print(f"\ndashboard load ({time.strftime('%Y-%m-%d')}, {ns.workers} workers x {ns.steps} steps of history, then "
          f"{ns.live_workers} workers live at {ns.live_rate:g} steps/s each for {ns.live_seconds:g} s; "
          f"{os.environ['QT_QPA_PLATFORM']} platform, {len(os.sched_getaffinity(0))} cores; {points} step rows held)")
    print(f"{'measure':<34} | {'history':>8} | {'live':>8} | {'goal':>6} | met (live)")
    rows = [("longest stall (ms)", history[0] * 1000, live[0] * 1000, "<= 50", live[0] <= 0.050),
            ("refresh rate (redraws/s)", history[1], live[1], ">= 25", live[1] >= 25),
            ("seconds (history goal <= 3)", history[2], live[2], "", None),
            ("stalls over 50 ms", history[3], live[3], "", None)]
    for name, h, lv, goal, met in rows:
        print(f"{name:<34} | {h:>8.1f} | {lv:>8.1f} | {goal:>6} | {'' if met is None else 'yes' if met else 'NO'}")
    print(f"{'peak memory (MB)':<34} | {'':>8} | {peak_mb:>8.0f} | {'<= 600':>6} | {'yes' if peak_mb <= 600 else 'NO'}")
    print(f"{'redraw (timer handler) median/max ms':<34} | {statistics.median(redraw_times) * 1000:.0f}/"
          f"{max(redraw_times) * 1000:.0f}")

if __name__ == "__main__":
    main()
