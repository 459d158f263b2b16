"""Time of `tfcc stop` for a run on 4 hosts against a run on 1 host, measured in one run (goal: at most 1.3x).

Creates 4 SSH test hosts (network namespaces with their own sshd; root only).
Each round starts a run with one task per host, on 1 host and on all 4
(alternating), and times `tfcc stop RUN` in a fresh console process, as a user
runs it. The task is not TensorFlow but a tiny script that waits for a signal:
SIGTERM ends it at once, so the time is reaching the hosts and stopping there,
never the grace period. Every task must be gone when `tfcc stop` returns.

"start-up" is the same command for a run it does not know: the interpreter, the
imports and the manifest look-up, paid once whatever the number of hosts. The
test hosts' logins skip this machine's ~/.bashrc, as on a fresh host.

    sudo python bench/stop_scaling.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console import cluster as cl  # noqa: E402
from console.run.runner import Run  # noqa: E402
from console.store.manifests import new_run_id  # noqa: E402
from tests.helpers.testhosts import TestHosts, missing_requirements  # noqa: E402

SIZES = (1, 4)
GRACE = 5.0
# Writes its PID into the folder it is given (so the bench knows it runs), then waits for a signal.
WAITER = "import os, signal, sys\nopen(os.path.join(sys.argv[1], str(os.getpid())), 'w').close()\nsignal.pause()\n"
TFCC = [sys.executable, "-m", "console.cli"]


def start_run(hosts: TestHosts, count: int, script: Path, folder: Path) -> tuple[str, list[int]]:
    """Start a run of one waiting task on each of the first ``count`` hosts; its id and the tasks' PIDs."""
    folder.mkdir()
    chosen = hosts.hosts[:count]
    run = Run(cl.Cluster([cl.Host(name=h.name, address=h.address, user="root", key=str(hosts.client_key),
                                  python=sys.executable) for h in chosen],
                         [cl.Task(host=h.name, port=23456) for h in chosen],
                         cl.Training(script=str(script), args=[str(folder)])), new_run_id())
    run.start()
    run.detach()
    deadline, pause = time.monotonic() + 60, threading.Event()
    while len(pids := [int(p.name) for p in folder.iterdir()]) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"run {run.run_id}: only {len(pids)} of {count} tasks started in 60 s")
        pause.wait(0.02)
    return run.run_id, pids


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def timed_stop(run_id: str, pids: list[int]) -> float:
    t0 = time.monotonic()
    out = subprocess.run([*TFCC, "stop", run_id, "--grace", str(GRACE)], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise SystemExit(f"tfcc stop {run_id} exited {out.returncode}:\n{out.stdout}{out.stderr[-3000:]}")
    left = [pid for pid in pids if running(pid)]
    if left:
        raise SystemExit(f"tfcc stop {run_id} returned, but tasks {left} still run:\n{out.stdout}")
    return wall


def start_up() -> float:
    """Wall time of `tfcc stop` for a run it does not know (it fails before reaching any host)."""
    t0 = time.monotonic()
    out = subprocess.run([*TFCC, "stop", "no-such-run"], cwd=ROOT, capture_output=True, text=True)
    if "Traceback" in out.stderr:
        raise SystemExit(f"tfcc stop no-such-run crashed:\n{out.stderr[-3000:]}")
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ns = ap.parse_args()
    problem = missing_requirements()
    if problem:
        raise SystemExit(problem)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        script = work / "waiter.py"
        script.write_text(WAITER)
        os.environ["TFCC_CONSOLE_HOME"] = str(work / "console-home")
        os.environ["TFCC_SSH_CONFIG"] = str(work / "no_ssh_config")
        hosts = TestHosts(max(SIZES), work / "hosts", plain_shell=True).up()
        os.environ["TFCC_KNOWN_HOSTS"] = str(hosts.known_hosts(work / "known_hosts"))
        try:
            timed_stop(*start_run(hosts, max(SIZES), script, work / "warm-up"))  # deploys to every host
            walls: dict[int, list[float]] = {n: [] for n in SIZES}
            base = []
            for r in range(ns.rounds):
                base.append(start_up())
                for n in (SIZES if r % 2 == 0 else SIZES[::-1]):
                    walls[n].append(timed_stop(*start_run(hosts, n, script, work / f"r{r}-{n}")))
        finally:
            hosts.down()
    med = {n: statistics.median(walls[n]) for n in SIZES}
    up = statistics.median(base)
    print(f"\n`tfcc stop` scaling ({time.strftime('%Y-%m-%d')}, {ns.rounds} alternating rounds, medians, "
          f"{len(os.sched_getaffinity(0))} cores, one waiting task per host, grace {GRACE:g} s)")
    print(f"{'hosts':>5} | {'wall s':>6} | {'beyond start-up s':>17} | wall per round")
    for n in SIZES:
        print(f"{n:>5} | {med[n]:>6.2f} | {med[n] - up:>17.2f} | " + ", ".join(f"{w:.2f}" for w in walls[n]))
    print(f"start-up (`tfcc stop` of an unknown run): {up:.2f} s")
    ratio = med[SIZES[-1]] / med[SIZES[0]]
    print(f"{SIZES[-1]} / {SIZES[0]} = {ratio:.2f}  (goal <= 1.3: {'met' if ratio <= 1.3 else 'MISSED'}); "
          f"beyond start-up {(med[SIZES[-1]] - up) / (med[SIZES[0]] - up):.2f}")


if __name__ == "__main__":
    main()
