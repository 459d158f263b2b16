"""Time to check 8 test hosts against 1, measured in one run (goal: at most 1.5x).

Creates 8 SSH test hosts (network namespaces with their own sshd; root only),
then runs the full pre-flight check (probe, ports, all-to-all reachability) on
1 host and on all 8, alternating, and prints a table of the times and the ratio.

    sudo python bench/check_scaling.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from console import checks  # noqa: E402
from console import cluster as cl  # noqa: E402
from tests.testhosts import TestHosts, missing_requirements  # noqa: E402


def cluster_of(hosts, client_key) -> cl.Cluster:
    return cl.Cluster([cl.Host(name=h.name, address=h.address, user="root", key=str(client_key),
                               python=sys.executable) for h in hosts],
                      [cl.Task(host=h.name, port=23456) for h in hosts])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ns = ap.parse_args()
    problem = missing_requirements()
    if problem:
        raise SystemExit(problem)
    with tempfile.TemporaryDirectory() as tmp:
        hosts = TestHosts(8, Path(tmp)).up()
        os.environ["TFCC_KNOWN_HOSTS"] = str(hosts.known_hosts(Path(tmp) / "known_hosts"))
        os.environ["TFCC_SSH_CONFIG"] = str(Path(tmp) / "no_ssh_config")
        try:
            checks.check(cluster_of(hosts.hosts, hosts.client_key))  # deploy once to every host
            times = {1: [], 8: []}
            for _ in range(ns.rounds):
                for n in (1, 8):
                    t0 = time.monotonic()
                    report = checks.check(cluster_of(hosts.hosts[:n], hosts.client_key))
                    times[n].append(time.monotonic() - t0)
                    if not report.ready:
                        raise SystemExit(f"check of {n} hosts failed: {[str(p) for p in report.problems]}")
        finally:
            hosts.down()
    one, eight = statistics.median(times[1]), statistics.median(times[8])
    print(f"\ncheck scaling ({time.strftime('%Y-%m-%d')}, {ns.rounds} alternating rounds, median seconds)")
    print(f"{'hosts':>5} | {'seconds':>8} | rounds")
    for n in (1, 8):
        print(f"{n:>5} | {statistics.median(times[n]):>8.2f} | " + ", ".join(f"{t:.2f}" for t in times[n]))
    ratio = eight / one
    print(f"8 / 1 = {ratio:.2f}  (goal <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'})")


if __name__ == "__main__":
    main()
