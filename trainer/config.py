"""Trainer options and TF_CONFIG validation (no TensorFlow import).

Everything here runs before TensorFlow is imported, so a bad TF_CONFIG or an
option that cannot work fails in milliseconds with a message that says what to
change, instead of after a multi-second import or inside TensorFlow. The rules
of the plan (strategy, replicas, batches, autoshard) are in ``trainer.plan``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from agent.protocol import METRICS, parse_address
from trainer.plan import (AUTOSHARD_POLICIES, DEFAULT_BACKUP_SECONDS, LR_RULES, MAX_BATCH, STRATEGIES, ConfigError,
                          backup_seconds_problem, count_problem, learning_rate_problem)

EVALUATOR = "evaluator"
ROLES = ("chief", "worker", "ps", EVALUATOR)
COMMUNICATIONS = ("auto", "ring", "nccl")
WORKLOADS = ("digits", "synthetic", "file")
SLURM_PORT_BASE = 8888  # TensorFlow's SlurmClusterResolver's: task k of a node listens on 8888 + k (trainer.slurm)
MAX_EPOCHS = 100_000  # more is a typo, not a plan (the batch and learning-rate bounds are in trainer.plan)


# --------------------------------------------------------------------------- TF_CONFIG


@dataclass(frozen=True)
class TaskId:
    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"


@dataclass(frozen=True)
class ClusterConfig:
    """A validated TF_CONFIG (or the single-process case when there is none)."""

    cluster: dict[str, list[str]] = field(default_factory=dict)
    task: TaskId = TaskId("worker", 0)
    raw: str | None = None

    @property
    def is_distributed(self) -> bool:
        return bool(self.cluster)

    @property
    def num_workers(self) -> int:
        """Tasks that hold model replicas in synchronous training (chief + workers)."""
        if not self.cluster:
            return 1
        return len(self.cluster.get("chief", [])) + len(self.cluster.get("worker", []))

    @property
    def chief(self) -> TaskId:
        if self.cluster.get("chief"):
            return TaskId("chief", 0)
        return TaskId("worker", 0)

    @property
    def is_chief(self) -> bool:
        return self.task == self.chief

    @property
    def worker_rank(self) -> int:
        """This task's position among chief + workers (the chief first)."""
        has_chief = bool(self.cluster.get("chief"))
        if self.task.type == "chief":
            return 0
        return self.task.index + (1 if has_chief else 0)

    @property
    def address(self) -> str | None:
        """This task's host:port; None for one process, and for an evaluator (it serves nothing)."""
        if not self.cluster or self.task.type not in self.cluster:
            return None
        return self.cluster[self.task.type][self.task.index]

    @property
    def port(self) -> int | None:
        addr = self.address
        return None if addr is None else parse_address(addr)[1]


# A host name or an IPv4 literal, or an IPv6 literal in brackets: TensorFlow's parser fails later on anything else.
_TF_HOST = re.compile(r"^(?:[A-Za-z0-9_.-]+|\[[0-9A-Za-z:.%_-]+\])$")


def _check_address(role: str, index: int, addr: object) -> None:
    where = f"TF_CONFIG cluster {role}:{index}"
    if not isinstance(addr, str):
        raise ConfigError(f"{where} is {addr!r}; write each task as a \"host:port\" string")
    host, sep, port = addr.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{where} address {addr!r} has no port; write it as \"host:port\"")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{where} address {addr!r} has port {port!r}; use a number from 1 to 65535")
    if not _TF_HOST.match(host):
        raise ConfigError(f"{where} address {addr!r} has host {host!r}; use a host name or an IP address "
                          "(an IPv6 one in brackets, like [::1]:2222), with no spaces or other characters")


def tf_config_as_given(text: str | None = None) -> ClusterConfig:
    """TF_CONFIG (``$TF_CONFIG`` unless ``text``) read without judging it: a user's script's, which is the
    script's to use or refuse; what cannot be read is one process, no cluster."""
    try:
        data = json.loads(os.environ.get("TF_CONFIG") or "{}" if text is None else text or "{}")
        cluster = data.get("cluster") or {}
        task = data.get("task") or {}
        if not isinstance(cluster, dict) or not all(isinstance(v, list) for v in cluster.values()):
            cluster = {}
        return ClusterConfig(cluster, TaskId(str(task.get("type", "worker")), int(task.get("index", 0) or 0)))
    except (ValueError, TypeError, AttributeError):
        return ClusterConfig()


def parse_tf_config(text: str | None) -> ClusterConfig:
    """Validate a TF_CONFIG string; ``None`` or empty means one process, no cluster."""
    if text is None or not text.strip():
        return ClusterConfig()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"TF_CONFIG is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            'it should look like {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}'
        ) from None
    if not isinstance(data, dict):
        raise ConfigError("TF_CONFIG must be a JSON object with \"cluster\" and \"task\"")
    cluster = data.get("cluster")
    task = data.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ConfigError("TF_CONFIG has no \"cluster\" object; add one that maps roles to \"host:port\" lists")
    if not isinstance(task, dict):
        raise ConfigError("TF_CONFIG has no \"task\" object; add {\"type\": \"worker\", \"index\": N} for this process")

    seen: dict[str, str] = {}
    clean: dict[str, list[str]] = {}
    for role, addrs in cluster.items():
        if role not in ROLES:
            raise ConfigError(
                f"TF_CONFIG cluster has unknown role {role!r}; roles are {', '.join(ROLES)}"
            )
        if isinstance(addrs, str):
            addrs = [addrs]
        if not isinstance(addrs, list) or not addrs:
            raise ConfigError(f"TF_CONFIG cluster role {role!r} must be a non-empty list of \"host:port\"")
        for i, addr in enumerate(addrs):
            _check_address(role, i, addr)
            if addr in seen:
                raise ConfigError(
                    f"TF_CONFIG gives {addr} to both {seen[addr]} and {role}:{i}; every task needs its own host:port"
                )
            seen[addr] = f"{role}:{i}"
        clean[role] = list(addrs)

    if len(clean.get("chief", [])) > 1:
        raise ConfigError(
            f"TF_CONFIG names {len(clean['chief'])} chiefs; a cluster has at most one chief task "
            "(make the others \"worker\" tasks)"
        )
    if not clean.get("chief") and not clean.get("worker"):
        raise ConfigError("TF_CONFIG cluster has no chief or worker task; add at least one \"worker\"")

    ttype = task.get("type")
    tindex = task.get("index", 0)
    if ttype not in ROLES:
        raise ConfigError(f"TF_CONFIG task type {ttype!r} is unknown; use one of {', '.join(ROLES)}")
    if isinstance(tindex, str) and tindex.isdigit():
        tindex = int(tindex)
    if not isinstance(tindex, int) or isinstance(tindex, bool) or tindex < 0:
        raise ConfigError(f"TF_CONFIG task index {tindex!r} must be a whole number from 0")
    if ttype == EVALUATOR and ttype not in clean:  # a sidecar: it reads checkpoints, the cluster does not know it
        if tindex != 0:
            raise ConfigError(f"TF_CONFIG task evaluator:{tindex}: a run has at most one evaluator, index 0")
        return ClusterConfig(cluster=clean, task=TaskId(ttype, tindex), raw=text)
    if ttype not in clean:
        raise ConfigError(
            f"TF_CONFIG task is {ttype}:{tindex} but the cluster has no {ttype!r} tasks "
            f"(it has {', '.join(clean)}); fix the task type"
        )
    n = len(clean[ttype])
    if tindex >= n:
        raise ConfigError(
            f"TF_CONFIG task {ttype}:{tindex} is out of range: the cluster has {n} {ttype} "
            f"task{'s' if n != 1 else ''} (index 0 to {n - 1})"
        )
    return ClusterConfig(cluster=clean, task=TaskId(ttype, tindex), raw=text)


def make_tf_config(cluster: dict[str, list[str]], task_type: str, task_index: int) -> str:
    """The TF_CONFIG JSON for one task of ``cluster``."""
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": task_index}})


# --------------------------------------------------------------------------- options


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump; main() reports it
        raise ConfigError(f"{message} (see python -m trainer --help)")


def _positive_int(text: str, high: int = 1 << 31) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    problem = count_problem(value, 1, high)
    if problem:
        raise argparse.ArgumentTypeError(f"{value}: {problem}")
    return value


def _epochs(text: str) -> int:
    return _positive_int(text, MAX_EPOCHS)


def _batch(text: str) -> int:
    return _positive_int(text, MAX_BATCH)


def _number(text: str, problem_of, what: str = "a number") -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    problem = problem_of(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{text}: {problem}")
    return value


def _learning_rate(text: str) -> float:
    return _number(text, learning_rate_problem)


def _seconds(text: str) -> float:
    return _number(text, backup_seconds_problem, "a number of seconds")


def _port(text: str) -> int:
    return _positive_int(text, 65535)


def _slurm_jobs(text: str) -> dict[str, int]:
    from trainer.slurm import SlurmError, parse_jobs  # here: trainer.slurm imports this module

    try:
        return parse_jobs(text)
    except SlurmError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} should be like 28,28,1") from None
    if not dims or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"shape {text!r} needs positive sizes, like 28,28,1")
    return dims


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m trainer",
        description="Train one task of a TensorFlow cluster described by TF_CONFIG "
        f"(or a single process when TF_CONFIG is unset), writing metrics to <run-dir>/{METRICS}.",
    )
    p.add_argument("--run-dir", type=Path, default=Path("tfcc-run"),
                   help="this task's run folder: metrics, logs, checkpoints, the final model")
    w = p.add_argument_group("workload")
    w.add_argument("--workload", choices=WORKLOADS, default=None,
                   help="digits (default): a small CNN on scikit-learn's handwritten digits; "
                   "synthetic: random data of --shape; file: your --model-file")
    w.add_argument("--model-file", type=Path, help="a Python file defining build_model() and train_dataset()")
    w.add_argument("--shape", type=_shape, default=(28, 28, 1), help="synthetic: input shape (default 28,28,1)")
    w.add_argument("--classes", type=_positive_int, default=10, help="synthetic: number of classes")
    w.add_argument("--examples", type=_positive_int, default=4096, help="synthetic: training examples")
    t = p.add_argument_group("training")
    t.add_argument("--epochs", type=_epochs, default=5, help=f"1 to {MAX_EPOCHS}")
    batch = t.add_mutually_exclusive_group()
    batch.add_argument("--per-replica-batch", type=_batch, default=32,
                       help=f"examples per replica and step, 1 to {MAX_BATCH} (default 32)")
    batch.add_argument("--global-batch", type=_batch, default=None,
                       help="examples per step over all replicas; must be a multiple of the replicas")
    t.add_argument("--steps-per-epoch", type=_positive_int, default=None,
                   help="default: training examples // global batch")
    t.add_argument("--learning-rate", type=_learning_rate, default=1e-3,
                   help="base learning rate for one replica; scaled by --lr-scaling")
    t.add_argument("--lr-scaling", choices=LR_RULES, default="linear",
                   help="linear: x replicas (default); sqrt: x sqrt(replicas); none")
    t.add_argument("--backup-seconds", type=_seconds, default=DEFAULT_BACKUP_SECONDS,
                   help=f"back up about every so many seconds of training (default {DEFAULT_BACKUP_SECONDS:g})")
    t.add_argument("--seed", type=int, default=1234, help="shuffle and initialisation seed, the same on every worker")
    t.add_argument("--eval-checkpoints", type=Path, default=None,
                   help="parameter-server training with an evaluator: the folder (relative to --run-dir) where the "
                   "chief writes a checkpoint of the model each epoch and the evaluator reads them")
    d = p.add_argument_group("distribution")
    d.add_argument("--strategy", choices=STRATEGIES, default="auto")
    d.add_argument("--communication", choices=COMMUNICATIONS, default="auto",
                   help="MultiWorkerMirrored collective implementation")
    d.add_argument("--autoshard", choices=AUTOSHARD_POLICIES, default="auto")
    d.add_argument("--cpu-devices", type=_positive_int, default=1,
                   help="present this many logical CPU devices (replicas for MirroredStrategy without GPUs)")
    d.add_argument("--intra-op-threads", type=int, default=0, help="0: TensorFlow's default")
    d.add_argument("--inter-op-threads", type=int, default=0, help="0: TensorFlow's default")
    s = p.add_argument_group(
        "Slurm", "when TF_CONFIG is unset and srun started the task (SLURM_PROCID, SLURM_STEP_NUM_TASKS), "
        "TF_CONFIG is built from the step's SLURM_* variables by the conventions of TensorFlow's "
        "SlurmClusterResolver (see trainer/slurm.py)")
    s.add_argument("--port-base", type=_port, default=SLURM_PORT_BASE, metavar="N",
                   help=f"the k-th task on a node listens on port base + k (default {SLURM_PORT_BASE})")
    s.add_argument("--slurm-jobs", type=_slurm_jobs, default=None, metavar="ROLE:N,...",
                   help="roles over the step's ranks, in role-name order: chief:1,worker:3 makes rank 0 the chief "
                   "and ranks 1-3 workers (default: every task a worker)")
    o = p.add_argument_group("output")
    o.add_argument("--no-report", dest="report", action="store_false",
                   help="write no per-step metrics (lifecycle events are still written)")
    o.add_argument("--no-save", dest="save", action="store_false", help="do not save the final model")
    o.add_argument("--verbose", action="store_true", help="show Keras' progress bar")
    return p


@dataclass
class Options:
    run_dir: Path
    workload: str
    model_file: Path | None
    shape: tuple[int, ...]
    classes: int
    examples: int
    epochs: int
    per_replica_batch: int
    global_batch: int | None
    steps_per_epoch: int | None
    learning_rate: float
    lr_scaling: str
    backup_seconds: float
    seed: int
    eval_checkpoints: Path | None
    strategy: str
    communication: str
    autoshard: str
    cpu_devices: int
    intra_op_threads: int
    inter_op_threads: int
    port_base: int
    slurm_jobs: dict[str, int] | None
    report: bool
    save: bool
    verbose: bool


def parse_options(argv: list[str] | None = None) -> Options:
    ns = build_parser().parse_args(argv)
    if ns.model_file is not None:
        if ns.workload not in (None, "file"):
            raise ConfigError(f"--model-file goes with --workload file, not {ns.workload}; drop one of them")
        ns.workload = "file"
    ns.workload = ns.workload or "digits"
    if ns.workload == "file":
        if ns.model_file is None:
            raise ConfigError("--workload file needs --model-file PATH (a .py file with build_model() and train_dataset())")
        if ns.model_file.is_dir():
            raise ConfigError(f"model file {str(ns.model_file)!r} is a folder; give the path of a .py file")
        if not ns.model_file.is_file():
            raise ConfigError(f"model file {str(ns.model_file)!r} does not exist; check the path")
    ns.run_dir = Path(os.path.abspath(ns.run_dir))
    if ns.eval_checkpoints is not None:
        ns.eval_checkpoints = Path(os.path.normpath(ns.run_dir / ns.eval_checkpoints))
    return Options(**vars(ns))
