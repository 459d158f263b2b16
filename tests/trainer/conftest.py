"""Fixtures that run real trainer processes on localhost."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.localrun import LocalTask, local_cluster, start_local_tasks
from tests.helpers.waiting import bound
from trainer.metrics import read_records

DATA = Path(__file__).parent / "data"
# Two cores: keep each worker's TensorFlow thread pools small.
THREADS = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}


@dataclass
class ClusterRun:
    tasks: list[LocalTask]

    def records(self, index: int = 0, kind: str | None = None) -> list[dict]:
        path = self.tasks[index].metrics_path
        recs = read_records(path) if path.exists() else []
        return [r for r in recs if kind is None or r["type"] == kind]

    def events(self, index: int, name: str) -> list[dict]:
        return [r for r in self.records(index, "event") if r["event"] == name]

    def stderr(self, index: int) -> str:
        return (self.tasks[index].run_dir / "stderr.log").read_text(errors="replace")


def _kill(tasks: list[LocalTask]) -> None:
    for t in tasks:
        if t.process.poll() is None:
            os.killpg(t.process.pid, signal.SIGKILL)
            t.process.wait()


def run_cluster(root: Path, num_workers: int, args: list[str], *, timeout: float = 300,
                script: str | None = None, expect_ok: bool = True) -> ClusterRun:
    """Run every task to its end (killing all on timeout) and return the run."""
    tasks = start_local_tasks(local_cluster(num_workers), root, args, env=THREADS, script=script)
    deadline = time.monotonic() + bound(timeout)
    try:
        for t in tasks:
            t.process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(tasks)
        run = ClusterRun(tasks)
        pytest.fail(f"cluster did not finish in {timeout} s; worker 0 stderr:\n{run.stderr(0)[-3000:]}")
    finally:
        _kill(tasks)
    run = ClusterRun(tasks)
    if expect_ok:
        for i, t in enumerate(tasks):
            assert t.process.returncode == 0, f"{t.name} exited {t.process.returncode}:\n{run.stderr(i)[-3000:]}"
    return run
