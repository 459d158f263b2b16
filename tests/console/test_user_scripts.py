"""Users' own scripts, unchanged, under ``tfcc run --json``: every common shape trains to its end on
local workers and its metrics reach the stream per worker, captured from the outside (issue 20).

The scripts are in tests/data/scripts/ (one folder per shape, written the way TensorFlow's tutorials
and the Keras guides write them); each test copies its folder, so what a run writes stays out of the
repository.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from agent import runs
from tests.helpers.cli import tfcc
from trainer.records import PLACE_FIELDS

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "data" / "scripts"

HOST = """
[[hosts]]
name = "local"
local = true
"""
TWO_WORKERS = HOST + '\n[[tasks]]\nhost = "local"\n' * 2
ONE_WORKER = HOST + '\n[[tasks]]\nhost = "local"\n'
PARAMETER_SERVERS = HOST + """
[[tasks]]
host = "local"
role = "chief"

[[tasks]]
host = "local"

[[tasks]]
host = "local"

[[tasks]]
host = "local"
role = "ps"
"""


@pytest.fixture
def homes(local_homes, monkeypatch):
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)  # what each script gets is tfcc's to say
    return local_homes


def cluster_file(homes: Path, shape: str, tasks: str, training: str = "", script: str = "main.py") -> Path:
    """A cluster file running a copy of ``tests/data/scripts/<shape>/<script>`` on ``tasks``."""
    folder = homes / "scripts" / shape
    if not folder.exists():
        shutil.copytree(SCRIPTS / shape, folder, ignore=shutil.ignore_patterns("logs", "saved_model", "__pycache__"))
    path = homes / f"{shape}.toml"
    path.write_text(f"[training]\nscript = {str(folder / script)!r}\n{training}\n{tasks}")
    return path


def records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def of(stream: list[dict], task: str, kind: str, **fields) -> list[dict]:
    return [r for r in stream if r.get("task") == task and r.get("type") == kind
            and all(r.get(k) == v for k, v in fields.items())]


def run_json(homes: Path, path: Path, run_id: str, capsys, captured: bool = True) -> list[dict]:
    code, out, err = tfcc(["run", str(path), "--json", "--run-id", run_id], capsys)
    stream = records(out)
    ends = {r["task"]: r.get("phase") for r in stream if r.get("type") == "end"}
    assert code == 0, (err, ends)
    assert ends and set(ends.values()) == {"finished"}, ends
    assert not [r for r in stream if r.get("type") in ("watchdog", "stalled", "alert", "failure")]
    if captured:  # no false alarm, however short the watchdog: each task said its cluster formed, or served
        for task in ends:
            assert of(stream, task, "event", event="cluster_formed") or of(stream, task, "event", event="serving"), task
    return stream


def metrics(record: dict) -> dict:
    """A step or epoch record's numbers, without what says where and when it is."""
    return {k: v for k, v in record.items() if k not in PLACE_FIELDS and k not in ("task", "host", "epoch_time")}


def on_one_axis(records: list[dict]) -> bool:
    """Whether records placed on the step axis (those with a ``global_step``) never go back."""
    placed = [r["global_step"] for r in records if "global_step" in r]
    return placed == sorted(placed)


def assert_fit_steps(stream: list[dict], task: str, steps: int) -> None:
    """``fit``'s step records of ``task``: each with the step's loss and its time, each step once."""
    found = of(stream, task, "step")
    assert found, f"no step record of {task}"
    assert all(isinstance(r.get("loss"), float) and r.get("step_time", 0) > 0 for r in found), found[:3]
    ends = [r["global_step"] for r in found]
    assert len(ends) == len(set(ends)) and max(ends) == steps, ends


# --------------------------------------------------------------------------- the shapes


@pytest.mark.slow
def test_mwms_fit_in_two_files_runs_unchanged_with_every_workers_step_loss(homes, capsys):
    """main.py imports mnist_setup.py beside it and reads config.json by a relative path."""
    path = cluster_file(homes, "mwms_fit", TWO_WORKERS, 'args = ["--epochs", "2"]')
    stream = run_json(homes, path, "mwms-fit", capsys)
    for task in ("worker-0", "worker-1"):
        assert_fit_steps(stream, task, 2 * 10)  # config.json: 10 steps per epoch
        epochs = of(stream, task, "epoch")
        assert [r["epoch"] for r in epochs] == [0, 1] and all("loss" in r and "accuracy" in r for r in epochs)
        started = of(stream, task, "event", event="started")[0]
        # The script's real batch: 32 per worker x 2 workers (config.json), read from what fit trained on.
        assert (started["strategy"], started["num_workers"], started["global_batch"],
                started["per_replica_batch"], started["keras"]) == ("multi_worker_mirrored", 2, 64, 32, "tf-keras")
    # The same step loss on both workers: the global batch's.
    losses = [{r["global_step"]: r["loss"] for r in of(stream, t, "step")} for t in ("worker-0", "worker-1")]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    # What a task writes stays in its run folder: the chief's saved model is in its copy of the workdir.
    assert (homes / "host-home" / "runs" / "mwms-fit" / "worker-0" / "work" / "saved_model" / "digits").is_dir()


@pytest.mark.slow
def test_a_package_run_as_a_module_from_its_parent_folder_trains_on_every_worker(homes, capsys, monkeypatch):
    """A cloud sample's package (trainer/task.py with ``from . import model``), named as its README runs it,
    ``python -m trainer.task``, from the folder that holds trainer/ (the workdir by default). Its package is
    named like tfcc's own trainer: the script gets its own."""
    folder = homes / "scripts" / "cloud_package"
    shutil.copytree(SCRIPTS / "cloud_package", folder, ignore=shutil.ignore_patterns("__pycache__", "out"))
    monkeypatch.chdir(folder)
    path = homes / "module.toml"
    path.write_text('[training]\nmodule = "trainer.task"\nargs = ["--num-epochs", "2", "--job-dir", "out"]\n'
                    + TWO_WORKERS)
    stream = run_json(homes, path, "module", capsys)
    for task in ("worker-0", "worker-1"):
        launched = of(stream, task, "event", event="launched")[0]
        assert launched["workload"] == "script" and launched["script"] == "trainer.task"
        assert_fit_steps(stream, task, 2 * 5)
        assert [r["global_step"] for r in of(stream, task, "step")] == list(range(1, 11))
        epochs = of(stream, task, "epoch")
        assert [r["epoch"] for r in epochs] == [0, 1]
        for r in epochs:
            assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(r), r
        started = of(stream, task, "event", event="started")[0]
        assert (started["strategy"], started["num_workers"], started["global_batch"], started["keras"]) == (
            "multi_worker_mirrored", 2, 64, "tf-keras")
        # Only fit's numbers: its own printed epoch lines (verbose=2) are fit's, not a second series.
        assert not [r for r in stream if r.get("task") == task and r.get("captured") == "print"]
    # It ran in the task's copy of the workdir: the chief's model is there, as --job-dir out says.
    work = homes / "host-home" / "runs" / "module" / "worker-0" / "work"
    assert (work / "out" / "model").is_dir() and (work / "trainer" / "task.py").is_file()


@pytest.mark.slow
def test_an_experiment_that_imports_its_repositorys_package_runs_as_a_module_from_the_root(homes, capsys):
    """experiments/digits/train.py imports myproject from the repository's root: run as its README runs it,
    python -m experiments.digits.train with the root as workdir; each printed epoch is one epoch record."""
    folder = homes / "scripts" / "repo_root"
    shutil.copytree(SCRIPTS / "repo_root", folder, ignore=shutil.ignore_patterns("__pycache__"))
    path = homes / "repo.toml"
    path.write_text(f'[training]\nmodule = "experiments.digits.train"\nworkdir = {str(folder)!r}\n'
                    'args = ["--epochs", "3"]\n' + ONE_WORKER)
    stream = run_json(homes, path, "repo", capsys)
    epochs = of(stream, "worker-0", "epoch")
    assert [r["epoch"] for r in epochs] == [0, 1, 2]
    for r in epochs:
        assert r["captured"] == "print" and set(r) - {"task", "host", "attempt", "task_type", "task_index", "time"} \
            == {"type", "captured", "epoch", "loss", "accuracy", "global_step"}, r
    # The optimizer's steps: 5 an epoch, on one axis that never goes back.
    assert [r["global_step"] for r in epochs] == [5, 10, 15]
    assert not of(stream, "worker-0", "step")


@pytest.mark.slow
def test_a_single_task_written_for_keras_2_gets_tf_keras_under_auto(homes, capsys, monkeypatch):
    """The cloud package alone on one worker: its tf.keras code saves a SavedModel by a folder name (Keras 2's
    model.save, which Keras 3 refuses); auto gives it tf-keras, and says why in its records."""
    folder = homes / "scripts" / "cloud_package"
    shutil.copytree(SCRIPTS / "cloud_package", folder, ignore=shutil.ignore_patterns("__pycache__", "out"))
    monkeypatch.chdir(folder)
    path = homes / "keras2.toml"
    path.write_text('[training]\nmodule = "trainer.task"\nargs = ["--num-epochs", "1"]\n' + ONE_WORKER)
    stream = run_json(homes, path, "keras2", capsys)
    reason = "tf-keras: it uses tf.keras (trainer/model.py:6), written for Keras 2"
    assert of(stream, "worker-0", "event", event="launched")[0]["keras_reason"] == reason
    started = of(stream, "worker-0", "event", event="started")[0]
    assert (started["keras"], started["keras_reason"]) == ("tf-keras", reason)
    assert [r["global_step"] for r in of(stream, "worker-0", "step")] == [1, 2, 3, 4, 5]
    assert (homes / "host-home" / "runs" / "keras2" / "worker-0" / "work" / "out" / "model" / "saved_model.pb").is_file()


@pytest.mark.slow
def test_a_two_worker_script_that_raises_is_failed_everywhere_and_names_its_own_line(homes, capsys):
    """Both workers raise a NameError in a callback beside main.py after the first epoch. The run is failed in
    the terminal, tfcc runs and the history, though tfcc stopped a worker; the failure names the user's own file
    (as it is here) and line; no resume from a backup is offered (the code must change, and none was made)."""
    path = cluster_file(homes, "mwms_name_error", TWO_WORKERS)
    code, out, err = tfcc(["run", str(path), "--run-id", "name-error"], capsys)
    assert code == 1, (out, err)
    said = " ".join((out + err).split())
    mine = homes / "scripts" / "mwms_name_error" / "reporting.py"
    assert (f"error in the training code at {mine}:7 (`print(f\"epoch {{epoch}} done, loss {{logs['loss']:.4f}}, "
            "best {best_loss:.4f}\")`): NameError: name 'best_loss' is not defined") in said, said
    # The task that raised first ended failed; its peer, stopped with the group before it raised too, may say
    # stopped, by the stop's signal, never over an error exit of its own.
    assert "ended failed (exit code 1)" in said
    assert all(re.match(r" \(exit code -(9|15)\)", rest) for rest in said.split("ended stopped")[1:]), said
    assert "tfcc resume" not in said and "from its last backup" not in said
    assert err.splitlines()[-1] == f"tfcc: once the code is fixed, start the run again: tfcc run {path}"
    code, out, _ = tfcc(["runs", "--json"], capsys)
    assert code == 0 and [r["state"] for r in json.loads(out) if r["run_id"] == "name-error"] == ["failed"]
    history = json.loads((homes / "console-home" / "runs" / "name-error" / "summary.json").read_text())
    assert history["state"] == "failed"


def test_a_package_file_run_by_its_path_is_told_to_run_as_a_module(homes, capsys):
    """The same package named by its file: Python refuses its relative import; tfcc says to run it as a module
    (with the folder that holds the package), not to fix the code, and does not restart it."""
    folder = homes / "scripts" / "cloud_package"
    shutil.copytree(SCRIPTS / "cloud_package", folder, ignore=shutil.ignore_patterns("__pycache__", "out"))
    path = homes / "as-script.toml"
    path.write_text(f"[training]\nscript = {str(folder / 'trainer' / 'task.py')!r}\n" + ONE_WORKER)
    code, out, err = tfcc(["run", str(path), "--run-id", "as-script"], capsys)
    assert code == 1, (out, err)
    said = out + err
    assert ("the script uses a relative import (from . import …), which Python allows only in a module of a package "
            f'run with python -m; a file run by its path has no package; run it as a module: module = "trainer.task", '
            f'workdir = "{folder}" in [training]') in " ".join(said.split()), said
    assert "fix it where the traceback" not in said and "restarting" not in said
    # Started again, not resumed: tfcc holds no backup of a script's training.
    assert "tfcc resume" not in said and "backup" not in said.replace("backups", "")
    assert err.splitlines()[-1] == f"tfcc: once the code is fixed, start the run again: tfcc run {path}"


@pytest.mark.slow
def test_mwms_custom_loop_that_prints_per_epoch_values_gives_each_workers_epochs(homes, capsys):
    path = cluster_file(homes, "mwms_loop_print", TWO_WORKERS)
    stream = run_json(homes, path, "mwms-print", capsys)
    for task in ("worker-0", "worker-1"):
        epochs = of(stream, task, "epoch", captured="print")
        assert len(epochs) >= 2, epochs
        assert all(isinstance(r.get("train_loss"), float) and isinstance(r.get("accuracy"), float) for r in epochs)
        steps = [r.get("global_step") for r in epochs]
        assert all(isinstance(s, int) for s in steps) and steps == sorted(steps) and steps[0] > 0, steps


@pytest.mark.slow
def test_mwms_custom_loop_writing_summaries_gives_a_curve_per_summary_step(homes, capsys):
    """Summaries at the optimizer's step (every step) and at ``step=epoch`` (one per epoch): the epoch's are
    put where training was when they were written (each epoch's last step), never at steps 0, 1, 2."""
    path = cluster_file(homes, "mwms_loop_summary", TWO_WORKERS)
    stream = run_json(homes, path, "mwms-summary", capsys)
    for task in ("worker-0", "worker-1"):
        captured = [r for r in stream if r.get("task") == task and r.get("type") in ("step", "epoch")]
        assert all(r.get("captured") == "summary" and r["type"] == "step" for r in captured), captured
        per_step = [r for r in captured if "summary_step" not in r]
        assert [r["global_step"] for r in per_step] == list(range(1, 31))  # 3 epochs x 10 steps, each once
        assert all(set(metrics(r)) == {"train_loss", "accuracy"} for r in per_step), per_step[:3]
        per_epoch = [r for r in captured if "summary_step" in r]
        assert [(r["summary_step"], r["global_step"]) for r in per_epoch] == [(0, 10), (1, 20), (2, 30)]
        assert all(set(metrics(r)) == {"epoch_accuracy"} for r in per_epoch), per_epoch
        assert on_one_axis(captured)


@pytest.mark.slow
def test_parameter_server_fit_finishes_with_the_coordinators_steps(homes, capsys):
    """steps_per_execution = 5: each record's pace is per step, not per execution. Every task prints its argparse
    ``Namespace(...)``: no metric. After fit the chief evaluates with a ``schedule`` loop and prints the
    result: no training step, one evaluation value at fit's last step. The servers record nothing."""
    path = cluster_file(homes, "ps_fit", PARAMETER_SERVERS, 'args = ["--epochs", "2"]')
    stream = run_json(homes, path, "ps-fit", capsys)
    steps = of(stream, "chief-0", "step")
    assert steps and all(isinstance(r.get("loss"), float) and r["step_time"] > 0 for r in steps[:-1])
    # every record the chief has: fit's steps (every 10th of 2 x 20) and epochs, then the evaluation it printed
    captured = [r for r in stream if r.get("task") == "chief-0" and r.get("type") in ("step", "epoch")]
    assert [(r["type"], r.get("global_step", r.get("epoch")), r.get("captured")) for r in captured] == [
        ("step", 10, None), ("step", 20, None), ("epoch", 0, None), ("step", 30, None), ("step", 40, None),
        ("epoch", 1, None), ("step", 40, "print")]
    assert metrics(captured[-1]) == {"Evaluation_accuracy": pytest.approx(captured[-1]["Evaluation_accuracy"])}
    assert 0.5 < captured[-1]["Evaluation_accuracy"] <= 1
    assert not [r for r in captured if {"learning_rate", "eval_steps", "epochs"} & set(r)], captured
    for server in ("worker-0", "worker-1", "ps-0"):
        assert not [r for r in stream if r.get("task") == server and r.get("type") in ("step", "epoch")]
    steps = steps[:-1]
    started = of(stream, "chief-0", "event", event="started")[0]
    assert started["strategy"] == "parameter_server" and started["asynchronous"] and started["num_workers"] == 2
    # Throughput counts each step of an execution once: a step's examples over a step's time.
    for r in steps:
        assert r["global_examples_per_sec"] == pytest.approx(r["global_batch"] / r["step_time"], rel=1e-6)
    for server in ("worker-0", "worker-1", "ps-0"):
        assert of(stream, server, "event", event="serving")


@pytest.mark.slow
def test_parameter_server_coordinator_loop_reports_steps_and_epochs(homes, capsys):
    path = cluster_file(homes, "ps_loop", PARAMETER_SERVERS)
    stream = run_json(homes, path, "ps-loop", capsys)
    scheduled = of(stream, "chief-0", "step", captured="schedule")
    assert scheduled and all(r["step_time"] > 0 and r["steps"] >= 1 for r in scheduled)
    epochs = of(stream, "chief-0", "epoch", captured="print")
    assert len(epochs) >= 2 and all(any("loss" in k for k in r) for r in epochs), epochs


@pytest.mark.slow
def test_single_host_mirrored_fit_in_keras3_gets_keras3_and_its_second_fit_goes_on_after_the_first(homes, capsys):
    """fit (3 epochs of 12 steps), compile again and fit again to fine-tune (2 epochs): the second fit's steps
    go on from step 37, marked ``fit: 2``; the evaluations printed at the end (the model's, then the one saved and
    restored with its optimizer) are evaluation, at the last step."""
    path = cluster_file(homes, "mirrored_fit_keras3", ONE_WORKER)
    stream = run_json(homes, path, "k3", capsys)
    started = of(stream, "worker-0", "event", event="started")[0]
    assert started["keras"] == "keras3" and started["strategy"] == "mirrored"
    assert started["keras_reason"] == "keras3: it imports keras (main.py:4), Keras 3"
    assert [r.get("fit") for r in of(stream, "worker-0", "event", event="train_begin")] == [None, 2]
    steps = of(stream, "worker-0", "step")
    assert [(r["global_step"], r.get("fit")) for r in steps if "captured" not in r] == (
        [(s, None) for s in range(1, 37)] + [(s, 2) for s in range(37, 61)])
    assert all(isinstance(r["loss"], float) for r in steps if "captured" not in r)
    epochs = of(stream, "worker-0", "epoch")
    assert [(r["epoch"], r.get("fit"), r.get("global_step")) for r in epochs] == [
        (0, None, None), (1, None, None), (2, None, None), (0, 2, 48), (1, 2, 60)]
    assert all({"loss", "accuracy", "val_loss", "val_accuracy"} <= set(r) for r in epochs)
    printed = [r for r in stream if r.get("task") == "worker-0" and r.get("captured") == "print"]
    assert [(r["type"], r["global_step"], sorted(metrics(r))) for r in printed] == [
        ("step", 60, ["Eval_accuracy", "Eval_loss"]), ("step", 60, ["eval_accuracy"])]
    assert printed[1]["eval_accuracy"] == pytest.approx(100 * printed[0]["Eval_accuracy"], abs=0.01)
    assert on_one_axis([r for r in stream if r.get("task") == "worker-0" and r.get("type") in ("step", "epoch")])


@pytest.mark.slow
def test_single_host_mirrored_custom_loop_in_tf_keras(homes, capsys):
    path = cluster_file(homes, "mirrored_loop_tfkeras", ONE_WORKER)
    stream = run_json(homes, path, "tfk-loop", capsys)
    assert len(of(stream, "worker-0", "epoch", captured="print")) >= 2


@pytest.mark.slow
def test_a_hand_written_loop_that_prints_its_own_way_gives_its_epochs(homes, capsys):
    """"config: epochs=3 ...", then per epoch "epoch 0:" with "loss=..." on the next line and "validation after
    epoch 0, accuracy is 0.85": each epoch's loss and accuracy at its last step (24 steps of 64 of 1500)."""
    path = cluster_file(homes, "printed_loop", ONE_WORKER)
    stream = run_json(homes, path, "printed", capsys)
    captured = [r for r in stream if r.get("task") == "worker-0" and r.get("type") in ("step", "epoch")]
    assert [(r["type"], r["epoch"], r["global_step"], sorted(metrics(r))) for r in captured] == [
        ("epoch", epoch, 24 * (epoch + 1), [name]) for epoch in range(3) for name in ("loss", "accuracy")]
    assert all(r["captured"] == "print" for r in captured)
    assert captured[-1]["accuracy"] > 0.8 and captured[-2]["loss"] < captured[0]["loss"]


# --------------------------------------------------------------------------- capture's promises


@pytest.mark.slow
def test_a_script_with_its_own_metrics_reporter_gets_each_record_once(homes, capsys):
    folder = homes / "reporter"
    folder.mkdir()
    shutil.copy(ROOT / "tests" / "trainer" / "data" / "user_script_with_reporter.py", folder / "main.py")
    path = homes / "reporter.toml"
    path.write_text(f"[training]\nscript = {str(folder / 'main.py')!r}\n{TWO_WORKERS}")
    stream = run_json(homes, path, "own-reporter", capsys)
    for task in ("worker-0", "worker-1"):
        assert_fit_steps(stream, task, 2 * 8)
        assert len(of(stream, task, "epoch")) == 2
        assert len(of(stream, task, "event", event="started")) == 1


@pytest.mark.slow
def test_capture_off_gives_no_records_no_false_alarm_and_a_parameter_server_run_that_finishes(homes, capsys,
                                                                                          monkeypatch):
    """Nothing captured: the script's own output only (test_session has the watchdog's side of a multi-worker
    run). tfcc stops the servers once the chief finished: that is their end, not a failure, with nothing
    captured to say that they served."""
    path = cluster_file(homes, "ps_fit", PARAMETER_SERVERS, 'args = ["--epochs", "1"]\ncapture = false')
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)  # TensorFlow's log as a host has it
    stream = run_json(homes, path, "ps-done", capsys, captured=False)
    assert not [r for r in stream if r.get("type") in ("step", "epoch", "event")]
    folder = homes / "host-home" / "runs" / "ps-done" / "chief-0"
    assert not (folder / runs.protocol.METRICS).exists() or (folder / runs.protocol.METRICS).stat().st_size == 0
    printed = (folder / runs.protocol.STDOUT).read_text()
    assert "20/20 - " in printed and " - loss: " in printed, printed  # fit's own progress, as the script has it
    for task in ("chief-0", "worker-0", "worker-1", "ps-0"):
        assert runs.status("ps-done", task)["phase"] == "finished"
    code, out, err = tfcc(["runs", "--json"], capsys)
    assert code == 0 and [r["state"] for r in json.loads(out) if r["run_id"] == "ps-done"] == ["finished"]
    code, out, err = tfcc(["resume", "ps-done"], capsys)
    assert code == 2 and err.strip() == ("tfcc: error: run ps-done finished: every task ended well; "
                                         "start a new run to train again")
