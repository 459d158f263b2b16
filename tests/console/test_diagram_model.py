"""What the cluster diagram shows: the chief, replicas, the batch split, TF_CONFIG per task."""

from __future__ import annotations

import json

from console import cluster as cl
from console.diagram_model import picture


def make(tasks, hosts=("a", "b"), **training) -> cl.Cluster:
    return cl.Cluster([cl.Host(name=h, address=f"10.0.0.{i + 1}") for i, h in enumerate(hosts)],
                      [cl.Task(**t) for t in tasks], cl.Training(**training))


def test_worker_zero_is_crowned_without_a_chief_task():
    c = make([{"host": "a", "port": 5000}, {"host": "b", "port": 5000}], per_replica_batch=64)
    hosts, split = picture(c)
    assert [[(t.name, t.is_chief) for t in h.tasks] for h in hosts] == [[("worker-0", True)], [("worker-1", False)]]
    assert split.label == "global 128 = 2 workers × 1 replica × 64" and not split.from_run
    assert json.loads(hosts[1].tasks[0].tf_config)["task"] == {"type": "worker", "index": 1}


def test_the_chief_task_is_crowned():
    c = make([{"host": "a", "port": 5000}, {"host": "b", "port": 5000, "role": "chief"}])
    hosts, _ = picture(c)
    assert [t.name for h in hosts for t in h.tasks if t.is_chief] == ["chief-0"]


def test_gpus_become_replicas_and_split_the_batch():
    c = make([{"host": "a", "port": 5000}, {"host": "b", "port": 5000, "gpus": [2, 3]}], per_replica_batch=64)
    hosts, split = picture(c, gpus_by_host={"a": 2, "b": 4})
    assert hosts[0].tasks[0].devices == ["GPU 0", "GPU 1"] and hosts[1].tasks[0].devices == ["GPU 2", "GPU 3"]
    assert split.label == "global 256 = 2 workers × 2 replicas × 64" and split.per_worker == 128


def test_a_global_batch_that_does_not_split_is_shown_as_a_problem():
    c = make([{"host": "a"}, {"host": "b"}], global_batch=100)
    _, split = picture(c, gpus_by_host={"a": 3, "b": 3})
    assert "global batch 100 does not split evenly over 6 replicas" in split.problem


def test_a_runs_started_event_replaces_the_settings_and_auto_ports_resolve():
    c = make([{"host": "a"}, {"host": "b"}])
    hosts, _ = picture(c)
    assert hosts[0].tasks[0].tf_config is None and hosts[0].tasks[0].address == "10.0.0.1:auto"
    started = {"num_workers": 2, "replicas_per_worker": 1, "per_replica_batch": 16, "global_batch": 32,
               "strategy": "multi_worker_mirrored"}
    hosts, split = picture(c, started=started, addresses={"worker-0": "10.0.0.1:4000", "worker-1": "10.0.0.2:4001"})
    assert split.from_run and split.label == "global 32 = 2 workers × 1 replica × 16"
    assert json.loads(hosts[0].tasks[0].tf_config)["cluster"]["worker"] == ["10.0.0.1:4000", "10.0.0.2:4001"]


def test_parameter_server_training_is_drawn_as_one_workers_batch_a_step():
    c = cl.Cluster([cl.Host(name="a", address="10.0.0.1"), cl.Host(name="b", address="10.0.0.2")],
                   [cl.Task(host="a", role="chief"), cl.Task(host="a"), cl.Task(host="b"),
                    cl.Task(host="b", role="ps")], cl.Training(per_replica_batch=32))
    hosts, split = picture(c, {"b": 2})
    tasks = {t.name: t for h in hosts for t in h.tasks}
    assert tasks["chief-0"].is_chief and tasks["chief-0"].devices == [] and tasks["ps-0"].devices == []
    assert tasks["worker-1"].devices == ["GPU 0", "GPU 1"] and tasks["worker-0"].devices == ["CPU"]
    assert (split.strategy, split.num_workers, split.replicas_per_worker, split.global_batch) == \
        ("parameter_server", 2, 2, 64)
    assert split.label == ("each step: one worker's batch of 64 = 2 replicas × 32; 2 workers take steps "
                           "independently")


def test_an_evaluator_is_drawn_apart_from_training():
    """It serves nothing (no address, no replica) and its TF_CONFIG names it only as its own task."""
    c = cl.Cluster([cl.Host(name="a", address="10.0.0.1")],
                   [cl.Task(host="a", role="chief", port=4000), cl.Task(host="a", port=4001),
                    cl.Task(host="a", role="ps", port=4002), cl.Task(host="a", role="evaluator")],
                   cl.Training(per_replica_batch=32))
    hosts, split = picture(c, addresses={"evaluator-0": "10.0.0.1:4003"})
    tasks = {t.name: t for h in hosts for t in h.tasks}
    assert tasks["evaluator-0"].address == "" and tasks["evaluator-0"].devices == []
    config = json.loads(tasks["evaluator-0"].tf_config)
    assert config["task"] == {"type": "evaluator", "index": 0} and "evaluator" not in config["cluster"]
    assert json.loads(tasks["chief-0"].tf_config)["cluster"] == config["cluster"]  # the cluster does not list it
    assert split.num_workers == 1


# ------------------------------------------------------------------ a user's own script


CAPTURED = {"event": "started", "source": "script", "keras": "tf-keras", "strategy": "multi_worker_mirrored",
            "num_workers": 2, "replicas_per_worker": 1, "num_replicas": 2, "global_batch": 64,
            "per_replica_batch": 32, "per_worker_batch": 32, "epochs": 2, "steps_per_epoch": 10}


def test_a_scripts_batch_is_unknown_until_it_reports():
    """The settings' epochs and batch never reach a script: no numbers of them, no slices."""
    c = make([{"host": "a"}, {"host": "b"}], script="main.py", per_replica_batch=32)
    hosts, split = picture(c)
    assert not split.known and not split.from_run
    assert split.label == "batch: unknown until the script reports (its own numbers, read from fit)"
    assert "64" not in split.label and "32" not in split.label
    assert (split.global_batch, split.per_replica) == (0, 0) and split.num_workers == 2
    assert [t.devices for h in hosts for t in h.tasks] == [["CPU"], ["CPU"]]  # the hardware is still known
    c.training.capture = False
    assert picture(c)[1].label == "batch: unknown (the script's own; capture is off)"


def test_the_captures_started_event_gives_the_scripts_real_numbers():
    c = make([{"host": "a"}, {"host": "b"}], script="main.py", per_replica_batch=8)
    _, split = picture(c, started=CAPTURED)
    assert split.known and split.from_run and split.script
    assert split.label == "global 64 = 2 workers × 1 replica × 32" and split.per_worker == 32
    assert split.source.startswith("From the run")


def test_replicas_per_worker_come_from_the_started_event():
    c = make([{"host": "a"}, {"host": "b"}], script="main.py")
    started = dict(CAPTURED, replicas_per_worker=2, num_replicas=4, global_batch=128, per_worker_batch=64)
    hosts, split = picture(c, started=started)
    assert split.label == "global 128 = 2 workers × 2 replicas × 32"
    assert [t.devices for h in hosts for t in h.tasks] == [["CPU 0", "CPU 1"], ["CPU 0", "CPU 1"]]


def test_a_started_event_without_a_batch_plan_is_unknown_and_does_not_crash():
    """A loop script's (or an old run's) started event: no batch fields, or ones that are no counts."""
    c = make([{"host": "a"}, {"host": "b"}], script="main.py")
    for started in ({"event": "started", "source": "script", "strategy": "multi_worker_mirrored"},
                    dict(CAPTURED, global_batch=None), dict(CAPTURED, per_replica_batch="32"),
                    dict(CAPTURED, global_batch=float("inf")), dict(CAPTURED, replicas_per_worker=True)):
        hosts, split = picture(c, started=started)
        if started.get("replicas_per_worker") is True:  # the batch is there: only the replicas are not
            assert split.known and split.replicas_per_worker == 1
            continue
        assert not split.known and split.label == "batch: unknown (the run reported no batch plan)", started
        assert split.strategy == "multi_worker_mirrored"
    # the trainer's own runs too: an old record without its plan
    _, split = picture(make([{"host": "a"}, {"host": "b"}]), started={"strategy": "multi_worker_mirrored"})
    assert not split.known and not split.from_run


def test_an_elastic_run_that_lost_its_chief_host_is_drawn_with_the_tasks_left():
    """worker-0's host lost: worker-1 is the chief now, the batch the run reports splits over the two left, and
    the task that left holds no replica and has no TF_CONFIG; each other's TF_CONFIG names the members only."""
    c = make([{"host": "a"}, {"host": "b"}, {"host": "c"}], hosts=("a", "b", "c"), elastic=2)
    started = {"num_workers": 2, "replicas_per_worker": 1, "per_replica_batch": 24, "global_batch": 48,
               "strategy": "multi_worker_mirrored"}
    addresses = {f"worker-{i}": f"10.0.0.{i + 1}:400{i}" for i in range(3)}
    hosts, split = picture(c, started=started, addresses=addresses, left={"worker-0"})
    tasks = {t.name: t for h in hosts for t in h.tasks}
    assert [n for n, t in tasks.items() if t.is_chief] == ["worker-1"]
    assert tasks["worker-0"].left and tasks["worker-0"].devices == [] and tasks["worker-0"].tf_config is None
    assert json.loads(tasks["worker-2"].tf_config) == {"cluster": {"worker": ["10.0.0.2:4001", "10.0.0.3:4002"]},
                                                       "task": {"type": "worker", "index": 1}}
    assert split.label == "global 48 = 2 workers × 1 replica × 24"


def test_a_slurm_runs_tasks_are_drawn_on_the_nodes_slurm_chose():
    cluster = cl.loads('[training]\nworkload = "digits"\n[slurm]\nlogin = "login1"\nnodes = 2\ntasks_per_node = 2\n')
    hosts, split = picture(cluster)
    assert [h.name for h in hosts] == ["slurm-node-0", "slurm-node-1"] and split.num_workers == 4
    addresses = {"worker-0": "gpu07:8888", "worker-1": "gpu07:8889", "worker-2": "gpu12:8888", "worker-3": "gpu12:8889"}
    hosts, _ = picture(cluster, addresses=addresses)
    assert [(h.name, [(t.name, t.address) for t in h.tasks]) for h in hosts] == [
        ("gpu07", [("worker-0", "gpu07:8888"), ("worker-1", "gpu07:8889")]),
        ("gpu12", [("worker-2", "gpu12:8888"), ("worker-3", "gpu12:8889")])]
