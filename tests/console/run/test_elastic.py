"""An elastic run (console/run/supervisor.py, training.elastic) on real SSH test hosts: a host lost for good is left
out and the run goes on with the same global batch; the host back, the run takes it back at the next backup."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from console import cluster as cl
from console import text
from console.errors import RunError
from console.run.runner import Run
from console.run.session import RunSession
from console.states import SessionKind
from console.store.manifests import read_manifest
from tests.helpers.waiting import bound
from trainer.metrics import read_records

# Long enough to take the host back mid-run: an epoch is about 1.3 s on 2 workers, and the host is back and
# asked in within about 5 s of the shrunk run's first steps (its sshd, a 1 s probe, the next 2 s backup).
EPOCHS = 10
BATCH = 16  # per replica on 3 workers: the global batch 48 is kept on 2 (24 each)


def three_host_cluster(hosts) -> cl.Cluster:
    machines = [cl.Host(name=h.name, address=h.address, user="root", key=str(hosts.client_key),
                        python=sys.executable) for h in hosts.hosts]
    tasks = [cl.Task(host=h.name) for h in hosts.hosts]
    return cl.Cluster(machines, tasks, cl.Training(epochs=EPOCHS, per_replica_batch=BATCH, backup_seconds=2.0,
                                                   elastic=2))


def uninterrupted_cluster() -> cl.Cluster:
    """The same training as ``three_host_cluster``'s, as one task on this machine: the whole global batch at the
    learning rate of 3 replicas (linear: 3 x 0.001) gives the same steps as 3 tasks (a mirrored step sums the
    replicas' gradients: a 2-worker backup resumed on 1 worker matched to 5e-5 in loss), at a third of the
    processes."""
    return cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")],
                      cl.Training(epochs=EPOCHS, per_replica_batch=3 * BATCH, learning_rate=0.003, lr_scaling="none",
                                  backup_seconds=2.0))


class Watch:
    """What a session says and sends, with when, for a test to wait on."""

    def __init__(self, session: RunSession):
        self.cond = threading.Condition()
        self.said: list[tuple[float, str, str]] = []
        self.started: list[tuple[float, str, dict]] = []
        self.steps: list[tuple[float, str, int]] = []  # (when, task, attempt)
        self.backups: dict[str, set] = {}
        session.subscribe(self.on_event)

    def on_event(self, e) -> None:
        now = time.monotonic()
        with self.cond:
            if e.kind == SessionKind.RECORDS:
                for r in e.records:
                    if r.get("event") == "backed_up":
                        self.backups.setdefault(e.task.name, set()).add(r["global_step"])
                    elif r.get("event") == "started":
                        self.started.append((now, e.task.name, r))
                    elif r.get("type") == "step":
                        self.steps.append((now, e.task.name, r.get("attempt")))
            elif e.kind in SessionKind.SUPERVISION:
                self.said.append((now, e.kind, e.text))
            self.cond.notify_all()

    def wait(self, what, timeout: float):
        with self.cond:
            assert self.cond.wait_for(what, bound(timeout)), [s[1:] for s in self.said]


def finished_accuracy(folder) -> float:
    last = read_records(folder / "metrics.jsonl")[-1]
    assert last["event"] == "finished", last
    return last["metrics"]["val_accuracy"]


def late_accuracy(folder, epochs: int = 3) -> float:
    """The mean validation accuracy of a finished run's last ``epochs`` epochs (each as its last attempt trained
    it): one epoch's alone swings by 2 points here late in training (digits at a learning rate of 0.003), the
    same in an uninterrupted run and in one that took a backup up."""
    records = read_records(folder / "metrics.jsonl")
    assert records[-1]["event"] == "finished", records[-1]
    by_epoch = {r["epoch"]: r["val_accuracy"] for r in records if r["type"] == "epoch"}
    last = sorted(by_epoch)[-epochs:]
    assert last == list(range(EPOCHS - epochs, EPOCHS)), sorted(by_epoch)
    return sum(by_epoch[e] for e in last) / epochs


@pytest.mark.slow
def test_an_elastic_run_goes_on_without_a_lost_host_and_takes_it_back(three_ssh_hosts, ssh_env, tmp_path):
    hosts = three_ssh_hosts
    hosts.known_hosts(ssh_env / "known_hosts")
    run = Run(three_host_cluster(hosts), "elastic1")
    run.start()
    session = RunSession(run)
    session.supervisor.lost_after = 10.0
    session.supervisor.probe_seconds = 1.0
    watch = Watch(session)
    session.follow()
    gone = hosts.hosts[2]
    try:
        watch.wait(lambda: len(set.intersection(*[watch.backups.get(f"worker-{i}", set()) for i in range(3)])) >= 1,
                   240)
        hosts.remove(gone)  # sshd and tasks gone for good: nothing answers at its address
        watch.wait(lambda: any(kind == SessionKind.RESIZED and "goes on with 2" in words
                               for _, kind, words in watch.said), 240)
        final = next(at for at, kind, words in watch.said if kind == SessionKind.RESIZED)
        watch.wait(lambda: any(r["num_workers"] == 2 for _, _, r in watch.started), 120)
        attempt = next(r["attempt"] for _, _, r in watch.started if r["num_workers"] == 2)
        watch.wait(lambda: {name for _, name, a in watch.steps if a == attempt} == {"worker-0", "worker-1"}, 120)
        shrunk = [r for _, _, r in watch.started if r["attempt"] == attempt]
        training = max(min(at for at, name, a in watch.steps if a == attempt and name == task)
                       for task in ("worker-0", "worker-1"))  # both tasks left step again
        # how soon is bench/restart_recovery.py --shrink's figure ("again": 6-9 s on a quiet machine)
        assert training - final < bound(90), f"{training - final:.0f} s from the loss being final to training on 2"
        assert {r["global_batch"] for r in shrunk} == {3 * BATCH}  # the same global batch...
        assert {r["per_replica_batch"] for r in shrunk} == {3 * BATCH // 2}  # ...split over the 2 left
        assert [t.phase for t in run.tasks][2] == "left the run"
        hosts.bring_back(gone)
        watch.wait(lambda: any(r["num_workers"] == 3 and at > training for at, _, r in watch.started), 240)
        assert session.wait(400)
    finally:
        session.detach()
        run.stop_each(grace=0)
    said = [s[1:] for s in watch.said]
    assert [t.phase for t in run.tasks] == ["finished"] * 3, said
    assert any(kind == SessionKind.RESIZED and "answers again" in words for kind, words in said), said
    grown = [r for at, _, r in watch.started if r["num_workers"] == 3][-1]
    assert (grown["global_batch"], grown["per_replica_batch"]) == (3 * BATCH, BATCH)
    # The learning rate of 3 replicas (linear: 3 x 0.001), kept on 2 and on 3 again.
    assert {round(r["learning_rate"], 6) for _, _, r in watch.started} == {0.003}
    elastic = late_accuracy(hosts.hosts[0].tfcc_home / "runs" / "elastic1" / "worker-0")

    # The same training, uninterrupted, on this machine: the accuracy within 1 point.
    whole = Run(uninterrupted_cluster(), "whole1")
    whole.start()
    plain = RunSession(whole)
    plain.follow()
    try:
        assert plain.wait(400)
    finally:
        plain.detach()
    uninterrupted = late_accuracy(ssh_env / "local-home" / "runs" / "whole1" / "worker-0")
    assert abs(elastic - uninterrupted) <= 0.01, (elastic, uninterrupted)


@pytest.mark.slow
def test_parameter_server_training_moves_a_lost_ps_host_to_the_spare_and_finishes(three_ssh_hosts, ssh_env):
    """Chief and worker on one host, the ps on another, a spare third: the ps host removed for good, the ps
    task moves to the spare (every task gets a TF_CONFIG with its new address), the coordinator takes up its
    backup, and the run finishes there."""
    hosts = three_ssh_hosts
    hosts.known_hosts(ssh_env / "known_hosts")
    a, b, c = hosts.hosts
    machines = [cl.Host(name=h.name, address=h.address, user="root", key=str(hosts.client_key),
                        python=sys.executable, spare=h is c) for h in hosts.hosts]
    tasks = [cl.Task(host=a.name, role="chief"), cl.Task(host=a.name), cl.Task(host=b.name, role="ps")]
    run = Run(cl.Cluster(machines, tasks, cl.Training(epochs=5, elastic=1)), "spare1")  # the ps host removed after 2
    run.start()
    session = RunSession(run)
    session.supervisor.lost_after = 10.0
    watch = Watch(session)
    epochs = []
    session.subscribe(lambda e: epochs.extend(r for r in e.records if r.get("type") == "epoch")
                      if e.kind == SessionKind.RECORDS and e.task.name == "chief-0" else None)
    session.follow()
    try:
        watch.wait(lambda: len(epochs) >= 2, 240)
        hosts.remove(b)
        watch.wait(lambda: any(kind == SessionKind.RESIZED and "moved" in words for _, kind, words in watch.said),
                   240)
        assert session.wait(400)
    finally:
        session.detach()
        run.stop_each(grace=0)
        hosts.bring_back(b)
    said = [s[1:] for s in watch.said]
    assert ("resized", f"run spare1: ps-0 moved from {b.name} to the spare host {c.name} ({b.name} did not answer "
                       "for 10 s after the failure); ps-0 starts there afresh") in said
    assert {t.name: (t.host, t.phase) for t in run.tasks} == {
        "chief-0": (a.name, "finished"), "worker-0": (a.name, "finished"), "ps-0": (c.name, "finished")}, said
    for task, host in (("ps-0", c), ("chief-0", a), ("worker-0", a)):  # every task was told the ps's new address
        config = json.loads((host.tfcc_home / "runs" / "spare1" / task / "tf_config.json").read_text())
        assert config["cluster"]["ps"] == [run.tasks[2].address] and run.tasks[2].address.startswith(c.address)
    # The coordinator took up its backup (from at least the second epoch on), not a fresh model, and the run
    # learned: parameter-server updates are asynchronous, so the accuracy swings with how the machine schedules
    # them (0.8997 seen beside the suite's other tasks); a fresh model's first epochs stay far below.
    records = read_records(a.tfcc_home / "runs" / "spare1" / "chief-0" / "metrics.jsonl")
    resumed = [r for r in records if r.get("event") == "resumed"]
    assert resumed and resumed[-1]["global_step"] > 0, resumed
    assert finished_accuracy(a.tfcc_home / "runs" / "spare1" / "chief-0") >= 0.85
    assert read_manifest("spare1").tasks == [("chief-0", a.name), ("worker-0", a.name), ("ps-0", c.name)]


@pytest.mark.slow
def test_a_person_removes_a_host_from_a_running_elastic_run_and_takes_it_back(ssh_env):
    """Two local hosts: "there" removed by a person, the run goes on with the two tasks left at once; taken back,
    its task rejoins at the next backup; every task finishes. A run that cannot go on without a host says why."""
    machines = [cl.Host(name="here", local=True), cl.Host(name="there", local=True)]
    tasks = [cl.Task(host="here"), cl.Task(host="here"), cl.Task(host="there")]
    # 7 epochs: the run is still training when the host is taken back (it rejoins after 3 or so); no accuracy is
    # compared here (the lost host's test does)
    run = Run(cl.Cluster(machines, tasks, cl.Training(epochs=7, per_replica_batch=BATCH, backup_seconds=2.0,
                                                     elastic=2)), "byhand1")
    run.start()
    session = RunSession(run)
    session.supervisor.probe_seconds = 1.0
    watch = Watch(session)
    ended = []  # what each task's end says
    session.subscribe(lambda e: ended.append((e.task.name, e.text)) if e.kind == SessionKind.TASK_ENDED else None)
    session.follow()
    try:
        watch.wait(lambda: len(watch.steps) >= 10, 240)
        with pytest.raises(RunError, match="cannot go on without here: without here the run would have fewer than "
                                           "its elastic 2 training tasks"):
            session.remove_host("here")
        session.remove_host("there")
        watch.wait(lambda: any(r["num_workers"] == 2 for _, _, r in watch.started), 240)
        assert run.tasks[2].phase == "left the run" and run.left == {"worker-2": "removed by you"}
        removed = next(at for at, _, r in watch.started if r["num_workers"] == 2)
        watch.wait(lambda: any(at > removed and name == "worker-1" for at, name, _ in watch.steps), 120)
        session.take_back("there")
        watch.wait(lambda: any(r["num_workers"] == 3 and at > removed for at, _, r in watch.started), 240)
        assert session.wait(400)
    finally:
        session.detach()
        run.stop_each(grace=0)
    said = [s[1:] for s in watch.said]
    assert [t.phase for t in run.tasks] == ["finished"] * 3, said
    # the tasks stopped to go on without "there" say why: tfcc stopped them for the resize (no one asked, none failed)
    assert ("worker-0", text.STOPPED_FOR_RESIZE) in ended and ("worker-1", text.STOPPED_FOR_RESIZE) in ended, ended
    assert ("resized", "run byhand1 goes on with 2 training tasks: worker-2 on there left the run (removed by you); "
                       "the same global batch is split over the tasks left; it rejoins at the next backup once you "
                       "take it back") in said
