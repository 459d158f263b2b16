"""The words the agent and the console share: version, ops, task phases, files, error codes, roles, names.

Standard library only, Python 3.9+: this module is deployed with the agent and
imported by the console and the trainer too, so each word is written here once.
"""

from __future__ import annotations

import re

PROTOCOL_VERSION = 11  # 2: metrics follow messages carry the file's own lines ("lines"), not records
# 3: the "system" op streams a host's CPU, memory and GPU load and its tasks' processes
# 4: "missing_blobs" says which files of a script's workdir a host lacks; "start" takes "workdir"
# 5: "status" says a task's backups' steps ("backups", a list) and the files of its newest ("backup_files")
# 6: "measure" asks a running task for its step-time breakdown at a step (MEASURE_FILE; docs/why-slow.md)
# 7: "submit", "job" and "cancel": a run's tasks as one Slurm job from a login host (agent/slurm.py); "pending"
# 8: "start" takes "refresh_work": a resume brings each task's copy of the script's files up to date
# 9: so does "submit" (its "work_refreshed" maps each task to what changed); a follow's lines are split at line
#    feeds only (a log's "\r", a progress bar's redraw, stays in its line)
# 10: "stacks" asks a running task where each of its threads is (STACKS_ASK, STACKS_FILE: trainer/stacks.py)
# 11: "env_status", "env_make", "env_cancel": a Python environment made offline from pushed wheels (agent/envs.py);
#     "start" and "probe" take "python_env" (the environment a task runs in)

# --------------------------------------------------------------------------- operations
# agent/server.py has one handler per op (Server.op_<name>) and its op table is built from them.

HELLO = "hello"
START = "start"
FOLLOW = "follow"
STATUS = "status"
LIST = "list"
STOP = "stop"
PORTS = "ports"
LOGS = "logs"
PROBE = "probe"
CHECK_PORTS = "check_ports"
LISTEN = "listen"
RELEASE = "release"
CONNECT = "connect"
SYSTEM = "system"
REMOVE = "remove"  # a run's folder on this host, once none of its tasks runs
MISSING_BLOBS = "missing_blobs"  # which of these sha256s have no blob here yet (a script's workdir)
PAUSE = "pause"  # a follow (by its request's id) sends nothing more until told to go on: the console is behind
MEASURE = "measure"  # a running task measures where its step time goes, at a step all its peers measure at too
SUBMIT = "submit"    # a run's tasks as one Slurm job, submitted from this (login) host
JOB = "job"          # a Slurm run's job: its state, Slurm's reason, its nodes
CANCEL = "cancel"    # stop a Slurm run's job
STACKS = "stacks"    # where each thread of a running task is now: its Python stacks, as the task dumps them
ENV_STATUS = "env_status"  # this host's platform, free disk, and whether it has an environment made (agent/envs.py)
ENV_MAKE = "env_make"      # make an environment from wheels pushed as blobs, offline: a stream of progress, then END
ENV_CANCEL = "env_cancel"  # end an env_make (by its request's id): its installer killed, nothing of it left
OPS = (HELLO, START, FOLLOW, STATUS, LIST, STOP, PORTS, LOGS, PROBE, CHECK_PORTS, LISTEN, RELEASE, CONNECT,
       SYSTEM, REMOVE, MISSING_BLOBS, PAUSE, MEASURE, SUBMIT, JOB, CANCEL, STACKS, ENV_STATUS, ENV_MAKE, ENV_CANCEL)

# The messages a follow streams: {"id": N, "type": ...}.
FOLLOWING = "following"  # the first: the offsets it reads from, and when the agent started the task
METRICS_MESSAGE = "metrics"
LOG_MESSAGE = "log"
END = "end"              # the last: the task's phase and exit record
# The messages a system op streams: {"id": N, "type": ...}, then END when the run's tasks here have ended.
SAMPLING = "sampling"    # the first: the tasks it samples and how often
SYSTEM_MESSAGE = "system"  # one sample (docs/metrics.md, "system")
# The messages an env_make streams: {"id": N, "type": PROGRESS, "stage": one of ENV_STAGES, ...}, then END.
PROGRESS = "progress"
ENV_DOWNLOADING = "downloading"  # a host that reaches the index fetches its wheels itself: "done" of "total" bytes
ENV_PREPARING, ENV_INSTALLING, ENV_CHECKING = "preparing", "installing", "checking"
ENV_STAGES = (ENV_DOWNLOADING, ENV_PREPARING, ENV_INSTALLING, ENV_CHECKING)

# --------------------------------------------------------------------------- task phases
# The agent reports RUNNING, FINISHED, FAILED or LOST (AGENT_PHASES); the console adds the others.

STARTING = "starting"             # the console has not heard from the task's agent yet
PENDING = "pending"               # a Slurm job's task that its node has not started yet (the job waits)
RUNNING = "running"               # its process runs
WAITING = "waiting for the cluster"  # the trainer has launched; TensorFlow waits for the other tasks
TRAINING = "training"             # the cluster has formed
FINISHED = "finished"             # exit code 0
FAILED = "failed"                 # another exit code, or a signal
LOST = "lost"                     # its supervisor vanished without recording the end (killed)
ERROR = "error"                   # the console cannot follow it any more (the agent refused, a key changed)
NOT_STARTED = "not started"       # a task of a resumed run that has no folder on its host yet
STOPPED = "stopped"               # ended by a stop someone asked for (the console's word, from the end's ``stopped``)
LEFT = "left the run"             # an elastic run went on without it (its host lost, or failing): the console's word

AGENT_PHASES = (PENDING, RUNNING, FINISHED, FAILED, LOST)
ALIVE = (RUNNING, WAITING, TRAINING)   # its process runs on its host
ENDED = (FINISHED, FAILED, LOST, ERROR, STOPPED, LEFT)

# --------------------------------------------------------------------------- a task's folder
# What the agent keeps in a task's run folder (<home>/runs/<run id>/<task name>/) besides its streams.

SPEC_FILE = "spec.json"            # what to run: argv, environment, cwd, the attempt (written by start or submit)
STATE_FILE = "state.json"          # its supervisor's pid, process group and start time, while it runs
EXIT_FILE = "exit.json"            # how it ended (its returncode): written once, when it ends
CHILD_FILE = "child.json"          # the supervised command's pid and start time
TF_CONFIG_FILE = "tf_config.json"  # the TF_CONFIG it was given
SUPERVISOR_LOG = "supervisor.log"  # its supervisor's own output

# --------------------------------------------------------------------------- a task's streams
# Files in the task's run folder, followed from byte offsets.

METRICS = "metrics.jsonl"
MAX_LINE = 1 << 20       # a metrics line longer than this is skipped (its size said), and the follow goes on
MESSAGE_LINES = 1 << 18  # a follow's message holds about this much of a file's lines (a longer line alone): the
                         # console decodes one in a few milliseconds, holding its interpreter no longer
STDOUT = "stdout.log"
STDERR = "stderr.log"
LOG_STREAMS = (STDOUT, STDERR)
STREAMS = (METRICS, *LOG_STREAMS)

# --------------------------------------------------------------------------- a script's workdir
# Each file once per host as <home>/blobs/<sha256>; each task's own copy in <task folder>/work/,
# its cwd, which argv names as "{work_dir}".

RUNS_DIR = "runs"  # <home>/runs/<run id>/<task name>: a task's run folder
BLOBS_DIR = "blobs"
WORK_DIR = "work"
SLURM_JOB_FILE = "slurm.json"  # in a Slurm run's folder: its job's id, each rank's task, the roles (agent/slurm.py)
HEARTBEAT = "heartbeat"         # in a Slurm task's folder: the node's time, written every HEARTBEAT_SECONDS (the
HEARTBEAT_SECONDS = 5.0         # login host sees no node's processes) ...
HEARTBEAT_STALE = 60.0          # ... and one unchanged this long (the login host's clock) without an end is lost
SLURM_JOB_ENDED = "job_ended"   # in a Slurm run's folder: its batch script ended, or its job was cancelled
SLURM_SYSTEM_DIR = "system"     # in a Slurm run's folder: <node>.jsonl, each node's system samples (a "system" op's)
SLURM_CANCELLED = "cancelled"   # in a Slurm run's folder: a stop someone asked for (the job's script restarts nothing)
# The k-th task of a Slurm node listens on this + k (TensorFlow's SlurmClusterResolver's): a submit's default, the
# trainer's Slurm mode's and the console's.
SLURM_PORT_BASE = 8888
# A Slurm job's states (squeue's %T) in which it may still run its tasks; any other is its end (or "GONE").
SLURM_LIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
                     "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED")
STACKS_ASK = "stacks.json"    # in a task's folder: {"ask", "asked"}, where its threads are asked for (the stacks op)
STACKS_FILE = "stacks.txt"    # the task's answer: "tfcc-stacks ASK", faulthandler's dump, "tfcc-stacks-end ASK"
STACKS_MARK = "tfcc-stacks"   # the answer's first and last lines begin with it
# The stacks op's ``state``: the task answered with its stacks, or what kept it from answering.
WHERE_ANSWERED, WHERE_STOPPED, WHERE_ZOMBIE, WHERE_SILENT = "answered", "stopped", "zombie", "silent"
PIPE_READ, PIPE_OPEN = "read", "open"  # how a task's thread waits on a named pipe (the stacks op's ``fifos``)
MEASURE_FILE = "measure.json"  # in a task's folder: {"ask", "at_step", "asked"}, a breakdown asked for (its trainer
                               # takes it away once read; docs/why-slow.md)
STOP_MARKER = "stop_requested"  # in a task's folder while a stop someone asked for ends it (its trainer reads it)
ENVS_DIR = "envs"            # <home>/envs/<hash>/: a Python environment tfcc made (agent/envs.py)
ENV_MARKER = "tfcc-env.json"  # in an environment's folder: what it holds; written last, before it is renamed in
TOOLS_DIR = "tools"          # <home>/tools/: the installer tfcc pushed (uv), by its content's hash
HOME_ID_FILE = "home-id"     # <home>/home-id: a random name of this home (hosts that share a home say the same)
BACKUP_DIR = "backup"  # a task's backups in its run folder (tfcc's trainer writes them; a resume needs them)
# A backup's files: backup-<global step>.index (written last), .data-<shard>-of-<shards>, and .plan.json (the
# plan it was made under); the checkpoint list ("checkpoint") names the backups TensorFlow's reader sees.
_BACKUP_INDEX = re.compile(r"backup-(\d{1,18})\.index\Z")  # match(): from the name's start; \Z: no newline after
_BACKUP_FILE = re.compile(r"backup-(\d{1,18})\.(?:index|data-\d{5}-of-\d{5}|plan\.json)\Z")
BACKUP_LIST = "checkpoint"
MAX_BACKUPS_SAID = 16    # a task's newest backups a status says (it keeps two)
MAX_BACKUP_FILES = 1024  # files of one backup (its data shards)


def backup_step(name: str):
    """The global step of a backup's file ``name`` (None for any other name: a hostile host's, a partial save's)."""
    found = _BACKUP_FILE.match(name) if isinstance(name, str) else None
    return int(found.group(1)) if found else None


def backup_steps(names) -> list:
    """The global steps of the whole backups among a backup folder's file ``names`` (those whose index is there:
    TensorFlow writes it last, so a save cut short has none), oldest first."""
    return sorted(int(found.group(1)) for found in map(_BACKUP_INDEX.match, names) if found)


def backup_list(steps) -> str:
    """TensorFlow's checkpoint list (``BACKUP_LIST``) naming the backups of ``steps``, the newest last, by names
    relative to its folder (a folder copied to another task or host names its own files)."""
    names = [f"backup-{s}" for s in sorted(steps)]
    return f'model_checkpoint_path: "{names[-1]}"\n' + "".join(f'all_model_checkpoint_paths: "{n}"\n' for n in names)

# --------------------------------------------------------------------------- environment variables

HOME_VARIABLE = "TFCC_HOME"                  # the agent's folder on a host (default ~/.tfcc): runs/, dist/, blobs/
AGENT_STDERR_VARIABLE = "TFCC_AGENT_STDERR"  # the file the agent's stderr goes to; a clean exit removes it
POLL_ONLY_VARIABLE = "TFCC_AGENT_POLL"        # set: follows poll the files instead of using inotify
# What the agent gives a task, besides TF_CONFIG:
RUN_DIR_VARIABLE = "TFCC_RUN_DIR"            # its run folder, where it writes METRICS
RUN_ID_VARIABLE = "TFCC_RUN_ID"
KERAS_REASON_VARIABLE = "TFCC_KERAS_REASON"  # a user's code: the Keras tfcc gave it and why (its records say it)
TASK_VARIABLE = "TFCC_TASK"                  # its task name (task_name below)
ATTEMPT_VARIABLE = "TFCC_ATTEMPT"            # 1 for its run's first launch, then one more for each relaunch
MEASURE_VARIABLE = "TFCC_MEASURE"            # "0": its steps carry no flag and it cannot be asked why it is slow

# --------------------------------------------------------------------------- refusals
# {"id": N, "ok": false, "error": "what is wrong and what to do", "code": <one of these>}

BAD_REQUEST = "bad-request"            # not a JSON object on a line
UNKNOWN_OP = "unknown-op"
PROTOCOL_MISMATCH = "protocol-mismatch"
BAD_NAME = "bad-name"                  # a run id or task that cannot name a folder
BAD_ARGUMENT = "bad-argument"          # a missing or out-of-range field
TASK_EXISTS = "task-exists"            # a fresh start of a task the run already has
ALREADY_RUNNING = "already-running"
NO_SUCH_TASK = "no-such-task"
MISSING_BLOB = "missing-blob"          # a start names a workdir file whose blob is not (whole) on the host
FIREWALL = "firewall"                  # a start's firewall rules could not be set (agent/firewall.py)
SLURM = "slurm"                        # Slurm's commands refused or are missing (agent/slurm.py)
NO_SPACE = "no-space"                  # an environment would not fit in the free disk space
NO_ENVIRONMENT = "no-environment"      # a start's python_env is not made on this host (tfcc provision makes it)
INSTALL_FAILED = "install-failed"      # the installer failed, or what it installed is not what was asked
DOWNLOAD_FAILED = "download-failed"    # a host that reaches the index could not download a wheel (then it is pushed)
AGENT_BUG = "agent-bug"                # an unexpected exception in the agent
ERROR_CODES = (BAD_REQUEST, UNKNOWN_OP, PROTOCOL_MISMATCH, BAD_NAME, BAD_ARGUMENT, TASK_EXISTS, ALREADY_RUNNING,
               NO_SUCH_TASK, MISSING_BLOB, FIREWALL, SLURM, NO_SPACE, NO_ENVIRONMENT, INSTALL_FAILED, DOWNLOAD_FAILED,
               AGENT_BUG)


# --------------------------------------------------------------------------- roles, names and addresses

# A task's role: TF_CONFIG's task types (trainer/tf_config.py holds the rules about them).
CHIEF, WORKER, PS, EVALUATOR = "chief", "worker", "ps", "evaluator"
ROLES = (CHIEF, WORKER, PS, EVALUATOR)

# A run id or a task name names a folder on every host: letters, digits, '.', '_' and '-' only.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def name_problem(kind: str, value) -> str | None:
    """Why ``value`` cannot name a run or a task (a folder on every host), or None."""
    if not isinstance(value, str) or not _NAME.match(value):
        return (f"{kind} {value!r} is not a valid name: use letters, digits, '.', '_' and '-', "
                "starting with a letter or digit (at most 128)")
    return None


def task_name(role: str, index: int) -> str:
    """``worker-0``: a task's name, its index counting within its role."""
    return f"{role}-{index}"


def parse_task_name(name: str) -> tuple[str, int]:
    """``("worker", 0)`` from ``"worker-0"``; ValueError if ``name`` is not role-index."""
    role, sep, index = name.rpartition("-")
    if not sep or not role or not index.isdigit():
        raise ValueError(f"task name {name!r} is not role-index (like worker-0)")
    return role, int(index)


def format_address(host: str, port) -> str:
    """``host:port``, an IPv6 literal in brackets (``[::1]:2222``), as TF_CONFIG writes it."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def parse_address(address: str) -> tuple[str, int]:
    """``(host, port)`` from ``host:port`` or ``[v6]:port`` (the host without brackets); ValueError if neither."""
    host, sep, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"address {address!r}: an IPv6 host goes in brackets, like [::1]:2222")
    if not sep or not host:
        raise ValueError(f"address {address!r} has no host:port")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {address!r} has port {port!r}; a port is a number from 1 to 65535")
    return host, int(port)
