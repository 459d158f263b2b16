"""TF_CONFIG from a Slurm job step's ``SLURM_*`` variables (standard library only, no TensorFlow).

``srun`` starts every task of a step with ``SLURM_PROCID`` (its rank),
``SLURM_STEP_NUM_TASKS``, ``SLURM_STEP_NODELIST`` (a compressed host list such as
``node[01-03,07],gpu-a``) and ``SLURM_STEP_TASKS_PER_NODE`` (such as ``2(x3),1``).
From them every task works out the same cluster, as TensorFlow's
``tf.distribute.cluster_resolver.SlurmClusterResolver`` does (TF 2.21):

- the k-th task on a node (k from 0 on every node) is ``host:port_base+k``;
  the port base is 8888 unless told otherwise;
- ranks fill the nodes in turn, ``SLURM_STEP_TASKS_PER_NODE[i]`` of them on node i
  (Slurm's default block distribution);
- the jobs (roles) take consecutive ranges of ranks in the order of their names, so
  ``{chief: 1, ps: 1, worker: N}`` makes rank 0 the chief, rank 1 the ps and the
  rest workers; by default every task is a worker.

Where this differs from the resolver, and why:

- **No GPUs.** The resolver counts GPUs with ``nvidia-smi`` (which raises on a
  node without it) and cannot be told "zero GPUs" (tensorflow#56894), so it fails
  on CPU-only nodes. Here GPUs play no part: Slurm's own ``--gres`` /
  ``--gpus-per-task`` set ``CUDA_VISIBLE_DEVICES`` for each task.
- **Nodes in Slurm's order.** The resolver sorts the host names as strings, which
  puts ``node10`` before ``node9``: the ranks that run on node9 would be given
  node10's addresses and the cluster never forms. Here the nodes keep the order of
  ``SLURM_STEP_NODELIST``, the order in which Slurm places the ranks (and the order
  of ``SLURM_STEP_TASKS_PER_NODE``); for names that sort the same both ways (the
  usual zero-padded ``node[01-10]``) the result is the resolver's. Where Slurm says
  which node a task runs on (``SLURMD_NODENAME``) it is checked against the node
  its rank is given, so a step started with another distribution (``cyclic``,
  ``plane``) is refused with a message instead of hanging.
- **Host lists as Slurm writes them.** Zero padding is kept (``node[01-02]`` is
  ``node01``, ``node02``; the resolver makes ``node1``), a name may hold several
  bracket groups (``r[1-2]n[1-2]``) or text after one, and a malformed list is an
  error that says what is wrong.

``python -m trainer.slurm [--jobs chief:1,worker:3] [--port-base N] -- script.py ARGS``
sets ``TF_CONFIG`` this way (unless it is set already) and ``TF_USE_LEGACY_KERAS=1``
(unless set, or ``--keep-keras``: tfcc chose each task's Keras already) and replaces
itself with ``python script.py ARGS``: a user's own script runs under ``srun`` unchanged. ``python -m trainer`` does the same by itself
when ``TF_CONFIG`` is unset and ``SLURM_PROCID`` is set (``--port-base``,
``--slurm-jobs``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import sys
from collections.abc import Mapping

if __name__ == "__main__" and __package__ in (None, ""):
    # Started by its path (an export runs a user's code from its folder, where a package of the user's may be
    # named trainer too, as cloud samples name theirs): tfcc's own trainer is the folder above this file.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from agent.protocol import SLURM_PORT_BASE  # noqa: E402
from trainer.tf_config import CHIEF, EVALUATOR, PS, WORKER, ConfigError, make_tf_config  # noqa: E402

PORT_BASE = SLURM_PORT_BASE  # TensorFlow's SlurmClusterResolver's: task k of a node listens on 8888 + k
# The roles in the order they take the ranks, their names' (in_rank_order); an evaluator is no part of the training
# cluster (see _check_jobs).
JOB_ROLES = (CHIEF, PS, WORKER)
MAX_HOSTS = 65536  # a list that expands to more is a typo (node[1-1000000]), not a step
VARIABLES = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
NODE_NAME = "SLURMD_NODENAME"  # the node this task runs on, set by slurmd
PROG = "tfcc-slurm"


class SlurmError(ConfigError, ValueError):
    """A Slurm environment or setting that cannot give a cluster: bad input, like a bad TF_CONFIG."""


# --------------------------------------------------------------------------- host lists

_RANGE = re.compile(r"(\d+)(?:-(\d+))?", re.ASCII)
_TASKS = re.compile(r"(\d+)(?:\(x(\d+)\))?", re.ASCII)


def _split_top(text: str) -> list[str]:
    """Split at the commas outside brackets, checking that brackets pair up and do not nest."""
    items, current, depth = [], [], 0
    for c in text:
        if c == "[":
            if depth:
                raise SlurmError(f"host list {text!r} opens a bracket inside another; write ranges like node[1-3,7]")
            depth = 1
        elif c == "]":
            if not depth:
                raise SlurmError(f"host list {text!r} closes a bracket it did not open")
            depth = 0
        elif c == "," and not depth:
            items.append("".join(current))
            current = []
            continue
        current.append(c)
    if depth:
        raise SlurmError(f"host list {text!r} has a bracket that is not closed")
    items.append("".join(current))
    return items


def _expand_group(text: str, group: str) -> list[str]:
    """The numbers of one bracket group (``01-03,07``), each as wide as its range's first number."""
    values = []
    for part in group.split(","):
        m = _RANGE.fullmatch(part)
        if not m:
            raise SlurmError(f"host list {text!r} has [{group}]; a bracket holds numbers and ranges like [1-3,7]")
        lo, hi = m.group(1), m.group(2) if m.group(2) is not None else m.group(1)
        if int(hi) < int(lo):
            raise SlurmError(f"host list {text!r} has the reversed range {part}; write it low-high ({hi}-{lo})")
        if int(hi) - int(lo) >= MAX_HOSTS:
            raise SlurmError(f"host list {text!r} has the range {part}, more than {MAX_HOSTS} hosts")
        width = len(lo)  # Slurm keeps the first number's zero padding: [08-10] is 08, 09, 10
        values.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return values


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm host list: ``node[01-03,07],gpu-a`` -> node01, node02, node03, node07, gpu-a.

    Order is kept and nothing is removed. A name may hold several bracket groups,
    which expand to their product, the last group counting fastest
    (``r[1-2]n[1-2]`` -> r1n1, r1n2, r2n1, r2n2).
    """
    text = (text or "").strip()
    if not text:
        raise SlurmError("the host list is empty; Slurm writes it like node[01-03,07],gpu-a")
    if any(c.isspace() for c in text):
        raise SlurmError(f"host list {text!r} has a space; Slurm writes it like node[01-03,07],gpu-a")
    hosts: list[str] = []
    for item in _split_top(text):
        if not item:
            raise SlurmError(f"host list {text!r} has an empty name (two commas, or one at an end)")
        pieces = re.split(r"\[([^\]]*)\]", item)  # literal, group, literal, group, ..., literal
        choices = []
        for i, piece in enumerate(pieces):
            if i % 2:
                choices.append(_expand_group(text, piece))
            else:
                choices.append([piece])
        for combo in itertools.product(*choices):
            hosts.append("".join(combo))
            if len(hosts) > MAX_HOSTS:
                raise SlurmError(f"host list {text!r} names more than {MAX_HOSTS} hosts")
    return hosts


def expand_tasks_per_node(text: str) -> list[int]:
    """Expand Slurm's tasks per node: ``2(x3),1`` -> [2, 2, 2, 1]."""
    text = (text or "").strip()
    if not text:
        raise SlurmError("the tasks per node are empty; Slurm writes them like 2(x3),1")
    counts: list[int] = []
    for part in text.split(","):
        m = _TASKS.fullmatch(part)
        if not m:
            raise SlurmError(f"tasks per node {text!r} has {part!r}; write each node's count as N or N(xTIMES), "
                             "like 2(x3),1")
        count, times = int(m.group(1)), int(m.group(2) or 1)
        if count < 1 or times < 1:
            raise SlurmError(f"tasks per node {text!r} has {part!r}; counts and repeats start at 1")
        if len(counts) + times > MAX_HOSTS:
            raise SlurmError(f"tasks per node {text!r} counts more than {MAX_HOSTS} nodes")
        counts.extend([count] * times)
    return counts


# --------------------------------------------------------------------------- jobs


def _check_jobs(jobs: Mapping[str, int], shown: str) -> dict[str, int]:
    clean: dict[str, int] = {}
    for role, count in jobs.items():
        if role == EVALUATOR:
            raise SlurmError(f"jobs {shown!r} name an evaluator; under Slurm every task of the step joins the "
                             "training cluster, which an evaluator must not: leave it out (run an evaluator as its "
                             "own program with its own TF_CONFIG)")
        if role not in JOB_ROLES:
            raise SlurmError(f"jobs {shown!r} name the unknown role {role!r}; roles are {', '.join(JOB_ROLES)}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise SlurmError(f"jobs {shown!r} give {role} {count!r} tasks; give a whole number from 1 "
                             "(leave out a role with no tasks)")
        clean[role] = count
    if not clean:
        raise SlurmError("the jobs are empty; write them like chief:1,worker:3")
    if clean.get(CHIEF, 0) > 1:
        raise SlurmError(f"jobs {shown!r} give the chief {clean[CHIEF]} tasks; a cluster has one chief "
                         "(make the others workers)")
    if not clean.get(CHIEF) and not clean.get(WORKER):
        raise SlurmError(f"jobs {shown!r} have no chief or worker; add worker:N")
    return clean


def parse_jobs(text: str) -> dict[str, int]:
    """``chief:1,ps:1,worker:2`` -> {"chief": 1, "ps": 1, "worker": 2}."""
    jobs: dict[str, int] = {}
    text = (text or "").strip()
    if not text:
        raise SlurmError("the jobs are empty; write them like chief:1,worker:3")
    for part in text.split(","):
        role, sep, count = (s.strip() for s in part.partition(":"))
        if not sep or not role:
            raise SlurmError(f"jobs {text!r} have {part.strip()!r}; write each as ROLE:COUNT, like chief:1,worker:3")
        if role in jobs:
            raise SlurmError(f"jobs {text!r} name {role} twice; give each role once")
        if not (count.isascii() and count.isdigit()):
            raise SlurmError(f"jobs {text!r} give {role} {count!r} tasks; give a whole number from 1")
        jobs[role] = int(count)
    return _check_jobs(jobs, text)


def in_rank_order(jobs: Mapping[str, int]) -> list[tuple[str, int]]:
    """The roles of ``jobs`` and their counts in the order they take the ranks: their names' order (chief, ps,
    worker), as TensorFlow's resolver takes them. The only copy of that rule: the trainer's Slurm mode, the
    console's jobs and the export's run folders all follow it."""
    return sorted(jobs.items())


def rank_ranges(jobs: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """Each role of ``jobs`` that has tasks, with its first rank and how many it takes: consecutive ranges."""
    ranges, start = [], 0
    for role, count in in_rank_order(jobs):
        if count:
            ranges.append((role, start, count))
            start += count
    return ranges


def rank_roles(jobs: Mapping[str, int]) -> list[str]:
    """Each rank's role: ``{"worker": 2, "chief": 1, "ps": 1}`` -> chief, ps, worker, worker."""
    return [role for role, _, count in rank_ranges(jobs) for _ in range(count)]


def format_jobs(jobs: Mapping[str, int]) -> str:
    """``{"worker": 2, "chief": 1}`` -> ``chief:1,worker:2``: the roles in rank order, as ``--jobs`` reads them."""
    return ",".join(f"{role}:{count}" for role, count in in_rank_order(jobs))


# --------------------------------------------------------------------------- a node's GPUs


def gpu_options(gpus_per_task: int, tasks_per_node: int) -> tuple[list[str], list[str]]:
    """sbatch's and srun's options that give each task of a node its own ``gpus_per_task`` GPUs: the node's for
    all its tasks (``--gres``), and a mask a local rank, the k-th task the k-th ``gpus_per_task`` of them
    (``--gpu-bind``; none for one task a node). Slurm sets each task's CUDA_VISIBLE_DEVICES from them."""
    if not gpus_per_task:
        return [], []
    gres = [f"--gres=gpu:{gpus_per_task * tasks_per_node}"]
    if tasks_per_node < 2:
        return gres, []
    mask = (1 << gpus_per_task) - 1
    return gres, ["--gpu-bind=mask_gpu:" + ",".join(hex(mask << (k * gpus_per_task)) for k in range(tasks_per_node))]


# --------------------------------------------------------------------------- TF_CONFIG


def _variable(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if value is None or not value.strip():
        raise SlurmError(f"{name} is not set; Slurm sets it for each task of a job step: run it under srun "
                         "(in an sbatch script too: the batch script itself is no step)")
    return value.strip()


def _whole(env: Mapping[str, str], name: str) -> int:
    value = _variable(env, name)
    if not (value.isascii() and value.isdigit()):
        raise SlurmError(f"{name} is {value!r}, not a whole number; run it under srun, which sets it")
    return int(value)


def slurm_cluster(env: Mapping[str, str], jobs: Mapping[str, int] | None = None,
                  port_base: int = PORT_BASE) -> tuple[dict[str, list[str]], str, int]:
    """The cluster, this task's role and its index, from the ``SLURM_*`` variables in ``env``."""
    rank = _whole(env, "SLURM_PROCID")
    num_tasks = _whole(env, "SLURM_STEP_NUM_TASKS")
    nodelist = _variable(env, "SLURM_STEP_NODELIST")
    hosts = expand_hostlist(nodelist)
    counts = expand_tasks_per_node(_variable(env, "SLURM_STEP_TASKS_PER_NODE"))
    if len(counts) != len(hosts):
        raise SlurmError(f"SLURM_STEP_NODELIST names {len(hosts)} node{'s' * (len(hosts) != 1)} but "
                         f"SLURM_STEP_TASKS_PER_NODE counts tasks for {len(counts)}; they must come from the same "
                         "step (run it under srun)")
    seen: set[str] = set()
    for host in hosts:
        if host in seen:
            raise SlurmError(f"SLURM_STEP_NODELIST names {host} twice; a step lists each node once")
        seen.add(host)
    if sum(counts) != num_tasks:
        raise SlurmError(f"SLURM_STEP_TASKS_PER_NODE counts {sum(counts)} tasks but SLURM_STEP_NUM_TASKS is "
                         f"{num_tasks}; they must come from the same step (run it under srun)")
    if rank >= num_tasks:
        raise SlurmError(f"SLURM_PROCID is {rank} but the step has {num_tasks} tasks (ranks 0 to {num_tasks - 1})")
    if jobs is None:
        jobs = {WORKER: num_tasks}
    jobs = _check_jobs(jobs, format_jobs(jobs))
    if sum(jobs.values()) != num_tasks:
        raise SlurmError(f"the jobs {format_jobs(jobs)} count {sum(jobs.values())} tasks but the Slurm step has "
                         f"{num_tasks} (SLURM_STEP_NUM_TASKS); make the counts add up to {num_tasks}, or start "
                         f"{sum(jobs.values())} tasks (srun --ntasks)")
    if isinstance(port_base, bool) or not isinstance(port_base, int) or not 1 <= port_base <= 65535:
        raise SlurmError(f"port base {port_base!r} is not a port; use a number from 1 to 65535")
    top = port_base + max(counts) - 1
    if top > 65535:
        raise SlurmError(f"port base {port_base} with {max(counts)} tasks on a node needs port {top}; "
                         f"use a port base of at most {65536 - max(counts)}")

    addresses, nodes = [], []  # in rank order
    for host, count in zip(hosts, counts):
        for k in range(count):
            addresses.append(f"{host}:{port_base + k}")
            nodes.append(host)
    node = env.get(NODE_NAME, "").strip()
    if node and node != nodes[rank]:
        raise SlurmError(f"task rank {rank} runs on {node} but Slurm's block distribution over "
                         f"SLURM_STEP_NODELIST={nodelist} puts it on {nodes[rank]}; start the step with "
                         "srun --distribution=block (the default for several tasks per node)")
    cluster: dict[str, list[str]] = {}
    task = None
    for role, first, count in rank_ranges(jobs):
        cluster[role] = addresses[first:first + count]
        if first <= rank < first + count:
            task = (role, rank - first)
    assert task is not None  # the counts add up to num_tasks and rank < num_tasks
    return cluster, task[0], task[1]


def tf_config_from_slurm(env: Mapping[str, str], jobs: dict[str, int] | None = None,
                         port_base: int = PORT_BASE) -> str:
    """The TF_CONFIG JSON for this Slurm task (``env`` holds the ``SLURM_*`` variables; see the module)."""
    cluster, role, index = slurm_cluster(env, jobs, port_base)
    return make_tf_config(cluster, role, index)


def under_slurm(env: Mapping[str, str]) -> bool:
    """Whether the trainer builds TF_CONFIG from Slurm: TF_CONFIG unset (or empty) and the task started
    by ``srun`` in a step of several tasks (SLURM_PROCID, and SLURM_STEP_NUM_TASKS above 1). A batch
    script's own process (no step) and a step of one task (``srun --pty bash``) train alone, as
    anywhere else: a cluster of one would only take a port."""
    tasks = (env.get("SLURM_STEP_NUM_TASKS") or "").strip()
    return (not (env.get("TF_CONFIG") or "").strip() and "SLURM_PROCID" in env
            and not (tasks.isdigit() and int(tasks) <= 1) and tasks != "")


# --------------------------------------------------------------------------- python -m trainer.slurm


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump; main() reports it
        raise SlurmError(f"{message} (see python -m trainer.slurm --help)")


def _jobs_option(text: str) -> dict[str, int]:
    try:
        return parse_jobs(text)
    except SlurmError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _port_option(text: str) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port; use a number from 1 to 65535")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m trainer.slurm",
        usage="python -m trainer.slurm [--jobs chief:1,worker:3] [--port-base N] -- script.py [ARGS ...]",
        description="Run a TensorFlow script as one task of a Slurm job step: set TF_CONFIG from the SLURM_* "
        "variables (unless TF_CONFIG is set) and TF_USE_LEGACY_KERAS=1 (unless set, or --keep-keras), then run "
        "python script.py ARGS in this process. Start it with srun, once per task.",
    )
    p.add_argument("--jobs", type=_jobs_option, default=None, metavar="ROLE:N,...",
                   help="roles over the step's ranks, in role-name order: chief:1,ps:1,worker:2 makes rank 0 the "
                   "chief, rank 1 the ps, ranks 2-3 workers (default: every task a worker)")
    p.add_argument("--port-base", type=_port_option, default=PORT_BASE, metavar="N",
                   help=f"the k-th task on a node listens on port base + k (default {PORT_BASE})")
    p.add_argument("--keep-keras", action="store_true",
                   help="leave TF_USE_LEGACY_KERAS as the environment has it (the script gets the Keras its "
                   "environment chose for it, or the machine's own)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="what python runs: script.py ARGS (or -m module ARGS), after --")
    return p


def _say(message: str) -> None:
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Set the environment and exec Python on the command; returns only on an error (exit code 2)."""
    try:
        ns = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        command = list(ns.command)
        if command[:1] == ["--"]:
            command = command[1:]
        if not command:
            raise SlurmError("give the script to run after --: python -m trainer.slurm -- script.py ARGS")
        if not command[0].startswith("-") and not os.path.isfile(command[0]):
            raise SlurmError(f"script {command[0]!r} does not exist; check the path (relative to {os.getcwd()})")
        if not (os.environ.get("TF_CONFIG") or "").strip():
            os.environ["TF_CONFIG"] = tf_config_from_slurm(os.environ, ns.jobs, ns.port_base)
    except SlurmError as exc:
        _say(str(exc))
        return 2
    if not ns.keep_keras:  # tf-keras: Keras 3's fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585)
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, *command])
    except OSError as exc:
        _say(f"cannot start {sys.executable}: {exc.strerror}")
        return 2
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
