""""Why is it slow?" measured: the verdicts of seeded faults, the cost of the breakdown when not asked, and the
scaling efficiency it reports (docs/why-slow.md).

1. ``verdicts``: each seeded kind (tests/helpers/seeded.py: a slow input pipeline on one worker, one worker's CPU
   limited by a cgroup, a slow link to one SSH test host, nothing seeded) run ``--repeats`` times with 2 workers of
   tests/data/scripts/why_slow: the verdict, the task it names, the seconds from asking to the verdict. Goal: at
   least 18 of 20 correct, each within 60 s.
2. ``cost``: training throughput with the breakdown available but not asked against the same reporter without it,
   in one process (two identical models, their ``fit`` calls alternated), for 1 worker and 2. Goal: >= 0.98.
3. ``scaling``: 1 and 2 workers of tfcc's trainer on digits and on the synthetic CNN, each asked once: the speedup
   and efficiency the breakdown reports for 2 workers, beside the global throughput each run measured.

Root (the SSH test hosts, cgroups, tc).

    python bench/why_slow.py [verdicts] [cost] [scaling] [--repeats 5] [--rounds 6 --steps 200 --workers 1 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TIMELY = 60.0  # seconds from asking to the verdict


# --------------------------------------------------------------------------- 1. verdicts of seeded faults


def verdicts(repeats: int) -> None:
    from console import speed
    from tests.helpers import seeded
    from tests.helpers.testhosts import TestHosts

    env = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ.update(env, TFCC_HOME=str(tmp / "host-home"), TFCC_CONSOLE_HOME=str(tmp / "console-home"),
                          TFCC_KNOWN_HOSTS=str(tmp / "known_hosts"), TFCC_SSH_CONFIG=str(tmp / "ssh_config"),
                          TFCC_SYSTEM_KNOWN_HOSTS=str(tmp / "ssh_known_hosts"))
        hosts = TestHosts(2, tmp / "hosts", env=env).up()
        try:
            hosts.known_hosts(tmp / "known_hosts")
            said = []

            @contextlib.contextmanager
            def slow_link(run):
                with seeded.slow_link(hosts.hosts[1]) as words:
                    said.append(words)
                    yield

            def cpu_limited(run):
                return seeded.cpu_limited(seeded.task_pids(run.run_id, "worker-1"), cores=0.3)

            kinds = [  # (seeded, expected kind, expected task, cluster, seed)
                ("slow input on worker-1", speed.INPUT_BOUND, "worker-1",
                 lambda: seeded.script_cluster(tmp, env={"SLOW_SHARE_ON_WORKER": "1"}), None),
                ("worker-1's CPU limited (cgroup 0.3 CPU)", speed.STRAGGLER, "worker-1",
                 lambda: seeded.script_cluster(tmp), cpu_limited),
                ("slow link to host 1", speed.COMMUNICATION_BOUND, None,
                 lambda: seeded.script_cluster(tmp, hosts=hosts), slow_link),
                ("nothing seeded", speed.HEALTHY, None, lambda: seeded.script_cluster(tmp), None),
            ]
            print(f"why is it slow?, {time.strftime('%Y-%m-%d')}: 2 workers of tests/data/scripts/why_slow, "
                  f"{repeats} runs of each seeded kind")
            print(f"{'seeded':<40} | {'run':>3} | {'verdict':<20} | {'names':<9} | {'seconds':>7} | correct")
            right = total = 0
            slowest = 0.0
            for number, (what, kind, task, make, seed) in enumerate(kinds):
                for i in range(repeats):
                    try:
                        verdict, _, took = seeded.measured(make(), f"bench-{number}-{i}-{os.getpid()}", seed)
                        first = verdict.findings[0]
                        ok = verdict.kind == kind and (task is None or first.task == task) and took <= TIMELY
                        found, named = verdict.kind, first.task or "-"
                    except AssertionError as exc:
                        ok, found, named, took = False, f"none ({str(exc)[:60]})", "-", float("nan")
                    total += 1
                    right += ok
                    slowest = max(slowest, took) if took == took else slowest
                    print(f"{what:<40} | {i + 1:>3} | {found:<20} | {named:<9} | {took:>7.1f} | "
                          f"{'yes' if ok else 'NO'}", flush=True)
            if said:
                print(f"slow link: {said[0]}")
            print(f"correct: {right} of {total}, slowest verdict {slowest:.1f} s after asking; goal >= 18 of 20 "
                  f"within {TIMELY:.0f} s: {'met' if right >= total * 0.9 and slowest <= TIMELY else 'MISSED'}")
        finally:
            hosts.down()


# --------------------------------------------------------------------------- 2. the cost when not asked


def cost_worker(rounds: int, steps: int) -> None:
    """Inside each task: two identical models, both with tfcc's reporter, the breakdown available to one."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    from agent.protocol import MEASURE_VARIABLE
    from trainer.report import MetricsReporter
    from trainer.tf_config import parse_tf_config
    from trainer.workloads import synthetic

    cluster = parse_tf_config(os.environ.get("TF_CONFIG"))
    strategy = (tf.distribute.MultiWorkerMirroredStrategy() if cluster.num_workers > 1
                else tf.distribute.get_strategy())
    workload = synthetic((28, 28, 1), 10, 4096, seed=0)
    global_batch = 32 * strategy.num_replicas_in_sync
    data = workload.train_dataset().shuffle(4096, seed=0).batch(global_batch, drop_remainder=True).repeat()
    models = {}
    with strategy.scope():
        for name in ("without", "available"):
            tf.keras.utils.set_random_seed(0)
            model = workload.build_model()
            model.compile(tf.keras.optimizers.Adam(1e-3), workload.loss, metrics=["accuracy"])
            models[name] = model
    run_dir = Path(os.environ["TFCC_RUN_DIR"])
    reporters = {name: MetricsReporter(run_dir / f"{name}.jsonl", num_workers=cluster.num_workers)
                 for name in models}

    def fit(name: str, n: int) -> float:
        os.environ[MEASURE_VARIABLE] = "1" if name == "available" else "0"  # read as its fit begins
        t0 = time.perf_counter()
        models[name].fit(data, epochs=1, steps_per_epoch=n, callbacks=[reporters[name]], verbose=0)
        return n * global_batch / (time.perf_counter() - t0)

    for name in models:  # trace both before timing
        fit(name, 5)
    results = []
    for r in range(rounds):
        order = ("without", "available") if r % 2 == 0 else ("available", "without")
        results.append({name: fit(name, steps) for name in order})
    for reporter in reporters.values():
        reporter.writer.close()
    if cluster.is_chief:
        print("RESULT " + json.dumps(results), flush=True)


def cost(rounds: int, steps: int, counts=(1, 2)) -> None:
    from tests.helpers.localrun import local_cluster, start_local_tasks

    print(f"cost of the breakdown when not asked, {time.strftime('%Y-%m-%d')}: {rounds} paired rounds of {steps} "
          "steps, synthetic CNN, per-replica batch 32, examples/s (both with tfcc's reporter)")
    print(f"{'workers':>7} | {'round':>5} | {'without':>8} | {'available':>9} | {'ratio':>6}")
    for workers in counts:
        with tempfile.TemporaryDirectory() as tmp:
            tasks = start_local_tasks(local_cluster(workers), Path(tmp), ["--cost-worker", str(rounds), str(steps)],
                                      env={"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"},
                                      script=__file__)
            for t in tasks:
                if t.process.wait(timeout=1800) != 0:
                    raise SystemExit(f"{t.name} failed:\n{(t.run_dir / 'stderr.log').read_text()[-3000:]}")
            out = (tasks[0].run_dir / "stdout.log").read_text()
            results = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
        ratios = []
        for i, r in enumerate(results):
            ratios.append(r["available"] / r["without"])
            print(f"{workers:>7} | {i + 1:>5} | {r['without']:>8.0f} | {r['available']:>9.0f} | {ratios[-1]:>6.3f}")
        median = statistics.median(ratios)
        total = sum(r["available"] for r in results) / sum(r["without"] for r in results)
        print(f"{workers:>7} | {'total':>5} | {'':>8} | {'':>9} | {total:>6.3f}   (the rounds' examples/s summed)")
        print(f"{workers:>7} | {'median':>5} | {'':>8} | {'':>9} | {median:>6.3f}   goal >= 0.98: "
              f"{'met' if median >= 0.98 else 'MISSED'}")


# --------------------------------------------------------------------------- 3. scaling efficiency


def scaling() -> None:
    from console import cluster as cl
    from tests.helpers import seeded

    print(f"scaling efficiency as the breakdown reports it, {time.strftime('%Y-%m-%d')}: tfcc's trainer, "
          "per-replica batch 32, workers on this machine (2 cores)")
    print(f"{'workload':<10} | {'workers':>7} | {'global ex/s':>11} | {'measured 2 vs 1':>15} | "
          f"{'breakdown says':<40} | verdict")
    env = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ.update(env, TFCC_HOME=str(tmp / "host-home"), TFCC_CONSOLE_HOME=str(tmp / "console-home"))
        for workload in ("digits", "synthetic"):
            rates = {}
            for workers in (1, 2):
                cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here") for _ in range(workers)],
                                     cl.Training(workload=workload, epochs=500))
                verdict, _, _ = seeded.measured(cluster, f"scaling-{workload}-{workers}-{os.getpid()}")
                rates[workers] = verdict.global_rate
                measured = f"{rates[2] / rates[1]:.2f}×" if workers == 2 and rates.get(1) else ""
                print(f"{workload:<10} | {workers:>7} | {verdict.global_rate or float('nan'):>11.0f} | "
                      f"{measured:>15} | {verdict.scaling_words():<40} | {verdict.kind}", flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--cost-worker"]:
        cost_worker(int(sys.argv[2]), int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", help="verdicts, cost, scaling (default: all three)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2], help="cost: with these worker counts")
    ns = ap.parse_args()
    parts = ns.parts or ["verdicts", "cost", "scaling"]
    unknown = set(parts) - {"verdicts", "cost", "scaling"}
    if unknown:
        ap.error(f"unknown part(s): {', '.join(sorted(unknown))}; the parts are verdicts, cost and scaling")
    if "verdicts" in parts:
        verdicts(ns.repeats)
    if "cost" in parts:
        cost(ns.rounds, ns.steps, ns.workers)
    if "scaling" in parts:
        scaling()


if __name__ == "__main__":
    main()
