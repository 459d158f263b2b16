"""Training throughput with tfcc's per-step reporting on and off, measured in one run.

Each worker process builds two identical models (the synthetic workload's CNN):
one trained by plain tf-keras ``fit``, one with ``MetricsReporter`` (exact step
loss, one record per step, written by the background writer). It alternates
``fit`` calls of the two (the order flips every round), so both see the same
machine at the same moments; the machines this runs on are shared two-core VMs
whose speed moves by tens of percent between runs of separate processes. The
table gives throughput and the on/off ratio per round and its median, for one
process and for two MultiWorkerMirroredStrategy workers on localhost.
Goal: ratio >= 0.98.

    python bench/reporting_overhead.py [--rounds 6] [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def worker(rounds: int, steps: int) -> None:
    """Runs inside each task (TF_CONFIG set by the launcher); the chief prints the result."""
    import os

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    from trainer.tf_config import parse_tf_config
    from trainer.report import MetricsReporter
    from trainer.workloads import synthetic

    cluster = parse_tf_config(os.environ.get("TF_CONFIG"))
    strategy = (tf.distribute.MultiWorkerMirroredStrategy() if cluster.num_workers > 1
                else tf.distribute.get_strategy())
    workload = synthetic((28, 28, 1), 10, 4096, seed=0)
    global_batch = 32 * strategy.num_replicas_in_sync
    data = workload.train_dataset().shuffle(4096, seed=0).batch(global_batch, drop_remainder=True).repeat()
    models = {}
    with strategy.scope():
        for name in ("off", "on"):
            tf.keras.utils.set_random_seed(0)
            model = workload.build_model()
            model.compile(tf.keras.optimizers.Adam(1e-3), workload.loss, metrics=["accuracy"])
            models[name] = model
    run_dir = Path(os.environ["TFCC_RUN_DIR"])
    reporter = MetricsReporter(run_dir / "bench-metrics.jsonl", num_workers=cluster.num_workers)

    def fit(name: str, n: int) -> float:
        callbacks = [reporter] if name == "on" else []
        t0 = time.perf_counter()
        models[name].fit(data, epochs=1, steps_per_epoch=n, callbacks=callbacks, verbose=0)
        return n * global_batch / (time.perf_counter() - t0)

    for name in ("off", "on"):  # trace both before timing
        fit(name, 5)
    results = []
    for r in range(rounds):
        order = ("off", "on") if r % 2 == 0 else ("on", "off")
        results.append({name: fit(name, steps) for name in order})
    reporter.writer.close()
    if cluster.is_chief:
        print("RESULT " + json.dumps(results), flush=True)


def launch(workers: int, rounds: int, steps: int) -> list[dict]:
    from tests.helpers.localrun import local_cluster, start_local_tasks

    with tempfile.TemporaryDirectory() as tmp:
        tasks = start_local_tasks(local_cluster(workers), Path(tmp), ["--worker", str(rounds), str(steps)],
                                  env={"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"},
                                  script=__file__)
        for t in tasks:
            if t.process.wait(timeout=1800) != 0:
                raise SystemExit(f"{t.name} failed:\n{(t.run_dir / 'stderr.log').read_text()[-3000:]}")
        out = (tasks[0].run_dir / "stdout.log").read_text()
        return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(int(sys.argv[2]), int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=200)
    ns = ap.parse_args()
    print(f"reporting overhead, {time.strftime('%Y-%m-%d')}: {ns.rounds} paired rounds of {ns.steps} steps, "
          "synthetic CNN, per-replica batch 32, examples/s")
    print(f"{'workers':>7} | {'round':>5} | {'off':>8} | {'on':>8} | {'on/off':>7}")
    for workers in (1, 2):
        results = launch(workers, ns.rounds, ns.steps)
        ratios = []
        for i, r in enumerate(results):
            ratios.append(r["on"] / r["off"])
            print(f"{workers:>7} | {i + 1:>5} | {r['off']:>8.0f} | {r['on']:>8.0f} | {ratios[-1]:>7.3f}")
        median = statistics.median(ratios)
        print(f"{workers:>7} | {'median':>5} | {'':>8} | {'':>8} | {median:>7.3f}   "
              f"goal >= 0.98: {'met' if median >= 0.98 else 'MISSED'}")


if __name__ == "__main__":
    main()
