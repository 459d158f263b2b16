"""TensorBoard on demand: the chief's log folder copied here, TensorBoard served on 127.0.0.1 and stopped,
and one clear line when it cannot be (not installed, no logs yet, a host that cannot be reached)."""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.request

import pytest

from console import cluster as cl
from console import tensorboard as tb
from console.store.cache import cache_dir
from console.remote.ssh import SSHConnection
from console.run.runner import Run
from console.store.manifests import Manifest, write_manifest
from tests.helpers.scripted import finished_run, scripted_cluster
from tests.helpers.waiting import wait_until


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    return tmp_path


def test_the_chiefs_logs_are_copied_here_for_a_local_host(homes):
    finished_run(homes, "logs", epochs=1, steps=5)  # its worker-0 writes tensorboard/train/events...
    folder = tb.fetch_logs("logs")
    assert folder == cache_dir("logs") / "tensorboard"
    source = homes / "host-home" / "runs" / "logs" / "worker-0" / "tensorboard" / "train"
    copied = folder / "train" / "events.out.tfevents.0.here"
    assert copied.read_bytes() == (source / "events.out.tfevents.0.here").read_bytes()
    (source / "events.out.tfevents.0.here").write_bytes(b"more epochs written")  # the chief goes on
    (source / "link").symlink_to(homes)  # never followed out of the folder
    tb.fetch_logs("logs")
    assert copied.read_bytes() == b"more epochs written"
    assert not (folder / "train" / "link").exists()


def test_a_run_without_logs_yet_says_when_they_come(homes):
    run = Run(scripted_cluster(homes, forever=True, tasks=1), "early")
    run.start()
    try:
        assert wait_until(lambda: (homes / "host-home" / "runs" / "early" / "worker-0" / "trained").exists(), 30)
        with pytest.raises(tb.TensorBoardError, match=r"run early has no TensorBoard logs yet: worker-0 on here has "
                                                      r"no .*/runs/early/worker-0/tensorboard; the trainer's chief "
                                                      r"writes them at the end of its first epoch"):
            tb.fetch_logs("early")
    finally:
        run.stop(grace=0.5)
        run.detach()


def test_a_host_that_cannot_be_reached_is_one_line(homes):
    cluster = cl.Cluster([cl.Host(name="gone", address="127.0.0.1", port=1)], [cl.Task(host="gone", port=2222)],
                         cl.Training(epochs=1))
    write_manifest(Manifest("far", cluster, [("worker-0", "gone")], [cluster.tf_config(0)]))
    with pytest.raises(tb.TensorBoardError, match=r"^cannot copy the TensorBoard logs of run far from host gone: "
                                                  r"cannot connect to \[127.0.0.1\]:1 .*; check that the host is up"):
        tb.fetch_logs("far")


def test_tensorboard_not_installed_says_how_to_install_it(homes, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(tb.TensorBoardError, match=r"TensorBoard is not installed for tfcc's Python \(.*\); install "
                                                  r"it: .* -m pip install tensorboard"):
        tb.Servers().open("anything")


@pytest.mark.slow
def test_tensorboard_serves_the_logs_on_localhost_and_stops(homes):
    pytest.importorskip("tensorboard")  # it comes with TensorFlow's wheel
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.compat.proto import event_pb2, summary_pb2

    logdir = homes / "logs" / "tensorboard"
    writer = EventFileWriter(str(logdir / "train"))
    for step in range(3):
        value = summary_pb2.Summary.Value(tag="epoch_loss", simple_value=1.0 / (step + 1))
        writer.add_event(event_pb2.Event(step=step, wall_time=1.0 + step, summary=summary_pb2.Summary(value=[value])))
    writer.close()
    server = tb.TensorBoard(logdir)
    url = server.start(timeout=120)
    try:
        assert url.startswith("http://127.0.0.1:")
        assert server.port not in (0, None)

        def lists_the_run():
            try:
                with urllib.request.urlopen(url + "data/runs", timeout=30) as reply:
                    return "train" in json.loads(reply.read())
            except OSError:  # not serving yet (or slow to answer on a busy machine): asked again
                return False

        assert wait_until(lists_the_run, 60)
    finally:
        process = server.process
        server.stop()
    assert process.poll() is not None and not tb.answers(url)


def test_another_server_on_the_port_is_never_taken_for_the_runs_tensorboard(homes):
    """A port taken before TensorBoard binds it (another user's server on it, or one that took it between tfcc's
    choice and TensorBoard's bind): it answers HTTP, and tfcc opened it as the run's. Only the TensorBoard whose
    environment names this run's logs is; another server is said, with what to do, and not opened."""
    import http.server
    import threading

    pytest.importorskip("tensorboard")

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data_location": "/somewhere/else"}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    other = http.server.HTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        (homes / "logs" / "tensorboard").mkdir(parents=True)
        server = tb.TensorBoard(homes / "logs" / "tensorboard", port=other.server_address[1])
        with pytest.raises(tb.TensorBoardError) as raised:
            server.start(timeout=120)
        assert str(raised.value) == (
            f"another server answers on http://127.0.0.1:{other.server_address[1]}/, not this run's TensorBoard (it "
            f"holds port {other.server_address[1]}); give TensorBoard another port (tfcc tensorboard --port), or none "
            "for a free one")
        assert server.process is None
    finally:
        other.shutdown()


def test_logs_are_copied_over_sftp(ssh_hosts, ssh_env, tmp_path):
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    host = ssh_hosts.hosts[0]
    remote = tmp_path / "remote-logs"  # the test hosts share this machine's disk
    (remote / "train").mkdir(parents=True)
    (remote / "train" / "events.out.tfevents.1").write_bytes(b"x" * 70_000)
    (remote / "validation").mkdir()
    (remote / "validation" / "events.out.tfevents.2").write_bytes(b"v")
    (remote / "outside").symlink_to(tmp_path)
    conn = SSHConnection(host.address, user="root", key=str(ssh_hosts.client_key))
    try:
        files = conn.files()
        try:
            local = tmp_path / "here"
            assert files.get_tree(str(remote), local) == 2
            assert files.get_tree(str(remote), local) == 0  # unchanged: nothing sent again
            with pytest.raises(FileNotFoundError):
                files.get_tree(str(tmp_path / "nothing"), tmp_path / "n")
        finally:
            files.close()
    finally:
        conn.close()
    assert (local / "train" / "events.out.tfevents.1").read_bytes() == b"x" * 70_000
    assert (local / "validation" / "events.out.tfevents.2").read_bytes() == b"v"
    assert not os.path.lexists(local / "outside")


def test_a_copy_takes_no_more_than_its_budget_over_sftp(ssh_hosts, ssh_env, tmp_path):
    """A host's folder bigger than the copy may take: CopyTooBig before the file that would pass the budget."""
    from console.remote.transport import CopyBudget, CopyTooBig
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    remote = tmp_path / "remote-logs"
    remote.mkdir()
    for name in ("a", "b", "c"):
        (remote / name).write_bytes(b"x" * 1_000_000)
    conn = SSHConnection(ssh_hosts.hosts[0].address, user="root", key=str(ssh_hosts.client_key))
    try:
        files = conn.files()
        try:
            with pytest.raises(CopyTooBig, match="holds over"):
                files.get_tree(str(remote), tmp_path / "here", CopyBudget(2_500_000))
        finally:
            files.close()
    finally:
        conn.close()
    assert sum(f.stat().st_size for f in (tmp_path / "here").iterdir()) <= 2_500_000


def test_logs_over_the_cap_are_not_copied_and_the_line_says_what_to_do(homes):
    finished_run(homes, "big", epochs=1, steps=5)
    source = homes / "host-home" / "runs" / "big" / "worker-0" / "tensorboard" / "train"
    for i in range(3):
        (source / f"events.out.tfevents.{i}.big").write_bytes(b"e" * 1_000_000)
    with pytest.raises(tb.TensorBoardError) as err:
        tb.fetch_logs("big", max_bytes=2_000_000)
    assert str(err.value).startswith("the TensorBoard logs of run big (worker-0's ")
    assert "hold more than the 1.9 MB that tfcc copies here" in str(err.value)
    assert "tfcc tensorboard --max-gb N" in str(err.value)
    copied = cache_dir("big") / "tensorboard"
    assert sum(f.stat().st_size for f in copied.rglob("*") if f.is_file()) <= 2_000_000


@pytest.mark.slow
def test_a_tensorboard_stopped_while_it_starts_does_not_outlive_its_console(homes):
    pytest.importorskip("tensorboard")
    import threading

    (homes / "logs" / "tensorboard").mkdir(parents=True)
    server = tb.TensorBoard(homes / "logs" / "tensorboard")
    failed = []

    def start():
        try:
            server.start(timeout=120)
        except tb.TensorBoardError as exc:
            failed.append(str(exc))

    thread = threading.Thread(target=start)
    thread.start()
    assert wait_until(lambda: server.process is not None, 10)
    process = server.process
    server.stop()  # the window quits while TensorBoard is still starting
    thread.join(30)
    assert failed == ["TensorBoard was stopped while it started"]
    assert process.poll() is not None
