"""The console's history of its runs: the cache a session writes, a run's whole history after a restart,
a damaged cache read as far as it is good, the list of runs, deleting a run."""

from __future__ import annotations

import json
import shutil

import pytest

from console import cluster as cl
from console import catalog
from console.store import cache
from console.catalog import HistoryError, load_store, overview
from console.store.cache import History, cache_dir
from console.store.metrics import MetricsStore
from console.run.runner import Run
from console.errors import RunError
from console.store.manifests import Manifest, manifest_path, write_manifest
from console.run.session import RunSession
from console.run.supervisor import Supervisor
from console.states import SessionEvent
from console.store import snapshot
from trainer.records import Batch
from console.text import event_line
from tests.helpers.scripted import finished_run, follow_to_end, scripted_cluster


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    return tmp_path


def host_lines(homes, run_id: str, task: str) -> bytes:
    return (homes / "host-home" / "runs" / run_id / task / "metrics.jsonl").read_bytes()


def steps_in(store: MetricsStore, task: str) -> int:
    return store.points(task, "loss")


def test_a_session_keeps_what_it_received_and_a_restarted_console_loads_it_whole(homes, monkeypatch):
    run, live = finished_run(homes, "kept", epochs=2, steps=30)
    folder = cache_dir("kept")
    for task in ("worker-0", "worker-1"):  # the host's metrics file, byte for byte
        assert (folder / f"{task}.jsonl").read_bytes() == host_lines(homes, "kept", task)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["state"] == "finished"
    assert summary["hosts"] == {"here": ["worker-0", "worker-1"]}
    assert summary["start"] > 0 and summary["end"] >= summary["start"]
    assert summary["duration"] == pytest.approx(summary["end"] - summary["start"])
    assert summary["metrics"] == {"loss": 1 / 60, "accuracy": 0.6, "val_loss": 1 / 60 + 0.1, "val_accuracy": 0.7}
    assert all(t["complete"] for t in summary["tasks"].values())
    console_lines = [json.loads(line) for line in (folder / "console.jsonl").read_text().splitlines()]
    assert {(c["task"], c["event"]) for c in console_lines if c["kind"] == "note"} >= {
        ("worker-0", "finished"), ("worker-1", "finished")}

    # The console restarts: no session, a new store. Its hosts are not asked: the cache is whole.
    monkeypatch.setattr(catalog, "_replay", lambda *a, **k: pytest.fail("the hosts were asked"))
    store, order = load_store("kept")
    assert order == ["worker-0", "worker-1"]
    for task in order:
        assert steps_in(store, task) == steps_in(live, task) == 60
    assert sorted((e["task"], e["epoch"], e["val_accuracy"]) for e in store.epochs) == \
        sorted((e["task"], e["epoch"], e["val_accuracy"]) for e in live.epochs)
    assert len(store.epochs) == 4
    assert any(e["event"] == "finished" and e["task"] == "worker-1" for e in store.events_snapshot())


def test_following_a_run_again_adds_only_what_the_cache_lacks(homes):
    run, _ = finished_run(homes, "again", epochs=1, steps=20)
    before = {t: (cache_dir("again") / f"{t}.jsonl").read_bytes() for t in ("worker-0", "worker-1")}
    session = RunSession(Run.load("again"), MetricsStore())  # a reattach replays from the first record
    follow_to_end(session, 30)
    for task, data in before.items():
        assert (cache_dir("again") / f"{task}.jsonl").read_bytes() == data == host_lines(homes, "again", task)


def test_a_line_that_is_not_utf8_is_kept_once_through_a_replay(homes, caplog):
    script = homes / "raw.py"
    script.write_text("import os\n"
                      "with open(os.path.join(os.environ['TFCC_RUN_DIR'], 'metrics.jsonl'), 'ab') as f:\n"
                      "    f.write(b'\\xff\\xfe garbage\\n' + b''.join(b'{\"type\": \"step\", \"global_step\": %d, "
                      "\"loss\": 1.0}\\n' % i for i in range(1, 6)))\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")],
                         cl.Training(script=str(script), capture=False))
    for attempt in range(2):  # the first session, then a reattach that replays from the first record
        run = Run(cluster, "raw") if attempt == 0 else Run.load("raw")
        if attempt == 0:
            run.start()
        session = RunSession(run, MetricsStore())
        follow_to_end(session, 30)
    cached = (cache_dir("raw") / "worker-0.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(cached) == 6 and cached[0] == "\ufffd\ufffd garbage"
    assert not [r for r in caplog.records if r.name == "console.store.cache" and r.levelname == "WARNING"]
    store, _ = load_store("raw")
    assert steps_in(store, "worker-0") == 5


def test_a_run_followed_only_in_part_is_replayed_from_its_hosts_and_the_cache_completed(homes):
    finished_run(homes, "part", epochs=2, steps=25)
    folder = cache_dir("part")
    # As if the console had been closed halfway: half of worker-0's lines, no end seen.
    data = (folder / "worker-0.jsonl").read_bytes()
    lines = data.splitlines(keepends=True)
    (folder / "worker-0.jsonl").write_bytes(b"".join(lines[:len(lines) // 2]))
    summary = json.loads((folder / "summary.json").read_text())
    summary["tasks"]["worker-0"]["complete"] = False
    (folder / "summary.json").write_text(json.dumps(summary))

    store, order = load_store("part")
    assert [steps_in(store, t) for t in order] == [50, 50]
    assert (folder / "worker-0.jsonl").read_bytes() == data  # the replay filled in what was missing
    assert cache.whole(json.loads((folder / "summary.json").read_text()), order)


def test_without_any_cache_the_history_comes_from_the_hosts(homes):
    finished_run(homes, "nocache", epochs=1, steps=40)
    shutil.rmtree(cache_dir("nocache"))
    store, order = load_store("nocache")
    assert [steps_in(store, t) for t in order] == [40, 40]
    assert len(store.epochs) == 2


def test_a_damaged_cache_is_read_as_far_as_it_is_good_with_a_note(homes, monkeypatch):
    finished_run(homes, "damaged", epochs=1, steps=30)
    folder = cache_dir("damaged")
    lines = (folder / "worker-0.jsonl").read_bytes().splitlines(keepends=True)
    step_lines = [i for i, line in enumerate(lines) if b'"type": "step"' in line]
    lines[step_lines[5]] = b'{"type": "step", "epo\x00\xff garbage\n'
    (folder / "worker-0.jsonl").write_bytes(b"".join(lines) + b'{"type": "step", "cut by a cr')
    replay = catalog._replay
    monkeypatch.setattr(catalog, "_replay", lambda *a, **k: pytest.fail("the hosts were asked"))

    store, order = load_store("damaged")
    assert steps_in(store, "worker-0") == 29 and steps_in(store, "worker-1") == 30
    notes = [event_line(e) for e in store.events_snapshot() if e["event"] == "history"]
    assert notes == [f"worker-0.jsonl of this run's history here has 1 line(s) that are not records (the first "
                     f"is line {step_lines[5] + 1}): shown as unreadable, as they came and its last line was cut "
                     "short (a crash while it was written) and is skipped; the rest is shown"]
    assert any(e["event"] == "unreadable" and e["task"] == "worker-0" for e in store.events_snapshot())

    # Opened again, the damaged task is replayed from its host, and its cache written anew.
    monkeypatch.setattr(catalog, "_replay", replay)
    store, order = load_store("damaged")
    assert [steps_in(store, t) for t in order] == [30, 30]
    assert (folder / "worker-0.jsonl").read_bytes() == host_lines(homes, "damaged", "worker-0")

    # A damaged summary: said, and the history comes from the hosts instead (the cache is not known whole).
    (folder / "summary.json").write_text('{"state": "fini')
    store, order = load_store("damaged")
    assert [steps_in(store, t) for t in order] == [30, 30]
    assert any(event_line(e).startswith("the history summary of run damaged") and "is damaged" in event_line(e)
               for e in store.events_snapshot())
    assert (folder / "worker-0.jsonl").read_bytes() == host_lines(homes, "damaged", "worker-0")
    assert json.loads((folder / "summary.json").read_text())["state"] == "finished"


def test_hosts_that_cannot_be_asked_leave_the_cache_with_a_note(homes):
    # A run on a host that refuses connections, of which this console received part.
    cluster = cl.Cluster([cl.Host(name="gone", address="127.0.0.1", port=1)], [cl.Task(host="gone", port=2222)],
                         cl.Training(epochs=1))
    write_manifest(Manifest("far", cluster, [("worker-0", "gone")], [cluster.tf_config(0)]))
    folder = cache_dir("far")
    folder.mkdir(parents=True)
    (folder / "worker-0.jsonl").write_text("".join(
        json.dumps({"type": "step", "epoch": 0, "step": i, "global_step": i + 1, "loss": 1.0}) + "\n"
        for i in range(7)))
    store, order = load_store("far", timeout=30)
    assert order == ["worker-0"] and steps_in(store, "worker-0") == 7
    notes = [event_line(e) for e in store.events_snapshot() if e["event"] == "history"]
    assert notes and notes[0].startswith("only what this console received of run far is shown: its hosts could "
                                         "not be asked")
    shutil.rmtree(folder)
    with pytest.raises(HistoryError, match="the history of run far cannot be had: .*127.0.0.1"):
        load_store("far", timeout=30)


def test_two_sessions_of_one_run_at_once_keep_one_copy(homes):
    """Two consoles following the same run (the window and a tfcc attach): the first keeps the cache,
    the second leaves it be (two writers would append every line twice)."""
    run = Run(scripted_cluster(homes, tasks=1), "twice")
    first, second = History(run), History(run)
    lines = [json.dumps({"type": "step", "step": i}) for i in range(3)]
    size = sum(len(line) + 1 for line in lines)
    first.lines("worker-0", lines, size)
    second.lines("worker-0", lines, size)
    first.flush()
    second.flush()
    assert (cache_dir("twice") / "worker-0.jsonl").read_text().splitlines() == lines
    first.close()
    second.close()
    third = History(run)  # once the first is done, a later session keeps it again
    third.lines("worker-0", lines + ['{"type": "step", "step": 3}'], size + 28)
    third.close()
    assert len((cache_dir("twice") / "worker-0.jsonl").read_text().splitlines()) == 4


def test_system_records_are_kept_per_host_and_given_back(homes):
    run = Run(scripted_cluster(homes), "sys")
    keeper = History(run)
    record = {"type": "system", "time": 1.0, "cpu_percent": 12.5, "memory_used_bytes": 1000}
    keeper.on_event(SessionEvent("system", host="here", message=record))
    keeper.close()
    assert json.loads((cache_dir("sys") / "system-here.jsonl").read_text()) == record
    got = []

    class Store(MetricsStore):
        def ingest_system(self, host, r, tasks=None):
            got.append((host, r, tasks))

    cache.fill_from_cache("sys", Store(), ["worker-0", "worker-1"])
    assert got == [("here", record, {"worker-0", "worker-1"})]  # the run's tasks only, as the session kept them


def test_the_list_of_runs_says_state_cluster_times_and_final_metrics(homes):
    finished_run(homes, "a-done", epochs=2, steps=10, seed=2.0)
    going = Run(scripted_cluster(homes, forever=True, tasks=1), "b-going")
    going.start()
    try:
        infos = {i.run_id: i for i in overview(timeout=20)}
        done = infos["a-done"]
        assert done.state == "finished" and done.phases is None  # known ended: its hosts were not asked
        assert done.cluster_text == "here: worker-0, worker-1"
        assert done.duration is not None and done.duration >= 0
        assert done.metrics["val_accuracy"] == 0.7 and done.metrics["loss"] == 2.0 / 20
        live = infos["b-going"]  # never followed: its host says how it is
        assert live.state == "running" and live.phases == {"worker-0": "running"}
    finally:
        going.stop(grace=0.5)
        going.detach()


def test_a_run_that_cannot_be_asked_is_listed_within_the_time_given(homes):
    cluster = cl.Cluster([cl.Host(name="gone", address="10.255.255.1")], [cl.Task(host="gone", port=2222)],
                         cl.Training(epochs=1))  # an address that drops packets: no answer at all
    write_manifest(Manifest("silent", cluster, [("worker-0", "gone")], [cluster.tf_config(0)]))
    infos = overview(timeout=1.0)
    assert [(i.run_id, i.state) for i in infos] == [("silent", "unknown")]
    assert "gone" in infos[0].note or "no answer in 1 s" in infos[0].note


def test_deleting_a_run_removes_its_folders_and_its_history_and_refuses_a_running_one(homes):
    finished_run(homes, "old", epochs=1, steps=5)
    going = Run(scripted_cluster(homes, forever=True, tasks=1), "busy")
    going.start()
    try:
        with pytest.raises(RunError, match=r"run busy still runs \(worker-0\); nothing was deleted; stop it first "
                                           r"\(tfcc stop busy\)"):
            catalog.delete_run("busy")
        assert (homes / "host-home" / "runs" / "busy").is_dir() and manifest_path("busy").exists()
    finally:
        going.stop(grace=0.5)
        going.detach()
    said = catalog.delete_run("old")
    assert said[0] == "here: deleted worker-0, worker-1"
    assert not (homes / "host-home" / "runs" / "old").exists()
    assert not manifest_path("old").exists() and not cache_dir("old").exists()
    assert [i.run_id for i in overview(ask=False)] == ["busy"]


@pytest.mark.slow
def test_a_digits_run_reopened_after_a_restart_has_its_whole_history(homes, monkeypatch):
    """The real trainer: two local workers train digits for 2 epochs under a session; a console that
    starts afresh loads the same history from its cache (every step of each worker, each epoch with
    its validation), and the summary's final metrics are the chief's."""
    from trainer.metrics import read_records

    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "2")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(epochs=2, per_replica_batch=32))
    run = Run(cluster, "digits")
    run.start()
    live = MetricsStore()
    session = RunSession(run, live)
    follow_to_end(session, 300)
    written = {t: read_records(homes / "host-home" / "runs" / "digits" / t / "metrics.jsonl")
               for t in ("worker-0", "worker-1")}

    monkeypatch.setattr(catalog, "_replay", lambda *a, **k: pytest.fail("the cache is whole: no host is asked"))
    store, order = load_store("digits")
    for task, records in written.items():
        steps = sum(r["type"] == "step" for r in records)
        assert steps == 2 * (1438 // 64)
        assert store.points(task, "loss") == live.points(task, "loss") == steps
        epochs = [(r["epoch"], r["val_accuracy"]) for r in records if r["type"] == "epoch"]
        assert sorted((e["epoch"], e["val_accuracy"]) for e in store.epochs if e["task"] == task) == epochs
    summary = json.loads((cache_dir("digits") / "summary.json").read_text())
    finished = [r for r in written["worker-0"] if r.get("event") == "finished"][0]
    assert summary["state"] == "finished" and summary["metrics"] == finished["metrics"]
    assert summary["metrics"]["val_accuracy"] > 0.5


def test_over_ssh_a_runs_history_is_replayed_its_logs_fetched_and_it_is_deleted(ssh_hosts, ssh_env):
    """A run on two SSH test hosts: with no local copy its history comes from the hosts, its chief's
    TensorBoard logs come over SFTP, and deleting it removes its folder on both hosts."""
    import sys

    from console import tensorboard
    from tests.helpers.scripted import SCRIPT

    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    script = ssh_env / "scripted.py"
    script.write_text(SCRIPT)
    hosts = [cl.Host(name=h.name, address=h.address, user="root", key=str(ssh_hosts.client_key),
                     python=sys.executable) for h in ssh_hosts.hosts]
    cluster = cl.Cluster(hosts, [cl.Task(host=h.name) for h in hosts],
                         cl.Training(script=str(script), args=["2", "15", "once", "1.0"], capture=False))
    run = Run(cluster, "over-ssh")
    run.start()
    session = RunSession(run, MetricsStore())
    follow_to_end(session, 60)
    assert catalog.run_info("over-ssh").state == "finished"
    shutil.rmtree(cache_dir("over-ssh"))

    store, order = load_store("over-ssh")
    assert [steps_in(store, t) for t in order] == [30, 30]
    logs = tensorboard.fetch_logs("over-ssh")
    assert (logs / "train" / "events.out.tfevents.0.here").read_bytes() == b"not a real event file"
    folders = [h.tfcc_home / "runs" / "over-ssh" for h in ssh_hosts.hosts]
    assert all(f.is_dir() for f in folders)
    said = catalog.delete_run("over-ssh")
    assert sorted(said[:2]) == sorted(f"{h.name}: deleted worker-{i}" for i, h in enumerate(ssh_hosts.hosts))
    assert not any(f.exists() for f in folders) and not cache_dir("over-ssh").exists()


def test_a_reattach_takes_the_run_up_from_the_snapshot_and_reads_on_from_where_it_ends(homes, monkeypatch):
    """The console's session ends (a detach) while the run goes on; the next session fills its store
    from the snapshot the first left and asks the hosts only for what came after: nothing lost,
    nothing twice, supervision as it was."""
    from agent.protocol import METRICS
    from tests.helpers.waiting import wait_until

    run = Run(scripted_cluster(homes, epochs=2, steps=30, forever=True), "taken-up")
    run.start()
    try:
        first = MetricsStore()
        session = RunSession(run, first)
        session.follow()
        assert wait_until(lambda: [steps_in(first, t) for t in ("worker-0", "worker-1")] == [60, 60], 60)
        session.detach()
        assert session.wait(10)
        assert snapshot.read(cache_dir("taken-up") / cache.STORE) is not None

        before = {t: len(host_lines(homes, "taken-up", t)) for t in ("worker-0", "worker-1")}
        # While no console follows, the task writes on (as a trainer would).
        with open(homes / "host-home" / "runs" / "taken-up" / "worker-0" / "metrics.jsonl", "a") as f:
            for g in range(61, 71):
                f.write(json.dumps({"type": "step", "epoch": 2, "step": g - 61, "global_step": g, "loss": 1 / g,
                                    "step_time": 0.001, "time": 1.0}) + "\n")
        again = Run.load("taken-up")
        asked: dict[str, int] = {}
        follow = again.follow

        def spy(on_message, poll=0.2, only=None):
            asked.update({t.name: t.offsets[METRICS] for t in again.tasks})
            return follow(on_message, poll, only)

        monkeypatch.setattr(again, "follow", spy)
        store = MetricsStore()
        session = RunSession(again, store)
        session.follow()
        assert wait_until(lambda: steps_in(store, "worker-0") >= 70, 30)
        assert wait_until(lambda: session.started_record is not None, 10)
        assert [steps_in(store, t) for t in ("worker-0", "worker-1")] == [70, 60]  # nothing twice
        assert list(store.series("worker-0", "loss")[0]) == list(range(1, 71))
        assert asked == before  # where the snapshot ended
        assert len(store.epochs) == 4 and session.started_record["steps_per_epoch"] == 30
        assert {t.phase for t in again.tasks} == {"training"}  # from the kept cluster_formed events
        session.detach()
        assert session.wait(10)
        for task in ("worker-0", "worker-1"):  # the cache is the host's file, byte for byte
            assert (cache_dir("taken-up") / f"{task}.jsonl").read_bytes() == host_lines(homes, "taken-up", task)
    finally:
        run.stop()


def test_a_finished_run_reopens_from_its_snapshot_without_a_line_decoded(homes, monkeypatch):
    _, live = finished_run(homes, "snapped", epochs=2, steps=30)
    read_lines = cache.read_lines

    def no_metrics_lines(path, notes, *args, metrics=False, **kw):
        assert not metrics, f"the cache's metrics lines were decoded ({path.name})"
        return read_lines(path, notes, *args, **kw)

    monkeypatch.setattr(cache, "read_lines", no_metrics_lines)
    monkeypatch.setattr(catalog, "_replay", lambda *a, **k: pytest.fail("the hosts were asked"))
    store, order = load_store("snapped")
    assert [steps_in(store, t) for t in order] == [60, 60]
    assert store.epochs == live.epochs  # and the events: the records' from the snapshot, the console's notes
    key = lambda e: (e["task"], e["event"], event_line(e))  # noqa: E731  from console.jsonl
    assert sorted(map(key, store.events_snapshot())) == sorted(map(key, live.events_snapshot()))


def test_a_cache_written_on_after_the_snapshot_is_read_from_its_lines(homes):
    finished_run(homes, "outgrown", epochs=1, steps=20)
    with open(cache_dir("outgrown") / "worker-0.jsonl", "a") as f:  # a session that kept no snapshot wrote on
        f.write(json.dumps({"type": "step", "epoch": 1, "step": 0, "global_step": 21, "loss": 0.1, "time": 2.0}) + "\n")
    store, order = load_store("outgrown")
    assert [steps_in(store, t) for t in order] == [21, 20]


@pytest.mark.parametrize("how", ["a snapshot of the wrong shape", "supervision fails on what it kept"])
def test_a_snapshot_that_cannot_be_taken_up_whole_leaves_the_session_reading_from_the_first_records(
        homes, monkeypatch, how):
    finished_run(homes, "half-taken", epochs=1, steps=20)
    if how == "a snapshot of the wrong shape":  # refused whole (console.store.snapshot)
        state_path = cache_dir("half-taken") / cache.STORE / "store.json"
        state = json.loads(state_path.read_text())
        state["kept"] = ["not", "a", "dict"]
        state_path.write_text(json.dumps(state))
    else:  # the store restores; what supervision needs does not (the first of it, once): the session rolls back
        launched = Supervisor.launched

        def broken(*args):
            monkeypatch.setattr(Supervisor, "launched", launched)
            raise ValueError("a kept record supervision cannot take")

        monkeypatch.setattr(Supervisor, "launched", broken)
    store = MetricsStore()
    session = RunSession(Run.load("half-taken"), store)
    follow_to_end(session, 30)
    assert [steps_in(store, t) for t in ("worker-0", "worker-1")] == [20, 20]  # nothing twice
    for task in ("worker-0", "worker-1"):
        assert (cache_dir("half-taken") / f"{task}.jsonl").read_bytes() == host_lines(homes, "half-taken", task)


def test_supervision_keeps_the_records_it_needs_in_their_order(homes):
    """A backup begun after the last step, or a resumed attempt's launch, must be replayed after that step."""
    session = RunSession(Run(scripted_cluster(homes), "kept-order"))
    task = session.run.tasks[0]
    records = [{"type": "event", "event": "launched", "attempt": 1}, {"type": "event", "event": "cluster_formed"},
               *({"type": "step", "global_step": g} for g in (1, 2, 3)),
               {"type": "event", "event": "backing_up"}, {"type": "alive", "n": 1}, {"type": "alive", "n": 2},
               {"type": "event", "event": "launched", "attempt": 2}, {"type": "step", "global_step": 4}]
    session._records(task, Batch(records))
    assert [(r["type"], r.get("event") or r.get("global_step") or r.get("n")) for r in session._kept[task.name]] == [
        ("event", "launched"), ("event", "cluster_formed"), ("step", 3), ("event", "backing_up"), ("alive", 2),
        ("event", "launched"), ("step", 4)]


HOSTILE = """import json, os
records = [
    "x" * (3 << 20),                                             # a line over the cap
    json.dumps({"type": "step", **{f"f{i}": i for i in range(2000)}}),  # two thousand fields
    "[" * 100000 + "]" * 100000,                                 # nested past any parser
    json.dumps({"type": "event", "event": "evaluated", "time": "soon", "metrics": "none"}),
    json.dumps({"type": "epoch", "epoch": "first", "time": 1e300, "loss": "low"}),
    json.dumps({"type": "step", "global_step": "one", "time": [1], "loss": {"a": 1}}),
    '{"type": "event", "event": "failed", "time": NaN, "error": 42}',
] + [json.dumps({"type": "step", "global_step": g, "time": 1000.0 + g, "loss": 1.0 / g}) for g in range(1, 6)]
with open(os.path.join(os.environ["TFCC_RUN_DIR"], "metrics.jsonl"), "w") as f:
    f.write("\\n".join(records) + "\\n")
"""


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.test_network)])
def hostile_cluster(request, homes):
    """One task of the hostile script: on this machine, or on an SSH test host (a real sshd)."""
    import sys
    if request.param == "local":
        script = homes / "hostile.py"
        host = cl.Host(name="here", local=True)
    else:
        ssh_hosts, ssh_env = request.getfixturevalue("ssh_hosts"), request.getfixturevalue("ssh_env")
        ssh_hosts.known_hosts(ssh_env / "known_hosts")
        script = ssh_env / "hostile.py"
        h = ssh_hosts.hosts[0]
        host = cl.Host(name=h.name, address=h.address, user="root", key=str(ssh_hosts.client_key),
                       python=sys.executable)
    script.write_text(HOSTILE)
    return cl.Cluster([host], [cl.Task(host=host.name)], cl.Training(script=str(script), capture=False))


def test_a_hostile_tasks_lines_are_noted_its_good_records_kept_once_and_its_history_reopens(hostile_cluster):
    """A task writes a line over the cap, a record of two thousand fields, one nested past any parser and
    records whose fields have the wrong types, then five good steps: through the real agent each bad line is
    one event that says why, each good step is kept once, and the run's history reopens the same."""
    run = Run(hostile_cluster, "hostile")
    run.start()
    live = MetricsStore()
    follow_to_end(RunSession(run, live), 60)
    assert steps_in(live, "worker-0") == 5
    assert list(live.series("worker-0", "loss")[0]) == [1.0, 2.0, 3.0, 4.0, 5.0]
    said = [event_line(e) for e in live.events_snapshot() if e["task"] == "worker-0"]
    assert any("a line of 3145728 bytes, over the 1048576-byte cap" in line for line in said)
    assert any("over 1000 fields" in line for line in said)
    assert sum("is not a record" in line for line in said) == 3
    store, _ = load_store("hostile")
    assert steps_in(store, "worker-0") == 5
    assert [event_line(e) for e in store.events_snapshot() if e["task"] == "worker-0"] == said
    session = RunSession(Run.load("hostile"), MetricsStore())  # a reattach reads the host's file again
    follow_to_end(session, 30)
    assert steps_in(session.store, "worker-0") == 5


@pytest.mark.parametrize("cut", [10, (1 << 20) + 10, 3 * (1 << 20)])
def test_a_cut_last_line_of_any_length_leaves_the_whole_lines_before_it_and_their_true_count(tmp_path, cut):
    """A crash while a long line was written (a line over 1 MiB cut short): the file keeps its whole lines, and the
    count says how many there are (it kept the old count and emptied the file: every later line was then numbered
    wrong, and the history lost)."""
    path = tmp_path / "worker-0.jsonl"
    whole = b"".join(json.dumps({"type": "step", "global_step": i}).encode() + b"\n" for i in range(3))
    path.write_bytes(whole + b'{"type": "step", "note": "' + b"x" * cut)
    assert cache._whole_lines(path) == 3
    assert path.read_bytes() == whole
    assert cache._whole_lines(path) == 3 and path.read_bytes() == whole  # a whole file is left as it is
