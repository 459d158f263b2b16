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
    # Started again, not resumed: a resume would run each task's old copy of the code, and there is no backup.
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
    path = cluster_file(homes, "mwms_loop_summary", TWO_WORKERS)
    stream = run_json(homes, path, "mwms-summary", capsys)
    for task in ("worker-0", "worker-1"):
        steps = of(stream, task, "step", captured="summary")
        tags = {k for r in steps for k, v in r.items() if isinstance(v, float) and "loss" in k}
        assert tags, steps[:3]
        assert len(steps) >= 5 and len({r["global_step"] for r in steps}) == len(steps)


@pytest.mark.slow
def test_parameter_server_fit_finishes_with_the_coordinators_steps(homes, capsys):
    """steps_per_execution = 5: each record's pace is per step, not per execution."""
    path = cluster_file(homes, "ps_fit", PARAMETER_SERVERS, 'args = ["--epochs", "2"]')
    stream = run_json(homes, path, "ps-fit", capsys)
    steps = of(stream, "chief-0", "step")
    assert steps and all(isinstance(r.get("loss"), float) and r["step_time"] > 0 for r in steps)
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
def test_single_host_mirrored_fit_in_keras3_gets_keras3(homes, capsys):
    path = cluster_file(homes, "mirrored_fit_keras3", ONE_WORKER)
    stream = run_json(homes, path, "k3", capsys)
    started = of(stream, "worker-0", "event", event="started")[0]
    assert started["keras"] == "keras3" and started["strategy"] == "mirrored"
    assert started["keras_reason"] == "keras3: it imports keras (main.py:4), Keras 3"
    assert of(stream, "worker-0", "step") and of(stream, "worker-0", "epoch")


@pytest.mark.slow
def test_single_host_mirrored_custom_loop_in_tf_keras(homes, capsys):
    path = cluster_file(homes, "mirrored_loop_tfkeras", ONE_WORKER)
    stream = run_json(homes, path, "tfk-loop", capsys)
    assert len(of(stream, "worker-0", "epoch", captured="print")) >= 2


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
