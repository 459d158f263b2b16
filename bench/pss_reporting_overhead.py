"""What the coordinator's step records cost parameter-server training (goal: on/off >= 0.98).

A local chief + 2 workers + 1 ps trains digits, with step records (every 10th step, fetched off the
training thread) and with
--no-report, in alternating rounds (separate processes vary a lot on small VMs: only the ratio of
neighbouring rounds means something). Throughput is steps per second of ``fit`` (the chief's
``train_time``), the TF import and the cluster's start-up left out.

    python bench/pss_reporting_overhead.py [--rounds 4] [--epochs 6]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.localrun import free_ports, start_local_tasks  # noqa: E402
from trainer.metrics import read_records  # noqa: E402

THREADS = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}


def one_run(root: Path, epochs: int, report: bool) -> float:
    """Steps per second of the chief's fit."""
    ports = free_ports(4)
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1:3]],
               "ps": [f"localhost:{ports[3]}"]}
    args = ["--epochs", str(epochs), "--no-save"] + ([] if report else ["--no-report"])
    tasks = start_local_tasks(cluster, root, args, env=THREADS)
    chief = tasks[0] if tasks[0].task_type == "chief" else next(t for t in tasks if t.task_type == "chief")
    try:
        if chief.process.wait(timeout=600) != 0:
            raise SystemExit((chief.run_dir / "stderr.log").read_text()[-2000:])
    finally:
        for t in tasks:
            if t.process.poll() is None:
                os.kill(t.process.pid, signal.SIGTERM)
            t.process.wait(30)
    records = read_records(chief.run_dir / "metrics.jsonl")
    started = next(r for r in records if r.get("event") == "started")
    finished = next(r for r in records if r.get("event") == "finished")
    return started["steps_per_epoch"] * epochs / finished["train_time"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--epochs", type=int, default=6)
    ns = p.parse_args()
    ratios = []
    print(f"{'round':>5} {'on steps/s':>11} {'off steps/s':>12} {'on/off':>7}")
    with tempfile.TemporaryDirectory(prefix="tfcc-pss-") as tmp:
        for i in range(ns.rounds):
            first_on = i % 2 == 0  # alternate which goes first
            runs = {}
            for report in ((True, False) if first_on else (False, True)):
                runs[report] = one_run(Path(tmp) / f"r{i}-{'on' if report else 'off'}", ns.epochs, report)
            ratios.append(runs[True] / runs[False])
            print(f"{i + 1:>5} {runs[True]:>11.1f} {runs[False]:>12.1f} {ratios[-1]:>7.3f}")
    median = statistics.median(ratios)
    print(f"median on/off {median:.3f} (goal >= 0.98)")
    return 0 if median >= 0.98 else 1


if __name__ == "__main__":
    sys.exit(main())
