"""The CPU of importing TensorFlow with tf-keras, with the collector paused (trainer/process.py) and without.

Every task of a run imports TensorFlow at each start and restart, often several on one machine at once (a test
suite, ~330 of them). perf shows a quarter of that import in Python's cyclic collector (``gc_collect_main``,
``visit_decref``, ``visit_reachable``): nothing an import makes is garbage. The trainer and the capture of a
user's script import it with the collector paused (``collector_paused``).

Each round starts both in turn (the order flips every round: these shared two-core VMs change speed by tens of
percent in spells of seconds) and reads each child's user + system CPU from the OS; it prints every round and
the medians, and the ratio paused/plain. Goal: ratio <= 0.85.

    python bench/tf_import.py [--rounds 8]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORT = "import tensorflow as tf; tf.keras.Model"
KINDS = {
    "plain": IMPORT,
    "paused": f"from trainer.process import collector_paused\nwith collector_paused():\n    {IMPORT}",
}


def cpu_of(code: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT)))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
    print(f"{'round':>5} {'plain s':>8} {'paused s':>9} {'ratio':>6}")
    for n in range(args.rounds):
        order = list(KINDS) if n % 2 == 0 else list(reversed(KINDS))
        for kind in order:
            cpu[kind].append(cpu_of(KINDS[kind]))
        print(f"{n + 1:>5} {cpu['plain'][-1]:>8.2f} {cpu['paused'][-1]:>9.2f} "
              f"{cpu['paused'][-1] / cpu['plain'][-1]:>6.2f}")
    ratios = [p / q for p, q in zip(cpu["paused"], cpu["plain"])]
    print(f"{'median':>5} {statistics.median(cpu['plain']):>8.2f} {statistics.median(cpu['paused']):>9.2f} "
          f"{statistics.median(ratios):>6.2f}   (CPU seconds of one import of TensorFlow with tf-keras)")


if __name__ == "__main__":
    main()
