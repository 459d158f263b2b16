"""A run's tasks as one Slurm job, submitted from this (login) host; each task runs on its node (stdlib only).

``submit`` writes each task's run folder as ``runs.start`` does (``spec.json``), without starting it,
then a batch script (``<run>/job.sbatch``) whose ``srun`` starts ``python -m agent.slurm task <run>``
once per rank, and submits it (``sbatch --parsable``); ``<run>/slurm.json`` records the job. Every node
shares this host's file system (as a Slurm cluster's nodes share the home folders): the agent here
follows the tasks' files as it follows its own, from byte offsets.

On a node, ``task``: its rank names its task (``slurm.json``'s ``ranks``), its TF_CONFIG comes from
Slurm's variables (srun starts it under the trainer's Slurm mode, ``python -m trainer.slurm``), its
``state.json`` names the node, and it runs as ``agent.supervise`` runs a task, in the foreground (srun
holds it). It touches ``heartbeat`` every ``HEARTBEAT`` s: the agent on the login host cannot see a
node's processes, so a task whose heartbeat stopped without an end is lost (``runs.status``).

The batch script starts every task again after a failure, up to the run's ``max_restarts`` (a group
restart within the allocation); a task that refused its input (exit code 2) and a stop are not restarted.
Under parameter-server training the chief's end ends the servers (their stop is their end).

``job`` says the job's state and Slurm's reason (``squeue``; ``scontrol`` once it left the queue);
``cancel`` stops it (SIGTERM to its steps, then ``scancel`` after the grace).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from agent import protocol, supervise
from agent.runs import (DONE_MARKER, ENDED_FILE, STOP_MARKER, AgentError, _check_name, home, proc_start_time,
                        read_json, task_dir, write_json)

JOB_FILE = protocol.SLURM_JOB_FILE
SCRIPT = "job.sbatch"
GRACE = 10.0                    # a task SIGTERMed (a stop, the chief's end) is killed this long after
COMMAND_TIMEOUT = 30.0
_OPTION = re.compile(r"^--[a-z][a-z-]{1,40}=[A-Za-z0-9._:,@%/+-]{1,200}$")  # what an sbatch option may say
_JOB_ID = re.compile(r"^\d{1,12}(_\d{1,12})?$")


# --------------------------------------------------------------------------- submit (on the login host)


def submit(req: dict) -> dict:
    """Write the run's task folders and its batch script, and submit it; the job's id."""
    run_id = _check_name("run id", req.get("run_id"))
    tasks = req.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise AgentError("submit needs \"tasks\": one {task, argv, env} per rank", protocol.BAD_ARGUMENT)
    options = req.get("sbatch") or []
    if not isinstance(options, list) or not all(isinstance(o, str) and _OPTION.match(o) for o in options):
        raise AgentError(f"submit: \"sbatch\" must be options like --partition=gpu, not {options!r}",
                         protocol.BAD_ARGUMENT)
    jobs, port_base = req.get("jobs"), req.get("port_base", 8888)
    if not isinstance(jobs, str) or not re.match(r"^[a-z]+:\d+(,[a-z]+:\d+)*$", jobs) or \
            not isinstance(port_base, int) or not 1 <= port_base <= 65535:
        raise AgentError("submit needs \"jobs\" (like chief:1,worker:2) and a \"port_base\"", protocol.BAD_ARGUMENT)
    restarts = req.get("max_restarts", 0)
    cpus = req.get("cpus_per_task", 1)
    if not isinstance(restarts, int) or not 0 <= restarts <= 100 or not isinstance(cpus, int) or cpus < 1:
        raise AgentError("submit: max_restarts and cpus_per_task must be whole numbers", protocol.BAD_ARGUMENT)
    secrets = req.get("secret_env") or {}
    if not isinstance(secrets, dict) or not all(isinstance(k, str) and isinstance(v, str) and "\0" not in k + v
                                                for k, v in secrets.items()):
        raise AgentError("submit: \"secret_env\" must map names to strings", protocol.BAD_ARGUMENT)
    run = home() / protocol.RUNS_DIR / run_id
    names = []
    for entry in tasks:
        if not isinstance(entry, dict):
            raise AgentError("submit: each task is {task, argv, env}", protocol.BAD_ARGUMENT)
        name = _check_name("task", entry.get("task"))
        argv = entry.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise AgentError(f"submit: task {name} needs \"argv\", a list of strings", protocol.BAD_ARGUMENT)
        if (run / name / "spec.json").exists() and req.get("fresh", True):
            raise AgentError(f"run {run_id} already has a task {name} here; choose another run id",
                             protocol.TASK_EXISTS)
        names.append(name)
    python = req.get("python") or sys.executable
    dist = str(Path(__file__).resolve().parent.parent)
    for entry, name in zip(tasks, names):
        folder = task_dir(run_id, name)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in ("exit.json", "state.json", "heartbeat", STOP_MARKER, DONE_MARKER):
            (folder / stale).unlink(missing_ok=True)
        env = {str(k): str(v) for k, v in (entry.get("env") or {}).items()}
        env.update({protocol.RUN_DIR_VARIABLE: str(folder), protocol.RUN_ID_VARIABLE: run_id,
                    protocol.TASK_VARIABLE: name})
        before = read_json(folder / "spec.json") if (folder / "spec.json").exists() else None
        attempt = int(before.get("attempt") or 0) if isinstance(before, dict) else 0  # a resubmission counts on
        write_json(folder / "spec.json", {
            "run_id": run_id, "task": name, "created": time.time(), "attempt": attempt, "console": req.get("console"),
            "argv": [a.replace("{run_dir}", str(folder)) for a in entry["argv"]], "env": env, "cwd": str(folder),
            "python_path": req.get("python_path") or [], "secret_env": sorted(secrets)})
    (run / ENDED_FILE).unlink(missing_ok=True)
    parameter_server = jobs.startswith("chief:") and ",ps:" in jobs
    write_json(run / JOB_FILE, {"ranks": names, "jobs": jobs, "port_base": port_base, "job_id": None,
                                "submitted": time.time(), "parameter_server": parameter_server})
    script = _batch_script(run_id, run, options, python, dist, restarts, cpus, parameter_server, jobs, port_base)
    (run / SCRIPT).write_text(script)
    env = dict(os.environ)
    env.update(secrets)  # sbatch hands its environment to the job: the secrets reach the tasks, never a file
    try:
        done = subprocess.run(["sbatch", "--parsable", str(run / SCRIPT)], capture_output=True, text=True,
                              cwd=str(run), env=env, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AgentError(f"cannot run sbatch here ({exc}); is this Slurm's login host?", protocol.SLURM) from None
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:500]
        raise AgentError(f"sbatch refused the job: {said}", protocol.SLURM)
    job_id = done.stdout.strip().split(";")[0]
    if not _JOB_ID.match(job_id):
        raise AgentError(f"sbatch said {done.stdout.strip()[:200]!r}, not a job id", protocol.SLURM)
    record = read_json(run / JOB_FILE)
    record["job_id"] = job_id
    write_json(run / JOB_FILE, record)
    return {"run_id": run_id, "job_id": job_id, "script": str(run / SCRIPT)}


def _batch_script(run_id: str, run: Path, options: list, python: str, dist: str, restarts: int, cpus: int,
                  parameter_server: bool, jobs: str, port_base: int) -> str:
    q = shlex.quote
    lines = ["#!/bin/bash", f"#SBATCH --job-name=tfcc-{run_id}", f"#SBATCH --output={run}/slurm-%j.out",
             *(f"#SBATCH {option}" for option in options)]
    wait = " --wait=60" if parameter_server else ""  # servers still there a minute after the chief ended go
    return "\n".join(lines) + f"""
# tfcc run {run_id}: every task of the run, one per rank (agent/slurm.py). Written by tfcc's agent.
export PYTHONPATH={q(dist)}${{PYTHONPATH:+:$PYTHONPATH}}
export TFCC_HOME={q(str(home()))}
run={q(str(run))}
trap 'touch "$run/{ENDED_FILE}"' EXIT
attempt=0
while :; do
  attempt=$((attempt + 1))
  export TFCC_SLURM_ATTEMPT=$attempt
  echo "tfcc: attempt $attempt"
  # each rank: TF_CONFIG from Slurm's variables (the trainer's Slurm mode), then its task (agent/slurm.py)
  setsid srun --kill-on-bad-exit=1 --cpus-per-task={cpus}{wait} \\
    {q(python)} -m trainer.slurm --jobs {jobs} --port-base {port_base} -- -m agent.slurm task "$run" &
  srun_pid=$!
  while :; do
    wait "$srun_pid"
    code=$?
    kill -0 "$srun_pid" 2>/dev/null || break
  done
  [ "$code" -eq 0 ] && exit 0
  if [ -e "$run/chief-0/exit.json" ] && grep -q '"returncode": 0' "$run/chief-0/exit.json"; then
    exit 0  # parameter servers: the chief finished; the servers' end is theirs
  fi
  if ls "$run"/*/{STOP_MARKER} >/dev/null 2>&1; then
    echo "tfcc: stopped" >&2; exit "$code"
  fi
  if grep -ql '"returncode": 2[,}}]' "$run"/*/exit.json 2>/dev/null; then
    echo "tfcc: a task refused its input (exit code 2): not restarted" >&2; exit "$code"
  fi
  if [ "$attempt" -gt {restarts} ]; then
    echo "tfcc: attempt $attempt failed (exit code $code), no restarts left" >&2; exit "$code"
  fi
  echo "tfcc: attempt $attempt failed (exit code $code); restarting every task from its last backup" >&2
done
"""


# --------------------------------------------------------------------------- a task on its node


def task_main(run: Path) -> int:
    """Run this rank's task of the run in ``run`` (srun starts one per rank); its exit code."""
    record = read_json(run / JOB_FILE) or {}
    rank = int(os.environ["SLURM_PROCID"])
    name = record["ranks"][rank]
    folder = run / name
    tf_config = os.environ.get("TF_CONFIG") or ""  # the trainer's Slurm mode set it (the batch script's srun)
    if not tf_config:
        print("tfcc-slurm: no TF_CONFIG: start this under python -m trainer.slurm (see job.sbatch)", file=sys.stderr)
        return 2
    spec = read_json(folder / "spec.json")
    attempt = int(spec.get("attempt") or 0) + 1
    spec["attempt"] = attempt
    spec["env"]["TF_CONFIG"] = tf_config
    spec["env"][protocol.ATTEMPT_VARIABLE] = str(attempt)
    write_json(folder / "spec.json", spec)
    (folder / "tf_config.json").write_text(tf_config, encoding="utf-8")
    for stale in ("exit.json", STOP_MARKER, DONE_MARKER, protocol.MEASURE_FILE):
        (folder / stale).unlink(missing_ok=True)
    try:
        stderr_from = (folder / protocol.STDERR).stat().st_size
    except OSError:
        stderr_from = 0
    pid = os.getpid()
    write_json(folder / "state.json", {"pid": pid, "pgid": os.getpgid(0), "start_time": proc_start_time(pid),
                                       "started": time.time(), "stderr_from": stderr_from,
                                       "node": socket.gethostname(), "slurm_node": os.environ.get("SLURMD_NODENAME"),
                                       "job_id": os.environ.get("SLURM_JOB_ID"), "attempt": attempt})
    beating = threading.Event()
    threading.Thread(target=_heartbeat, args=(folder / "heartbeat", beating), daemon=True).start()
    try:
        supervise.main(["supervise", str(folder)], grace=GRACE)
    finally:
        beating.set()
    ended = read_json(folder / "exit.json") or {}
    code = ended.get("returncode", 1)
    if name == "chief-0" and code == 0 and record.get("parameter_server"):
        _end_servers(run, record)
    return code if isinstance(code, int) and 0 <= code < 256 else 1


def _heartbeat(path: Path, done: threading.Event) -> None:
    while True:
        try:
            path.write_text(repr(time.time()))
        except OSError:
            pass
        if done.wait(protocol.HEARTBEAT_SECONDS):
            return


def _end_servers(run: Path, record: dict) -> None:
    """The chief finished: the servers' stop is their end (each ends finished), then SIGTERM to the step."""
    now = repr(time.time())
    for name in record["ranks"]:
        if name != "chief-0":
            (run / name / DONE_MARKER).write_text(now)
            (run / name / STOP_MARKER).write_text(now)
    step = f"{os.environ.get('SLURM_JOB_ID')}.{os.environ.get('SLURM_STEP_ID')}"
    subprocess.run(["scancel", "--quiet", "--signal=TERM", step], capture_output=True, timeout=COMMAND_TIMEOUT,
                   check=False)


# --------------------------------------------------------------------------- the job, from the login host


def job_record(run_id: str) -> dict:
    record = read_json(home() / protocol.RUNS_DIR / _check_name("run id", run_id) / JOB_FILE)
    if not isinstance(record, dict) or not record.get("job_id"):
        raise AgentError(f"run {run_id} has no Slurm job here", protocol.NO_SUCH_TASK)
    return record


def job(run_id: str) -> dict:
    """The job's state (PENDING, RUNNING, COMPLETED, ...), Slurm's reason and its nodes."""
    record = job_record(run_id)
    job_id = record["job_id"]
    said = _command(["squeue", "-h", "-j", job_id, "-o", "%T|%r|%N"])
    fields = said.strip().split("|") if said.strip() else []
    if len(fields) == 3:
        state, reason, nodes = fields
    else:  # no longer queued: scontrol knows it a while (MinJobAge)
        shown = dict(re.findall(r"(\w+)=(\S*)", _command(["scontrol", "show", "job", "-o", job_id])))
        state, reason, nodes = shown.get("JobState", "GONE"), shown.get("Reason", ""), shown.get("NodeList", "")
    ended = (home() / protocol.RUNS_DIR / run_id / ENDED_FILE).exists()
    return {"run_id": run_id, "job_id": job_id, "state": state, "reason": "" if reason == "None" else reason,
            "nodes": "" if nodes in ("(null)", "None") else nodes, "script_ended": ended}


def cancel(run_id: str, grace: float = GRACE) -> dict:
    """Stop the run's job: a stop asked for (each task's folder says so), SIGTERM to its steps, scancel after
    ``grace`` s (TensorFlow may catch SIGTERM); a pending job is just cancelled."""
    record = job_record(run_id)
    run = home() / protocol.RUNS_DIR / run_id
    now = repr(time.time())
    for name in record["ranks"]:
        (run / name / STOP_MARKER).write_text(now)
    job_id = record["job_id"]
    deadline = time.monotonic() + grace
    if job(run_id)["state"] == "RUNNING":  # (scancel --signal waits on a job that has not started)
        _command(["scancel", "--quiet", "--signal=TERM", job_id])
    else:
        deadline = 0
    while time.monotonic() < deadline and job(run_id)["state"] in ("RUNNING", "COMPLETING"):
        if all((run / name / "exit.json").exists() for name in record["ranks"]):
            break
        time.sleep(0.2)
    _command(["scancel", "--quiet", job_id])
    for name in record["ranks"]:  # a task that never started, or was killed before it recorded its end
        folder = run / name
        if read_json(folder / "exit.json") is None:
            write_json(folder / "exit.json", {"returncode": -int(signal.SIGKILL), "ended": time.time(),
                                              "stopped": True})
    (run / ENDED_FILE).touch()
    return {"run_id": run_id, "job_id": job_id, "stopped": True}


def _command(argv: list) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AgentError(f"cannot run {argv[0]} here ({exc}); is this Slurm's login host?", protocol.SLURM) from None


def main(argv) -> int:
    if len(argv) == 3 and argv[1] == "task":
        return task_main(Path(argv[2]))
    print("usage: python -m agent.slurm task RUN_FOLDER (started by srun, one per rank)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
