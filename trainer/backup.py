"""Each task's backups, often enough that a restart redoes little, and a restore all tasks agree on.

tf-keras's ``BackupAndRestore`` keeps one checkpoint, in the chief's folder (it assumes a
shared file system), saves per epoch or every N batches, and restores whatever it finds.
tfcc's run folders are per task and per host, and a task killed during a save can leave
the tasks with different newest backups, which then fail in the first collective. So:

- every task keeps its own ``KEEP`` newest backups in ``<run folder>/backup``, each named by
  the global step it holds (``backup-<step>``), so backups of different tasks compare;
- saves come about every ``seconds`` of training, at the same steps on every task (saving
  reads synchronised variables collectively): after a few steps of an attempt, and again at
  each save, the tasks agree, by an all-reduce, on the slowest one's wall time per step since
  the last agreement (validation and saves included), and from it on the steps to the next save;
- at the start of an attempt the tasks share the lists of their backups (an all-reduce
  again) and each restores the newest one they all have, dropping any newer one of its own,
  and says so in a ``resumed`` event; with none in common, training starts over (said too);
- the end of training is backed up too: a finished run keeps it until the run is cleaned.
"""

from __future__ import annotations

import glob
import logging
import os
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from trainer.metrics import MetricsWriter
from trainer.records import Event

log = logging.getLogger("trainer.backup")

KEEP = 2          # backups per task: a kill during a save still leaves one all tasks share
PREFIX = "backup"
PROBE_STEPS = 4   # steps of an attempt after which the tasks agree on the save interval (the first is traced)


def share(strategy, values: list[float], width: int) -> np.ndarray:
    """Every replica's ``values`` (padded with -1 to ``width``) as rows of one matrix, on every task.

    An all-gather made of one all-reduce: each replica fills its own row of zeros, the sum
    holds them all. Under strategies without other workers the matrix has this task's rows.
    """
    padded = (list(values) + [-1.0] * width)[:width]
    row = tf.constant(padded, tf.float64)
    replicas = strategy.num_replicas_in_sync

    @tf.function
    def gather():
        ctx = tf.distribute.get_replica_context()
        mine = tf.one_hot(ctx.replica_id_in_sync_group, replicas, dtype=tf.float64)[:, None] * row[None, :]
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, mine)

    result = strategy.run(gather)
    return strategy.experimental_local_results(result)[0].numpy()


def newest_common(rows: np.ndarray) -> int | None:
    """The newest backup (global step) that every row holds, or None."""
    sets = [{int(v) for v in row if v >= 0} for row in rows]
    common = set.intersection(*sets) if sets else set()
    return max(common) if common else None


def backups_in(folder: Path) -> list[int]:
    """The global steps of the complete backups in ``folder``, oldest first."""
    state = tf.train.get_checkpoint_state(str(folder))
    if state is None:
        return []
    steps = []
    for path in state.all_model_checkpoint_paths:
        try:
            steps.append(int(path.rsplit("-", 1)[1]))
        except (IndexError, ValueError):
            continue
    return sorted(steps)


def _path(folder: Path, step: int) -> str:
    return str(folder / f"{PREFIX}-{step}")


def keep_only_up_to(folder: Path, step: int | None) -> None:
    """Forget this task's backups newer than ``step`` (all, for None): the next saves replace them."""
    kept = [s for s in backups_in(folder) if step is not None and s <= step]
    for s in backups_in(folder):
        if s not in kept:
            for name in glob.glob(_path(folder, s) + ".*"):
                os.remove(name)
    for name in glob.glob(str(folder / f"{PREFIX}-*_temp*")):  # a save cut short by a kill
        tf.io.gfile.rmtree(name) if os.path.isdir(name) else os.remove(name)
    if kept:
        tf.compat.v1.train.update_checkpoint_state(
            str(folder), _path(folder, kept[-1]), all_model_checkpoint_paths=[_path(folder, s) for s in kept])
    else:
        try:
            os.remove(folder / "checkpoint")
        except FileNotFoundError:
            pass


class TaskBackups(tf.keras.callbacks.Callback):
    """Backups of this task in ``folder`` about every ``seconds`` of training; restore on train begin.

    It also stands in for tf-keras's training state (``model._training_state``): ``fit`` asks
    it at which epoch and step to begin.
    """

    def __init__(self, folder: Path, seconds: float, writer: MetricsWriter, multi_worker: bool):
        super().__init__()
        self._supports_tf_logs = True  # it reads no logs: tf-keras need not turn them into numbers each step
        self.folder = Path(folder)
        self.seconds = seconds
        self.writer = writer
        self.multi_worker = multi_worker
        self.every: int | None = None   # steps between saves, once the tasks agreed on it
        self._next_save = 0
        self.restored: tuple[int, int] | None = None
        self._epoch = 0
        self._steps = 0                 # steps of this attempt
        self._pace_from: tuple[float, int] | None = None  # (when, global step) the pace is measured from
        self._global_step = 0
        self._last_batch = -1

    # -------------------------------------------------------------- start of an attempt

    def on_train_begin(self, logs=None):
        model = self.model
        optimizer = model.optimizer
        if optimizer is not None and callable(getattr(optimizer, "build", None)) and not getattr(optimizer, "_built", False):
            optimizer.build(model.trainable_variables)
        self._saved_epoch = tf.Variable(-1, dtype=tf.int64, name="backup_epoch", trainable=False)
        self._saved_step = tf.Variable(-1, dtype=tf.int64, name="backup_step", trainable=False)
        self.checkpoint = tf.train.Checkpoint(model=model, backup_epoch=self._saved_epoch,
                                              backup_step=self._saved_step, train_counter=model._train_counter)
        mine = backups_in(self.folder)
        step = self._agree_on_backup(mine)
        keep_only_up_to(self.folder, step)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(self.folder), max_to_keep=KEEP,
                                                  checkpoint_name=PREFIX)
        if step is not None:
            self.checkpoint.restore(_path(self.folder, step)).assert_existing_objects_matched()
            self.restored = (int(self._saved_epoch.numpy()), int(self._saved_step.numpy()))
            self._global_step = step
            self.writer.event(Event.RESUMED, epoch=self.restored[0], step=self.restored[1], global_step=step)
        elif mine:
            self.writer.event(Event.RESUMED, epoch=0, step=-1, global_step=0,
                              note="the tasks' backups have no step in common: training starts over")
        model._training_state = self

    def _agree_on_backup(self, mine: list[int]) -> int | None:
        if not self.multi_worker:
            return mine[-1] if mine else None
        rows = share(self.model.distribute_strategy, [float(s) for s in mine[-KEEP:]], KEEP)
        return newest_common(rows)

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch, initial_epoch, mode=None):
        """Where ``fit`` begins: after the restored step (the next epoch after its last step)."""
        if self.restored is None:
            return initial_epoch, 0
        epoch, step = self.restored
        if steps_per_epoch is not None and step >= steps_per_epoch - 1:
            return epoch + 1, 0
        return epoch, step + 1

    def backup_if_preempted(self):  # tf-keras's training state has it; tfcc's supervision restarts instead
        pass

    # -------------------------------------------------------------- during training

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1
        steps = (self.params or {}).get("steps")
        # As trainer.report counts it (a call may cover several steps with steps_per_execution).
        self._global_step = self._epoch * steps + batch + 1 if steps else self._global_step + 1
        self._last_batch = batch
        if self._pace_from is None:  # the clock starts at the attempt's first step (its tracing included)
            self._pace_from = (time.perf_counter(), self._global_step - 1)
        if self.every is None:
            if self._steps == PROBE_STEPS:
                self.every = self._agree_on_interval()
                self._next_save = (self._global_step // self.every + 1) * self.every
            return
        if self._global_step >= self._next_save:  # the same steps on every task
            self.save(batch)
            # Steps get slower or quicker (a busy host, validation, the saves themselves): agree again,
            # from the wall time since the last agreement, so that saves stay about ``seconds`` apart.
            self.every = self._agree_on_interval()
            self._next_save = (self._global_step // self.every + 1) * self.every

    def _agree_on_interval(self) -> int:
        """Steps to the next save: ``seconds`` over the wall time a step took since the last agreement
        (everything counted: epoch ends with their validation, saves), at the slowest task's pace."""
        since, at = self._pace_from
        now = time.perf_counter()
        mine = (now - since) / max(1, self._global_step - at)
        self._pace_from = (now, self._global_step)
        if self.multi_worker:
            rows = share(self.model.distribute_strategy, [mine], 1)
            mine = float(rows[:, 0].max())
        every = max(1, int(self.seconds / max(mine, 1e-6)))
        log.info("backups every %d steps (%.3f s a step)", every, mine)
        return every

    def save(self, batch: int) -> None:
        t0 = time.perf_counter()
        self.writer.event(Event.BACKING_UP, global_step=self._global_step)  # the console waits longer meanwhile
        self._saved_epoch.assign(self._epoch)
        self._saved_step.assign(batch)
        self.manager.save(checkpoint_number=self._global_step)
        self.writer.event(Event.BACKED_UP, epoch=self._epoch, step=batch, global_step=self._global_step,
                          seconds=time.perf_counter() - t0)

    def on_train_end(self, logs=None):
        if self._global_step and self._global_step not in backups_in(self.folder):
            self.save(self._last_batch)  # the end state stays with the run until it is cleaned
        self.model._training_state = None
