"""Stop on the embedded default: from Stop to every task's exit, and the training a Stop loses.

The README's first run (two local workers, MultiWorkerMirroredStrategy, digits) started through the agent as the
window starts it, stopped as the window's Stop does (``Run.stop``: SIGTERM, SIGKILL after the 10 s grace) at a
different step each round. Per round:

- stop -> exited: from the Stop to the last task's end (its ``exit.json``), goal at most 2 s;
- exit: how each task ended (143: on its own after its backup; -9: the grace's SIGKILL);
- after SIGTERM: the steps each task trained after the Stop (the step in progress, then up to two more, where every
  task stops together: trainer/stopping.py);
- lost: the steps trained that no backup holds (the newest backup's step against the last step trained); a resume
  redoes them. Goal 0.

    python bench/stop_time.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.protocol import BACKUP_DIR, backup_steps  # noqa: E402
from console import cluster as cl  # noqa: E402
from console.run.runner import Run  # noqa: E402
from trainer.metrics import read_records  # noqa: E402

GOAL_SECONDS = 2.0


def steps_of(folder: Path) -> list[dict]:
    path = folder / "metrics.jsonl"
    return [r for r in read_records(path) if r.get("type") == "step"] if path.exists() else []


def one_round(number: int, at_step: int) -> dict:
    cluster = cl.default()
    cluster.training.epochs = 100
    run = Run(cluster, f"stop-{number}")
    run.start()
    folders = [Path(os.environ["TFCC_HOME"]) / "runs" / run.run_id / t.name for t in run.tasks]
    try:
        deadline = time.monotonic() + 300
        while not all(any(r["global_step"] >= at_step for r in steps_of(f)) for f in folders):
            if time.monotonic() > deadline:
                raise SystemExit(f"round {number}: no step {at_step} in 300 s")
            time.sleep(0.05)
        before = [max(r["global_step"] for r in steps_of(f)) for f in folders]
        asked = time.time()
        run.stop()
    finally:
        run.detach()
    ends = [json.loads((f / "exit.json").read_text()) for f in folders]
    last = [max(r["global_step"] for r in steps_of(f)) for f in folders]
    backups = [max(backup_steps(os.listdir(f / BACKUP_DIR)) or [0]) for f in folders]
    return {"round": number, "stop -> exited": max(e["ended"] for e in ends) - asked,
            "exit": "/".join(str(e["returncode"]) for e in ends),
            "after SIGTERM": "/".join(str(a - b) for a, b in zip(last, before)),
            "last step": "/".join(map(str, last)), "backup": "/".join(map(str, backups)),
            "lost": max(a - b for a, b in zip(last, backups))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfcc-stop-") as root:
        os.environ["TFCC_HOME"] = str(Path(root) / "host-home")
        os.environ["TFCC_CONSOLE_HOME"] = str(Path(root) / "console-home")
        rows = [one_round(i + 1, 5 + 7 * i) for i in range(args.rounds)]
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c])) for r in rows))
              for c in columns}
    print("  ".join(f"{c:>{widths[c]}}" for c in columns))
    for r in rows:
        print("  ".join(f"{(f'{r[c]:.2f}' if isinstance(r[c], float) else str(r[c])):>{widths[c]}}" for c in columns))
    times = [r["stop -> exited"] for r in rows]
    print(f"\nstop -> every task exited: median {statistics.median(times):.2f} s, worst {max(times):.2f} s "
          f"(goal {GOAL_SECONDS:.0f} s; the grace before SIGKILL is 10 s); training lost: worst "
          f"{max(r['lost'] for r in rows)} steps (goal 0)")


if __name__ == "__main__":
    main()
