"""Keras callback that writes tfcc's per-step, per-epoch and lifecycle records.

Use it from any tf-keras ``model.fit``, including your own scripts::

    from trainer.report import MetricsReporter
    model.fit(ds, epochs=3, callbacks=[MetricsReporter()])   # -> $TFCC_RUN_DIR/metrics.jsonl

Keras's own ``loss`` in the batch logs is the running mean since the start of
the epoch, not the loss of the step, and under MultiWorkerMirroredStrategy
tf-keras sums its training metrics over the workers. The reporter therefore
instruments the model: it wraps ``compute_loss`` and ``train_step`` so each
step also returns the loss of that step summed over all replicas of the
cluster, which is the mean loss over the step's global batch (each replica's
loss is already scaled by 1/num_replicas), and so the training metrics are
cluster-wide means (see ``_ClusterReduction``). A model whose ``train_step`` does not call
``compute_loss`` cannot be instrumented; its step records then carry Keras's
running mean as ``loss_avg`` and no ``loss``.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from pathlib import Path

import tensorflow as tf

from agent.protocol import METRICS, RUN_DIR_VARIABLE
from trainer.metrics import MetricsWriter

log = logging.getLogger("trainer.report")

# Scalars: tf-keras's "sum" output reduction under MirroredStrategy sums every
# element of an output, so a packed vector would not survive.
STEP_LOSS_KEY = "tfcc_step_loss"
STEP_EXAMPLES_KEY = "tfcc_step_examples"
_INTERNAL_KEYS = (STEP_LOSS_KEY, STEP_EXAMPLES_KEY)


def _task_from_tf_config() -> tuple[str, int, int]:
    try:
        cfg = json.loads(os.environ.get("TF_CONFIG") or "{}")
        task = cfg.get("task", {})
        cluster = cfg.get("cluster", {})
        workers = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
        return task.get("type", "worker"), int(task.get("index", 0)), max(1, workers)
    except (ValueError, TypeError, AttributeError):
        return "worker", 0, 1


def _to_float(value):
    try:
        return float(value.numpy() if hasattr(value, "numpy") else value)
    except (TypeError, ValueError):
        return None


def instrument_step_loss(model) -> bool:
    """Make ``model``'s train step return exact cluster-wide values.

    Adds the global-batch loss and size of the step, and turns Keras's
    per-replica metric results into the mean over replicas. Returns False when
    the model cannot be instrumented (no ``compute_loss``).
    """
    if getattr(model, "_tfcc_instrumented", False):
        return True
    compute_loss = getattr(model, "compute_loss", None)
    train_step = getattr(model, "train_step", None)
    if compute_loss is None or train_step is None:
        return False
    # MirroredStrategy traces each local replica's step in its own thread: keep
    # each replica's loss tensor apart by thread.
    traced: dict = {}

    def compute_loss_and_keep(*args, **kwargs):
        loss = compute_loss(*args, **kwargs)
        traced[threading.get_ident()] = loss
        return loss

    def train_step_with_step_loss(data):
        traced.pop(threading.get_ident(), None)
        logs = train_step(data)
        if not isinstance(logs, dict):
            return logs
        reduce = _ClusterReduction(model)
        logs = {key: reduce.mean(value) for key, value in logs.items()}
        loss = traced.pop(threading.get_ident(), None)
        if loss is not None:
            x, _, _ = tf.keras.utils.unpack_x_y_sample_weight(data)
            examples = tf.cast(tf.shape(tf.nest.flatten(x)[0])[0], tf.float32)
            # This replica's loss is its batch mean divided by num_replicas_in_sync;
            # the sum over every replica of the cluster is the global-batch mean.
            logs[STEP_LOSS_KEY] = reduce.sum(tf.cast(tf.stop_gradient(loss), tf.float32))
            logs[STEP_EXAMPLES_KEY] = reduce.sum(examples)
        return logs

    model.compute_loss = compute_loss_and_keep
    model.train_step = train_step_with_step_loss
    model.train_function = None  # rebuild with the wrapped step
    model._tfcc_instrumented = True
    return True


class _ClusterReduction:
    """Per-replica outputs that Keras's output reduction turns into cluster-wide values.

    tf-keras reduces train-step outputs with ``distribute_reduction_method``;
    its default ("auto") sums them over all replicas, so under
    MultiWorkerMirroredStrategy each worker's own running mean is added up
    (an accuracy of 1.8 with two workers). Dividing by the replica count first
    gives the mean over replicas, which for mean metrics (loss, accuracy) over
    equal per-replica batches is the cluster-wide value. Under "first" the
    values are all-reduced explicitly instead.
    """

    def __init__(self, model):
        method = getattr(model, "distribute_reduction_method", "auto") or "auto"
        if method == "auto":
            method = "first" if "TPU" in type(model.distribute_strategy).__name__ else "sum"
        self.ctx = tf.distribute.get_replica_context()
        self.replicas = self.ctx.num_replicas_in_sync if self.ctx is not None else 1
        self.by_sum = method == "sum"

    def _applies(self, value) -> bool:
        return self.replicas > 1 and tf.is_tensor(value) and value.dtype.is_floating

    def mean(self, value):
        if not self._applies(value):
            return value
        if self.by_sum:
            return value / self.replicas
        return self.ctx.all_reduce(tf.distribute.ReduceOp.MEAN, value)

    def sum(self, value):
        if not self._applies(value) or self.by_sum:
            return value
        return self.ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)


class MetricsReporter(tf.keras.callbacks.Callback):
    """Writes step, epoch and lifecycle records to a tfcc metrics file.

    Args:
        path_or_writer: a metrics file path, or a MetricsWriter to share.
            Default: ``$TFCC_RUN_DIR/metrics.jsonl``, else ``./metrics.jsonl``.
        task_type, task_index, num_workers: default from ``TF_CONFIG``.
        report_steps: write one record per step (True) or only epochs and events.
    """

    def __init__(self, path_or_writer=None, *, task_type=None, task_index=None,
                 num_workers=None, report_steps=True):
        super().__init__()
        # Take Keras's logs as tensors: the same dict TensorBoard gets, so that
        # removing tfcc's own output in on_epoch_end reaches every callback.
        self._supports_tf_logs = True
        t_type, t_index, workers = _task_from_tf_config()
        self.task_type = task_type or t_type
        self.task_index = t_index if task_index is None else task_index
        self.num_workers = num_workers or workers
        self.report_steps = report_steps
        if isinstance(path_or_writer, MetricsWriter):
            self.writer, self._own_writer = path_or_writer, False
        else:
            path = path_or_writer or Path(os.environ.get(RUN_DIR_VARIABLE, ".")) / METRICS
            self.writer = MetricsWriter(path, {"task_type": self.task_type, "task_index": self.task_index})
            self._own_writer = True
        self.exact_loss = False
        self._epoch = 0
        self._global_step = 0
        self._t_step = 0.0
        self._t_epoch = 0.0
        self._t_train = 0.0

    def set_model(self, model):
        super().set_model(model)
        self.exact_loss = instrument_step_loss(model)  # also makes epoch metrics cluster-wide

    def _implements_train_batch_hooks(self):
        # Without step records Keras need not call (and wait for) any batch hook.
        return self.report_steps

    def on_train_begin(self, logs=None):
        self._t_train = time.perf_counter()
        if self._own_writer:
            self.writer.event("train_begin", exact_step_loss=self.exact_loss)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._t_epoch = self._t_step = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        logs = logs if logs is not None else {}
        # Take tfcc's outputs out of the dict later callbacks (TensorBoard) and
        # the epoch logs get; reading them waits for the step to complete.
        loss, examples = (_to_float(logs.pop(key, None)) for key in _INTERNAL_KEYS)
        # Step time: from the end of the previous step (or the epoch's start) to
        # the end of this one. One hook per step instead of two: under
        # MultiWorkerMirroredStrategy each worker's per-step Python time holds
        # back the whole cluster.
        now = time.perf_counter()
        step_time, self._t_step = now - self._t_step, now
        steps = (self.params or {}).get("steps")
        # From the epoch, so that a resumed run numbers its steps as the first run did.
        self._global_step = self._epoch * steps + batch + 1 if steps else self._global_step + 1
        if not self.report_steps:
            return
        record = {
            "type": "step",
            "epoch": self._epoch,
            "step": batch,
            "global_step": self._global_step,
            "step_time": step_time,
            "time": time.time(),
        }
        if examples is not None:
            record["loss"] = loss
        else:
            record["loss_avg"] = _to_float(logs.get("loss"))
        if examples and step_time > 0:
            record["global_batch"] = int(examples)
            record["examples_per_sec"] = examples / self.num_workers / step_time
            record["global_examples_per_sec"] = examples / step_time
        self.writer.write(record)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        for key in _INTERNAL_KEYS:  # keep them out of History, TensorBoard and later callbacks
            logs.pop(key, None)
        record = {"type": "epoch", "epoch": epoch, "epoch_time": time.perf_counter() - self._t_epoch,
                  "time": time.time()}
        for key, value in logs.items():
            number = _to_float(value)
            if number is not None or value is None:
                record[key] = number
        self.writer.write(record)

    def on_train_end(self, logs=None):
        if self._own_writer:
            # The writer stays open for the next fit(); it is drained at exit.
            self.writer.event("train_end", train_time=time.perf_counter() - self._t_train)


class CoordinatorReporter(tf.keras.callbacks.Callback):
    """Step and epoch records of a ParameterServerStrategy run, from its coordinator (the chief).

    Under ParameterServerStrategy ``fit`` only schedules steps on the workers; a batch's logs are a
    ``RemoteValue`` whose ``fetch`` waits for that step. Waiting on the training thread would stall
    the scheduling (the workers run dry), so every ``every``-th step's logs (and each epoch's last)
    go to a thread of their own that fetches them and writes the record: Keras's running means
    (``loss_avg``, ``accuracy``: metric variables shared by all workers, over the epoch's steps so
    far) and the pace since the previous record (``step_time`` per step, ``global_examples_per_sec``
    for all workers, ``examples_per_sec`` for one on average).
    """

    def __init__(self, writer: MetricsWriter, batch: int, num_workers: int, every: int = 10):
        super().__init__()
        self._supports_tf_logs = True  # else tf-keras refuses batch hooks under ParameterServerStrategy
        self.writer = writer
        self.batch = batch
        self.num_workers = max(1, num_workers)
        self.every = max(1, every)
        self._epoch = 0
        self._t_epoch = 0.0
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._fetching, name="tfcc-coordinator-reporter", daemon=True)
        self._thread.start()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._t_epoch = time.perf_counter()
        self._queue.put(("epoch", epoch, self._t_epoch))

    def on_train_batch_end(self, batch, logs=None):
        steps = (self.params or {}).get("steps")
        if (batch + 1) % self.every and not (steps is not None and batch + 1 == steps):
            return
        self._queue.put(("step", (self._epoch, batch, steps), logs))  # fetched off this thread

    def _fetching(self) -> None:
        mark_step, mark_time = 0, time.perf_counter()
        while True:
            kind, what, payload = self._queue.get()
            try:
                if kind == "epoch":
                    mark_step, mark_time = 0, payload
                    continue
                epoch, batch, steps = what
                values = payload.fetch() if hasattr(payload, "fetch") else (payload or {})
                now = time.perf_counter()
                done = batch + 1 - mark_step
                took = (now - mark_time) / max(1, done)
                mark_step, mark_time = batch + 1, now
                record = {"type": "step", "epoch": epoch, "step": batch,
                          "global_step": epoch * steps + batch + 1 if steps else batch + 1,
                          "step_time": took, "time": time.time(), "steps": done, "global_batch": self.batch}
                if took > 0:  # the workers' steps together; per worker, what one of them takes on average
                    record["global_examples_per_sec"] = self.batch / took
                    record["examples_per_sec"] = self.batch / took / self.num_workers
                for key, value in dict(values).items():
                    record["loss_avg" if key == "loss" else key] = _to_float(value)
                self.writer.write(record)
            except Exception:  # a step that failed is the coordinator's to report, not the reporter's
                log.exception("fetching a step's logs")
            finally:
                self._queue.task_done()

    def on_epoch_end(self, epoch, logs=None):
        self._queue.join()  # the epoch's step records first (their steps are done: fit waited for them)
        values = logs.fetch() if hasattr(logs, "fetch") else (logs or {})
        record = {"type": "epoch", "epoch": epoch, "epoch_time": time.perf_counter() - self._t_epoch,
                  "time": time.time()}
        for key, value in dict(values).items():
            record[key] = _to_float(value)
        self.writer.write(record)
