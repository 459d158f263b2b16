"""The stacks op: where each thread of a running task is now, as the task itself says; or why it cannot say."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from agent import runs
from console.remote.channel import AgentRequestError
from tests.helpers.waiting import wait_until

ROOT = str(Path(__file__).resolve().parents[2])

# A task as people write them: its main thread waits for data that never comes, a loader thread beside it.
STUCK = """\
import threading
from trainer import stacks

stacks.arm()
ready = threading.Event()


def load_shards():
    ready.wait()


def wait_for_data():
    ready.wait()  # the hang


threading.Thread(target=load_shards, name="loader", daemon=True).start()
print("waiting", flush=True)
wait_for_data()
"""


@pytest.fixture
def stuck(client, tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    client.call("start", run_id="hang", task="worker-0", argv=[sys.executable, str(script)], python_path=[ROOT])
    yield script
    runs.stop("hang", "worker-0", grace=0.5)


def test_a_running_task_says_where_each_thread_is(client, stuck):
    said = client.call("stacks", run_id="hang", task="worker-0", wait=10)
    assert said["state"] == "answered", said
    text = said["stacks"]
    assert f'File "{stuck}", line 13 in wait_for_data' in text  # the main thread's hang, in the user's own file
    assert f'File "{stuck}", line 9 in load_shards' in text     # and the loader beside it
    assert "Current thread" in text and "(most recent call first)" in text
    again = client.call("stacks", run_id="hang", task="worker-0", wait=10)  # asked again: answered anew
    assert again["state"] == "answered" and "wait_for_data" in again["stacks"]


def test_a_stopped_task_is_said_stopped_at_once_and_an_ended_one_is_refused(client, stuck):
    folder = Path(client.call("status", run_id="hang", task="worker-0")["run_dir"])
    assert wait_until(lambda: (folder / "child.json").exists(), 10)
    pid = runs.read_json(folder / "child.json")["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        said = client.call("stacks", run_id="hang", task="worker-0", wait=10)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert said["state"] == "stopped" and said["pid"] == pid
    runs.stop("hang", "worker-0", grace=0.5)
    assert wait_until(lambda: client.call("status", run_id="hang", task="worker-0")["phase"] != "running", 10)
    with pytest.raises(AgentRequestError, match="task worker-0 of run hang is not running here"):
        client.call("stacks", run_id="hang", task="worker-0")


def test_a_task_that_does_not_watch_is_silent_within_the_wait(client, tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import time\ntime.sleep(60)\n")
    client.call("start", run_id="plain", task="worker-0", argv=[sys.executable, str(script)])
    try:
        said = client.call("stacks", run_id="plain", task="worker-0", wait=0.5)
        assert said["state"] == "silent"
        for bad in (0, -1, 31, True, "5"):
            with pytest.raises(AgentRequestError) as refused:
                client.call("stacks", run_id="plain", task="worker-0", wait=bad)
            assert refused.value.code == "bad-argument"
    finally:
        runs.stop("plain", "worker-0", grace=0.5)


# A reader of one named pipe whose writer wrote once and went quiet, and an opener of another that nobody opens.
PIPES = """\
import os, threading
from trainer import stacks

stacks.arm()
os.mkfifo("quiet.fifo")
os.mkfifo("unopened.fifo")


def feed():
    with open("quiet.fifo", "w") as pipe:
        pipe.write("a first line\\n")
        pipe.flush()
        threading.Event().wait()


threading.Thread(target=feed, daemon=True).start()
threading.Thread(target=lambda: open("unopened.fifo").read(), daemon=True).start()
reader = open("quiet.fifo")
print(reader.readline(), end="", flush=True)
reader.readline()
"""


def test_a_task_waiting_on_named_pipes_says_which_and_how(client, tmp_path):
    """Where no Python frame shows it (TensorFlow's reader is native code): the agent names the pipe a thread reads
    and the one a thread waits to open, by their paths."""
    script = tmp_path / "pipes.py"
    script.write_text(PIPES)
    client.call("start", run_id="pipes", task="worker-0", argv=[sys.executable, str(script)], python_path=[ROOT],
                cwd=str(tmp_path))
    try:
        out = runs.task_dir("pipes", "worker-0") / "stdout.log"
        assert wait_until(lambda: out.exists() and "a first line" in out.read_text(), 30)
        said = client.call("stacks", run_id="pipes", task="worker-0", wait=10)
        assert said["state"] == "answered", said
        assert sorted(said["fifos"], key=lambda f: f["path"]) == [
            {"path": str(tmp_path / "quiet.fifo"), "in": "read"}, {"path": str(tmp_path / "unopened.fifo"),
                                                                   "in": "open"}], said["fifos"]
    finally:
        runs.stop("pipes", "worker-0", grace=0.5)


def test_two_asks_at_once_are_both_answered(client, stuck):
    """The watchdog, the window and ``tfcc where`` may ask at the same moment: the task answers the newest ask, and a
    dump made after an ask was left answers it too (no ask waits its whole time and calls the task silent)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:
        said = list(pool.map(lambda _: runs.stacks("hang", "worker-0", wait=10), range(3)))
    assert [s["state"] for s in said] == ["answered"] * 3, said
    assert all("wait_for_data" in s["stacks"] for s in said)


def test_a_task_stopped_while_it_is_asked_is_said_stopped_not_silent(client, tmp_path):
    """SIGSTOP lands a moment after the ask (a busy machine delivers it late, a person presses Ctrl-Z): the ask says
    stopped, within its wait, rather than silent at its end."""
    import threading

    script = tmp_path / "plain.py"
    script.write_text("import time\ntime.sleep(60)\n")  # (no watcher: it would never answer)
    client.call("start", run_id="late", task="worker-0", argv=[sys.executable, str(script)])
    folder = runs.task_dir("late", "worker-0")
    try:
        assert wait_until(lambda: (folder / "child.json").exists(), 10)
        pid = runs.read_json(folder / "child.json")["pid"]
        threading.Timer(1.0, os.kill, args=(pid, signal.SIGSTOP)).start()
        said = client.call("stacks", run_id="late", task="worker-0", wait=20)
        os.kill(pid, signal.SIGCONT)
        assert said["state"] == "stopped" and said["pid"] == pid, said
    finally:
        runs.stop("late", "worker-0", grace=0.5)
