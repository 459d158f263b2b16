"""The ``tfcc`` command: for now, trains the embedded default headless.

``tfcc`` starts two local workers training ``digits`` (the embedded default
cluster), follows their metrics files and prints one line per worker as they
train. Trainer options after ``--`` go to every task, e.g.
``tfcc --workers 3 -- --epochs 2``. Agents, cluster files and the window come
with later work; this front end already runs on the Qt-free core.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from console.localrun import LocalTask, local_cluster, start_local_tasks


def default_run_root() -> Path:
    return Path.home() / ".tfcc" / "runs" / time.strftime("%Y%m%d-%H%M%S")


class _Follower:
    """Reads new complete lines of one task's metrics file from an offset."""

    def __init__(self, task: LocalTask):
        self.task = task
        self.offset = 0
        self.last_step: dict | None = None
        self.started: dict | None = None
        self.outcome: dict | None = None

    def poll(self) -> list[dict]:
        path = self.task.metrics_path
        if not path.exists():
            return []
        with open(path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        records = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
        for r in records:
            if r["type"] == "step":
                self.last_step = r
            elif r.get("event") == "started":
                self.started = r
            elif r.get("event") in ("finished", "failed"):
                self.outcome = r
        return records


def _describe(name: str, r: dict) -> str | None:
    if r["type"] == "epoch":
        val = f"  val_loss {r['val_loss']:.4f}  val_accuracy {r['val_accuracy']:.4f}" if "val_loss" in r else ""
        return f"{name}: epoch {r['epoch'] + 1} done  loss {r.get('loss', float('nan')):.4f}{val}"
    if r["type"] != "event":
        return None
    if r["event"] == "started":
        return (f"{name}: training with {r['strategy']}: global batch {r['global_batch']} = "
                f"{r['num_workers']} workers x {r['replicas_per_worker']} replicas x {r['per_replica_batch']}")
    if r["event"] == "finished":
        where = f", model in {r['model']}" if r.get("model") else ""
        return f"{name}: finished in {r['train_time']:.1f} s{where}"
    if r["event"] == "failed":
        return f"{name}: FAILED: {r['error']}"
    return None


def run_default(num_workers: int, run_root: Path, trainer_args: list[str]) -> int:
    tasks = start_local_tasks(local_cluster(num_workers), run_root, trainer_args)
    print(f"tfcc: {num_workers} local workers, run folder {run_root}", flush=True)
    followers = [_Follower(t) for t in tasks]
    last_status = 0.0
    try:
        while True:
            for f in followers:
                for r in f.poll():
                    line = _describe(f.task.name, r)
                    if line:
                        print(line, flush=True)
            if all(t.process.poll() is not None for t in tasks):
                for f in followers:  # what was written just before the exit
                    for r in f.poll():
                        line = _describe(f.task.name, r)
                        if line:
                            print(line, flush=True)
                break
            if time.monotonic() - last_status >= 2.0:
                last_status = time.monotonic()
                parts = []
                for f in followers:
                    s = f.last_step
                    if s and f.started and f.outcome is None:
                        parts.append(f"{f.task.name} epoch {s['epoch'] + 1} step {s['step'] + 1}/"
                                     f"{f.started['steps_per_epoch']} loss {s['loss']:.4f}")
                if parts:
                    print("  " + " | ".join(parts), flush=True)
            try:
                tasks[0].process.wait(timeout=0.25)
            except Exception:
                pass
    except KeyboardInterrupt:
        print("tfcc: interrupted; stopping the workers", file=sys.stderr)
        for t in tasks:
            t.process.kill()
        return 130
    failed = [t for t in tasks if t.process.returncode != 0]
    for t in failed:
        print(f"tfcc: {t.name} exited with {t.process.returncode}; see {t.run_dir / 'stderr.log'}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tfcc", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="local workers (default 2)")
    parser.add_argument("--run-root", type=Path, default=None, help="default: ~/.tfcc/runs/<time>")
    parser.add_argument("trainer_args", nargs=argparse.REMAINDER,
                        help="after --: options for python -m trainer, e.g. -- --epochs 2")
    ns = parser.parse_args(argv)
    if ns.workers < 1:
        parser.error("--workers must be at least 1")
    args = [a for a in ns.trainer_args if a != "--"] if ns.trainer_args[:1] == ["--"] else ns.trainer_args
    return run_default(ns.workers, ns.run_root or default_run_root(), args)


if __name__ == "__main__":
    sys.exit(main())
