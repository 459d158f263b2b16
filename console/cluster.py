"""The cluster file: hosts, tasks and the training spec, as human-editable TOML (Qt-free).

See docs/cluster-file.md for the format. ``load``/``loads`` validate and say,
for every problem, which field is wrong and what to do; ``dumps`` writes a
file that ``loads`` reads back unchanged. ``tf_config`` builds each task's
TF_CONFIG from the cluster.
"""

from __future__ import annotations

import ipaddress
import keyword
import math
import re
import stat
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from agent.protocol import name_problem
from console import PROJECT_ROOT
from console.cluster_fields import AUTO, ENVIRONMENT, HOSTS, SLURM, TASKS, TRAINING, Section
from console.errors import TfccError
from console.files import write_atomically
# Which Keras a user's script gets (KERAS_FLAVOURS): auto gives tf-keras where Keras 3 cannot run fit
# (MultiWorkerMirrored with more than one training task, or ParameterServer), else what it gets standalone.
from trainer.plan import (KERAS3, KERAS_FLAVOURS, MAX_BATCH, TF_KERAS,  # noqa: F401 (a vocabulary)
                          parameter_server_problem)
from trainer.slurm import format_jobs, gpu_options, rank_roles
from trainer.strategies import Strategy
from trainer.tf_config import CHIEF, EVALUATOR, PS, ROLES, TRAINING_ROLES, WORKER, make_tf_config

DEFAULT_CLUSTER = PROJECT_ROOT / "resources" / "default_cluster.toml"
EVAL_CHECKPOINTS = "../chief-0/checkpoints"  # from the evaluator's run folder (and the chief's), on the chief's host
MAX_FILE_BYTES = 1 << 20  # a cluster file is a few KB; a bigger one is the wrong file
# A host name (RFC 1123 labels; also ~/.ssh/config aliases) — anything else that is not an IP literal is a typo.
_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                        r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$")


class ClusterFileError(TfccError, ValueError):
    """A cluster file that cannot work; the message names the field and says what to do."""


@HOSTS.dataclass
class Host:
    """A [[hosts]] table: its fields, types and defaults are declared in console.cluster_fields."""

    @property
    def interpreter(self) -> str:
        """``python`` if set; else this console's own interpreter on a local host, ``python3`` on others."""
        if self.python:
            return self.python
        return sys.executable if self.local else "python3"

    @property
    def tf_host(self) -> str:
        """The host part of this host's task addresses (an IPv6 literal in brackets)."""
        host = self.address or ("localhost" if self.local else self.name)
        return f"[{host}]" if ":" in host else host


@TASKS.dataclass
class Task:
    """A [[tasks]] table (console.cluster_fields declares its fields)."""

    @property
    def in_cluster(self) -> bool:
        """Whether TF_CONFIG's cluster lists it (an evaluator is not: the coordinator would wait for it)."""
        return self.role != EVALUATOR


@TRAINING.dataclass
class Training:
    """The [training] table (console.cluster_fields declares its fields). ``elastic``: the fewest training tasks
    the run may go on with (0: off): a host lost for good, or one that causes failure after failure, leaves the
    run, which restarts on the hosts left with the same global batch; it comes back at the next backup once it
    answers again (console/run/supervisor.py)."""

    @property
    def user_code(self) -> bool:
        """Whether a user's own code runs (a script or a module), not tfcc's trainer."""
        return bool(self.script or self.module)

    @property
    def trains(self) -> str:
        """What the run trains, as the history keeps it: the script, the module, the model file or the workload."""
        return self.script or self.module or self.model_file or self.workload

    @property
    def code_name(self) -> str:
        """The user's code as a person names it: ``task.py`` (a script's file name) or ``trainer.task``."""
        return self.module or self.script.rsplit("/", 1)[-1]

    def trainer_args(self) -> list[str]:
        """Options for ``python -m trainer`` (or, with ``script``, just ``args``)."""
        if self.user_code:
            return list(self.args)
        batch = (["--global-batch", str(self.global_batch)] if self.global_batch
                 else ["--per-replica-batch", str(self.per_replica_batch)])
        out = ["--epochs", str(self.epochs), *batch,
               "--learning-rate", repr(self.learning_rate), "--lr-scaling", self.lr_scaling,
               "--strategy", self.strategy, "--communication", self.communication,
               "--autoshard", self.autoshard, "--backup-seconds", repr(self.backup_seconds)]
        if self.elastic:
            out += ["--elastic"]
        if self.model_file:
            out += ["--model-file", self.model_file]
        else:
            out += ["--workload", self.workload]
        return out + list(self.args)


@SLURM.dataclass
class Slurm:
    """A Slurm cluster instead of hosts: tfcc submits one job from its login host and Slurm picks the nodes
    (docs/cluster-file.md; console.cluster_fields declares its fields). Its tasks take ranks in name order
    (chief, ps, worker), ``tasks_per_node`` a node."""

    @property
    def task_count(self) -> int:
        return self.nodes * self.tasks_per_node

    def placement(self) -> list[str]:
        """sbatch's options for where the job goes: its partition, account and QOS where set."""
        return [f"--{name}={getattr(self, name)}" for name in ("partition", "account", "qos") if getattr(self, name)]

    def sbatch_options(self) -> list[str]:
        """sbatch's options for the whole job: its nodes, tasks, CPUs, GPUs, time limit and placement."""
        options = [f"--nodes={self.nodes}", f"--ntasks-per-node={self.tasks_per_node}", f"--ntasks={self.task_count}",
                   f"--cpus-per-task={self.cpus_per_task}", f"--time={self.time}"]
        return options + gpu_options(self.gpus_per_task, self.tasks_per_node)[0] + self.placement()

    def srun_options(self) -> list[str]:
        """srun's options beyond the job's: each task its own GPUs of its node (a mask per local rank)."""
        return gpu_options(self.gpus_per_task, self.tasks_per_node)[1]

    def jobs(self) -> str:
        """The roles over the ranks, as the trainer's Slurm mode reads them (chief:1,ps:1,worker:2)."""
        return format_jobs(Counter(self.roles()))

    def roles(self) -> list[str]:
        """Each rank's role, as the trainer's Slurm mode gives them (trainer/slurm.py)."""
        if not self.parameter_servers:
            return [WORKER] * self.task_count
        n = self.parameter_servers
        return rank_roles({CHIEF: 1, PS: n, WORKER: self.task_count - 1 - n})


# sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]], or no limit.
SLURM_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}"
                        r"|UNLIMITED|INFINITE|unlimited|infinite)$")
@ENVIRONMENT.dataclass
class Environment:
    """The [environment] table: what tfcc installs on each host, offline where need be (console/provision.py)."""


_SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # a partition's, account's or QOS's name


@dataclass
class Cluster:
    hosts: list[Host]
    tasks: list[Task]
    training: Training = field(default_factory=Training)
    # Set: Slurm places the tasks (console.run.placement): no hosts, and each task's host is "" (slurm_tasks).
    slurm: Slurm | None = None
    # Set: the tasks run in the environment it says, made on each host (tfcc provision). None: in the one tfcc
    # makes by default where a host has it made, else in the host's Python.
    environment: Environment | None = None

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def task_names(self) -> list[str]:
        """``worker-0``, ``chief-0``, ...: each task's index counts within its role."""
        counts: dict[str, int] = {}
        names = []
        for task in self.tasks:
            index = counts.get(task.role, 0)
            counts[task.role] = index + 1
            names.append(f"{task.role}-{index}")
        return names

    def tf_cluster(self, ports: list[int] | None = None, members: set[int] | None = None) -> dict[str, list[str]]:
        """The TF_CONFIG cluster; ``ports`` resolves ``"auto"`` (one per task, in order); ``members``: the
        indexes of the tasks in the run now (an elastic run that lost some: None for all)."""
        spec: dict[str, list[str]] = {}
        for i, task in enumerate(self.tasks):
            if not task.in_cluster or (members is not None and i not in members):
                continue
            port = ports[i] if ports is not None else task.port
            if port == "auto":
                raise ClusterFileError(f"tasks[{i}].port is \"auto\": pick free ports before building TF_CONFIG")
            spec.setdefault(task.role, []).append(f"{self.host(task.host).tf_host}:{port}")
        return spec

    def tf_config(self, index: int, ports: list[int] | None = None, members: set[int] | None = None) -> str:
        """Task ``index``'s TF_CONFIG. Among ``members`` (see ``tf_cluster``) a task keeps its name and run
        folder, and its index counts the members of its role before it: worker-2 is worker 1 of two."""
        if members is not None and index not in members:
            raise ValueError(f"tasks[{index}] is not a member of the run: it has no TF_CONFIG")
        role = self.tasks[index].role
        number = sum(1 for i, t in enumerate(self.tasks[:index])
                     if t.role == role and (members is None or i in members))
        return make_tf_config(self.tf_cluster(ports, members), role, number)

    def replicas(self, index: int) -> int:
        """The replicas task ``index`` trains on as far as the file tells: its GPUs, else one (all the
        host's GPUs when it lists none: the trainer then checks what it finds)."""
        return max(1, len(self.tasks[index].gpus))

    @property
    def training_tasks(self) -> list[int]:
        """The indexes of the tasks that train in step (chief and workers)."""
        return [i for i, t in enumerate(self.tasks) if t.role in TRAINING_ROLES]

    @property
    def parameter_server(self) -> bool:
        """Whether this is parameter-server training (asked for, or ps tasks with ``auto``)."""
        return self.training.strategy == Strategy.PARAMETER_SERVER or any(t.role == PS for t in self.tasks)

    @property
    def needs_tf_keras(self) -> bool:
        """Whether Keras 3 cannot run ``fit`` on this cluster (TF 2.21): more than one training task
        (MultiWorkerMirrored), or parameter-server training. tfcc's trainer always uses tf-keras."""
        return self.parameter_server or sum(t.role in TRAINING_ROLES for t in self.tasks) > 1

    @property
    def training_kind(self) -> str:
        """What decides a script's Keras, in words: "parameter-server training", "2 training tasks"."""
        if self.parameter_server:
            return "parameter-server training"
        count = sum(t.role in TRAINING_ROLES for t in self.tasks)
        return f"{count} training task{'s' if count != 1 else ''}"

    @property
    def script_keras(self) -> str:
        """The Keras a user's script gets: ``tf-keras``, ``keras3``, or "" for what it gets standalone
        (``auto`` where Keras 3 can run)."""
        if self.training.keras != "auto":
            return self.training.keras
        return TF_KERAS if self.needs_tf_keras else ""

    @property
    def evaluated(self) -> bool:
        """Whether an evaluator evaluates the chief's checkpoints (the chief then writes them)."""
        return any(t.role == EVALUATOR for t in self.tasks)


# --------------------------------------------------------------------------- reading


def address_problem(address: str) -> str | None:
    """Why ``address`` is neither a host name nor an IP literal, or None."""
    try:
        ipaddress.ip_address(address)
        return None
    except ValueError:
        pass
    if _HOST_NAME.match(address) and not address.replace(".", "").isdigit():
        return None
    return ("it must be a host name (letters, digits, '-', '.'), an IP address or a ~/.ssh/config alias, "
            "with no spaces, ports or other characters")


# A login name: POSIX's letters, digits, '.', '_', '-' (a '$' last), and a directory's user@domain or DOMAIN\user.
_USER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@\\-]{0,63}\$?$")


def user_name_ok(user: str) -> bool:
    return not user or bool(_USER_NAME.match(user))


def user_problem(user: str) -> str | None:
    """Why ``user`` cannot be an SSH login name (no spaces, no shell's characters), or None ("" : SSH's default)."""
    if user_name_ok(user):
        return None
    return ("a login name is letters, digits, '.', '_', '-' (a directory's user@domain or DOMAIN\\user too), "
            "at most 64, with no spaces")


def host_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a host (it names files and folders, and stands in exported scripts), or None."""
    if not name:
        return "a host needs a name"
    return name_problem("host name", name)


def safe_host_name(wanted: str, taken: set[str]) -> str:
    """A host name for ``wanted`` (an ~/.ssh/config alias, say) that ``host_name_problem`` accepts and ``taken``
    does not hold: what is outside the alphabet becomes '-', and a number is added where needed."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", wanted).lstrip("._-")[:120] or "host"
    unique, n = name, 2
    while unique in taken:
        unique, n = f"{name}-{n}", n + 1
    return unique


def _is_loopback(address: str) -> bool:
    address = address.strip("[]")
    if address in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _check_value(where: str, name: str, value, expected: type):
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) != (expected is bool) or not isinstance(value, expected):
        raise ClusterFileError(f"{where}.{name} is {value!r}; it must be a {expected.__name__}")
    if expected is str and _CONTROL.search(value):
        raise ClusterFileError(f"{where}.{name} is {value!r}; it must not hold control characters (newlines, NUL)")
    return value


def _build(cls, section: Section, data, where: str):
    """``cls`` of a section's table, each value of its declared type; a list's or a table's items checked."""
    if not isinstance(data, dict):
        raise ClusterFileError(f"{where} must be a table of settings")
    known = [f.name for f in section]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ClusterFileError(f"{where} has unknown key {unknown[0]!r}; known keys are {', '.join(known)}")
    values = {}
    for name, value in data.items():
        f = section[name]
        if f.auto:  # a task's port
            if value != AUTO and (isinstance(value, bool) or not isinstance(value, int) or f.problem(value)):
                raise ClusterFileError(f"{where}.{name} is {value!r}; {f.words.format(low=f.low, high=f.high)}")
        elif f.type not in (list, dict):
            value = _check_value(where, name, value, f.type)
        elif name == "gpus":
            if not isinstance(value, list) or not all(isinstance(g, int) and not isinstance(g, bool)
                                                      and f.low <= g <= f.high for g in value) \
                    or len(set(value)) != len(value):
                raise ClusterFileError(f"{where}.gpus is {value!r}; list distinct GPU indices, like [0, 1], or leave it []")
        elif name == "args":
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                raise ClusterFileError(f"{where}.args must be a list of strings, like [\"--seed\", \"7\"]")
            if any("\0" in a for a in value):
                raise ClusterFileError(f"{where}.args holds a NUL character; remove it")
        elif name == "env":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ClusterFileError(f"{where}.env must be a table of strings, like env = {{ HF_HOME = \"/data\" }}")
            for key, text in value.items():
                _env_name(f"{where}.env", key)
                if "\0" in text:
                    raise ClusterFileError(f"{where}.env.{key} holds a NUL character; remove it")
        elif name in ("packages", "find_links"):
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() and not _CONTROL.search(v)
                                                      for v in value):
                raise ClusterFileError(f"{where}.{name} must be a list of strings, like {name} = "
                                       + ("[\"pandas==2.2.3\"]" if name == "packages" else "[\"/srv/wheels\"]"))
            option = next((v for v in value if name == "packages" and v.strip().startswith("-")), None)
            if option is not None:
                raise ClusterFileError(f"{where}.packages holds {option!r}, an option, not a requirement; list "
                                       "requirements only (an index goes in index, wheel folders in find_links)")
        elif name == "secret_env":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ClusterFileError(f"{where}.secret_env must be a list of names, like secret_env = "
                                       "[\"WANDB_API_KEY\"] (their values come from this console's environment)")
            for key in value:
                _env_name(f"{where}.secret_env", key)
        else:  # a new list or table field: say how its items are checked, above
            raise AssertionError(f"{f.key} is declared a {f.type.__name__}, but _build does not check its items")
        values[name] = value
    try:
        return cls(**values)
    except TypeError as exc:
        missing = str(exc).rsplit(":", 1)[-1].strip()
        raise ClusterFileError(f"{where} needs {missing}") from None


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# What tfcc sets itself in a task's environment: a cluster file's env cannot set these.
RESERVED_ENV = ("TF_CONFIG", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "TF_USE_LEGACY_KERAS")


def _env_name(where: str, name: str) -> None:
    if not _ENV_NAME.match(name):
        raise ClusterFileError(f"{where} names {name!r}; an environment variable's name is letters, digits and '_', "
                               "not starting with a digit")
    if name in RESERVED_ENV or name.startswith("TFCC_"):
        raise ClusterFileError(f"{where} names {name}, which tfcc sets itself; leave it out (the cluster's "
                               "settings say it: gpus, keras, the script's workdir)")


def _check_fields(where: str, section: Section, values) -> None:
    """Each of ``values``' fields in its declared range or choices (one the cluster bounds too: by its rule)."""
    for f in section:
        value = getattr(values, f.name)
        problem = None if f.rule_bounded else f.problem(value)
        if problem:
            raise ClusterFileError(f"{where}.{f.name} is {value!r}; {problem}")


def loads(text: str, source: str = "cluster file") -> Cluster:
    if not isinstance(text, str):
        raise ClusterFileError(f"{source} is {type(text).__name__}, not TOML text; give the text of a cluster file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ClusterFileError(f"{source} is not valid TOML: {exc}; correct the file there") from None
    unknown = sorted(set(data) - {"hosts", "tasks", "training", "slurm", "environment"})
    if unknown:
        raise ClusterFileError(f"{source} has unknown section {unknown[0]!r}; sections are [[hosts]], [[tasks]], "
                               "[training], [environment] and, for a Slurm cluster, [slurm]")
    for section in ("hosts", "tasks"):
        if not isinstance(data.get(section, []), list):
            raise ClusterFileError(f"{source}: {section} must be a list of [[{section}]] tables (double brackets), "
                                   f"one per {section[:-1]}")
    slurm = None
    if "slurm" in data:
        if data.get("hosts") or data.get("tasks"):
            raise ClusterFileError(f"{source} has [slurm] and also [[hosts]] or [[tasks]]; Slurm picks the nodes and "
                                   "[slurm] says how many tasks run: remove the [[hosts]] and [[tasks]] tables (or "
                                   "[slurm], to run on hosts of your own)")
        slurm = _build(Slurm, SLURM, data["slurm"], "slurm")
        _slurm_rules(slurm)
        data = {**data, "hosts": [], "tasks": []}
        hosts, tasks = [], slurm_tasks(slurm)
    else:
        hosts = [_build(Host, HOSTS, h, f"hosts[{i}]") for i, h in enumerate(data.get("hosts", []))]
        tasks = [_build(Task, TASKS, t, f"tasks[{i}]") for i, t in enumerate(data.get("tasks", []))]
    for f in TRAINING:
        if f.instead_of and isinstance(data.get("training"), dict) and {f.instead_of, f.name} <= set(data["training"]):
            raise ClusterFileError(f"{source}: [training] sets both {f.instead_of} and {f.name}; keep one of them")
    training = _build(Training, TRAINING, data.get("training", {}), "training")
    environment = _build(Environment, ENVIRONMENT, data["environment"], "environment") if "environment" in data \
        else None
    cluster = Cluster(hosts, tasks, training, slurm, environment)
    if slurm is not None and slurm.parameter_servers and training.strategy == Strategy.AUTO:
        training.strategy = Strategy.PARAMETER_SERVER
    validate(cluster)
    return cluster


def slurm_tasks(slurm: Slurm) -> list[Task]:
    """A Slurm job's tasks, one a rank, the roles by rank: on no host of the cluster's (Slurm picks each one's
    node; the run's placement says where it is planned and, once launched, where it runs)."""
    gpus = list(range(slurm.gpus_per_task))
    return [Task("", role=role, gpus=list(gpus)) for role in slurm.roles()]


def slurm_name_ok(name: str) -> bool:
    """Whether ``name`` can name a Slurm partition, account or QOS."""
    return bool(_SLURM_NAME.match(name))


def slurm_problem(slurm: Slurm) -> str | None:
    """What is wrong with a [slurm] section (the window's dialog says it), or None."""
    try:
        _slurm_rules(slurm)
    except ClusterFileError as exc:
        return str(exc)
    return None


def _slurm_rules(slurm: Slurm) -> None:
    problem = address_problem(slurm.login) if slurm.login else "it is empty"
    if problem:
        raise ClusterFileError(f"slurm.login is {slurm.login!r}; {problem} (name the host you submit jobs from, "
                               "as you reach it with ssh)")
    _check_fields("slurm", SLURM, slurm)
    problem = user_problem(slurm.user)
    if problem:
        raise ClusterFileError(f"slurm.user is {slurm.user!r}; {problem}")
    if not SLURM_TIME.match(slurm.time):
        raise ClusterFileError(f"slurm.time is {slurm.time!r}, which sbatch does not read; write it like 1:00:00 "
                               "(hours:minutes:seconds), 90 (minutes) or 2-00:00:00 (days-hours:minutes:seconds)")
    for name in ("partition", "account", "qos"):
        value = getattr(slurm, name)
        if value and not _SLURM_NAME.match(value):
            raise ClusterFileError(f"slurm.{name} is {value!r}; a Slurm {name}'s name is letters, digits, '.', '_' "
                                   "and '-' (sinfo and sacctmgr list them), or leave it empty for the default")
    if slurm.parameter_servers and slurm.task_count < slurm.parameter_servers + 2:
        raise ClusterFileError(f"slurm: {slurm.task_count} tasks leave no worker beside the chief and "
                               f"{slurm.parameter_servers} ps; raise nodes or tasks_per_node")


def read_text(path: str | Path) -> str:
    """A cluster file's text, or a ClusterFileError that says what is wrong with the file itself.

    Only a regular file is opened (a FIFO would block the reader forever), at most
    ``MAX_FILE_BYTES`` of it, as UTF-8.
    """
    path = Path(path)
    where = f"cluster file {str(path)!r}"
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ClusterFileError(f"{where} does not exist; check the path") from None
    except OSError as exc:
        raise ClusterFileError(f"{where} cannot be read ({exc.strerror}); check the path") from None
    if stat.S_ISDIR(info.st_mode):
        raise ClusterFileError(f"{where} is a folder; give the path of a .toml cluster file in it")
    if not stat.S_ISREG(info.st_mode):
        raise ClusterFileError(f"{where} is not a regular file (a pipe or a device?); give the path of a .toml file")
    if info.st_size > MAX_FILE_BYTES:
        raise ClusterFileError(f"{where} is {info.st_size} bytes, too big for a cluster file "
                               f"(at most {MAX_FILE_BYTES}); check that it is the right file")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ClusterFileError(f"{where} cannot be read ({exc.strerror}); check its permissions") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ClusterFileError(f"{where} is not UTF-8 text (byte {exc.start}, line {line}); "
                               "save it as UTF-8 (TOML files are UTF-8)") from None


def load(path: str | Path) -> Cluster:
    return loads(read_text(path), source=str(path))


def _host_rules(cluster: Cluster) -> None:
    """The cluster's own hosts and where its tasks run on them."""
    if not cluster.hosts:
        raise ClusterFileError("the cluster has no hosts; add a [[hosts]] table with a name")
    if not cluster.tasks:
        raise ClusterFileError("the cluster has no tasks; add a [[tasks]] table with a host and a role")
    names = set()
    for i, host in enumerate(cluster.hosts):
        problem = host_name_problem(host.name)
        if problem:
            raise ClusterFileError(f"hosts[{i}].name: {problem}")
        if host.name in names:
            raise ClusterFileError(f"hosts[{i}].name {host.name!r} is used twice; host names must be unique")
        names.add(host.name)
        if not host.local and not host.address:
            raise ClusterFileError(
                f"hosts[{i}] ({host.name}) has no address; set address (a name, an IP or a ~/.ssh/config alias) "
                "or local = true for this machine"
            )
        _check_fields(f"hosts[{i}]", HOSTS, host)
        if host.address:
            problem = address_problem(host.address)
            if problem:
                raise ClusterFileError(f"hosts[{i}].address is {host.address!r}; {problem}")
        problem = user_problem(host.user)
        if problem:
            raise ClusterFileError(f"hosts[{i}].user is {host.user!r}; {problem}")
    seen: dict[str, int] = {}
    for i, task in enumerate(cluster.tasks):
        if task.host not in names:
            raise ClusterFileError(
                f"tasks[{i}].host {task.host!r} is not a host of this cluster (hosts: {', '.join(sorted(names))})"
            )
        _check_fields(f"tasks[{i}]", TASKS, task)
        if task.port != "auto" and task.in_cluster:
            key = f"{cluster.host(task.host).tf_host}:{task.port}"
            if key in seen:
                raise ClusterFileError(
                    f"tasks[{i}] and tasks[{seen[key]}] both use {key}; give each task on a host its own port"
                )
            seen[key] = i
    used = {t.host for t in cluster.tasks}
    remote = sorted(h.name for h in cluster.hosts if h.name in used and not _is_loopback(h.tf_host))
    for host in cluster.hosts:
        if host.name in used and _is_loopback(host.tf_host) and remote:
            raise ClusterFileError(
                f"host {host.name!r} has the loopback address {host.tf_host!r}, but tasks also run on "
                f"{', '.join(remote)}, which cannot reach it there; give {host.name!r} an address the other hosts can reach"
            )


def validate(cluster: Cluster) -> None:
    if cluster.slurm is None:  # (a Slurm job's tasks are [slurm]'s, on nodes Slurm picks)
        _host_rules(cluster)
    chiefs = [i for i, t in enumerate(cluster.tasks) if t.role == CHIEF]
    if len(chiefs) > 1:
        raise ClusterFileError(
            f"tasks[{chiefs[0]}] and tasks[{chiefs[1]}] are both chief; a cluster has at most one chief "
            "(make the others role = \"worker\")"
        )
    t = cluster.training
    if cluster.slurm is not None and t.firewall:
        raise ClusterFileError("training.firewall is for hosts of your own (nftables on each); a Slurm cluster's "
                               "nodes are its admins': remove firewall (docs/security.md says what the tasks' ports "
                               "expose)")
    if cluster.slurm is not None and t.secret_env:
        raise ClusterFileError("training.secret_env cannot reach a Slurm job's tasks without touching a disk (Slurm "
                               "keeps a job's environment in its controller's state files); remove secret_env and "
                               "give the tasks their secrets the way your cluster provides (its own secret store, a "
                               "file only you can read)")
    if cluster.slurm is not None and t.elastic:
        raise ClusterFileError("training.elastic is for hosts of your own; a Slurm job restarts its tasks within its "
                               "allocation, or is submitted again: remove elastic")
    _check_fields("training", TRAINING, t)
    if cluster.environment is not None:
        _check_fields("environment", ENVIRONMENT, cluster.environment)
    roles = {role: [t.host for t in cluster.tasks if t.role == role] for role in ROLES}
    if t.strategy == Strategy.PARAMETER_SERVER or roles[PS]:
        if t.strategy not in (Strategy.AUTO, Strategy.PARAMETER_SERVER):
            raise ClusterFileError(f"the cluster has ps tasks, which training.strategy {t.strategy!r} has no use "
                                   "for; set strategy = \"parameter_server\" (or \"auto\"), or remove the ps tasks")
        problem = parameter_server_problem({r: h for r, h in roles.items() if h and r != EVALUATOR})
        if problem:
            raise ClusterFileError(problem.replace("role \"chief\"", "role = \"chief\" in [[tasks]]"))
        gpus = {name: len(task.gpus) for name, task in zip(cluster.task_names(), cluster.tasks)
                if task.role == WORKER}
        if len(set(gpus.values())) > 1:
            listing = ", ".join(f"{name} {n}" for name, n in gpus.items())
            raise ClusterFileError(f"the workers of parameter-server training list different numbers of GPUs "
                                   f"({listing}); each step's batch is split over one worker's GPUs, the same on "
                                   "every worker: give every worker task the same number of gpus")
    _evaluator_rules(cluster, roles)
    _elastic_rules(cluster)
    if t.model_file and t.user_code:
        raise ClusterFileError(f"training sets both model_file and {'script' if t.script else 'module'}; keep one "
                               "of them")
    if t.script and t.module:
        raise ClusterFileError("training sets both script and module; keep one of them: module runs a package's "
                               "module as python -m does (module = \"trainer.task\"), script a file by its path")
    if t.module and module_problem(t.module):
        raise ClusterFileError(f"training.module is {t.module!r}; {module_problem(t.module)}")
    both = sorted(set(t.env) & set(t.secret_env))
    if both:
        raise ClusterFileError(f"training.env and training.secret_env both name {both[0]}; a secret's value comes "
                               "from this console's environment only: remove it from env")
    if len(set(t.secret_env)) != len(t.secret_env):
        raise ClusterFileError("training.secret_env names a variable twice; name each once")
    if t.workdir and not t.user_code:
        raise ClusterFileError("training.workdir is set but training.script and training.module are empty; the "
                               "workdir is the folder shipped with your code: name the script or module, or remove "
                               "workdir")
    if t.workload == "file" and not t.model_file:
        raise ClusterFileError("training.workload is \"file\" but training.model_file is empty; name your model file")


def module_problem(name: str) -> str | None:
    """Why ``name`` cannot be a module ``python -m`` runs (dotted Python names: ``trainer.task``), or None."""
    parts = name.split(".")
    if all(part.isidentifier() and not keyword.iskeyword(part) for part in parts):
        return None
    return ("a module is Python names joined by dots, like \"trainer.task\" (python -m trainer.task), not a path; "
            "the folder that holds its top package is the workdir (training.workdir, default: the folder tfcc "
            "runs in)")


def text_list(numbers: list[int]) -> str:
    """``[1, 2]`` as "1 or 2"."""
    words = [str(n) for n in numbers]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _elastic_rules(cluster: Cluster) -> None:
    """``elastic`` (the fewest training tasks a run goes on with): at most the training tasks there are, and
    the global batch split evenly over every size it may shrink to (the trainer keeps it when it shrinks).
    Spare hosts (``spare = true``) run no task and serve an elastic run only; parameter-server training, which
    goes on without a lost worker by itself, is elastic by moving a lost host's tasks to a spare (a run's own
    cluster, whose spares were used, has none left: no error)."""
    t = cluster.training
    spares = [i for i, h in enumerate(cluster.hosts) if h.spare]
    for i in spares:
        busy = [j for j, task in enumerate(cluster.tasks) if task.host == cluster.hosts[i].name]
        if busy:
            raise ClusterFileError(f"hosts[{i}] ({cluster.hosts[i].name}) is a spare, but tasks[{busy[0]}] runs on "
                                   "it; a spare runs no task until a host is lost: remove spare, or move the task")
    if spares and not t.elastic:
        raise ClusterFileError(f"hosts[{spares[0]}] ({cluster.hosts[spares[0]].name}) is a spare, which only an "
                               "elastic run uses: set training.elastic (the fewest training tasks to go on with), "
                               "or remove spare")
    if not t.elastic:
        return
    training = cluster.training_tasks
    if t.elastic < 0 or t.elastic > len(training):
        raise ClusterFileError(f"training.elastic is {t.elastic}, but the cluster has {len(training)} training "
                               f"task{'s' if len(training) != 1 else ''} (chief and workers); set it to the fewest the "
                               f"run may go on with, 1 to {len(training)}, or 0 to restart only on every host")
    if cluster.parameter_server:
        return  # it goes on without a lost worker by itself; elastic moves a lost ps or chief host to a spare
    if t.user_code:
        return  # a script sets its own batch: it gets the new TF_CONFIG and does what it does with it
    # One replica per task unless its gpus say more: the file cannot tell more (the trainer checks at each start).
    per_task = {cluster.replicas(i) for i in training}
    if len(per_task) > 1:
        raise ClusterFileError("training.elastic needs the same number of gpus on every training task (the "
                               "global batch is split evenly over whichever are left): list as many for each")
    each = per_task.pop()
    total = len(training) * each
    batch = t.global_batch or t.per_replica_batch * total
    # The sizes it may shrink to (the full size's split is the trainer's own rule, said with or without elastic).
    sizes = [n for n in range(t.elastic, len(training)) if batch % (n * each)]
    if sizes:
        step = math.lcm(*range(t.elastic * each, total + 1, each))
        ways = [f"make it a multiple of {step}" + (f" (training.global_batch = {max(step, round(batch / step) * step)})"
                                                 if step <= MAX_BATCH else "")]
        ways.append(f"raise elastic to {max(sizes) + 1}" + (" (it then never goes on with fewer tasks)"
                                                           if max(sizes) + 1 == len(training) else ""))
        raise ClusterFileError(f"the global batch {batch} cannot be kept on {text_list(sizes)} training tasks "
                               f"(training.elastic is {t.elastic}): it must split evenly over their replicas; "
                               + ", or ".join(ways))


def _evaluator_rules(cluster: Cluster, roles: dict[str, list[str]]) -> None:
    """An evaluator: at most one, with parameter-server training, on the chief's host (it reads the
    checkpoints the chief writes in its run folder; tfcc assumes no shared folder between hosts)."""
    evaluators = [i for i, t in enumerate(cluster.tasks) if t.role == EVALUATOR]
    if not evaluators:
        return
    if len(evaluators) > 1:
        raise ClusterFileError(f"tasks[{evaluators[0]}] and tasks[{evaluators[1]}] are both evaluators; a run has "
                               "at most one evaluator (make the others workers, or remove them)")
    if not roles[PS]:
        raise ClusterFileError(f"tasks[{evaluators[0]}] is an evaluator, which evaluates the checkpoints of "
                               "parameter-server training; add a ps task and a chief, or remove the evaluator")
    if cluster.tasks[evaluators[0]].host not in roles[CHIEF]:
        raise ClusterFileError(
            f"tasks[{evaluators[0]}] (the evaluator) runs on host {cluster.tasks[evaluators[0]].host!r}, but it reads "
            f"the checkpoints the chief writes in its run folder on host {roles[CHIEF][0]!r}; put the evaluator "
            "on the chief's host (tfcc assumes no folder shared between hosts)")


# --------------------------------------------------------------------------- writing


def dumps(cluster: Cluster) -> str:
    """The cluster file's text: each field the declaration says to write (console.cluster_fields)."""
    environment = {"environment": ENVIRONMENT.table(cluster.environment)} if cluster.environment is not None else {}
    if cluster.slurm is not None:  # its tasks are [slurm]'s: it says them
        return tomli_w.dumps({"training": TRAINING.table(cluster.training), **environment,
                              "slurm": SLURM.table(cluster.slurm)})
    return tomli_w.dumps({"training": TRAINING.table(cluster.training), **environment,
                          "hosts": [HOSTS.table(h) for h in cluster.hosts],
                          "tasks": [TASKS.table(t) for t in cluster.tasks]})


def save(cluster: Cluster, path: str | Path) -> None:
    """Atomically: a crash never leaves half a cluster file."""
    write_atomically(path, dumps(cluster))


def default() -> Cluster:
    return load(DEFAULT_CLUSTER)
