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
``attempt_loop`` writes those attempts, for this job's script and the Slurm export's (console/export.py) alike.
Under parameter-server training the chief's end ends the servers (their stop is their end).

``job`` says the job's state and Slurm's reason (``squeue``; ``scontrol`` once it left the queue);
``cancel`` stops it (SIGTERM to its steps, then ``scancel`` after the grace).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from agent import protocol, supervise, system, workdir
from agent.runs import (DONE_MARKER, ENDED_FILE, STOP_MARKER, AgentError, _check_name, _workdir_step, home,
                        proc_start_time, read_json, task_dir, write_json)

JOB_FILE = protocol.SLURM_JOB_FILE
SCRIPT = "job.sbatch"
CHIEF_TASK = protocol.task_name(protocol.CHIEF, 0)  # under parameter-server training its end is the servers' end
PARAMETER_SERVER = "parameter_server"  # JOB_FILE's flag: the job trains with parameter servers (the strategy's word)
GRACE = 10.0                    # a task SIGTERMed (a stop, the chief's end) is killed this long after
COMMAND_TIMEOUT = 30.0
JOB_OUTPUT_BYTES = 16384        # the end of the job's own output a job op says
SYSTEM_DIR = protocol.SLURM_SYSTEM_DIR  # in the run's folder: <node>.jsonl, each node's load (its first task's)
SYSTEM_SECONDS = 2.0
MAX_SYSTEM_BYTES = 4 << 20      # a node's samples file is moved to <node>.jsonl.1 past this (bounded on disk)
_OPTION = re.compile(r"^--[a-z][a-z-]{1,40}=[A-Za-z0-9._:,@%/+-]{1,200}$")  # what an sbatch option may say
_JOB_ID = re.compile(r"^\d{1,12}(_\d{1,12})?$")
SERVER_WAIT = 60                # parameter servers: srun kills the servers still there this long after the chief ended
REFUSED_INPUT = 2               # a task's exit code when it refused its input: a restart would not help


# --------------------------------------------------------------------------- submit (on the login host)


def submit(req: dict) -> dict:
    """Write the run's task folders and its batch script, and submit it; the job's id."""
    run_id = _check_name("run id", req.get("run_id"))
    tasks = req.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise AgentError("submit needs \"tasks\": one {task, argv, env} per rank", protocol.BAD_ARGUMENT)
    options = req.get("sbatch") or []
    srun_options = req.get("srun") or []
    if not isinstance(options, list) or not all(isinstance(o, str) and _OPTION.fullmatch(o) for o in options) or \
            not isinstance(srun_options, list) or not all(isinstance(o, str) and _OPTION.fullmatch(o)
                                                          for o in srun_options):
        raise AgentError(f"submit: \"sbatch\" must be options like --partition=gpu, not {options!r}",
                         protocol.BAD_ARGUMENT)
    jobs, port_base = req.get("jobs"), req.get("port_base", protocol.SLURM_PORT_BASE)
    if not isinstance(jobs, str) or not re.fullmatch(r"[a-z]+:\d+(,[a-z]+:\d+)*", jobs) or \
            not isinstance(port_base, int) or not 1 <= port_base <= 65535:
        raise AgentError("submit needs \"jobs\" (like chief:1,worker:2) and a \"port_base\"", protocol.BAD_ARGUMENT)
    restarts = req.get("max_restarts", 0)
    cpus = req.get("cpus_per_task", 1)
    if not isinstance(restarts, int) or not 0 <= restarts <= 100 or not isinstance(cpus, int) or cpus < 1:
        raise AgentError("submit: max_restarts and cpus_per_task must be whole numbers", protocol.BAD_ARGUMENT)
    if req.get("secret_env"):  # Slurm keeps a job's environment in its controller's state files: on a disk
        raise AgentError("submit: a Slurm job cannot take secrets (Slurm writes a job's environment to its "
                         "controller's disk)", protocol.BAD_ARGUMENT)
    entries = None if req.get("workdir") is None else _workdir_step(workdir.check_entries, req["workdir"])
    if entries is not None:  # a script's folder: every blob here before anything is written
        _workdir_step(workdir.check_blobs, home(), entries)
    run = home() / protocol.RUNS_DIR / run_id
    before = read_json(run / JOB_FILE)
    if isinstance(before, dict) and before.get("job_id"):
        live = job(run_id)
        if live["state"] in protocol.SLURM_LIVE_STATES and not live["script_ended"]:
            raise AgentError(f"run {run_id}'s Slurm job {live['job_id']} is still {live['state'].lower()}; stop it "
                             "first (cancel)", protocol.ALREADY_RUNNING)
    names = []
    for entry in tasks:
        if not isinstance(entry, dict):
            raise AgentError("submit: each task is {task, argv, env}", protocol.BAD_ARGUMENT)
        name = _check_name("task", entry.get("task"))
        argv = entry.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise AgentError(f"submit: task {name} needs \"argv\", a list of strings", protocol.BAD_ARGUMENT)
        if (run / name / protocol.SPEC_FILE).exists() and req.get("fresh", True):
            raise AgentError(f"run {run_id} already has a task {name} here; choose another run id",
                             protocol.TASK_EXISTS)
        names.append(name)
    if req.get("fresh", True):  # a new run's id: another console's tasks under it are theirs (as delete holds)
        theirs = sorted(child.name for child in _children(run) if (child / protocol.SPEC_FILE).exists()
                        and _console_of(child) != req.get("console"))
        if theirs:
            raise AgentError(f"run {run_id} already has tasks here that another console started "
                             f"({', '.join(theirs[:5])}); choose another run id", protocol.TASK_EXISTS)
    # What this submit makes, and only that, goes again if sbatch refuses the job (a folder it found stays).
    made_run = not run.exists()
    made = [task_dir(run_id, name) for name in names if not task_dir(run_id, name).exists()]
    made_files = [run / f for f in (JOB_FILE, SCRIPT) if not (run / f).exists()]
    python = req.get("python") or sys.executable
    dist = str(Path(__file__).resolve().parent.parent)
    refreshed = {}
    for entry, name in zip(tasks, names):
        folder = task_dir(run_id, name)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in (protocol.EXIT_FILE, protocol.STATE_FILE, protocol.HEARTBEAT, STOP_MARKER, DONE_MARKER):
            (folder / stale).unlink(missing_ok=True)
        if entries is not None:  # a resubmission keeps work/; a person's resume brings its copies up to date
            built = _workdir_step(workdir.materialise, home(), folder, entries)
            if not built and req.get("refresh_work"):
                refreshed[name] = _workdir_step(workdir.refresh, home(), folder, entries)
        work = workdir.work_dir(folder)  # the script's own copy of its folder: its cwd
        env = {str(k): str(v) for k, v in (entry.get("env") or {}).items()}
        env.update({protocol.RUN_DIR_VARIABLE: str(folder), protocol.RUN_ID_VARIABLE: run_id,
                    protocol.TASK_VARIABLE: name})
        earlier = read_json(folder / protocol.SPEC_FILE) if (folder / protocol.SPEC_FILE).exists() else None
        attempt = int(earlier.get("attempt") or 0) if isinstance(earlier, dict) else 0  # a resubmission counts on
        write_json(folder / protocol.SPEC_FILE, {
            "run_id": run_id, "task": name, "created": time.time(), "attempt": attempt, "console": req.get("console"),
            "argv": [a.replace("{run_dir}", str(folder)).replace("{work_dir}", str(work)) for a in entry["argv"]],
            "env": env, "cwd": str(work if entries is not None else folder),
            "python_path": req.get("python_path") or [], "secret_env": []})
    for stale in (ENDED_FILE, protocol.SLURM_CANCELLED):
        (run / stale).unlink(missing_ok=True)
    roles = {part.partition(":")[0] for part in jobs.split(",")}
    parameter_server = {protocol.CHIEF, protocol.PS} <= roles
    write_json(run / JOB_FILE, {"ranks": names, "jobs": jobs, "port_base": port_base, "job_id": None,
                                "submitted": time.time(), PARAMETER_SERVER: parameter_server})
    script = _batch_script(run_id, run, len(names), options, srun_options, python, dist, restarts, cpus,
                           parameter_server, jobs, port_base)
    (run / SCRIPT).write_text(script)
    try:  # sbatch hands its environment to the job (the agent's: TFCC_HOME, the PATH of the login host)
        done = subprocess.run(["sbatch", "--parsable", str(run / SCRIPT)], capture_output=True, text=True,
                              cwd=str(run), timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        if isinstance(exc, OSError) and before is None:  # sbatch never ran (a timeout may have submitted)
            _remove_made(run, made_run, made, made_files)
        raise AgentError(f"cannot run sbatch here ({exc}); is this Slurm's login host?", protocol.SLURM) from None
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:500]
        if before is None:  # nothing ran: what this submit made goes, the run id stays free
            _remove_made(run, made_run, made, made_files)
        raise AgentError(f"sbatch refused the job: {said}", protocol.SLURM)
    job_id = done.stdout.strip().split(";")[0]
    if not _JOB_ID.match(job_id):
        raise AgentError(f"sbatch said {done.stdout.strip()[:200]!r}, not a job id", protocol.SLURM)
    record = read_json(run / JOB_FILE)
    record["job_id"] = job_id
    write_json(run / JOB_FILE, record)
    return {"run_id": run_id, "job_id": job_id, "script": str(run / SCRIPT),
            **({"work_refreshed": refreshed} if refreshed else {})}


def _console_of(task_folder: Path):
    """The console that started the task in ``task_folder`` (its spec's ``console``), None if it says none."""
    spec = read_json(task_folder / protocol.SPEC_FILE)
    return spec.get("console") if isinstance(spec, dict) else None


def _children(folder: Path) -> list[Path]:
    """``folder``'s sub-folders (none when it is not there); a link is none."""
    try:
        return [child for child in folder.iterdir() if child.is_dir() and not child.is_symlink()]
    except OSError:
        return []


def _remove_made(run: Path, made_run: bool, folders: list[Path], files: list[Path]) -> None:
    """Take away what a refused submit made: its files and task folders, and ``run`` if it made that (and it is
    empty by then). Nothing it found is touched."""
    for path in files:
        path.unlink(missing_ok=True)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    if made_run:
        for stale in (ENDED_FILE, protocol.SLURM_CANCELLED):
            (run / stale).unlink(missing_ok=True)
        try:
            run.rmdir()  # empty unless someone else wrote there meanwhile: then it stays
        except OSError:
            pass


def _batch_script(run_id: str, run: Path, tasks: int, options: list, srun_options: list, python: str, dist: str,
                  restarts: int, cpus: int, parameter_server: bool, jobs: str, port_base: int) -> str:
    q = shlex.quote
    lines = ["#!/bin/bash", f"#SBATCH --job-name=tfcc-{run_id}", "#SBATCH --output=slurm-%j.out",  # in its cwd: run
             *(f"#SBATCH {option}" for option in options)]
    command = (f'{q(python)} -m trainer.slurm --jobs {jobs} --port-base "$port_base" --keep-keras -- '
               '-m agent.slurm task "$run"')
    chief_exit = f"$run/{CHIEF_TASK}/{protocol.EXIT_FILE}"
    return "\n".join(lines) + f"""
# tfcc run {run_id}: every task of the run, one per rank (agent/slurm.py). Written by tfcc's agent.
export PYTHONPATH={q(dist)}${{PYTHONPATH:+:$PYTHONPATH}}
export TFCC_HOME={q(str(home()))}
run={q(str(run))}
rm -f "$run/{ENDED_FILE}"  # (a requeued job runs this again)
trap 'touch "$run/{ENDED_FILE}"' EXIT
# Each job its own ports: two jobs on one node must not meet (the k-th task of a node listens on base + k).
port_base=$(( {port_base} + (${{SLURM_JOB_ID:-0}} % 500) * 64 ))
# What srun runs once per rank: TF_CONFIG from Slurm's variables (the trainer's Slurm mode), then its task
# (agent/slurm.py), with the Keras its spec's environment chose (the console's keras_choice), else the node's own.
""" + attempt_loop("tfcc", command, runs="$run", tasks=tasks, cpus=cpus, srun_options=srun_options,
                   parameter_server=parameter_server, max_restarts=restarts,
                   stops=[(f'[ -e "$run/{protocol.SLURM_CANCELLED}" ]', "stopped", '"$code"')],
                   chief_finished=(f'[ -e "{chief_exit}" ] && grep -q \'"returncode": 0\' "{chief_exit}"'
                                   if parameter_server else None),
                   refused=f'grep -ql \'"returncode": 2[,}}]\' "$run"/*/{protocol.EXIT_FILE} 2>/dev/null')


def attempt_loop(say: str, command: str, *, runs: str, tasks: int, cpus: int, srun_options: Sequence[str],
                 parameter_server: bool, max_restarts: int, stops: Sequence[tuple[str, str, str]],
                 chief_finished: str | None, refused: str, reset: str = "") -> str:
    """A batch script's attempts, as the agent's job and the Slurm export (console/export.py) both run them: srun
    starts ``command`` once per rank (in a session of its own: ``srun``, told SIGTERM, kills the tasks at once);
    when it fails, every task starts again from its last backup, at most ``max_restarts`` times.

    After each attempt, in this order: each of ``stops`` (a shell test, what is said, the exit code: a stop
    someone asked for, the time limit) ends the job; an attempt that ended well, or whose chief finished (the
    shell test ``chief_finished``, under parameter servers: a server killed after it is no failure), ends it well;
    a task that refused its input (the shell test ``refused``: exit code 2) ends it, as does the last restart.
    ``say`` begins each line it writes; ``runs`` names the run folders' folder (a variable such as ``$run``, in
    the lines it writes); ``reset``: shell lines run before each attempt. The script's own lines above it may use
    ``attempt``, ``srun_pid`` and ``code`` (a trap)."""
    srun = (f"srun --kill-on-bad-exit=1 --cpus-per-task={cpus}{''.join(' ' + o for o in srun_options)}"
            + (f" --wait={SERVER_WAIT}" if parameter_server else ""))
    see = f"; see {runs}/*/{protocol.STDERR}"
    ends = "".join(f"""  if {test}; then
    echo "{say}: {said}" >&2
    exit {code}
  fi
""" for test, said, code in stops)
    finished = '  if [ "$code" -eq 0 ]; then\n'
    if chief_finished:
        finished = ("  # the chief (the coordinator) finished: a server killed after it (SIGTERM's grace, --wait) is "
                    f"no failure\n  if [ \"$code\" -eq 0 ] || {{ {chief_finished}; }}; then\n")
    budget = (f"# A failed attempt starts every task again from their last backups, at most {max_restarts} times "
              f"(the cluster's\n# max_restarts); a task that refused its input (exit code {REFUSED_INPUT}) is not "
              "restarted.\n")
    return budget + f"""max_restarts={max_restarts}
attempt=0
while :; do
  attempt=$((attempt + 1))
  export {protocol.ATTEMPT_VARIABLE}=$attempt
{reset}  echo "{say}: attempt $attempt: {tasks} tasks, run folders in {runs}"
  setsid {srun} \\
    {command} &
  srun_pid=$!
  while :; do  # a trap cuts a wait short: wait again while srun runs
    wait "$srun_pid"
    code=$?
    kill -0 "$srun_pid" 2>/dev/null || break
  done
{ends}{finished}    echo "{say}: every task finished"
    exit 0
  fi
  if {refused}; then
    echo "{say}: a task refused its input (exit code {REFUSED_INPUT}): not restarted{see}" >&2
    exit {REFUSED_INPUT}
  fi
  if [ "$attempt" -gt "$max_restarts" ]; then
    echo "{say}: attempt $attempt failed (exit code $code), no restarts left{see}" >&2
    exit "$code"
  fi
  echo "{say}: attempt $attempt failed (exit code $code); restarting every task from its last backup" >&2
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
    spec = read_json(folder / protocol.SPEC_FILE)
    attempt = int(spec.get("attempt") or 0) + 1
    spec["attempt"] = attempt
    spec["env"]["TF_CONFIG"] = tf_config
    spec["env"][protocol.ATTEMPT_VARIABLE] = str(attempt)
    write_json(folder / protocol.SPEC_FILE, spec)
    (folder / protocol.TF_CONFIG_FILE).write_text(tf_config, encoding="utf-8")
    for stale in (protocol.EXIT_FILE, STOP_MARKER, DONE_MARKER, protocol.MEASURE_FILE):
        (folder / stale).unlink(missing_ok=True)
    try:
        stderr_from = (folder / protocol.STDERR).stat().st_size
    except OSError:
        stderr_from = 0
    pid = os.getpid()
    write_json(folder / protocol.STATE_FILE, {"pid": pid, "pgid": os.getpgid(0), "start_time": proc_start_time(pid),
                                       "started": time.time(), "stderr_from": stderr_from,
                                       "node": socket.gethostname(), "slurm_node": os.environ.get("SLURMD_NODENAME"),
                                       "job_id": os.environ.get("SLURM_JOB_ID"), "attempt": attempt})
    beating = threading.Event()
    threading.Thread(target=_heartbeat, args=(folder / protocol.HEARTBEAT, beating), daemon=True).start()
    node = os.environ.get("SLURMD_NODENAME") or ""
    if os.environ.get("SLURM_LOCALID") == "0" and not protocol.name_problem("task", node):
        # one task a node samples its node's load for the login host (the system lane), while it runs
        threading.Thread(target=_sample_node, args=(run, record, node, beating), daemon=True).start()
    try:
        supervise.main(["supervise", str(folder)], grace=GRACE)
    finally:
        beating.set()
    ended = read_json(folder / protocol.EXIT_FILE) or {}
    code = ended.get("returncode", 1)
    if name == CHIEF_TASK and code == 0 and record.get(PARAMETER_SERVER):
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


def _node_tasks(run: Path, record: dict, node: str) -> dict:
    """The run's tasks that run on this node now, as ``system.Sampler`` takes them."""
    tasks = {}
    for name in record["ranks"]:
        folder = run / name
        state = read_json(folder / protocol.STATE_FILE) or {}
        if not isinstance(state, dict) or state.get("slurm_node") != node or (folder / protocol.EXIT_FILE).exists():
            continue
        child = (read_json(folder / protocol.CHILD_FILE) or {}).get("pid")
        tasks[name] = {"pgid": state.get("pgid"), "pid": child or state.get("pid"), "gpus": None}
    return tasks


def _sample_node(run: Path, record: dict, node: str, done: threading.Event) -> None:
    """This node's CPU, memory, GPUs and its tasks' processes every ``SYSTEM_SECONDS``, as lines of
    ``<run>/system/<node>.jsonl`` (the login host's agent streams them); sampling never stops a task."""
    try:
        folder = run / SYSTEM_DIR
        folder.mkdir(exist_ok=True)
        path = folder / f"{node}.jsonl"
        sampler = system.Sampler()
        sampler.baseline(_node_tasks(run, record, node))
        while not done.wait(SYSTEM_SECONDS):
            line = (json.dumps(sampler.sample(_node_tasks(run, record, node))) + "\n").encode()
            try:
                if path.stat().st_size > MAX_SYSTEM_BYTES:
                    os.replace(path, folder / f"{node}.jsonl.1")
            except OSError:
                pass
            with open(path, "ab") as f:
                f.write(line)
    except Exception as exc:  # the task goes on without its node's lane
        print(f"tfcc-slurm: no system samples from {node}: {exc}", file=sys.stderr, flush=True)


def _end_servers(run: Path, record: dict) -> None:
    """The chief finished: the servers' stop is their end (each ends finished), then SIGTERM to the step."""
    now = repr(time.time())
    for name in record["ranks"]:
        if name != CHIEF_TASK:
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
    run = home() / protocol.RUNS_DIR / run_id
    if state not in protocol.SLURM_LIVE_STATES and not (run / ENDED_FILE).exists():
        (run / ENDED_FILE).touch()  # over without its script's end (cancelled while pending, a node's failure):
        # a task that never started, or never recorded its end, is lost (runs.remote_phase)
    return {"run_id": run_id, "job_id": job_id, "state": state, "reason": "" if reason == "None" else reason,
            "nodes": "" if nodes in ("(null)", "None") else nodes, "script_ended": (run / ENDED_FILE).exists(),
            "output": _tail(run / f"slurm-{job_id}.out")}


def _tail(path: Path, size: int = JOB_OUTPUT_BYTES) -> str:
    """The end of the job's own output (srun's errors, its attempts), at most ``size`` bytes."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read(size).decode(errors="replace")
    except OSError:
        return ""


def cancel(run_id: str, grace: float = GRACE, step_only: bool = False) -> dict:
    """Stop the run's job: SIGTERM to its running step, SIGKILL ``grace`` s later (TensorFlow may catch SIGTERM).

    ``step_only``: only this attempt's tasks end (a group restart: the job's script starts the next attempt
    while its max_restarts allow). Else it is a stop someone asked for (each task's folder and the run's say
    so: nothing restarts) and the job is cancelled (a pending one at once)."""
    record = job_record(run_id)
    run = home() / protocol.RUNS_DIR / run_id
    grace = max(0.0, min(float(grace), 300.0))
    if not step_only:
        now = repr(time.time())
        (run / protocol.SLURM_CANCELLED).write_text(now)
        for name in record["ranks"]:
            (run / name / STOP_MARKER).write_text(now)
    job_id = record["job_id"]
    steps = _running_steps(job_id)
    for step in steps:  # (scancel --signal on a job that has not started waits)
        _command(["scancel", "--quiet", "--signal=TERM", step])
    deadline = time.monotonic() + (grace if steps else 0)
    while time.monotonic() < deadline and _running_steps(job_id) == steps:
        time.sleep(1.0)
    for step in _running_steps(job_id) if steps else []:
        _command(["scancel", "--quiet", "--signal=KILL", step])
    if step_only:
        return {"run_id": run_id, "job_id": job_id, "stopped": bool(steps), "steps": steps}
    _command(["scancel", "--quiet", job_id])
    for name in record["ranks"]:  # a task that never started, or was killed before it recorded its end
        folder = run / name
        if read_json(folder / protocol.EXIT_FILE) is None:
            write_json(folder / protocol.EXIT_FILE, {"returncode": -int(signal.SIGKILL), "ended": time.time(),
                                              "stopped": True})
    (run / ENDED_FILE).touch()
    return {"run_id": run_id, "job_id": job_id, "stopped": True}


def _running_steps(job_id: str) -> list:
    """The job's task steps running now (``<job>.<step>``; its batch script's own step left out)."""
    said = _command(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"])
    return sorted(s for s in said.split() if re.fullmatch(r"\d+(_\d+)?\.\d+", s))


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
