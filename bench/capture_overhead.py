"""Training throughput of a user's script with tfcc's capture on and off, measured in one run.

The capture (trainer/capture.py) is a process-wide wrapper, so this bench runs itself as the user's
script under it and compares, in that one process, what a script does with and without it:

- ``fit``: two identical models (the synthetic workload's CNN, tf-keras); one trained by ``fit`` as
  the capture patched it (tfcc's reporter added: the exact step loss, a record per step), one by Keras's
  own ``fit`` (``Model.fit.__wrapped__``, what the script would call without tfcc); timed from the
  epoch's begin to its end (an epoch-only callback on both);
- a custom loop: the same ``tf.function`` step, writing a ``tf.summary`` scalar every step and printing
  each epoch's values; on: the writer made through the capture (flushed every second, its event file
  read as it grows) and the print through the capture's stdout; off: TensorFlow's own writer and the
  real stdout.

It alternates the two (the order flips every round), so both see the same machine at the same moments
(these are shared two-core VMs whose speed moves by tens of percent between processes), and prints the
throughput and the on/off ratio per round and the median. Goal: ratio >= 0.98.

    python bench/capture_overhead.py [--rounds 30] [--steps 100]

Many short rounds: the machine's speed moves in spells of seconds, so short alternations see the same
machine; besides the median of the rounds' ratios the table gives the ratio of the totals.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(rounds: int, steps: int) -> None:
    """Runs as the user's script under the capture; prints one JSON line of results."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    sys.path.insert(0, str(ROOT))
    from trainer.workloads import synthetic

    workload = synthetic((28, 28, 1), 10, 4096, seed=0)
    # No shuffle: each fit makes a new iterator, and refilling a shuffle buffer would be most of a round.
    data = workload.train_dataset().batch(32, drop_remainder=True).repeat().prefetch(2)
    models = {}
    for name in ("off", "on", "loop-off", "loop-on"):
        tf.keras.utils.set_random_seed(0)
        model = workload.build_model()
        model.compile(tf.keras.optimizers.Adam(1e-3), workload.loss, metrics=["accuracy"])
        models[name] = model
    plain_fit = type(models["off"]).fit.__wrapped__  # Keras's own fit, under the capture's patch
    assert getattr(type(models["off"]).fit, "_tfcc", False), "run this under trainer/capture.py"

    class EpochTimer(tf.keras.callbacks.Callback):
        """The epoch's time, its steps only: fit's own start and end (its iterator, its callbacks'
        set-up) cost the same with the capture or without, and swing by half a second here."""

        def on_epoch_begin(self, epoch, logs=None):
            self.began = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.took = time.perf_counter() - self.began

    def fit(name: str) -> float:
        timer = EpochTimer()
        if name == "on":
            models[name].fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[timer])
        else:
            plain_fit(models[name], data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[timer])
        return steps * 32 / timer.took

    logdir = Path(tempfile.mkdtemp())
    writers = {"on": tf.summary.create_file_writer(str(logdir / "on")),
               "off": tf.summary.create_file_writer.__wrapped__(str(logdir / "off"))}
    outputs = {"on": sys.stdout, "off": sys.__stdout__}
    loops = {}
    for name in ("on", "off"):
        model = models[f"loop-{name}"]
        optimizer = tf.keras.optimizers.Adam(1e-3)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
        writer = writers[name]

        @tf.function
        def step(x, y, model=model, optimizer=optimizer, loss_fn=loss_fn, writer=writer):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            with writer.as_default():
                tf.summary.scalar("train_loss", loss, step=optimizer.iterations)
            return loss

        loops[name] = step
    iterator = iter(data)

    def loop(name: str) -> float:
        t0 = time.perf_counter()
        total = 0.0
        for _ in range(steps):
            x, y = next(iterator)
            total += float(loops[name](x, y))
        print(f"epoch: 0, train_loss: {total / steps:.4f}", file=outputs[name], flush=True)
        return steps * 32 / (time.perf_counter() - t0)

    for warm in ("on", "off"):  # tracing and the first steps, out of the measure
        fit(warm)
        loop(warm)
    rows = []
    for r in range(rounds):
        order = ("off", "on") if r % 2 == 0 else ("on", "off")
        fits = {name: fit(name) for name in order}
        loops_ = {name: loop(name) for name in order}
        rows.append({"fit_off": fits["off"], "fit_on": fits["on"], "loop_off": loops_["off"], "loop_on": loops_["on"]})
    print("BENCH " + json.dumps(rows), file=sys.__stdout__, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.rounds, args.steps)
        return
    with tempfile.TemporaryDirectory() as run_dir:
        env = dict(os.environ, PYTHONPATH=str(ROOT), TFCC_RUN_DIR=run_dir, TF_CPP_MIN_LOG_LEVEL="2")
        env.pop("TF_CONFIG", None)
        proc = subprocess.run([sys.executable, str(ROOT / "trainer" / "capture.py"), __file__, "--child",
                               "--rounds", str(args.rounds), "--steps", str(args.steps)],
                              env=env, capture_output=True, text=True, timeout=3600)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("BENCH ")]
        if proc.returncode != 0 or not lines:
            sys.exit(f"the bench failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        records = sum(1 for _ in open(Path(run_dir) / "metrics.jsonl"))
    rows = json.loads(lines[-1][len("BENCH "):])
    out = io.StringIO()
    print(f"capture overhead: {args.rounds} rounds x {args.steps} steps, batch 32, synthetic CNN, one process "
          f"({records} records captured)", file=out)
    print(f"{'round':>5} {'fit off/s':>10} {'fit on/s':>10} {'ratio':>6} {'loop off/s':>11} {'loop on/s':>10} "
          f"{'ratio':>6}", file=out)
    for i, r in enumerate(rows, 1):
        print(f"{i:>5} {r['fit_off']:>10.0f} {r['fit_on']:>10.0f} {r['fit_on'] / r['fit_off']:>6.3f} "
              f"{r['loop_off']:>11.0f} {r['loop_on']:>10.0f} {r['loop_on'] / r['loop_off']:>6.3f}", file=out)
    fit_ratio = statistics.median(r["fit_on"] / r["fit_off"] for r in rows)
    loop_ratio = statistics.median(r["loop_on"] / r["loop_off"] for r in rows)
    # Total time on / total time off, as a throughput ratio (each round did the same work both ways).
    fit_total = sum(1 / r["fit_off"] for r in rows) / sum(1 / r["fit_on"] for r in rows)
    loop_total = sum(1 / r["loop_off"] for r in rows) / sum(1 / r["loop_on"] for r in rows)
    print(f"median ratio (on/off): fit {fit_ratio:.3f}, loop {loop_ratio:.3f}; ratio of the totals: fit "
          f"{fit_total:.3f}, loop {loop_total:.3f}  (goal >= 0.98: "
          f"{'met' if min(fit_ratio, loop_ratio) >= 0.98 else 'MISSED'})", file=out)
    print(out.getvalue(), end="")


if __name__ == "__main__":
    main()
