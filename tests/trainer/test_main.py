"""Bad input to ``python -m trainer``: exit code, one line on stderr, a ``failed`` event."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.tf_config import make_tf_config
from trainer.metrics import read_records

from tests.helpers.waiting import wait_until

from .conftest import DATA, THREADS

ROOT = Path(__file__).resolve().parents[2]


def run_trainer(tmp_path: Path, args: list[str], tf_config: str | None = None, timeout: float = 120):
    env = dict(os.environ, PYTHONPATH=str(ROOT), **THREADS)
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "trainer", "--run-dir", str(run_dir), *args],
                          env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    metrics = run_dir / "metrics.jsonl"
    failed = [r for r in read_records(metrics) if r.get("event") == "failed"] if metrics.exists() else []
    return proc, failed


def error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("tfcc-trainer: error: ")]
    assert len(lines) == 1, stderr[-2000:]
    return lines[0]


TWO = {"worker": ["localhost:23456", "localhost:23457"]}


@pytest.mark.parametrize(
    "tf_config, expected",
    [
        ('{"cluster": {"worker": ["localhost:1"]}, "task": ', "TF_CONFIG is not valid JSON"),
        (json.dumps({"cluster": {"master": ["localhost:1"]}, "task": {"type": "master", "index": 0}}),
         "unknown role 'master'"),
        (make_tf_config(TWO, "worker", 5), "task worker:5 is out of range: the cluster has 2 worker tasks"),
        (make_tf_config({"chief": ["localhost:1", "localhost:2"], "worker": ["localhost:3"]}, "worker", 0),
         "names 2 chiefs"),
    ],
    ids=["broken-json", "unknown-role", "index-out-of-range", "two-chiefs"],
)
def test_bad_tf_config(tmp_path, tf_config, expected):
    proc, failed = run_trainer(tmp_path, [], tf_config)
    assert proc.returncode == 2
    assert expected in error_line(proc.stderr)
    assert len(failed) == 1 and expected in failed[0]["error"]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--model-file", "does/not/exist.py"], "model file 'does/not/exist.py' does not exist"),
        (["--model-file", str(DATA / "broken_model.py")], "does not define train_dataset()"),
        (["--per-replica-batch", "5000"], "is larger than the 1438 training examples; lower --per-replica-batch to at most 1438"),
        (["--epochs", "zero"], "'zero' is not a whole number"),
        (["--autoshard", "file"], "--autoshard file needs a dataset read from files"),
        (["--strategy", "mirrored", "--cpu-devices", "3", "--global-batch", "64"],
         "--global-batch 64 does not split evenly over 3 replicas; use a multiple of 3 (e.g. 63 or 66)"),
    ],
    ids=["missing-model-file", "model-file-without-dataset", "batch-too-large", "bad-option", "autoshard-file",
         "global-batch-uneven"],
)
def test_bad_options(tmp_path, args, expected):
    proc, _ = run_trainer(tmp_path, args)
    assert proc.returncode == 2
    assert expected in error_line(proc.stderr)


def test_mirrored_with_a_cluster_is_refused(tmp_path):
    proc, failed = run_trainer(tmp_path, ["--strategy", "mirrored"], make_tf_config(TWO, "worker", 0))
    assert proc.returncode == 2
    assert "use --strategy multi_worker_mirrored" in error_line(proc.stderr)
    assert failed


def test_autoshard_off_on_shared_in_memory_data_is_refused_before_waiting_for_peers(tmp_path):
    # Worker 1 never starts: the error must come without waiting for it.
    proc, failed = run_trainer(tmp_path, ["--autoshard", "off"], make_tf_config(TWO, "worker", 0), timeout=60)
    assert proc.returncode == 2
    assert "--autoshard off would give every worker the same digits examples" in error_line(proc.stderr)
    assert failed


def test_missing_dataset(tmp_path):
    proc, failed = run_trainer(tmp_path, ["--model-file", str(DATA / "missing_data_model.py")])
    assert proc.returncode == 2
    line = error_line(proc.stderr)
    assert "train_dataset() failed with FileNotFoundError" in line and "/nonexistent/tfcc/train.npz" in line
    assert failed and "FileNotFoundError" in failed[0]["error"]


def test_port_in_use(tmp_path):
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        cluster = {"worker": [f"localhost:{port}", "localhost:1"]}
        proc, failed = run_trainer(tmp_path, [], make_tf_config(cluster, "worker", 0))
    assert proc.returncode == 2
    line = error_line(proc.stderr)
    assert f"port {port} of task worker:0 (localhost:{port}) is already in use on this host" in line
    assert failed and "already in use" in failed[0]["error"]


@pytest.mark.parametrize("stopping", [True, False], ids=["stop-of-the-run", "peer-died"])
def test_a_peer_lost_in_a_stop_of_the_run_is_no_failure(tmp_path, stopping):
    """A stop of every task kills them one after the other: the last lose their peer first. A task whose own stop
    is under way (its agent's marker) ends without a ``failed`` event; a peer that dies on its own is a failure."""
    from agent.protocol import STOP_MARKER
    from tests.helpers.localrun import local_cluster, start_local_tasks
    from tests.trainer.conftest import _kill

    tasks = start_local_tasks(local_cluster(2), tmp_path, ["--workload", "digits", "--epochs", "200"], env=THREADS)
    try:
        assert wait_until(lambda: any(r["type"] == "step" for r in (read_records(tasks[1].metrics_path)
                                                                    if tasks[1].metrics_path.exists() else [])), 180)
        if stopping:
            (tasks[1].run_dir / STOP_MARKER).write_text("1")
        tasks[0].process.kill()
        tasks[1].process.wait(timeout=120)
    finally:
        _kill(tasks)
    failed = [r for r in read_records(tasks[1].metrics_path) if r.get("event") == "failed"]
    assert tasks[1].process.returncode != 0
    if stopping:
        assert failed == []
    else:
        assert failed and failed[0]["error"].startswith("lost contact with another task of the cluster")
