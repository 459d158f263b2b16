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

The shrink case (``--shrink``, root: SSH test hosts in network namespaces, tests/helpers/testhosts.py): a
3-worker elastic run (training.elastic = 2) on three hosts; after --kill-after seconds of training one host's
namespace is removed (its sshd and tasks gone for good, its address silent). Per round:

- final: from the removal to the supervisor's word that the run goes on without it (the host did not answer
  for 30 s after the failure: ``LOST_AFTER``);
- again: from then to both tasks left training again (their first step of the new attempt);
- redone: training time and steps of the lost attempt after the step the run resumed from;
- val_accuracy: the final one, beside an uninterrupted 3-worker run on the same hosts.

    python bench/restart_recovery.py --shrink [--rounds 3] [--epochs 40] [--kill-after 20]
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


def shrink_round(hosts, home: Path, name: str, epochs: int, remove_after: float | None) -> dict:
    """One elastic run on the three test ``hosts``; ``remove_after`` s of training in, host 2 is removed."""
    os.environ["TFCC_CONSOLE_HOME"] = str(home / "console")
    (home / "console").mkdir(parents=True, exist_ok=True)
    os.environ["TFCC_KNOWN_HOSTS"] = str(hosts.known_hosts(home / "known_hosts"))
    machines = [cl.Host(name=h.name, address=h.address, user="root", key=str(hosts.client_key),
                        python=sys.executable) for h in hosts.hosts]
    cluster = cl.Cluster(machines, [cl.Task(host=h.name) for h in hosts.hosts],
                         cl.Training(epochs=epochs, per_replica_batch=16, elastic=2))
    run = Run(cluster, name)
    run.start()
    session = RunSession(run)
    lock = threading.Lock()
    seen = {"failure": None, "final": None, "first_step": None}
    again = {}  # task -> when its first step after the shrink arrived
    steps = []  # (attempt, global step, time) of worker-0
    resumed = []

    def on_event(e):
        now = time.monotonic()
        with lock:
            if e.kind == "failure" and seen["failure"] is None:
                seen["failure"] = now
            elif e.kind == "resized" and seen["final"] is None:
                seen["final"] = now
            elif e.kind == "records":
                for r in e.records:
                    if r.get("type") == "step":
                        if seen["final"] is not None:
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
    removed = None
    try:
        if remove_after is not None:
            while seen["first_step"] is None or time.monotonic() - seen["first_step"] < remove_after:
                tick.wait(0.05)
            hosts.remove(hosts.hosts[2])
            removed = time.monotonic()
        if not session.wait(1800):
            raise SystemExit(f"run {name} did not end in 30 minutes")
    finally:
        session.detach()
        run.stop_each(grace=0)
        if removed is not None:
            hosts.bring_back(hosts.hosts[2])
    final = read_records(hosts.hosts[0].tfcc_home / "runs" / name / "worker-0" / "metrics.jsonl")[-1]
    out = {"finished": final.get("event") == "finished",
           "val_accuracy": (final.get("metrics") or {}).get("val_accuracy", float("nan"))}
    if removed is not None:
        nan = float("nan")
        back = resumed[0]["global_step"] if resumed else 0
        lost = [(g, t) for a, g, t in steps if a == 1 and g > back]
        out.update(detect=seen["failure"] - removed if seen["failure"] is not None else nan,
                   final=seen["final"] - removed if seen["final"] is not None else nan,
                   again=max(again.values()) - seen["final"] if len(again) == 2 else nan,
                   redone_s=(max(t for _, t in lost) - min(t for _, t in lost)) if len(lost) > 1 else 0.0,
                   redone_steps=len(lost), resumed_at=back)
    return out


def shrink(ns) -> int:
    from tests.helpers.testhosts import TestHosts, missing_requirements
    problem = missing_requirements()
    if problem:
        raise SystemExit(f"the shrink case needs SSH test hosts: {problem}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tfcc-r3s-") as tmp:
        hosts = TestHosts(3, Path(tmp) / "hosts", env={"TF_NUM_INTRAOP_THREADS": "1",
                                                      "TF_NUM_INTEROP_THREADS": "2"}).up()
        try:
            base = shrink_round(hosts, Path(tmp) / "base", "base", ns.epochs, None)
            for i in range(ns.rounds):
                rows.append(shrink_round(hosts, Path(tmp) / f"s{i}", f"s{i}", ns.epochs, ns.kill_after))
        finally:
            hosts.down()
    print(f"3 workers on 3 SSH test hosts, elastic = 2, digits, {ns.epochs} epochs, default backups; host 2 removed "
          f"for good after {ns.kill_after:g} s of training")
    print(f"{'round':>5} {'failure said s':>15} {'loss final s':>13} {'training again s':>17} {'redone s':>9} "
          f"{'redone steps':>13} {'val_acc':>8} {'vs uninterrupted':>17}")
    for i, r in enumerate(rows, 1):
        print(f"{i:>5} {r['detect']:>15.1f} {r['final']:>13.1f} {r['again']:>17.1f} {r['redone_s']:>9.1f} "
              f"{r['redone_steps']:>13} {r['val_accuracy']:>8.4f} "
              f"{100 * (r['val_accuracy'] - base['val_accuracy']):>+16.1f}pt")
    print(f"uninterrupted: val_accuracy {base['val_accuracy']:.4f}; goals: training again < 60 s after the loss "
          "is final, within 1 point")
    ok = all(r["finished"] and r["again"] < 60 and abs(r["val_accuracy"] - base["val_accuracy"]) <= 0.01
             for r in rows)
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--kill-after", type=float, default=None,
                   help="seconds of training before the kill (45) or the host's removal (20)")
    p.add_argument("--shrink", action="store_true", help="the shrink case: an elastic run loses a host for good")
    ns = p.parse_args()
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    if ns.shrink:
        ns.kill_after = 20.0 if ns.kill_after is None else ns.kill_after
        return shrink(ns)
    ns.kill_after = 45.0 if ns.kill_after is None else ns.kill_after
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
