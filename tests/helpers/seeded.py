"""Faults seeded into a running task for the "why is it slow?" suite (tests/console/run/test_why_slow.py and
bench/why_slow.py): a CPU limit on a task's processes (a cgroup), a slow link on an SSH test host (``tc``).

Both need root, as the SSH test hosts do. ``python -m tests.helpers.seeded --check`` says what this machine has.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import subprocess
import sys
import time
from pathlib import Path

from agent import runs, system
from console import cluster as cl
from console import speed
from console.run.runner import Run
from console.run.session import RunSession
from console.states import SessionKind
from tests.helpers.testhosts import TestHost, run_tool

CGROUP_NAME = "tfcc-seeded"


def _cpu_mount() -> tuple[Path, int]:
    """The CPU controller's folder and the cgroup version (1: ``cpu.cfs_quota_us``, 2: ``cpu.max``)."""
    root = Path(system.CGROUP_ROOT)
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        if (root / name / "cpu.cfs_period_us").exists() or (root / name / "cgroup.procs").exists():
            return root / name, 1
    if "cpu" in ((root / "cgroup.controllers").read_text() if (root / "cgroup.controllers").exists() else ""):
        return root, 2
    raise RuntimeError("no cgroup CPU controller here (neither v1 /sys/fs/cgroup/cpu nor v2 cpu.max)")


def task_pids(run_id: str, task: str, home: Path | None = None) -> list[int]:
    """The live processes of a task's process group (its supervisor, its trainer and what that started)."""
    folder = (Path(home) / "runs" / run_id / task) if home is not None else runs.task_dir(run_id, task)
    state = runs.read_json(folder / "state.json") or {}
    group = system.process_groups([state.get("pgid") or state.get("pid")])
    return [pid for _, _, pids in group.values() for pid in pids]


@contextlib.contextmanager
def cpu_limited(pids: list[int], cores: float):
    """Limit ``pids`` together to ``cores`` CPUs (a cgroup's quota) while in the block; then let them go."""
    mount, version = _cpu_mount()
    folder = mount / f"{CGROUP_NAME}-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    if version == 2:
        with open(mount / "cgroup.subtree_control", "w") as f:
            f.write("+cpu")
    period = 100_000
    if version == 1:
        (folder / "cpu.cfs_period_us").write_text(str(period))
        (folder / "cpu.cfs_quota_us").write_text(str(int(cores * period)))
    else:
        (folder / "cpu.max").write_text(f"{int(cores * period)} {period}")
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, OSError):
                (folder / "cgroup.procs").write_text(str(pid))
        yield folder
    finally:
        for pid in (folder / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, OSError):
                (mount / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            folder.rmdir()


def _tc(host: TestHost, *args: str) -> subprocess.CompletedProcess:
    return run_tool(["ip", "netns", "exec", host.name, "tc", *args], capture_output=True, text=True)


def link_device(host: TestHost) -> str:
    return f"{host.veth}p"


@contextlib.contextmanager
def slow_link(host: TestHost, delay_ms: int = 40, rate: str = "40mbit"):
    """Slow ``host``'s link while in the block: ``delay_ms`` added each way out (``tc netem``) where the kernel has
    netem, else a ``rate`` limit (``tc tbf``: each packet waits in its queue). Yields what it did, in words."""
    device = link_device(host)
    done = _tc(host, "qdisc", "replace", "dev", device, "root", "netem", "delay", f"{delay_ms}ms")
    if done.returncode == 0:
        words = f"netem: {delay_ms} ms added to each packet out of {host.name}"
    else:
        if "unknown" not in (done.stderr or "").lower():
            raise RuntimeError(f"tc netem on {host.name}: {done.stderr.strip()}")
        limited = _tc(host, "qdisc", "replace", "dev", device, "root", "tbf", "rate", rate, "burst", "32kb",
                      "latency", "400ms")
        if limited.returncode != 0:
            raise RuntimeError(f"tc tbf on {host.name}: {limited.stderr.strip()}")
        words = (f"this kernel has no netem ({done.stderr.strip()}): {host.name}'s link limited to {rate} "
                 f"(tc tbf) instead")
    try:
        yield words
    finally:
        _tc(host, "qdisc", "del", "dev", device, "root")


# --------------------------------------------------------------------------- a seeded run, measured

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "data" / "scripts" / "why_slow"
TRAINING_SECONDS = 180   # a run's TensorFlow start and first steps on 2 busy cores
STEPS_SEEDED = 10        # steps trained with the fault in place before asking


def script_cluster(folder: Path, hosts=None, env: dict | None = None) -> cl.Cluster:
    """2 workers of the why_slow script: on this machine, or on two SSH test hosts."""
    copy = folder / "why_slow"
    if not copy.exists():
        shutil.copytree(SCRIPT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if hosts is None:
        machines = [cl.Host(name="here", local=True)]
        tasks = [cl.Task(host="here"), cl.Task(host="here")]
    else:
        machines = [cl.Host(name=h.name, address=h.address, user="root", key=str(hosts.client_key),
                            python=sys.executable) for h in hosts.hosts[:2]]
        tasks = [cl.Task(host=h.name) for h in hosts.hosts[:2]]
    return cl.Cluster(machines, tasks, cl.Training(script=str(copy / "main.py"), env=dict(env or {})))


def measured(cluster: cl.Cluster, run_id: str, seed=None, show: bool = False,
             then=None) -> tuple[speed.Verdict, dict, float]:
    """Start the run, wait for training, seed the fault (``seed(run)``: a context manager), ask why it is slow;
    (the verdict, its event's message, seconds from the ask to the verdict). ``then(run)``, if given, is called
    with the run still training after the verdict. The run is stopped after."""
    run = Run(cluster, run_id)
    run.start()
    session = RunSession(run)
    verdicts: queue.SimpleQueue = queue.SimpleQueue()
    said: list[str] = []  # what else the session said (a failure's message shows it)
    session.subscribe(lambda e: verdicts.put((time.monotonic(), e.message)) if e.kind == SessionKind.EXPLAINED
                      else said.append(f"{e.kind}: {e.text}") if e.text else None)
    session.follow()
    try:
        deadline = time.monotonic() + TRAINING_SECONDS
        while session.measure_problem() is not None:
            assert time.monotonic() < deadline, f"not training after {TRAINING_SECONDS} s: {session.measure_problem()}"
            assert not session.wait(0.2), [t.phase for t in run.tasks]
        with seed(run) if seed is not None else contextlib.nullcontext():
            after = session._newest_step + STEPS_SEEDED  # some training with the fault in place
            while session._newest_step < after:
                assert not session.wait(0.2), [t.phase for t in run.tasks]
            asked = time.monotonic()
            session.why_slow()
            try:
                at, message = verdicts.get(timeout=speed.ANSWER_SECONDS + 10)
            except queue.Empty:
                raise AssertionError(f"no verdict in {speed.ANSWER_SECONDS + 10:.0f} s; tasks "
                                     f"{[t.phase for t in run.tasks]}; the session said {said[-12:]}") from None
        if show:
            print("\n".join(session.verdict.table() + session.verdict.lines()))
        if then is not None:
            then(run)
        return session.verdict, message, at - asked
    finally:
        session.detach()
        run.stop_each(grace=0)


def check() -> str:
    lines = []
    try:
        mount, version = _cpu_mount()
        lines.append(f"cgroup CPU controller: v{version} at {mount}")
    except (RuntimeError, OSError) as exc:
        lines.append(f"no cgroup CPU limit: {exc}")
    config = Path("/proc/config.gz")
    lines.append("kernel config: " + ("see /proc/config.gz (CONFIG_NET_SCH_NETEM)" if config.exists() else "unknown"))
    return "\n".join(lines)


if __name__ == "__main__":
    if "--check" in sys.argv:
        print(check())
