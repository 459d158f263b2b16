"""Run folders on this host: start a task detached, read its state, follow, stop.

Layout: ``<home>/runs/<run-id>/<task>/`` with ``spec.json`` (what to run),
``tf_config.json``, ``state.json`` (the supervisor's pid and start time),
``exit.json`` (written when the task ends) and the task's streams
(``protocol.STREAMS``: ``metrics.jsonl``, ``stdout.log`` and ``stderr.log``); for a script
with a workdir, ``work/``: its own copy of the script's folder (``agent.workdir``), its cwd.
``<home>`` is ``$TFCC_HOME`` or ``~/.tfcc``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from agent import firewall, protocol, workdir
from agent.protocol import STREAMS



class AgentError(Exception):
    """A request that cannot be carried out; the message says why and what to do.

    ``code`` (one of ``protocol.ERROR_CODES``) goes with the message in the refusal.
    """

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


STOP_MARKER = protocol.STOP_MARKER
# Beside it when that stop is the task's normal end (a parameter-server worker or ps after the chief
# finished: it serves until told): the task then ends finished, not failed.
DONE_MARKER = "stop_is_end"

ENDED_FILE = protocol.SLURM_JOB_ENDED


def home() -> Path:
    return Path(os.environ.get(protocol.HOME_VARIABLE) or Path.home() / ".tfcc")


def _check_name(kind: str, value) -> str:
    problem = protocol.name_problem(kind, value)
    if problem:
        raise AgentError(problem, protocol.BAD_NAME)
    return value


def task_dir(run_id: str, task: str) -> Path:
    return home() / protocol.RUNS_DIR / _check_name("run id", run_id) / _check_name("task", task)


def write_json(path: Path, data) -> None:
    """Atomically: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{threading.get_ident()}")  # (two threads may write it)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


# --------------------------------------------------------------------------- processes


def _stat_fields(pid) -> list:
    """The fields of /proc/<pid>/stat after the command name (the state first), or [] for no such process."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except (OSError, TypeError, ValueError):
        return []
    return stat[stat.rfind(")") + 2:].split()


def proc_start_time(pid: int):
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or None."""
    fields = _stat_fields(pid)
    if not fields or fields[0] == "Z":  # a zombie has ended
        return None
    return int(fields[19])


def proc_state(pid) -> str | None:
    """The process's state letter (field 3 of /proc/<pid>/stat: R, S, D, T stopped, t traced, Z), or None."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def is_same_process(pid, start_time) -> bool:
    """True only if ``pid`` is still the process that was started (PIDs are reused)."""
    return bool(pid) and start_time is not None and proc_start_time(pid) == start_time


def group_members(pgid: int) -> list:
    """PIDs of live processes in process group ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


# --------------------------------------------------------------------------- ports


def free_ports(count: int) -> list:
    """``count`` distinct TCP ports that are free on this host now (held together while picked)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("0.0.0.0", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# --------------------------------------------------------------------------- start


def _launches(folder: Path) -> int:
    """How often the task in ``folder`` was launched (its spec says; a damaged spec counts as one)."""
    if not (folder / protocol.SPEC_FILE).exists():
        return 0
    try:
        spec = read_json(folder / protocol.SPEC_FILE)
        return int(spec.get("attempt", 1))
    except (ValueError, TypeError, AttributeError, OSError):
        return 1


def _workdir_step(step, *args):
    """``step(*args)`` of ``agent.workdir``, its refusal as the agent's."""
    try:
        return step(*args)
    except workdir.WorkdirError as exc:
        raise AgentError(str(exc), exc.code) from None


def start(req: dict) -> dict:
    """Write the run folder and start the task detached; return at once.

    ``workdir`` (optional): the files of the script's folder as ``[relative path, sha256,
    executable]``, copied from this host's blobs into ``work/`` at the task's first start (a
    relaunch keeps ``work/``, and with ``refresh_work`` brings its copies of those files up to date:
    a person resumes with the code as it is now, ``work_refreshed`` in the reply says what changed); then
    ``work/`` is the task's cwd unless ``cwd`` says otherwise.
    ``{run_dir}`` and ``{work_dir}`` in argv name the task's folder and its ``work/``.
    """
    run_id = _check_name("run id", req.get("run_id"))
    task = _check_name("task", req.get("task"))
    argv = req.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise AgentError("start needs \"argv\": the command to run as a list of strings", protocol.BAD_ARGUMENT)
    entries = None if req.get("workdir") is None else _workdir_step(workdir.check_entries, req["workdir"])
    folder = task_dir(run_id, task)
    if req.get("fresh") and (folder / protocol.SPEC_FILE).exists():
        raise AgentError(f"run {run_id} already has a task {task} on this host ({folder}); choose another "
                         f"run id, or resume that run (tfcc resume {run_id})", protocol.TASK_EXISTS)
    state = read_json(folder / protocol.STATE_FILE)
    if state and (folder / protocol.EXIT_FILE).exists():  # ended: its supervisor is exiting (it wrote the end first)
        deadline = time.monotonic() + 5
        while is_same_process(state.get("pid"), state.get("start_time")) and time.monotonic() < deadline:
            time.sleep(0.02)
    if state and is_same_process(state.get("pid"), state.get("start_time")):
        raise AgentError(f"task {task} of run {run_id} is already running (pid {state['pid']}); stop it first",
                         protocol.ALREADY_RUNNING)
    if entries is not None and not _workdir_step(workdir.has_work, folder):
        _workdir_step(workdir.check_blobs, home(), entries)  # before anything is written
    attempt = _launches(folder) + 1
    folder.mkdir(parents=True, exist_ok=True)
    refreshed = None
    if entries is not None:
        built = _workdir_step(workdir.materialise, home(), folder, entries)
        if not built and req.get("refresh_work"):  # a person resumes with the code as it is now
            refreshed = _workdir_step(workdir.refresh, home(), folder, entries)
    work = workdir.work_dir(folder)
    for stale in (protocol.EXIT_FILE, protocol.STATE_FILE, STOP_MARKER, DONE_MARKER, protocol.MEASURE_FILE):
        try:
            (folder / stale).unlink()
        except FileNotFoundError:
            pass
    env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
    console = req.get("console")
    if console is not None and protocol.name_problem("console", console):
        raise AgentError(protocol.name_problem("console", console), protocol.BAD_ARGUMENT)
    secrets = req.get("secret_env") or {}
    if not isinstance(secrets, dict) or not all(isinstance(k, str) and isinstance(v, str) and "\0" not in k + v
                                                for k, v in secrets.items()):
        raise AgentError("start: \"secret_env\" must map names to strings", protocol.BAD_ARGUMENT)
    table = None
    if req.get("firewall") is not None:  # the task's port from the cluster's hosts only, before it listens
        wall = req["firewall"]
        if not isinstance(wall, dict) or not isinstance(wall.get("peers"), list) or \
                not isinstance(wall.get("endpoints", []), list):
            raise AgentError("start: \"firewall\" must be {\"port\": N, \"peers\": [addresses], \"endpoints\": "
                             "[host:port]}", protocol.BAD_ARGUMENT)
        try:
            table = firewall.allow_only(home(), run_id, task, wall.get("port"), wall["peers"],
                                        wall.get("endpoints"))["table"]
        except firewall.FirewallError as exc:
            raise AgentError(str(exc), protocol.FIREWALL) from None
    try:
        reply = _launch(folder, req, run_id, task, argv, entries, env, console, secrets, attempt, work, table)
        if refreshed is not None:
            reply["work_refreshed"] = refreshed
        return reply
    except BaseException:
        if table is not None:  # no task to serve the port: its rules go
            firewall.remove(home(), table)
        raise


def _launch(folder: Path, req: dict, run_id: str, task: str, argv: list, entries, env: dict, console,
            secrets: dict, attempt: int, work: Path, table: str | None) -> dict:
    """The rest of ``start``: the run folder's files and the supervisor, started detached."""
    tf_config = req.get("tf_config")
    if tf_config is not None:
        if not isinstance(tf_config, str):
            tf_config = json.dumps(tf_config)
        (folder / protocol.TF_CONFIG_FILE).write_text(tf_config, encoding="utf-8")
        env["TF_CONFIG"] = tf_config
    env[protocol.RUN_DIR_VARIABLE] = str(folder)
    env[protocol.RUN_ID_VARIABLE] = run_id
    env[protocol.TASK_VARIABLE] = task
    env[protocol.ATTEMPT_VARIABLE] = str(attempt)
    try:  # where this attempt's stderr begins: an earlier attempt's errors are no diagnosis of it
        stderr_from = (folder / protocol.STDERR).stat().st_size
    except OSError:
        stderr_from = 0
    spec = {
        "run_id": run_id,
        "task": task,
        "argv": [a.replace("{run_dir}", str(folder)).replace("{work_dir}", str(work)) for a in argv],
        "env": env,
        "cwd": req.get("cwd") or str(work if entries is not None else folder),
        "python_path": req.get("python_path") or [],
        "created": time.time(),
        "attempt": attempt,
        "secret_env": sorted(secrets),  # their names: the values are in the task's environment alone
        "console": console,  # which console started it: another one's delete leaves it alone
        "firewall": table,   # its nftables table: the supervisor takes it away at the task's end
    }
    write_json(folder / protocol.SPEC_FILE, spec)
    agent_root = str(Path(__file__).resolve().parent.parent)
    child_env = dict(os.environ)
    child_env.update(secrets)  # the supervisor hands its environment to the task: never a file, never argv
    child_env["PYTHONPATH"] = agent_root
    # The supervisor leads its own session (no terminal, no hang-up when the
    # SSH channel closes) and the task runs in its process group.
    with open(os.devnull, "rb") as devnull, open(folder / protocol.SUPERVISOR_LOG, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent.supervise", str(folder)],
            stdin=devnull, stdout=log, stderr=log,
            cwd=str(folder), env=child_env, start_new_session=True, close_fds=True,
        )
    start_time = None
    deadline = time.monotonic() + 5
    while start_time is None and time.monotonic() < deadline:
        start_time = proc_start_time(proc.pid)
    state = {"pid": proc.pid, "pgid": proc.pid, "start_time": start_time, "started": time.time(),
             "stderr_from": stderr_from}
    write_json(folder / protocol.STATE_FILE, state)
    return {"run_id": run_id, "task": task, "run_dir": str(folder), "pid": proc.pid, "start_time": start_time,
            "attempt": attempt}


# --------------------------------------------------------------------------- status


def status(run_id: str, task: str) -> dict:
    folder = task_dir(run_id, task)
    if not folder.is_dir():
        raise AgentError(f"no task {task} in run {run_id} on this host (tfcc runs lists what is here)",
                         protocol.NO_SUCH_TASK)
    state = read_json(folder / protocol.STATE_FILE) or {}
    ended = read_json(folder / protocol.EXIT_FILE)
    remote = remote_phase(folder, state, ended)
    running = remote == protocol.RUNNING if remote is not None else is_same_process(state.get("pid"),
                                                                                     state.get("start_time"))
    stopped = stopped_by_request(folder, ended)
    if ended is not None:
        done = ended.get("returncode") == 0 or (stopped and (folder / DONE_MARKER).exists())
        phase = protocol.FINISHED if done else protocol.FAILED
    elif remote == protocol.PENDING:
        phase = protocol.PENDING  # a Slurm job's task its node has not started yet
    elif running:
        phase = protocol.RUNNING
    else:
        phase = protocol.LOST  # the supervisor vanished without writing exit.json (killed)
    # a task on another node: its processes are not this host's to look at
    child = (read_json(folder / protocol.CHILD_FILE) or {}).get("pid") if running and ended is None and remote is None \
        else None
    backups = backup_steps(folder)
    sizes = {}
    for name in STREAMS:
        try:
            sizes[name] = (folder / name).stat().st_size
        except FileNotFoundError:
            sizes[name] = 0
    return {"run_id": run_id, "task": task, "run_dir": str(folder), "phase": phase,
            "pid": state.get("pid"), "started": state.get("started"), "exit": ended, "sizes": sizes,
            "stopped": stopped, "stderr_from": state.get("stderr_from", 0), "backups": backups,
            "attempt": state.get("attempt"),  # a Slurm task's: its job's script starts it again in this folder
            "backup_files": backup_files(folder, backups[-1]) if backups else [],
            # SIGSTOP (a debugger, Ctrl-Z, a scheduler): alive, but it makes no step and answers no peer
            "suspended": proc_state(child) in ("T", "t") if child else False}


def remote_phase(folder: Path, state: dict, ended) -> str | None:
    """The phase of a Slurm run's task seen from the login host (None for a task of this host's own): pending
    until its node starts it, running while its heartbeat goes on, lost when it stopped without an end."""
    run = folder.parent
    if not (run / protocol.SLURM_JOB_FILE).exists():
        return None
    if ended is not None:
        return None  # its end is recorded: runs.status says it
    if not state:
        return protocol.LOST if (run / ENDED_FILE).exists() else protocol.PENDING
    if (run / ENDED_FILE).exists():
        return protocol.LOST  # its job's script ended without its end: killed with its step
    return protocol.RUNNING if _beating(folder) else protocol.LOST


# A Slurm task's heartbeat as this host last read it: its content, and when (this host's monotonic clock) it
# last changed. Read, not stat'ed: opening the file makes a network file system show what the node wrote (its
# attributes may be cached a minute), and no two hosts' clocks are compared.
_BEATS: dict = {}
_MAX_BEATS = 4096


def _beating(folder: Path) -> bool:
    """Whether a Slurm task's heartbeat changed within ``HEARTBEAT_STALE`` s of this host's clock (a first look
    counts as a change: a task this agent has just started to watch is given that long)."""
    try:
        with open(folder / protocol.HEARTBEAT, "rb") as f:
            beat = f.read(64)
    except OSError:
        beat = b""
    now = time.monotonic()
    key = str(folder)
    seen = _BEATS.get(key)
    if seen is None or seen[0] != beat:
        if len(_BEATS) >= _MAX_BEATS:
            _BEATS.clear()
        _BEATS[key] = (beat, now)
        return True
    return now - seen[1] < protocol.HEARTBEAT_STALE


def started(run_id: str, task: str) -> bool:
    """Whether a task's start got as far as its supervisor (its state is recorded)."""
    try:
        return (task_dir(run_id, task) / protocol.STATE_FILE).exists()
    except AgentError:
        return False


def serves(run_id: str, task: str) -> bool:
    """Whether a task may still serve its port: its supervisor runs, or its process outlived it."""
    try:
        if status(run_id, task)["phase"] == protocol.RUNNING:
            return True
    except AgentError:
        return False
    return orphan(task_dir(run_id, task)) is not None


def backup_steps(folder: Path) -> list:
    """The global steps of the backups the task left to resume from, oldest first (the newest few)."""
    try:
        return protocol.backup_steps(os.listdir(folder / protocol.BACKUP_DIR))[-protocol.MAX_BACKUPS_SAID:]
    except OSError:
        return []


def backup_files(folder: Path, step) -> list:
    """The names of the files of the task's backup of ``step`` (its index, data shards and plan)."""
    try:
        names = os.listdir(folder / protocol.BACKUP_DIR)
    except OSError:
        return []
    return sorted(n for n in names if protocol.backup_step(n) == step)[:protocol.MAX_BACKUP_FILES]


def orphan(folder: Path) -> int | None:
    """The pid of a task's process that outlived its supervisor (the agent lost track of it), or None."""
    state = read_json(folder / protocol.STATE_FILE) or {}
    child = read_json(folder / protocol.CHILD_FILE) or {}
    if not isinstance(state, dict) or not isinstance(child, dict) or \
            is_same_process(state.get("pid"), state.get("start_time")):
        return None
    return child.get("pid") if is_same_process(child.get("pid"), child.get("start_time")) else None


def stopped_by_request(folder: Path, ended) -> bool:
    """Whether a stop someone asked for ended the task: it was asked, and the task ended at or after
    that. A task that ended on its own just before (its own error) keeps its failure."""
    try:
        asked = float((folder / STOP_MARKER).read_text() or 0)
    except FileNotFoundError:
        return False
    except ValueError:
        asked = 0.0  # an older agent's empty marker: the stop counts
    if not isinstance(ended, dict) or ended.get("stopped"):
        return True
    when = ended.get("ended")
    return not isinstance(when, (int, float)) or when >= asked


def run_tasks(run_id: str) -> list:
    """The names of the tasks of ``run_id`` started on this host (those with a spec), sorted."""
    root = home() / protocol.RUNS_DIR / _check_name("run id", run_id)
    try:
        return sorted(p.name for p in root.iterdir() if (p / protocol.SPEC_FILE).is_file())
    except OSError:  # no such run here
        return []


def list_runs() -> list:
    root = home() / protocol.RUNS_DIR
    out = []
    if not root.is_dir():
        return out
    for run in sorted(root.iterdir()):
        if not run.is_dir():
            continue
        for task in sorted(run.iterdir()):
            if (task / protocol.SPEC_FILE).is_file():
                try:
                    out.append(status(run.name, task.name))
                except AgentError:
                    continue
    return out


# --------------------------------------------------------------------------- measure


def measure(run_id: str, task: str, ask, at_step) -> dict:
    """Leave a breakdown's ask (``MEASURE_FILE``) in a running task's folder: its trainer (tfcc's, or a script's
    ``fit`` through the capture) looks for it twice a second and measures once every peer has it too (trainer/
    breakdown.py). ``at_step``: the newest step the console saw (said back in the record)."""
    if status(run_id, task)["phase"] != protocol.RUNNING:
        raise AgentError(f"task {task} of run {run_id} is not running here: nothing to measure",
                         protocol.NO_SUCH_TASK)
    if not isinstance(ask, str) or not ask or len(ask) > 64 or not ask.isprintable():
        raise AgentError(f"measure: ask must be a short name, not {ask!r}", protocol.BAD_ARGUMENT)
    if isinstance(at_step, bool) or not isinstance(at_step, int) or not 0 <= at_step < 1 << 62:
        raise AgentError(f"measure: at_step must be a step number, not {at_step!r}", protocol.BAD_ARGUMENT)
    write_json(task_dir(run_id, task) / protocol.MEASURE_FILE, {"ask": ask, "at_step": at_step,
                                                                 "asked": time.time()})
    return {"run_id": run_id, "task": task, "ask": ask, "at_step": at_step}


# --------------------------------------------------------------------------- where its threads are

STACKS_WAIT = 5.0                 # how long the stacks op waits for a task's answer, at most
MAX_STACKS_BYTES = 256 * 1024     # the most of an answer said back (faulthandler: 100 threads of 100 frames)


def stacks(run_id: str, task: str, wait: float = STACKS_WAIT) -> dict:
    """Where each thread of a running task is now: its Python stacks as the task itself dumps them (tfcc's trainer
    and a user's script through the capture watch for the ask: trainer/stacks.py), with ``state`` "answered"; or
    what keeps it from answering: "stopped" (SIGSTOP: a debugger, Ctrl-Z, a scheduler), "zombie" (ended, not
    reaped), "silent" (no answer within ``wait`` s: a script run without the capture, or a Python that cannot run
    its watcher). Never waits longer than ``wait``."""
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 < wait <= 30:
        raise AgentError(f"stacks: wait must be a number of seconds up to 30, not {wait!r}", protocol.BAD_ARGUMENT)
    said = status(run_id, task)
    if said["phase"] != protocol.RUNNING:
        raise AgentError(f"task {task} of run {run_id} is not running here ({said['phase']}): it is nowhere now",
                         protocol.NO_SUCH_TASK)
    folder = task_dir(run_id, task)
    remote = (folder.parent / protocol.SLURM_JOB_FILE).exists()  # a Slurm node's process: not this host's to look at
    child = None if remote else (read_json(folder / protocol.CHILD_FILE) or {}).get("pid")
    spec = read_json(folder / protocol.SPEC_FILE) or {}
    # Whose each frame is (console/hangs.py): the task's copy of the user's workdir, tfcc's code on this host.
    answer = {"run_id": run_id, "task": task, "pid": child, "work": spec.get("cwd") or None,
              "code": [p for p in spec.get("python_path") or [] if isinstance(p, str)]}
    state = proc_state(child) if child else None
    if state in ("T", "t"):
        return {**answer, "state": protocol.WHERE_STOPPED}
    if state == "Z":
        return {**answer, "state": protocol.WHERE_ZOMBIE}
    ask = f"{time.time():017.6f}-{os.getpid():010d}"  # sorts by when it was asked (a later ask: a later dump)
    write_json(folder / protocol.STACKS_ASK, {"ask": ask, "asked": time.time()})
    deadline = time.monotonic() + wait
    looked = time.monotonic()
    while time.monotonic() < deadline:
        if time.monotonic() - looked > 0.5:
            looked = time.monotonic()
            late = proc_state(child) if child else None  # stopped (or ended) since the ask: it will not answer
            if late in ("T", "t"):
                return {**answer, "state": protocol.WHERE_STOPPED}
            if late == "Z":
                return {**answer, "state": protocol.WHERE_ZOMBIE}
            # An earlier ask written after this one (asks at once): ask again.
            left = (read_json(folder / protocol.STACKS_ASK) or {}).get("ask")
            if not isinstance(left, str) or left < ask:
                write_json(folder / protocol.STACKS_ASK, {"ask": ask, "asked": time.time()})
        # The answer to this ask, or to a later one (another console, the window, the watchdog asked meanwhile):
        # a dump made after this ask was left is as good. Asks are times: a later one sorts after.
        text = _answer(folder / protocol.STACKS_FILE)
        head, _, rest = text.partition("\n")
        said = head[len(protocol.STACKS_MARK) + 1:] if head.startswith(f"{protocol.STACKS_MARK} ") else ""
        end = f"{protocol.STACKS_MARK}-end {said}"
        if said and said >= ask and len(said) == len(ask) and end in rest:
            body = rest.rsplit(end, 1)[0]
            return {**answer, "state": protocol.WHERE_ANSWERED, "stacks": body[:MAX_STACKS_BYTES],
                    "cut": len(body) > MAX_STACKS_BYTES, "fifos": fifos_read(child) if child else []}
        time.sleep(0.05)
    return {**answer, "state": protocol.WHERE_SILENT, "fifos": fifos_read(child) if child else []}


# The system calls that wait on a named pipe, by machine: the read calls (their first argument its file descriptor)
# and the open calls (which argument is the path: a pipe's open waits for its other end).
READ_CALLS = {"x86_64": (0, 17, 19, 295), "aarch64": (63, 65, 67, 69)}
OPEN_CALLS = {"x86_64": {2: 0, 257: 1}, "aarch64": {56: 1}}
AT_FDCWD = -100
MAX_THREADS_LOOKED_AT = 1024


def fifos_read(pid: int) -> list[dict]:
    """The named pipes ``pid``'s threads wait on now, each ``{"path", "in": "read" | "open"}`` (Linux: each
    thread's system call and its arguments, ``/proc/<pid>/task/<tid>/syscall``; an open's path from the process's
    memory, where this user may read it): an input file that is a FIFO nobody writes stalls TensorFlow's reader
    in native code, where no Python stack shows it. [] where /proc does not say."""
    machine = os.uname().machine
    reads, opens = READ_CALLS.get(machine, ()), OPEN_CALLS.get(machine, {})
    found: list[dict] = []
    try:
        threads = os.listdir(f"/proc/{int(pid)}/task")[:MAX_THREADS_LOOKED_AT]
    except (OSError, ValueError):
        return found
    for tid in threads:
        try:
            with open(f"/proc/{int(pid)}/task/{tid}/syscall", encoding="ascii") as f:
                fields = f.read().split()
            if len(fields) < 3 or not fields[0].isdigit():
                continue
            call = int(fields[0])
            if call in reads:
                path, how = os.readlink(f"/proc/{int(pid)}/fd/{int(fields[1], 16)}"), protocol.PIPE_READ
            elif call in opens:
                path, how = _opened_path(int(pid), fields, opens[call]), protocol.PIPE_OPEN
            else:
                continue
            if path.startswith("/") and stat.S_ISFIFO(os.stat(path).st_mode) and \
                    not any(f["path"] == path for f in found):
                found.append({"path": path, "in": how})
        except (OSError, ValueError):
            continue
    return found


def _opened_path(pid: int, fields: list[str], which: int) -> str:
    """The path an open call waits on (read from the process's memory), made whole against its folder."""
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        mem.seek(int(fields[1 + which], 16))
        path = mem.read(4096).split(b"\0", 1)[0].decode("utf-8", "replace")
    if path.startswith("/"):
        return path
    folder = int(fields[1], 16) if which == 1 else AT_FDCWD
    if folder >= 1 << 31:  # an int argument, said in 32 bits (or 64): negative
        folder -= 1 << (64 if folder >= 1 << 32 else 32)
    base = os.readlink(f"/proc/{pid}/cwd" if folder == AT_FDCWD else f"/proc/{pid}/fd/{folder}")
    return os.path.join(base, path)


def _answer(path: Path) -> str:
    """A task's answer file as text (its first ``MAX_STACKS_BYTES`` and a little), or "" while there is none."""
    try:
        with open(path, "rb") as f:
            return f.read(MAX_STACKS_BYTES + 4096).decode("utf-8", "replace")
    except OSError:
        return ""


# --------------------------------------------------------------------------- stop


def stop(run_id: str, task: str, grace: float = 10.0, done: bool = False) -> dict:
    """SIGTERM the task's process group, SIGKILL what is left after ``grace`` seconds.

    A task may catch SIGTERM and keep running (a script's own handler; TensorFlow's coordination
    service, in a script run without tfcc's capture), hence the SIGKILL. A PID that now belongs to
    another process is never signalled.
    ``done``: the stop is the task's normal end (a server of parameter-server training once the
    chief finished): however it ends, it ends ``finished``.
    """
    folder = task_dir(run_id, task)
    state = read_json(folder / protocol.STATE_FILE) or {}
    if (folder.parent / protocol.SLURM_JOB_FILE).exists():
        raise AgentError(f"task {task} of run {run_id} runs in a Slurm job: stop the job (the cancel op, "
                         f"tfcc stop {run_id})", protocol.SLURM)
    pid, start_time = state.get("pid"), state.get("start_time")
    if not is_same_process(pid, start_time):
        return {"run_id": run_id, "task": task, "stopped": False, "reason": "not running"}
    pgid = state.get("pgid", pid)
    if done:
        (folder / DONE_MARKER).write_text(repr(time.time()))
    # Asked for, and when: whoever follows the task must not take an end from now on for a failure.
    (folder / STOP_MARKER).write_text(repr(time.time()))
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    killed = bool(group_members(pgid))
    if killed and is_same_process(pid, start_time):
        _signal_group(pgid, signal.SIGKILL)
    elif killed:  # the supervisor is gone but its children are not: kill them one by one
        for member in group_members(pgid):
            _signal_pid(member, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    drop_firewall(folder)  # a supervisor killed with its group could not take its rules away
    if read_json(folder / protocol.EXIT_FILE) is None:
        write_json(folder / protocol.EXIT_FILE, {"returncode": -int(signal.SIGKILL if killed else signal.SIGTERM),
                                          "ended": time.time(), "stopped": True})
    return {"run_id": run_id, "task": task, "stopped": True, "killed": killed}


def drop_firewall(folder: Path) -> None:
    """Take away a task's firewall rules if they are still set (its supervisor did not live to)."""
    table = (read_json(folder / protocol.SPEC_FILE) or {}).get("firewall")
    if isinstance(table, str) and (firewall.registry(home()) / f"{table}.json").exists():
        firewall.remove(home(), table)


def _signal_group(pgid: int, sig) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _signal_pid(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------- remove


def remove_run(run_id: str, console: str | None = None) -> dict:
    """Delete ``<home>/runs/<run_id>`` (every task of the run on this host), refused while one of its
    tasks still runs or a task's process outlived its supervisor, and (``console``: the console that asks)
    when a task of it was started by another console. Nothing outside that folder is touched: a symbolic
    link is removed, never followed."""
    run_id = _check_name("run id", run_id)
    root = home() / protocol.RUNS_DIR
    folder = root / run_id
    if folder.is_symlink():  # not one this agent made: the link goes, never what it points to
        folder.unlink()
        return {"run_id": run_id, "removed": True, "tasks": []}
    if not folder.is_dir():
        return {"run_id": run_id, "removed": False, "tasks": []}
    tasks = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.is_symlink())
    if (folder / protocol.SLURM_JOB_FILE).exists() and not (folder / ENDED_FILE).exists():
        raise AgentError(f"run {run_id}'s Slurm job has not ended (its tasks run on its nodes, or wait to); stop it "
                         f"first (tfcc stop {run_id}), then delete the run", protocol.ALREADY_RUNNING)
    for task in tasks:  # running as status says: its supervisor lives and has not recorded the end
        state = read_json(folder / task / protocol.STATE_FILE) or {}
        if (isinstance(state, dict) and read_json(folder / task / protocol.EXIT_FILE) is None
                and is_same_process(state.get("pid"), state.get("start_time"))):
            raise AgentError(f"task {task} of run {run_id} is still running on this host (pid {state['pid']}); "
                             f"stop it first (tfcc stop {run_id}), then delete the run", protocol.ALREADY_RUNNING)
        left = orphan(folder / task)
        if left is not None:
            raise AgentError(f"task {task} of run {run_id} has a process that outlived its supervisor on this host "
                             f"(pid {left}); end it (kill {left}), then delete the run", protocol.ALREADY_RUNNING)
    others = [task for task in tasks if console is not None and
              ((read_json(folder / task / protocol.SPEC_FILE) or {}).get("console") or console) != console]
    if others:
        raise AgentError(f"task(s) {', '.join(others)} of run {run_id} on this host were started by another console; "
                         "delete the run from that console (nothing was deleted)", protocol.BAD_ARGUMENT)
    if folder.resolve().parent != root.resolve():
        raise AgentError(f"run folder {folder} is not inside {root}; remove it by hand", protocol.BAD_NAME)
    # shutil.rmtree removes links inside the folder without following them (and refuses a link itself).
    shutil.rmtree(folder)
    return {"run_id": run_id, "removed": True, "tasks": tasks}


# --------------------------------------------------------------------------- follow


def skipped_line(size: int) -> bytes:
    """What a line over the cap becomes: words that say its size (in a metrics file, a line that is no record:
    the console shows it as such)."""
    return f"<a line of {size} bytes, over the {protocol.MAX_LINE}-byte cap: skipped>".encode()


def read_new(path: Path, offset: int, limit: int = protocol.MAX_LINE, instead=skipped_line,
             scan: dict | None = None):
    """Complete lines of ``path`` from byte ``offset``: (lines as bytes, new offset, bytes skipped).

    A line longer than ``limit`` (a record no one writes; a hostile or broken task's) is skipped whole,
    read through in chunks (never held): ``instead(its size)`` stands for it, so the follow goes on and what
    comes after it is read. ``scan`` (kept by the caller between reads of one file) remembers how far such a
    line was read through while it is still being written: each of its bytes is read once, however slowly it
    grows."""
    scanned = scan.get(offset, 0) if scan is not None else 0
    try:
        with open(path, "rb") as f:
            if scanned:
                f.seek(offset + scanned)
                skipped = scanned
            else:
                f.seek(offset)
                data = f.read(limit)
                # Whole lines up to MESSAGE_LINES bytes; a longer line (up to the cap) on its own.
                end = data.rfind(b"\n", 0, protocol.MESSAGE_LINES) + 1 or data.find(b"\n") + 1
                if end or len(data) < limit:
                    # Split at line feeds only: a "\r" (a progress bar's redraw) stays in its line for the console
                    # to show as a terminal would
                    return (data[:end - 1].split(b"\n"), offset + end, 0) if end else ([], offset, 0)
                skipped = len(data)  # no newline in a whole read: one line over the cap
            while True:
                chunk = f.read(1 << 20)
                if not chunk:  # the long line is still being written: its end comes later
                    if scan is not None:
                        scan.clear()
                        scan[offset] = skipped
                    return [], offset, 0
                cut = chunk.find(b"\n")
                if cut >= 0:
                    skipped += cut + 1
                    break
                skipped += len(chunk)
    except FileNotFoundError:
        return [], offset, 0
    if scan is not None:
        scan.clear()
    note = instead(skipped - 1)
    return [note], offset + skipped, skipped - len(note) - 1