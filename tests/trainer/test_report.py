"""MetricsReporter in a user's own script, and records that survive a crash."""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.waiting import bound
from trainer.metrics import MetricsWriter, read_records

from .conftest import DATA, run_cluster


def wait_until(condition, timeout: float, what: str, processes=()) -> None:
    deadline = time.monotonic() + bound(timeout)
    pause = threading.Event()
    while not condition():
        exited = [p.args for p in processes if p.poll() is not None]
        if exited:
            pytest.fail(f"a process exited while waiting for {what}: {exited[0]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        pause.wait(0.1)


def test_writer_keeps_lines_whole_and_nan_readable(tmp_path):
    writer = MetricsWriter(tmp_path / "m.jsonl", {"task_type": "worker", "task_index": 3})
    for i in range(1000):
        writer.write({"type": "step", "step": i, "loss": float("nan") if i == 7 else 0.5})
    writer.close()
    records = read_records(tmp_path / "m.jsonl")
    assert [r["step"] for r in records] == list(range(1000))
    assert records[7]["loss"] is None and records[8]["loss"] == 0.5
    assert all(r["task_index"] == 3 for r in records)


@pytest.mark.slow
def test_users_own_script_reports_exact_cluster_metrics(tmp_path):
    run = run_cluster(tmp_path, 2, [], script=str(DATA / "user_script_with_reporter.py"))
    losses = []
    for i in range(2):
        steps = run.records(i, "step")
        assert [(r["epoch"], r["step"]) for r in steps] == [(e, s) for e in range(2) for s in range(8)]
        assert all("loss" in r and r["global_batch"] == 32 for r in steps)
        losses.append([r["loss"] for r in steps])
        for epoch in run.records(i, "epoch"):
            in_epoch = [r["loss"] for r in steps if r["epoch"] == epoch["epoch"]]
            assert epoch["loss"] == pytest.approx(statistics.fmean(in_epoch), rel=1e-5)
            assert 0 <= epoch["accuracy"] <= 1
            assert "tfcc_step_loss" not in epoch
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


@pytest.mark.slow
def test_unmodified_tutorial_script_runs_as_two_workers(tmp_path, monkeypatch):
    """Nothing tfcc puts in a task's environment gets in the way of a user's own script."""
    monkeypatch.delenv("TF_USE_LEGACY_KERAS")  # the launcher itself must select tf-keras
    run = run_cluster(tmp_path, 2, [], script=str(DATA / "tutorial_mwms.py"))
    for t in run.tasks:
        assert "Epoch 2/2" in (t.run_dir / "stdout.log").read_text()


def test_writer_drains_its_queue_when_the_process_exits(tmp_path):
    code = ("import sys; sys.path.insert(0, %r); from trainer.metrics import MetricsWriter; "
            "w = MetricsWriter(%r); [w.write({'type': 'step', 'step': i}) for i in range(5000)]")
    path = tmp_path / "m.jsonl"
    subprocess.run([sys.executable, "-c", code % (str(Path(__file__).resolve().parents[2]), str(path))],
                   check=True, timeout=60)
    assert [r["step"] for r in read_records(path)] == list(range(5000))
