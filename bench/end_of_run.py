"""The end of a run: from the last epoch to the process's exit, split into what happens between.

A 2-worker digits run (local processes, MultiWorkerMirroredStrategy), as tfcc starts it. From each
task's metrics file and its process's exit, per task:

- last epoch -> backup: the end-of-training backup (``backing_up`` .. ``backed_up``);
- saving: ``saving`` .. ``saved`` (the model's save; under MWMS every worker takes part);
- saved -> finished: what the trainer does after the save before its last record;
- finished -> exit: the interpreter's end (TensorFlow's threads and the collective's teardown).

    python bench/end_of_run.py [--rounds 3] [--epochs 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.localrun import local_cluster, start_local_tasks  # noqa: E402


def one_round(root: Path, epochs: int) -> list[dict]:
    tasks = start_local_tasks(local_cluster(2), root, ["--epochs", str(epochs), "--per-replica-batch", "16"])
    exits: dict[str, float] = {}

    def wait(task):
        task.process.wait()
        exits[task.name] = time.time()

    threads = [threading.Thread(target=wait, args=(t,)) for t in tasks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    rows = []
    for task in tasks:
        records = [json.loads(line) for line in task.metrics_path.read_text().splitlines() if line.strip()]
        epochs_done = [r for r in records if r.get("type") == "epoch"]
        events = {r["event"]: r for r in records if r.get("type") == "event"}
        last_backup = [r for r in records if r.get("event") == "backed_up"][-1]
        last_epoch = epochs_done[-1]["time"]
        rows.append({
            "task": task.name, "exit": task.process.returncode,
            "backup": last_backup["time"] - last_epoch if last_backup["time"] > last_epoch else 0.0,
            "to saving": events["saving"]["time"] - max(last_epoch, last_backup["time"]),
            "saving": events["saved"]["time"] - events["saving"]["time"],
            "saved -> finished": events["finished"]["time"] - events["saved"]["time"],
            "finished -> exit": exits[task.name] - events["finished"]["time"],
            "total": exits[task.name] - last_epoch,
        })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=4)
    ns = ap.parse_args()
    rows = []
    for i in range(ns.rounds):
        with tempfile.TemporaryDirectory(prefix="tfcc-end-") as tmp:
            rows += one_round(Path(tmp), ns.epochs)
    parts = ["backup", "to saving", "saving", "saved -> finished", "finished -> exit", "total"]
    print(f"\nthe end of a run ({time.strftime('%Y-%m-%d')}; 2 local workers, digits, {ns.epochs} epochs, "
          f"{ns.rounds} rounds): seconds from the last epoch's record, median (max) over {len(rows)} tasks")
    print(f"{'part':<20} | {'worker-0 (chief)':>18} | {'worker-1':>18}")
    for part in parts:
        cells = []
        for name in ("worker-0", "worker-1"):
            values = [r[part] for r in rows if r["task"] == name]
            cells.append(f"{statistics.median(values):.2f} ({max(values):.2f})")
        print(f"{part:<20} | {cells[0]:>18} | {cells[1]:>18}")
    bad = [r for r in rows if r["exit"] != 0]
    if bad:
        print(f"{len(bad)} tasks did not exit 0: {bad}")


if __name__ == "__main__":
    main()
