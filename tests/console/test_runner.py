"""The run core: the startup watchdog names the task the cluster waits for."""

from __future__ import annotations

import threading

import pytest

from console import cluster as cl
from console.runner import Run

pytestmark = pytest.mark.slow


def test_watchdog_names_the_missing_task_and_its_address(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    cluster = cl.Cluster([cl.Host(name="here", local=True)],
                         [cl.Task(host="here"), cl.Task(host="here")], cl.Training(epochs=1))
    run = Run(cluster, "wd")
    run.start()
    run.links["here"].connect().call("stop", run_id="wd", task="worker-1", grace=0)
    changed = threading.Condition()

    def on_message(task, message):
        with changed:
            changed.notify_all()

    run.follow(on_message)
    try:
        with changed:
            assert changed.wait_for(lambda: run.tasks[0].launched_at is not None and run.tasks[1].phase != "starting"
                                    and run.tasks[1].exit is not None, 60)
        assert run.waiting_report(after=3600) is None  # not yet: the threshold has not passed
        report = run.waiting_report(after=0)
        assert report.startswith("worker-0 waited ")
        assert f"worker-1 at {run.tasks[1].address} on host here ended (failed)" in report
        assert "tfcc logs wd worker-1" in report
    finally:
        run.stop(grace=0.5)
        run.detach()
