"""Time to check 8 test hosts against 1, measured in one run (goal: at most 1.5x).

Creates 8 SSH test hosts (network namespaces with their own sshd; root only),
then runs the full pre-flight check (probe, ports, all-to-all reachability) on
1 host and on all 8, alternating, and prints a table of the times and the ratio.

The 8 "hosts" share this machine's cores with the console, so the check of 8
cannot be faster than all the CPU it uses (console, every sshd, shell and agent)
divided by the cores: the table shows that floor beside the wall time. On real
hosts only the console's part is shared.

By default the test hosts' logins skip this machine's ~/.bashrc, as on a fresh
host (here it runs ``pyenv init``: 0.15 CPU-s per SSH command, paid 8 times on
the same cores); ``--user-rc`` keeps it.

    sudo python bench/check_scaling.py [--rounds 3] [--user-rc]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from console import checks  # noqa: E402
from console import cluster as cl  # noqa: E402
from tests.helpers.testhosts import TestHosts, missing_requirements  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cluster_of(hosts, client_key) -> cl.Cluster:
    return cl.Cluster([cl.Host(name=h.name, address=h.address, user="root", key=str(client_key),
                               python=sys.executable) for h in hosts],
                      [cl.Task(host=h.name, port=23456) for h in hosts])


def hosts_cpu(hosts) -> float:
    """CPU seconds of every test host's sshd and its finished sessions (shells, agents)."""
    total = 0.0
    for h in hosts:
        fields = Path(f"/proc/{h.sshd.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15]) / TICK  # utime stime cutime cstime
    return total


def sessions_ended(hosts, timeout: float = 10.0) -> None:
    """Wait until every host's sshd has reaped its sessions (their CPU is counted only then)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(subprocess.run(["pgrep", "-P", str(h.sshd.pid)], capture_output=True).returncode for h in hosts):
            return
        time.sleep(0.02)  # polling a process table; not a test


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--user-rc", action="store_true", help="let logins run this machine's ~/.bashrc")
    ns = ap.parse_args()
    problem = missing_requirements()
    if problem:
        raise SystemExit(problem)
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        hosts = TestHosts(8, Path(tmp), plain_shell=not ns.user_rc).up()
        os.environ["TFCC_KNOWN_HOSTS"] = str(hosts.known_hosts(Path(tmp) / "known_hosts"))
        os.environ["TFCC_SSH_CONFIG"] = str(Path(tmp) / "no_ssh_config")
        try:
            checks.check(cluster_of(hosts.hosts, hosts.client_key))  # deploy once to every host
            sessions_ended(hosts.hosts)
            rows = {1: [], 8: []}
            for _ in range(ns.rounds):
                for n in (1, 8):
                    before_hosts, before_console = hosts_cpu(hosts.hosts), time.process_time()
                    t0 = time.monotonic()
                    report = checks.check(cluster_of(hosts.hosts[:n], hosts.client_key))
                    wall = time.monotonic() - t0
                    console_cpu = time.process_time() - before_console
                    if not report.ready:
                        raise SystemExit(f"check of {n} hosts failed: {[str(p) for p in report.problems]}")
                    sessions_ended(hosts.hosts)
                    rows[n].append((wall, console_cpu, hosts_cpu(hosts.hosts) - before_hosts))
        finally:
            hosts.down()
    med = {n: [statistics.median(r[i] for r in rows[n]) for i in range(3)] for n in rows}
    print(f"\ncheck scaling ({time.strftime('%Y-%m-%d')}, {ns.rounds} alternating rounds, medians, "
          f"{cores} cores, logins {'with' if ns.user_rc else 'without'} this machine's ~/.bashrc)")
    print(f"{'hosts':>5} | {'wall s':>6} | {'console CPU s':>13} | {'hosts CPU s':>11} | "
          f"{'CPU floor s':>11} | wall per round")
    for n in (1, 8):
        wall, ccpu, hcpu = med[n]
        print(f"{n:>5} | {wall:>6.2f} | {ccpu:>13.2f} | {hcpu:>11.2f} | {(ccpu + hcpu) / cores:>11.2f} | "
              + ", ".join(f"{r[0]:.2f}" for r in rows[n]))
    ratio = med[8][0] / med[1][0]
    print(f"8 / 1 = {ratio:.2f}  (goal <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'})")
    floor8 = (med[8][1] + med[8][2]) / cores
    print(f"8 hosts' wall / their CPU floor = {med[8][0] / floor8:.2f}  (near 1: the check waits on nothing but "
          f"the {cores} shared cores; the console itself used {med[8][1]:.2f} CPU-s for 8 hosts)")


if __name__ == "__main__":
    main()
