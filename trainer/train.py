"""One task of a training run: strategy, data pipeline, fit, chief duties, metrics.

The caller (``trainer.main``) has set ``TF_USE_LEGACY_KERAS=1`` and validated
TF_CONFIG and the options before this module imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

import tensorflow as tf

from agent.protocol import BACKUP_DIR, task_name
from trainer import workloads
from trainer.backup import TaskBackups, backups_in, plan_of
from trainer.config import Options
from trainer.metrics import MetricsWriter
from trainer.plan import check_autoshard, choose_strategy, plan_batches, replicas_per_worker
from trainer.process import collector_paused, sigterm_back
from trainer.records import LOST_PEER, Event, RecordType
from trainer.report import CoordinatorReporter, MetricsReporter, instrument_step_loss
from trainer.stopping import GracefulStop, Stopped
from trainer.strategies import Strategy
from trainer.tf_config import CHIEF, EVALUATOR, PS, TRAINING_ROLES, WORKER, ClusterConfig, ConfigError

log = logging.getLogger("trainer.train")
# Keras warns that on_train_batch_end is "slow" when the step's own work shows up
# in it (reading the step's outputs waits for the step): noise for our users.
tf.get_logger().setLevel("ERROR")

_AUTOSHARD = {
    "auto": tf.data.experimental.AutoShardPolicy.AUTO,
    "data": tf.data.experimental.AutoShardPolicy.DATA,
    "off": tf.data.experimental.AutoShardPolicy.OFF,
    "file": tf.data.experimental.AutoShardPolicy.FILE,
}
_COMMUNICATION = {
    "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
    "ring": tf.distribute.experimental.CommunicationImplementation.RING,
    "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
}
MODEL_NAME = "model.keras"
ELASTIC_PLAN = "elastic-plan.json"  # an elastic run's global batch and learning rate, from its first attempt


def configure_runtime(opts: Options) -> None:
    """Threads and logical devices: must happen before any TensorFlow op."""
    if opts.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(opts.intra_op_threads)
    if opts.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(opts.inter_op_threads)
    if opts.cpu_devices > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(opts.cpu_devices)]
        )


def check_port_free(cluster: ClusterConfig) -> None:
    """TensorFlow binds 0.0.0.0:<port> for this task; say clearly if it cannot."""
    port = cluster.port
    if port is None:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as exc:
            raise ConfigError(
                f"port {port} of task {cluster.task} ({cluster.address}) is already in use on this host "
                f"({exc.strerror}); stop the process that holds it or give this task another port"
            ) from None


def create_strategy(name: str, opts: Options):
    if name == Strategy.MULTI_WORKER_MIRRORED:
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=_COMMUNICATION[opts.communication]
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if name == Strategy.MIRRORED:
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=devices)
    return tf.distribute.get_strategy()


def make_datasets(workload, plan, opts: Options, skip: int = 0):
    """The training stream of global batches and the validation data. ``skip``: the global batches a resumed
    backup had trained on; the stream goes on after them.

    One seed on every worker: all workers see the same order, and sharding splits each global batch between
    them, so the stream is the same whatever the worker count. Each pass over the data is shuffled with its own
    seed (the run's seed and the pass's number), so a resume starts at its pass at once and skips within that
    pass only, never re-reading the passes before (hours of input for a long run). Where the number of examples
    is not known, or data read from files may be sharded by file (each worker reads its own files: ``auto`` and
    ``file``), one shuffle reshuffles each pass and a resume skips from the stream's start.
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = _AUTOSHARD[opts.autoshard]
    data = workload.train_dataset()
    buffer = min(workload.num_examples or 10_000, 10_000)
    per_pass = (workload.num_examples or 0) // plan.global_batch
    if per_pass and (workload.in_memory or opts.autoshard in ("data", "off")):  # no sharding by file to lose
        first, skip = divmod(skip, per_pass)
        seed = tf.constant(opts.seed, tf.int64)

        def one_pass(number):
            return data.shuffle(buffer, seed=seed * 1_000_003 + number).batch(plan.global_batch, drop_remainder=True)

        train = tf.data.Dataset.range(first, 1 << 62).flat_map(one_pass)
    else:
        train = data.shuffle(buffer, seed=opts.seed, reshuffle_each_iteration=True)
        train = train.batch(plan.global_batch, drop_remainder=True).repeat()
    if skip:
        train = train.skip(skip)
    train = train.prefetch(tf.data.AUTOTUNE).with_options(options)
    val = None
    if workload.val_dataset is not None:
        val = workload.val_dataset().batch(plan.global_batch).with_options(options)
    return train, val


def _temp_dir(run_dir, cluster: ClusterConfig, name: str):
    """Where a non-chief writes what only the chief keeps; removed after use."""
    return run_dir / f".tmp-{name}-{cluster.task.type}-{cluster.task.index}"


def _plan(opts: Options, cluster: ClusterConfig, workload, strategy_name: str, gpus: int, replicas=None):
    check_autoshard(opts.autoshard, workload.in_memory, workload.name, cluster.num_workers)
    per_worker = replicas_per_worker(strategy_name, gpus, opts.cpu_devices)
    if replicas is not None and per_worker * cluster.num_workers != replicas:
        per_worker = max(1, replicas // cluster.num_workers)
    return plan_batches(
        per_replica_batch=opts.per_replica_batch,
        global_batch=opts.global_batch,
        num_workers=cluster.num_workers,
        replicas_per_worker=per_worker,
        num_examples=workload.num_examples,
        steps_per_epoch=opts.steps_per_epoch,
        base_learning_rate=opts.learning_rate,
        lr_rule=opts.lr_scaling,
    )


def asynchronous_plan(opts: Options, cluster: ClusterConfig, workload, replicas: int = 1):
    """The batch plan of parameter-server training: a step is one worker's batch, split over its replicas."""
    return plan_batches(per_replica_batch=opts.per_replica_batch, global_batch=opts.global_batch,
                        num_workers=len(cluster.cluster[WORKER]), replicas_per_worker=replicas,
                        num_examples=workload.num_examples, steps_per_epoch=opts.steps_per_epoch,
                        base_learning_rate=opts.learning_rate, lr_rule=opts.lr_scaling, asynchronous=True)


def compiled_model(workload, plan):
    """The workload's model, compiled with Adam at the plan's learning rate unless the model file compiled
    it (then only its learning rate is the plan's). Call it in the strategy's scope."""
    model = workload.build_model()
    if model.optimizer is None or not getattr(model, "compiled_loss", None):
        model.compile(optimizer=tf.keras.optimizers.Adam(plan.learning_rate), loss=workload.loss,
                      metrics=workload.metrics)
    else:
        model.optimizer.learning_rate = plan.learning_rate
    return model


def learning_rate_of(model, planned: float) -> float:
    """The learning rate ``model``'s optimizer trains at now (``planned`` where it has a schedule)."""
    rate = getattr(model.optimizer, "learning_rate", None)
    try:
        return float(tf.keras.backend.get_value(rate))
    except (TypeError, ValueError):
        return planned


def kept_plan(opts: Options) -> tuple[Options, dict | None]:
    """An elastic run (``--elastic``) keeps its first attempt's global batch and learning rate whatever its
    number of workers: the options that say so, and the plan kept (None before the run had one). The plan is
    that of the task's newest backup (a backup copied in by the console has its plan), else the one its first
    attempt wrote in the run folder (a shrink before the first backup). A task that shrank or grew so goes on
    with the same stream of global batches (its backup's position holds) and the same rate."""
    if not opts.elastic:
        return opts, None
    folder = opts.run_dir / BACKUP_DIR
    steps = backups_in(folder)
    kept = plan_of(folder, steps[-1]) if steps else {}
    if not {"global_batch", "learning_rate"} <= set(kept):
        try:
            kept = json.loads((opts.run_dir / ELASTIC_PLAN).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return opts, None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"the elastic plan {opts.run_dir / ELASTIC_PLAN} cannot be read ({exc}); delete it "
                              "to plan the batch from this attempt's workers") from None
    try:
        batch, rate = int(kept["global_batch"]), float(kept["learning_rate"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"the elastic plan in {opts.run_dir} names no global batch and learning rate; delete "
                          f"{ELASTIC_PLAN} to plan the batch from this attempt's workers") from None
    return dataclasses.replace(opts, global_batch=batch, learning_rate=rate, lr_scaling="none"), kept


def keep_plan(opts: Options, plan) -> None:
    """The first attempt of an elastic run writes its global batch and learning rate (see ``kept_plan``)."""
    partial = opts.run_dir / f".{ELASTIC_PLAN}.partial"
    partial.write_text(json.dumps({"global_batch": plan.global_batch, "learning_rate": plan.learning_rate,
                                   "num_workers": plan.num_workers}), encoding="utf-8")
    os.replace(partial, opts.run_dir / ELASTIC_PLAN)


def elastic_plan(opts: Options, kept: dict | None, make):
    """``make()``'s plan; an elastic run's kept global batch that does not split over the replicas left is
    said as the run's, not as an option the person gave."""
    try:
        return make()
    except ConfigError as exc:
        if kept is None:
            raise
        why = str(exc).split("; ")[0].replace("--global-batch", "the global batch")
        raise ConfigError(f"this elastic run keeps the global batch of its first attempt ({kept['global_batch']} "
                          f"on {kept.get('num_workers', '?')} workers), which cannot be kept here ({why}); resume it "
                          "on a number of workers it splits over, or start a new run with a global batch that splits "
                          "over every size it may take (training.global_batch)") from None


def run(opts: Options, cluster: ClusterConfig, writer: MetricsWriter) -> dict:
    """Train this task to the end; returns the final metrics."""
    strategy_name = choose_strategy(opts.strategy, cluster, opts.cpu_devices)
    if strategy_name == Strategy.PARAMETER_SERVER and cluster.task.type in (WORKER, PS):
        return serve(opts, cluster, writer)  # a server needs no Keras
    with collector_paused():  # tf-keras loads at TensorFlow's first use of it: an import like TensorFlow's own
        tf.keras.Model  # noqa: B018
    if strategy_name == EVALUATOR:
        return evaluate(opts, cluster, writer)
    if strategy_name == Strategy.PARAMETER_SERVER:
        return coordinate(opts, cluster, writer)
    configure_runtime(opts)
    gpus = len(tf.config.list_physical_devices("GPU"))
    strategy_name = choose_strategy(opts.strategy, cluster, gpus or opts.cpu_devices)
    workload = None
    opts, kept = kept_plan(opts)
    if opts.workload != "file":
        # Built-in data needs no TensorFlow op: check the batch plan before
        # MultiWorkerMirroredStrategy() waits for the other tasks.
        workload = workloads.load(opts)
        elastic_plan(opts, kept, lambda: _plan(opts, cluster, workload, strategy_name, gpus))
    if cluster.is_distributed:
        check_port_free(cluster)
    strategy = create_strategy(strategy_name, opts)  # MWMS: waits here until every task has joined
    sigterm_back()  # until the stop below is in place, a stop ends the task at once, not after its grace
    writer.event(Event.CLUSTER_FORMED, strategy=strategy_name, num_replicas=strategy.num_replicas_in_sync)
    if workload is None:
        workload = workloads.load(opts)  # user code may run TensorFlow ops: only now
    plan = elastic_plan(opts, kept, lambda: _plan(opts, cluster, workload, strategy_name, gpus,
                                                  strategy.num_replicas_in_sync))
    if opts.elastic and kept is None:
        keep_plan(opts, plan)

    tf.keras.utils.set_random_seed(opts.seed)
    run_dir = opts.run_dir
    backups = TaskBackups(run_dir / BACKUP_DIR, opts.backup_seconds, writer, multi_worker=cluster.num_workers > 1,
                          plan={**plan.as_dict(), "seed": opts.seed}, replicas_per_task=plan.replicas_per_worker)
    me = task_name(cluster.task.type, cluster.task.index)
    training = [task_name(role, i) for role in TRAINING_ROLES for i in range(len(cluster.cluster.get(role, [])))]
    stop = GracefulStop(backups, me, tuple(name for name in training if name != me))
    stop.install()  # from here a stop finishes the step, backs up and ends the task (trainer/stopping.py)
    with strategy.scope():
        model = compiled_model(workload, plan)
        exact_step_loss = instrument_step_loss(model)
        skip = backups.restore(model)  # before the input pipeline: it goes on where the backup was
    train_ds, val_ds = make_datasets(workload, plan, opts, skip=skip)

    tb_dir = run_dir / "tensorboard" if cluster.is_chief else _temp_dir(run_dir, cluster, "tensorboard")
    reporter = MetricsReporter(writer, task_type=cluster.task.type, task_index=cluster.task.index,
                               num_workers=cluster.num_workers, report_steps=opts.report)
    # A step-time breakdown, when asked, pulls from a fresh iterator of the same stream (trainer/breakdown.py), from
    # its start: a resumed run's skip would make its first batch wait for every batch skipped.
    reporter.measure_data = make_datasets(workload, plan, opts)[0] if skip else train_ds
    callbacks = [
        reporter,  # first: it takes its own keys out of the logs before other callbacks see them
        backups,
        stop,      # after the backups: their global step is the run's
        tf.keras.callbacks.TensorBoard(str(tb_dir), update_freq="epoch", profile_batch=0, write_graph=False),
    ]
    if workload.extra_callbacks is not None:
        callbacks += list(workload.extra_callbacks(run_dir, cluster.task) or [])
    stop.others = callbacks[3:]  # TensorBoard's point of a cut epoch, say

    writer.event(Event.STARTED,
        strategy=strategy_name,
        communication=opts.communication if strategy_name == Strategy.MULTI_WORKER_MIRRORED else None,
        autoshard=opts.autoshard,
        workload=workload.name,
        epochs=opts.epochs,
        is_chief=cluster.is_chief,
        chief=str(cluster.chief),
        exact_step_loss=exact_step_loss,
        tensorflow=tf.__version__,
        # the optimizer's learning rate, which a resume set: the one it trains at
        **{**plan.as_dict(), "learning_rate": learning_rate_of(model, plan.learning_rate)},
    )
    keep_until_exit(model)
    t0 = time.perf_counter()
    history = model.fit(
        train_ds,
        epochs=opts.epochs,
        steps_per_epoch=plan.steps_per_epoch,
        validation_data=val_ds,
        callbacks=callbacks,
        verbose=2 if opts.verbose else 0,
    )
    train_time = time.perf_counter() - t0
    if stop.stopped_at is not None or stop.asked.is_set():  # backed up there by every task (TaskBackups.on_train_end)
        raise Stopped(stop.stopped_at)
    # A finished run keeps its last backups until the run is cleaned (tfcc clean).
    if not cluster.is_chief:
        shutil.rmtree(tb_dir, ignore_errors=True)

    final = {k: float(v[-1]) for k, v in history.history.items() if v}
    if not final and val_ds is not None:  # resumed from the backup of its last step: nothing left to train
        final = {f"val_{k}": float(v) for k, v in model.evaluate(val_ds, verbose=0, return_dict=True).items()}
    model_path = None
    if opts.save:
        # Every worker must take part in saving (variables are read collectively);
        # only the chief keeps the result.
        if cluster.is_chief:
            model_path = run_dir / MODEL_NAME
            save_model(model, model_path, writer)
        else:
            tmp = _temp_dir(run_dir, cluster, "model")
            tmp.mkdir(parents=True, exist_ok=True)
            save_model(model, tmp / MODEL_NAME, writer, kept=False)
            shutil.rmtree(tmp, ignore_errors=True)
    writer.event(Event.FINISHED,
        metrics=final,
        train_time=train_time,
        model=str(model_path) if model_path else None,
    )
    return final


_KEPT_UNTIL_EXIT: list = []


def keep_until_exit(model) -> None:
    """Keep ``model``, and the input iterator its ``fit`` trains from, until the process ends (``trainer/__main__.py``
    ends it with ``os._exit``: nothing is torn down). In TensorFlow 2.21 destroying a tf.data iterator can wait for
    its autotune thread (``Model::OptimizeLoop``), which may miss the cancellation's wake-up and sleep out its
    optimisation period, up to a minute: measured 4 to 96 s between the last epoch and the model's save, while the
    other workers waited in the save's collective. Called before ``fit``."""
    outputs = getattr(model, "_tfcc_outputs", None)
    if outputs is not None:  # an instrumented model (report.instrument_step_loss): its train function keeps it
        outputs.keep_input = True
    _KEPT_UNTIL_EXIT.append(model)


def save_model(model, path: Path, writer: MetricsWriter, kept: bool = True) -> None:
    """Save the trained model, said before and after (``saving``, ``saved`` with the seconds it
    took): after the last epoch the console shows what the task does instead of a full bar."""
    writer.event(Event.SAVING, path=str(path) if kept else None)
    t0 = time.perf_counter()
    model.save(path)
    writer.event(Event.SAVED, path=str(path) if kept else None, seconds=round(time.perf_counter() - t0, 3))


# --------------------------------------------------------------------------- ParameterServerStrategy


def server_threads(cluster: ClusterConfig) -> int:
    """Inter-op threads of a worker or ps server: fewer than workers + 1 hung a run on 2 cores."""
    return len(cluster.cluster.get(WORKER, [])) + 1


ALIVE_SECONDS = 5.0  # a server's liveness record comes this often


class Liveness:
    """``alive`` records of a server process: only the coordinator trains in Python, but every task
    shows that it lives and what it costs (CPU since the last record, resident memory)."""

    def __init__(self, writer: MetricsWriter, role: str):
        self.writer, self.role = writer, role
        self._cpu, self._wall = self._cpu_seconds(), time.monotonic()

    @staticmethod
    def _cpu_seconds() -> float:
        t = os.times()
        return t.user + t.system

    @staticmethod
    def _rss_bytes() -> int | None:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return None

    def until(self, done: threading.Event) -> None:
        """A record now, then every ``ALIVE_SECONDS`` until ``done`` is set."""
        self.report()
        while not done.wait(ALIVE_SECONDS):
            self.report()

    def report(self) -> None:
        cpu, wall = self._cpu_seconds(), time.monotonic()
        percent = 100.0 * (cpu - self._cpu) / max(wall - self._wall, 1e-9)
        self._cpu, self._wall = cpu, wall
        self.writer.write({"type": RecordType.ALIVE, "role": self.role, "cpu_percent": round(percent, 1),
                           "rss_bytes": self._rss_bytes(), "time": time.time()})


def serve(opts: Options, cluster: ClusterConfig, writer: MetricsWriter) -> dict:
    """A worker or ps of parameter-server training: a TensorFlow server the coordinator drives, until
    SIGTERM (the run is over, or stopped: the server cannot tell) ends it cleanly."""
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = max(server_threads(cluster), opts.inter_op_threads)
    if opts.intra_op_threads:
        config.intra_op_parallelism_threads = opts.intra_op_threads
    check_port_free(cluster)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    tf.distribute.Server(tf.train.ClusterSpec(cluster.cluster), job_name=cluster.task.type,
                         task_index=cluster.task.index, protocol="grpc", config=config, start=True)
    writer.event(Event.SERVING, role=cluster.task.type, strategy=Strategy.PARAMETER_SERVER,
                 inter_op_threads=config.inter_op_parallelism_threads)
    Liveness(writer, cluster.task.type).until(done)
    writer.event(Event.FINISHED, metrics={}, train_time=None, model=None, role=cluster.task.type)
    return {}


def coordinate(opts: Options, cluster: ClusterConfig, writer: MetricsWriter) -> dict:
    """The chief of parameter-server training: the coordinator, the only task that runs ``fit``."""
    configure_runtime(opts)
    workload = workloads.load(opts)
    plan = asynchronous_plan(opts, cluster, workload)
    check_port_free(cluster)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=256 << 10, max_shards=len(cluster.cluster[PS]))
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    sigterm_back()
    if strategy.num_replicas_in_sync > 1:  # each worker's GPUs: one step's batch is split over them
        plan = asynchronous_plan(opts, cluster, workload, strategy.num_replicas_in_sync)
    writer.event(Event.CLUSTER_FORMED, strategy=Strategy.PARAMETER_SERVER, num_replicas=strategy.num_replicas_in_sync)
    tf.keras.utils.set_random_seed(opts.seed)
    with strategy.scope():
        model = compiled_model(workload, plan)
    placed = placement(model)
    # Each worker builds its own copy of the input pipeline (nothing to shard), so each must shuffle
    # in its own order: a seed fixed here would give every worker the same batches. The seed is drawn
    # where the pipeline is built, on the worker.
    buffer = min(workload.num_examples or 10_000, 10_000)

    def per_worker_dataset(context):
        seed = tf.cast(tf.math.floormod(tf.timestamp() * 1e6, 2.0 ** 31), tf.int64)
        return workload.train_dataset().shuffle(buffer, seed=seed).batch(
            plan.global_batch, drop_remainder=True).repeat()

    train = tf.keras.utils.experimental.DatasetCreator(per_worker_dataset)
    val = validation_steps = None
    if workload.val_dataset is not None:
        count = sum(1 for _ in workload.val_dataset())
        validation_steps = max(1, math.ceil(count / plan.global_batch))
        val = workload.val_dataset().batch(plan.global_batch).repeat()
    run_dir = opts.run_dir
    callbacks = [
        CoordinatorReporter(writer, plan.global_batch, plan.num_workers) if opts.report
        else tf.keras.callbacks.Callback(),
        # Under ParameterServerStrategy tf-keras backs up per epoch only (the coordinator holds the state).
        tf.keras.callbacks.BackupAndRestore(str(run_dir / BACKUP_DIR), save_freq="epoch", delete_checkpoint=False),
        BackedUp(writer),
    ]
    if opts.eval_checkpoints is not None:  # the evaluator's: the model's weights each epoch, as it reads them
        opts.eval_checkpoints.mkdir(parents=True, exist_ok=True)
        (opts.eval_checkpoints / EVALUATION_DONE).unlink(missing_ok=True)
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(str(opts.eval_checkpoints / "ckpt-{epoch}"),
                                                            save_weights_only=True))
    writer.event(Event.STARTED, strategy=Strategy.PARAMETER_SERVER, communication=None, autoshard=None,
                 workload=workload.name, epochs=opts.epochs, is_chief=True, chief=str(cluster.chief),
                 exact_step_loss=False, tensorflow=tf.__version__, num_ps=len(cluster.cluster[PS]),
                 variables=placed, **plan.as_dict())
    t0 = time.perf_counter()
    trained = threading.Event()  # the coordinator's liveness too: every task of the run shows what it costs
    threading.Thread(target=Liveness(writer, CHIEF).until, args=(trained,), name="tfcc-alive", daemon=True).start()
    try:
        history = model.fit(train, epochs=opts.epochs, steps_per_epoch=plan.steps_per_epoch, validation_data=val,
                            validation_steps=validation_steps, callbacks=callbacks, verbose=0)
    finally:
        trained.set()
    if opts.eval_checkpoints is not None:
        (opts.eval_checkpoints / EVALUATION_DONE).touch()  # no more checkpoints: the evaluator ends after the last
    train_time = time.perf_counter() - t0
    final = {k: float(v[-1]) for k, v in history.history.items() if v}
    model_path = None
    if opts.save:
        model_path = run_dir / MODEL_NAME
        save_model(model, model_path, writer)
    writer.event(Event.FINISHED, metrics=final, train_time=train_time, model=str(model_path) if model_path else None)
    return final


EVALUATION_DONE = "training-done"  # in the checkpoint folder once the chief has written its last checkpoint


def _checkpoint_number(path: str) -> int:
    """``ckpt-4`` -> 4 (the chief's checkpoints are numbered by epoch, from 1)."""
    return int(path.rsplit("-", 1)[1])


class _Sidecar(tf.keras.utils.SidecarEvaluator):
    """tf-keras's sidecar evaluator, which also ends once the chief says it wrote its last checkpoint
    (it would wait for ever for a checkpoint of an epoch that never comes)."""

    evaluated = 0  # the number of the newest checkpoint evaluated (EvaluationReporter says it)

    def _timeout_fn(self):
        """End when the chief is done, unless a checkpoint came after the last one evaluated: it may
        have been written just after the iterator's wait gave up (then the chief's marker too)."""
        if not (Path(self.checkpoint_dir) / EVALUATION_DONE).exists():
            return False
        latest = tf.train.latest_checkpoint(self.checkpoint_dir)
        return latest is None or _checkpoint_number(latest) <= self.evaluated



class EvaluationReporter(tf.keras.callbacks.Callback):
    """One ``evaluated`` event per checkpoint the evaluator read: its epoch and the validation metrics."""

    def __init__(self, writer: MetricsWriter, folder: Path, steps_per_epoch: int):
        super().__init__()
        self.writer, self.folder, self.steps_per_epoch = writer, folder, steps_per_epoch
        self.sidecar: _Sidecar | None = None  # told which checkpoint was evaluated last

    def on_test_begin(self, logs=None):
        latest = tf.train.latest_checkpoint(str(self.folder))
        self._epoch = _checkpoint_number(latest) if latest else None
        if self._epoch is not None and self.sidecar is not None:
            self.sidecar.evaluated = max(self.sidecar.evaluated, self._epoch)

    def on_test_end(self, logs=None):
        metrics = {f"val_{k}": float(v) for k, v in (logs or {}).items()}
        self.writer.event(Event.EVALUATED, epoch=None if self._epoch is None else self._epoch - 1,
                          global_step=None if self._epoch is None else self._epoch * self.steps_per_epoch,
                          metrics=metrics)


def evaluate(opts: Options, cluster: ClusterConfig, writer: MetricsWriter) -> dict:
    """The evaluator of parameter-server training: a sidecar that evaluates each checkpoint the chief
    writes (``--eval-checkpoints``) on the validation data, until the last epoch's."""
    if opts.eval_checkpoints is None:
        raise ConfigError("an evaluator needs --eval-checkpoints, the folder where the chief writes its checkpoints")
    configure_runtime(opts)
    workload = workloads.load(opts)
    if workload.val_dataset is None:
        raise ConfigError("the evaluator has no validation data: define val_dataset() in the model file, or leave "
                          "the evaluator out")
    plan = asynchronous_plan(opts, cluster, workload)
    model = compiled_model(workload, plan)
    count = sum(1 for _ in workload.val_dataset())
    data = workload.val_dataset().batch(plan.global_batch)
    writer.event(Event.EVALUATING, checkpoints=str(opts.eval_checkpoints), epochs=opts.epochs,
                 validation_examples=count)
    reporter = EvaluationReporter(writer, opts.eval_checkpoints, plan.steps_per_epoch)
    sidecar = _Sidecar(model, data, str(opts.eval_checkpoints), steps=max(1, math.ceil(count / plan.global_batch)),
                       max_evaluations=opts.epochs, callbacks=[reporter])
    reporter.sidecar = sidecar
    sidecar.start()
    writer.event(Event.FINISHED, metrics={}, train_time=None, model=None, role=EVALUATOR)
    return {}


def placement(model) -> list[dict]:
    """Where the model's variables live: one entry per variable (or shard of a partitioned one) with
    its ps task index, name, shape and bytes."""
    out = []
    for var in model.variables:
        for shard in getattr(var, "variables", None) or [var]:
            device = tf.DeviceSpec.from_string(shard.device or "")
            out.append({"name": shard.name.split(":")[0], "shape": [int(d) for d in shard.shape],
                        "bytes": int(shard.shape.num_elements() or 0) * shard.dtype.size,
                        PS: device.task if device.job == PS else None})
    return out


class BackedUp(tf.keras.callbacks.Callback):
    """After tf-keras's epoch backup: a ``backed_up`` event (as trainer.backup writes); and, when
    ``fit`` begins after epoch 0 (tf-keras restored a backup), the ``resumed`` event."""

    def __init__(self, writer: MetricsWriter):
        super().__init__()
        self.writer = writer
        self._first = True

    def on_epoch_begin(self, epoch, logs=None):
        if self._first and epoch > 0:
            steps = self.params.get("steps", 0)
            self.writer.event(Event.RESUMED, epoch=epoch - 1, step=steps - 1, global_step=epoch * steps)
        self._first = False

    def on_epoch_end(self, epoch, logs=None):
        self.writer.event(Event.BACKED_UP, epoch=epoch, step=self.params.get("steps", 1) - 1,
                          global_step=(epoch + 1) * self.params.get("steps", 0))


def describe_error(exc: BaseException) -> str:
    """One line a person can act on, for errors raised inside TensorFlow."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if "Could not start gRPC server" in text:
        return (
            "TensorFlow could not start this task's gRPC server: its port is taken or cannot be bound "
            "on this host; free the port or give this task another one"
        )
    if "unshardable source dataset" in text:
        return "--autoshard file needs a dataset read from files (e.g. TFRecords); use --autoshard auto or data"
    if isinstance(exc, tf.errors.UnavailableError):
        return f"{LOST_PEER} ({first}); restart every task of the run"
    return f"{type(exc).__name__}: {first}"

