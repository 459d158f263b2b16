"""A Stop that stops: on SIGTERM the step in progress finishes, every task of the cluster stops after the same step,
writes a backup there, and the process ends (torchrun's and Slurm's contract: SIGTERM, a last checkpoint, an exit
within the grace; SIGKILL stays the agent's last resort).

Synchronous multi-worker training steps together (each step's all-reduce waits for every worker), so a worker that
stopped alone would leave the others waiting in their next all-reduce until the SIGKILL. The first task to hear
SIGTERM (at the end of its step N) names step N + 1 in the coordination service's key-value store, which every task
of a MultiWorkerMirrored cluster reaches, and waits until every other task's watcher thread has read it and said so
(TensorFlow's own ``PreemptionCheckpointHandler`` agrees the same way). Meanwhile no task can finish step N + 1 (its
all-reduce waits for the first one), so every task stops after it. ``fit`` ends there, without the cut epoch's
validation or epoch record (numbers of an epoch that did not happen; a stop at an epoch's last step keeps its end);
``TaskBackups.on_train_end`` writes the backup on every task at that step, unless the loss there is not finite (a
stop for a diverged loss keeps the last good backup the newest).

SIGTERM outside ``fit``'s steps (before training, while saving the model) ends the task at once, as does a step that
does not end within ``patience`` (a peer gone, the main thread blocked in an all-reduce): no stop waits out the grace.

A user's script gets the same stop through the capture (``trainer.capture``: ``Stopping`` on the base of the model's
own Keras, counting the script's steps itself); what it backs up there is the script's own ``BackupAndRestore``'s.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
import time

import tensorflow as tf
from tensorflow.python.eager import context  # the coordination service's key-value store (no public API)

from trainer.records import LOSS

log = logging.getLogger("trainer.stopping")

EXIT_STOPPED = 128 + signal.SIGTERM  # a task that stopped on SIGTERM, backed up: as a shell says "terminated"
AHEAD = 1                        # steps after the step the first SIGTERM was heard at, where every task stops
STOP_KEY = "tfcc_stop_at_step"   # in the coordination service's key-value store; each task's ack: ack_key(task)
ACK_SECONDS = 5.0                # how long the first task waits for the others' watchers (then it stops anyway)
PATIENCE_SECONDS = 3.0           # the steps to the agreed one end within this and 3 of the slowest seen
STOPPING = "_tfcc_stopping"      # set on the model once it stops: the reporter writes no record of a cut epoch
DIVERGED = "_tfcc_diverged"      # set on the model when the loss at the stop is not finite: no backup of it


class Stopped(Exception):
    """Training stopped on SIGTERM after ``step``, backed up there; the process ends with ``EXIT_STOPPED``."""

    def __init__(self, step: int | None):
        super().__init__(f"stopped on SIGTERM after step {step}, backed up there" if step is not None else
                         "stopped on SIGTERM at the end of training, backed up there")
        self.step = step


def ack_key(task: str) -> str:
    """Where ``task``'s watcher says it read the stop step."""
    return f"{STOP_KEY}_ack_{task}"


def _nothing(*args, **kwargs) -> None:
    pass


def _die_by_sigterm() -> None:
    """End as SIGTERM's default action ends a process (no handler, no backup)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


class Stopping:
    """SIGTERM ends ``fit`` after a step every task agrees on (after ``backups`` in the callbacks: its global step
    is the run's; None: the steps are counted here, over every ``fit`` of the process). ``me`` and ``peers``: this
    task's name and those of the other training tasks (none: one task). ``stopped_at``: the step training stopped
    after (None: it was not stopped). A Keras callback with a Keras's ``Callback`` as its other base
    (``GracefulStop``: tf.keras's)."""

    def __init__(self, backups=None, me: str = "", peers: tuple[str, ...] = ()):
        super().__init__()
        self._supports_tf_logs = True  # it reads the logs once, at the stop
        self.backups = backups
        self._steps = 0                    # without backups: the steps trained in this process
        self.others: list = []             # the fit's other callbacks: no end of an epoch the stop cut short
        self.me, self.peers = me, tuple(peers)
        self.asked = threading.Event()     # this process got SIGTERM
        self.stop_at: int | None = None    # the step every task stops after, once known
        self.stopped_at: int | None = None
        self.active = False                # within fit's steps: SIGTERM is taken here, else it ends the task
        self._slowest = 0.0                # the slowest step seen (its wall time), for the patience
        self._step_began = time.perf_counter()
        self._patience: threading.Timer | None = None
        self._validating = False           # in fit's validation: no step, no patience
        self._epoch = 0                    # the epoch in progress

    @property
    def multi_worker(self) -> bool:
        return bool(self.peers)

    def install(self) -> None:
        """Take SIGTERM (on the main thread, after the strategy is made: TensorFlow's coordination service took it
        at the C level and only notes it); a multi-worker cluster's watcher starts reading the stop step."""
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, self._on_sigterm)
        if self.multi_worker:
            threading.Thread(target=self._watch, name="tfcc-stop-watch", daemon=True).start()

    def _on_sigterm(self, signum, frame) -> None:
        if not self.active:
            _die_by_sigterm()  # no step to finish: before training, or after it (the model's save)
            return
        self.asked.set()  # acted on at the end of the step in progress (a handler runs between Python's steps)
        if self._patience is None and not self._validating:
            self._arm()

    def _arm(self) -> None:
        """The patience: the agreement's wait for the others, then the steps to the agreed one (a validation or an
        epoch's end in between is no step: the timer waits for them, re-armed after)."""
        if self._patience is not None:
            self._patience.cancel()
        self._patience = threading.Timer(ACK_SECONDS + PATIENCE_SECONDS + 3 * self._slowest, self._out_of_patience)
        self._patience.daemon = True
        self._patience.start()

    def on_test_begin(self, logs=None):
        self._validating = True
        if self._patience is not None:
            self._patience.cancel()

    def on_test_end(self, logs=None):
        self._validating = False

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._validating = False
        if self.asked.is_set() and self.stopped_at is None:
            self._arm()  # after the epoch's end (its validation, a checkpoint of the script's): steps again

    def _out_of_patience(self) -> None:
        """(On the timer's thread: the main one is stuck in a step.) The task ends as SIGTERM would end it."""
        if self.stopped_at is None:
            print("tfcc: no step ended within the stop's patience (a peer gone?): ending now, without a "
                  "backup", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(EXIT_STOPPED)

    def _watch(self) -> None:
        """Wait for the step another task named, then say it was read (the call returns when the key is set, or
        fails when the cluster goes away: then there is nothing to agree on)."""
        try:
            value = context.context().get_config_key_value(STOP_KEY)
            self.stop_at = int(value)
            context.context().set_config_key_value(ack_key(self.me), value)
        except Exception as exc:  # noqa: BLE001 - the cluster ended: a stop of this task alone
            log.debug("stop watcher ended: %s", exc)

    def _propose(self, step: int) -> int:
        """The step every task stops after: ours, ``AHEAD`` on, once every other task's watcher read it (unless
        another task named one first: then that one)."""
        if not self.multi_worker:
            return step
        try:
            context.context().set_config_key_value(STOP_KEY, str(step + AHEAD))
        except Exception as exc:  # noqa: BLE001 - named by another task first (or the cluster is going)
            log.debug("stop step already named: %s", exc)
        try:
            agreed = int(context.context().get_config_key_value(STOP_KEY, 1000))
        except Exception as exc:  # noqa: BLE001 - the cluster is going: stop here
            log.warning("no stop step agreed (%s): this task stops after step %d", exc, step)
            return step
        deadline = time.monotonic() + ACK_SECONDS
        for peer in self.peers:  # each peer is at most inside the next step: it learns before it can end it
            left = max(1, int(1000 * (deadline - time.monotonic())))
            try:
                context.context().get_config_key_value(ack_key(peer), left)
            except Exception as exc:  # noqa: BLE001 - a peer gone or too slow: stop anyway
                log.warning("%s did not read the stop step in time (%s)", peer, exc)
        return agreed

    def on_train_begin(self, logs=None):
        self.active = True

    def on_train_batch_begin(self, batch, logs=None):
        self._step_began = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self._slowest = max(self._slowest, time.perf_counter() - self._step_began)
        if self.backups is None:
            self._steps += 1
        step = self.step
        if self.asked.is_set() and self.stop_at is None:
            self.stop_at = self._propose(step)
        if self.stop_at is None or step < self.stop_at or self.stopped_at is not None:
            return
        self.stopped_at = step
        self.model.stop_training = True
        loss = (logs or {}).get(LOSS)
        try:
            if loss is not None and not math.isfinite(float(loss)):
                setattr(self.model, DIVERGED, True)  # a stop for a diverged loss: the last good backup stays newest
        except (TypeError, ValueError):
            pass
        steps = (self.params or {}).get("steps")
        cut = not steps or batch + 1 < steps
        if cut:  # an epoch cut short: no validation of it, no record of it, no epoch end for the other callbacks
            setattr(self.model, STOPPING, True)
            self.model._should_eval = lambda *_: False
            for callback in self.others:  # (TensorBoard's point, a ModelCheckpoint, a CSV row of a cut epoch)
                callback.on_epoch_end = _nothing
        self.stopping(batch, cut)

    @property
    def told(self) -> bool:
        """This task heard SIGTERM, or another task named the step to stop after."""
        return self.asked.is_set() or self.stop_at is not None

    @property
    def step(self) -> int:
        """The step the tasks agree on: the backups' global step, else the steps counted here."""
        return self.backups.global_step if self.backups is not None else self._steps

    def stopping(self, batch: int, cut: bool) -> None:
        """Training stops after ``batch`` (``cut``: before its epoch's end); the other callbacks saw the step."""

    def on_train_end(self, logs=None):
        self.active = False  # after the backups' end (before it in the callbacks): SIGTERM ends the task now
        if self._patience is not None:
            self._patience.cancel()


class GracefulStop(Stopping, tf.keras.callbacks.Callback):
    __doc__ = Stopping.__doc__


def _backups_of(callback) -> str | None:
    """Whose ``BackupAndRestore`` ``callback`` is (or a class of the script's on it): ``tf_keras``, ``keras`` (Keras
    3), or None: no backup callback."""
    for cls in type(callback).__mro__:
        flavour = (cls.__module__ or "").partition(".")[0]
        if cls.__name__ in ("BackupAndRestore", "BackupAndRestoreExperimental") and flavour in ("tf_keras", "keras"):
            return flavour
    return None


def _backed_up_now(callback, flavour: str) -> bool:
    """Whether ``callback``'s own step count made it back up at the step just ended."""
    if callback.save_freq == "epoch":
        return False
    count = callback._batches_count if flavour == "tf_keras" else callback._batches_seen_since_last_saving
    return count == 0


class ScriptStop(Stopping):
    """The stop of a user's script (through the capture, the script unchanged): the steps are counted here, and what
    is backed up at the stop is the script's own ``BackupAndRestore``'s, where it keeps it (``watch`` them for each
    ``fit``). ``said``: what became of each (for the stop's line); none: the script keeps no backup.

    - ``save_freq`` a number of steps: backed up at the stop's step (tf-keras resumes at the next step; Keras 3,
      as its own step backups do, at the start of that epoch with the weights of the stop);
    - ``save_freq="epoch"``: an epoch the stop cut short is not backed up (a resume would skip its rest); the last
      whole epoch's backup stays the newest;
    - a loss that is not finite at the stop: nothing is backed up there;
    - fit's end keeps the backup (``delete_checkpoint`` is for a fit that finished, not one that was stopped)."""

    def __init__(self, me: str = "", peers: tuple[str, ...] = ()):
        super().__init__(None, me, peers)
        self.backup_callbacks: list = []
        self._at_epoch_end: list = []
        self.said: list[str] = []

    def watch(self, callbacks) -> None:
        """``callbacks``: the script's of the fit to come."""
        self.others = list(callbacks)
        self.backup_callbacks = [c for c in callbacks if _backups_of(c)]
        self._at_epoch_end = []
        for callback in self.backup_callbacks:
            callback.__dict__.pop("on_train_end", None)  # a wrapper of a fit that failed before its end
            ended = callback.on_train_end

            def on_train_end(logs=None, callback=callback, ended=ended):
                if self.told:
                    callback.delete_checkpoint = False  # a stop is the interruption it keeps its backup for
                callback.__dict__.pop("on_train_end", None)  # the class's again, for the script's next fit
                return ended(logs)

            callback.on_train_end = on_train_end

    def stopping(self, batch: int, cut: bool) -> None:
        diverged = bool(getattr(self.model, DIVERGED, False))
        for callback in self.backup_callbacks:
            mine = f"its BackupAndRestore ({getattr(callback, 'backup_dir', '?')})"
            try:
                self.said.append(self._back_up(callback, _backups_of(callback), mine, batch, cut, diverged))
            except Exception as exc:  # noqa: BLE001 - the stop goes on; the line says what became of the backup
                log.warning("the script's BackupAndRestore could not back up at the stop", exc_info=True)
                self.said.append(f"{mine} could not back up at the stop ({type(exc).__name__}: {exc})"[:300])

    def _back_up(self, callback, flavour: str, mine: str, batch: int, cut: bool, diverged: bool) -> str:
        """Back ``callback`` up as the stop needs (the class's doc); the words of what it keeps."""
        if diverged:
            callback.on_epoch_end = _nothing  # not a model to keep (a cut epoch's end: Stopping's)
            if _backed_up_now(callback, flavour):  # its own count came due at this very step
                return f"the loss is not finite, and {mine} had just backed up at this step (the diverged weights)"
            return f"the loss is not finite: {mine} keeps the backup before it"
        if callback.save_freq == "epoch":
            return (f"{mine} keeps the backup of the last whole epoch (save_freq='epoch')" if cut else
                    f"{mine} backed up at the end of the epoch")
        if flavour == "tf_keras":
            if isinstance(self.model.distribute_strategy, tf.distribute.ParameterServerStrategy):
                return f"{mine} keeps its newest backup (no step backups under parameter servers)"
            callback._backup(epoch=callback._current_epoch, batch=batch)
            return f"{mine} backed up at the stop"
        if cut:
            callback._current_epoch = self._epoch  # Keras 3 counts it from 0 in each fit, a resumed one's too
            callback._save_model()
            return f"{mine} backed up at the stop"
        self._at_epoch_end.append(callback)  # after its own epoch end: the next epoch is where to go on
        return f"{mine} backed up at the end of the epoch"

    def on_epoch_end(self, epoch, logs=None):
        for callback in self._at_epoch_end:
            try:
                callback._current_epoch = epoch + 1
                callback._save_model()
            except Exception:  # noqa: BLE001 - said in the log; the stop goes on
                log.warning("the script's BackupAndRestore could not back up at the stop", exc_info=True)
        self._at_epoch_end = []


class GracefulScriptStop(ScriptStop, tf.keras.callbacks.Callback):
    __doc__ = ScriptStop.__doc__
