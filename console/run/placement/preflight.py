"""A Slurm cluster seen from its login host: what its partitions are, and whether it would take a job (Qt-free).

A cluster file with ``[slurm]`` names a login host instead of hosts (console.cluster.Slurm). Before
anything is submitted, ``preflight`` asks the login host over SSH, in one command: are Slurm's commands
there, which partitions are up (their nodes and time limits), and would ``sbatch --test-only`` take the
job as the cluster file asks for it (partition, nodes, tasks per node, GPUs, CPUs, time, account, QOS).
Each refusal is one ``SlurmError`` line that says what to do; ``--test-only`` submits nothing.
"""

from __future__ import annotations

import logging
import re
import shlex
from dataclasses import dataclass, field

from console import cluster as cl
from console.errors import TfccError
from console.remote.ssh import SSHConnection

log = logging.getLogger("console.run.placement")

COMMANDS = ("sbatch", "squeue", "scancel", "sinfo", "scontrol")
PREFLIGHT_TIMEOUT = 60.0
_MARK = "tfcc-slurm:"  # the lines of the pre-flight's answer that are its own (the rest is Slurm's)


class SlurmError(TfccError):
    """A Slurm cluster that would not take the job as asked (nothing was submitted); the message says what to do."""


@dataclass
class Partition:
    name: str
    up: bool
    nodes: int
    time_limit: str          # as sinfo prints it: 2:00:00, 1-00:00:00, infinite
    default: bool = False


@dataclass
class Preflight:
    """What the login host said: its partitions, and how sbatch --test-only answered."""

    login: str
    partitions: list[Partition] = field(default_factory=list)
    start: str = ""          # sbatch --test-only's expected start ("to start at ... on nodes ...")
    slurm: cl.Slurm | None = None  # what was asked for (the cluster file's [slurm])

    def partition(self, name: str) -> Partition | None:
        wanted = name or next((p.name for p in self.partitions if p.default), "")
        return next((p for p in self.partitions if p.name == wanted), None)

    def as_dict(self) -> dict:
        """``tfcc check --json``'s answer for a Slurm cluster."""
        return {"ready": True, "login": self.login, "partition": self.partition(self.slurm.partition).name,
                "start": self.start, "partitions": [vars(p) for p in self.partitions]}

    def lines(self) -> list[str]:
        """``tfcc check``'s table of the partitions, then the line that says the job would be taken."""
        s, part = self.slurm, self.partition(self.slurm.partition)
        rows = [f"{'partition':<16} {'state':<6} {'nodes':>5}  time limit"]
        rows += [f"{p.name + ('*' if p.default else ''):<16} {'up' if p.up else 'down':<6} {p.nodes:>5}  "
                 f"{p.time_limit}" for p in self.partitions]
        return rows + ["", f"ready: Slurm on {self.login} would take the job: {s.nodes} node(s) x {s.tasks_per_node} "
                           f"task(s) in {part.name}, time {s.time}"
                       + (f", expected to start {self.start}" if self.start else "")
                       + " (sbatch --test-only: nothing submitted)"]


def preflight_command(cluster: cl.Cluster) -> str:
    """The one shell command the login host runs: each missing command named, the partitions, the test."""
    missing = " ".join(COMMANDS)
    test = " ".join(shlex.quote(o) for o in ["sbatch", "--test-only", *cluster.slurm.sbatch_options(),
                                              "--job-name=tfcc-check", "--wrap=true"])
    return (f'for c in {missing}; do p=$(command -v "$c" 2>/dev/null); [ -n "$p" ] && [ -x "$p" ] || '
            f'echo "{_MARK}missing $c"; done; '
            f'p=$(command -v sbatch 2>/dev/null); [ -n "$p" ] && [ -x "$p" ] || exit 0; '
            f'echo "{_MARK}partitions"; sinfo -h -o "%P|%a|%l|%D" 2>&1; echo "{_MARK}test"; '
            f'{test} 2>&1; echo "{_MARK}code $?"')


def preflight(cluster: cl.Cluster, ask_host_key=None, timeout: float = PREFLIGHT_TIMEOUT,
              connection: SSHConnection | None = None) -> Preflight:
    """Ask the login host whether Slurm would take this cluster file's job; ``SlurmError`` (one line) if not."""
    slurm = cluster.slurm
    if slurm is None:
        raise ValueError("preflight is for a cluster file with [slurm]")
    own = connection is None
    conn = connection or SSHConnection(slurm.login, user=slurm.user, port=slurm.port, key=slurm.key,
                                       ask=ask_host_key, timeout=timeout)
    try:
        code, out, err = conn.run(preflight_command(cluster), timeout=timeout)
    finally:
        if own:
            conn.close()
    log.info("slurm pre-flight on %s: exit %s\n%s%s", slurm.login, code, out, err)
    return read_answer(cluster, out)


def read_answer(cluster: cl.Cluster, out: str) -> Preflight:
    """The pre-flight's answer (its marked sections) as a ``Preflight``, or the ``SlurmError`` it amounts to."""
    slurm = cluster.slurm
    login = slurm.login
    missing, partitions, test, code, section = [], [], [], None, ""
    for line in out.splitlines():
        if line.startswith(_MARK):
            word = line[len(_MARK):].strip()
            if word.startswith("missing "):
                missing.append(word.split(" ", 1)[1])
            elif word.startswith("code "):
                code = int(word.split(" ", 1)[1]) if word.split(" ", 1)[1].isdigit() else 1
            else:
                section = word
            continue
        if section == "partitions":
            partitions.append(line)
        elif section == "test":
            test.append(line)
    if "sbatch" in missing or len(missing) == len(COMMANDS):
        raise SlurmError(f"{login} has no Slurm commands (no {', '.join(missing)} on its PATH)",
                         f"set slurm.login to the host you submit jobs from (where sbatch works in an ssh "
                         f"session), or make sbatch reachable on {login}'s PATH for non-interactive logins")
    if missing:
        raise SlurmError(f"{login} has sbatch but not {', '.join(missing)}",
                         f"install Slurm's client commands on {login}, or use another login host")
    answer = Preflight(login, slurm=slurm)
    for line in partitions:
        fields = line.strip().split("|")
        if len(fields) != 4:
            continue
        name, avail, limit, nodes = fields
        count = int(nodes) if nodes.isdigit() else 0
        known = answer.partition(name.rstrip("*")) if answer.partitions else None
        if known is not None and known.name == name.rstrip("*"):  # sinfo split it over lines: add them up
            known.nodes += count
            continue
        answer.partitions.append(Partition(name.rstrip("*"), avail == "up", count, limit, name.endswith("*")))
    if not answer.partitions:
        said = " ".join(partitions).strip()
        raise SlurmError(f"Slurm on {login} lists no partitions" + (f" ({_first_line(said)})" if said else ""),
                         "check that its controller answers there (sinfo), or ask the cluster's admins")
    names = ", ".join(p.name + (" (default)" if p.default else "") for p in answer.partitions)
    part = answer.partition(slurm.partition)
    if part is None:
        if slurm.partition:
            raise SlurmError(f"Slurm on {login} has no partition {slurm.partition!r} (it has {names})",
                             "set slurm.partition to one of them")
        raise SlurmError(f"Slurm on {login} has no default partition (it has {names})",
                         "set slurm.partition to one of them")
    if slurm.nodes > part.nodes:
        raise SlurmError(f"slurm.nodes is {slurm.nodes}, but partition {part.name} has {part.nodes} node"
                         f"{'s' if part.nodes != 1 else ''}",
                         f"ask for at most {part.nodes} (more tasks_per_node instead), or another partition ({names})")
    said = "\n".join(test).strip()
    if code != 0:
        raise SlurmError(*_refusal(cluster, part, said))
    match = re.search(r"to start at (\S+)", said)
    answer.start = match.group(1) if match else ""
    return answer


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else "no answer")[:300]


def _refusal(cluster: cl.Cluster, part: Partition, said: str) -> tuple[str, str]:
    """sbatch --test-only's refusal, as the cause and the fix (its own words are kept)."""
    slurm = cluster.slurm
    words = said.lower()
    first = _first_line(re.sub(r"^(sbatch: error: |allocation failure: )", "", said, flags=re.M))
    if "time limit" in words:
        return (f"Slurm refuses the time limit {slurm.time} in partition {part.name} (its limit is "
                f"{part.time_limit}: {first})", f"set slurm.time to at most {part.time_limit}")
    if "partition" in words and "invalid" in words:
        return (f"Slurm refuses partition {part.name} ({first})", "set slurm.partition to one you may use (sinfo)")
    if any(w in words for w in ("node count", "node configuration", "cpu count", "processors")):
        return (f"partition {part.name} cannot hold {slurm.nodes} node(s) of {slurm.tasks_per_node} task(s) with "
                f"{slurm.cpus_per_task} CPUs" + (f" and {slurm.gpus_per_task} GPUs" if slurm.gpus_per_task else "")
                + f" each ({first})", "lower slurm.nodes, tasks_per_node, cpus_per_task or gpus_per_task")
    if "account" in words:
        return f"Slurm refuses account {slurm.account!r} ({first})", "set slurm.account to one of yours (sacctmgr show assoc user=$USER)"
    if "qos" in words:
        return f"Slurm refuses QOS {slurm.qos!r} ({first})", "set slurm.qos to one your account may use"
    if "controller" in words or "connection refused" in words:
        return f"Slurm's controller does not answer on {cluster.slurm.login} ({first})", "try again, or ask the cluster's admins"
    return f"Slurm would not take the job ({first})", "change [slurm] in the cluster file as it says"
