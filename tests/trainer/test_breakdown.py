"""trainer/breakdown.py in a real fit: asked before training, a worker measures its input pipeline, its compute
and its all-reduce, times real steps, and writes one breakdown record (docs/why-slow.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.metrics import read_records

from .conftest import DATA, THREADS

ROOT = Path(__file__).resolve().parents[2]


def breakdown_of(tmp_path: Path, mode: str, at_step: int) -> list[dict]:
    env = {**os.environ, **THREADS, "TFCC_RUN_DIR": str(tmp_path), "PYTHONPATH": str(ROOT),
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TF_CONFIG", None)
    env.pop("TF_USE_LEGACY_KERAS", None)  # each mode picks its Keras
    done = subprocess.run([sys.executable, str(DATA / "breakdown_fit.py"), mode, str(at_step)], env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    found = [r for r in read_records(tmp_path / "metrics.jsonl") if r["type"] == "breakdown"]
    assert found, done.stderr[-3000:]
    return found


@pytest.mark.slow
def test_a_fit_on_a_pipeline_measures_each_part_once_asked(tmp_path):
    (record,) = breakdown_of(tmp_path, "dataset", at_step=40)
    assert record["ask"] == "why-test" and "problems" not in record, record
    # The flag (an instrumented step): measured as soon as every replica (here one) had the ask, long before 40.
    assert record["step"] < 40
    assert record["input"] == "dataset" and record["batch"] == 32
    assert record["input_time"] >= 0.005  # its map sleeps 5 ms a batch
    assert record["compute_time"] > 0  # (how it compares with a step is timing: bench/why_slow.py)
    assert record["all_reduce_time"] >= 0 and record["gradient_bytes"] > 0
    assert record["timed_steps"] >= 5 and record["step_time"] >= 0.005  # a step waits for its input
    assert record["cpu"]["cores"] == os.cpu_count() and record["cpu"]["used"] > 0


@pytest.mark.slow
def test_arrays_in_memory_have_no_input_to_wait_on(tmp_path):
    (record,) = breakdown_of(tmp_path, "arrays", at_step=40)
    assert record["input"] == "arrays" and record["input_time"] == 0.0
    assert record["compute_time"] > 0 and "problems" not in record


@pytest.mark.slow
def test_a_train_step_of_the_models_own_is_measured_too(tmp_path):
    (record,) = breakdown_of(tmp_path, "custom", at_step=40)
    assert record["step"] < 40 and record["compute_time"] > 0 and "problems" not in record


@pytest.mark.slow
def test_without_a_flag_it_does_not_measure_and_says_why(tmp_path):
    (record,) = breakdown_of(tmp_path, "noflag", at_step=40)
    assert record["problems"] == ["not measured: no flag could be made"] and "compute_time" not in record


@pytest.mark.slow
def test_mirrored_replicas_and_several_steps_an_execution_measure_once_over_two_fits(tmp_path):
    (record,) = breakdown_of(tmp_path, "mirrored", at_step=40)  # a second fit does not measure the ask again
    assert record["replicas"] == 2 and record["local_replicas"] == 2
    assert record["replica_batch"] == 16 and record["batch"] == 32 and "problems" not in record, record
    assert record["step_time"] > 0 and record["all_reduce_time"] >= 0


@pytest.mark.slow
def test_a_keras3_fit_is_measured(tmp_path):
    (record,) = breakdown_of(tmp_path, "keras3", at_step=40)
    assert record["input"] == "dataset" and record["compute_time"] > 0 and "problems" not in record, record


@pytest.mark.slow
def test_a_fit_that_ends_while_its_steps_are_timed_still_says_what_it_measured(tmp_path):
    (record,) = breakdown_of(tmp_path, "short", at_step=40)
    assert record["compute_time"] > 0 and record["input_time"] >= 0.005
    assert 1 <= record["timed_steps"] < 12 and record["step_time"] > 0, record
