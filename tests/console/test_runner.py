"""The run core: reaching a host's agent, starting a run."""

from __future__ import annotations


import pytest

from console import cluster as cl
from console.runner import Run
from console.runs import RunError


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    return tmp_path


def test_a_start_that_fails_halfway_stops_what_it_started_and_can_be_resumed(homes):
    """worker-1 cannot start (its folder is taken): worker-0, already started, must not wait an hour
    for it holding its port; the error says so and how to go on."""
    script = homes / "waits.py"
    script.write_text("import signal\nsignal.pause()\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script)))
    taken = homes / "host-home" / "runs" / "half" / "worker-1"
    taken.mkdir(parents=True)
    (taken / "spec.json").write_text("{}")  # what a start leaves: a fresh start refuses the folder
    run = Run(cluster, "half")
    try:
        with pytest.raises(RunError) as err:
            run.start()
        assert "(starting run half, after worker-0 had started: stopped again)" in str(err.value)
        assert str(err.value).endswith("start it again with tfcc resume half")
        assert run.links["here"].connect().call("status", run_id="half", task="worker-0")["phase"] != "running"
    finally:
        run.detach()
