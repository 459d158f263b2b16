"""Real multi-worker training on localhost: correctness of what the trainer reports."""

from __future__ import annotations

import json
import re
import statistics

import numpy as np
import pytest

from trainer.tf_config import ConfigError

from .conftest import DATA, run_cluster

pytestmark = pytest.mark.slow

DIGITS_EPOCHS = 4
BACKUP_SECONDS = 1.0


@pytest.fixture(scope="module")
def digits2(tmp_path_factory):
    """Two workers training digits (shared by several tests: each run costs seconds)."""
    return run_cluster(tmp_path_factory.mktemp("digits2"), 2,
                       ["--epochs", str(DIGITS_EPOCHS), "--backup-seconds", str(BACKUP_SECONDS)])


@pytest.fixture(scope="module")
def idrun(tmp_path_factory):
    """Two workers on the id-carrying test model: 96 examples, global batch 16, 2 epochs."""
    return run_cluster(tmp_path_factory.mktemp("idrun"), 2,
                       ["--model-file", str(DATA / "idmodel.py"), "--epochs", "2", "--per-replica-batch", "8"])


def step_losses(run, index):
    return [r["loss"] for r in run.records(index, "step")]


def test_two_workers_record_every_step(digits2):
    for i in range(2):
        started = digits2.events(i, "started")[0]
        assert started["strategy"] == "multi_worker_mirrored"
        assert (started["num_replicas"], started["per_replica_batch"], started["global_batch"]) == (2, 32, 64)
        assert started["is_chief"] == (i == 0)
        steps = digits2.records(i, "step")
        expected = [(e, s) for e in range(DIGITS_EPOCHS) for s in range(started["steps_per_epoch"])]
        assert [(r["epoch"], r["step"]) for r in steps] == expected
        for r in steps:
            assert r["task_type"] == "worker" and r["task_index"] == i
            assert r["step_time"] > 0 and r["examples_per_sec"] > 0 and r["global_batch"] == 64
        names = [e["event"] for e in digits2.records(i, "event") if e["event"] not in ("backing_up", "backed_up")]
        assert names == ["launched", "cluster_formed", "started", "saving", "saved", "finished"]
        saving, saved = digits2.events(i, "saving")[0], digits2.events(i, "saved")[0]
        assert saved["seconds"] > 0 and saved["time"] >= saving["time"]
        assert saving["path"] == (digits2.events(i, "finished")[0]["model"])  # the chief's; a worker keeps none
    # Backups by time, at the same steps on every task (saving is collective), within epochs too,
    # and the end of training is kept: the two newest, each named by its global step.
    saved = [[(e["global_step"], e["epoch"], e["step"]) for e in digits2.events(i, "backed_up")] for i in range(2)]
    assert saved[0] == saved[1] and len(saved[0]) >= 3
    steps_per_epoch = digits2.events(0, "started")[0]["steps_per_epoch"]
    assert any(step != steps_per_epoch - 1 for _, _, step in saved[0])  # not only at epoch ends
    assert all(g < g2 for (g, _, _), (g2, _, _) in zip(saved[0], saved[0][1:]))  # the interval adapts to the pace
    assert [e["global_step"] for e in digits2.events(0, "backing_up")] == [g for g, _, _ in saved[0]]
    assert all(g == e * steps_per_epoch + s + 1 for g, e, s in saved[0])
    last = DIGITS_EPOCHS * steps_per_epoch
    assert saved[0][-1][0] == last
    for t in digits2.tasks:
        assert sorted(p.name for p in (t.run_dir / "backup").glob("*.index")) == \
            sorted(f"backup-{g}.index" for g, _, _ in saved[0][-2:])
    # Synchronous training: both workers report the same loss for every step.
    assert step_losses(digits2, 0) == pytest.approx(step_losses(digits2, 1), rel=1e-6)


def test_digits_reaches_95_percent(digits2):
    final = digits2.events(0, "finished")[0]["metrics"]
    assert final["val_accuracy"] >= 0.95


def test_epoch_metrics_are_cluster_wide_means(digits2):
    """tf-keras sums training metrics over workers; the trainer reports the true means."""
    for epoch in digits2.records(0, "epoch"):
        losses = [r["loss"] for r in digits2.records(0, "step") if r["epoch"] == epoch["epoch"]]
        assert epoch["loss"] == pytest.approx(statistics.fmean(losses), rel=1e-5)
        assert 0.0 <= epoch["accuracy"] <= 1.0


def test_chief_keeps_outputs_and_other_workers_only_their_backups(digits2):
    chief, other = digits2.tasks[0].run_dir, digits2.tasks[1].run_dir
    assert (chief / "model.keras").is_file()
    assert list((chief / "tensorboard").rglob("events.out.tfevents.*"))
    tags = tensorboard_tags(chief / "tensorboard")
    assert {"epoch_loss", "epoch_accuracy"} <= tags and not any("tfcc" in t for t in tags)
    leftovers = sorted(p.name for p in other.iterdir())
    assert leftovers == ["backup", "metrics.jsonl", "stderr.log", "stdout.log"]  # its own backups stay
    assert digits2.events(1, "finished")[0]["model"] is None


def tensorboard_tags(folder) -> set[str]:
    import tensorflow as tf

    tags = set()
    for path in folder.rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            tags |= {v.tag for v in event.summary.value}
    return tags


def test_saved_model_reloads_and_matches_final_metrics(digits2):
    import tensorflow as tf

    from trainer.workloads import digits_arrays

    final = digits2.events(0, "finished")[0]
    model = tf.keras.models.load_model(final["model"])
    _, _, x_val, y_val = digits_arrays()
    loss, accuracy = model.evaluate(x_val, y_val, batch_size=64, verbose=0)
    assert loss == pytest.approx(final["metrics"]["val_loss"], rel=1e-4)
    assert accuracy == pytest.approx(final["metrics"]["val_accuracy"], abs=1e-6)


def test_three_workers(tmp_path):
    run = run_cluster(tmp_path, 3, ["--epochs", "1", "--per-replica-batch", "16"])
    for i in range(3):
        started = run.events(i, "started")[0]
        assert (started["num_replicas"], started["global_batch"], started["steps_per_epoch"]) == (3, 48, 1438 // 48)
        assert len(run.records(i, "step")) == started["steps_per_epoch"]
        assert run.events(i, "finished")
    assert sum(t.run_dir.joinpath("model.keras").exists() for t in run.tasks) == 1


def test_mirrored_over_two_logical_cpus_matches_two_workers(tmp_path, digits2):
    """One process with 2 replicas sees the same global batches as 2 workers: same losses."""
    run = run_cluster(tmp_path, 1, ["--epochs", "1", "--cpu-devices", "2"])
    started = run.events(0, "started")[0]
    assert started["strategy"] == "mirrored"
    assert (started["num_replicas"], started["replicas_per_worker"], started["global_batch"]) == (2, 2, 64)
    mirrored = step_losses(run, 0)
    assert len(mirrored) == started["steps_per_epoch"]
    assert mirrored == pytest.approx(step_losses(digits2, 0)[: len(mirrored)], rel=1e-4)


def read_ids(run, index) -> list[list[int]]:
    text = (run.tasks[index].run_dir / "ids.txt").read_text()
    return [[int(v) for v in re.findall(r"-?\d+", line)] for line in text.splitlines() if line.strip()]


def test_step_loss_is_the_global_batch_loss(idrun):
    import tensorflow as tf

    from tests.trainer.data import idmodel

    ids = [read_ids(idrun, 0), read_ids(idrun, 1)]
    records = idrun.records(0, "step")
    assert len(records) == len(ids[0]) == len(ids[1]) == 12
    model = idmodel.build_model(record_ids=False)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    weights_dir = idrun.tasks[0].run_dir / "weights"
    local_differs = False
    for k, record in enumerate(records):
        with np.load(weights_dir / f"{k:04d}.npz") as saved:
            model.set_weights([saved[f"arr_{i}"] for i in range(len(saved.files))])
        batch = ids[0][k] + ids[1][k]
        assert len(batch) == 16
        x, y = idmodel.X_WITH_IDS[batch], idmodel.Y[batch]
        expected = float(loss_fn(y, model(x, training=False)))
        assert record["loss"] == pytest.approx(expected, rel=1e-5), f"step {k}"
        # The test can tell: one worker's half-batch loss is a different number.
        half = float(loss_fn(y[:8], model(x[:8], training=False)))
        local_differs |= abs(half - expected) > 1e-3
    assert local_differs
    assert [r["loss"] for r in idrun.records(1, "step")] == pytest.approx([r["loss"] for r in records], rel=1e-6)


def test_every_example_is_seen_exactly_once_per_epoch(idrun):
    ids = [read_ids(idrun, 0), read_ids(idrun, 1)]
    steps_per_epoch = idrun.events(0, "started")[0]["steps_per_epoch"]
    assert steps_per_epoch == 96 // 16
    for epoch in range(2):
        window = slice(epoch * steps_per_epoch, (epoch + 1) * steps_per_epoch)
        seen = [i for worker in ids for line in worker[window] for i in line]
        assert sorted(seen) == list(range(96)), f"epoch {epoch}"
        for worker in ids:
            assert sum(len(line) for line in worker[window]) == 48
    # Reshuffled between epochs, and the two workers never train on the same example in a step.
    assert ids[0][0] != ids[0][steps_per_epoch]
    assert all(not set(a) & set(b) for a, b in zip(*ids))


def test_a_resumed_stream_goes_on_at_its_batch_without_reading_the_passes_before():
    """The training stream, resumed at any global step, yields the batches the whole stream has there; a resume
    in a later pass over the data reads that pass only (before, every skipped batch was read again)."""
    from types import SimpleNamespace

    import tensorflow as tf

    from trainer.train import make_datasets

    reads = []

    def counted(x):
        reads.append(1)
        return x

    def train_dataset():
        return tf.data.Dataset.range(10).map(lambda x: tf.py_function(counted, [x], tf.int64))

    workload = SimpleNamespace(train_dataset=train_dataset, num_examples=10, in_memory=True, val_dataset=None)
    plan, opts = SimpleNamespace(global_batch=3), SimpleNamespace(autoshard="auto", seed=7)
    whole = [b.numpy().tolist() for b in make_datasets(workload, plan, opts)[0].take(12)]
    assert sorted(sum(whole[:3], [])) != sum(whole[:3], [])  # shuffled
    assert whole[:3] != whole[3:6]  # each pass in its own order
    for skip in range(9):
        resumed = make_datasets(workload, plan, opts, skip=skip)[0]
        assert [b.numpy().tolist() for b in resumed.take(3)] == whole[skip:skip + 3], skip
    reads.clear()
    next(iter(make_datasets(workload, plan, opts, skip=3 * 3 + 1)[0]))  # pass 3's second batch
    assert len(reads) < 30  # pass 3 (and what prefetch reads ahead of it), not passes 0-2 as well: 30 and more


def test_an_elastic_task_keeps_its_runs_global_batch_and_learning_rate(tmp_path):
    """``--elastic``: the first attempt's global batch and learning rate hold whatever the workers now (from the
    newest backup's plan, else from the plan the first attempt wrote); without it, or before any plan, the
    options hold."""
    from trainer.backup import PLAN_SUFFIX
    from trainer.config import parse_options
    from trainer.train import ELASTIC_PLAN, keep_plan, kept_plan
    from trainer.plan import plan_batches

    opts = parse_options(["--run-dir", str(tmp_path), "--elastic", "--per-replica-batch", "16"])
    assert kept_plan(opts) == (opts, None)
    first = plan_batches(per_replica_batch=16, num_workers=3, replicas_per_worker=1, num_examples=1438,
                         steps_per_epoch=None, base_learning_rate=0.001, lr_rule="linear")
    keep_plan(opts, first)
    now, kept = kept_plan(opts)
    assert (now.global_batch, now.learning_rate, now.lr_scaling) == (48, pytest.approx(0.003), "none")
    shrunk = plan_batches(per_replica_batch=now.per_replica_batch, global_batch=now.global_batch, num_workers=2,
                          replicas_per_worker=1, num_examples=1438, steps_per_epoch=None,
                          base_learning_rate=now.learning_rate, lr_rule=now.lr_scaling)
    assert (shrunk.per_replica_batch, shrunk.global_batch, shrunk.learning_rate) == (24, 48, pytest.approx(0.003))
    # A backup's plan comes first (a folder the console seeded has the backup's, not the first attempt's file).
    backups = tmp_path / "backup"
    backups.mkdir()
    (backups / "backup-40.index").write_text("")
    (backups / f"backup-40{PLAN_SUFFIX}").write_text(json.dumps({"global_batch": 96, "learning_rate": 0.004}))
    assert kept_plan(opts)[0].global_batch == 96
    (tmp_path / ELASTIC_PLAN).write_text("{not json")
    (backups / "backup-40.index").unlink()
    with pytest.raises(ConfigError, match="delete it to plan the batch from this attempt's workers"):
        kept_plan(opts)


def test_the_trainer_keeps_its_fits_input_until_exit_and_a_users_model_does_not(monkeypatch):
    """tfcc's trainer keeps the iterator its ``fit`` trained from until ``os._exit`` (TensorFlow 2.21's teardown of
    it can wait up to a minute at the end of ``fit``: bench/end_of_run.py); a user's model, instrumented the same way
    by the capture, keeps nothing (one kept to the interpreter's end deadlocked a script there)."""
    import tensorflow as tf

    from trainer import train
    from trainer.report import instrument_step_loss

    monkeypatch.setattr(train, "_KEPT_UNTIL_EXIT", [])
    data = tf.data.Dataset.from_tensor_slices((np.zeros((8, 2), "float32"), np.zeros((8,), "float32"))).batch(4)

    def model():
        made = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
        made.compile(optimizer="sgd", loss="mse")
        assert instrument_step_loss(made)
        return made

    users = model()
    users.fit(data, epochs=1, verbose=0)
    assert users._tfcc_outputs.input is None and train._KEPT_UNTIL_EXIT == []
    trainers = model()
    train.keep_until_exit(trainers)
    trainers.fit(data, epochs=1, verbose=0)
    assert train._KEPT_UNTIL_EXIT == [trainers]
    assert trainers._tfcc_outputs.input is not None and hasattr(trainers._tfcc_outputs.input, "__next__")
