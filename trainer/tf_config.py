"""TF_CONFIG: the roles' rules, a task's id, the cluster one task sees, reading and writing it (no TensorFlow).

Standard library only (Python 3.9+): the trainer, the capture around a user's script, the Slurm mode and the
console all read TF_CONFIG through this module, and the chief rule (``chief`` if the cluster has one, else
``worker:0``) is written here once.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Iterable

# The roles are the protocol's words (the agent's Slurm mode names the chief's task too), taken from here as well.
from agent.protocol import CHIEF, EVALUATOR, PS, ROLES, WORKER, parse_address, task_name  # noqa: F401 (a vocabulary)

TRAINING_ROLES = (CHIEF, WORKER)  # the tasks that hold model replicas in synchronous training


class ConfigError(Exception):
    """Bad input: the message says what is wrong and what to change."""


def chief_role(roles: Iterable[str]) -> str:
    """The chief's role in a cluster with ``roles``: ``chief`` where there is one, else ``worker`` (index 0)."""
    return CHIEF if CHIEF in set(roles) else WORKER


def chief_name(names: Iterable[str]) -> str | None:
    """The chief among task names (``chief-0``, else ``worker-0``); None when there is neither."""
    names = list(names)
    chief = task_name(chief_role(name.rpartition("-")[0] for name in names), 0)
    return chief if chief in names else None


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
    task: TaskId = TaskId(WORKER, 0)
    raw: str | None = None

    @property
    def is_distributed(self) -> bool:
        return bool(self.cluster)

    @property
    def num_workers(self) -> int:
        """Tasks that hold model replicas in synchronous training (chief + workers)."""
        if not self.cluster:
            return 1
        return sum(len(self.cluster.get(role, [])) for role in TRAINING_ROLES)

    @property
    def chief(self) -> TaskId:
        return TaskId(chief_role(role for role, tasks in self.cluster.items() if tasks), 0)

    @property
    def is_chief(self) -> bool:
        return self.task == self.chief

    @property
    def worker_rank(self) -> int:
        """This task's position among chief + workers (the chief first)."""
        has_chief = bool(self.cluster.get(CHIEF))
        if self.task.type == CHIEF:
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
        return ClusterConfig(cluster, TaskId(str(task.get("type", WORKER)), int(task.get("index", 0) or 0)))
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

    if len(clean.get(CHIEF, [])) > 1:
        raise ConfigError(
            f"TF_CONFIG names {len(clean[CHIEF])} chiefs; a cluster has at most one chief task "
            "(make the others \"worker\" tasks)"
        )
    if not clean.get(CHIEF) and not clean.get(WORKER):
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
