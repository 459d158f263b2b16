"""A task's process with TensorFlow (trainer/process.py): its import with the collector paused (the CPU it saves
is bench/tf_import.py's), and SIGTERM back from TensorFlow's coordination service."""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path

import pytest

from agent.protocol import BACKUP_DIR, STOP_MARKER, backup_steps
from tests.helpers.localrun import local_cluster, start_local_tasks
from tests.helpers.waiting import bound, wait_until
from trainer.metrics import read_records
from trainer.process import collector_paused

from .conftest import THREADS, _kill


@pytest.fixture
def collector():
    """The collector as the test found it, back afterwards (a pause that failed must not leak into the suite)."""
    was = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


def test_no_collection_within_and_what_was_made_is_frozen_after(collector):
    gc.enable()
    frozen = gc.get_freeze_count()
    with collector_paused():
        assert not gc.isenabled()
        made = [[i] for i in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() - frozen >= len(made)


def test_the_collector_is_back_after_an_import_that_failed(collector):
    gc.enable()
    with pytest.raises(ImportError), collector_paused():
        raise ImportError("no module named tensorflow")
    assert gc.isenabled()


def test_an_enclosing_pause_wins(collector):
    """TensorFlow imports Keras within its own import: the inner pause changes nothing, the outer one ends it."""
    gc.enable()
    with collector_paused():
        frozen = gc.get_freeze_count()
        with collector_paused():
            pass
        assert not gc.isenabled() and gc.get_freeze_count() == frozen
    assert gc.isenabled()


def test_a_script_that_turned_the_collector_off_keeps_it_off(collector):
    gc.disable()
    frozen = gc.get_freeze_count()
    with collector_paused():
        pass
    assert not gc.isenabled() and gc.get_freeze_count() == frozen


FOREVER_FIT = """\
import sys
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
x, y = np.ones((64, 4), "float32"), np.ones((64, 1), "float32")
backup = tf.keras.callbacks.BackupAndRestore(sys.argv[1], save_freq=100)  # as the multi-worker tutorial's
model.fit(x, y, batch_size=16, epochs=100000, verbose=0, callbacks=[backup])
open(sys.argv[1] + "-after-fit", "w").close()
"""


@pytest.mark.slow
@pytest.mark.parametrize("what", ["trainer", "trainer, one task told", "captured script"])
def test_a_stopped_multi_worker_task_ends_at_its_sigterm(tmp_path, what):
    """Stop sends SIGTERM (the agent, agent/runs.py): under MultiWorkerMirroredStrategy TensorFlow's coordination
    service took SIGTERM over, and every task trained on until the SIGKILL after the grace (10 s; Stop's
    "stopping..." then watched three more epochs). Now tfcc's trainer finishes its step, every task stops after
    the same step, backs up there and ends (trainer/stopping.py); a user's script, through the capture, the same,
    its backup its own BackupAndRestore's (trainer.stopping.ScriptStop), its code after fit not run."""
    script = backup = None
    if what == "captured script":
        script, backup = tmp_path / "train.py", tmp_path / "backup"
        script.write_text(FOREVER_FIT)
    tasks = start_local_tasks(local_cluster(2), tmp_path / "run", ["--workload", "digits", "--epochs", "200"]
                              if script is None else [str(backup)], env=THREADS, script=script and str(script),
                              capture=script is not None)
    try:
        def training() -> bool:
            return all(t.metrics_path.exists() and any(r["type"] == "step" for r in read_records(t.metrics_path))
                       for t in tasks)
        assert wait_until(training, 180, every=0.2), [t.process.poll() for t in tasks]
        told = tasks[1:] if what == "trainer, one task told" else tasks  # one: a node's preemption, say
        for t in told:  # as a stop of the run: its marker, then SIGTERM
            (t.run_dir / STOP_MARKER).write_text("1")
            t.process.send_signal(signal.SIGTERM)
        for t in tasks:
            t.process.wait(timeout=bound(10))  # the whole grace of a stop: it must not be needed
    finally:
        _kill(tasks)
    assert [t.process.returncode for t in tasks] == [128 + signal.SIGTERM] * 2  # trainer.stopping.EXIT_STOPPED
    records = [read_records(t.metrics_path) for t in tasks]
    last = [max(r["global_step"] for r in mine if r["type"] == "step") for mine in records]
    assert last[0] == last[1], "every task stopped after the same step"
    if script is not None:
        for t in tasks:
            said = (t.run_dir / "stderr.log").read_text()
            assert (f"tfcc: stopped on SIGTERM after step {last[0]}; its BackupAndRestore ({backup}) backed up at "
                    "the stop") in said
        assert (backup / "chief" / "checkpoint").exists() and not Path(f"{backup}-after-fit").exists()
    for t, mine in zip(tasks, records):
        cut = next(i for i, r in enumerate(mine) if r.get("global_step") == last[0] and r["type"] == "step")
        stop, ends = mine[cut], [r for r in mine[cut:] if r["type"] == "epoch"]
        # No record of an epoch the stop cut short; a stop at an epoch's last step keeps that epoch's end (the
        # epoch was whole: trainer/stopping.py).
        per_epoch = next((r["steps_per_epoch"] for r in mine if isinstance(r.get("steps_per_epoch"), int)), None)
        whole = per_epoch is not None and stop.get("step") == per_epoch - 1
        assert ends == [] or (whole and [r["epoch"] for r in ends] == [stop["epoch"]]), (stop, ends)
        if script is not None:
            continue
        backed = [r for r in mine if r.get("event") == "backed_up"]
        assert backed[-1]["global_step"] == last[0] and last[0] in backup_steps(os.listdir(t.run_dir / BACKUP_DIR))
        assert not [r for r in mine if r.get("event") in ("failed", "finished")]
