"""Run one trainer task: validate input, then train, and report every outcome.

Under Slurm (``srun``, no TF_CONFIG) the task's TF_CONFIG is first built from the
``SLURM_*`` variables (``trainer.slurm``). Bad input (TF_CONFIG, the Slurm
variables, options, model file, a busy port) ends the process with
exit code 2, one ``tfcc-trainer: error: ...`` line on stderr and a ``failed``
event in the metrics file; a failure during training exits with 1; a stop (SIGTERM) after its backup with 143
(trainer.stopping).
"""

from __future__ import annotations

import os
import sys
import time
import traceback

# tf-keras (Keras 2) must be chosen before TensorFlow is imported: Keras 3's
# fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585).
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from agent.protocol import METRICS, RUN_DIR_VARIABLE, STOP_MARKER  # noqa: E402
from trainer import slurm, stacks, workloads  # noqa: E402  (import no TensorFlow)
from trainer.config import parse_options  # noqa: E402
from trainer.metrics import MetricsWriter  # noqa: E402
from trainer.plan import check_autoshard, choose_strategy  # noqa: E402
from trainer.process import collector_paused  # noqa: E402
from trainer.records import LOST_PEER, Event  # noqa: E402
from trainer.strategies import Strategy  # noqa: E402
from trainer.tf_config import ClusterConfig, ConfigError, parse_tf_config  # noqa: E402

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


def _say(message: str) -> None:
    print(f"tfcc-trainer: error: {' '.join(message.split())}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse_options(argv)
    except ConfigError as exc:
        _say(str(exc))
        return EXIT_BAD_INPUT
    try:
        opts.run_dir.mkdir(parents=True, exist_ok=True)
        writer = MetricsWriter(opts.run_dir / METRICS)
    except OSError as exc:
        why = "it is a file" if opts.run_dir.is_file() else exc.strerror
        _say(f"cannot write to --run-dir {str(opts.run_dir)!r} ({why}); give a folder this user can write to")
        return EXIT_BAD_INPUT
    os.environ[RUN_DIR_VARIABLE] = str(opts.run_dir)
    stacks.arm()  # where its threads are, when its agent asks (a hang)
    cluster = ClusterConfig()
    try:
        if slurm.under_slurm(os.environ):  # srun started this task: every task works out the same TF_CONFIG
            os.environ["TF_CONFIG"] = slurm.tf_config_from_slurm(os.environ, opts.slurm_jobs, opts.port_base)
        cluster = parse_tf_config(os.environ.get("TF_CONFIG"))
        writer.set_base(task_type=cluster.task.type, task_index=cluster.task.index)
        writer.event(
            Event.LAUNCHED,
            pid=os.getpid(),
            address=cluster.address,
            cluster=cluster.cluster,
            is_chief=cluster.is_chief,
            workload=opts.workload,
            python=sys.version.split()[0],
        )
        if opts.model_file is not None:
            workloads.check_model_file(opts.model_file)
        # What TensorFlow is not needed for is refused before it loads (its errors do not depend on the devices).
        strategy = choose_strategy(opts.strategy, cluster, opts.cpu_devices)
        if strategy == Strategy.PARAMETER_SERVER:
            # Every task, coordinator included: a failed RPC is reported to the caller, which can
            # re-schedule on another worker, instead of being retried for ever.
            os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
        elif opts.workload != "file":
            check_autoshard(opts.autoshard, True, opts.workload, cluster.num_workers)  # built-in data is in memory
        with collector_paused():
            from trainer import train  # TensorFlow loads here, after validation
            from trainer.stopping import EXIT_STOPPED, Stopped

        try:
            train.run(opts, cluster, writer)
        except ConfigError:
            raise
        except Stopped as stopped:  # SIGTERM: the step finished, every task backed up after the same one
            print(f"tfcc-trainer: {stopped}", file=sys.stderr, flush=True)
            return EXIT_STOPPED
        except Exception as exc:
            message = train.describe_error(exc)
            if message.startswith(LOST_PEER) and _stopped(opts.run_dir):
                return EXIT_FAILED  # a peer went first in a stop of the whole run: the stop ends this task, no failure
            _fail(writer, message, exc)
            return EXIT_FAILED
        return 0
    except ConfigError as exc:
        _fail(writer, str(exc), None)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        writer.event(Event.FAILED, error="interrupted", time=time.time())
        return 130
    finally:
        writer.close()


def _stopped(run_dir, wait: float = 1.0) -> bool:
    """Whether a stop someone asked for reaches this task within ``wait`` s (its agent's marker in the run folder):
    a stop of every task kills them one after the other (milliseconds apart), and the last ones lose their peers
    first. A real failure is said that much later: kept short, a frozen peer's is named within the same bounds."""
    marker = run_dir / STOP_MARKER
    deadline = time.monotonic() + wait
    while not marker.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _fail(writer: MetricsWriter, message: str, exc: BaseException | None) -> None:
    fields = {"error": message}
    if exc is not None:
        fields["traceback"] = "".join(traceback.format_exception(exc))
        traceback.print_exception(exc, file=sys.stderr)
    writer.event(Event.FAILED, **fields)
    _say(message)
