"""Real runs through the agent whose tasks are a small script writing trainer-like records (no TensorFlow).

The script writes what the trainer writes of a run's life (``launched``, ``started``, steps,
epochs with training and validation metrics, ``finished``) in a fraction of a second, so tests
of the history, the runs list and the Runs panel can have several finished runs cheaply.
"""

from __future__ import annotations

import os
from pathlib import Path

from console import cluster as cl
from console.store.metrics import MetricsStore
from console.run.runner import Run
from console.run.session import RunSession

SCRIPT = """import json, os, pathlib, signal, sys, time
path = pathlib.Path(os.environ["TFCC_RUN_DIR"]) / "metrics.jsonl"
epochs, steps, forever, gated = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "forever", sys.argv[3] == "gated"
seed = float(sys.argv[4])
def write(f, **r):
    f.write(json.dumps({"time": time.time(), **r}) + "\\n")
    f.flush()
with open(path, "a") as f:
    write(f, type="event", event="launched", pid=os.getpid())
    workers = len(json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {}).get("worker", [])) or 1
    write(f, type="event", event="cluster_formed", strategy="multi_worker_mirrored", num_replicas=workers)
    write(f, type="event", event="started", epochs=epochs, steps_per_epoch=steps, strategy="multi_worker_mirrored",
          num_workers=workers, replicas_per_worker=1, num_replicas=workers, per_replica_batch=16,
          per_worker_batch=16, global_batch=16 * workers)
    g = 0
    for e in range(epochs):
        for s in range(steps):
            g += 1
            write(f, type="step", epoch=e, step=s, global_step=g, loss=seed / g, step_time=0.001)
        metrics = {"loss": seed / g, "accuracy": 0.5 + e / 10, "val_loss": seed / g + 0.1,
                   "val_accuracy": 0.6 + e / 10}
        write(f, type="epoch", epoch=e, epoch_time=0.01, **metrics)
        gate = pathlib.Path(os.environ["TFCC_RUN_DIR"]) / "go"
        while gated and e == 0 and not gate.exists():  # the first epoch done: on once the test says so
            time.sleep(0.02)
    if forever:
        (pathlib.Path(os.environ["TFCC_RUN_DIR"]) / "trained").touch()
        while True:  # a task still going: until a stop's signal ends it
            signal.pause()
    tb = pathlib.Path(os.environ["TFCC_RUN_DIR"]) / "tensorboard" / "train"
    if os.environ.get("TFCC_TASK") == "worker-0":
        tb.mkdir(parents=True, exist_ok=True)
        (tb / "events.out.tfevents.0.here").write_bytes(b"not a real event file")
    print(f"scripted: {epochs} epochs of {steps} steps done", flush=True)
    write(f, type="event", event="finished", metrics=metrics, train_time=0.1, model=None)
"""


def scripted_cluster(home: Path, epochs: int = 2, steps: int = 30, forever: bool = False, tasks: int = 2,
                     seed: float = 1.0, gated: bool = False) -> cl.Cluster:
    """``forever``: each task waits for a stop's signal after its last epoch; ``gated``: after its first epoch,
    until a file ``go`` is in its run folder."""
    script = home / "scripted.py"
    script.write_text(SCRIPT)
    return cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here") for _ in range(tasks)],
                      cl.Training(script=str(script),  # it writes a trainer's records itself: nothing to capture
                                  args=[str(epochs), str(steps), "forever" if forever else "gated" if gated else "once", str(seed)],
                                  capture=False))


def finished_run(home: Path, run_id: str, epochs: int = 2, steps: int = 30, seed: float = 1.0,
                 timeout: float = 60) -> tuple[Run, MetricsStore]:
    """Start a scripted run and follow it to its end with a session (which keeps its history)."""
    run = Run(scripted_cluster(home, epochs, steps, seed=seed), run_id)
    run.start()
    store = MetricsStore()
    follow_to_end(RunSession(run, store), timeout)
    return run, store


def follow_to_end(session: RunSession, timeout: float = 30) -> None:
    """Follow ``session``'s run until every task has ended and all it sent was handled, then detach."""
    session.follow()
    try:
        assert session.wait(timeout), f"run {session.run.run_id} did not end in {timeout} s"
    finally:
        session.detach()


def ended_unfollowed(home: Path, run_id: str) -> Path:
    """A scripted run (3 epochs of 10 steps, two tasks) that a console followed for its first epoch only: the
    console went, the run trained on to its end. Returns the tasks' folder on the host."""
    from tests.helpers.waiting import wait_for

    run = Run(scripted_cluster(home, epochs=3, steps=10, gated=True), run_id)
    run.start()
    store = MetricsStore()
    session = RunSession(run, store)
    session.follow()
    try:
        wait_for(lambda: len(store.epochs) >= 1 and len(store.progress) == 2, 30, lambda: "no first epoch")
    finally:
        session.detach()  # the console goes; the run goes on
    folders = [Path(os.environ["TFCC_HOME"]) / "runs" / run_id / t.name for t in run.tasks]
    for folder in folders:
        (folder / "go").touch()
    wait_for(lambda: all((f / "exit.json").exists() for f in folders), 30, lambda: "the run did not end")
    run.detach()
    return folders[0].parent
