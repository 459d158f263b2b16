"""How fast a step record reaches the console, and what following a quiet task costs the agent.

Latency: a real short training run (2 workers, ``digits`` by default) followed by a run session
with a metrics store, as the window follows one. For every step record: the time it reached the
store's ``ingest`` less the record's own ``time`` (when the trainer made it; the workers and the
console share this machine's clock). Once with both workers on this machine (a local host), once
on the SSH test hosts (two network namespaces with their own sshd, tests/helpers/testhosts.py;
root only, skipped otherwise). Goal: p95 <= 100 ms.

Idle cost: the agent's CPU time (percent of one core) while it follows a task that writes nothing
for ``--idle-seconds``, with inotify and with its polling fallback (``TFCC_AGENT_POLL``), and while
it also samples the host's load once a second (the ``system`` op). Goal: following < 1 %.

The SSH test hosts have fixed names (namespaces tfcch0 and tfcch1, bridge tfccbr0): do not run
this while the SSH tests run on the same machine (each would take the other's hosts down).

    python bench/latency.py [--workload digits] [--epochs 2] [--idle-seconds 10] [--no-ssh]   (as root for SSH)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent import runs  # noqa: E402
from agent.protocol import POLL_ONLY_VARIABLE  # noqa: E402
from console import cluster as cl  # noqa: E402
from console.errors import TfccError  # noqa: E402
from console.store.metrics import MetricsStore  # noqa: E402
from console.remote.channel import AgentClient  # noqa: E402
from console.remote.local import local_agent  # noqa: E402
from console.run.runner import Run  # noqa: E402
from console.run.session import RunSession  # noqa: E402

TF_ENV = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}


class TimedStore(MetricsStore):
    """A metrics store that notes, for each step record, how long ago the trainer made it."""

    def __init__(self):
        super().__init__()
        self.delays: list[float] = []

    def ingest(self, task, records):
        now = time.time()
        self.delays += [now - r["time"] for r in records
                        if r.get("type") == "step" and isinstance(r.get("time"), (int, float))]
        super().ingest(task, records)


def follow_a_run(cluster: cl.Cluster, run_id: str) -> tuple[list, bool]:
    """Start ``cluster``'s run, follow it to its end; the step records' delays, and whether it finished."""
    run = Run(cluster, run_id)
    run.start()
    store = TimedStore()
    session = RunSession(run, store)
    session.follow()
    try:
        if not session.wait(1800):
            raise SystemExit(f"run {run_id} did not end in 30 minutes")
    finally:
        session.detach()
        try:
            run.stop(grace=0)
        except TfccError as exc:
            print(f"latency: could not stop run {run_id}: {exc}", file=sys.stderr)
    return store.delays, all(t.phase == "finished" for t in run.tasks)


def training(ns) -> cl.Training:
    return cl.Training(workload=ns.workload, epochs=ns.epochs, per_replica_batch=16)


def local_latency(home: Path, ns) -> dict:
    os.environ["TFCC_HOME"] = str(home / "host")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         training(ns))
    return summary(*follow_a_run(cluster, "local"))


def ssh_latency(home: Path, ns) -> dict | str:
    from tests.helpers.testhosts import TestHosts, missing_requirements

    problem = missing_requirements()
    if problem:
        return f"skipped: {problem}"
    os.environ["TFCC_HOME"] = str(home / "console-host")
    os.environ["TFCC_KNOWN_HOSTS"] = str(home / "known_hosts")
    os.environ["TFCC_SSH_CONFIG"] = str(home / "ssh_config")
    hosts = TestHosts(2, home / "hosts", env=TF_ENV, plain_shell=True).up()
    try:
        hosts.known_hosts(home / "known_hosts")
        cluster = cl.Cluster([cl.Host(name=h.name, address=h.address, user="root", key=str(hosts.client_key),
                                      python=sys.executable) for h in hosts.hosts],
                             [cl.Task(host=h.name) for h in hosts.hosts], training(ns))
        return summary(*follow_a_run(cluster, "ssh"))
    except TfccError as exc:
        return f"failed: {exc}"
    finally:
        hosts.down()


def summary(delays: list, finished: bool) -> dict:
    values = sorted(delays)
    if not values:
        return {"steps": 0, "finished": finished}

    def at(q: float) -> float:
        return 1000 * values[max(0, math.ceil(q * len(values)) - 1)]

    return {"steps": len(values), "p50": at(0.50), "p95": at(0.95), "max": 1000 * values[-1], "finished": finished}


def cpu_seconds(pid: int) -> float:
    fields = runs._stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cost(home: Path, seconds: float, poll_only: bool, sample: bool) -> float:
    """Percent of one core the agent uses while it follows a task that writes nothing (and samples)."""
    os.environ["TFCC_HOME"] = str(home / "idle")
    env = dict(os.environ)
    if poll_only:
        env[POLL_ONLY_VARIABLE] = "1"
    else:
        env.pop(POLL_ONLY_VARIABLE, None)
    client = AgentClient(local_agent(env=env))
    run_id = f"idle-{int(poll_only)}{int(sample)}"
    try:
        client.call("start", run_id=run_id, task="worker-0",
                    argv=[sys.executable, "-c", "import signal; signal.pause()"])
        following = threading.Event()
        client.follow(run_id, "worker-0", lambda m: following.set())
        if sample:
            client.system(run_id, lambda m: None)
        following.wait(10)
        agent = client.hello()["pid"]
        threading.Event().wait(1.0)  # past the follow's first looks
        before, t0 = cpu_seconds(agent), time.monotonic()
        threading.Event().wait(seconds)  # the measured span: nothing is written
        return 100 * (cpu_seconds(agent) - before) / (time.monotonic() - t0)
    finally:
        runs.stop(run_id, "worker-0", grace=0.5)
        client.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="digits", choices=("digits", "synthetic"))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--idle-seconds", type=float, default=10.0)
    p.add_argument("--no-ssh", action="store_true", help="skip the SSH test hosts")
    ns = p.parse_args()
    os.environ.update(TF_ENV)
    with tempfile.TemporaryDirectory(prefix="tfcc-latency-") as tmp:
        os.environ["TFCC_CONSOLE_HOME"] = str(Path(tmp) / "console")
        rows = [("local (2 workers)", local_latency(Path(tmp) / "local", ns))]
        if not ns.no_ssh:
            rows.append(("ssh (2 test hosts)", ssh_latency(Path(tmp) / "ssh", ns)))
        idle = [(name, idle_cost(Path(tmp), ns.idle_seconds, poll_only, sample))
                for name, poll_only, sample in (("follow, inotify", False, False),
                                                ("follow, polling", True, False),
                                                ("follow + system op, inotify", False, True))]
    print(f"step record made (its time) -> in the console's MetricsStore; {ns.workload}, {ns.epochs} epochs, "
          f"{os.cpu_count()} CPUs")
    print(f"{'where':<20} {'steps':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  goal p95 <= 100 ms")
    ok = True
    for name, r in rows:
        if isinstance(r, str):
            print(f"{name:<20} {r}")
            ok = ok and r.startswith("skipped")
            continue
        if not r["steps"]:
            print(f"{name:<20} no step records (finished: {r['finished']})")
            ok = False
            continue
        met = r["p95"] <= 100 and r["finished"]
        ok = ok and met
        print(f"{name:<20} {r['steps']:>6} {r['p50']:>8.1f} {r['p95']:>8.1f} {r['max']:>8.1f}  "
              f"{'met' if met else 'NOT MET'}{'' if r['finished'] else ' (the run did not finish)'}")
    print(f"agent CPU while a followed task writes nothing for {ns.idle_seconds:g} s (goal: following < 1 %)")
    print(f"{'mode':<30} {'% of a core':>12}")
    for name, percent in idle:
        print(f"{name:<30} {percent:>12.2f}")
        if name.startswith("follow,"):
            ok = ok and percent < 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
