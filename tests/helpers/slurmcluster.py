"""A real Slurm cluster on the SSH test hosts: munge, slurmctld, and a slurmd per host.

Each test host (``tests.helpers.testhosts``, a network namespace with its own sshd) is a
Slurm node of the same name; ``slurmctld`` runs on this machine at the bridge's address
(``10.213.0.1`` on test network 0; each network its own cluster and ports), one ``munged`` serves them all (its socket is a file: every namespace
reaches it). The hosts share this machine's file system, as a cluster's nodes share one:
a job's folder is the same path everywhere. Node names resolve inside the namespaces
(``/etc/netns/<host>/hosts``, which ``ip netns exec`` mounts over ``/etc/hosts``), as a
cluster's DNS would resolve them.

The cluster's configuration is its own file (``SLURM_CONF``, given to every SSH session):
one partition, ``debug``, of all the nodes (``MaxTime`` 2 hours, enforced when a job is
submitted), 4 CPUs a node (more than this machine has: ``config_overrides``), no
accounting. Needs root, the test hosts' needs, and Debian's ``slurm-wlm`` and ``munge``.

By hand:  python -m tests.helpers.slurmcluster up 2 /tmp/tfcc-slurm   (prints how to use it)
          python -m tests.helpers.slurmcluster down 2 /tmp/tfcc-slurm
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.helpers.testhosts import (HOST_NAME, NETWORK, SBIN_PATH, SUBNET, TestHosts,
                                    missing_requirements as hosts_missing, run_tool, tool)

# slurmctld runs here and checks that this machine's name is the controller's; it listens on the bridge's address.
CONTROLLER = socket.gethostname().split(".")[0]
CONTROLLER_ADDRESS = f"{SUBNET}.1"
# Not Slurm's defaults (6817, 6818): a real Slurm on this machine is left alone; each test network its own.
CTLD_PORT = 16817 + 2 * NETWORK
SLURMD_PORT = 16818 + 2 * NETWORK
PARTITION = "debug"
MAX_TIME = "2:00:00"             # the partition's limit: a longer --time is refused at submission
CPUS_PER_NODE = 4
MEMORY_PER_NODE = 4000           # MB
TOOLS = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")


def missing_requirements() -> str | None:
    problem = hosts_missing()
    if problem:
        return problem
    for name in TOOLS:
        if tool(name) is None:
            return f"a Slurm test cluster needs {name} (apt-get install slurm-wlm munge)"
    return None


class SlurmCluster:
    """``count`` SSH test hosts that are the nodes of one Slurm cluster; ``login`` is the first."""

    def __init__(self, count: int, workdir: Path, env: dict[str, str] | None = None, plain_shell: bool = False):
        self.workdir = Path(workdir)
        self.folder = self.workdir / "slurm"
        self.conf = self.folder / "slurm.conf"
        self.munge_socket = self.folder / "munge" / "munge.socket"
        self.hosts = TestHosts(count, self.workdir, env={**(env or {}), "SLURM_CONF": str(self.conf)},
                               plain_shell=plain_shell)
        self.nodes = [h.name for h in self.hosts.hosts]
        # the nodes as Slurm lists them (a host list: tfcch[0-1])
        self.node_list = f"{HOST_NAME}[0-{count - 1}]" if count > 1 else self.nodes[0]
        self._daemons: list[subprocess.Popen] = []

    @property
    def login(self):
        """The host people submit from (here also a node, as on small clusters)."""
        return self.hosts.hosts[0]

    def env(self) -> dict[str, str]:
        """This machine's environment for Slurm's commands run here (not in a host)."""
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": SBIN_PATH}

    # ------------------------------------------------------------------ up and down

    def up(self) -> "SlurmCluster":
        self.down()
        try:
            return self._up()
        except BaseException:
            self.down()  # nothing half up is left behind
            raise

    def _up(self) -> "SlurmCluster":
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write_names()
        self.hosts.up()  # each sshd starts with the names mounted in its namespace
        self._start_munge()
        self._write_conf()
        self._start(["slurmctld", "-D", "-c", "-f", str(self.conf)], self.folder / "slurmctld.out")
        for host in self.hosts.hosts:
            # In the host's network namespace and with its names, but not through `ip netns exec`, whose
            # fresh /sys has no cgroup file system (slurmd refuses to start without one).
            (self.folder / "spool" / host.name).mkdir(parents=True, exist_ok=True)
            self._start(["nsenter", f"--net=/run/netns/{host.name}", "unshare", "--mount", "sh", "-c",
                         'mount --bind "$0" /etc/hosts && exec "$@"', str(Path("/etc/netns") / host.name / "hosts"),
                         tool("slurmd"), "-D", "-N", host.name, "-f", str(self.conf)],
                        self.folder / f"slurmd-{host.name}.out")
        self.wait_until_idle()
        return self

    def down(self) -> None:
        if self._daemons:
            try:  # jobs first: their steps end before the daemons that track them
                self.cancel_all()
                self.wait_for_no_jobs(20)
            except (RuntimeError, OSError, subprocess.SubprocessError):
                pass
        for proc in reversed(self._daemons):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self._daemons):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._daemons = []
        # What an interrupted session left: daemons of this cluster (by its config file) and jobs' steps.
        # (jobs' steps are in the namespaces: they go with them)
        for pattern in (f"slurmctld.*{self.conf}", f"slurmd.*{self.conf}", f"munged.*{self.munge_socket}"):
            subprocess.run(["pkill", "-KILL", "-f", pattern], check=False)
        self.hosts.down()
        for host in self.hosts.hosts:
            shutil.rmtree(Path("/etc/netns") / host.name, ignore_errors=True)

    def _start(self, argv: list[str], log: Path) -> subprocess.Popen:
        argv = [tool(argv[0]) or argv[0], *argv[1:]]
        proc = subprocess.Popen(argv, env=self.env(), stdout=subprocess.DEVNULL, stderr=open(log, "ab"),
                                stdin=subprocess.DEVNULL)
        self._daemons.append(proc)
        return proc

    def _write_names(self) -> None:
        """Every node's name, resolved in every namespace (and each namespace's own name, as a node's)."""
        base = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else "127.0.0.1 localhost\n"
        names = "".join(f"{h.address} {h.name}\n" for h in self.hosts.hosts) + f"{CONTROLLER_ADDRESS} {CONTROLLER}\n"
        for host in self.hosts.hosts:
            folder = Path("/etc/netns") / host.name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text(base.rstrip("\n") + "\n# tfcc's Slurm test cluster\n" + names)

    def _start_munge(self) -> None:
        folder = self.munge_socket.parent
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        key = folder / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o600)
        proc = self._start(["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                            f"--key-file={key}", f"--pid-file={folder / 'munged.pid'}",
                            f"--log-file={folder / 'munged.log'}", f"--seed-file={folder / 'munged.seed'}"],
                           folder / "munged.out")
        _wait(lambda: self.munge_socket.exists(), 20, lambda: f"munged did not start: {_tail(folder / 'munged.log')}",
              proc)

    def _write_conf(self) -> None:
        f = self.folder
        (f / "state").mkdir(exist_ok=True)
        (f / "spool").mkdir(exist_ok=True)
        (f / "plugstack.conf").write_text("")
        nodes = self.node_list
        addresses = ",".join(h.address for h in self.hosts.hosts)
        self.conf.write_text(f"""\
# tfcc's Slurm test cluster (tests/helpers/slurmcluster.py)
ClusterName=tfcctest
SlurmctldHost={CONTROLLER}({CONTROLLER_ADDRESS})
SlurmctldPort={CTLD_PORT}
SlurmdPort={SLURMD_PORT}
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={f / 'state'}
SlurmdSpoolDir={f / 'spool'}/%n
SlurmctldPidFile={f / 'slurmctld.pid'}
SlurmdPidFile={f / 'slurmd-%n.pid'}
SlurmctldLogFile={f / 'slurmctld.log'}
SlurmdLogFile={f / 'slurmd-%n.log'}
PlugStackConfig={f / 'plugstack.conf'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
NodeName={nodes} NodeAddr={addresses} CPUs={CPUS_PER_NODE} RealMemory={MEMORY_PER_NODE} State=UNKNOWN
PartitionName={PARTITION} Nodes={nodes} Default=YES MaxTime={MAX_TIME} State=UP
""")

    # ------------------------------------------------------------------ using it

    def command(self, *argv: str, host=None, check: bool = True, timeout: float = 60,
                env: dict[str, str] | None = None, input: str | None = None) -> subprocess.CompletedProcess:
        """One of Slurm's commands, run on ``host`` (a test host: in its namespace) or here, in ``env`` (this
        process's by default) with the cluster's configuration."""
        prefix = ["ip", "netns", "exec", host.name] if host is not None else []
        return subprocess.run([*prefix, *argv], env={**(env if env is not None else os.environ),
                                                     "SLURM_CONF": str(self.conf), "PATH": SBIN_PATH},
                              capture_output=True, text=True, check=check, timeout=timeout, input=input)

    def wait_until_idle(self, timeout: float = 60) -> None:
        """Until every node has registered and is idle."""
        def idle() -> bool:
            out = self.command("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split()
            states = dict(zip(out[::2], out[1::2]))
            return all(states.get(node) == "idle" for node in self.nodes)
        _wait(idle, timeout, lambda: "the Slurm nodes did not come up idle: "
              + self.command("sinfo", "-N", check=False).stdout + _tail(self.folder / "slurmctld.log")
              + "".join(_tail(self.folder / f"slurmd-{n}.log") for n in self.nodes))

    def jobs(self) -> list[dict]:
        """The jobs Slurm knows of now: id, state, reason, nodes."""
        out = self.command("squeue", "-h", "-a", "-o", "%i|%T|%r|%N|%j", check=False).stdout
        jobs = []
        for line in out.splitlines():
            job_id, state, reason, nodes, name = line.split("|", 4)
            jobs.append({"id": job_id, "state": state, "reason": reason, "nodes": nodes, "name": name})
        return jobs

    @contextlib.contextmanager
    def without_slurm(self, host):
        """``host``'s SSH sessions find none of Slurm's commands (each hidden by /dev/null in its sshd's mount
        namespace, so not executable), as on a machine without Slurm; the host stays a node."""
        mounts = f"/proc/{host.sshd.pid}/ns/mnt"
        hidden = []
        try:
            for name in ("sbatch", "squeue", "scancel", "sinfo", "scontrol", "srun"):
                path = tool(name)
                run_tool(["nsenter", f"--mount={mounts}", "mount", "--bind", "/dev/null", path], check=True)
                hidden.append(path)
            yield host
        finally:
            for path in hidden:
                run_tool(["nsenter", f"--mount={mounts}", "umount", path], check=False)

    def job_ids(self) -> set[str]:
        """Every job the controller still knows of (ended ones too, for MinJobAge): a submission adds one."""
        out = self.command("scontrol", "show", "jobs", "-o", check=False).stdout
        return set(re.findall(r"^JobId=(\d+)", out, re.M))

    def cancel_all(self) -> None:
        self.command("scancel", "--full", "--quiet", *[job["id"] for job in self.jobs()], check=False)

    def wait_for_no_jobs(self, timeout: float = 60) -> None:
        _wait(lambda: not self.jobs(), timeout, lambda: f"jobs still in the queue: {self.jobs()}")


def _tail(path: Path, size: int = 2000) -> str:
    try:
        return f"\n--- {path.name}:\n" + path.read_text(errors="replace")[-size:]
    except OSError:
        return ""


def _wait(condition, timeout: float, why, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
            raise RuntimeError(why())
        pause.wait(0.1)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("up", "down"):
        print(__doc__)
        return 2
    cluster = SlurmCluster(int(argv[2]), Path(argv[3] if len(argv) > 3 else "/tmp/tfcc-slurm"))
    if argv[1] == "down":
        cluster.down()
        return 0
    problem = missing_requirements()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    cluster.up()
    print(f"Slurm cluster up: nodes {', '.join(cluster.nodes)}, partition {PARTITION}; the login host is "
          f"{cluster.login.name}:")
    print(f"  ssh -i {cluster.hosts.client_key} root@{cluster.login.address} sinfo")
    print(f"  (here: SLURM_CONF={cluster.conf} sinfo)")
    print(f"  down: python -m tests.helpers.slurmcluster down {len(cluster.nodes)} {cluster.workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
