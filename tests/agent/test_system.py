"""The agent's ``system`` op: a host's CPU, memory and GPUs and its tasks' processes, streamed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent import protocol, runs, system
from console.remote.channel import AgentClient, AgentRequestError
from console.remote.local import local_agent
from tests.helpers.waiting import bound, wait_until

DATA = Path(__file__).parent / "data"
MIB = 1 << 20

# A task whose own process stays small and idle: the work is its child's (80 MiB, a busy loop),
# which a stop's SIGTERM to the process group ends too.
PARENT = """import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import os\\nheld = b'x' * (80 << 20)\\n"
                          "while not os.path.exists('release'): pass"])
child.wait()
"""


@pytest.fixture
def agent_on_path(tmp_path, tfcc_home):
    """``agent_on_path(folder)``: a local agent whose PATH is ``folder`` then the system's own folders."""
    opened = []

    def open_client(folder: Path | None = None) -> AgentClient:
        folder = folder or tmp_path / "empty-bin"
        folder.mkdir(exist_ok=True)
        env = dict(os.environ, PATH=f"{folder}{os.pathsep}{os.defpath}")
        client = AgentClient(local_agent(env=env))
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        client.close()
    for name in runs.run_tasks("r1"):
        runs.stop("r1", name, grace=0.5)


class Records:
    """What a system stream delivers; waits on a count with a timeout."""

    def __init__(self):
        self.messages: list[dict] = []
        self.cond = threading.Condition()

    def __call__(self, message):
        with self.cond:
            self.messages.append(message)
            self.cond.notify_all()

    @property
    def records(self) -> list[dict]:
        with self.cond:
            return [m for m in self.messages if m.get("type") == "system"]

    def wait_for(self, count: int, timeout: float = 30) -> list[dict]:
        with self.cond:
            assert self.cond.wait_for(lambda: sum(m.get("type") == "system" for m in self.messages) >= count,
                                      bound(timeout)), f"only {len(self.records)} of {count} system records"
        return self.records

    def wait_until(self, seen, timeout: float = 60) -> list[dict]:
        """The records until one for which ``seen(record)`` is true."""
        with self.cond:
            assert self.cond.wait_for(lambda: any(seen(r) for r in self.records), bound(timeout)), self.records[-3:]
        records = self.records
        return records[:next(i for i, r in enumerate(records) if seen(r)) + 1]


def fake_nvidia_smi(folder: Path, output: str, code: int = 0) -> Path:
    """An ``nvidia-smi`` that checks it was asked the probe's query, counts its calls and prints ``output``."""
    folder.mkdir(exist_ok=True)
    (folder / "output").write_text(output)
    script = folder / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
echo called >> "{folder}/calls"
[ "$1" = "--query-gpu=index,name,uuid,memory.total,memory.used,utilization.gpu,driver_version" ] || exit 64
[ "$2" = "--format=csv,noheader,nounits" ] || exit 64
cat "{folder}/output"
exit {code}
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def calls(folder: Path) -> int:
    try:
        return len((folder / "calls").read_text().splitlines())
    except FileNotFoundError:
        return 0


def test_a_running_task_s_host_and_processes_are_sampled_until_it_ends(agent_on_path, tfcc_home):
    client = agent_on_path()  # no nvidia-smi on its PATH
    script = tfcc_home.parent / "parent.py"
    script.write_text(PARENT)
    started = client.call("start", run_id="r1", task="worker-0", argv=[sys.executable, str(script)],
                          env={"CUDA_VISIBLE_DEVICES": "1"})
    got = Records()
    handle = client.system("r1", got, interval=0.3)
    # until the trainer's busy child holds its 80 MiB (its start is slow on a busy machine)
    records = got.wait_until(lambda r: (r["tasks"].get("worker-0", {}).get("rss_bytes") or 0) >= 80 * MIB)
    assert got.messages[0] == {"id": got.messages[0]["id"], "ok": True, "type": "sampling", "interval": 0.3,
                               "tasks": ["worker-0"]}
    trainer = json.loads((Path(started["run_dir"]) / "child.json").read_text())["pid"]
    for r in records:
        assert r["cpus"] == os.cpu_count() and 0 <= r["cpu_percent"] <= 100
        assert 0 < r["memory_used_bytes"] < r["memory_total_bytes"]
        assert 0 < r["memory_available_bytes"] < r["memory_total_bytes"] and r["swap_used_bytes"] >= 0
        assert r["gpus"] == [] and "gpu_note" not in r  # no nvidia-smi: no GPUs, and no error
        assert list(r["tasks"]) == ["worker-0"]
    task = records[-1]["tasks"]["worker-0"]
    assert task["pid"] == trainer and task["gpus"] == [1]
    # The busy 80 MiB process is the trainer's child: the task is its whole process group (the trainer alone,
    # which waits, holds a few MiB and no CPU; the child has at least a share of a busy machine).
    assert task["rss_bytes"] >= 80 * MIB
    assert task["cpu_percent"] > 5
    assert records[-1]["cpu_percent"] > 100 * 0.05 / os.cpu_count()
    (Path(started["run_dir"]) / "release").touch()
    assert handle.done.wait(bound(15)) and handle.end == {"id": handle.end["id"], "type": "end"}
    assert runs.status("r1", "worker-0")["phase"] == "finished"


def test_gpus_come_from_nvidia_smi_one_query_a_sample(agent_on_path, tfcc_home, tmp_path):
    smi = fake_nvidia_smi(tmp_path / "bin", (DATA / "nvidia-smi" / "several_gpus.csv").read_text())
    client = agent_on_path(smi)
    client.call("start", run_id="r1", task="worker-0", argv=[sys.executable, "-c", "import signal; signal.pause()"])
    got = Records()
    client.system("r1", got, interval=0.2)
    records = got.wait_for(4)
    assert records[0]["gpus"] == [
        {"index": 0, "name": "NVIDIA A100-SXM4-40GB", "utilization_percent": 35,
         "memory_used_bytes": 1024 * MIB, "memory_total_bytes": 40960 * MIB},
        {"index": 1, "name": "NVIDIA A100-SXM4-40GB", "utilization_percent": 100,
         "memory_used_bytes": 39012 * MIB, "memory_total_bytes": 40960 * MIB},
        {"index": 2, "name": "Tesla T4", "utilization_percent": 0,
         "memory_used_bytes": 0, "memory_total_bytes": 15360 * MIB}]
    assert records[0]["tasks"]["worker-0"]["gpus"] is None  # the console set no CUDA_VISIBLE_DEVICES
    done = len(got.records)
    assert done <= calls(smi) <= done + 1  # one query a sample (the one under way may have begun)


def test_a_real_h100_under_load_is_sampled(agent_on_path, tfcc_home, tmp_path):
    """The system lane's GPU as a real H100 under a 20 GB bf16 load printed it (data/nvidia-smi/h100)."""
    smi = fake_nvidia_smi(tmp_path / "bin", (DATA / "nvidia-smi" / "h100" / "one_gpu_load.csv").read_text())
    client = agent_on_path(smi)
    client.call("start", run_id="r1", task="worker-0", argv=[sys.executable, "-c", "import signal; signal.pause()"])
    got = Records()
    client.system("r1", got, interval=0.2)
    (record,) = got.wait_for(1)[:1]
    assert record["gpus"] == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "utilization_percent": 93,
                               "memory_used_bytes": 20085 * MIB, "memory_total_bytes": 81559 * MIB}]


def test_missing_gpu_fields_are_null(agent_on_path, tfcc_home, tmp_path):
    smi = fake_nvidia_smi(tmp_path / "bin", (DATA / "nvidia-smi" / "na_fields.csv").read_text())
    client = agent_on_path(smi)
    client.call("start", run_id="r1", task="worker-0", argv=[sys.executable, "-c", "import signal; signal.pause()"])
    got = Records()
    client.system("r1", got, interval=0.2)
    (record,) = got.wait_for(1)[:1]
    assert [(g["index"], g["utilization_percent"], g["memory_used_bytes"]) for g in record["gpus"]] == [
        (0, None, 731 * MIB), (1, None, None)]


def test_a_failing_nvidia_smi_is_said_and_not_run_every_second(agent_on_path, tfcc_home, tmp_path):
    smi = fake_nvidia_smi(tmp_path / "bin", (DATA / "nvidia-smi" / "failure.txt").read_text(), code=9)
    client = agent_on_path(smi)
    client.call("start", run_id="r1", task="worker-0", argv=[sys.executable, "-c", "import signal; signal.pause()"])
    got = Records()
    client.system("r1", got, interval=0.2)
    records = got.wait_for(4)
    assert all(r["gpus"] == [] for r in records)
    assert records[0]["gpu_note"] == ("nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate "
                                      "with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
                                      "and running.")
    assert calls(smi) == 1  # tried again only after system.SMI_RETRY seconds


def test_refusals_say_what_is_wrong(agent_on_path, tfcc_home):
    client = agent_on_path()
    with pytest.raises(AgentRequestError, match="no task of run nope on this host") as err:
        client.call("system", run_id="nope")
    assert err.value.code == protocol.NO_SUCH_TASK
    with pytest.raises(AgentRequestError, match="run id '../x' is not a valid name"):
        client.call("system", run_id="../x")
    client.call("start", run_id="r1", task="worker-0", argv=["true"])
    with pytest.raises(AgentRequestError, match="system: interval 0 must be a number of seconds from 0.1 to 3600"):
        client.call("system", run_id="r1", interval=0)


def test_a_run_that_has_ended_ends_its_stream_at_once(agent_on_path, tfcc_home):
    client = agent_on_path()
    client.call("start", run_id="r1", task="worker-0", argv=["true"])
    assert wait_until(lambda: runs.status("r1", "worker-0")["phase"] == "finished", 10)
    got = Records()
    handle = client.system("r1", got, interval=60)  # ended at once: not after its first minute's sample
    assert handle.done.wait(bound(20)) and handle.end is not None and got.records == []


def test_without_proc_the_fields_are_null(tmp_path, monkeypatch):
    """Another system (no /proc): the record is there, with nulls, not an error."""
    monkeypatch.setattr(system, "PROC", str(tmp_path / "no-proc"))
    sampler = system.Sampler(nvidia_smi=str(tmp_path / "no-nvidia-smi"))
    sampler.baseline({"worker-0": {"pgid": os.getpid(), "pid": os.getpid(), "gpus": None}})
    record = sampler.sample({"worker-0": {"pgid": os.getpid(), "pid": os.getpid(), "gpus": None}})
    assert record["cpu_percent"] is None and record["gpus"] == []
    assert [record[k] for k in ("memory_total_bytes", "memory_used_bytes", "memory_available_bytes",
                                "swap_used_bytes")] == [None] * 4
    assert record["tasks"] == {"worker-0": {"pid": os.getpid(), "cpu_percent": None, "rss_bytes": None,
                                            "gpus": None}}


def test_visible_gpus():
    assert system.visible_gpus(None) is None and system.visible_gpus("") == []
    assert system.visible_gpus("0,2") == [0, 2] and system.visible_gpus("GPU-1a2b, 3") == ["GPU-1a2b", 3]


def test_a_process_a_task_starts_later_is_counted_within_the_rescan(tmp_path, monkeypatch):
    """Between looks at every process the sampler reads only a task's known ones; one the task starts
    later is in its figures after the next full look (``RESCAN`` s; shortened here)."""

    monkeypatch.setattr(system, "RESCAN", 0.3)
    go = tmp_path / "go"
    leader = subprocess.Popen([sys.executable, "-c", f"""import os, subprocess, sys, time
while not os.path.exists({str(go)!r}): time.sleep(0.01)
subprocess.Popen([sys.executable, "-c", "import time; held = b'x' * (60 << 20); time.sleep(60)"]).wait()
"""], start_new_session=True)
    try:
        task = {"worker-0": {"pgid": leader.pid, "pid": leader.pid, "gpus": None}}
        sampler = system.Sampler(nvidia_smi=str(tmp_path / "none"))
        sampler.baseline(task)
        # Until the task's process is RESCAN s old every sample looks at every process; then only at its own.
        assert wait_until(lambda: all(time.monotonic() - first >= system.RESCAN for first in sampler._seen.values()), 5)
        small = sampler.sample(task)["tasks"]["worker-0"]["rss_bytes"]
        assert small < 60 << 20
        go.touch()
        assert wait_until(lambda: sampler.sample(task)["tasks"]["worker-0"]["rss_bytes"] > small + (55 << 20), 10)
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()


def test_a_cgroup_limit_and_its_throttling_are_read(tmp_path, monkeypatch):
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("4:memory:/a\n3:cpu,cpuacct:/jobs/task-1\n0::/\n")
    folder = cgroups / "cpu,cpuacct" / "jobs" / "task-1"
    folder.mkdir(parents=True)
    (folder / "cpu.cfs_quota_us").write_text("30000\n")
    (folder / "cpu.cfs_period_us").write_text("100000\n")
    (folder / "cpu.stat").write_text("nr_periods 200\nnr_throttled 150\nthrottled_time 123\n")
    for above in (cgroups / "cpu,cpuacct" / "jobs", cgroups / "cpu,cpuacct"):
        (above / "cpu.cfs_quota_us").write_text("-1\n")
        (above / "cpu.cfs_period_us").write_text("100000\n")
    monkeypatch.setattr(system, "PROC", str(proc))
    monkeypatch.setattr(system, "CGROUP_ROOT", str(cgroups))
    assert system.cpu_limit() == {"limit": 0.3, "periods": 200, "throttled": 150, "where": str(folder)}
    (proc / "self" / "cgroup").write_text("0::/box\n")  # v2
    (cgroups / "box").mkdir()
    (cgroups / "box" / "cpu.max").write_text("150000 100000\n")
    (cgroups / "box" / "cpu.stat").write_text("usage_usec 5\nnr_periods 10\nnr_throttled 1\n")
    assert system.cpu_limit()["limit"] == 1.5
    (cgroups / "box" / "cpu.max").write_text("max 100000\n")
    assert system.cpu_limit() == {}


def test_the_busiest_other_processes_are_named_but_not_the_runs_own():
    busy = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"
    # Each its own process group, as a task's is (this test's own group is left out: the trainer's own).
    ours, theirs = (subprocess.Popen([sys.executable, "-c", busy], env={**os.environ, "TFCC_RUN_ID": run},
                                     start_new_session=True) for run in ("run-a", "run-b"))
    try:
        before, start = system.processes(), time.monotonic()
        seen: dict = {}

        def used_some() -> bool:  # each has used a measurable share of a core (a busy loop: about one each)
            seen.update(system.processes())
            return all(seen.get(p.pid, (0,))[0] - before.get(p.pid, (0,))[0] >= 50 for p in (ours, theirs))

        assert wait_until(used_some, 20)
        # every process over a tenth of a core: on a busy machine others outrun these loops
        busiest = system.busiest_others(before, seen, time.monotonic() - start, "run-a", least=0.1, most=10_000)
    finally:
        ours.kill()
        theirs.kill()
    pids = [b["pid"] for b in busiest]
    assert theirs.pid in pids and ours.pid not in pids, busiest
    assert next(b for b in busiest if b["pid"] == theirs.pid)["name"].startswith("python")
