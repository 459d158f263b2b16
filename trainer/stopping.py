"""A Stop that stops: on SIGTERM the step in progress finishes, every task of the cluster stops after the same step,
writes a backup there, and the process ends (torchrun's and Slurm's contract: SIGTERM, a last checkpoint, an exit
within the grace; SIGKILL stays the agent's last resort).

Synchronous multi-worker training steps together (each step's all-reduce waits for every worker), so a worker that
stopped alone would leave the others waiting in their next all-reduce until the SIGKILL. The first task to hear
SIGTERM names a step ``AHEAD`` steps on in the coordination service's key-value store, which every task of a
MultiWorkerMirrored cluster reaches (TensorFlow's own ``PreemptionCheckpointHandler`` agrees the same way); each
task's watcher thread reads it. A worker can be at most one step from another, so every task learns the step before
it gets there. ``fit`` ends after that step, without the cut epoch's validation or epoch record (numbers of an epoch
that did not happen); ``TaskBackups.on_train_end`` writes the backup on every task at the same step.
"""

from __future__ import annotations

import logging
import signal
import threading

import tensorflow as tf
from tensorflow.python.eager import context  # the coordination service's key-value store (no public API)

log = logging.getLogger("trainer.stopping")

EXIT_STOPPED = 128 + signal.SIGTERM  # a task that stopped on SIGTERM, backed up: as a shell says "terminated"
AHEAD = 2                        # steps after the step the first SIGTERM was heard at, where every task stops
STOP_KEY = "tfcc_stop_at_step"   # in the coordination service's key-value store
STOPPING = "_tfcc_stopping"      # set on the model once it stops: the reporter writes no record of a cut epoch


class Stopped(Exception):
    """Training stopped on SIGTERM after ``step``, backed up there; the process ends with ``EXIT_STOPPED``."""

    def __init__(self, step: int):
        super().__init__(f"stopped on SIGTERM after step {step}, backed up there")
        self.step = step


class GracefulStop(tf.keras.callbacks.Callback):
    """SIGTERM ends ``fit`` after a step every task agrees on (after ``backups`` in the callbacks: its global step
    is the run's). ``stopped_at``: the global step training stopped after (None: it was not stopped)."""

    def __init__(self, backups, multi_worker: bool):
        super().__init__()
        self._supports_tf_logs = True  # it reads no logs
        self.backups = backups
        self.multi_worker = multi_worker
        self.asked = threading.Event()     # this process got SIGTERM
        self.stop_at: int | None = None    # the step every task stops after, once known
        self.stopped_at: int | None = None

    def install(self) -> None:
        """Take SIGTERM (on the main thread, after the strategy is made: TensorFlow's coordination service took it
        at the C level and only notes it); a multi-worker cluster's watcher starts reading the stop step."""
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, self._on_sigterm)
        if self.multi_worker:
            threading.Thread(target=self._watch, name="tfcc-stop-watch", daemon=True).start()

    def _on_sigterm(self, signum, frame) -> None:
        self.asked.set()  # acted on at the end of the step in progress (a handler runs between Python's steps)

    def _watch(self) -> None:
        """Wait for the step another task named (the call returns when the key is set, or fails when the cluster
        goes away: then there is nothing to agree on)."""
        try:
            value = context.context().get_config_key_value(STOP_KEY)
        except Exception as exc:  # noqa: BLE001 - the cluster ended: a stop of this task alone
            log.debug("stop watcher ended: %s", exc)
            return
        try:
            self.stop_at = int(value)
        except (TypeError, ValueError):
            log.warning("a stop step that is no number: %r", value)

    def _propose(self, step: int) -> int:
        """The step every task stops after: ours, ``AHEAD`` on, unless another task named one first."""
        if not self.multi_worker:
            return step
        try:
            context.context().set_config_key_value(STOP_KEY, str(step + AHEAD))
        except Exception as exc:  # noqa: BLE001 - named by another task first (or the cluster is going)
            log.debug("stop step already named: %s", exc)
        try:
            return int(context.context().get_config_key_value(STOP_KEY, 1000))
        except Exception as exc:  # noqa: BLE001 - the cluster is going: stop here
            log.warning("no stop step agreed (%s): this task stops after step %d", exc, step)
            return step

    def on_train_batch_end(self, batch, logs=None):
        step = self.backups.global_step
        if self.asked.is_set() and self.stop_at is None:
            self.stop_at = self._propose(step)
        if self.stop_at is not None and step >= self.stop_at and self.stopped_at is None:
            self.stopped_at = step
            self.model.stop_training = True
            setattr(self.model, STOPPING, True)
            self.model._should_eval = lambda *_: False  # no validation of an epoch cut short: the stop's time
