"""Parameter-server training on localhost: chief (coordinator) + 2 workers + 1 ps, each its own process."""

from __future__ import annotations

import os
import signal

import pytest

from tests.helpers.localrun import free_ports, start_local_tasks
from tests.helpers.waiting import bound
from trainer.metrics import read_records

from .conftest import THREADS

pytestmark = pytest.mark.slow


def test_chief_two_workers_a_ps_and_an_evaluator_train_digits(tmp_path):
    ports = free_ports(4)
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}", f"localhost:{ports[2]}"],
               "ps": [f"localhost:{ports[3]}"]}
    tasks = start_local_tasks(cluster, tmp_path, ["--epochs", "3", "--eval-checkpoints", "../chief-0/checkpoints"],
                              env=THREADS, evaluator=True)
    chief = next(t for t in tasks if t.task_type == "chief")
    evaluator = next(t for t in tasks if t.task_type == "evaluator")
    servers = [t for t in tasks if t not in (chief, evaluator)]
    try:
        assert chief.process.wait(timeout=300) == 0, (chief.run_dir / "stderr.log").read_text()[-3000:]
        # The evaluator ends by itself once it has evaluated the last epoch's checkpoint.
        assert evaluator.process.wait(timeout=120) == 0, (evaluator.run_dir / "stderr.log").read_text()[-3000:]
        for t in servers:
            assert t.process.poll() is None  # servers serve until they are told to end
            os.kill(t.process.pid, signal.SIGTERM)
            assert t.process.wait(timeout=bound(90)) == 0  # a clean end: the run is over
    finally:
        for t in tasks:
            if t.process.poll() is None:
                os.killpg(t.process.pid, signal.SIGKILL)
                t.process.wait()
    records = read_records(chief.run_dir / "metrics.jsonl")
    events = [r["event"] for r in records if r["type"] == "event"]
    assert events[:3] == ["launched", "cluster_formed", "started"] and events[-1] == "finished"
    started = next(r for r in records if r.get("event") == "started")
    assert started["strategy"] == "parameter_server" and started["asynchronous"] is True
    assert (started["num_workers"], started["per_worker_batch"], started["global_batch"]) == (2, 32, 32)
    assert started["learning_rate"] == started["base_learning_rate"]  # a step's batch does not grow with workers
    placed = started["variables"]  # every variable of the model, on the (one) ps
    assert placed and all(v["ps"] == 0 and v["bytes"] > 0 for v in placed)
    assert sum(v["bytes"] for v in placed) == 4 * sum(
        int(__import__("numpy").prod(v["shape"])) for v in placed)
    steps = [r for r in records if r["type"] == "step"]
    assert steps and all(r["loss_avg"] > 0 and r["step_time"] > 0 for r in steps)
    assert {r["epoch"] for r in records if r["type"] == "epoch"} == {0, 1, 2}
    assert records[-1]["metrics"]["val_accuracy"] >= 0.90
    assert [r["epoch"] for r in records if r.get("event") == "backed_up"] == [0, 1, 2]
    for t in servers:
        theirs = [r["event"] for r in read_records(t.run_dir / "metrics.jsonl") if r["type"] == "event"]
        assert theirs == ["launched", "serving", "finished"], t.task_type
    # The evaluator read the chief's checkpoints and evaluated at least the last epoch's, as the chief did.
    evaluated = [r for r in read_records(evaluator.run_dir / "metrics.jsonl") if r.get("event") == "evaluated"]
    assert evaluated and evaluated[-1]["epoch"] == 2 and evaluated[-1]["global_step"] == 3 * started["steps_per_epoch"]
    assert [e["epoch"] for e in evaluated] == sorted({e["epoch"] for e in evaluated})  # each once, in order
    assert evaluated[-1]["metrics"]["val_accuracy"] >= 0.90
    assert abs(evaluated[-1]["metrics"]["val_accuracy"] - records[-1]["metrics"]["val_accuracy"]) < 0.02
    theirs = [r["event"] for r in read_records(evaluator.run_dir / "metrics.jsonl") if r["type"] == "event"]
    assert theirs[:2] == ["launched", "evaluating"] and theirs[-1] == "finished"
