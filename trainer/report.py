"""Keras callback that writes tfcc's per-step, per-epoch and lifecycle records.

tfcc adds it to every ``fit`` of a script it runs (``trainer.capture``); a script of your own can
also add it itself (docs/your-script.md), in tf-keras or Keras 3, under every strategy::

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

import logging
import os
import queue
import threading
import time
from pathlib import Path

import tensorflow as tf

from agent.protocol import KERAS_REASON_VARIABLE, MEASURE_VARIABLE, METRICS, RUN_DIR_VARIABLE
from trainer.breakdown import StepBreakdown
from trainer.metrics import MetricsWriter, report  # noqa: F401  (report: the loops' one call)
from trainer.plan import KERAS3, TF_KERAS, observed_batch_plan
from trainer.records import FIT, GLOBAL_STEP, LOSS, LOSS_AVG, SCRIPT_WORKLOAD, Event, RecordType
from trainer.stopping import STOPPING
from trainer.strategies import Strategy, strategy_name
from trainer.tf_config import ClusterConfig, TaskId, tf_config_as_given

log = logging.getLogger("trainer.report")

# Scalars: tf-keras's "sum" output reduction under MirroredStrategy sums every
# element of an output, so a packed vector would not survive.
STEP_LOSS_KEY = "tfcc_step_loss"
STEP_EXAMPLES_KEY = "tfcc_step_examples"
# How many replicas of the cluster have a breakdown's ask (trainer/breakdown.py): each worker's flag, summed over the
# replicas with the step's other outputs, so that every worker learns at the same step that all have it, and measures
# there. It rides in the examples' sum (no output more: under MultiWorkerMirrored each output is an all-reduce of its
# own): examples + flags x FLAG_UNIT, in float64, exact for any batch and cluster; a step that computes no loss of
# Keras's has it as an output of its own.
STEP_ASKED_KEY = "tfcc_step_asked"
FLAG_UNIT = 2.0 ** 32
_INTERNAL_KEYS = (STEP_LOSS_KEY, STEP_EXAMPLES_KEY, STEP_ASKED_KEY)


def _to_float(value):
    try:
        return float(value.numpy() if hasattr(value, "numpy") else value)
    except (TypeError, ValueError):
        return None


def keras_of(model) -> str:
    """Which Keras ``model`` belongs to: ``tf-keras`` or ``keras3`` (its classes' modules say)."""
    for cls in type(model).__mro__:
        module = cls.__module__ or ""
        if module.startswith("tf_keras"):
            return TF_KERAS
        if module == "keras" or module.startswith("keras."):
            return KERAS3
    return TF_KERAS if tf.keras.__name__.startswith("tf_keras") else KERAS3


def _per_execution(model) -> int:
    """The steps ``fit`` runs per call of its step function (tf-keras: a variable; Keras 3: an int)."""
    value = getattr(model, "_steps_per_execution", None)
    if value is None:
        value = getattr(model, "steps_per_execution", None)
    try:
        return max(1, int(value.numpy() if hasattr(value, "numpy") else value or 1))
    except (TypeError, ValueError):
        return 1


def _first_input(data):
    """The inputs of a batch as Keras unpacks it: ``x`` of ``(x, y[, sample_weight])``, else the batch."""
    return data[0] if isinstance(data, (tuple, list)) else data


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
    # Not under parameter-server training: its steps run on remote workers, which cannot read this process's flag
    # (and no step is shared to measure at).
    no_flag = ""
    if strategy_name(getattr(model, "distribute_strategy", None)) == Strategy.PARAMETER_SERVER:
        no_flag = "under parameter-server training no step is shared to measure at"
    elif os.environ.get(MEASURE_VARIABLE, "1") == "0":
        no_flag = f"{MEASURE_VARIABLE}=0 turned it off"
    elif getattr(model, "jit_compile", False) is True or "TPU" in type(model.distribute_strategy).__name__:
        no_flag = "a step compiled with XLA (jit_compile) or on a TPU cannot read tfcc's flag"
    asked = None if no_flag else _asked_flag()
    object.__setattr__(model, "_tfcc_asked", asked)  # past Keras's tracking: no weight of the model
    object.__setattr__(model, "_tfcc_no_flag", no_flag or ("" if asked is not None else "no flag could be made"))

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
            size = tf.shape(tf.nest.flatten(_first_input(data))[0])[0]
            if asked is None:
                examples = tf.cast(size, tf.float32)
            else:
                examples = tf.cast(size, tf.float64) + tf.cast(asked, tf.float64) * FLAG_UNIT
            # This replica's loss is its batch mean divided by num_replicas_in_sync;
            # the sum over every replica of the cluster is the global-batch mean.
            logs[STEP_LOSS_KEY] = reduce.sum(tf.cast(tf.stop_gradient(loss), tf.float32))
            logs[STEP_EXAMPLES_KEY] = reduce.sum(examples)
        elif asked is not None:  # a step of the model's own that calls no compute_loss
            logs[STEP_ASKED_KEY] = reduce.sum(tf.identity(asked))
        return logs

    model.compute_loss = compute_loss_and_keep
    model.train_step = train_step_with_step_loss
    model.train_function = None  # rebuild with the wrapped step
    _hide_step_outputs(model)
    model._tfcc_instrumented = True
    return True


def _asked_flag():
    """A plain variable of this process (not one of the strategy's: made on a thread of its own, outside its scope),
    set while a breakdown is asked for here: 0.0 or 1.0. None where one cannot be made."""
    made: list = []

    def make():
        try:
            made.append(tf.Variable(0.0, trainable=False, dtype=tf.float32, name="tfcc_asked"))
        except Exception:  # noqa: BLE001 - no flag: the breakdown measures at the step asked for instead
            log.warning("no breakdown flag", exc_info=True)

    thread = threading.Thread(target=make, name="tfcc-flag")
    thread.start()
    thread.join()
    return made[0] if made else None


class _StepOutputs:
    """tfcc's outputs of a model's last step, whether a training step came since the last epoch end, and, where
    ``keep_input`` is set (tfcc's trainer: ``trainer.train.keep_until_exit``), the input iterator the latest ``fit``
    trains from, kept while the model lives. Never in a user's script: its iterators end where its own code ends
    them (one kept to the interpreter's end deadlocked there, in TensorFlow's ``MultiDeviceBuffer::Reset``)."""

    __slots__ = ("step", "trained", "keep_input", "input")

    def __init__(self):
        self.step: dict = {}
        self.trained = False
        self.keep_input = False
        self.input = None


def _hide_step_outputs(model) -> None:
    """Keep tfcc's step outputs from every callback and from Keras itself: each step's are taken out of
    its logs into ``model._tfcc_outputs.step`` (where the reporter reads them) before any callback sees them, and
    out of the logs Keras compares with the model's metrics at an epoch's end (else it would take the last
    step's logs for the metrics, and warn, under ParameterServerStrategy)."""
    make_train_function = model.make_train_function
    outputs = _StepOutputs()
    # Past Keras's attribute tracking: a dict set on a model each step would be wrapped for tracking (a
    # third of a millisecond a step).
    object.__setattr__(model, "_tfcc_outputs", outputs)

    def hiding(force=False):
        function = make_train_function(force=force) or model.train_function
        if getattr(function, "_tfcc", False):
            return function

        def train_function(*args, **kwargs):
            if outputs.keep_input:
                outputs.input = args[0] if args else kwargs.get("iterator")
            logs = function(*args, **kwargs)
            outputs.trained = True  # the next epoch logs Keras asks for are a training epoch's
            if isinstance(logs, dict):  # a RemoteValue under ParameterServerStrategy: fetched later
                outputs.step = {key: logs.pop(key) for key in _INTERNAL_KEYS if key in logs}
            return logs

        train_function._tfcc = True
        model.train_function = train_function
        return train_function

    model.make_train_function = hiding
    for name in ("_validate_and_get_metrics_result", "_get_metrics_result_or_logs"):  # tf-keras, Keras 3
        compare = getattr(model, name, None)
        if compare is not None:
            setattr(model, name, lambda logs, compare=compare: _epoch_logs(model, compare, logs))


def _epoch_logs(model, compare, logs):
    """The logs of a training epoch's end, without tfcc's outputs: under ParameterServerStrategy Keras
    reads the model's metrics (the last step scheduled need not be the last run); elsewhere the last
    step's own logs, as an instrumented step's logs always were: its metrics made cluster-wide means
    (``_ClusterReduction``). An evaluation's (validation, ``evaluate``) are Keras's own."""
    outputs = model._tfcc_outputs
    trained, outputs.trained = outputs.trained, False
    if not isinstance(logs, dict):
        return compare(logs)
    logs = {k: v for k, v in logs.items() if k not in _INTERNAL_KEYS}
    if not trained or getattr(model, "_cluster_coordinator", None) is not None:
        return compare(logs)
    return logs


class _ClusterReduction:
    """Per-replica outputs that Keras's output reduction turns into cluster-wide values.

    tf-keras reduces train-step outputs with ``distribute_reduction_method``;
    its default ("auto") sums them over all replicas, so under
    MultiWorkerMirroredStrategy each worker's own running mean is added up
    (an accuracy of 1.8 with two workers). Dividing by the replica count first
    gives the mean over replicas, which for mean metrics (loss, accuracy) over
    equal per-replica batches is the cluster-wide value. Under "first" the
    values are all-reduced explicitly instead. Keras 3 averages them over the
    replicas itself ("auto" is "mean" there): a sum is that mean times the replicas.
    """

    def __init__(self, model):
        self.ctx = tf.distribute.get_replica_context()
        self.replicas = self.ctx.num_replicas_in_sync if self.ctx is not None else 1
        tpu = "TPU" in type(model.distribute_strategy).__name__
        if keras_of(model) == KERAS3:
            self.method = "first" if tpu else "mean"
        else:
            method = getattr(model, "distribute_reduction_method", "auto") or "auto"
            self.method = ("first" if tpu else "sum") if method == "auto" else method

    def _applies(self, value) -> bool:
        return self.replicas > 1 and tf.is_tensor(value) and value.dtype.is_floating

    def mean(self, value):
        if not self._applies(value) or self.method == "mean":
            return value
        if self.method == "sum":
            return value / self.replicas
        return self.ctx.all_reduce(tf.distribute.ReduceOp.MEAN, value)

    def sum(self, value):
        if not self._applies(value) or self.method == "sum":
            return value
        if self.method == "mean":
            return value * self.replicas
        return self.ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)


def batch_plan(strategy, global_batch: int | None) -> dict:
    """The batch split a script's ``fit`` trains with (trainer.plan.observed_batch_plan)."""
    replicas = max(1, int(getattr(strategy, "num_replicas_in_sync", 1) or 1))
    return observed_batch_plan(strategy_name(strategy), replicas, tf_config_as_given().cluster, global_batch)


class _Reporting:
    """What ``MetricsReporter`` does, whichever Keras its callback base comes from (see ``reporter_for``)."""

    _tfcc_reporter = True  # a fit that has one gets no second from tfcc's capture

    def __init__(self, path_or_writer=None, *, task_type=None, task_index=None,
                 num_workers=None, report_steps=True, lifecycle=None, place=None, fit=None):
        super().__init__()
        # Take Keras's logs as tensors: the same dict TensorBoard gets, so that
        # removing tfcc's own output in on_epoch_end reaches every callback (and, under
        # ParameterServerStrategy, tf-keras allows batch hooks only to such callbacks).
        self._supports_tf_logs = True
        config = tf_config_as_given()
        self.task_type = task_type or config.task.type
        self.task_index = config.task.index if task_index is None else task_index
        self.num_workers = num_workers or config.num_workers
        self.report_steps = report_steps
        if isinstance(path_or_writer, MetricsWriter):
            self.writer, self._own_writer = path_or_writer, False
        else:
            path = path_or_writer or Path(os.environ.get(RUN_DIR_VARIABLE, ".")) / METRICS
            self.writer = MetricsWriter.shared(path, {"task_type": self.task_type, "task_index": self.task_index})
            self._own_writer = True
        # A script's reporter says what the trainer says of itself: the cluster formed, the batch plan.
        self.lifecycle = self._own_writer if lifecycle is None else lifecycle
        self.exact_loss = False
        self._coordinated: CoordinatorReporter | None = None  # under ParameterServerStrategy: it reports
        self._epoch = 0
        self._global_step = 0
        self._last_batch = -1
        self._t_step = 0.0
        self._t_epoch = 0.0
        self._t_train = 0.0
        self.measure_data = None  # the data fit trains on: a breakdown's input part pulls from it
        self._breakdown = None
        # A script's capture puts each step on its script's one step axis (a later fit goes on after the first)
        # and says which fit it is: place(fit's own global step) -> the step on that axis.
        self._place = place
        self._fit = fit
        self._at: int | None = None  # the last step, placed

    def set_model(self, model):
        super().set_model(model)
        # Under parameter-server training too: a step's loss is then that one worker's batch's.
        self.exact_loss = instrument_step_loss(model)  # also makes epoch metrics cluster-wide

    def _implements_train_batch_hooks(self):
        # Without step records Keras need not call (and wait for) any batch hook.
        return self.report_steps

    def on_train_begin(self, logs=None):
        self._t_train = time.perf_counter()
        strategy = self.model.distribute_strategy
        if strategy_name(strategy) == Strategy.PARAMETER_SERVER:
            self._coordinated = CoordinatorReporter(self.writer, None, batch_plan(strategy, None)["num_workers"],
                                                    started=self._started if self.lifecycle else None,
                                                    place=self._place, fit=self._fit)
            self._coordinated.set_params(self.params)
        if self.lifecycle:
            self.writer.event_once(Event.CLUSTER_FORMED, strategy=strategy_name(strategy),
                                   num_replicas=strategy.num_replicas_in_sync)
        if self.lifecycle:
            self.writer.event(Event.TRAIN_BEGIN, exact_step_loss=self.exact_loss, **self._fit_field())
        if self._coordinated is None and os.environ.get(MEASURE_VARIABLE, "1") != "0":
            self._breakdown = StepBreakdown(self.writer, self.model, self.measure_data,
                                            flag=getattr(self.model, "_tfcc_asked", None),
                                            no_flag=getattr(self.model, "_tfcc_no_flag", ""))

    def _started(self, global_batch) -> None:
        """The ``started`` event, once the first step has shown the batch ``fit`` trains with."""
        if not self.lifecycle or self.writer.said(Event.STARTED):
            return
        params = self.params or {}
        me = ClusterConfig(tf_config_as_given().cluster, TaskId(self.task_type, self.task_index))
        reason = os.environ.get(KERAS_REASON_VARIABLE)  # why the console gave it this Keras
        self.writer.event_once(Event.STARTED, source=SCRIPT_WORKLOAD, keras=keras_of(self.model), is_chief=me.is_chief,
            epochs=params.get("epochs"), steps_per_epoch=params.get("steps"), exact_step_loss=self.exact_loss,
            tensorflow=tf.__version__, **({"keras_reason": reason[:300]} if reason else {}),
            **batch_plan(self.model.distribute_strategy, global_batch))

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._last_batch = -1
        self._t_epoch = self._t_step = time.perf_counter()
        if self._coordinated is not None:
            self._coordinated.on_epoch_begin(epoch, logs)

    def on_train_batch_end(self, batch, logs=None):
        if self._coordinated is not None:
            self._coordinated.on_train_batch_end(batch, logs)
            return
        logs = logs if logs is not None else {}
        # tfcc's outputs of the step, taken out of its logs before any callback saw them; reading them
        # waits for the step to complete.
        outputs = getattr(self.model, "_tfcc_outputs", None)
        hidden = outputs.step if outputs is not None else {}
        loss, examples, asked = (_to_float(hidden.get(key, logs.pop(key, None))) for key in _INTERNAL_KEYS)
        if examples is not None and getattr(self.model, "_tfcc_asked", None) is not None:
            asked, examples = divmod(examples, FLAG_UNIT)
        # Step time: from the end of the previous step (or the epoch's start) to
        # the end of this one. One hook per step instead of two: under
        # MultiWorkerMirroredStrategy each worker's per-step Python time holds
        # back the whole cluster. With steps_per_execution > 1 Keras calls this
        # hook once per execution: the time is shared by the steps it ran.
        now = time.perf_counter()
        took, self._t_step = now - self._t_step, now
        batch = int(batch)  # a tensor in a fit tf-keras resumed mid-epoch (its BackupAndRestore)
        # The epoch's first hook: its steps are one execution's, a resumed epoch's first step is not its first.
        done = max(1, batch - self._last_batch if self._last_batch >= 0 else min(batch + 1, _per_execution(self.model)))
        self._last_batch = batch
        step_time = took / done
        steps = (self.params or {}).get("steps")
        # From the epoch, so that a resumed run numbers its steps as the first run did.
        self._global_step = self._epoch * steps + batch + 1 if steps else self._global_step + done
        self._at = self._place(self._global_step) if self._place is not None else self._global_step
        if not self.report_steps:
            return
        record = {
            "type": RecordType.STEP,
            "epoch": self._epoch,
            "step": batch,
            GLOBAL_STEP: self._at,
            "step_time": step_time,
            "time": time.time(),
            **self._fit_field(),
        }
        if done > 1:
            record["steps"] = done
        if examples is not None:
            record[LOSS] = loss
        else:
            record[LOSS_AVG] = _to_float(logs.get(LOSS))
        if examples and step_time > 0:
            record["global_batch"] = int(examples)
            record["examples_per_sec"] = examples / self.num_workers / step_time
            record["global_examples_per_sec"] = examples / step_time
        if examples:
            self._started(int(examples))
        self.writer.write(record)
        if self._breakdown is not None and self._breakdown.after_step(self._global_step, step_time, asked, examples):
            self._t_step = time.perf_counter()  # the measurement's pause is no step's time

    def on_epoch_end(self, epoch, logs=None):
        if self._coordinated is not None:
            self._coordinated.on_epoch_end(epoch, logs)
            return
        logs = logs if logs is not None else {}
        for key in _INTERNAL_KEYS:  # keep them out of History, TensorBoard and later callbacks
            logs.pop(key, None)
        if getattr(self.model, STOPPING, False):  # an epoch a stop cut short: its numbers are no epoch's
            return
        record = {"type": RecordType.EPOCH, "epoch": epoch, "epoch_time": time.perf_counter() - self._t_epoch,
                  "time": time.time(), **self._fit_field()}
        if self._at is not None and self._at != self._global_step:  # a later fit: its epoch at its last step
            record[GLOBAL_STEP] = self._at
        for key, value in logs.items():
            number = _to_float(value)
            if number is not None or value is None:
                record[key] = number
        self.writer.write(record)

    def _fit_field(self) -> dict:
        return {FIT: self._fit} if self._fit else {}

    def on_train_end(self, logs=None):
        if self._coordinated is not None:
            self._coordinated.close()
        if self._breakdown is not None:
            self._breakdown.finished()
        if self.lifecycle:
            # The writer stays open for the next fit(); it is drained at exit.
            self.writer.event(Event.TRAIN_END, train_time=time.perf_counter() - self._t_train)


class MetricsReporter(_Reporting, tf.keras.callbacks.Callback):
    """Writes step, epoch and lifecycle records to a tfcc metrics file.

    Works in any ``fit`` (tf-keras or Keras 3: ``reporter_for(model)`` gives the callback of the
    model's own Keras) under every strategy: the default, Mirrored, MultiWorkerMirrored and
    ParameterServer (there the coordinator fetches every 10th step's logs off the training thread).

    Args:
        path_or_writer: a metrics file path, or a MetricsWriter to share.
            Default: ``$TFCC_RUN_DIR/metrics.jsonl``, else ``./metrics.jsonl``.
        task_type, task_index, num_workers: default from ``TF_CONFIG``.
        report_steps: write one record per step (True) or only epochs and events.
        lifecycle: also say ``cluster_formed`` and ``started`` (the batch plan, from the first step);
            default: when it writes its own file (a script's reporter), not when given a writer.
    """


_CALLBACKS: dict = {}  # (mixin, flavour) -> the mixin on that Keras's Callback


def callback_class(model, mixin, default):
    """``default`` (``mixin`` on tf.keras's ``Callback``) when ``model`` is of tf.keras's Keras, else ``mixin`` on
    ``model``'s own Keras's ``Callback`` (tf-keras or Keras 3: fit takes only its own Keras's callbacks)."""
    flavour = keras_of(model)
    if (flavour == TF_KERAS) == tf.keras.__name__.startswith("tf_keras"):
        return default
    if (mixin, flavour) not in _CALLBACKS:
        if flavour == KERAS3:
            import keras
            base = keras.callbacks.Callback
        else:
            import tf_keras
            base = tf_keras.callbacks.Callback
        _CALLBACKS[mixin, flavour] = type(default.__name__, (mixin, base), {"__doc__": default.__doc__,
                                                                            "__module__": default.__module__})
    return _CALLBACKS[mixin, flavour]


def reporter_for(model, **kwargs):
    """A ``MetricsReporter`` whose callback base is ``model``'s own Keras (tf-keras or Keras 3)."""
    return callback_class(model, _Reporting, MetricsReporter)(**kwargs)


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

    def __init__(self, writer: MetricsWriter, batch: int | None, num_workers: int, every: int = 10,
                 started=None, place=None, fit=None):
        super().__init__()
        self._supports_tf_logs = True  # else tf-keras refuses batch hooks under ParameterServerStrategy
        self.writer = writer
        self.batch = batch  # None: a script's, read from each fetched step (an instrumented model's)
        self._on_batch = started  # called with the batch of the first fetched step (a script's started event)
        self.num_workers = max(1, num_workers)
        self.every = max(1, every)
        self._epoch = 0
        self._t_epoch = 0.0
        self._place = place  # as MetricsReporter's: a script's later fit goes on after the first
        self._fit = {FIT: fit} if fit else {}
        self._at: int | None = None
        self._own = 0
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
                values = dict(payload.fetch() if hasattr(payload, "fetch") else (payload or {}))
                now = time.perf_counter()
                done = batch + 1 - mark_step
                took = (now - mark_time) / max(1, done)
                mark_step, mark_time = batch + 1, now
                loss, examples, _ = (_to_float(values.pop(key, None)) for key in _INTERNAL_KEYS)
                size = int(examples) if examples else self.batch
                self._own = epoch * steps + batch + 1 if steps else batch + 1
                self._at = self._place(self._own) if self._place is not None else self._own
                record = {"type": RecordType.STEP, "epoch": epoch, "step": batch, GLOBAL_STEP: self._at,
                          "step_time": took, "time": time.time(), "steps": done, **self._fit}
                if size:
                    record["global_batch"] = size
                if examples is not None:  # an instrumented step: its own loss (one worker's batch)
                    record[LOSS] = loss
                if took > 0 and size:  # the workers' steps together; per worker, what one of them takes on average
                    record["global_examples_per_sec"] = size / took
                    record["examples_per_sec"] = size / took / self.num_workers
                for key, value in values.items():
                    record[LOSS_AVG if key == LOSS else key] = _to_float(value)
                if self._on_batch is not None and size:
                    self._on_batch(size)
                    self._on_batch = None
                self.writer.write(record)
            except Exception:  # a step that failed is the coordinator's to report, not the reporter's
                log.exception("fetching a step's logs")
            finally:
                self._queue.task_done()

    def on_epoch_end(self, epoch, logs=None):
        self._queue.join()  # the epoch's step records first (their steps are done: fit waited for them)
        values = dict(logs.fetch() if hasattr(logs, "fetch") else (logs or {}))
        record = {"type": RecordType.EPOCH, "epoch": epoch, "epoch_time": time.perf_counter() - self._t_epoch,
                  "time": time.time(), **self._fit}
        if self._at is not None and self._at != self._own:  # a later fit: its epoch at its last step, placed
            record[GLOBAL_STEP] = self._at
        for key, value in values.items():
            if key not in _INTERNAL_KEYS:
                record[key] = _to_float(value)
        self.writer.write(record)

    def close(self) -> None:
        """Every step record queued so far is written (the end of a script's ``fit``)."""
        self._queue.join()
