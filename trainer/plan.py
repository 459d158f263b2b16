"""The training plan's rules, in one place: strategy, replicas per worker, batches, autoshard (no TensorFlow).

The trainer applies them to its task; the console's check and the cluster
diagram apply the same functions to a cluster file before anything runs, so
the three never disagree about, say, how a global batch splits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.strategies import Strategy
from trainer.tf_config import CHIEF, EVALUATOR, PS, TRAINING_ROLES, WORKER, ClusterConfig, ConfigError

# The Keras a script trains with: tf-keras (Keras 2, TF_USE_LEGACY_KERAS=1) or Keras 3; tfcc's trainer
# always uses tf-keras. A script's cluster file says auto, or one of them (console.cluster).
TF_KERAS, KERAS3 = "tf-keras", "keras3"
KERAS_FLAVOURS = ("auto", TF_KERAS, KERAS3)
STRATEGIES = Strategy.ALL  # a cluster file's training.strategy's choices (console/cluster.py takes them from here)
AUTOSHARD_POLICIES = ("auto", "data", "off", "file")
LR_RULES = ("linear", "sqrt", "none")

# Bounds of the training numbers, for the trainer's options and the cluster file alike:
# beyond them a value is a typo, not a plan (a batch of a billion).
MAX_BATCH = 1 << 20           # examples per replica, and in a global batch
MAX_LEARNING_RATE = 10.0


def learning_rate_problem(value: float) -> str | None:
    """Why ``value`` cannot be a learning rate, or None. NaN and infinities diverge at the first step."""
    if not math.isfinite(value) or not 0 < value <= MAX_LEARNING_RATE:
        return f"it must be a number above 0 and at most {MAX_LEARNING_RATE:g}"
    return None


DEFAULT_BACKUP_SECONDS = 30.0  # about this much training is redone after a restart, at most
MAX_BACKUP_SECONDS = 86_400.0


def backup_seconds_problem(value: float) -> str | None:
    """Why ``value`` cannot be the time between backups, or None."""
    if not math.isfinite(value) or not 0 < value <= MAX_BACKUP_SECONDS:
        return f"it must be a number of seconds above 0 and at most {MAX_BACKUP_SECONDS:g}"
    return None


def count_problem(value: int, low: int, high: int) -> str | None:
    """Why ``value`` is out of ``low..high``, or None."""
    if not low <= value <= high:
        return f"it must be from {low} to {high}"
    return None


# --------------------------------------------------------------------------- strategy and replicas


def observed_batch_plan(strategy: str, replicas: int, cluster: dict, global_batch: int | None) -> dict:
    """The batch plan a script's run shows (the fields of the trainer's ``started`` event), from its
    strategy, its replicas in sync and the batch one step took: under MultiWorkerMirrored the workers
    are TF_CONFIG's chief and workers; Mirrored and the default strategy train each task on its own;
    under parameter-server training a step is one worker's batch, split over that worker's replicas."""
    if strategy == Strategy.PARAMETER_SERVER:
        workers, per_worker = max(1, len(cluster.get(WORKER, []))), replicas
    elif strategy == Strategy.MULTI_WORKER_MIRRORED:
        workers = max(1, sum(len(cluster.get(role, [])) for role in TRAINING_ROLES))
        per_worker = max(1, replicas // workers)
    else:
        workers, per_worker = 1, replicas
    plan = {"strategy": strategy, "num_workers": workers, "replicas_per_worker": per_worker, "num_replicas": replicas}
    if global_batch:
        per_replica = global_batch // replicas
        plan.update(global_batch=int(global_batch), per_replica_batch=per_replica,
                    per_worker_batch=per_replica * per_worker)
        if strategy == Strategy.PARAMETER_SERVER:
            plan["asynchronous"] = True
    return plan


def strategy_for(requested: str, num_workers: int, local_devices: int) -> str:
    """The strategy a task runs: "auto" picks by the chief/worker tasks and the task's devices."""
    if requested != Strategy.AUTO:
        return requested
    if num_workers > 1:
        return Strategy.MULTI_WORKER_MIRRORED
    return Strategy.MIRRORED if local_devices > 1 else Strategy.DEFAULT


def parameter_server_problem(cluster: dict[str, list[str]]) -> str | None:
    """Why ``cluster`` (TF_CONFIG's roles -> addresses) cannot train with ParameterServerStrategy, or None."""
    chiefs, workers, ps = (len(cluster.get(role, [])) for role in (CHIEF, WORKER, PS))
    if chiefs != 1:
        return (f"parameter-server training needs exactly one chief task (the coordinator); the cluster has "
                f"{chiefs}: make one task role \"chief\"")
    if workers < 1:
        return "parameter-server training needs at least one worker task; add one"
    if ps < 1:
        return "parameter-server training needs at least one ps task (it holds the variables); add one"
    return None


def choose_strategy(requested: str, cluster: ClusterConfig, local_devices: int) -> str:
    """The strategy this task runs, from the request, the cluster and the local devices; or why it cannot."""
    if EVALUATOR in cluster.cluster:
        raise ConfigError("TF_CONFIG lists an evaluator in its cluster, which the coordinator would wait for; "
                          "leave it out of \"cluster\" (the evaluator's own TF_CONFIG names it in \"task\")")
    if cluster.task.type == EVALUATOR:
        problem = parameter_server_problem(cluster.cluster)
        if problem:
            raise ConfigError(f"an evaluator evaluates the checkpoints of parameter-server training, and {problem}")
        return EVALUATOR  # no strategy: it evaluates the chief's checkpoints
    if requested == Strategy.PARAMETER_SERVER or (requested == Strategy.AUTO and PS in cluster.cluster):
        problem = parameter_server_problem(cluster.cluster)
        if problem:
            raise ConfigError(problem)
        return Strategy.PARAMETER_SERVER
    if PS in cluster.cluster:
        raise ConfigError(f"--strategy {requested} has no use for the cluster's ps tasks; use --strategy "
                          "parameter_server (or auto), or remove the ps tasks")
    if requested in (Strategy.MIRRORED, Strategy.DEFAULT) and cluster.num_workers > 1:
        raise ConfigError(
            f"--strategy {requested} trains on one host, but TF_CONFIG has {cluster.num_workers} "
            "chief/worker tasks; use --strategy multi_worker_mirrored (or auto)"
        )
    return strategy_for(requested, cluster.num_workers, local_devices)


def replicas_per_worker(strategy: str, local_gpus: int, cpu_devices: int) -> int:
    """The model replicas one worker holds under ``strategy``."""
    if strategy == Strategy.MIRRORED:
        return local_gpus or cpu_devices
    if strategy in (Strategy.MULTI_WORKER_MIRRORED, Strategy.PARAMETER_SERVER):
        return max(1, local_gpus)  # every local GPU, or one CPU
    return 1


def check_autoshard(policy: str, in_memory: bool, workload: str, num_workers: int) -> None:
    """Refuse an autoshard policy that cannot shard this dataset, or would not."""
    if policy == "file" and in_memory:
        raise ConfigError(
            f"--autoshard file needs a dataset read from files (e.g. TFRecords); {workload} is held in "
            "memory: use --autoshard auto or data"
        )
    if policy == "off" and in_memory and num_workers > 1:
        raise ConfigError(
            f"--autoshard off would give every worker the same {workload} examples in the same order "
            "(they shuffle with one seed); use --autoshard auto or data"
        )


# --------------------------------------------------------------------------- batches


@dataclass(frozen=True)
class GlobalSplit:
    """A global batch over ``replicas``: each replica's share, and the nearest batches that split evenly."""

    global_batch: int
    replicas: int

    @property
    def per_replica(self) -> int:
        return self.global_batch // self.replicas

    @property
    def even(self) -> bool:
        return self.global_batch % self.replicas == 0

    @property
    def nearest_even(self) -> tuple[int, ...]:
        """The multiples of ``replicas`` either side of the global batch (from ``replicas`` up)."""
        lower = self.per_replica * self.replicas
        return tuple(n for n in (lower, lower + self.replicas) if n >= self.replicas)


def split_global_batch(global_batch: int, replicas: int, where: str = "--global-batch") -> int:
    """The per-replica batch of a global batch, or why it does not split evenly."""
    problem = count_problem(global_batch, 1, MAX_BATCH)
    if problem:
        raise ConfigError(f"{where} is {global_batch}; {problem}")
    split = GlobalSplit(global_batch, replicas)
    if not split.even:
        raise ConfigError(
            f"{where} {global_batch} does not split evenly over {replicas} replicas; use a multiple of "
            f"{replicas} (e.g. {' or '.join(map(str, split.nearest_even))}) or give the per-replica batch instead"
        )
    return split.per_replica


@dataclass(frozen=True)
class BatchPlan:
    """How the global batch splits, and the learning rate that follows from it.

    ``asynchronous`` (ParameterServerStrategy): one step is one batch on one worker (split over that
    worker's replicas); the workers take steps independently, so a step's batch, and the learning
    rate's scaling, do not grow with the number of workers.
    """

    num_workers: int
    replicas_per_worker: int
    per_replica_batch: int
    steps_per_epoch: int
    base_learning_rate: float
    lr_rule: str
    asynchronous: bool = False

    @property
    def num_replicas(self) -> int:
        """The replicas one step's batch is split over."""
        return self.replicas_per_worker if self.asynchronous else self.num_workers * self.replicas_per_worker

    @property
    def per_worker_batch(self) -> int:
        return self.per_replica_batch * self.replicas_per_worker

    @property
    def global_batch(self) -> int:
        return self.per_replica_batch * self.num_replicas

    @property
    def learning_rate(self) -> float:
        if self.lr_rule == "linear":
            return self.base_learning_rate * self.num_replicas
        if self.lr_rule == "sqrt":
            return self.base_learning_rate * math.sqrt(self.num_replicas)
        return self.base_learning_rate

    def as_dict(self) -> dict:
        return {
            "num_workers": self.num_workers,
            "replicas_per_worker": self.replicas_per_worker,
            "num_replicas": self.num_replicas,
            "per_replica_batch": self.per_replica_batch,
            "per_worker_batch": self.per_worker_batch,
            "global_batch": self.global_batch,
            "steps_per_epoch": self.steps_per_epoch,
            "learning_rate": self.learning_rate,
            "base_learning_rate": self.base_learning_rate,
            "lr_rule": self.lr_rule,
            "asynchronous": self.asynchronous,
        }


def plan_batches(
    *,
    per_replica_batch: int,
    global_batch: int | None = None,
    num_workers: int,
    replicas_per_worker: int,
    num_examples: int | None,
    steps_per_epoch: int | None,
    base_learning_rate: float,
    lr_rule: str,
    asynchronous: bool = False,
) -> BatchPlan:
    """Work out the global batch and steps per epoch, or say why it cannot work.

    A ``global_batch``, when given, is split over the replicas (it must divide evenly)
    and replaces ``per_replica_batch``. ``asynchronous``: a step is one worker's batch (see BatchPlan).
    """
    replicas = replicas_per_worker if asynchronous else num_workers * replicas_per_worker
    if global_batch is not None:
        per_replica_batch = split_global_batch(global_batch, replicas)
    problem = count_problem(per_replica_batch, 1, MAX_BATCH)
    if problem:
        raise ConfigError(f"--per-replica-batch is {per_replica_batch}; {problem}")
    if lr_rule not in LR_RULES:
        raise ConfigError(f"learning-rate rule {lr_rule!r} is unknown; use one of {', '.join(LR_RULES)}")
    problem = learning_rate_problem(base_learning_rate)
    if problem:
        raise ConfigError(f"--learning-rate is {base_learning_rate}; {problem}")
    global_batch = per_replica_batch * replicas
    if steps_per_epoch is not None:
        if steps_per_epoch < 1:
            raise ConfigError(f"--steps-per-epoch is {steps_per_epoch}; it must be at least 1")
    else:
        if num_examples is None:
            raise ConfigError(
                "the training dataset's size is unknown, so steps per epoch cannot be worked out; "
                "pass --steps-per-epoch"
            )
        steps_per_epoch = num_examples // global_batch
        if steps_per_epoch < 1:
            raise ConfigError(
                f"the global batch ({per_replica_batch} per replica x {replicas} replicas = {global_batch}) "
                f"is larger than the {num_examples} training examples; lower --per-replica-batch to at most "
                f"{max(1, num_examples // replicas)} or use fewer replicas"
            )
    return BatchPlan(
        num_workers=num_workers,
        replicas_per_worker=replicas_per_worker,
        per_replica_batch=per_replica_batch,
        steps_per_epoch=steps_per_epoch,
        base_learning_rate=base_learning_rate,
        lr_rule=lr_rule,
        asynchronous=asynchronous,
    )
