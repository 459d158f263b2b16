"""The cluster file's fields, each declared once: its type, default, range or choices, and help (Qt-free)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re
import sys
from dataclasses import dataclass
from typing import Callable

from console import PROJECT_ROOT
from trainer.config import COMMUNICATIONS, MAX_EPOCHS, WORKLOADS
from trainer.plan import (AUTOSHARD_POLICIES, DEFAULT_BACKUP_SECONDS, KERAS_FLAVOURS, LR_RULES, MAX_BACKUP_SECONDS,
                          MAX_BATCH, MAX_LEARNING_RATE, STRATEGIES, backup_seconds_problem, count_problem,
                          learning_rate_problem)
from trainer.tf_config import ROLES, WORKER


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()  # the default of a field the file must set: it has none
AUTO = "auto"  # a task's port: tfcc picks a free one
MAX_PORT = 65535
MAX_RESTARTS = 100
MAX_SLURM_NODES = 1024
MAX_TASKS_PER_NODE = 64
MAX_GPU_INDEX = 1023


@dataclass(frozen=True)
class Field:
    """One key of a section. ``low``/``high`` bound a number (a float's ``low`` is excluded: "above 0"), each
    index of a list of numbers; a value at the default is always valid (``global_batch = 0``: not set)."""

    name: str
    type: type                      # str, int, float, bool, list or dict
    default: object = REQUIRED
    help: str = ""                  # one line: the doc's table and the window's tooltips say it
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    item: type | None = None        # what a list or a table holds
    auto: bool = False              # "auto" may stand instead of a number
    words: str = ""                 # the fix when out of range ({low}, {high}); else count_problem's wording
    check: Callable[[float], str | None] | None = None  # the fix when out of range, the trainer's own wording
    always_written: bool = False    # dumps writes it at its default too (a setting a person looks for)
    instead_of: str = ""            # the field of its section it replaces when set (a file sets one of them)
    rule_bounded: bool = False      # the cluster bounds it further: a rule checks it with the cluster (validate)
    section: str = ""               # set by Section

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def annotation(self) -> str:
        """Its type as the dataclass declares it."""
        if self.item is not None:
            return f"{self.type.__name__}[{'str, ' if self.type is dict else ''}{self.item.__name__}]"
        return f"{self.type.__name__} | str" if self.auto else self.type.__name__

    def initial(self):
        """A fresh copy of the default (a list or a table is never shared)."""
        return copy.deepcopy(self.default)

    def problem(self, value) -> str | None:
        """Why ``value`` is out of this field's range or choices (what to do), or None."""
        if value == self.default or (self.auto and value == AUTO):
            return None
        if self.choices:
            return None if value in self.choices else f"use one of {', '.join(self.choices)}"
        if self.check is not None:
            return self.check(value)
        if self.low is None or self.type is not int or self.low <= value <= self.high:
            return None
        return self.words.format(low=self.low, high=self.high) if self.words else count_problem(value, self.low,
                                                                                                self.high)

    def range_text(self) -> str:
        """Its range or choices in words, for the doc's table."""
        if self.choices:
            return ", ".join(f"`{c}`" for c in self.choices)
        if self.low is None:
            return ""
        text = f"above {self.low:g}, at most {self.high:g}" if self.type is float else f"{self.low} to {self.high}"
        if self.item is not None:
            text = f"each {text}"
        if self.auto:
            text += f", or `\"{AUTO}\"`"
        return text

    def type_text(self) -> str:
        names = {str: "string", int: "integer", float: "number", bool: "boolean"}
        if self.type is list:
            return f"list of {names[self.item]}s"
        if self.type is dict:
            return f"table of {names[self.item]}s"
        return names[self.type] + (f" or `\"{AUTO}\"`" if self.auto else "")


class Section:
    """The fields of one section, in the order a file and the dataclass list them."""

    def __init__(self, name: str, title: str, *declared: Field):
        self.name, self.title = name, title
        self.fields = {f.name: dataclasses.replace(f, section=name) for f in declared}

    def __getitem__(self, name: str) -> Field:
        return self.fields[name]

    def __iter__(self):
        return iter(self.fields.values())

    def dataclass(self, cls):
        """A class decorator: ``cls`` as a dataclass of this section's fields (their order, types, defaults)."""
        cls.__annotations__ = {f.name: f.annotation for f in self}
        for f in self:
            if not f.required:
                setattr(cls, f.name, dataclasses.field(default_factory=f.initial) if f.type in (list, dict)
                        else f.default)
        return dataclass(cls)

    def table(self, obj) -> dict:
        """``obj``'s values as the file writes them: a field at its default only if always written or required,
        one set ``instead_of`` another leaves that one out."""
        values = dataclasses.asdict(obj)
        replaced = {f.instead_of for f in self if f.instead_of and values[f.name] != f.default}
        return {f.name: values[f.name] for f in self if f.name not in replaced
                and (f.required or f.always_written or values[f.name] != f.default)}


HOSTS = Section(
    "hosts", "[[hosts]]: one per machine",
    Field("name", str, help="unique; tasks refer to it; letters, digits, '.', '_', '-' (it names files)",
          always_written=True),
    Field("address", str, "", "how SSH and the other hosts reach it: a name, an IP or a ~/.ssh/config alias"),
    Field("local", bool, False, "this machine: the agent runs as a subprocess, no SSH; address defaults to localhost",
          always_written=True),
    Field("user", str, "", "SSH user (default: ~/.ssh/config's, else yours)"),
    Field("port", int, 22, "SSH port", low=1, high=MAX_PORT, words="use the host's SSH port, {low} to {high}",
          always_written=True),
    Field("key", str, "", "SSH private key file (default: ssh-agent and ~/.ssh/config)"),
    Field("python", str, "", "the interpreter on the host, with tensorflow and tf-keras to train (default: "
                             "python3; on a local host, the console's own)"),
    Field("spare", bool, False, "an elastic run's spare: it runs no task until a host is lost, whose tasks move here",
          always_written=True),
)

TASKS = Section(
    "tasks", "[[tasks]]: one per TensorFlow task",
    Field("host", str, help="the [[hosts]] name it runs on", always_written=True),
    Field("role", str, WORKER, "its TensorFlow role (the chief is chief:0, else worker:0)", choices=ROLES,
          always_written=True),
    Field("port", int, AUTO, "the task's TensorFlow port, or \"auto\" for a free one", low=1, high=MAX_PORT,
          auto=True, words="use a number from {low} to {high} or \"auto\"", always_written=True),
    Field("gpus", list, [], "GPU indices this task may use (CUDA_VISIBLE_DEVICES); [] for all", low=0,
          high=MAX_GPU_INDEX, item=int, always_written=True),
)

TRAINING = Section(
    "training", "[training]",
    Field("workload", str, "digits", "tfcc's workload to train (file: model_file's)", choices=WORKLOADS,
          always_written=True),
    Field("model_file", str, "", "with workload = \"file\": a .py with build_model() and train_dataset()"),
    Field("script", str, "", "your own training script, run instead of the trainer (python path/to/script.py)"),
    Field("module", str, "", "or your package's module, run as python -m pkg.mod from its workdir"),
    Field("workdir", str, "", "with script or module: the folder shipped with it (default: the script's folder, "
                              "or the folder tfcc runs in for a module)"),
    Field("keras", str, "auto", "with script or module: the Keras it gets (auto: tf-keras where Keras 3 cannot run "
                                "fit, else by its imports)", choices=KERAS_FLAVOURS),
    Field("capture", bool, True, "with script or module: tfcc captures its metrics from the outside (fit, "
                                 "tf.summary, printed values); false: plain python"),
    Field("args", list, [], "extra arguments for the trainer or your code (kept in the files: no secrets)", item=str),
    Field("env", dict, {}, "set in every task's environment (kept in the files: no secrets)", item=str),
    Field("secret_env", list, [], "names whose values come from the console's environment at each start, "
                                  "never written to a file", item=str),
    Field("epochs", int, 5, "epochs to train", low=1, high=MAX_EPOCHS, always_written=True),
    Field("per_replica_batch", int, 32, "examples per replica and step (global batch: this x replicas)", low=1,
          high=MAX_BATCH, always_written=True),
    Field("global_batch", int, 0, "or this instead (0: not set): split over the replicas, a multiple of them",
          low=1, high=MAX_BATCH, words="it must be from {low} to {high} (or leave it out: use per_replica_batch)",
          instead_of="per_replica_batch"),
    Field("learning_rate", float, 0.001, "for one replica; scaled by lr_scaling", low=0, high=MAX_LEARNING_RATE,
          check=learning_rate_problem, always_written=True),
    Field("lr_scaling", str, "linear", "how the learning rate grows with the replicas", choices=LR_RULES,
          always_written=True),
    Field("strategy", str, "auto", "the tf.distribute strategy (auto: parameter_server with ps tasks)",
          choices=STRATEGIES, always_written=True),
    Field("communication", str, "auto", "the collectives' implementation", choices=COMMUNICATIONS,
          always_written=True),
    Field("autoshard", str, "auto", "how the dataset is split over the workers", choices=AUTOSHARD_POLICIES,
          always_written=True),
    Field("max_restarts", int, 3, "group restarts after a task is killed, lost or stalled, before the run is given up "
                                  "(0: none)", low=0, high=MAX_RESTARTS, always_written=True),
    Field("backup_seconds", float, DEFAULT_BACKUP_SECONDS, "each task backs up about this often: a restart redoes at "
                                                           "most this much", low=0, high=MAX_BACKUP_SECONDS,
          check=backup_seconds_problem, always_written=True),
    Field("stop_on_nan", bool, False, "stop the run at its first non-finite loss (else: an alert, and it goes on)",
          always_written=True),
    Field("firewall", bool, False, "each agent admits only the cluster's hosts to its tasks' ports (nftables, root)"),
    Field("elastic", int, 0, "the fewest training tasks the run may go on with (0: off); at most the training tasks",
          low=0, high=1024, rule_bounded=True, always_written=True),
)

SLURM = Section(
    "slurm", "[slurm]: a Slurm cluster instead of hosts and tasks",
    Field("login", str, help="the host you submit jobs from: a name, an IP or a ~/.ssh/config alias (SSH)"),
    Field("user", str, "", "SSH user, as a host's"),
    Field("port", int, 22, "SSH port", low=1, high=MAX_PORT, words="use the login host's SSH port, {low} to {high}"),
    Field("key", str, "", "SSH private key file"),
    Field("python", str, "", "the interpreter the nodes run, with TensorFlow (default python3)"),
    Field("partition", str, "", "sbatch --partition (empty: the cluster's default)"),
    Field("nodes", int, 1, "nodes the job asks for", low=1, high=MAX_SLURM_NODES),
    Field("tasks_per_node", int, 1, "TensorFlow tasks on each node (the job's ranks: nodes x tasks_per_node)", low=1,
          high=MAX_TASKS_PER_NODE),
    Field("gpus_per_task", int, 0, "GPUs each task gets (sbatch --gres=gpu:N a node, N: gpus_per_task x "
                                    "tasks_per_node)", low=0, high=64),
    Field("cpus_per_task", int, 4, "sbatch --cpus-per-task", low=1, high=1024),
    Field("time", str, "1:00:00", "the job's time limit, as sbatch --time reads it: 90, 1:30:00, 2-00:00:00"),
    Field("account", str, "", "sbatch --account, if your site needs one"),
    Field("qos", str, "", "sbatch --qos"),
    Field("parameter_servers", int, 0, "parameter-server training: this many tasks are ps (rank 0 is the chief)",
          low=0, high=MAX_SLURM_NODES),
)

DEFAULT_INDEX = "https://pypi.org/simple"
TF_CONSOLE, TF_NONE = "console", "none"  # [environment].tensorflow: this console's TensorFlow stack, or only packages
GPU_AUTO, GPU_NEVER, GPU_ALWAYS = "auto", "never", "always"
ENVIRONMENT = Section(
    "environment", "[environment]: the Python environment tfcc makes on each host (tfcc provision; docs/provision.md)",
    Field("tensorflow", str, TF_CONSOLE, "console: this console's TensorFlow, tf-keras, NumPy, TensorBoard and "
                                         "scikit-learn, at its versions; none: only what packages and requirements say",
          choices=(TF_CONSOLE, TF_NONE), always_written=True),
    Field("packages", list, [], "more requirements, as pip writes them: [\"pandas==2.2.3\", \"tqdm\"]", item=str,
          always_written=True),
    Field("requirements", str, "", "a requirements file, its path relative to the script's folder (or the workdir)"),
    Field("gpu", str, GPU_AUTO, "TensorFlow's CUDA wheels (tensorflow[and-cuda]): auto where the host has NVIDIA GPUs",
          choices=(GPU_AUTO, GPU_NEVER, GPU_ALWAYS)),
    Field("index", str, DEFAULT_INDEX, "the package index this console downloads wheels from (\"\": none, only "
                                       "find_links)"),
    Field("find_links", list, [], "folders on this machine that hold wheels (an air-gapped console's)", item=str),
)

SECTIONS = (TRAINING, HOSTS, TASKS, SLURM, ENVIRONMENT)  # in the order docs/cluster-file.md tells them


# --------------------------------------------------------------------------- the doc's table

DOC = PROJECT_ROOT / "docs" / "cluster-file.md"
DOC_START = "<!-- fields: made by python -m console.cluster_fields --write (tests/console/test_cluster_fields.py) -->"
DOC_END = "<!-- end of fields -->"


def _toml(value) -> str:
    if value is REQUIRED:
        return "(required)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def doc_table() -> str:
    """Every field, a table per section, as docs/cluster-file.md shows them."""
    out = []
    for section in SECTIONS:
        out += [f"**{section.title}**", "", "| Key | Type | Default | Values | Meaning |", "|---|---|---|---|---|"]
        out += [f"| `{f.name}` | {f.type_text()} | {_toml(f.default)} | {f.range_text()} | {f.help} |"
                for f in section]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def with_doc_table(text: str) -> str:
    """``text`` (docs/cluster-file.md) with the table between its markers made anew."""
    pattern = re.compile(re.escape(DOC_START) + r"\n.*?" + re.escape(DOC_END), re.S)
    if not pattern.search(text):
        raise ValueError(f"the doc has no {DOC_START!r} ... {DOC_END!r}")
    return pattern.sub(lambda _: f"{DOC_START}\n\n{doc_table()}\n{DOC_END}", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m console.cluster_fields",
                                     description="Print the cluster file's fields as docs/cluster-file.md's table.")
    parser.add_argument("--write", action="store_true", help=f"write the table into {DOC.name} instead")
    if parser.parse_args(argv).write:
        DOC.write_text(with_doc_table(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        sys.stdout.write(doc_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
