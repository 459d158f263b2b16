"""The dashboard under a heavy stream: 128 workers x 100,000 steps of history, then 64 of them live.

A synthetic feed (tests.helpers.synthetic) plays the workers into the metrics store
while the dashboard is shown (offscreen) and redraws on its timer:

1. first delivery: the history as the hosts send it to a console that never saw the run
   (500 steps per message, as fast as it comes);
2. the session ends (a detach) and keeps its snapshot of the store; a reattach fills a new
   store from it on a thread, as the next session does before it reads on from the hosts
   (console/store/cache.py);
3. live: ``--live-workers`` workers at ``--live-rate`` steps/s each, on top of that history.

Prints the event loop's longest stall (a 5 ms QTimer probe; goal <= 50 ms live, <= 100 ms
during a reattach), the refresh rate while data flows (goal >= 25 redraws/s), the reattach's
duration (goal <= 3 s), the time one redraw takes, and the process's peak memory (goal <= 600 MB).

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
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QEventLoop, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402


def peak_mb() -> float:
    """The process's peak resident memory since start, or since the last ``reset_peak``."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> bool:
    """Start the peak over at what the process holds now (Linux: 5 to /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


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
    from console.store.metrics import MetricsStore
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

    def measure(start_work) -> tuple:
        """Run the event loop while ``start_work()``'s thread works: (longest stall, redraws/s,
        seconds, stalls over 50 ms)."""
        gaps.clear()
        before = len(redraw_times)
        last[0] = time.perf_counter()
        probe.start()
        t0 = time.perf_counter()
        worker = start_work()
        # The window's own event loop (it waits when it has nothing to do, as the window's does) till the work ends.
        loop = QEventLoop()
        done = QTimer()
        done.setInterval(10)
        done.timeout.connect(lambda: None if worker.is_alive() else loop.quit())
        done.start()
        loop.exec()
        done.stop()
        seconds = time.perf_counter() - t0
        probe.stop()
        return max(gaps), (len(redraw_times) - before) / seconds, seconds, sum(g > 0.05 for g in gaps)

    def phase(target, workers: int, steps: int, first: int, rate: float, burst: int, staggered: bool = False):
        return measure(lambda: feed(target, workers, steps, rate=rate, burst=burst, first_step=first,
                                    total_steps=ns.steps + live_steps, staggered=staggered))

    # 1. First delivery: each follow message carries up to 500 steps of a worker, as fast as the
    #    agents send them.
    first = phase(store, ns.workers, ns.steps, 1, rate=1000.0, burst=500)
    first_peak = peak_mb()
    # 2. The session ends and keeps its snapshot; the next one fills a new store from it.
    snapshot = Path(tempfile.mkdtemp(prefix="tfcc-bench-"))
    t0 = time.perf_counter()
    store.save(snapshot)
    saved = time.perf_counter() - t0
    size_mb = sum(f.stat().st_size for f in snapshot.iterdir()) / 1e6
    store = MetricsStore()
    gc.collect()  # the first store is gone (but for the dashboard's hold) before the second fills

    def restore():
        # As the window reattaches: the dashboard takes the new store on the UI thread, the
        # session fills it from the snapshot on its own.
        board.set_store(store, [f"worker-{i}" for i in range(ns.workers)])
        # A console that reattaches never held the first delivery: its peak is counted from here,
        # the first store freed as the dashboard let it go.
        reset[0] = reset_peak()
        thread = threading.Thread(target=store.restore, args=(snapshot,), name="tfcc-bench-restore")
        thread.start()
        return thread

    reset = [False]
    reattach = measure(restore)
    for f in snapshot.iterdir():
        f.unlink()
    snapshot.rmdir()
    # 3. Live: some workers report --live-rate steps a second on top of that history, in
    #    messages of 10 steps, each worker on its own clock (the data changes more often than
    #    the dashboard redraws).
    live = phase(store, ns.live_workers, live_steps, ns.steps + 1, rate=ns.live_rate / 10, burst=10, staggered=True)
    later_peak = peak_mb()
    points = sum(store.points(w, "step_time") for w in store.workers)
    print(f"\ndashboard load ({time.strftime('%Y-%m-%d')}, {ns.workers} workers x {ns.steps} steps of history, then "
          f"{ns.live_workers} workers live at {ns.live_rate:g} steps/s each for {ns.live_seconds:g} s; "
          f"{os.environ['QT_QPA_PLATFORM']} platform, {len(os.sched_getaffinity(0))} cores; {points} step rows held; "
          f"snapshot {size_mb:.0f} MB written in {saved:.1f} s)")
    print(f"{'measure':<28} | {'first delivery':>14} | {'reattach':>8} | {'live':>8} | goal (met)")
    rows = [("longest stall (ms)", [v[0] * 1000 for v in (first, reattach, live)],
             f"reattach <= 100 ({'yes' if reattach[0] <= 0.1 else 'NO'}), live <= 50 ({'yes' if live[0] <= 0.05 else 'NO'})"),
            ("refresh rate (redraws/s)", [v[1] for v in (first, reattach, live)],
             f"live >= 25 ({'yes' if live[1] >= 25 else 'NO'})"),
            ("seconds", [v[2] for v in (first, reattach, live)],
             f"reattach <= 3 ({'yes' if reattach[2] <= 3 else 'NO'})"),
            ("stalls over 50 ms", [v[3] for v in (first, reattach, live)], "")]
    for name, values, goal in rows:
        print(f"{name:<28} | {values[0]:>14.1f} | {values[1]:>8.1f} | {values[2]:>8.1f} | {goal}")
    later = f"{later_peak:.0f}" if reset[0] else "-"
    print(f"{'peak memory (MB)':<28} | {first_peak:>14.0f} | {later:>19} | <= 600 (first delivery "
          f"{'yes' if first_peak <= 600 else 'NO'}, reattach and live {'yes' if reset[0] and later_peak <= 600 else 'NO'})")
    print(f"{'redraw (timer handler) ms':<28} | median {statistics.median(redraw_times) * 1000:.0f}, "
          f"max {max(redraw_times) * 1000:.0f}")


if __name__ == "__main__":
    main()
