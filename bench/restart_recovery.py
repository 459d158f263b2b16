"""R3: how fast a supervised run recovers from a killed worker, and how much training it redoes.

A 2-worker digits run on this machine, under the run session's supervision with the default
backups (every ~30 s of training). Once training has gone on for --kill-after seconds, one
worker's trainer is SIGKILLed. Per round:

- detect: from the kill to the first ``failure`` the supervisor says;
- running again: from the kill to every task's first step of the new attempt (TF import, cluster
  formation and the restore included);
- redone: training time of the killed attempt after the step it resumed from (and those steps);
- val_accuracy: the final one, beside an uninterrupted run with the same settings.

    python bench/restart_recovery.py [--rounds 3] [--epochs 40] [--kill-after 45]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console import cluster as cl  # noqa: E402
from console.run.runner import Run  # noqa: E402
from console.run.session import RunSession  # noqa: E402
from trainer.metrics import read_records  # noqa: E402


def one_round(home: Path, name: str, epochs: int, kill_after: float | None) -> dict:
    os.environ["TFCC_HOME"] = str(home / "host")
    os.environ["TFCC_CONSOLE_HOME"] = str(home / "console")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(epochs=epochs, per_replica_batch=16))
    run = Run(cluster, name)
    run.start()
    session = RunSession(run)
    lock = threading.Lock()
    seen = {"failure": None, "first_step": None}
    again = {}  # task -> when its first step of attempt 2 arrived
    steps = []  # (attempt, global step, time) of worker-0
    resumed = []

    def on_event(e):
        now = time.monotonic()
        with lock:
            if e.kind == "failure" and seen["failure"] is None:
                seen["failure"] = now
            elif e.kind == "records":
                for r in e.records:
                    if r.get("type") == "step":
                        if r.get("attempt", 1) > 1:
                            again.setdefault(e.task.name, now)
                        if e.task.name == "worker-0":
                            steps.append((r.get("attempt"), r["global_step"], r["time"]))
                            if seen["first_step"] is None:
                                seen["first_step"] = now
                    elif r.get("event") == "resumed":
                        resumed.append(r)

    session.subscribe(on_event)
    session.follow()
    tick = threading.Event()
    killed = None
    try:
        if kill_after is not None:
            while seen["first_step"] is None or time.monotonic() - seen["first_step"] < kill_after:
                tick.wait(0.05)
            pid = json.loads((home / "host" / "runs" / name / "worker-1" / "child.json").read_text())["pid"]
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
        if not session.wait(1800):
            raise SystemExit(f"run {name} did not end in 30 minutes")
    finally:
        session.detach()
        run.stop(grace=0)
    final = read_records(home / "host" / "runs" / name / "worker-0" / "metrics.jsonl")[-1]
    out = {"finished": final.get("event") == "finished",
           "val_accuracy": (final.get("metrics") or {}).get("val_accuracy", float("nan"))}
    if killed is not None:
        back = resumed[0]["global_step"] if resumed else 0
        lost = [(g, t) for a, g, t in steps if a == 1 and g > back]
        nan = float("nan")
        out.update(detect=seen["failure"] - killed if seen["failure"] is not None else nan,
                   again=max(again.values()) - killed if len(again) == len(run.tasks) else nan,
                   redone_s=(max(t for _, t in lost) - min(t for _, t in lost)) if len(lost) > 1 else 0.0,
                   redone_steps=len(lost), resumed_at=back)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--kill-after", type=float, default=45.0, help="seconds of training before the kill")
    ns = p.parse_args()
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tfcc-r3-") as tmp:
        base = one_round(Path(tmp) / "base", "base", ns.epochs, None)
        for i in range(ns.rounds):
            rows.append(one_round(Path(tmp) / f"r{i}", f"r{i}", ns.epochs, ns.kill_after))
    print(f"2 local workers, digits, {ns.epochs} epochs, default backups; worker-1 SIGKILLed after "
          f"{ns.kill_after:g} s of training")
    print(f"{'round':>5} {'detect s':>9} {'running again s':>16} {'redone s':>9} {'redone steps':>13} "
          f"{'resumed at':>11} {'val_acc':>8} {'vs uninterrupted':>17}")
    for i, r in enumerate(rows, 1):
        print(f"{i:>5} {r['detect']:>9.2f} {r['again']:>16.1f} {r['redone_s']:>9.1f} {r['redone_steps']:>13} "
              f"{r['resumed_at']:>11} {r['val_accuracy']:>8.4f} {100 * (r['val_accuracy'] - base['val_accuracy']):>+16.1f}pt")
    print(f"uninterrupted: val_accuracy {base['val_accuracy']:.4f}; goals: detect < 5 s, running again < 30 s, "
          "redone <= 30 s, within 2 points")
    ok = all(r["finished"] and "detect" in r and r["detect"] < 5 and r["again"] < 30 and r["redone_s"] <= 30
             and abs(r["val_accuracy"] - base["val_accuracy"]) <= 0.02 for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
