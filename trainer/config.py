"""The trainer's options (no TensorFlow import).

Everything here runs before TensorFlow is imported, so an option that cannot work fails in
milliseconds with a message that says what to change, instead of after a multi-second import or
inside TensorFlow. TF_CONFIG is read in ``trainer.tf_config``; the rules of the plan (strategy,
replicas, batches, autoshard) are in ``trainer.plan``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from agent.protocol import METRICS
from trainer.plan import (AUTOSHARD_POLICIES, DEFAULT_BACKUP_SECONDS, LR_RULES, MAX_BATCH,
                          backup_seconds_problem, count_problem, learning_rate_problem)
from trainer.slurm import PORT_BASE as SLURM_PORT_BASE
from trainer.slurm import SlurmError, parse_jobs
from trainer.strategies import Strategy
from trainer.tf_config import ConfigError

COMMUNICATIONS = ("auto", "ring", "nccl")
WORKLOADS = ("digits", "synthetic", "file")
MAX_EPOCHS = 100_000  # more is a typo, not a plan (the batch and learning-rate bounds are in trainer.plan)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump; main() reports it
        raise ConfigError(f"{message} (see python -m trainer --help)")


def _checked(text: str, parse, problem_of, what: str):
    """``parse(text)``, or an argparse error that says ``text`` is not ``what`` or why the value cannot be."""
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    problem = problem_of(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{text}: {problem}")
    return value


def _positive_int(text: str, high: int = 1 << 31) -> int:
    return _checked(text, int, lambda value: count_problem(value, 1, high), "a whole number")


def _epochs(text: str) -> int:
    return _positive_int(text, MAX_EPOCHS)


def _batch(text: str) -> int:
    return _positive_int(text, MAX_BATCH)


def _learning_rate(text: str) -> float:
    return _checked(text, float, learning_rate_problem, "a number")


def _seconds(text: str) -> float:
    return _checked(text, float, backup_seconds_problem, "a number of seconds")


def _port(text: str) -> int:
    return _positive_int(text, 65535)


def _slurm_jobs(text: str) -> dict[str, int]:
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
    t.add_argument("--elastic", action="store_true",
                   help="the run may go on with fewer or more workers (tfcc's elastic): every attempt keeps the "
                   "first one's global batch and learning rate, whatever its number of workers")
    t.add_argument("--seed", type=int, default=1234, help="shuffle and initialisation seed, the same on every worker")
    t.add_argument("--eval-checkpoints", type=Path, default=None,
                   help="parameter-server training with an evaluator: the folder (relative to --run-dir) where the "
                   "chief writes a checkpoint of the model each epoch and the evaluator reads them")
    d = p.add_argument_group("distribution")
    d.add_argument("--strategy", choices=Strategy.ALL, default=Strategy.AUTO)
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
    elastic: bool
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
