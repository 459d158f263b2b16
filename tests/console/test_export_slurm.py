"""``tfcc export slurm`` on a real Slurm cluster (tests.helpers.slurmcluster): the batch script, submitted
with ``sbatch`` from the login host, trains digits on two nodes (MultiWorkerMirrored and parameter servers),
starts every task again when one is killed, and stops cleanly at the time limit's warning."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

from console import export
from tests.helpers.cli import tfcc
from tests.helpers.waiting import bound, wait_for
from tests.trainer.conftest import THREADS
from trainer.metrics import read_records

ROOT = Path(__file__).resolve().parents[2]
JOB_TIMEOUT = 400  # seconds a job may take (a quiet machine needs about a minute)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(JOB_TIMEOUT * 2)]

MWMS_TWO_NODES = """
[training]
workload = "digits"
epochs = {epochs}
per_replica_batch = 16
max_restarts = {restarts}
backup_seconds = 2

[[hosts]]
name = "a"
address = "10.0.0.1"

[[hosts]]
name = "b"
address = "10.0.0.2"

[[tasks]]
host = "a"

[[tasks]]
host = "b"
"""

PS_TWO_NODES = """
[training]
workload = "digits"
epochs = 1
per_replica_batch = 16
strategy = "parameter_server"

[[hosts]]
name = "a"
address = "10.0.0.1"

[[hosts]]
name = "b"
address = "10.0.0.2"

[[tasks]]
host = "a"
role = "chief"

[[tasks]]
host = "a"
role = "ps"

[[tasks]]
host = "b"
"""


def exported(tmp_path: Path, capsys, text: str, *options: str) -> Path:
    """The cluster ``text`` exported as a Slurm job into a folder the nodes share (this machine's)."""
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    out = tmp_path / "job"
    code, _, err = tfcc(["export", "slurm", str(path), "-o", str(out), "--cpus-per-task", "1", *options], capsys)
    assert code == 0, err
    return out


def submit(slurm, folder: Path, *options: str) -> str:
    """``sbatch`` on the login host, from the job's folder, as a person submits it; the job's id."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFCC_", "TF_CONFIG", "SLURM_"))}
    env.update(THREADS, PYTHON=sys.executable, TFCC_ROOT=str(ROOT))
    env.pop("TF_USE_LEGACY_KERAS", None)  # the script sets it
    done = slurm.command("sh", "-c", 'cd "$0" && exec sbatch --parsable "$@"', str(folder),
                         *options, "tfcc.sbatch", host=slurm.login, check=False, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job_info(slurm, job_id: str) -> dict:
    out = slurm.command("scontrol", "show", "job", "-o", job_id, check=False).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))




def wait_for_end(slurm, job_id: str, folder: Path) -> dict:
    """The job's last state once it left the queue (RUNNING and PENDING are not an end)."""
    ended = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
    wait_for(lambda: job_info(slurm, job_id).get("JobState") in ended, JOB_TIMEOUT,
             lambda: f"job {job_id} did not end: {job_info(slurm, job_id)}\n{output(folder, job_id)}")
    return job_info(slurm, job_id)


def output(folder: Path, job_id: str) -> str:
    text = (folder / f"tfcc-{job_id}.out").read_text(errors="replace") if (folder / f"tfcc-{job_id}.out").exists() \
        else "(no output file)"
    runs = folder / "runs" / job_id
    for log in sorted(runs.glob("*/stderr.log")) if runs.exists() else []:
        text += f"\n--- {log.parent.name}:\n" + log.read_text(errors="replace")[-1500:]
    return text


def events(folder: Path) -> list[str]:
    return [r["event"] for r in read_records(folder / "metrics.jsonl") if r["type"] == "event"]


@pytest.fixture
def slurm(slurm_cluster, tmp_path, monkeypatch):
    """The module's Slurm cluster, its queue emptied after each test (a failed test's job ends with it)."""
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    yield slurm_cluster
    slurm_cluster.cancel_all()
    slurm_cluster.wait_for_no_jobs()


def backed_up(folder: Path) -> bool:
    return (folder / "metrics.jsonl").exists() and "backed_up" in events(folder)


def task_pid(runs: Path, task: str) -> int | None:
    """The pid of the trainer of ``task`` (its run folder in its environment), None until it runs."""
    want = f"TFCC_RUN_DIR={runs / task}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if want in environ and b"-m" in argv and b"trainer" in argv:
            return int(entry.name)
    return None


def test_the_exported_job_trains_digits_on_two_nodes_under_multi_worker_mirrored(slurm, tmp_path, capsys):
    """``sbatch tfcc.sbatch``: Slurm places one worker on each node; each builds its TF_CONFIG from the step's
    variables (the nodes' names, in Slurm's order, on the ports from ``--port-base``), they train together to
    the end and the job completes."""
    folder = exported(tmp_path, capsys, MWMS_TWO_NODES.format(epochs=2, restarts=0), "--port-base", "9100")
    job_id = submit(slurm, folder)
    info = wait_for_end(slurm, job_id, folder)
    assert info["JobState"] == "COMPLETED", output(folder, job_id)
    assert info["NodeList"] == slurm.node_list
    out = (folder / f"tfcc-{job_id}.out").read_text()
    assert "tfcc: attempt 1: 2 tasks" in out and "tfcc: every task finished" in out
    runs = folder / "runs" / job_id
    for index, task in enumerate(("worker-0", "worker-1")):
        records = read_records(runs / task / "metrics.jsonl")
        launched = next(r for r in records if r.get("event") == "launched")
        assert launched["cluster"] == {"worker": [f"{node}:9100" for node in slurm.nodes]}
        started = next(r for r in records if r.get("event") == "started")
        assert started["num_workers"] == 2 and started["epochs"] == 2
        assert len([r for r in records if r["type"] == "step"]) == 2 * started["steps_per_epoch"]
        assert records[-1]["event"] == "finished" and records[-1]["task_index"] == index
        assert (runs / task / "exit-code").read_text().strip() == "0"


def test_the_exported_parameter_server_job_trains_and_ends_its_servers(slurm, tmp_path, capsys):
    """Chief, ps and worker as one job over two nodes: the chief trains to the end, then the servers end
    cleanly and the job completes."""
    folder = exported(tmp_path, capsys, PS_TWO_NODES)
    job_id = submit(slurm, folder)
    info = wait_for_end(slurm, job_id, folder)
    assert info["JobState"] == "COMPLETED", output(folder, job_id)
    runs = folder / "runs" / job_id
    assert events(runs / "chief-0")[-1] == "finished"
    chief_end = (runs / "chief-0" / "exit-code").stat().st_mtime
    for server in ("ps-0", "worker-0"):
        assert "serving" in events(runs / server), output(folder, job_id)
        # ended by the chief's wrapper (SIGTERM; TensorFlow may catch it in a worker: killed after the grace),
        # well before srun's --wait would have killed it
        ended = (runs / server / "exit-code")
        assert ended.read_text().strip() in ("0", str(128 + signal.SIGKILL)), output(folder, job_id)
        assert ended.stat().st_mtime - chief_end < export.STOP_GRACE + bound(20) < export.SLURM_SERVER_WAIT
    launched = next(r for r in read_records(runs / "chief-0" / "metrics.jsonl") if r.get("event") == "launched")
    # ranks in name order: chief 0 and ps 1 fill the first node (2 tasks a node), the worker is on the second
    first, second = slurm.nodes
    assert launched["cluster"] == {"chief": [f"{first}:8888"], "ps": [f"{first}:8889"], "worker": [f"{second}:8888"]}


def test_a_task_killed_mid_run_starts_every_task_again_from_its_backup(slurm, tmp_path, capsys):
    """worker-1 SIGKILLed while it trains: srun ends the step (--kill-on-bad-exit), the script starts the
    tasks again (max_restarts 1), they go on from their last backups and the job completes."""
    folder = exported(tmp_path, capsys, MWMS_TWO_NODES.format(epochs=6, restarts=1))  # killed in its first 2
    job_id = submit(slurm, folder)
    runs = folder / "runs" / job_id

    # Killed once every task has a backup (an order of events: on a loaded machine worker-0 wrote its first one
    # after worker-1 had, and the next attempt refused to go on from backups only one task had).
    wait_for(lambda: all(backed_up(runs / task) for task in ("worker-0", "worker-1"))
             and task_pid(runs, "worker-1") is not None, JOB_TIMEOUT,
             lambda: f"the tasks did not both back up\n{output(folder, job_id)}")
    os.kill(task_pid(runs, "worker-1"), signal.SIGKILL)
    info = wait_for_end(slurm, job_id, folder)
    out = output(folder, job_id)
    assert info["JobState"] == "COMPLETED", out
    assert "tfcc: attempt 1 failed" in out and "tfcc: attempt 2: 2 tasks" in out and "every task finished" in out
    for task in ("worker-0", "worker-1"):
        records = read_records(runs / task / "metrics.jsonl")
        assert records[-1]["event"] == "finished"
        resumed = [r for r in records if r.get("event") == "resumed"]
        assert resumed and resumed[-1]["step"] > 0, [r for r in records if r["type"] == "event"]


def seconds_run(slurm, job_id: str) -> int:
    """How long the job has run (Slurm's RunTime, [days-]hours:minutes:seconds)."""
    days, _, clock = job_info(slurm, job_id)["RunTime"].rpartition("-")
    h, m, sec = (int(x) for x in clock.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + sec


def test_the_time_limits_warning_stops_the_tasks_cleanly(slurm, tmp_path, capsys):
    """Slurm's warning before the time limit (--signal=B:TERM@...): the script stops the tasks with SIGTERM, no
    new attempt starts, and it says how to go on; the tasks end on their own before Slurm's kill.

    The limit is brought near only once both tasks have backed up (an order of events, not of clocks: Slurm may
    warn up to a minute early, and a loaded machine takes long to start TensorFlow): then the job's time limit is
    cut to a minute or two from now, which is inside the warning's 90 s, and slurmctld warns at its next check
    (every 30 s), leaving 45 s or more before its kill."""
    folder = exported(tmp_path, capsys, MWMS_TWO_NODES.format(epochs=500, restarts=3), "--time", "60")
    job_id = submit(slurm, folder, "--signal=B:TERM@90")
    runs = folder / "runs" / job_id
    wait_for(lambda: all(backed_up(runs / task) for task in ("worker-0", "worker-1")), JOB_TIMEOUT,
             lambda: f"the tasks did not both back up\n{output(folder, job_id)}")
    minutes = -(-(seconds_run(slurm, job_id) + 75) // 60)  # 75 to 135 s left
    slurm.command("scontrol", "update", f"JobId={job_id}", f"TimeLimit={minutes}")
    info = wait_for_end(slurm, job_id, folder)
    out = output(folder, job_id)
    assert info["JobState"] != "TIMEOUT", out   # ended before the limit, by the script
    assert "tfcc: the time limit is near: stopping the tasks" in out
    assert f"stopped at the time limit; go on with TFCC_RUNS={runs}" in out
    assert "attempt 2" not in out
    for task in ("worker-0", "worker-1"):
        # stopped (TensorFlow may catch SIGTERM: then killed after the grace), its end recorded
        assert (runs / task / "exit-code").read_text().strip() in (str(128 + signal.SIGTERM), str(128 + signal.SIGKILL))
