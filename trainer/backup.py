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
- at the start of an attempt, before the input pipeline is built, the tasks share the lists of
  their backups (an all-reduce again) and each restores the newest one they all have, dropping
  any newer one of its own, and says so in a ``resumed`` event. A task with no backup while
  others have some (a new host, a wiped folder), or tasks with none in common, make every task
  refuse to start, deleting nothing (``BackupError``): the console seeds the empty folders first;
- a resume is exact: each backup records the plan it was made under (``backup-<step>.plan.json``);
  the resume says what changed, goes on at the same place of the input stream (the stream of
  global batches is the same whatever the worker count: ``skip`` says how many to skip), and
  trains at the learning rate of the plan now (a backup restores the optimizer's, which is said
  when it differs);
- a task keeps its ``KEEP`` newest backups, those of earlier attempts included; the end of
  training is backed up too: a finished run keeps it until the run is cleaned.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from agent.protocol import BACKUP_DIR, BACKUP_LIST, backup_list, backup_steps
from trainer.metrics import MetricsWriter
from trainer.records import GLOBAL_STEP, PLAN_FIELDS, Event
from trainer.stopping import DIVERGED
from trainer.tf_config import ConfigError

log = logging.getLogger("trainer.backup")

KEEP = 2          # backups per task: a kill during a save still leaves one all tasks share
PREFIX = "backup"
PROBE_STEPS = 4   # steps of an attempt after which the tasks agree on the save interval (the first is traced)
PLAN_SUFFIX = ".plan.json"  # beside each backup: the plan it was made under (trainer.records.PLAN_FIELDS)


class BackupError(ConfigError):
    """The tasks' backups cannot be taken up as they are; nothing was deleted (one line that says what to do)."""


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


def backup_to_restore(rows: np.ndarray, replicas_per_task: int = 1) -> int | None:
    """The backup every task restores: the newest they all hold; None when none of them has one.

    A ``BackupError`` (nothing deleted) when some tasks have backups and others none (a new host, a wiped
    folder), or when they have none in common: starting over there would throw every task's backups away.
    """
    sets = [{int(v) for v in row if v >= 0} for row in rows]
    if not any(sets):
        return None
    common = newest_common(rows)
    if common is not None:
        return common
    tasks = [sets[i] for i in range(0, len(sets), max(1, replicas_per_task))]
    empty = [i for i, held in enumerate(tasks) if not held]
    newest = max(max(held) for held in tasks if held)
    if empty:
        which = ", ".join(f"#{i}" for i in empty)
        raise BackupError(f"{len(empty)} of the {len(tasks)} training tasks ({which}, in TF_CONFIG's order) have no "
                          f"backup while the others have (newest: step {newest}); nothing was deleted. Copy the "
                          f"`{BACKUP_DIR}` folder of a task that has one into theirs (its run folder) and resume, "
                          "or start a new run")
    raise BackupError(f"the training tasks' backups have no step in common (newest: step {newest}); nothing was "
                      f"deleted. Copy the `{BACKUP_DIR}` folder of the task with the newest into the others' run "
                      "folders and resume, or start a new run")


def backups_in(folder: Path) -> list[int]:
    """The global steps of the complete backups in ``folder``, oldest first, as the agent counts them for the
    console (agent.protocol.backup_steps), listed in TensorFlow's checkpoint list or not."""
    try:
        return backup_steps(os.listdir(folder))
    except OSError:
        return []


def _path(folder: Path, step: int) -> str:
    return str(folder / f"{PREFIX}-{step}")


def plan_of(folder: Path, step: int) -> dict:
    """The plan backup ``step`` was made under ({} for a backup of before plans were recorded, or a damaged one)."""
    try:
        plan = json.loads(Path(_path(folder, step) + PLAN_SUFFIX).read_text())
    except (OSError, ValueError):
        return {}
    return {k: plan[k] for k in PLAN_FIELDS if k in plan} if isinstance(plan, dict) else {}


def keep_newest(folder: Path, keep: int = KEEP) -> None:
    """Keep this task's ``keep`` newest backups and delete the others, an earlier attempt's too, with their plans.

    tf.train.CheckpointManager forgets the backups it found at its start (it lists only its own saves): without
    this they piled up, one or two per attempt."""
    steps = backups_in(folder)
    kept = steps[-keep:]
    _delete(folder, steps[:-keep] if len(steps) > keep else [])
    _list(folder, kept)
    for plan in glob.glob(str(folder / f"{PREFIX}-*{PLAN_SUFFIX}")):  # a plan whose backup is gone
        try:
            step = int(Path(plan).name[len(PREFIX) + 1:-len(PLAN_SUFFIX)])
        except ValueError:
            continue
        if step not in kept:
            os.remove(plan)


def _list(folder: Path, steps: list[int]) -> None:
    """Make ``steps`` the backups TensorFlow's checkpoint list names (none: no list), replaced at once."""
    state = folder / BACKUP_LIST
    if not steps:
        state.unlink(missing_ok=True)
        return
    partial = folder / f".{BACKUP_LIST}.partial"
    partial.write_text(backup_list(steps))
    os.replace(partial, state)


def _delete(folder: Path, steps) -> None:
    for s in steps:
        for name in glob.glob(_path(folder, s) + ".*"):
            os.remove(name)


def keep_only_up_to(folder: Path, step: int | None) -> None:
    """Forget this task's backups newer than ``step`` (all, for None): the next saves replace them."""
    kept = [s for s in backups_in(folder) if step is not None and s <= step]
    _delete(folder, [s for s in backups_in(folder) if s not in kept])
    for name in glob.glob(str(folder / f"{PREFIX}-*_temp*")):  # a save cut short by a kill
        tf.io.gfile.rmtree(name) if os.path.isdir(name) else os.remove(name)
    _list(folder, kept)


def _words(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:160]


class TaskBackups(tf.keras.callbacks.Callback):
    """Backups of this task in ``folder`` about every ``seconds`` of training.

    ``restore`` (before the input pipeline is built, in the strategy's scope) takes up the backup every task
    holds; it also stands in for tf-keras's training state (``model._training_state``): ``fit`` asks it at
    which epoch and step to begin.
    """

    def __init__(self, folder: Path, seconds: float, writer: MetricsWriter, multi_worker: bool,
                 plan: dict | None = None, replicas_per_task: int = 1):
        super().__init__()
        self._supports_tf_logs = True  # it reads no logs: tf-keras need not turn them into numbers each step
        self.folder = Path(folder)
        self.seconds = seconds
        self.writer = writer
        self.multi_worker = multi_worker
        self.plan = {k: plan[k] for k in PLAN_FIELDS if k in plan} if plan else {}
        self.replicas_per_task = replicas_per_task
        self.every: int | None = None   # steps between saves, once the tasks agreed on it
        self._next_save = 0
        self.restored: tuple[int, int] | None = None
        self.checkpoint = None
        self._epoch = 0
        self._steps = 0                 # steps of this attempt
        self._pace_from: tuple[float, int] | None = None  # (when, global step) the pace is measured from
        self._global_step = 0
        self._last_batch = -1

    # -------------------------------------------------------------- start of an attempt

    def restore(self, model) -> int:
        """Take up the newest backup every task holds (in the strategy's scope, before the input pipeline is
        built); returns the global batches of the input stream it holds, to skip (0: from the start)."""
        self.model = model
        optimizer = model.optimizer
        if optimizer is not None and callable(getattr(optimizer, "build", None)) and not getattr(optimizer, "_built", False):
            optimizer.build(model.trainable_variables)
        self._saved_epoch = tf.Variable(-1, dtype=tf.int64, name="backup_epoch", trainable=False)
        self._saved_step = tf.Variable(-1, dtype=tf.int64, name="backup_step", trainable=False)
        self.checkpoint = tf.train.Checkpoint(model=model, backup_epoch=self._saved_epoch,
                                              backup_step=self._saved_step, train_counter=model._train_counter)
        self.folder.mkdir(parents=True, exist_ok=True)
        step = self._agree_on_backup(backups_in(self.folder))  # a BackupError here: every task, nothing deleted
        if step is not None:  # read before anything is deleted: a backup that cannot be taken up is kept
            try:
                self.checkpoint.restore(_path(self.folder, step)).assert_existing_objects_matched()
            except (AssertionError, ValueError) as exc:
                raise BackupError(f"the backup of step {step} does not fit this model ({_words(exc)}): the model "
                                  "changed since it was made; start a new run for the new model") from None
            except tf.errors.OpError as exc:
                raise BackupError(f"the backup of step {step} cannot be read ({_words(exc)}): its files are damaged "
                                  f"on this task's host; delete that backup-{step}.* here, or start a new run") from None
        keep_only_up_to(self.folder, step)  # a newer backup of this task alone: the next saves replace it
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(self.folder), max_to_keep=KEEP,
                                                  checkpoint_name=PREFIX)
        if step is None:
            return 0
        saved = plan_of(self.folder, step)
        changed = {k: [saved[k], self.plan[k]] for k in PLAN_FIELDS
                   if k in saved and k in self.plan and saved[k] != self.plan[k]}
        # Where the input stream is: the examples the backup's steps took, in global batches of the plan now.
        batch_then = saved.get("global_batch") or self.plan.get("global_batch")
        batch_now = self.plan.get("global_batch") or batch_then
        position = step * batch_then // batch_now if batch_then and batch_now else step
        spe = self.plan.get("steps_per_epoch")
        self.restored = (position // spe, position % spe - 1) if spe else \
            (int(self._saved_epoch.numpy()), int(self._saved_step.numpy()))
        self._global_step = position
        learning_rate = self._plan_learning_rate(optimizer, changed)
        fields = {"epoch": int(self._saved_epoch.numpy()), "step": int(self._saved_step.numpy()), GLOBAL_STEP: step}
        if position != step:
            fields["position"] = position
            self._renumber(step, position)
        if changed:
            fields["changed"] = changed
        if learning_rate is not None:
            fields["learning_rate"] = learning_rate
        self.writer.event(Event.RESUMED, **fields)
        return position

    def _renumber(self, step: int, position: int) -> None:
        """The global batch changed: backups are numbered by the steps of the stream now. The restored state is
        saved again as ``backup-<position>`` and the backups numbered in the old steps go (else an old number
        could outrank the new saves, or be kept in their place). The new one is on disk before any goes."""
        self._train_counter_at(position)
        self._epoch, self._global_step = self.restored[0], position
        self.save(self.restored[1], sweep=False)
        _delete(self.folder, [s for s in backups_in(self.folder) if s != position])
        keep_newest(self.folder)

    def _train_counter_at(self, step: int) -> None:
        self.model._train_counter.assign(step)

    def _plan_learning_rate(self, optimizer, changed: dict) -> float | None:
        """Train at the plan's learning rate: a backup restores the optimizer's, made under its own plan. The
        rate the optimizer now has; a difference from the backup's is put in ``changed``."""
        rate = getattr(optimizer, "learning_rate", None) if optimizer is not None else None
        if rate is None or isinstance(getattr(optimizer, "_learning_rate", None),
                                      tf.keras.optimizers.schedules.LearningRateSchedule):
            return None  # a schedule: it goes by the restored iterations
        restored = float(tf.keras.backend.get_value(rate))
        planned = self.plan.get("learning_rate")
        if planned is not None and not np.isclose(restored, planned, rtol=1e-6, atol=0):
            optimizer.learning_rate = planned
            changed.setdefault("learning_rate", [restored, planned])
        return float(tf.keras.backend.get_value(optimizer.learning_rate))

    def on_train_begin(self, logs=None):
        if self.checkpoint is None:
            self.restore(self.model)  # a fit whose input cannot skip: restored at least
        self._train_counter_at(self._global_step)  # fit set it to 0 just before: the run's steps go on
        self.model._training_state = self

    def _agree_on_backup(self, mine: list[int]) -> int | None:
        if not self.multi_worker:
            return mine[-1] if mine else None
        rows = share(self.model.distribute_strategy, [float(s) for s in mine[-KEEP:]], KEEP)
        return backup_to_restore(rows, self.replicas_per_task)

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch, initial_epoch, mode=None):
        """Where ``fit`` begins: after the restored step (the next epoch after its last step)."""
        if self.restored is None:
            return initial_epoch, 0
        epoch, step = self.restored
        if steps_per_epoch is not None and step >= steps_per_epoch - 1:
            return epoch + 1, 0
        return epoch, step + 1

    @property
    def global_step(self) -> int:
        """The run's global step after the last step trained (as trainer.report counts it)."""
        return self._global_step

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
                # The first steps hold no epoch's end (its validation): their pace can make the first backup
                # come late (40 s into a 30 s interval, and a kill before it redid everything). The first one comes
                # at the current epoch's end at the latest; the interval is measured again there, ends included.
                first = min(self.every, steps) if steps else self.every
                self._next_save = (self._global_step // first + 1) * first
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

    def save(self, batch: int, sweep: bool = True) -> None:
        """Back up now, as ``backup-<global step>`` with its plan; ``sweep``: then keep only the newest ones."""
        t0 = time.perf_counter()
        self.writer.event(Event.BACKING_UP, global_step=self._global_step)  # the console waits longer meanwhile
        self._saved_epoch.assign(self._epoch)
        self._saved_step.assign(batch)
        if self.plan:  # first: a backup on disk always has its plan (a plan left by a save cut short goes below)
            Path(_path(self.folder, self._global_step) + PLAN_SUFFIX).write_text(json.dumps(self.plan))
        self.manager.save(checkpoint_number=self._global_step)
        if sweep:
            keep_newest(self.folder)
        self.writer.event(Event.BACKED_UP, epoch=self._epoch, step=batch, global_step=self._global_step,
                          seconds=time.perf_counter() - t0)

    def on_train_end(self, logs=None):
        if getattr(self.model, DIVERGED, False):  # stopped for a diverged loss: the last good backup stays newest
            log.info("no backup of step %d: its loss is not finite", self._global_step)
        elif self._global_step and self._global_step not in backups_in(self.folder):
            self.save(self._last_batch)  # the end state stays with the run until it is cleaned
        self.model._training_state = None
