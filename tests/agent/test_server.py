"""The agent over its local transport: real agent processes, real detached tasks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.protocol import PROTOCOL_VERSION

from agent import runs
from console.remote.channel import AgentClient, AgentRequestError
from console.remote.local import local_agent
from tests.helpers.waiting import bound, wait_until

FAKE = str(Path(__file__).parent / "data" / "fake_task.py")


@pytest.fixture
def clients(tfcc_home):
    opened = []

    def open_client() -> AgentClient:
        client = AgentClient(local_agent())
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        client.close()


@pytest.fixture
def stop_all(tfcc_home):
    started = []
    yield started
    for run_id, task in started:  # never leave a task behind
        runs.stop(run_id, task, grace=0.5)


class Collector:
    """Gathers a follow's records; waits on a count with a timeout."""

    def __init__(self):
        self.records: list[dict] = []
        self.lines: list[str] = []  # as the agent sent them: the file's own lines
        self.offset = 0
        self.cond = threading.Condition()

    def __call__(self, message):
        with self.cond:
            if message.get("type") == "metrics":
                self.lines += message["lines"]
                self.records += [json.loads(line) for line in message["lines"]]
                self.offset = message["offset"]
            self.cond.notify_all()

    def wait_for(self, count: int, timeout: float = 30) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.records) >= count, bound(timeout)), \
                f"only {len(self.records)} of {count} records after {timeout} s"


def start_fake(client, stop_all, run_id="r1", task="worker-0", first=10, second=10, code=0, extra=()):
    stop_all.append((run_id, task))
    return client.call("start", run_id=run_id, task=task, argv=[sys.executable, FAKE, str(first), str(second),
                                                                 str(code), *extra])


def test_hello_and_protocol_mismatch(clients):
    client = clients()
    hello = client.hello()
    assert hello["protocol"] == PROTOCOL_VERSION and hello["python"] == ".".join(map(str, sys.version_info[:3]))
    with pytest.raises(AgentRequestError, match=f"console speaks agent protocol 99 but this agent speaks {PROTOCOL_VERSION}; deploy"):
        client.call("hello", protocol=99)


def test_bad_requests_get_clear_errors(clients):
    client = clients()
    with pytest.raises(AgentRequestError, match="unknown op 'launch'; ops are hello, start"):
        client.call("launch")
    with pytest.raises(AgentRequestError, match="run id '../etc' is not a valid name"):
        client.call("start", run_id="../etc", task="w", argv=["true"])
    with pytest.raises(AgentRequestError, match="start needs \"argv\""):
        client.call("start", run_id="r", task="w")
    with pytest.raises(AgentRequestError, match="no task w in run nope on this host"):
        client.call("status", run_id="nope", task="w")


def test_start_writes_run_folder_and_follow_streams_every_line_once(clients, stop_all, tfcc_home):
    client = clients()
    started = client.call("start", run_id="r1", task="worker-0", tf_config='{"cluster": {}}',
                          argv=[sys.executable, FAKE, "10", "10", "0"], env={"EXTRA": "1"})
    stop_all.append(("r1", "worker-0"))
    folder = tfcc_home / "runs" / "r1" / "worker-0"
    assert started["run_dir"] == str(folder)
    assert (folder / "tf_config.json").read_text() == '{"cluster": {}}'
    spec = json.loads((folder / "spec.json").read_text())
    assert spec["env"]["TF_CONFIG"] == '{"cluster": {}}' and spec["env"]["EXTRA"] == "1"
    got = Collector()
    follow = client.follow("r1", "worker-0", got)
    got.wait_for(10)
    (folder / "release").touch()
    assert follow.done.wait(30)
    assert [r["step"] for r in got.records] == list(range(20))
    assert follow.end["phase"] == "finished" and follow.end["exit"]["returncode"] == 0
    assert "done" in (folder / "stdout.log").read_text()


def test_a_held_follow_sends_nothing_until_it_goes_on_then_every_line_once(clients, stop_all, tfcc_home):
    """The console is behind: ``pause`` holds a follow at the agent (what the task writes meanwhile stays in its
    file), and letting it go on sends every line from where it was held, once, in order."""
    client = clients()
    start_fake(client, stop_all, first=1, second=0)
    got = Collector()
    follow = client.follow("r1", "worker-0", got)
    got.wait_for(1)
    assert client.call("pause", follow=follow._rid, paused=True)["following"] is True
    folder = tfcc_home / "runs" / "r1" / "worker-0"
    with open(folder / "metrics.jsonl", "a") as f:
        f.write("".join(json.dumps({"type": "step", "step": i}) + "\n" for i in range(1, 100_001)))
    with got.cond:  # held: not one more line comes (a wait that must time out)
        assert not got.cond.wait_for(lambda: len(got.records) > 1, timeout=1.0)
    client.call("pause", follow=follow._rid, paused=False)
    got.wait_for(100_001)
    (folder / "release").touch()
    assert follow.done.wait(30)
    assert [r["step"] for r in got.records] == list(range(100_001))
    assert client.call("pause", follow=follow._rid)["following"] is False  # it has ended: nothing to hold


def test_task_outlives_agent_and_reattach_replays_from_offset(clients, stop_all, tfcc_home):
    first = clients()
    start_fake(first, stop_all)
    got = Collector()
    first.follow("r1", "worker-0", got)
    got.wait_for(10)
    first.channel.abort()  # the console (or the SSH connection) goes away: the agent is killed
    first.close()
    second = clients()
    assert second.call("status", run_id="r1", task="worker-0")["phase"] == "running"
    (tfcc_home / "runs" / "r1" / "worker-0" / "release").touch()
    rest = Collector()
    follow = second.follow("r1", "worker-0", rest, offsets={"metrics.jsonl": got.offset})
    assert follow.done.wait(30)
    assert [r["step"] for r in got.records + rest.records] == list(range(20))
    listed = second.call("list")["tasks"]
    assert [(t["run_id"], t["task"], t["phase"]) for t in listed] == [("r1", "worker-0", "finished")]


def _alive(pid: int) -> bool:
    return runs.proc_start_time(pid) is not None


def test_stop_kills_a_task_that_ignores_sigterm(clients, stop_all, tfcc_home):
    client = clients()
    started = start_fake(client, stop_all, extra=["--ignore-term"])
    folder = Path(started["run_dir"])
    got = Collector()
    client.follow("r1", "worker-0", got)
    got.wait_for(10)  # the task is up and has installed its handler
    child = json.loads((folder / "child.json").read_text())["pid"]
    t0 = time.monotonic()
    result = client.call("stop", run_id="r1", task="worker-0", grace=1.0)
    assert result["stopped"] and result["killed"]
    assert time.monotonic() - t0 < 1.0 + bound(15)  # its grace, then the kill (not a wait on a task that never ends)
    assert not _alive(started["pid"]) and not _alive(child)
    status = client.call("status", run_id="r1", task="worker-0")
    assert status["phase"] == "failed" and status["exit"]["returncode"] < 0


def test_a_suspended_task_says_so_in_its_status(clients, stop_all):
    """SIGSTOP leaves a task alive but silent: its status says so (the console names it, not a peer)."""
    client = clients()
    started = start_fake(client, stop_all)
    folder = Path(started["run_dir"])
    got = Collector()
    client.follow("r1", "worker-0", got)
    got.wait_for(10)
    child = json.loads((folder / "child.json").read_text())["pid"]
    assert client.call("status", run_id="r1", task="worker-0")["suspended"] is False
    os.kill(child, signal.SIGSTOP)
    try:
        assert wait_until(lambda: client.call("status", run_id="r1", task="worker-0")["suspended"], 10)
    finally:
        os.kill(child, signal.SIGCONT)
    assert wait_until(lambda: not client.call("status", run_id="r1", task="worker-0")["suspended"], 10)


def test_an_end_of_its_own_just_before_a_stop_keeps_its_failure(clients, stop_all):
    """A stop asked for marks the ends that follow it, not one that came first (the task's own error
    would be taken for the stop's doing and never judged)."""
    client = clients()
    started = start_fake(client, stop_all, first=1, second=0, code=3)
    folder = Path(started["run_dir"])
    (folder / "release").touch()
    got = Collector()
    follow = client.follow("r1", "worker-0", got)
    assert follow.done.wait(30) and follow.end["stopped"] is False
    ended = json.loads((folder / "exit.json").read_text())["ended"]
    (folder / runs.STOP_MARKER).write_text(repr(ended + 0.5))  # a stop that came after the end
    assert client.call("status", run_id="r1", task="worker-0")["stopped"] is False
    (folder / runs.STOP_MARKER).write_text(repr(ended - 0.5))  # one that came before it: its doing
    assert client.call("status", run_id="r1", task="worker-0")["stopped"] is True


def test_stop_never_signals_a_reused_pid(clients, tfcc_home):
    bystander = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        folder = tfcc_home / "runs" / "old" / "worker-0"
        folder.mkdir(parents=True)
        (folder / "spec.json").write_text("{}")
        real = runs.proc_start_time(bystander.pid)
        runs.write_json(folder / "state.json", {"pid": bystander.pid, "pgid": bystander.pid, "start_time": real - 1})
        client = clients()
        assert client.call("stop", run_id="old", task="worker-0", grace=0.5)["stopped"] is False
        assert bystander.poll() is None
        assert client.call("status", run_id="old", task="worker-0")["phase"] == "lost"
    finally:
        bystander.kill()
        bystander.wait()


def test_command_that_cannot_start_fails_with_its_reason(clients, stop_all):
    client = clients()
    stop_all.append(("r1", "worker-0"))
    client.call("start", run_id="r1", task="worker-0", argv=["/nonexistent/python3"])
    got = Collector()
    follow = client.follow("r1", "worker-0", got)
    assert follow.done.wait(30)
    assert follow.end["phase"] == "failed"
    assert follow.end["exit"]["returncode"] == 127 and "No such file" in follow.end["exit"]["error"]


def _listening_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    inodes.add(fields[9])
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def test_agent_and_supervisor_open_no_listening_socket(clients, stop_all):
    client = clients()
    started = start_fake(client, stop_all)
    listening = _listening_inodes()
    for pid in (client.hello()["pid"], started["pid"]):
        assert not _socket_inodes(pid) & listening


def test_metrics_lines_are_relayed_as_written_not_decoded_and_encoded_again(clients, stop_all, tfcc_home):
    """The agent passes each metrics line on as the file has it (spacing, key order, a damaged
    line): the console decodes it, once."""
    folder = tfcc_home / "runs" / "raw" / "worker-0"
    written = ['{"type":  "step", "step": 0,   "loss": 0.5}', '{"loss": NaN, "type": "step", "step": 1}',
               '[not json', '{"type": "event", "event": "finished"}']
    script = tfcc_home.parent / "writes.py"
    script.write_text("import os, pathlib\n"
                      "path = pathlib.Path(os.environ['TFCC_RUN_DIR']) / 'metrics.jsonl'\n"
                      f"path.write_text({chr(10).join(written)!r} + '\\n')\n")
    client = clients()
    stop_all.append(("raw", "worker-0"))
    client.call("start", run_id="raw", task="worker-0", argv=[sys.executable, str(script)])
    lines = []
    done = threading.Event()

    def collect(message):
        if message.get("type") == "metrics":
            lines.extend(message["lines"])
        if message.get("type") == "end":
            done.set()

    client.follow("raw", "worker-0", collect)
    assert done.wait(30)
    assert lines == written
    assert (folder / "metrics.jsonl").read_text().splitlines() == written


LONG_LINES = """\
import json, os, pathlib
folder = pathlib.Path(os.environ["TFCC_RUN_DIR"])
with open(folder / "metrics.jsonl", "w") as f:
    f.write(json.dumps({"type": "step", "step": 0}) + "\\n")
    f.write(json.dumps({"type": "step", "pad": "x" * (16 << 20)}) + "\\n")
    f.write(json.dumps({"type": "step", "step": 1}) + "\\n")
print("y" * (4 << 20))
print("after the long line", flush=True)
"""


MANY_LINES = """import json, os, pathlib
path = pathlib.Path(os.environ["TFCC_RUN_DIR"]) / "metrics.jsonl"
with open(path, "a") as f:
    for i in range(20_000):  # about 2 MB of lines, written at once
        f.write(json.dumps({"type": "step", "global_step": i, "pad": "x" * 60}) + "\\n")
"""


def test_a_follow_sends_a_files_lines_in_messages_of_about_a_quarter_megabyte(clients, stop_all, tfcc_home):
    """docs/security.md: an agent's follow message holds about ``MESSAGE_LINES`` (256 KB) of a file's lines, so
    the console decodes a few milliseconds at a time whatever a task wrote at once; every line comes, once."""
    from agent.protocol import MESSAGE_LINES
    script = tfcc_home.parent / "many.py"
    script.write_text(MANY_LINES)
    client = clients()
    stop_all.append(("many", "worker-0"))
    client.call("start", run_id="many", task="worker-0", argv=[sys.executable, str(script)])
    sizes, steps, done = [], [], threading.Event()

    def collect(message):
        if message.get("type") == "metrics":
            sizes.append(sum(len(line) + 1 for line in message["lines"]))
            steps.extend(json.loads(line)["global_step"] for line in message["lines"])
        elif message.get("type") == "end":
            done.set()

    client.follow("many", "worker-0", collect)
    assert done.wait(60)
    assert steps == list(range(20_000))
    assert len(sizes) >= 7 and max(sizes) <= MESSAGE_LINES + 200, sizes


def test_a_line_over_the_cap_is_skipped_with_a_note_and_the_follow_goes_on(clients, stop_all, tfcc_home):
    """A task (hostile or broken) writes a 16 MiB metrics line and a 4 MiB log line: each comes as one short
    note, and every line after it comes, once; the offsets are the file's."""
    from agent.protocol import MAX_LINE
    from trainer.records import RecordType, decode_line
    script = tfcc_home.parent / "long.py"
    script.write_text(LONG_LINES)
    client = clients()
    stop_all.append(("long", "worker-0"))
    client.call("start", run_id="long", task="worker-0", argv=[sys.executable, str(script)])
    lines, logs, offsets, done = [], [], [], threading.Event()

    def collect(message):
        if message.get("type") == "metrics":
            lines.extend(message["lines"])
            offsets.append((message["offset"], message.get("skipped", 0)))
        elif message.get("type") == "log":
            logs.append(message["text"])
        elif message.get("type") == "end":
            done.set()

    client.follow("long", "worker-0", collect)
    assert done.wait(60)
    records = [decode_line(line) for line in lines]
    assert [r["type"] for r in records] == [RecordType.STEP, RecordType.UNREADABLE, RecordType.STEP]
    assert [records[0]["step"], records[2]["step"]] == [0, 1]
    long_line = len(json.dumps({"type": "step", "pad": "x" * (16 << 20)}))
    assert f"a line of {long_line} bytes" in records[1]["raw"]
    size = (tfcc_home / "runs" / "long" / "worker-0" / "metrics.jsonl").stat().st_size
    assert offsets[-1][0] == size
    # What came and what was skipped add up to the file: the console's history counts the same bytes.
    assert sum(len(line) + 1 for line in lines) + sum(s for _, s in offsets) == size
    text = "".join(logs)
    assert "after the long line" in text and f"a line of {4 << 20} bytes" in text and len(text) < MAX_LINE


# --------------------------------------------------------------------------- latency and idle cost


def _arrivals(folder: Path, got: Collector, count: int, gap: float) -> list:
    """Append ``count`` step lines to a followed metrics file with ``gap`` s of quiet between them;
    how long each took to reach the follow's callback (how long it takes is bench/latency.py's figure)."""
    took, quiet = [], threading.Event()
    for i in range(count):
        before = len(got.records)
        t0 = time.monotonic()
        with open(folder / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"type": "step", "step": 1000 + i}) + "\n")
        got.wait_for(before + 1, timeout=60)
        took.append(time.monotonic() - t0)
        quiet.wait(gap)  # the task is quiet meanwhile: what is measured is the next line after it
    return sorted(took)


def _followed_quiet_task(clients, stop_all, poll: float = 0.2, run_id: str = "r1"):
    client = clients()
    started = start_fake(client, stop_all, run_id, first=1, second=0)  # one line, then it waits for its release
    got = Collector()
    client.follow(run_id, "worker-0", got, poll=poll)
    got.wait_for(1)
    return client, Path(started["run_dir"]), got


# With a poll of a minute a follow that polls backs off to looks seconds apart within a few seconds of quiet.
SLOW_POLL = 60.0


def _watched_inodes(pid: int) -> set[int]:
    """The inodes the process's inotify instances watch (its fdinfo: "inotify wd:1 ino:1a2b ...")."""
    found = set()
    for info in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            lines = info.read_text().splitlines()
        except OSError:
            continue
        found |= {int(word[4:], 16) for line in lines if line.startswith("inotify ")
                  for word in line.split() if word.startswith("ino:")}
    return found


def test_a_new_line_reaches_the_console_at_once_after_quiet(clients, stop_all):
    """The agent waits on the task's folder (inotify), not on its poll: a line written after quiet comes at once,
    not at its next look (here seconds away)."""
    client, folder, got = _followed_quiet_task(clients, stop_all, poll=SLOW_POLL)
    assert folder.stat().st_ino in _watched_inodes(client.hello()["pid"])
    after_quiet = _arrivals(folder, got, 2, gap=3.0)
    assert after_quiet[-1] < bound(1.5), after_quiet


def test_polling_is_fast_while_lines_come_and_slow_when_quiet(clients, stop_all, monkeypatch):
    """Without inotify the follow polls: every 10 ms while lines come (a stream of steps arrives with little
    delay, whatever its quiet poll), backing off to its poll when quiet (a line after quiet within the poll)."""
    monkeypatch.setenv("TFCC_AGENT_POLL", "1")
    _, folder, got = _followed_quiet_task(clients, stop_all, poll=SLOW_POLL)
    flowing = _arrivals(folder, got, 20, gap=0.02)
    assert flowing[-1] < bound(10), flowing  # not once a minute: a look every 10 ms while lines come
    _, folder, got = _followed_quiet_task(clients, stop_all, poll=0.2, run_id="r2")
    after_quiet = _arrivals(folder, got, 3, gap=3.0)  # backed off to 0.2 s, not doubling on past it to 3 s and more
    assert after_quiet[-1] < bound(1.5), after_quiet


def _cpu_seconds(pid: int) -> float:
    fields = runs._stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("poll_only", [False, True], ids=["inotify", "polling"])
def test_following_a_quiet_task_costs_under_1_percent_of_a_core(clients, stop_all, monkeypatch, poll_only):
    if poll_only:
        monkeypatch.setenv("TFCC_AGENT_POLL", "1")
    client, _, _ = _followed_quiet_task(clients, stop_all)
    agent = client.hello()["pid"]
    before, t0 = _cpu_seconds(agent), time.monotonic()
    threading.Event().wait(4)  # the measured span: the agent follows a task that writes nothing
    used = (_cpu_seconds(agent) - before) / (time.monotonic() - t0)
    assert used < 0.01, f"the agent used {100 * used:.1f} % of a core following a quiet task"


# --------------------------------------------------------------------------- remove


def test_remove_deletes_an_ended_runs_folder_and_refuses_a_running_one(clients, stop_all, tfcc_home):
    client = clients()
    start_fake(client, stop_all, run_id="gone", task="worker-0", first=1, second=1)
    start_fake(client, stop_all, run_id="gone", task="worker-1", first=1, second=1)
    run_folder = tfcc_home / "runs" / "gone"
    with pytest.raises(AgentRequestError, match=r"task worker-\d of run gone is still running on this host "
                                                r"\(pid \d+\); stop it first \(tfcc stop gone\)") as refused:
        client.call("remove", run_id="gone")
    assert refused.value.code == "already-running"
    assert sorted(p.name for p in run_folder.iterdir()) == ["worker-0", "worker-1"]  # nothing deleted
    for task in ("worker-0", "worker-1"):
        (run_folder / task / "release").touch()
        assert wait_until(lambda task=task: client.call("status", run_id="gone", task=task)["phase"] == "finished", 30)
    assert client.call("remove", run_id="gone")["tasks"] == ["worker-0", "worker-1"]
    assert not run_folder.exists() and (tfcc_home / "runs").is_dir()
    assert client.call("remove", run_id="gone")["removed"] is False  # again: nothing there, no error


def test_remove_refuses_bad_names_and_never_follows_a_link_out(clients, tfcc_home, tmp_path):
    client = clients()
    for bad in ("../x", "a/b", "..", "", None, ".hidden"):
        with pytest.raises(AgentRequestError, match="is not a valid name") as refused:
            client.call("remove", run_id=bad)
        assert refused.value.code == "bad-name"
    outside = tmp_path / "precious"
    (outside / "worker-0").mkdir(parents=True)
    (outside / "worker-0" / "data").write_text("keep me")
    (tfcc_home / "runs").mkdir(parents=True)
    (tfcc_home / "runs" / "linked").symlink_to(outside)
    inside = tfcc_home / "runs" / "mixed" / "worker-0"
    inside.mkdir(parents=True)
    (inside / "escape").symlink_to(outside)  # a link inside a run folder: removed, not followed
    assert client.call("remove", run_id="linked")["removed"] is True
    assert client.call("remove", run_id="mixed")["removed"] is True
    assert not (tfcc_home / "runs" / "linked").exists() and not (tfcc_home / "runs" / "mixed").exists()
    assert (outside / "worker-0" / "data").read_text() == "keep me"


def test_measure_leaves_its_ask_for_the_trainer(clients, stop_all, tfcc_home):
    """A breakdown's ask (docs/why-slow.md), in the task's folder for its trainer; refused for a task that does not
    run and for a bad ask."""
    client = clients()
    started = start_fake(client, stop_all, first=10, second=10)
    folder = Path(started["run_dir"])
    newest = 10
    client.call("measure", run_id="r1", task="worker-0", ask="why-1", at_step=newest + 50)
    ask = json.loads((folder / "measure.json").read_text())
    assert (ask["ask"], ask["at_step"]) == ("why-1", newest + 50)
    for bad in ({"ask": "", "at_step": 5}, {"ask": "why-2", "at_step": -1}, {"ask": "why-2", "at_step": True},
                {"ask": "x\n", "at_step": 5}, {"ask": "why-2"}):
        with pytest.raises(AgentRequestError) as refused:
            client.call("measure", run_id="r1", task="worker-0", **bad)
        assert refused.value.code == "bad-argument"
    (folder / "release").touch()
    assert wait_until(lambda: client.call("status", run_id="r1", task="worker-0")["phase"] == "finished", 30)
    with pytest.raises(AgentRequestError, match="task worker-0 of run r1 is not running here: nothing to measure"):
        client.call("measure", run_id="r1", task="worker-0", ask="why-3", at_step=10)
