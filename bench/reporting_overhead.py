"""Training throughput with per-step reporting on and off, measured in one run.

Runs the trainer's synthetic workload alternately with and without per-step
metrics (``--no-report``), on one process and on two local MWMS workers, and
prints throughput (examples/s over the epochs after the first, which excludes
tracing) and the ratio on/off. Goal: ratio >= 0.98.

The machines this runs on are shared and noisy (two cores; the same
configuration's throughput can move by tens of percent between runs), so the
rounds are interleaved and the verdict uses each configuration's best round,
the one least disturbed by its neighbours; the median is printed beside it.

    python bench/reporting_overhead.py [--rounds 3] [--steps 150]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from console.localrun import local_cluster, start_local_tasks  # noqa: E402
from trainer.metrics import read_records  # noqa: E402

THREADS = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}


def throughput(workers: int, report: bool, steps: int, epochs: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--workload", "synthetic", "--shape", "28,28,1", "--examples", "4096",
                "--per-replica-batch", "32", "--steps-per-epoch", str(steps), "--epochs", str(epochs),
                "--no-save"]
        if not report:
            args.append("--no-report")
        tasks = start_local_tasks(local_cluster(workers), Path(tmp), args, env=THREADS)
        for t in tasks:
            if t.process.wait(timeout=900) != 0:
                raise SystemExit(f"{t.name} failed: {(t.run_dir / 'stderr.log').read_text()[-2000:]}")
        records = read_records(tasks[0].metrics_path)
        started = next(r for r in records if r.get("event") == "started")
        epochs_rec = [r for r in records if r["type"] == "epoch"][1:]  # skip the tracing epoch
        seconds = sum(r["epoch_time"] for r in epochs_rec)
        return len(epochs_rec) * steps * started["global_batch"] / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--epochs", type=int, default=3)
    ns = ap.parse_args()
    rows = []
    for workers in (1, 2):
        on, off = [], []
        for _ in range(ns.rounds):  # interleaved so drift hits both alike
            off.append(throughput(workers, False, ns.steps, ns.epochs))
            on.append(throughput(workers, True, ns.steps, ns.epochs))
        rows.append((workers, off, on))
    print(f"\nreporting overhead ({time.strftime('%Y-%m-%d')}, {ns.rounds} interleaved rounds, "
          f"{ns.steps} steps x {ns.epochs - 1} timed epochs; examples/s)")
    print(f"{'workers':>7} | {'off best':>9} | {'on best':>9} | {'ratio best':>10} | "
          f"{'off median':>10} | {'on median':>10} | {'ratio median':>12} | goal >= 0.98")
    for workers, off, on in rows:
        best = max(on) / max(off)
        median = statistics.median(on) / statistics.median(off)
        print(f"{workers:>7} | {max(off):>9.0f} | {max(on):>9.0f} | {best:>10.3f} | "
              f"{statistics.median(off):>10.0f} | {statistics.median(on):>10.0f} | {median:>12.3f} | "
              f"{'ok' if best >= 0.98 else 'MISSED'}")


if __name__ == "__main__":
    main()
