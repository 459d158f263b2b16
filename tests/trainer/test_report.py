"""MetricsReporter in a user's own script, and records that survive a crash."""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.localrun import local_cluster, start_local_tasks
from tests.helpers.waiting import bound
from trainer.metrics import MetricsWriter, read_records

from .conftest import DATA, THREADS, ClusterRun, run_cluster


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


def _kill_all(tasks) -> None:
    for t in tasks:
        if t.process.poll() is None:
            os.killpg(t.process.pid, signal.SIGKILL)
        t.process.wait()


def _as_if_killed_during_its_save(folder) -> int:
    """Leave ``folder`` as a kill during a save does: the newest backup never completed (its
    files half written, the checkpoint list without it). Returns the newest backup left."""
    state = folder / "checkpoint"
    listed = re.findall(r'all_model_checkpoint_paths: "([^"]+)"', state.read_text())
    newest = listed[-1]
    for part in folder.glob(f"{Path(newest).name}.*"):
        part.unlink()
    (folder / f"{Path(newest).name}_temp").mkdir()
    (folder / f"{Path(newest).name}_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"\0" * 100)
    older = listed[:-1]
    state.write_text(f'model_checkpoint_path: "{older[-1]}"\n'
                     + "".join(f'all_model_checkpoint_paths: "{p}"\n' for p in older))
    return int(older[-1].rsplit("-", 1)[1])


@pytest.mark.slow
def test_relaunch_resumes_mid_epoch_from_the_newest_backup_every_task_has(tmp_path):
    """Kill every task; one of them as if during a save, so the tasks' newest backups differ. The
    relaunch with the same TF_CONFIG restores the newest backup they share, on every task, and goes
    on from the step after it (within an epoch: backups come by time, not by epoch)."""
    cluster = local_cluster(2)
    args = ["--epochs", "2", "--per-replica-batch", "16", "--backup-seconds", "0.3"]
    tasks = start_local_tasks(cluster, tmp_path, args, env=THREADS)
    run = ClusterRun(tasks)
    try:
        wait_until(lambda: all(len(run.events(i, "backed_up")) >= 3 for i in range(2)),
                   180, "three backups on both workers", [t.process for t in tasks])
    finally:
        _kill_all(tasks)
    def backups(i: int) -> set[int]:
        return {int(p.stem.rsplit("-", 1)[1]) for p in (tmp_path / f"worker-{i}" / "backup").glob("backup-*.index")}

    newest = {i: max(backups(i)) for i in range(2)}
    if newest[0] == newest[1]:
        common, ahead = _as_if_killed_during_its_save(tmp_path / "worker-1" / "backup"), 0
    else:  # the kill itself came between the two tasks' saves of one backup: they differ already
        common, ahead = min(newest.values()), max(newest, key=newest.get)
    assert common in backups(ahead) and max(backups(ahead)) > common  # the newest backups differ

    tasks = start_local_tasks(cluster, tmp_path, args, env=THREADS)
    again = ClusterRun(tasks)
    try:
        for t in tasks:
            assert t.process.wait(timeout=300) == 0, again.stderr(0) + again.stderr(1)
    finally:
        _kill_all(tasks)
    steps_per_epoch = again.events(0, "started")[-1]["steps_per_epoch"]
    for i in range(2):
        records = again.records(i)
        second_launch = max(j for j, r in enumerate(records) if r.get("event") == "launched")
        after = records[second_launch:]
        resumed = next(r for r in after if r.get("event") == "resumed")
        assert resumed["global_step"] == common
        assert resumed["epoch"] * steps_per_epoch + resumed["step"] + 1 == common
        first = next(r for r in after if r["type"] == "step")
        assert first["global_step"] == common + 1  # nothing trained twice, nothing skipped
        assert after[-1]["event"] == "finished"
    leftovers = [p.name for p in (tmp_path / "worker-1" / "backup").iterdir() if "_temp" in p.name]
    assert leftovers == []


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
