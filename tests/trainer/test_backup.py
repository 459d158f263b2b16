"""Each task's backups: which one every task restores (the relaunch after a kill during a save too), and resumes
that are exact."""

from __future__ import annotations

import os
import re
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.localrun import local_cluster, start_local_tasks
from trainer.backup import KEEP, PLAN_SUFFIX, BackupError, backup_to_restore, keep_newest, newest_common

from .conftest import THREADS, ClusterRun, run_cluster
from .test_report import wait_until


def test_the_newest_backup_every_task_holds_is_restored():
    # worker-1 was killed during its save of step 30: it still has 20, which worker-0 kept too.
    rows = np.array([[20.0, 30.0], [10.0, 20.0]])
    assert newest_common(rows) == 20
    assert backup_to_restore(rows) == 20


def test_tasks_without_a_common_backup_start_over():
    assert newest_common(np.array([[30.0, 40.0], [10.0, 20.0]])) is None
    assert newest_common(np.array([[20.0, 30.0], [-1.0, -1.0]])) is None  # a task with none (a new host)


def test_every_replica_of_a_task_is_a_row():
    # Two replicas per worker (GPUs): rows of one task repeat; padding (-1) is no backup.
    rows = np.array([[5.0, -1.0], [5.0, -1.0], [5.0, 10.0], [5.0, 10.0]])
    assert newest_common(rows) == 5
    assert backup_to_restore(rows, replicas_per_task=2) == 5


def test_no_backup_anywhere_starts_over():
    assert backup_to_restore(np.array([[-1.0, -1.0], [-1.0, -1.0]])) is None


def test_a_task_without_backups_never_makes_the_others_delete_theirs():
    """A new host or a wiped folder: before, every task found no common backup and deleted all of its own."""
    rows = np.array([[20.0, 30.0], [20.0, 30.0], [-1.0, -1.0], [-1.0, -1.0]])  # worker 1 (two replicas) has none
    with pytest.raises(BackupError) as caught:
        backup_to_restore(rows, replicas_per_task=2)
    line = str(caught.value)
    assert "1 of the 2 training tasks (#1" in line and "step 30" in line and "nothing was deleted" in line
    assert "\n" not in line and "start a new run" in line


def test_backups_with_no_step_in_common_are_kept_and_said():
    with pytest.raises(BackupError, match="no step in common.*nothing was deleted"):
        backup_to_restore(np.array([[30.0, 40.0], [10.0, 20.0]]))


def _fake_backup(folder: Path, step: int, plan: bool = True) -> None:
    (folder / f"backup-{step}.index").write_bytes(b"i")
    (folder / f"backup-{step}.data-00000-of-00001").write_bytes(b"d")
    if plan:
        (folder / f"backup-{step}{PLAN_SUFFIX}").write_text("{}")


def test_only_the_newest_backups_stay_those_of_earlier_attempts_too(tmp_path):
    """tf.train.CheckpointManager lists only its own saves: the backups an attempt found were never deleted."""
    for step in (10, 20, 30, 40):
        _fake_backup(tmp_path, step)
    (tmp_path / f"backup-5{PLAN_SUFFIX}").write_text("{}")  # a plan whose backup never completed
    keep_newest(tmp_path)
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "checkpoint")
    assert left == sorted(f"backup-{s}{ext}" for s in (30, 40)
                          for ext in (".index", ".data-00000-of-00001", PLAN_SUFFIX))
    assert KEEP == 2
    assert 'model_checkpoint_path: "backup-40"' in (tmp_path / "checkpoint").read_text()


# ------------------------------------------------------------------ real relaunches (2 workers, digits)

# A global batch of 32 whatever the number of workers, at the same learning rate: one worker can take up two's
# backup and train on as they would have.
# Four epochs: room for the kill's backups inside epochs and well before the end, however quick the machine.
ARGS = ["--epochs", "4", "--global-batch", "32", "--lr-scaling", "none", "--backup-seconds", "1"]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> dict[int, float]:
    """The uninterrupted run's loss at each global step (2 workers, ``ARGS``): what a resume must match."""
    run = run_cluster(tmp_path_factory.mktemp("whole"), 2, ARGS)
    return {r["global_step"]: r["loss"] for r in run.records(0, "step")}


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """The same run killed mid-epoch once every task has made 2 backups: its folders, for each test to copy."""
    root = tmp_path_factory.mktemp("killed")
    _kill_after_backups(root, local_cluster(2), ARGS, mid_epoch=True)
    return root


def copy_of(killed: Path, into: Path) -> Path:
    shutil.copytree(killed, into)
    return into


def _kill_after_backups(root: Path, cluster: dict, args: list[str], count: int = 2, mid_epoch: bool = False) -> None:
    """Kill every task once each has made ``count`` backups; ``mid_epoch``: and each one's two newest are inside an
    epoch, five steps or more before training's end (the tests resume from either: a backup can fall on an epoch's
    end, or near the end on a quick machine; then the next is waited for)."""
    tasks = start_local_tasks(cluster, root, args, env=THREADS)
    run = ClusterRun(tasks)

    def inside(i: int) -> bool:
        started = run.events(i, "started")
        per_epoch = started[0].get("steps_per_epoch") if started else None
        epochs = started[0].get("epochs") if started else None
        if not isinstance(per_epoch, int) or not isinstance(epochs, int):
            return False
        newest = [r.get("global_step") for r in run.events(i, "backed_up")[-2:]]
        return all(isinstance(n, int) and n % per_epoch != 0 and n <= per_epoch * epochs - 5 for n in newest)

    def ready() -> bool:
        return all(len(run.events(i, "backed_up")) >= count and (not mid_epoch or inside(i))
                   for i in range(len(tasks)))

    try:
        wait_until(ready, 180, f"{count} backups on every worker" + (", the newest inside an epoch" if mid_epoch
                                                                      else ""), [t.process for t in tasks])
    finally:
        for t in tasks:
            if t.process.poll() is None:
                os.killpg(t.process.pid, signal.SIGKILL)
            t.process.wait()


def _relaunch(root: Path, cluster: dict, args: list[str]) -> ClusterRun:
    tasks = start_local_tasks(cluster, root, args, env=THREADS)
    run = ClusterRun(tasks)
    try:
        for t in tasks:
            t.process.wait(timeout=300)
    finally:
        for t in tasks:
            if t.process.poll() is None:
                os.killpg(t.process.pid, signal.SIGKILL)
                t.process.wait()
    return run


def _since_last_launch(run: ClusterRun, index: int) -> list[dict]:
    records = run.records(index)
    last = max(j for j, r in enumerate(records) if r.get("event") == "launched")
    return records[last:]


def _backups(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _steps(folder: Path) -> set[int]:
    """The global steps of the complete backups in ``folder``."""
    return {int(p.stem.rsplit("-", 1)[1]) for p in folder.glob("backup-*.index")}


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
def test_a_mid_epoch_resume_trains_on_the_same_batches_as_an_uninterrupted_run(tmp_path, whole, killed):
    """Killed mid-epoch, one task as if during a save, so the tasks' newest backups differ; relaunched with the
    same TF_CONFIG: every task restores the newest backup they share and goes on from the step after it, and
    every resumed step's loss equals the uninterrupted run's at that step (before, the input started over: the
    step after the backup trained on the stream's first batch)."""
    expected = whole
    cut = copy_of(killed, tmp_path / "cut")
    newest = {i: max(_steps(cut / f"worker-{i}" / "backup")) for i in range(2)}
    if newest[0] == newest[1]:
        common, ahead = _as_if_killed_during_its_save(cut / "worker-1" / "backup"), 0
    else:  # the kill itself came between the two tasks' saves of one backup: they differ already
        common, ahead = min(newest.values()), max(newest, key=newest.get)
    assert common in _steps(cut / f"worker-{ahead}" / "backup") and newest[ahead] > common

    again = _relaunch(cut, local_cluster(2), ARGS)
    for i, t in enumerate(again.tasks):
        assert t.process.returncode == 0, again.stderr(i)[-3000:]
    after = _since_last_launch(again, 0)
    resumed = next(r for r in after if r.get("event") == "resumed")
    steps_per_epoch = next(r for r in after if r.get("event") == "started")["steps_per_epoch"]
    for i in range(2):  # every task at the newest backup they share
        mine = next(r for r in _since_last_launch(again, i) if r.get("event") == "resumed")
        assert mine["global_step"] == common
        assert mine["epoch"] * steps_per_epoch + mine["step"] + 1 == common
    assert resumed["global_step"] % steps_per_epoch != 0, "the kill came at an epoch's end: no mid-epoch resume"
    assert "changed" not in resumed  # the same plan
    resumed_steps = [r for r in after if r["type"] == "step"]
    assert resumed_steps[0]["global_step"] == resumed["global_step"] + 1
    assert len(resumed_steps) >= 5
    for r in resumed_steps:
        assert r["loss"] == pytest.approx(expected[r["global_step"]], abs=1e-4), r["global_step"]
    assert after[-1]["event"] == "finished"
    # Only the newest backups stay (an earlier attempt's too), each with the plan it was made under.
    for i in range(2):
        names = _backups(cut / f"worker-{i}" / "backup")
        indexes = [n for n in names if n.endswith(".index")]
        assert len(indexes) == KEEP, names
        assert not any("_temp" in n for n in names), names  # the half-written save is gone
        assert sorted(n for n in names if n.endswith(PLAN_SUFFIX)) == sorted(
            n.replace(".index", PLAN_SUFFIX) for n in indexes)


@pytest.mark.slow
def test_a_task_with_no_backup_is_refused_and_nothing_deleted_then_a_changed_learning_rate_is_said(tmp_path, killed):
    cut = copy_of(killed, tmp_path / "cut")
    cluster = local_cluster(2)
    kept = cut / "worker-0" / "backup"
    before = _backups(kept)
    shutil.rmtree(cut / "worker-1" / "backup")  # a wiped folder, a new host

    refused = _relaunch(cut, cluster, ARGS)
    assert [t.process.returncode for t in refused.tasks] == [2, 2]
    line = refused.stderr(1).strip().splitlines()[-1]
    assert line.startswith("tfcc-trainer: error: 1 of the 2 training tasks (#1") and "nothing was deleted" in line
    assert _backups(kept) == before  # worker-0 kept every backup
    assert not any(r["type"] == "step" for r in _since_last_launch(refused, 0))

    # Its folder seeded with a copy of the other's (as the console does), and a new learning rate on resume.
    shutil.copytree(kept, cut / "worker-1" / "backup", dirs_exist_ok=True)
    again = _relaunch(cut, cluster, [*ARGS, "--learning-rate", "0.002"])
    for i, t in enumerate(again.tasks):
        assert t.process.returncode == 0, again.stderr(i)[-3000:]
    after = _since_last_launch(again, 0)
    resumed = next(r for r in after if r.get("event") == "resumed")
    started = next(r for r in after if r.get("event") == "started")
    planned = started["learning_rate"]
    assert resumed["changed"]["learning_rate"][1] == pytest.approx(planned)
    assert resumed["changed"]["learning_rate"][0] == pytest.approx(planned / 2)  # the backup's: base 0.001
    assert resumed["learning_rate"] == pytest.approx(planned)  # the optimizer's, after the resume


@pytest.mark.slow
def test_a_two_worker_backup_resumes_on_one_worker_with_the_same_global_batch_and_says_so(tmp_path, whole, killed):
    """What a shrink to the hosts left needs of the trainer: a 2-worker backup taken up by 1 worker with the same
    global batch trains on as the 2 workers would have (the same batches, the same weights), and says what
    changed."""
    expected = whole
    cut = copy_of(killed, tmp_path / "cut")
    alone = _relaunch(cut, local_cluster(1), ARGS)  # worker-0, in its own folder, alone
    assert alone.tasks[0].process.returncode == 0, alone.stderr(0)[-3000:]
    after = _since_last_launch(alone, 0)
    resumed = next(r for r in after if r.get("event") == "resumed")
    assert resumed["changed"] == {"num_workers": [2, 1], "num_replicas": [2, 1], "per_replica_batch": [16, 32]}
    steps = [r for r in after if r["type"] == "step"]
    assert steps[0]["global_step"] == resumed["global_step"] + 1 and len(steps) >= 5
    for r in steps:
        assert r["loss"] == pytest.approx(expected[r["global_step"]], abs=1e-3), r["global_step"]
    assert after[-1]["event"] == "finished"


@pytest.mark.slow
def test_a_resume_with_a_larger_global_batch_numbers_its_backups_in_the_new_steps(tmp_path):
    """The global batch doubled on resume: the stream goes on at half the step number, and the backups are
    numbered in the new steps from there (an old, higher number would outrank every new save: each later resume
    would go back to it). The run's step counter goes on too (TensorBoard's step)."""
    import tensorflow as tf

    args = ["--epochs", "2", "--backup-seconds", "0.3"]
    cluster = local_cluster(1)
    _kill_after_backups(tmp_path, cluster, [*args, "--global-batch", "16"], count=3)
    folder = tmp_path / "worker-0" / "backup"
    again = _relaunch(tmp_path, cluster, [*args, "--global-batch", "32"])
    assert again.tasks[0].process.returncode == 0, again.stderr(0)[-3000:]
    after = _since_last_launch(again, 0)
    resumed = next(r for r in after if r.get("event") == "resumed")
    step = resumed["global_step"]
    assert resumed["position"] == step * 16 // 32 and resumed["changed"]["global_batch"] == [16, 32]
    assert next(r for r in after if r["type"] == "step")["global_step"] == resumed["position"] + 1
    saved = [r["global_step"] for r in after if r.get("event") == "backed_up"]
    assert saved[0] == resumed["position"]  # the restored state, saved again under its new number
    left = sorted(int(p.name.split("-")[1].split(".")[0]) for p in folder.glob("backup-*.index"))
    assert left == saved[-KEEP:]  # the newest saves, none of the old numbers
    newest = str(folder / f"backup-{left[-1]}")
    assert tf.train.load_variable(newest, "train_counter/.ATTRIBUTES/VARIABLE_VALUE") == left[-1]


@pytest.mark.slow
def test_the_first_backup_comes_at_the_first_epochs_end_at_the_latest(tmp_path):
    """The first steps' pace holds no epoch's end (its validation): with it alone the first 30 s backup came 40 s
    in, and a kill before it redid all (bench/restart_recovery.py). Now the first comes at an epoch's end at the
    latest, and the interval is measured again there."""
    # backups every 10 minutes: whatever this machine's pace, the two epochs end long before the first is due
    run = run_cluster(tmp_path, 1, ["--epochs", "2", "--per-replica-batch", "32", "--backup-seconds", "600"])
    steps_per_epoch = run.events(0, "started")[-1]["steps_per_epoch"]
    saved = [r["global_step"] for r in run.events(0, "backed_up")]
    assert saved[0] == steps_per_epoch  # before: only the end's
