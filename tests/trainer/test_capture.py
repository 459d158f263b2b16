"""trainer/capture.py: a user's script run unchanged, what is read from its output and files, and
that the capture never changes what the script does."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.waiting import bound, wait_until
from trainer.capture import _StepAxis, _tfrecords, parse_line
from trainer.metrics import read_records

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "trainer" / "capture.py"


# --------------------------------------------------------------------------- printed lines


@pytest.mark.parametrize("line, values", [
    # TensorFlow's custom-training-loop tutorials
    ("Epoch: 1, accuracy: 0.930000, train_loss: 0.210000.", {"epoch": 1, "accuracy": 0.93, "train_loss": 0.21}),
    ("Epoch 3, Loss: 0.25, Accuracy: 91.5, Test Loss: 0.3, Test Accuracy: 90.1",
     {"epoch": 3, "Loss": 0.25, "Accuracy": 91.5, "Test_Loss": 0.3, "Test_Accuracy": 90.1}),
    ("val loss: 0.4, train loss: 0.3", {"val_loss": 0.4, "train_loss": 0.3}),
    ("Number of devices: 2", None),                      # no metric, no epoch or step
    ("Total params: 1,234 (4.82 KB)", None),             # model.summary(): "1,234" is no number 1
    ("30/30 [==============================] - 1s 12ms/step - loss: 0.2000 - accuracy: 0.9", None),
    ("30/30 ━━━━━━━━━━━━━━━━━━━━ 0s 2ms/step - accuracy: 0.75 - loss: 0.7", None),  # Keras 3's bar
    ("epoch=2 loss=1.5e-3 lr=0.01", {"epoch": 2, "loss": 0.0015, "lr": 0.01}),
    ("step 40: loss = 0.5", {"step": 40, "loss": 0.5}),
    ("Finished epoch 0, accuracy is 0.4437.", {"epoch": 0, "accuracy": 0.4437}),  # "is" between them
    ("Namespace(batch_size=64, epochs=3, learning_rate=0.001, model_dir='out')", None),  # argparse's settings
    ("args: lr=0.01 momentum=0.9", None),                # settings, printed as such
    ("Number of devices is 2", None),                    # no metric
    ("Epoch 3/10", None),                                # where it is, no value
    ("Connecting to localhost:12345 at 12:30:45", None),  # no space after the colon: no metric
    ("loss: nan, accuracy: 0.1", {"loss": float("nan"), "accuracy": 0.1}),
])
def test_printed_lines_give_their_name_value_pairs(line, values):
    found = parse_line(line)
    if values is None:
        assert found is None
        return
    for name, value in values.items():
        if value != value:  # NaN
            assert found[name] != found[name]
        else:
            assert found[name] == pytest.approx(value)


# --------------------------------------------------------------------------- event files


def test_tfrecords_are_read_whole_and_a_partial_one_waits():
    records = [b"first", b"second record"]
    data = b"".join(struct.pack("<Q", len(r)) + b"\0" * 4 + r + b"\0" * 4 for r in records)
    assert _tfrecords(data) == (records, len(data))
    assert _tfrecords(data[:-3]) == (records[:1], len(data) - (12 + len(records[1]) + 4))
    assert _tfrecords(b"") == ([], 0)


# --------------------------------------------------------------------------- running a script


def _environ(tmp_path: Path, source: str, env: dict | None, files: dict | None) -> dict:
    """``main.py`` and ``files`` written in ``tmp_path``; the environment a task of it gets."""
    (tmp_path / "main.py").write_text(source)
    for name, text in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "PYTHONPATH")}
    environ.update(TFCC_RUN_DIR=str(tmp_path), PYTHONPATH=str(ROOT), **(env or {}))
    return environ


def run(tmp_path: Path, source: str, *args: str, env: dict | None = None, files: dict | None = None):
    """``trainer/capture.py SCRIPT ARGS`` in ``tmp_path`` (its run folder too): the process and its records."""
    environ = _environ(tmp_path, source, env, files)
    proc = subprocess.run([sys.executable, str(CAPTURE), "main.py", *args], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=300)
    path = tmp_path / "metrics.jsonl"
    return proc, read_records(path) if path.exists() else []


def stopped(tmp_path: Path, source: str, when, env: dict | None = None):
    """``run``, but once ``when(records)`` holds the process gets SIGTERM, as a Stop sends it: the process (ended),
    its stderr and its records."""
    environ = _environ(tmp_path, source, env, None)
    path = tmp_path / "metrics.jsonl"
    with open(tmp_path / "stderr.txt", "w+") as err:
        proc = subprocess.Popen([sys.executable, str(CAPTURE), "main.py"], cwd=tmp_path, env=environ,
                                stdout=subprocess.DEVNULL, stderr=err)
        try:
            assert wait_until(lambda: proc.poll() is None and path.exists() and when(read_records(path)), 120,
                              every=0.05), proc.poll()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=bound(10))  # the stop's whole grace: it must not be needed
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        return proc, err.read(), read_records(path)


def test_a_script_runs_as_python_would_run_it(tmp_path):
    """Its argv, __main__, __file__, its folder first on sys.path, its cwd, stdout as it prints it,
    its exit code; a module of its own named like tfcc's (trainer.py) is the one it imports."""
    proc, records = run(tmp_path, """
import os, sys
import helper, trainer
print("argv", sys.argv[1:], __name__, os.path.basename(__file__), helper.VALUE, trainer.MINE)
print("path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
sys.exit(3)
""", "--flag", "x y", files={"helper.py": "VALUE = 41\n", "trainer.py": "MINE = 'mine'\n"})
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.splitlines() == ["argv ['--flag', 'x y'] __main__ main.py 41 mine", "path0 True"]
    assert [r["event"] for r in records if r["type"] == "event"] == ["launched", "cluster_formed"]
    assert records[0]["workload"] == "script" and records[0]["capture"] is True


def test_a_module_runs_as_python_m_would_run_it(tmp_path):
    """``-m trainer.task`` from the folder holding the package: its relative imports, ``__main__``, its
    file in argv[0], the cwd first on sys.path; its package is named like tfcc's own and is the one run.
    Its printed epochs are captured as a script's are."""
    files = {"trainer/__init__.py": "", "trainer/model.py": "NAME = 'dense'\n", "trainer/task.py": """
import os, sys
from . import model
print("argv", sys.argv[1:], __name__, __package__, os.path.relpath(sys.argv[0]), model.NAME)
print("path0", sys.path[0] == os.getcwd())
for epoch in range(2):
    print(f"epoch {epoch}: loss = {0.5 / (epoch + 1)}")
"""}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "PYTHONPATH")}
    environ.update(TFCC_RUN_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(CAPTURE), "-m", "trainer.task", "--flag"], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == ["argv ['--flag'] __main__ trainer trainer/task.py dense", "path0 True"]
    records = read_records(tmp_path / "metrics.jsonl")
    assert records[0]["event"] == "launched" and records[0]["script"] == "trainer.task"
    assert [(r["epoch"], r["loss"]) for r in records if r["type"] == "epoch"] == [(0, 0.5), (1, 0.25)]


def test_a_failing_script_fails_with_its_own_traceback(tmp_path):
    proc, _ = run(tmp_path, "import mnist_setup\n")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == "ModuleNotFoundError: No module named 'mnist_setup'"


def test_only_training_numbers_are_taken_from_what_a_script_prints(tmp_path):
    """Its settings (argparse's Namespace, a key=value dump before training) are no metrics; "epoch 3:" alone
    on a line places the next line's values; "accuracy is 0.64" is read."""
    proc, records = run(tmp_path, """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--learning_rate", type=float, default=0.001)
args = parser.parse_args()
print(args)
print("lr=0.001 batch_size=64 loss_scale=128")
for epoch in range(2):
    print(f"epoch {epoch}:")
    print(f"  loss={2.44 - epoch:.2f} acc={0.5 + epoch / 10:.2f}")
print("Finished epoch 1, accuracy is 0.64.")
""")
    assert proc.returncode == 0, proc.stderr
    printed = [{k: v for k, v in r.items() if k not in ("time", "attempt", "task_type", "task_index")}
               for r in records if r.get("captured") == "print"]
    assert printed == [
        {"type": "epoch", "captured": "print", "epoch": 0, "loss": 2.44, "acc": 0.5},
        {"type": "epoch", "captured": "print", "epoch": 1, "loss": 1.44, "acc": 0.6},
        {"type": "epoch", "captured": "print", "epoch": 1, "accuracy": 0.64},
    ]


def test_the_step_axis_never_goes_back():
    axis = _StepAxis()
    assert [axis.place(("fit", 1), s, after=True) for s in (1, 2, 3)] == [1, 2, 3]
    assert [axis.place(("fit", 2), s, after=True) for s in (1, 2)] == [4, 5]  # a later fit: after the first
    assert axis.place(("optimizer", 7), 0, after=True) == 5  # a restored model's fresh optimizer: where training is
    assert [axis.place(("summary", "f"), s) for s in (2, 3)] == [2, 3]  # read late: as written, though others are on
    assert [axis.place(("print",), s, after=True) for s in (6, 7, 1, 2)] == [6, 7, 8, 9]  # counted again: after
    axis.align(("optimizer", 8), 20, 9)  # fit's optimizer at fit's last step
    assert axis.place(("optimizer", 8), 21) == 10 and axis.top == 10


class _Iterations:
    def __init__(self, n: int):
        self.n = n

    def numpy(self) -> int:
        return self.n


class _Optimizer:
    """What the capture reads of a Keras optimizer: its ``iterations``."""

    def __init__(self, n: int = 0):
        self.iterations = _Iterations(n)


def _capture_after_fit(tmp_path, evaluated=False):
    """A capture after a fit of 3 epochs, 30 steps, that reported loss and accuracy (its optimizer at 30)."""
    from trainer.capture import Capture
    from trainer.metrics import MetricsWriter
    from trainer.tf_config import ClusterConfig

    writer = MetricsWriter(tmp_path / "m.jsonl")
    capture = Capture(writer, ClusterConfig())
    capture.held = [_Optimizer(30)]  # the capture holds optimizers weakly, as the script's own
    trained = capture.held[0]
    capture.optimizer_made(trained)
    capture._progressed = True
    capture.axis.align(("optimizer", id(trained)), 30, 30)
    capture._fitted = {"names": {"loss", "accuracy", "val_loss"}, "top": capture.axis.top, "restored": False}
    capture._evaluated = evaluated
    return capture, writer


def _records(tmp_path, writer) -> list[dict]:
    writer.close()
    return [{k: v for k, v in r.items() if k not in ("time", "attempt")} for r in read_records(tmp_path / "m.jsonl")]


def _printed_after_fit(tmp_path, lines, evaluated=False, restored=None) -> list[dict]:
    """The records of ``lines`` printed after that fit; ``evaluated``: an ``evaluate`` ran since; ``restored``:
    a restored model's optimizer (its count as restored) is the newest."""
    capture, writer = _capture_after_fit(tmp_path, evaluated)
    if restored is not None:
        capture.restored()  # load_model, load_weights, a checkpoint's restore
        capture.held.append(_Optimizer(restored))
        capture.optimizer_made(capture.held[-1])
    for line in lines:
        capture.printed(line)
    return _records(tmp_path, writer)


def test_a_line_printed_after_fit_repeating_its_numbers_is_left_out_and_the_rest_kept(tmp_path):
    assert _printed_after_fit(tmp_path, ["Training done, final loss: 2.3046", "loss: 2.3046, accuracy: 0.11",
                                         "test accuracy: 0.91"]) == [
        {"type": "step", "captured": "print", "global_step": 30, "test_accuracy": 0.91}]


def test_an_evaluation_printed_after_evaluate_is_evaluation_at_the_step_training_reached(tmp_path):
    """Also a restored model's (a fresh optimizer at 0; one restored at fit's end, or at an epoch's end where a
    checkpoint saved the best): at step 30, never at 0 and never past the steps trained."""
    for restored in (None, 0, 30, 20):
        assert _printed_after_fit(tmp_path / str(restored), ["Restored model, accuracy: 64.00%",
                                                             "Test loss: 0.31, accuracy: 0.9"],
                                  evaluated=True, restored=restored) == [
            {"type": "step", "captured": "print", "global_step": 30, "eval_accuracy": 64.0},
            {"type": "step", "captured": "print", "global_step": 30, "Test_loss": 0.31, "eval_accuracy": 0.9}]


def test_a_restored_model_has_trained_only_once_its_optimizer_goes_on(tmp_path):
    """A model restored at fit's end: its printed numbers repeat fit's (left out) until it trains again; then
    they are training, at the steps it took after fit's last."""
    capture, writer = _capture_after_fit(tmp_path)
    capture.restored()
    restored = _Optimizer(30)
    capture.held.append(restored)
    capture.optimizer_made(restored)
    capture.printed("Restored: loss: 2.3046, accuracy: 0.11")
    assert capture.optimizer_placed()[0] == 30  # where training is: a schedule loop counts no step for it
    restored.iterations.n = 35
    capture.printed("loss: 1.5, accuracy: 0.4")
    assert _records(tmp_path, writer) == [
        {"type": "step", "captured": "print", "global_step": 35, "loss": 1.5, "accuracy": 0.4}]


def test_a_new_loop_after_fit_is_training_from_its_first_printed_step(tmp_path):
    """A new optimizer, nothing restored: a loop that trained, its steps after fit's (at an epoch's count too)."""
    capture, writer = _capture_after_fit(tmp_path)
    capture.held.append(_Optimizer(10))
    capture.optimizer_made(capture.held[-1])
    capture.printed("loss: 1.5, accuracy: 0.4")
    capture.held[-1].iterations.n = 20
    capture.printed("loss: 1.2, accuracy: 0.5")
    assert _records(tmp_path, writer) == [
        {"type": "step", "captured": "print", "global_step": 40, "loss": 1.5, "accuracy": 0.4},
        {"type": "step", "captured": "print", "global_step": 50, "loss": 1.2, "accuracy": 0.5}]


class _Writer:
    """A summary writer, as the capture tells one from another."""


def _summary(capture, tag, step, optimizer_at, writer=None, recording=True) -> None:
    """The script writes the summary ``tag`` at ``step`` eagerly into ``writer`` (the default: the first followed),
    its newest optimizer at ``optimizer_at``."""
    from types import SimpleNamespace

    capture._newest_optimizer().iterations.n = optimizer_at
    default = writer if writer is not None else next(iter(capture.summaries.writers.keys()))
    capture._summary_written(SimpleNamespace(get_step=lambda: None, should_record_summaries=lambda: recording,
                                             _summary_state=SimpleNamespace(writer=default)),
                             SimpleNamespace(executing_eagerly=lambda: True), tag, step)


def _capture_with_writers(tmp_path, *logdirs):
    """A capture, its optimizer at 0 and a followed writer for each of ``logdirs`` (held by the capture)."""
    from trainer.capture import Capture
    from trainer.metrics import MetricsWriter
    from trainer.tf_config import ClusterConfig

    capture = Capture(MetricsWriter(tmp_path / "m.jsonl"), ClusterConfig())
    capture.held = [_Optimizer(0)] + [_Writer() for _ in logdirs]
    capture.optimizer_made(capture.held[0])
    for writer, logdir in zip(capture.held[1:], logdirs):
        capture.summaries.writers[writer] = logdir
    return capture


def test_each_summary_written_off_the_optimizers_step_is_placed_once_in_the_order_written(tmp_path):
    """Two loops each writing ``step=epoch``: the second's epoch 1 is not the first's; a write at the
    optimizer's own step between them takes no note; each read takes one."""
    capture = _capture_with_writers(tmp_path, "logs/train")
    _summary(capture, "loss", 1, optimizer_at=10)
    _summary(capture, "loss", 20, optimizer_at=20)  # at the optimizer's step: as written
    _summary(capture, "loss", 1, optimizer_at=40)
    assert [capture.summary_at("logs/train", "loss", 1) for _ in range(3)] == [10, 40, None]
    assert capture.summary_at("logs/train", "loss", 20) is None and capture._summary_at == {}


def test_a_summary_the_follower_does_not_read_takes_no_note(tmp_path):
    """Written to a writer it does not follow (a bucket's, one made in fit), or not recorded (``record_if``): a
    later write of the same tag and step where it reads is placed by its own note only; each folder its own."""
    capture = _capture_with_writers(tmp_path, "logs/train", "logs/test")
    train, test = capture.held[1:]
    _summary(capture, "loss", 1, optimizer_at=10, writer=_Writer())
    _summary(capture, "loss", 1, optimizer_at=10, writer=train, recording=False)
    _summary(capture, "loss", 1, optimizer_at=30, writer=test)
    _summary(capture, "loss", 1, optimizer_at=40, writer=train)
    assert capture.summary_at("logs/train", "loss", 1) == 40 and capture.summary_at("logs/test", "loss", 1) == 30
    assert capture._summary_at == {}


def test_summary_notes_never_read_stay_bounded(tmp_path):
    capture = _capture_with_writers(tmp_path, "logs")
    capture.MAX_SUMMARY_NOTES = 3
    for epoch in range(1, 6):
        _summary(capture, "loss", epoch, optimizer_at=epoch * 10)
    assert capture._summary_notes == 3 and sum(map(len, capture._summary_at.values())) == 3
    assert [capture.summary_at("logs", "loss", e) for e in range(1, 6)] == [None, None, 30, 40, 50]


def test_printed_steps_counted_again_go_on_after_the_first_loop(tmp_path):
    proc, records = run(tmp_path, """
for loop in range(2):
    for step in range(1, 4):
        print(f"step {step}: loss={1 / step:.2f}")
""")
    assert proc.returncode == 0, proc.stderr
    assert [(r["step"], r["global_step"]) for r in records if r["type"] == "step"] == [
        (1, 1), (2, 2), (3, 3), (1, 4), (2, 5), (3, 6)]


@pytest.mark.parametrize("role", ["ps", "worker"])
def test_a_parameter_server_or_serving_worker_records_no_printed_numbers(tmp_path, role):
    """Under parameter-server training only the coordinator trains: what a ps or a worker prints (its settings,
    a copy of the coordinator's lines) is no metric of its own."""
    config = json.dumps({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3"]},
                         "task": {"type": role, "index": 0}})
    proc, records = run(tmp_path, 'print("Epoch 1: loss=0.5, accuracy=0.9")\n', env={"TF_CONFIG": config})
    assert proc.returncode == 0, proc.stderr
    assert [r for r in records if r["type"] in ("step", "epoch")] == []


def test_printed_metrics_become_records_and_other_lines_do_not(tmp_path):
    proc, records = run(tmp_path, """
for epoch in range(3):
    print(f"Epoch: {epoch}, accuracy: {0.5 + epoch / 10:.2f}, train_loss: {1 / (epoch + 1):.3f}")
print("Reached localhost:12345, all done")
print("loss: 0.5", end="")  # a last line without its newline
""")
    assert proc.returncode == 0, proc.stderr
    epochs = [r for r in records if r["type"] == "epoch"]
    assert [(r["epoch"], r["accuracy"], r["train_loss"], r["captured"]) for r in epochs] == [
        (0, 0.5, 1.0, "print"), (1, 0.6, 0.5, "print"), (2, 0.7, 0.333, "print")]
    assert not [r for r in records if r["type"] == "step"]


@pytest.mark.slow
def test_keras3_fit_with_steps_per_execution_gets_each_step_once_and_its_true_pace(tmp_path):
    """Keras 3 (TensorFlow 2.21's default), steps_per_execution = 4: one record per execution, its
    steps counted, the step time per step and the throughput of the steps it ran."""
    proc, records = run(tmp_path, """
import keras, numpy as np
x = np.random.default_rng(0).random((256, 8), dtype="float32"); y = (x.sum(1) > 4).astype("int32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=4)
model.fit(x, y, batch_size=32, epochs=2, verbose=2)
""", env={"TF_USE_LEGACY_KERAS": "0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = [r for r in records if r["type"] == "step"]
    assert steps and all(r.get("steps") == 4 for r in steps)  # 6 steps an epoch (192 examples): 4, then 4 more
    for earlier, r in zip(steps, steps[1:]):
        assert r["global_batch"] == 32 and isinstance(r["loss"], float)
        # The step time is per step: the execution's steps took the time between its record and the last.
        if r["epoch"] == earlier["epoch"]:
            # (a busy machine may pause the process between the two clocks: a few ms either way)
            assert r["step_time"] * r["steps"] == pytest.approx(r["time"] - earlier["time"], rel=0.2, abs=0.02)
        assert r["global_examples_per_sec"] == pytest.approx(32 / r["step_time"], rel=1e-6)
    started = [r for r in records if r.get("event") == "started"]
    assert len(started) == 1 and started[0]["keras"] == "keras3" and started[0]["global_batch"] == 32
    # Keras's progress bar is no printed metric: fit's own records only.
    assert not [r for r in records if r.get("captured") == "print"]
    assert "loss:" in proc.stdout  # and it still reaches the script's output


@pytest.mark.slow
def test_a_summary_writer_in_a_folder_deleted_at_the_end_is_read_before(tmp_path):
    """A non-chief worker writes its summaries to a temporary folder and deletes it when done (as the
    tutorials do): what it wrote is read when the writer is flushed or closed."""
    proc, records = run(tmp_path, """
import os, shutil, tempfile
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
logdir = tempfile.mkdtemp()
writer = tf.summary.create_file_writer(logdir)
with writer.as_default():
    for step in range(1, 6):
        tf.summary.scalar("train_loss", 1.0 / step, step=step)
        tf.summary.scalar("accuracy", step / 10, step=step)
writer.close()
shutil.rmtree(logdir)
""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = [r for r in records if r.get("captured") == "summary"]
    assert [(r["global_step"], r["train_loss"], r["accuracy"]) for r in steps] == [
        (s, pytest.approx(1.0 / s), pytest.approx(s / 10)) for s in range(1, 6)]


@pytest.mark.slow
def test_a_tf_keras_script_keeps_the_keras_it_chose(tmp_path):
    """The capture touches no tf.keras before the script: a script that picks tf-keras itself gets it."""
    proc, records = run(tmp_path, """
import os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import gc
frozen = gc.get_freeze_count()
import tensorflow as tf
import numpy as np
print("keras", tf.keras.__name__.split(".")[0])
print("collector", gc.isenabled(), gc.get_freeze_count() - frozen)
model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
model.compile(tf.keras.optimizers.legacy.SGD(), "mse")
model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=1, verbose=0)
""", env={"TF_USE_LEGACY_KERAS": "0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "keras tf_keras" in proc.stdout
    # TensorFlow was imported with the collector paused (trainer/process.py), and the script has it back on,
    # with what the import made frozen
    enabled, frozen = re.search(r"collector (\w+) (\d+)", proc.stdout).groups()
    assert enabled == "True" and int(frozen) > 100_000, proc.stdout
    assert [r for r in records if r.get("event") == "started"][0]["keras"] == "tf-keras"


def test_report_writes_a_loops_own_values_once_each_beside_what_is_captured(tmp_path):
    """The one call for loops: step and epoch records of any numeric values, in the capture's file."""
    proc, records = run(tmp_path, """
from trainer.metrics import report
for step in range(1, 4):
    report(step=step, loss=1.0 / step, learning_rate=0.1)
report(epoch=0, val_accuracy=0.5)
report(loss="not a number")
""")
    assert proc.returncode == 0, proc.stderr
    mine = [r for r in records if r["type"] in ("step", "epoch")]
    assert [(r["type"], r.get("global_step"), r.get("loss"), r.get("val_accuracy")) for r in mine] == [
        ("step", 1, 1.0, None), ("step", 2, 0.5, None), ("step", 3, pytest.approx(1 / 3), None),
        ("epoch", None, None, 0.5), ("step", 4, None, None)]
    assert all(r["task_type"] == "worker" and r["attempt"] == 1 for r in mine)


@pytest.mark.slow
def test_the_scripts_own_callbacks_see_what_they_see_standalone(tmp_path):
    """tfcc's reporter measures the step through outputs of its own: no callback of the script's (a
    CSVLogger before it, History, the progress bar) and no epoch log ever holds them."""
    source = """
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf
tf.keras.utils.set_random_seed(0)
x = np.random.default_rng(0).random((128, 8), dtype="float32"); y = (x.sum(1) > 4).astype("int32")
model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(2)])
model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
seen = []
class Spy(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        seen.append(sorted(logs))
history = model.fit(x, y, batch_size=32, epochs=2, validation_split=0.25, verbose=2,
                    callbacks=[tf.keras.callbacks.CSVLogger("log.csv"), Spy()])
print("HISTORY", sorted(history.history), file=sys.stderr)
print("BATCH", seen[-1], file=sys.stderr)
"""
    proc, records = run(tmp_path, source)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "HISTORY ['accuracy', 'loss', 'val_accuracy', 'val_loss']" in proc.stderr
    assert "BATCH ['accuracy', 'loss']" in proc.stderr
    assert open(tmp_path / "log.csv").readline().strip() == "epoch,accuracy,loss,val_accuracy,val_loss"
    assert "tfcc" not in proc.stdout
    steps = [r for r in records if r["type"] == "step"]
    assert len(steps) == 2 * 3 and all(isinstance(r["loss"], float) for r in steps)  # 96 examples: 3 steps


@pytest.mark.slow
def test_summaries_of_this_process_only_and_a_second_writers_under_its_folder(tmp_path):
    """An event file another process wrote (an earlier attempt's, kept in the task's work folder; one
    shipped with the workdir) is no part of this run; a second writer's tags ("test/loss" beside the train
    writer's "loss") stay apart."""
    proc, records = run(tmp_path, """
import os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
old = tf.summary.create_file_writer.__wrapped__("old")  # TensorFlow's own: as if another process wrote it
with old.as_default():
    tf.summary.scalar("loss", 99.0, step=1)
old.close()
os.makedirs("logs/train", exist_ok=True)
for name in os.listdir("old"):
    parts = name.split(".")
    parts[-3] = "1"  # pid 1 wrote it: events.out.tfevents.<time>.<host>.<pid>.<n>.v2
    os.rename(os.path.join("old", name), os.path.join("logs/train", ".".join(parts)))
train, test = (tf.summary.create_file_writer(f"logs/{part}") for part in ("train", "test"))
for step in (1, 2):
    with train.as_default():
        tf.summary.scalar("loss", 1.0 / step, step=step)
    with test.as_default():
        tf.summary.scalar("loss", 2.0 / step, step=step)
train.close()
test.close()
""")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summaries = [r for r in records if r.get("captured") == "summary"]
    assert sorted((r["global_step"], k, v) for r in summaries for k, v in r.items() if "loss" in k) == [
        (1, "loss", 1.0), (1, "test/loss", 2.0), (2, "loss", 0.5), (2, "test/loss", 1.0)]


@pytest.mark.slow
def test_a_summary_step_read_in_two_parts_is_one_record(tmp_path):
    """A step's scalars are events of their own, and a read may end between them: the newest step waits
    for a newer one (or the writer's flush) and each step comes out once, whole."""
    from tensorflow.core.util import event_pb2

    from trainer.capture import _SummaryFollower

    def frame(step: int, tag: str, value: float) -> bytes:
        event = event_pb2.Event(step=step, wall_time=1.0)
        event.summary.value.add(tag=tag, simple_value=value)
        data = event.SerializeToString()
        return struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4

    written = []
    follower = _SummaryFollower(type("Capture", (), {"write": lambda self, r: written.append(r), "axis": _StepAxis(),
                                                     "summary_at": lambda self, logdir, tag, step: None})())
    follower.logdirs.append(str(tmp_path))
    path = tmp_path / f"events.out.tfevents.1.host.{os.getpid()}.0.v2"
    path.write_bytes(frame(1, "loss", 0.5))
    follower.read()
    assert written == []  # step 1 may have more to come
    with open(path, "ab") as f:
        f.write(frame(1, "accuracy", 0.25) + frame(2, "loss", 0.25))
    follower.read()
    assert [(r["global_step"], r.get("loss"), r.get("accuracy")) for r in written] == [(1, 0.5, 0.25)]
    follower.read(whole=True)
    assert [(r["global_step"], r.get("loss"), r.get("accuracy")) for r in written] == [(1, 0.5, 0.25),
                                                                                      (2, 0.25, None)]


# --------------------------------------------------------------------------- a Stop


def _steps(records: list[dict]) -> list[dict]:
    return [r for r in records if r["type"] == "step"]


@pytest.mark.slow
def test_a_stopped_fit_backs_up_where_the_script_keeps_backups_and_a_rerun_goes_on_at_the_next_step(tmp_path):
    """Stop sends SIGTERM: the step in progress finishes, the script's own BackupAndRestore (every 50 steps, as the
    Keras guide's) backs up at that step, fit's end keeps it, and the process ends as tfcc's trainer does
    (143), its code after fit not run. The script run again goes on at the next step, each step recorded once."""
    source = """
import argparse, os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--backup-dir", default="backup")
args = parser.parse_args()
x = np.random.default_rng(0).random((3200, 8), dtype="float32"); y = (x.sum(1) > 4).astype("int32")
layers = tf.keras.layers
model = tf.keras.Sequential([tf.keras.Input((8,)), layers.Dense(8, activation="relu"), layers.Dense(2)])
model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
class Backup(tf.keras.callbacks.BackupAndRestore):  # a script's own class on Keras's
    pass


model.fit(x, y, batch_size=32, epochs=1000, verbose=0, callbacks=[Backup(args.backup_dir, save_freq=50)])
open("after_fit", "w").close()
"""
    # Mid-epoch (100 steps an epoch), off the script's own backups' steps.
    proc, stderr, records = stopped(tmp_path, source, lambda rs: any(r["global_step"] >= 130 for r in _steps(rs)))
    assert proc.returncode == 143, stderr[-2000:]
    last = _steps(records)[-1]["global_step"]
    assert f"tfcc: stopped on SIGTERM after step {last}; its BackupAndRestore (backup) backed up at the stop" in stderr
    assert not (tmp_path / "after_fit").exists()
    assert (tmp_path / "backup" / "chief" / "checkpoint").exists()
    assert [r["epoch"] for r in records if r["type"] == "epoch"] == list(range(last // 100))  # none of the cut one

    os.rename(tmp_path / "metrics.jsonl", tmp_path / "first.jsonl")
    proc, stderr, again = stopped(tmp_path, source, lambda rs: len(_steps(rs)) >= 3)
    assert proc.returncode == 143, stderr[-2000:]
    first = _steps(again)[0]
    assert (first["epoch"], first["step"], first["global_step"]) == (last // 100, last % 100, last + 1)
    assert "steps" not in first  # one step, its own time
    steps = _steps(again)
    assert [r["global_step"] for r in steps] == list(range(last + 1, last + 1 + len(steps)))
    assert all(type(r[k]) is int for r in steps for k in ("epoch", "step", "global_step"))


@pytest.mark.slow
def test_a_stop_in_a_keras3_epoch_keeps_the_backup_of_the_last_whole_epoch(tmp_path):
    """Keras 3, BackupAndRestore at each epoch's end (its default): a backup of the cut epoch would resume after
    it, its rest skipped; the last whole epoch's stays the newest, and nothing deletes it. Run again, the script
    goes on at that epoch, and a stop there keeps it (Keras 3 counts its epochs from 0 in each fit)."""
    source = """
import keras, numpy as np
x = np.random.default_rng(0).random((640, 8), dtype="float32"); y = (x.sum(1) > 4).astype("int32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=32, epochs=1000, verbose=0, callbacks=[keras.callbacks.BackupAndRestore("backup")])
"""
    proc, stderr, records = stopped(tmp_path, source, lambda rs: any(r["global_step"] >= 50 for r in _steps(rs)),
                                    env={"TF_USE_LEGACY_KERAS": "0"})
    assert proc.returncode == 143, stderr[-2000:]
    last = _steps(records)[-1]
    epochs = [r["epoch"] for r in records if r["type"] == "epoch"]
    kept = json.loads((tmp_path / "backup" / "training_metadata.json").read_text())
    if last["step"] == 19:  # the stop fell on an epoch's last step: that epoch is whole, and backed up
        assert epochs == list(range(last["epoch"] + 1)) and kept["epoch"] == last["epoch"] + 1
        assert "; its BackupAndRestore (backup) backed up at the end of the epoch" in stderr
    else:
        assert epochs == list(range(last["epoch"])) and kept["epoch"] == last["epoch"]
        assert "; its BackupAndRestore (backup) keeps the backup of the last whole epoch (save_freq='epoch')" in stderr
    os.rename(tmp_path / "metrics.jsonl", tmp_path / "first.jsonl")
    proc, stderr, again = stopped(tmp_path, source, lambda rs: bool(_steps(rs)), env={"TF_USE_LEGACY_KERAS": "0"})
    assert proc.returncode == 143, stderr[-2000:]
    resumed = _steps(again)
    assert resumed[0]["epoch"] == kept["epoch"], "run again, it goes on at the epoch its backup names"
    kept_again = json.loads((tmp_path / "backup" / "training_metadata.json").read_text())
    assert kept_again["epoch"] == resumed[-1]["epoch"] + (resumed[-1]["step"] == 19)
