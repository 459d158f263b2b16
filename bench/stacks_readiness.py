"""What it costs a task to be ready to say where it is: training throughput with trainer/stacks.py's watcher armed
and not, in one process (issue 40).

Every task tfcc starts (its trainer, and a user's script through the capture) runs the watcher: a thread that looks
for the agent's ask five times a second and answers with faulthandler's dump. This bench trains one model by
``fit`` (the synthetic workload's CNN, tf-keras, batch 32) in rounds, the watcher armed in every other round and
stopped in the rest (the order flips every round: these shared two-core machines' speed moves in spells of
seconds), and in a third kind of round armed and asked for its stacks four times a second (far more than a
person running ``tfcc where`` over and over, or the stall watchdog). Goal: ratio armed/off >= 0.99.

    python bench/stacks_readiness.py [--rounds 20] [--steps 200]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASK_EVERY = 0.25  # seconds between asks in the "asked" rounds (far more often than a person or the watchdog asks)
sys.path.insert(0, str(ROOT))

from agent.protocol import STACKS_ASK, STACKS_FILE  # noqa: E402
from trainer import stacks  # noqa: E402


def rounds_of(rounds: int, steps: int) -> list[dict]:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    from trainer.workloads import synthetic

    workload = synthetic((28, 28, 1), 10, 4096, seed=0)
    data = workload.train_dataset().batch(32, drop_remainder=True).repeat().prefetch(2)
    tf.keras.utils.set_random_seed(0)
    model = workload.build_model()
    model.compile(tf.keras.optimizers.Adam(1e-3), workload.loss, metrics=["accuracy"])

    class EpochTimer(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.began = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.took = time.perf_counter() - self.began

    folder = tempfile.mkdtemp()

    def fit(kind: str) -> float:
        stop = stacks.arm(folder) if kind != "off" else None
        asking = threading.Event()
        answered = []

        def ask() -> None:  # the agent's ask, again and again
            n = 0
            while not asking.wait(ASK_EVERY):
                n += 1
                with open(os.path.join(folder, STACKS_ASK), "w") as f:
                    json.dump({"ask": f"bench-{kind}-{time.time()}-{n}"}, f)
                answered.append(n)

        asker = threading.Thread(target=ask, daemon=True)
        if kind == "asked":
            asker.start()
        timer = EpochTimer()
        model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[timer])
        asking.set()
        if stop is not None:
            stop.set()
        if kind == "asked" and answered:
            asker.join()
            assert os.path.exists(os.path.join(folder, STACKS_FILE)), "the watcher never answered"
        return steps * 32 / timer.took

    for kind in ("armed", "off"):  # tracing and the first steps, out of the measure
        fit(kind)
    rows = []
    for r in range(rounds):
        order = ("off", "armed", "asked") if r % 2 == 0 else ("asked", "armed", "off")
        rows.append({kind: fit(kind) for kind in order})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    rows = rounds_of(args.rounds, args.steps)
    out = io.StringIO()
    print(f"stacks readiness: {args.rounds} rounds x {args.steps} steps, batch 32, synthetic CNN, one process",
          file=out)
    print(f"{'round':>5} {'off/s':>8} {'armed/s':>8} {'ratio':>6} {'asked/s':>8} {'ratio':>6}", file=out)
    for i, r in enumerate(rows, 1):
        print(f"{i:>5} {r['off']:>8.0f} {r['armed']:>8.0f} {r['armed'] / r['off']:>6.3f} {r['asked']:>8.0f} "
              f"{r['asked'] / r['off']:>6.3f}", file=out)
    armed = statistics.median(r["armed"] / r["off"] for r in rows)
    asked = statistics.median(r["asked"] / r["off"] for r in rows)
    total = sum(1 / r["off"] for r in rows) / sum(1 / r["armed"] for r in rows)
    print(f"median ratio armed/off {armed:.3f} (totals {total:.3f}); asked 4/s /off {asked:.3f}  "
          f"(goal armed >= 0.99: {'met' if armed >= 0.99 else 'MISSED'})", file=out)
    print(out.getvalue(), end="")


if __name__ == "__main__":
    main()
