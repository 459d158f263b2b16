"""What a task is started with: its command line and environment (Qt-free; nothing here reaches a host).

For tfcc's trainer or a user's script, as the runner starts it on a host and the exports write it down.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable

from agent.protocol import KERAS_REASON_VARIABLE, SLURM_PORT_BASE, parse_address, parse_task_name  # noqa: F401
from console import cluster as cl
from console import exposure
from console import workdir
from console.errors import RunError, TfccError
from console.script_source import keras_use
from trainer.tf_config import ConfigError, PS
from trainer.workloads import ORIGIN_VARIABLE as MODEL_FILE_ORIGIN
from trainer.workloads import check_model_file

LEGACY_KERAS = "TF_USE_LEGACY_KERAS"   # "1" before TensorFlow loads: tf.keras is tf-keras (Keras 2)
GPUS = "CUDA_VISIBLE_DEVICES"


def check_user_file(path: str, what: str) -> Path:
    """A user's model file or script (``what``: ``model_file`` or ``script``), checked here so that its
    errors name the user's own file."""
    local = Path(path).expanduser()
    where = f"training.{what} {path!r}" + (f" ({local.resolve()})" if not local.is_absolute() else "")
    if not local.exists():
        raise RunError(f"{where} does not exist", "check the path (a relative one starts at the folder tfcc runs in)")
    if not local.is_file():
        raise RunError(f"{where} is not a regular file", "give the path of a .py file")
    if what == "model_file":
        try:
            check_model_file(local)
        except ConfigError as exc:
            raise RunError(str(exc)) from None
    else:
        if local.suffix != ".py" or local.name.startswith("."):
            # A settings or token file that happens to compile (a .env of NAME=value lines, say) is not code to ship.
            raise RunError(f"{where} is not a Python script (a file named *.py, not a dotfile)",
                           "give the path of the .py file that trains")
        try:
            source = local.read_bytes()
            compile(source, str(local), "exec", dont_inherit=True)
        except OSError as exc:
            raise RunError(f"{where} cannot be read ({exc.strerror})", "check its permissions") from None
        except (SyntaxError, ValueError) as exc:
            line = f" at line {exc.lineno}" if getattr(exc, "lineno", None) else ""
            raise RunError(f"script {str(local)!r} has a syntax error{line}: {getattr(exc, 'msg', exc)}",
                           "fix the script") from None
    return local


def trainer_args(cluster: cl.Cluster, model_file: str | None = None) -> list[str]:
    """The trainer's options for every task of ``cluster``: the training settings, the model file where the
    task finds it (``model_file``), and the evaluator's checkpoint folder when the run has one."""
    args = list(cluster.training.trainer_args())
    if cluster.training.model_file:
        args[args.index("--model-file") + 1] = model_file
    if cluster.evaluated:  # the chief writes checkpoints where the evaluator reads them
        args += ["--eval-checkpoints", cl.EVAL_CHECKPOINTS]
    return args


def keras_choice(cluster: cl.Cluster, collected: workdir.Workdir | None = None) -> tuple[str, str]:
    """The Keras a task runs with and why: ``(tf-keras | keras3 | "", reason)`` ("": what it gets standalone).

    tfcc's trainer: tf-keras. A user's code under ``keras = "auto"``: tf-keras where Keras 3 cannot run ``fit``
    (several training tasks, parameter servers); else the Keras its code was written for, read from its files:
    ``import keras`` is Keras 3's; ``tf.keras`` (or ``import tf_keras``) is Keras 2's, tf-keras since TF 2.16.
    ``collected``: the code's workdir, collected already (else it is read here)."""
    t = cluster.training
    if not t.user_code:
        return cl.TF_KERAS, "tfcc's trainer"
    if t.keras != "auto":
        return t.keras, f"training.keras = \"{t.keras}\""
    if cluster.needs_tf_keras:
        return cl.TF_KERAS, f"{cluster.training_kind}: Keras 3 cannot run fit there"
    try:
        collected = collected or workdir.collect(t, hashed=False)  # its files' names and text: no hash
    except (TfccError, OSError):
        return "", "its code could not be read"
    entry = collected.root / collected.script
    files = [(collected.script, entry)] + [(f.rel, f.path) for f in collected.files
                                           if f.rel.endswith(".py") and f.rel != collected.script]
    use = keras_use(files)
    if use.keras3:
        return cl.KERAS3, f"it imports keras ({use.where(use.keras3[:1])}), Keras 3"
    if use.tf_keras:
        return cl.TF_KERAS, f"it imports tf_keras ({use.where(use.tf_keras[:1])})"
    if use.tf_dot_keras:
        return cl.TF_KERAS, f"it uses tf.keras ({use.where(use.tf_dot_keras[:1])}), written for Keras 2"
    return "", "it uses no Keras"


def keras_environment(cluster: cl.Cluster, choice: tuple[str, str] | None = None) -> dict[str, str]:
    """The environment of ``keras_choice`` (or ``choice``, made once for a start): ``tf-keras`` sets
    TF_USE_LEGACY_KERAS=1 before TensorFlow loads, ``keras3`` clears it; else the host's own. A user's
    code is told why (TFCC_KERAS_REASON: its records say it)."""
    flavour, why = choice or keras_choice(cluster)
    env = {LEGACY_KERAS: "1"} if flavour == cl.TF_KERAS else {LEGACY_KERAS: "0"} if flavour == cl.KERAS3 else {}
    if cluster.training.user_code:
        env[KERAS_REASON_VARIABLE] = f"{flavour or 'its own Keras'}: {why}"
    return env


def gpu_environment(task: cl.Task) -> dict[str, str]:
    """The GPUs a task sees: those it lists; none for a ps (it holds variables on its CPU: TensorFlow would
    take every GPU's memory); else every GPU of its host (nothing set)."""
    if task.gpus:
        return {GPUS: ",".join(map(str, task.gpus))}
    if task.role == PS:
        return {GPUS: ""}
    return {}


def slurm_environment(task: cl.Task, env: dict[str, str]) -> dict[str, str]:
    """``env`` (``task_command``'s) as ``task`` gets it under Slurm: Slurm gives each task its GPUs (``--gres``,
    ``--gpu-bind``: trainer.slurm.gpu_options), so only a ps keeps its mask (none: it holds variables on its CPU)."""
    return dict(env) if task.role == PS else {k: v for k, v in env.items() if k != GPUS}


def secret_values(cluster: cl.Cluster, environ=None) -> dict[str, str]:
    """The values of the cluster's ``secret_env``, from this console's environment (``environ``: os.environ)."""
    environ = os.environ if environ is None else environ
    missing = [name for name in cluster.training.secret_env if name not in environ]
    if missing:
        raise RunError(f"training.secret_env names {', '.join(missing)}, which this console's environment does not "
                       "set", f"set {missing[0]} in the environment tfcc starts in (export {missing[0]}=...), then "
                       "start again; tfcc passes its value to the tasks and never writes it down")
    return {name: environ[name] for name in cluster.training.secret_env}


def task_command(cluster: cl.Cluster, task: cl.Task, interpreter: str, dist: str,
                 script: str | None = None, keras: tuple[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """A task's argv and environment on a host whose deployed code is in ``dist``: the trainer (its run folder
    ``{run_dir}``, the model file uploaded beside the code), or a user's ``script`` (its path in the task's own
    copy of its workdir, ``{work_dir}``; through the capture unless it is turned off), or a user's module (``-m``,
    from that copy: it is the task's cwd). The agent fills in the braces."""
    training = cluster.training
    if training.user_code:
        # The script runs in the task's own copy of its workdir (agent.workdir), through the capture
        # (trainer.capture: the script unchanged, its metrics seen from the outside).
        capture = [f"{dist}/trainer/capture.py"] if training.capture else []
        code = ["-m", training.module] if training.module else ["{work_dir}/" + script]
        argv = [interpreter, *capture, *code, *training.args]
    else:
        model = f"{dist}/user/{Path(training.model_file).name}" if training.model_file else None
        argv = [interpreter, "-m", "trainer", "--run-dir", "{run_dir}", *trainer_args(cluster, model)]
    env = {**training.env, **keras_environment(cluster, keras)}
    if training.model_file and not training.user_code:
        env[MODEL_FILE_ORIGIN] = str(Path(training.model_file).expanduser().resolve())
    env.update(gpu_environment(task))
    return argv, env


def firewall_request(cluster: cl.Cluster, address: str, tf_config: str | None = None) -> dict | None:
    """What a task's start asks its agent to set with ``firewall = true``: the task's port (from its TF_CONFIG
    ``address``) open to the cluster's hosts only, and every task's ``host:port`` of the run (its ``tf_config``'s
    cluster) reachable from that host by the training user only (agent/firewall.py). None without it, or for a
    task that serves no port (an evaluator)."""
    if not cluster.training.firewall or not address:
        return None
    endpoints = []
    try:
        for addresses in (json.loads(tf_config or "{}").get("cluster") or {}).values():
            endpoints += [a for a in addresses if isinstance(a, str)]
    except (ValueError, AttributeError):
        pass
    return {"port": parse_address(address)[1], "peers": exposure.cluster_addresses(cluster),
            "endpoints": endpoints or [address]}


def task_address(name: str, tf_config: str) -> str:
    """A task's host:port in its TF_CONFIG (by the TF_CONFIG's own task: in an elastic run that shrank, worker-2
    may be worker 1); "" for a task outside the training cluster (an evaluator). ``name``: for older manifests."""
    config = json.loads(tf_config)
    role, index = parse_task_name(name)
    own = config.get("task")
    if isinstance(own, dict) and isinstance(own.get("type"), str) and isinstance(own.get("index"), int):
        role, index = own["type"], own["index"]
    cluster = config["cluster"]
    return cluster[role][index] if role in cluster else ""


def at_once(items: list[tuple], work: Callable) -> list:
    """``work(*item)`` for every item on its own thread; the results in order, or the first error
    (after every item has had its go: none is left half done behind the caller's back)."""
    if len(items) <= 1:
        return [work(*item) for item in items]
    with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="tfcc-host") as pool:
        futures = [pool.submit(work, *item) for item in items]
        wait(futures)
    return [f.result() for f in futures]
