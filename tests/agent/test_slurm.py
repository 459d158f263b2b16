"""The agent on a Slurm login host (agent/slurm.py), on a real Slurm cluster (tests.helpers.slurmcluster): a run
submitted as one job trains on two nodes, its tasks followed from the login host's files; a pending job says
Slurm's reason; a cancel leaves no process on any node."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from agent import protocol
from tests.agent.test_workdir import put_blob
from tests.trainer.conftest import THREADS
from tests.helpers.waiting import wait_for
from trainer.metrics import read_records

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
DIGITS = ["--epochs", "2", "--per-replica-batch", "16", "--workload", "digits", "--backup-seconds", "2"]


class LoginAgent:
    """The agent as the console reaches it on the login host: one request a process, its answer."""

    def __init__(self, slurm, home: Path):
        self.slurm, self.home = slurm, home

    def call(self, op: str, **req) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TFCC_", "SLURM_", "TF_CONFIG"))}
        env.update(THREADS, TFCC_HOME=str(self.home), PYTHONPATH=str(ROOT))
        env.pop("TF_USE_LEGACY_KERAS", None)
        done = self.slurm.command(sys.executable, "-m", "agent", host=self.slurm.login, env=env, check=False,
                                  input=json.dumps({"id": 1, "op": op, **req}) + "\n")
        answer = json.loads(done.stdout.splitlines()[0]) if done.stdout.strip() else {"error": done.stderr}
        return answer

    def ok(self, op: str, **req) -> dict:
        answer = self.call(op, **req)
        assert answer.get("ok"), answer
        return answer




def trainer_tasks(names: list[str]) -> list[dict]:
    return [{"task": name, "argv": [sys.executable, "-m", "trainer", "--run-dir", "{run_dir}", *DIGITS],
             "env": {}} for name in names]


def port_base(job_id: str) -> int:
    """The first port of a job's tasks on each node, as its batch script picks it."""
    return 8888 + int(job_id) % 500 * 64


def run_processes(run: Path) -> list[int]:
    """Processes of this machine (every node's: the namespaces share it) started for ``run``'s tasks."""
    mark = f"{protocol.RUN_DIR_VARIABLE}={run}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and any(v.startswith(mark) for v in (entry / "environ").read_bytes().split(b"\0")):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture
def agent(slurm_cluster, tmp_path):
    agent = LoginAgent(slurm_cluster, tmp_path / "login-home")
    yield agent
    slurm_cluster.cancel_all()
    slurm_cluster.wait_for_no_jobs()


def test_a_run_submitted_as_one_job_trains_on_two_nodes_followed_from_the_login_host(agent, slurm_cluster, tmp_path):
    submitted = agent.ok(protocol.SUBMIT, run_id="r1", tasks=trainer_tasks(["worker-0", "worker-1"]),
                         jobs="worker:2", port_base=8888, sbatch=["--nodes=2", "--ntasks-per-node=1", "--time=10"],
                         python=sys.executable, cpus_per_task=1)
    assert submitted["job_id"]
    run = tmp_path / "login-home" / "runs" / "r1"
    seen_running = set()

    def ended() -> bool:
        phases = {}
        for task in ("worker-0", "worker-1"):
            phases[task] = agent.ok(protocol.STATUS, run_id="r1", task=task)["phase"]
            if phases[task] == protocol.RUNNING:
                seen_running.add(task)
        return all(p in protocol.ENDED for p in phases.values())
    wait_for(ended, 400, lambda: (run / f"slurm-{submitted['job_id']}.out").read_text())
    assert seen_running == {"worker-0", "worker-1"}  # the login host saw each running on its node (heartbeat)
    nodes = set()
    for index, task in enumerate(("worker-0", "worker-1")):
        status = agent.ok(protocol.STATUS, run_id="r1", task=task)
        assert status["phase"] == protocol.FINISHED, (run / task / "stderr.log").read_text()[-2000:]
        state = json.loads((run / task / "state.json").read_text())
        nodes.add(state["slurm_node"])
        records = read_records(run / task / "metrics.jsonl")
        launched = next(r for r in records if r.get("event") == "launched")
        port = port_base(submitted["job_id"])  # each job its own ports (two jobs may share a node)
        assert launched["cluster"] == {"worker": [f"{node}:{port}" for node in slurm_cluster.nodes]}
        assert any(r["type"] == "step" for r in records) and records[-1]["event"] == "finished"
    assert nodes == set(slurm_cluster.nodes)
    job = agent.ok(protocol.JOB, run_id="r1")
    assert job["state"] == "COMPLETED" and job["nodes"] == slurm_cluster.node_list and job["script_ended"]


def test_a_pending_job_says_slurms_reason_and_a_cancel_ends_it(agent, slurm_cluster, tmp_path):
    blocker = slurm_cluster.command("sbatch", "--parsable", "--exclusive", "-N2", "--time=10", "--output=/dev/null", "--wrap",
                                    "sleep 600", host=slurm_cluster.login).stdout.strip()
    wait_for(lambda: any(j["id"] == blocker and j["state"] == "RUNNING" for j in slurm_cluster.jobs()), 60,
             lambda: str(slurm_cluster.jobs()))
    agent.ok(protocol.SUBMIT, run_id="r2", tasks=trainer_tasks(["worker-0", "worker-1"]), jobs="worker:2",
             port_base=8888, sbatch=["--nodes=2", "--ntasks-per-node=1", "--time=10"], python=sys.executable)
    wait_for(lambda: agent.ok(protocol.JOB, run_id="r2")["reason"] not in ("", "None"), 60,
             lambda: str(agent.ok(protocol.JOB, run_id="r2")))
    job = agent.ok(protocol.JOB, run_id="r2")
    assert job["state"] == "PENDING" and job["reason"] in ("Resources", "Priority"), job
    assert agent.ok(protocol.STATUS, run_id="r2", task="worker-0")["phase"] == protocol.PENDING
    agent.ok(protocol.CANCEL, run_id="r2", grace=2)
    status = agent.ok(protocol.STATUS, run_id="r2", task="worker-0")
    assert status["phase"] == protocol.FAILED and status["stopped"]
    assert agent.ok(protocol.JOB, run_id="r2")["state"] in ("CANCELLED", "GONE")


def test_a_refused_submit_takes_away_only_what_it_made(agent, tmp_path):
    """sbatch refuses a job (a partition that does not exist): the submit removed the whole run folder, with
    another console's tasks in it (their model, their backups). Now a fresh submit into a run id under which
    another console's tasks are is refused before anything is written, and a refused job takes away exactly what
    its submit made: every folder and file it found is byte-identical after."""
    from tests.disk import snapshot

    run = agent.home / protocol.RUNS_DIR / "shared-id"
    theirs = run / "worker-7"
    theirs.mkdir(parents=True)
    (theirs / "spec.json").write_text(json.dumps({"run_id": "shared-id", "task": "worker-7", "console": "another"}))
    (theirs / "model.keras").write_bytes(b"their model" * 1000)
    before = snapshot(run)
    answer = agent.call(protocol.SUBMIT, run_id="shared-id", tasks=trainer_tasks(["worker-0", "worker-1"]),
                        jobs="worker:2", port_base=8888, sbatch=["--time=10"], python=sys.executable, console="me")
    assert answer.get("code") == protocol.TASK_EXISTS and "another console started (worker-7)" in answer["error"]
    assert snapshot(run) == before
    (theirs / "spec.json").unlink()  # a folder that is no task of a console's: the submit goes as far as sbatch
    (run / "notes.txt").write_text("mine, not tfcc's\n")
    before = snapshot(run)
    answer = agent.call(protocol.SUBMIT, run_id="shared-id", tasks=trainer_tasks(["worker-0", "worker-1"]),
                        jobs="worker:2", port_base=8888, sbatch=["--partition=no-such-partition", "--time=10"],
                        python=sys.executable, console="me")
    assert answer.get("code") == protocol.SLURM and "sbatch refused the job" in answer["error"], answer
    assert snapshot(run) == before
    fresh = agent.home / protocol.RUNS_DIR / "fresh-id"
    answer = agent.call(protocol.SUBMIT, run_id="fresh-id", tasks=trainer_tasks(["worker-0"]), jobs="worker:1",
                        port_base=8888, sbatch=["--partition=no-such-partition"], python=sys.executable, console="me")
    assert answer.get("code") == protocol.SLURM and not fresh.exists(), "a run folder it made goes: the id stays free"


def test_a_cancel_of_a_running_job_leaves_no_process_on_any_node(agent, tmp_path):
    tasks = trainer_tasks(["worker-0", "worker-1"])
    for task in tasks:
        task["argv"] = [*task["argv"][:-len(DIGITS)], *DIGITS[:1], "500", *DIGITS[2:]]
    agent.ok(protocol.SUBMIT, run_id="r3", tasks=tasks, jobs="worker:2", port_base=8888,
             sbatch=["--nodes=2", "--ntasks-per-node=1", "--time=10"], python=sys.executable)
    run = tmp_path / "login-home" / "runs" / "r3"
    wait_for(lambda: all(agent.ok(protocol.STATUS, run_id="r3", task=t)["phase"] == protocol.RUNNING
                         for t in ("worker-0", "worker-1")) and len(run_processes(run)) >= 2, 300,
             lambda: str(agent.ok(protocol.JOB, run_id="r3")))
    agent.ok(protocol.CANCEL, run_id="r3", grace=5)
    wait_for(lambda: not run_processes(run), 60, lambda: f"still running: {run_processes(run)}")
    for task in ("worker-0", "worker-1"):
        status = agent.ok(protocol.STATUS, run_id="r3", task=task)
        assert status["phase"] in protocol.ENDED and status["stopped"], status


def test_a_resubmission_a_person_asked_for_runs_the_code_as_it_is_now(agent, tmp_path):
    """``refresh_work`` (a person's resume): each task's copy of the script's files is brought up to date, what the
    script wrote there stays; a resubmission without it (a restart) runs work/ as the task left it."""
    home = tmp_path / "login-home"
    script = 'open("out.txt", "a").write("{}\\n")\n'
    tasks = [{"task": "worker-0", "argv": [sys.executable, "main.py"], "env": {}}]
    job = dict(run_id="r4", tasks=tasks, jobs="worker:1", port_base=8888, python=sys.executable,
               sbatch=["--nodes=1", "--ntasks-per-node=1", "--time=5"])
    out = home / "runs" / "r4" / "worker-0" / "work" / "out.txt"

    def submitted(code: str, **more) -> dict:
        reply = agent.ok(protocol.SUBMIT, workdir=[["main.py", put_blob(home, code.encode()), False]], **job, **more)
        wait_for(lambda: agent.ok(protocol.JOB, run_id="r4")["script_ended"], 120,
                 lambda: str(agent.ok(protocol.JOB, run_id="r4")))
        assert agent.ok(protocol.STATUS, run_id="r4", task="worker-0")["phase"] == protocol.FINISHED
        return reply

    first = submitted(script.format("old"))
    assert "work_refreshed" not in first and out.read_text() == "old\n"
    restarted = submitted(script.format("new"), fresh=False)
    assert "work_refreshed" not in restarted and out.read_text() == "old\nold\n"
    resumed = submitted(script.format("new"), fresh=False, refresh_work=True)
    assert resumed["work_refreshed"] == {"worker-0": {"changed": ["main.py"], "count": 1, "kept": []}}
    assert out.read_text() == "old\nold\nnew\n"


def test_a_submit_where_sbatch_cannot_run_leaves_nothing_it_made(tmp_path, monkeypatch):
    """No sbatch on the host (not Slurm's login host): nothing ran, so what the submit made goes and the run id
    stays free (a second try is not refused as a run that has tasks)."""
    from agent import slurm
    from agent.runs import AgentError

    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for _ in range(2):
        with pytest.raises(AgentError, match="cannot run sbatch here"):
            slurm.submit({"run_id": "nosbatch", "tasks": trainer_tasks(["worker-0"]), "jobs": "worker:1",
                          "port_base": 8888, "sbatch": [], "python": sys.executable, "console": "me"})
        assert not (tmp_path / "home" / protocol.RUNS_DIR / "nosbatch").exists()
