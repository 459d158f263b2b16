"""Export a cluster to plain launch scripts, a Slurm batch script, a Kubeflow TFJob or a TrainJob (Qt-free).

``render`` turns a cluster into the files of one format (relative name -> text), which the
window previews and ``write`` puts in a folder; ``tfcc export`` does both. See
docs/graduation.md for the paths side by side.

What each format carries over from the cluster: every task's role (``TF_CONFIG``), the
training settings (``Training.trainer_args``, or the user's script and its args), the
environment tfcc gives each task (``TF_USE_LEGACY_KERAS`` for the Keras its code gets, its GPUs in
``CUDA_VISIBLE_DEVICES``, none for a ps), the evaluator's checkpoint folder and the
restart budget (``max_restarts``). What none can carry is said in the export's notes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agent.protocol import SLURM_PORT_BASE
from agent.slurm import SERVER_WAIT, attempt_loop
from console import cluster as cl
from console import workdir
from console.cluster_fields import SLURM
from console.errors import TfccError
from console.run.launch import GPUS, LEGACY_KERAS, check_user_file, gpu_environment, keras_choice, trainer_args
from console.run.placement import placement_for
from trainer.slurm import format_jobs, gpu_options, rank_ranges
from trainer.tf_config import CHIEF, EVALUATOR, PS, ROLES, WORKER

FORMATS = ("scripts", "slurm", "tfjob", "trainjob")
FORMAT_LABELS = {"scripts": "launch scripts (one per host)", "slurm": "Slurm batch script (sbatch)",
                 "tfjob": "Kubeflow TFJob manifest (Training Operator v1, kubectl apply)",
                 "trainjob": "Kubeflow TrainJob and its runtime (Trainer v2, kubectl apply)"}

TFJOB_PORT = 2222           # the Kubeflow training operator's default port (tfjob-port)
IMAGE_PLACEHOLDER = "REPLACE-WITH-YOUR-IMAGE"
SCRIPTS_PORT_BASE = 2222    # scripts: "auto" ports become 2222, 2223, ... on each host (skipping fixed ones)
STOP_GRACE = 10             # scripts: seconds between SIGTERM and SIGKILL (TensorFlow may catch SIGTERM)
SLURM_SERVER_WAIT = SERVER_WAIT  # slurm, parameter servers: srun kills servers still there this long after the chief
TFJOB_ROOT = "/opt/tfcc"    # tfjob, trainjob: where the image holds tfcc's agent/ and trainer/ (and user/)
TFJOB_RUNS = "/tfcc-runs"   # tfjob, trainjob: the volume that holds every task's run folder
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"  # the operator's label on each pod
TFJOB_TYPES = {CHIEF: "Chief", PS: "PS", WORKER: "Worker", EVALUATOR: "Evaluator"}
TRAINER_GROUP = "trainer.kubeflow.org"  # trainjob: Kubeflow Trainer v2's TrainJob and TrainingRuntime
TRAINER_API = f"{TRAINER_GROUP}/v1alpha1"
TRAINJOB_PORT = 2222        # trainjob: every task's port (each pod has its own address)
TRAINJOB_CONTAINER = "tensorflow"  # trainjob: the container of every pod
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # JobSet's label on each pod: the TrainJob's name
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # the Job controller's annotation on an Indexed pod
POD_NAME_SUFFIX = "-abcde"  # the random end of a Job's pod name, as JobSet's webhook counts it (63 in all)
REFUSED_INPUT = 2           # the exit code of a task that refused its input (a restart would not help)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# TF_CONFIG of a TFJob lists the evaluator in its cluster; tfcc's trainer (like TensorFlow's coordinator,
# which would wait for it) wants it left out: every container drops it, then runs the command.
_DROP_EVALUATOR = ("import json, os, sys; c = json.loads(os.environ['TF_CONFIG']); "
                   "c['cluster'].pop('evaluator', None); os.environ['TF_CONFIG'] = json.dumps(c); "
                   "os.execvp(sys.argv[1], sys.argv[1:])")


class _Dumper(yaml.SafeDumper):
    """YAML for people: a value used twice is written twice, never as an anchor and an alias."""

    def ignore_aliases(self, data) -> bool:
        return True


class ExportError(TfccError):
    """A cluster that cannot be exported as asked; the message says what to do."""


class FolderNotEmpty(ExportError):
    """The export's folder holds files and replacing them was not asked for (``cause`` says which)."""


@dataclass
class Options:
    """What a format needs beyond the cluster."""

    image: str = ""                 # tfjob, trainjob: the container image (a placeholder and a note when empty)
    time_limit: str = SLURM["time"].default  # slurm: --time (a cluster file's [slurm] default)
    port_base: int = SLURM_PORT_BASE  # slurm: the first port of each node's tasks
    name: str = "tfcc"              # the Slurm job's, the TFJob's and the TrainJob's (and its runtime's) name
    cpus_per_task: int = SLURM["cpus_per_task"].default  # slurm: --cpus-per-task
    into: Path | None = None        # where it is written: its files are none of the user's code


@dataclass
class Export:
    """The files of one format (relative name -> text), and notes for the person (one line each)."""

    files: dict[str, str]
    notes: list[str]
    executable: frozenset = frozenset()  # names written with the execute bit
    copies: dict[str, Path] = field(default_factory=dict)  # name -> a file of the user's code, copied as it is

    @property
    def names(self) -> list[str]:
        """Every file it writes: its own, then the code's copies."""
        return list(self.files) + list(self.copies)


def render(fmt: str, cluster: cl.Cluster, options: Options | None = None) -> Export:
    """The files ``fmt`` makes of ``cluster``; ``ExportError`` for an unknown format or a cluster
    the format cannot carry."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    return {"scripts": _scripts, "slurm": _slurm, "tfjob": _tfjob,
            "trainjob": _trainjob}[fmt](cluster, options or Options())


def write(export: Export, folder: str | Path, force: bool = False) -> list[Path]:
    """Write ``export`` into ``folder`` (made if missing); the paths written. A folder that exists
    and is not empty is an ``ExportError`` without ``force``, and then nothing is written.

    ``force`` replaces the files of the export that are there and leaves the folder's other files
    (a launch script's ``runs/`` with its outputs, say) alone. Each file is written whole or not
    at all (a temporary file renamed into place)."""
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"{str(folder)!r} is a file, not a folder", "choose a folder to export into")
    if folder.is_dir() and not force:
        try:
            held = sorted(p.name for p in folder.iterdir())
        except OSError as exc:
            raise ExportError(f"cannot read folder {str(folder)!r} ({exc.strerror})", "check its permissions") from None
        if held:
            shown = ", ".join(held[:3]) + (", …" if len(held) > 3 else "")
            raise FolderNotEmpty(f"folder {str(folder)!r} is not empty (it holds {shown})",
                              "choose a new or empty folder, or add --force to replace the exported files in it")
    for name in export.names:
        if Path(name).is_absolute() or ".." in Path(name).parts:  # an export writes inside its folder, only
            raise ExportError(f"the export names a file outside its folder ({name!r})", "rename what names it")
    for name in export.names:  # a file of the export where the folder has a folder: refuse before writing
        target = folder / name
        if target.is_dir():
            raise ExportError(f"{str(target)!r} is a folder, where the export writes a file",
                              "move it away or choose another folder")
    written = []
    try:
        for name in export.names:
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_file(target, export.files.get(name), name in export.executable, export.copies.get(name))
            written.append(target)
    except OSError as exc:
        where = exc.filename or str(folder)
        raise ExportError(f"cannot write {where!r} ({exc.strerror})",
                          "check that the folder is writable and has space") from None
    return written


def _write_file(path: Path, text: str | None, executable: bool, source: Path | None = None) -> None:
    """``text``, or a copy of ``source`` (a file of the user's code), written whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
    try:
        if source is not None:
            shutil.copyfile(source, tmp)
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
        if executable:
            mode = os.stat(tmp).st_mode
            os.chmod(tmp, mode | ((mode & 0o444) >> 2))  # +x wherever it is readable
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# --------------------------------------------------------------------------- shared


class _Raw(str):
    """A shell word written as is (it expands a variable); every other word is quoted."""


def _environment(cluster: cl.Cluster, me: str) -> str:
    """Shell lines that give the tasks the cluster's env (its values, quoted) and secret_env (named only: the
    values come from the environment the script runs in, checked first)."""
    t = cluster.training
    lines = [f"export {name}={shlex.quote(value)}\n" for name, value in t.env.items()]
    if t.secret_env:
        names = " ".join(t.secret_env)
        lines.append(f"# Secrets (the cluster's secret_env): their values come from the environment this runs in;\n"
                     f"# tfcc never writes them down.\n"
                     f"for name in {names}; do\n"
                     f'  if [ -z "${{!name+x}}" ]; then echo "{me}: $name is not set: export it, then run this '
                     f'again" >&2; exit 2; fi\n'
                     f"done\nexport {names}\n")
    return "".join(lines)


def _beside(rel: str) -> _Raw:
    """``rel``, a path in the folder the script is in (``$here``), as one shell word whatever its name holds."""
    quoted = shlex.quote(rel)
    return _Raw(f'"$here/{rel}"' if quoted == rel else '"$here"/' + quoted)


def _words(argv, indent: str = "    ", width: int = 100) -> str:
    """``argv`` as shell words, quoted, in lines of about ``width`` (continued with a backslash)."""
    lines, line = [], ""
    for word in (w if isinstance(w, _Raw) else shlex.quote(w) for w in argv):
        over = len(indent) + len(line) + 1 + len(word) - width
        if line and over > 0 and (word.startswith("-") or over > 40):  # a line starts at an option: its value stays with it
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return f" \\\n{indent}".join(lines)


def _roles(cluster: cl.Cluster) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task in cluster.tasks:
        counts[task.role] = counts.get(task.role, 0) + 1
    return counts


def _used_hosts(cluster: cl.Cluster) -> list[cl.Host]:
    return [h for h in cluster.hosts if any(t.host == h.name for t in cluster.tasks)]


def _comment_safe(text: str) -> str:
    """``text`` for a comment line of a script or a YAML file: each character that is not printable ('\\n', '\\r',
    U+2028 and U+2029, which YAML reads as line breaks, other controls) as '?', so nothing ends the comment."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _describe(cluster: cl.Cluster) -> str:
    """``2 workers on 1 host (local), training digits for 5 epochs``."""
    counts = _roles(cluster)
    parts = [f"{n} {role}{'s' if n > 1 else ''}" for role in ROLES
             if (n := counts.get(role))]
    roles = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    hosts = [machine for machine, tasks in placement_for(cluster).machines().items() if tasks]
    t = cluster.training
    if t.script:
        what = f"running the script {_comment_safe(Path(t.script).name)}"
    elif t.model_file:
        what = f"training the model file {_comment_safe(Path(t.model_file).name)} for {t.epochs} epochs"
    else:
        what = f"training {t.workload} for {t.epochs} epochs"
    return (f"{roles} on {len(hosts)} host{'s' if len(hosts) > 1 else ''} "
            f"({', '.join(hosts)}), {what}")


USER_DIR = "user"  # an export's copy of the user's code (its workdir), or its model file


@dataclass(frozen=True)
class _Code:
    """A user's code as an export carries it: its workdir's files under ``user/``, each task running it from a copy
    of its own (as ``tfcc run`` does: relative paths and what it writes stay the task's), as ``python SCRIPT`` or
    ``python -m MODULE``."""

    copies: dict[str, Path]   # "user/<rel>" -> the file here
    executable: frozenset
    script: str               # the script's path in the workdir; "" for a module
    module: str
    root: Path
    collected: workdir.Workdir  # its files as collected (unhashed): what the Keras is read from

    def argv(self, python, args) -> list:
        return [python, "-m", self.module, *args] if self.module else [python, self.script, *args]

    @property
    def entry(self) -> str:
        """How the tasks run it, in words: ``python -m trainer.task`` or ``python train.py``."""
        return f"python -m {self.module}" if self.module else f"python {self.script}"


def _code(cluster: cl.Cluster, options: Options) -> _Code | None:
    """A user's script or module with its workdir (collected as ``tfcc run`` ships it), or None."""
    t = cluster.training
    if not t.user_code:
        return None
    if t.script:
        _user_file(cluster)  # a script that is not there, or no text: said as tfcc run says it
    try:
        collected = workdir.collect(t, hashed=False, leave_out=options.into)
    except TfccError as exc:
        raise ExportError(exc.cause, exc.fix) from None
    copies = {f"{USER_DIR}/{f.rel}": f.path for f in collected.files}
    executable = frozenset(f"{USER_DIR}/{f.rel}" for f in collected.files if f.executable)
    return _Code(copies, executable, "" if t.module else collected.script, t.module, collected.root, collected)


def _keras_line(cluster: cl.Cluster, code: _Code | None) -> str:
    """The shell line that gives the tasks their Keras (``keras_choice``: tf-keras for tfcc's trainer and where
    Keras 3 cannot run fit; a user's code the Keras it was written for, read from ``code``'s files), and why."""
    flavour, why = keras_choice(cluster, code.collected if code is not None else None)
    why = " ".join(why.split())  # a file's name in it may hold a newline: the comment stays one line
    if flavour == cl.TF_KERAS:
        return f"export {LEGACY_KERAS}=1  # tf-keras (Keras 2): {why}\n"
    if flavour == cl.KERAS3:
        return f"export {LEGACY_KERAS}=0  # Keras 3: {why}\n"
    return f"# {LEGACY_KERAS} as this machine has it: {why}\n"


def _user_file(cluster: cl.Cluster) -> tuple[str, str] | None:
    """The user's model file as ``("user/<name>", text)``, checked as ``tfcc run`` checks it."""
    t = cluster.training
    what, path = ("script", t.script) if t.script else ("model_file", t.model_file)
    if not path:
        return None
    try:
        local = check_user_file(path, what)
        return f"user/{local.name}", local.read_text(encoding="utf-8")
    except TfccError as exc:
        raise ExportError(str(exc)) from None
    except OSError as exc:
        raise ExportError(f"training.{what} {path!r} cannot be read ({exc.strerror})", "check its permissions") from None
    except UnicodeDecodeError:
        raise ExportError(f"training.{what} {path!r} is not UTF-8 text", "save it as UTF-8") from None


def _gpu_counts(cluster: cl.Cluster, roles=None) -> dict[str, int]:
    """GPUs per task name (of ``roles``, default all)."""
    return {name: len(task.gpus) for name, task in zip(cluster.task_names(), cluster.tasks)
            if roles is None or task.role in roles}


def _uneven(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counts.items())


# --------------------------------------------------------------------------- scripts


def concrete_ports(cluster: cl.Cluster) -> tuple[list[int], dict[str, list[int]]]:
    """Each task's port for the scripts (an evaluator's is 0: it serves nothing), and the ports
    chosen for ``"auto"`` per host: 2222 upward on each address, past the ports fixed there."""
    fixed: dict[str, set[int]] = {}
    for task in cluster.tasks:
        if task.port != "auto" and task.in_cluster:
            fixed.setdefault(cluster.host(task.host).tf_host, set()).add(int(task.port))
    following: dict[str, int] = {}
    ports: list[int] = []
    chosen: dict[str, list[int]] = {}
    for task in cluster.tasks:
        if not task.in_cluster:
            ports.append(0)
        elif task.port != "auto":
            ports.append(int(task.port))
        else:
            address = cluster.host(task.host).tf_host
            port = following.get(address, SCRIPTS_PORT_BASE)
            while port in fixed.get(address, set()):
                port += 1
            following[address] = port + 1
            ports.append(port)
            chosen.setdefault(task.host, []).append(port)
    if max(ports) > 65535:
        raise ExportError("a host has too many tasks with port \"auto\" for ports from 2222 up",
                          "give the tasks fixed ports in the cluster file")
    return ports, chosen


_LAUNCH_HEAD = """\
#!/usr/bin/env bash
# {me}: start host {host}'s tasks of a tfcc cluster, as tfcc would ({made}).
# The cluster: {summary}.
#{listing}
# Start every host's launch script, each on its host, in any order (README.md):
#   bash {me}
# Each task runs in its folder $TFCC_RUNS/<task> (default: runs/ beside this script), which holds its
# metrics.jsonl, stdout.log, stderr.log, backups and the saved model. Running the script again in the
# same folders resumes from the tasks' last backups. Ctrl-C stops this host's tasks.
# When a task fails, this script stops the others here and exits 1; it exits 0 when all finished.
set -u
me={me_word}
here=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)
PYTHON=${{PYTHON:-{python}}}
export TFCC_ROOT=${{TFCC_ROOT:-$here}}  # a folder that holds tfcc's agent/ and trainer/
export PYTHONPATH=$TFCC_ROOT${{PYTHONPATH:+:$PYTHONPATH}}
{keras}RUNS=${{TFCC_RUNS:-$here/runs}}
"""

_IMPORT_CHECK = """\
if ! "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("trainer") and u.find_spec("agent")))'; then
  echo "$me: $PYTHON cannot import tfcc's trainer: copy tfcc's agent/ and trainer/ folders beside this script," \\
       "or set TFCC_ROOT to a folder that holds them (or PYTHON to an interpreter that has them)" >&2
  exit 2
fi
"""

_START_FAILED = """\
start_failed() {{  # a task cannot start: those started here stop (their peers would wait for it), then exit 2
  echo "$me: $1; stopping this host's tasks started so far" >&2
  if [ ${{#pids[@]}} -gt 0 ]; then
    kill -TERM "${{pids[@]}}" 2>/dev/null
    (sleep {grace}; kill -KILL "${{pids[@]}}" 2>/dev/null) </dev/null >/dev/null 2>&1 &
  fi
  exit 2
}}
"""

_COPY_CODE = """\
copy_code() {{  # a task's own copy of {user}/ in $1/work, whole or not at all (a copy cut short is not kept)
  local tmp
  tmp=$(mktemp -d "$1/.work.XXXXXX") || return 1
  cp -R "$here/{user}/." "$tmp" && mv "$tmp" "$1/work" && return 0
  rm -rf "$tmp"
  return 1
}}
"""

_LAUNCH_WAIT = """\
# Wait for every task. When one fails, stop the others here: their peers fail or would wait for it.
stopping=0 interrupted=0 killers=()
stop_tasks() {{  # SIGTERM, then SIGKILL after {grace} s (TensorFlow may catch SIGTERM)
  kill -TERM "$@" 2>/dev/null
  (sleep {grace}; kill -KILL "$@" 2>/dev/null) </dev/null >/dev/null 2>&1 &
  killers+=("$!")
  disown "$!"  # not a task: "wait -n" below must not take its end for a task's
}}
on_signal() {{
  if [ "$stopping" = 1 ]; then kill -KILL "${{pids[@]}}" 2>/dev/null; return; fi
  stopping=1 interrupted=1
  echo "$me: stopping this host's tasks (again to kill them now)" >&2
  stop_tasks "${{pids[@]}}"
}}
trap on_signal INT TERM
{server_setup}for _ in "${{pids[@]}}"; do
  wait -n 2>/dev/null
  code=$?
  [ "$stopping" = 1 ] && break
  if [ "$code" -ne 0 ]; then
    echo "$me: a task failed (exit code $code); stopping this host's other tasks" >&2
    stopping=1
    stop_tasks "${{pids[@]}}"
    break
  fi
{chief_done}done
failed=0
for i in "${{!pids[@]}}"; do
  while :; do  # a trapped signal cuts a wait short: wait again while the task runs
    wait "${{pids[$i]}}" 2>/dev/null  # (no "Killed" notice: the line below says it)
    code=$?
    [ "$code" -le 128 ] && break
    kill -0 "${{pids[$i]}}" 2>/dev/null || break
  done
  if [ "$code" -eq 0 ]; then
    echo "$me: ${{names[$i]}} finished"
{server_status}  else
    echo "$me: ${{names[$i]}} ended with exit code $code; its log: $RUNS/${{names[$i]}}/stderr.log" >&2
    failed=1
  fi
done
[ ${{#killers[@]}} -gt 0 ] && kill "${{killers[@]}}" 2>/dev/null
[ "$interrupted" = 1 ] && [ "$failed" = 1 ] && exit 130
exit "$failed"
"""

_SERVER_SETUP = """\
servers_ended=0
"""

_CHIEF_DONE = """\
  if [ "$servers_ended" = 0 ] && ! kill -0 "$chief_pid" 2>/dev/null; then
    # Parameter-server training is over when the chief (the coordinator) finishes: end the servers here.
    servers_ended=1
    [ ${{#servers[@]}} -gt 0 ] && echo "$me: the chief finished; ending the servers here" && stop_tasks "${{servers[@]}}"
  fi
"""

_SERVER_STATUS = """\
  elif [ "$servers_ended" = 1 ] && [[ " ${servers[*]:-} " == *" ${pids[$i]} "* ]]; then
    echo "$me: ${names[$i]} ended after the chief finished"
"""


def _scripts(cluster: cl.Cluster, options: Options) -> Export:
    if not cluster.hosts:  # a Slurm cluster file: its nodes are Slurm's to pick, none to launch on by hand
        raise ExportError("launch scripts start each host's tasks by hand, and this cluster has no hosts of its own "
                          "(Slurm picks its nodes)", "export it as slurm, or as tfjob or trainjob for Kubernetes")
    ports, chosen = concrete_ports(cluster)
    names = cluster.task_names()
    configs = [cluster.tf_config(i, ports) for i in range(len(cluster.tasks))]
    code = _code(cluster, options)
    user = None if code else _user_file(cluster)
    keras = _keras_line(cluster, code)  # its code read once for every host's script
    t = cluster.training
    files: dict[str, str] = {}
    hosts = _used_hosts(cluster)
    for host in hosts:
        files[f"launch-{host.name}.sh"] = _launch_script(cluster, host, ports, names, configs, code, keras)
    files["README.md"] = _scripts_readme(cluster, ports, names, code)
    if user:
        files[user[0]] = user[1]
    notes = [f"{len(hosts)} launch script{'s' if len(hosts) > 1 else ''}: run each on its host "
             f"({', '.join(f'launch-{h.name}.sh on {h.name}' for h in hosts)}); README.md says how"]
    if chosen:
        listing = "; ".join(f"{host}: {', '.join(map(str, p))}" for host, p in chosen.items())
        notes.append(f"tasks with port \"auto\" got fixed ports ({listing}): they must be free on those hosts when "
                     "the scripts run (tfcc picks free ports at each run; a script cannot), else set ports in the "
                     "cluster file and export again")
    notes.append("each host needs tfcc's agent/ and trainer/ folders beside its launch script (or TFCC_ROOT "
                 "naming a folder that has them) and Python with TensorFlow 2.21 and tf-keras 2.21"
                 if code is None else
                 f"each host needs this folder with user/ ({code.root}'s {len(code.copies)} files; each task runs "
                 f"{code.entry} in a copy of its own), and Python with what the code imports")
    if cluster.parameter_server:
        notes.append("parameter-server training: the workers and ps serve until stopped; the chief's host's script "
                     "ends its own when the chief finishes, on the other hosts press Ctrl-C then")
    if t.max_restarts:
        notes.append(f"the scripts do not restart failed tasks (tfcc does, up to {t.max_restarts} times): run every "
                     "host's script again and the tasks resume from their last backups")
    return Export(files, notes, frozenset(f"launch-{h.name}.sh" for h in hosts) | (code.executable if code else set()),
                  dict(code.copies) if code else {})


def _launch_script(cluster: cl.Cluster, host: cl.Host, ports: list[int], names: list[str],
                   configs: list[str], code: _Code | None = None, keras: str | None = None) -> str:
    t = cluster.training
    me = f"launch-{host.name}.sh"
    mine = [i for i, task in enumerate(cluster.tasks) if task.host == host.name]
    listing = "".join(f"\n#   {names[i]:<12} " + (f"{host.tf_host}:{ports[i]}" if ports[i] else "(evaluates the "
                                                     "chief's checkpoints)") for i in mine)
    python = host.interpreter
    out = [_LAUNCH_HEAD.format(me=me, me_word=shlex.quote(me), host=host.name, made="exported by tfcc export scripts",
                               summary=_describe(cluster), listing=listing, python=shlex.quote(python),
                               keras=keras if keras is not None else _keras_line(cluster, code))]
    if t.model_file:
        out.append(f"export TFCC_MODEL_FILE_ORIGIN={shlex.quote(str(Path(t.model_file).expanduser().resolve()))}"
                   "  # how errors name the model file\n")
    out.append(_environment(cluster, "$me"))
    if code is None:
        out.append(_IMPORT_CHECK)
    out.append("\npids=() names=()\n" + _START_FAILED.format(grace=STOP_GRACE)
               + (_COPY_CODE.format(user=USER_DIR) if code is not None else ""))
    for i in mine:
        task, name = cluster.tasks[i], names[i]
        folder = _Raw(f'"$RUNS/{name}"')
        if code is not None:
            argv = code.argv(_Raw('"$PYTHON"'), t.args)
        else:
            model = _beside(f"user/{Path(t.model_file).name}") if t.model_file else None
            argv = [_Raw('"$PYTHON"'), "-m", "trainer", "--run-dir", folder, *trainer_args(cluster, model)]
        env = [f"  export TF_CONFIG={shlex.quote(configs[i])}",
               f'  export TFCC_RUN_DIR="$RUNS/{name}" TFCC_TASK={name}']
        for key, value in gpu_environment(task).items():
            env.append(f"  export {key}={value}" + ("" if value else "  # a ps holds variables on its CPU: no GPU "
                                                                      "memory taken"))
        where = f"{host.tf_host}:{ports[i]}" if ports[i] else "no port: it reads the chief's checkpoints"
        copy = (f'[ -d "$RUNS/{name}/work" ] || copy_code "$RUNS/{name}" || start_failed "cannot copy the code '
                f'into $RUNS/{name}/work"  # its own copy of the code (run again: kept)\n' if code is not None else "")
        into, logs = ("work", "../") if code is not None else ("", "")
        out.append(f"\n# {name} ({where})\n"
                   f'mkdir -p "$RUNS/{name}" || start_failed "cannot make $RUNS/{name}"\n'
                   + copy +
                   "(\n"
                   f'  cd "$RUNS/{name}{"/" + into if into else ""}" || exit 2\n'
                   + "\n".join(env) + "\n"
                   f"  exec {_words(argv)} \\\n"
                   f"    </dev/null >>{logs}stdout.log 2>>{logs}stderr.log\n"
                   ") &\n"
                   f'pids+=("$!") names+=({name})\n'
                   + ('chief_pid=$!\n' if task.role == CHIEF and cluster.parameter_server else "")
                   + f'echo "$me: {name} started (pid $!); its output: $RUNS/{name}/"\n')
    serving = cluster.parameter_server and any(cluster.tasks[i].role == CHIEF for i in mine)
    if serving:
        servers = [k for k, i in enumerate(mine) if cluster.tasks[i].role in (PS, WORKER)]
        out.append("servers=(" + " ".join(f'"${{pids[{k}]}}"' for k in servers) + ")"
                   "  # ended when the chief finishes\n")
    out.append("\n" + _LAUNCH_WAIT.format(grace=STOP_GRACE, server_setup=_SERVER_SETUP if serving else "",
                                          chief_done=_CHIEF_DONE.format() if serving else "",
                                          server_status=_SERVER_STATUS if serving else ""))
    return "".join(out)


def _scripts_readme(cluster: cl.Cluster, ports: list[int], names: list[str], user: _Code | None) -> str:
    t = cluster.training
    hosts = _used_hosts(cluster)
    rows = "\n".join(f"| {h.name} | `launch-{h.name}.sh` | "
                     + ", ".join(f"{names[i]} ({h.tf_host}:{ports[i]})" if ports[i] else names[i]
                                 for i, task in enumerate(cluster.tasks) if task.host == h.name) + " |"
                     for h in hosts)
    if user is not None:
        code = (f"- The user's code is in `user/` (a copy of {user.root}, as `tfcc run` ships it); each task runs "
                f"`{user.entry}` in a copy of its own, `runs/<task>/work/` (made at its first start, kept when the "
                "script runs again), with the Python that `PYTHON` names (default: the host's `python` from the "
                "cluster file, else `python3`), which needs what the code imports (TensorFlow, tf-keras).")
    else:
        code = ("- tfcc's trainer: copy tfcc's `agent/` and `trainer/` folders beside the launch scripts on every\n"
                "  host (`rsync -a /path/to/tfcc/agent /path/to/tfcc/trainer HOST:this-folder/`), or set `TFCC_ROOT`\n"
                "  to a folder that holds them (a tfcc checkout), or put them on `PYTHONPATH`.\n"
                "- Python with TensorFlow 2.21 and tf-keras 2.21 (and scikit-learn for `digits`): `PYTHON` names the\n"
                "  interpreter (default: the host's `python` from the cluster file, else `python3`).")
        if t.model_file:
            code += f"\n- The model file is in `user/{Path(t.model_file).name}`."
    ps = ("\n\nParameter-server training: the workers and the ps serve until they are stopped. The script on the "
          "chief's host ends its own servers when the chief finishes; on the other hosts press Ctrl-C (or "
          "`kill -TERM` the script) once the chief has finished: they end cleanly." if cluster.parameter_server
          else "")
    auto = [i for i, task in enumerate(cluster.tasks) if task.port == "auto" and task.in_cluster]
    port_note = (f"\n\nThe tasks whose port is `auto` in the cluster file got fixed ports here, {SCRIPTS_PORT_BASE} "
                 "upward on each host past the ports fixed there: "
                 + ", ".join(f"{names[i]} {ports[i]}" for i in auto)
                 + ". They must be free when the scripts run (tfcc picks free ports at each run; a script "
                 "cannot); to choose others, set the ports in the cluster file and export again."
                 if auto else "")
    return f"""# Launch scripts exported by tfcc

The cluster: {_describe(cluster)}.

Each host's script sets every task's `TF_CONFIG`, the environment tfcc sets (`TF_USE_LEGACY_KERAS` for the
Keras the code gets, `CUDA_VISIBLE_DEVICES` from the task's GPUs, none for a ps) and starts the host's tasks with
the cluster's training settings, as `tfcc run` would.

| host | script | tasks (TF_CONFIG address) |
|------|--------|---------------------------|
{rows}

## What each host needs

- This folder (anywhere: the scripts find their files beside them), and bash 4.3 or newer.
{code}
- The ports above open between the hosts (`tfcc check` tests them).{port_note}

## Run

Start every host's script on its host, in any order (the tasks wait for each other):

```sh
{chr(10).join(f"bash launch-{h.name}.sh   # on {h.name}" for h in hosts)}
```

Each script starts its host's tasks in the background, waits for them, and exits 0 when all finished. When a
task fails it stops the host's other tasks and exits 1, naming the task's log. Ctrl-C stops the host's tasks
(SIGTERM, then SIGKILL after {STOP_GRACE} s).{ps}

## Outputs

Each task writes into its own folder, `runs/<task>/` beside the script (set `TFCC_RUNS` for another place):
`metrics.jsonl` (what tfcc's dashboard plots; docs/metrics.md), `stdout.log`, `stderr.log`, its backups and,
for the chief, the saved model and TensorBoard logs. Run the scripts again with the same folders to resume
from the tasks' last backups (tfcc restarts failed runs this way by itself, up to {t.max_restarts} times); use
a new `TFCC_RUNS` for a new run.
"""


# --------------------------------------------------------------------------- slurm


def _check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise ExportError(f"the name {name!r} cannot name a job and its file",
                          "use letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)")
    return name


def slurm_options(cluster: cl.Cluster) -> Options:
    """The export's options for the cluster's place: a Slurm cluster file's [slurm] time limit and CPUs per task."""
    return Options(**placement_for(cluster).export_defaults())


def _slurm(cluster: cl.Cluster, options: Options) -> Export:
    if cluster.evaluated:
        raise ExportError("a Slurm export cannot carry the evaluator: the trainer's Slurm mode (like TensorFlow's "
                          "SlurmClusterResolver) has no evaluator role",
                          "remove the evaluator from the cluster to export it (you can run it by hand beside the "
                          "job, with its TF_CONFIG), or export as scripts or tfjob")
    name = _check_name(options.name)
    if not cl.SLURM_TIME.match(options.time_limit or ""):
        raise ExportError(f"the time limit {options.time_limit!r} is not one Slurm reads",
                          "write it like 1:00:00 (hours:minutes:seconds), 90 (minutes) or 2-00:00:00 (days-hours:...)")
    cpus = SLURM["cpus_per_task"]
    if not isinstance(options.cpus_per_task, int) or cpus.problem(options.cpus_per_task):
        raise ExportError(f"--cpus-per-task {options.cpus_per_task!r} is not a number of CPUs",
                          f"give {cpus.low} to {cpus.high}")
    t = cluster.training
    # Where the tasks are planned (the cluster's hosts, or a Slurm cluster file's nodes): each one a node.
    per_host = {machine: len(tasks) for machine, tasks in placement_for(cluster).machines().items() if tasks}
    hosts = list(per_host)
    most = max(per_host.values())
    if not isinstance(options.port_base, int) or not 1 <= options.port_base <= 65536 - most:
        raise ExportError(f"the port base {options.port_base!r} leaves no room for {most} tasks on a node",
                          f"give a port from 1024 to {65536 - most}")
    jobs = format_jobs(_roles(cluster))
    gpus = _gpu_counts(cluster)
    per_task = max(gpus.values())
    code = _code(cluster, options)
    notes = [f"submit {name}.sbatch with sbatch from a folder every node shares (the tasks' run folders are "
             f"written under runs/ there); the nodes need "
             + (f"Python with what the code imports, and tfcc's trainer (agent/ and trainer/ beside the script, or "
                f"TFCC_ROOT); each task runs {code.entry} in its own copy of user/ ({code.root}'s "
                f"{len(code.copies)} files)" if code is not None else
                "Python with TensorFlow 2.21 and tf-keras 2.21, and tfcc's agent/ and trainer/ beside the script "
                "(or TFCC_ROOT naming a folder that has them)")]
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={name}",
             f"#SBATCH --nodes={len(hosts)}",
             f"#SBATCH --ntasks={len(cluster.tasks)}"]
    even = len(set(per_host.values())) == 1
    lines.append(f"#SBATCH --ntasks-per-node={most}")  # with --ntasks, uneven hosts: at most this many a node
    if not even:
        notes.append(f"the hosts run different numbers of tasks ({_uneven(per_host)}): the script asks for "
                     f"{len(cluster.tasks)} tasks on {len(hosts)} nodes, at most {most} a node, and lets Slurm "
                     "place them (its block distribution fills the first nodes first)")
    lines.append(f"#SBATCH --cpus-per-task={options.cpus_per_task}")
    gres, bind = gpu_options(per_task, most)
    lines += [f"#SBATCH {option}" for option in gres]
    if per_task and len(set(gpus.values())) > 1:
        notes.append(f"the tasks list different numbers of GPUs ({_uneven(gpus)}): under Slurm every task "
                     f"gets {per_task} (srun starts the same command for all)")
    lines += ["#SBATCH --signal=B:TERM@120", f"#SBATCH --time={options.time_limit}", f"#SBATCH --output={name}-%j.out"]
    lines += [f"#SBATCH {option}" for option in placement_for(cluster).batch_options()]
    if code is not None:  # the wrapper below runs it in the task's own copy of the code, where a package of the
        # user's may be named trainer too: tfcc's helper by its path
        command = [_Raw('"$PYTHON"'), _Raw('"$TFCC_ROOT/trainer/slurm.py"'), "--jobs", jobs, "--port-base",
                   str(options.port_base), "--keep-keras", "--", *code.argv(None, t.args)[1:]]  # its Keras: above
        run_dir = ""
    else:
        model = _beside(f"user/{Path(t.model_file).name}") if t.model_file else None
        command = [_Raw('"$PYTHON"'), "-m", "trainer", "--slurm-jobs", jobs, "--port-base", str(options.port_base),
                   *trainer_args(cluster, model)]
        run_dir = ' --run-dir "$d"'
    # The wrapper names each task's run folder as tfcc does, from its rank (trainer.slurm's rank ranges).
    tests = [(first + count, role, first) for role, first, count in rank_ranges(_roles(cluster))]
    if len(tests) == 1:
        naming = f"task={tests[0][1]}-$SLURM_PROCID"
    else:
        branches = []
        for k, (end, role, first) in enumerate(tests):
            shift = f"$((r - {first}))" if first else "$r"
            if k == len(tests) - 1:
                branches.append(f"else task={role}-{shift}; fi")
            else:
                branches.append(f"{'if' if k == 0 else 'elif'} [ \"$r\" -lt {end} ]; then task={role}-{shift};")
        naming = "r=$SLURM_PROCID\n" + " ".join(branches)
    user = None if code else _user_file(cluster)
    end_servers = ""
    into = ("# its own copy of the code (again: kept), whole or not at all\n"
            "if [ ! -d \"$d/work\" ]; then\n"
            "  t=$(mktemp -d \"$d/.work.XXXXXX\") || exit 2\n"
            "  cp -R \"$TFCC_CODE/.\" \"$t\" && mv \"$t\" \"$d/work\" || { rm -rf \"$t\"; exit 2; }\n"
            "fi\ncd \"$d/work\" || exit 2" if code is not None
            else "cd \"$d\" || exit 2")
    if cluster.parameter_server:  # the workers and ps serve until told: the chief's end is theirs (SIGTERM)
        end_servers = ('\nif [ "$task" = chief-0 ] && [ "$code" = 0 ]; then\n'
                       '  scancel --quiet --signal=TERM "$SLURM_JOB_ID.$SLURM_STEP_ID"  # ends the servers\n'
                       'fi')
    uneven_srun = "" if even else (
        "# The allocation holds at most --ntasks-per-node tasks a node; srun places the tasks over it as it is (it\n"
        "# would warn that the cap does not multiply to --ntasks, and ignore it).\nunset SLURM_NTASKS_PER_NODE\n")
    body = f"""#
# {name}.sbatch: a tfcc cluster as one Slurm job (exported by tfcc export slurm).
# The cluster: {_describe(cluster)}.
# Submit it from a folder that every node shares (this folder, with tfcc's agent/ and trainer/ beside it):
#   sbatch {name}.sbatch
# srun starts one task per rank; each builds its TF_CONFIG from Slurm's variables (--slurm-jobs {jobs}:
# the roles take consecutive ranks in name order; the k-th task of a node listens on port {options.port_base}+k).
# Each task's run folder is runs/<job id>/<task> (metrics.jsonl, stdout.log, stderr.log, backups, the model).
# Slurm sends SIGTERM 120 s before the time limit; the tasks back up about every {t.backup_seconds:g} s: to go on
# from a job's last backups, submit again with its folder: TFCC_RUNS=runs/<its job id> sbatch {name}.sbatch
set -u
here=${{SLURM_SUBMIT_DIR:-$PWD}}
PYTHON=${{PYTHON:-python3}}
export TFCC_ROOT=${{TFCC_ROOT:-$here}}  # a folder that holds tfcc's agent/ and trainer/
export PYTHONPATH=$TFCC_ROOT${{PYTHONPATH:+:$PYTHONPATH}}
{_keras_line(cluster, code)}{'export TFCC_CODE=$here/' + USER_DIR + '  # the code each task copies into its run folder' + chr(10) if code is not None else ''}export TFCC_RUNS=${{TFCC_RUNS:-$here/runs/${{SLURM_JOB_ID:-local}}}}
{_environment(cluster, name)}mkdir -p "$TFCC_RUNS" || exit 2
{uneven_srun}
# What srun runs once per task: its run folder from its rank, its output in files there, its exit code noted.
# SIGTERM to the step (a stop, the time limit) reaches the task too; TensorFlow may catch it and train on, so
# the wrapper kills it {STOP_GRACE} s later, and records its end.
task_wrapper='
{naming}
d=$TFCC_RUNS/$task
mkdir -p "$d" || exit 2
{into}
export TFCC_RUN_DIR=$d TFCC_TASK=$task
trap "kill -TERM \\$child 2>/dev/null; (sleep {STOP_GRACE}; kill -KILL \\$child 2>/dev/null) &" TERM INT
"$@"{run_dir} </dev/null >>"$d/stdout.log" 2>>"$d/stderr.log" &
child=$!
while :; do
  wait "$child"
  code=$?
  kill -0 "$child" 2>/dev/null || break
done
echo "$code" >"$d/exit-code"{end_servers}
exit "$code"
'

# Slurm warns this script 120 s before the time limit (--signal=B:TERM@120): the tasks get SIGTERM and no
# attempt follows; their last backups (about every {t.backup_seconds:g} s), in the job's folder, are where a next job goes on.
time_up=0 srun_pid=
# The tasks get it from scancel, on this attempt's step (each attempt's srun is the next step, from 0): srun,
# told SIGTERM, would kill them at once (SIGKILL) before they record their end, so it runs in a session of its
# own (setsid), where Slurm's signal to this script's process group does not reach it.
trap '[ "$time_up" = 1 ] || {{ time_up=1; echo "{name}: the time limit is near: stopping the tasks" >&2
  scancel --quiet --signal=TERM "$SLURM_JOB_ID.$((attempt - 1))" 2>/dev/null || kill -TERM "$srun_pid" 2>/dev/null; }}' TERM
"""
    # Each attempt as the agent's own batch script runs it (agent/slurm.py): a task's end is its wrapper's exit-code.
    body += attempt_loop(
        name, 'bash -c "$task_wrapper" tfcc-task \\\n    ' + _words(command), runs="$TFCC_RUNS",
        tasks=len(cluster.tasks), cpus=options.cpus_per_task, srun_options=bind,
        parameter_server=cluster.parameter_server, max_restarts=t.max_restarts,
        stops=[('[ "$time_up" = 1 ]', f"stopped at the time limit; go on with TFCC_RUNS=$TFCC_RUNS sbatch {name}.sbatch",
                "124")],
        chief_finished=('[ "$(cat "$TFCC_RUNS/chief-0/exit-code" 2>/dev/null)" = 0 ]' if cluster.parameter_server
                        else None),
        refused='grep -qx 2 "$TFCC_RUNS"/*/exit-code 2>/dev/null', reset='  rm -f "$TFCC_RUNS"/*/exit-code\n')
    files = {f"{name}.sbatch": "\n".join(lines) + "\n" + body}
    if user:
        files[user[0]] = user[1]
    if cluster.parameter_server:
        notes.append("parameter-server training: the workers and ps serve until stopped, so when the chief "
                     "finished its wrapper ends them (scancel --signal=TERM on the step); srun kills any still "
                     f"there {SLURM_SERVER_WAIT} s after the chief ended (--wait)")
    if any(task.role == PS for task in cluster.tasks) and per_task:
        notes.append("the ps task gets GPUs too under Slurm (one command for all tasks); tfcc gives it none")
    notes.append(f"the tasks' ports are {options.port_base} and up on each node (--port-base): Slurm picks the "
                 "nodes, so the cluster file's hosts and ports do not carry over")
    return Export(files, notes, frozenset({f"{name}.sbatch"}) | (code.executable if code else set()),
                  dict(code.copies) if code else {})


# --------------------------------------------------------------------------- tfjob and trainjob: Kubernetes


def _escape(arg: str) -> str:
    """Kubernetes expands $(VAR) in a command and in env values, and makes $$ one $: every $ doubled, a user's
    own $(...) and $$ reach the task as written."""
    return arg.replace("$", "$$")


def _check_k8s_name(name: str, kind: str, pods: str, longest: str) -> None:
    """``name`` must be a DNS label that keeps ``longest``, the longest name of its pods, within 63 characters."""
    if not _DNS_LABEL.match(name) or len(longest) > 63:
        raise ExportError(f"the name {name!r} cannot name a {kind}",
                          "use lowercase letters, digits and '-', starting with a letter, short enough that "
                          f"its pods' names ({pods}) have at most 63 characters")


def _k8s_image(cluster: cl.Cluster, options: Options, notes: list[str]) -> str:
    """The container image (the placeholder when none is given), the user's file checked, their notes."""
    image = options.image or IMAGE_PLACEHOLDER
    if any(c.isspace() for c in image):
        raise ExportError(f"the image {image!r} has a space", "give an image reference like registry/tfcc:2.21")
    t = cluster.training
    if t.model_file:  # checked as tfcc run checks it (the image must hold it: not written here)
        _user_file(cluster)
    elif t.user_code:
        _k8s_code(cluster)
    if not options.image:
        notes.append(f"no --image: the manifest names {IMAGE_PLACEHOLDER}; build an image with Python, TensorFlow "
                     f"2.21, tf-keras 2.21 and tfcc's agent/ and trainer/ in {TFJOB_ROOT} (docs/graduation.md) "
                     "and export again with --image, or edit the manifest")
    if t.user_code:
        root, rel = _k8s_code(cluster)
        notes.append(f"the image must hold the code's folder ({root}) as {TFJOB_ROOT}/{USER_DIR}/: each container "
                     f"runs {'python -m ' + t.module if t.module else 'python ' + rel} there")
    elif t.model_file:
        notes.append(f"the image must hold the model file at {TFJOB_ROOT}/user/{Path(t.model_file).name}")
    return image


def _k8s_command(cluster: cl.Cluster) -> list[str]:
    """Every container's command: the user's script and its args, or tfcc's trainer into its run folder."""
    t = cluster.training
    if t.module:
        return ["python3", "-m", t.module, *map(_escape, t.args)]
    if t.script:
        return ["python3", _escape(f"{TFJOB_ROOT}/{USER_DIR}/{_k8s_code(cluster)[1]}"), *map(_escape, t.args)]
    model = _escape(f"{TFJOB_ROOT}/user/{Path(t.model_file).name}") if t.model_file else None
    return ["python3", "-m", "trainer", "--run-dir", f"{TFJOB_RUNS}/$(TFCC_TASK)",
            *map(_escape, trainer_args(cluster, model))]


def _k8s_code(cluster: cl.Cluster) -> tuple[Path, str]:
    """(the user's code's folder here, its script's or module file's path in it), checked as tfcc run checks it."""
    try:
        root, entry = workdir.locate(cluster.training)
    except TfccError as exc:
        raise ExportError(exc.cause, exc.fix) from None
    if cluster.training.script:
        _user_file(cluster)
    return root, entry.relative_to(root).as_posix()


def _k8s_keras(cluster: cl.Cluster) -> list[dict]:
    """The container's TF_USE_LEGACY_KERAS for the Keras its code gets (``keras_choice``), or none."""
    flavour, _ = keras_choice(cluster)
    return [{"name": LEGACY_KERAS, "value": "1" if flavour == cl.TF_KERAS else "0"}] if flavour else []


def _k8s_code_dir(cluster: cl.Cluster) -> dict:
    """A container's working directory: the image's copy of the user's code, as a task of tfcc run has its own."""
    return {"workingDir": f"{TFJOB_ROOT}/{USER_DIR}"} if cluster.training.user_code else {}


def _k8s_runs_volume(cluster: cl.Cluster, name: str) -> dict:
    """The volume of the run folders: a claim every pod shares when an evaluator reads the chief's checkpoints,
    else each pod's own emptyDir."""
    if cluster.evaluated:
        return {"name": "tfcc-runs", "persistentVolumeClaim": {"claimName": f"{name}-runs"}}
    return {"name": "tfcc-runs", "emptyDir": {}}


def _k8s_claim_note(name: str) -> str:
    return (f"the evaluator reads the chief's checkpoints from a shared volume: create a ReadWriteMany "
            f"PersistentVolumeClaim named {name}-runs before applying (it holds every task's run folder)")


def _k8s_gpus(cluster: cl.Cluster, role: str, notes: list[str], gives: str) -> int:
    """The GPUs each pod of ``role`` asks for: the most any of its tasks lists (a note when they differ)."""
    gpus = _gpu_counts(cluster, (role,))
    most = max(gpus.values())
    if most and len(set(gpus.values())) > 1:
        notes.append(f"the {role} tasks list different numbers of GPUs ({_uneven(gpus)}): {gives} the same, {most}")
    return most


def _k8s_user_env(cluster: cl.Cluster, name: str) -> list[dict]:
    """The cluster's env (values as written) and its secret_env (from the secret ``<name>-secrets``, never written)."""
    t = cluster.training
    return ([{"name": key, "value": _escape(value)} for key, value in t.env.items()]
            + [{"name": key, "valueFrom": {"secretKeyRef": {"name": f"{name}-secrets", "key": key}}}
               for key in t.secret_env])


def _k8s_secrets_note(cluster: cl.Cluster, name: str) -> list[str]:
    secrets = cluster.training.secret_env
    if not secrets:
        return []
    return [f"the tasks' secrets ({', '.join(secrets)}) come from a Kubernetes secret named {name}-secrets: create "
            f"it before applying (kubectl create secret generic {name}-secrets "
            + " ".join(f"--from-literal={key}=..." for key in secrets) + "); tfcc never writes them"]


def _k8s_yaml(head: str, *documents: dict) -> str:
    """``head`` (comment lines), then each document (the second and later after ``---``)."""
    body = yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120,
                         explicit_start=len(documents) > 1)
    return head + body


# --------------------------------------------------------------------------- tfjob


def _tfjob(cluster: cl.Cluster, options: Options) -> Export:
    name = options.name or ""
    counts = _roles(cluster)
    _check_k8s_name(name, "TFJob", f"{name}-<role>-<index>",
                    max((f"{name}-{role}-{counts[role] - 1}" for role in counts), key=len))
    notes: list[str] = []
    image = _k8s_image(cluster, options, notes)
    t = cluster.training
    run_dir = f"{TFJOB_RUNS}/$(TFCC_TASK)"
    command = _k8s_command(cluster)
    if cluster.evaluated:  # the operator lists the evaluator in every TF_CONFIG's cluster: drop it first
        command = ["python3", "-c", _DROP_EVALUATOR, *command]
    volume = _k8s_runs_volume(cluster, name)
    if cluster.evaluated:
        notes.append(_k8s_claim_note(name))
    else:
        notes.append(f"the run folders ({TFJOB_RUNS}/<task>) are on each pod's emptyDir: they survive a restart of "
                     "the container (it resumes from its backups) but not the pod; mount a shared volume there "
                     "to keep the outputs")
    specs = {}
    keras = _k8s_keras(cluster)  # its code read once for every role
    for role in (CHIEF, PS, WORKER, EVALUATOR):
        if not counts.get(role):
            continue
        env = [*keras,
               {"name": "PYTHONPATH", "value": TFJOB_ROOT},
               {"name": "TFCC_REPLICA_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{REPLICA_INDEX_LABEL}']"}}},
               {"name": "TFCC_TASK", "value": f"{role}-$(TFCC_REPLICA_INDEX)"},
               {"name": "TFCC_RUN_DIR", "value": run_dir}]
        if role == PS:  # it holds variables on its CPU: TensorFlow would take every GPU's memory
            env.append({"name": GPUS, "value": ""})
        env += _k8s_user_env(cluster, name)
        container = {"name": "tensorflow", "image": image, "command": command, **_k8s_code_dir(cluster), "env": env,
                     "ports": [{"name": "tfjob-port", "containerPort": TFJOB_PORT}],
                     "volumeMounts": [{"name": "tfcc-runs", "mountPath": TFJOB_RUNS}]}
        gpus = _k8s_gpus(cluster, role, notes, f"a TFJob gives every {TFJOB_TYPES[role]} replica")
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
        specs[TFJOB_TYPES[role]] = {"replicas": counts[role], "restartPolicy": "OnFailure",
                                    "template": {"spec": {"containers": [container], "volumes": [volume]}}}
    notes += _k8s_secrets_note(cluster, name)
    run_policy = {"backoffLimit": t.max_restarts}
    if EVALUATOR in counts:
        # The operator deletes running pods when the chief succeeds (cleanPodPolicy Running): the
        # evaluator would not evaluate the last checkpoint. It ends by itself once it has.
        run_policy["cleanPodPolicy"] = "None"
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
                "spec": {"runPolicy": run_policy, "tfReplicaSpecs": specs}}
    head = f"""\
# {name}.yaml: a tfcc cluster as a Kubeflow TFJob (exported by tfcc export tfjob).
# The cluster: {_describe(cluster)}.
# Apply it with: kubectl apply -f {name}.yaml   (Kubeflow Training Operator v1: TFJob is kubeflow.org/v1;
# for Kubeflow Trainer v2, export a TrainJob instead: tfcc export trainjob, docs/graduation.md).
# The operator sets TF_CONFIG on the container named tensorflow (port {TFJOB_PORT}, tfjob-port); each pod's task
# name and run folder come from its replica index. The image needs Python, TensorFlow 2.21, tf-keras 2.21 and
# tfcc's agent/ and trainer/ in {TFJOB_ROOT}. backoffLimit is the cluster's max_restarts.
"""
    return Export({f"{name}.yaml": _k8s_yaml(head, manifest)}, notes)


# --------------------------------------------------------------------------- trainjob

# Kubeflow Trainer v2 has no TensorFlow runtime and sets no TF_CONFIG: the TrainJob runs on a plain
# TrainingRuntime (no mlPolicy) whose JobSet has one replicated job per role, each one Indexed Job of its tasks.
# JobSet gives each pod the host name <jobset>-<replicated job>-<job index>-<pod index> under a headless service
# named as the JobSet, which is named as the TrainJob: every address follows from the TrainJob's name. Each
# container's TF_CONFIG is built from that name (JobSet's label on the pod) and the pod's completion index (the
# Job controller's annotation) by Kubernetes' $(VAR) expansion of env values, which sees the variables above it.


def _trainjob_address(trainjob: str, role: str, index: int) -> str:
    """The address of task ``role`` ``index`` in the TrainJob named ``trainjob``: its pod's stable host name
    (replica 0 of the role's replicated job, pod ``index``) under JobSet's headless service, and the port."""
    return f"{trainjob}-{role}-0-{index}.{trainjob}:{TRAINJOB_PORT}"


def _trainjob_tf_config(counts: dict[str, int], role: str) -> str:
    """The TF_CONFIG env value of ``role``'s pods: every address from $(TFCC_TRAINJOB), the index from $(TFCC_INDEX)
    (an evaluator is no member of the cluster: tfcc's trainer, like TensorFlow's coordinator, wants it left out)."""
    cluster = {member: [_trainjob_address("$(TFCC_TRAINJOB)", member, k) for k in range(counts[member])]
               for member in (CHIEF, WORKER, PS) if counts.get(member)}
    return f'{{"cluster": {json.dumps(cluster)}, "task": {{"type": {json.dumps(role)}, "index": $(TFCC_INDEX)}}}}'


def _trainjob(cluster: cl.Cluster, options: Options) -> Export:
    name = options.name or ""
    counts = _roles(cluster)
    _check_k8s_name(name, "TrainJob", f"{name}-<role>-0-<index>-<5 random characters>",
                    max((f"{name}-{role}-0-{counts[role] - 1}{POD_NAME_SUFFIX}" for role in counts), key=len))
    notes: list[str] = []
    image = _k8s_image(cluster, options, notes)
    t = cluster.training
    command = _k8s_command(cluster)
    volume = _k8s_runs_volume(cluster, name)
    if cluster.evaluated:
        notes.append(_k8s_claim_note(name))
    else:
        notes.append(f"the run folders ({TFJOB_RUNS}/<task>) are on each pod's emptyDir, which goes with the pod: a "
                     "restart (it recreates every pod) starts the tasks over, and the outputs are lost with the "
                     "pods; mount a shared volume there to resume from the backups and keep the outputs")
    jobs = []
    keras = _k8s_keras(cluster)  # its code read once for every role
    for role in (CHIEF, PS, WORKER, EVALUATOR):
        if not counts.get(role):
            continue
        env = [*keras,
               {"name": "PYTHONPATH", "value": TFJOB_ROOT},
               {"name": "TFCC_TRAINJOB",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOBSET_NAME_LABEL}']"}}},
               {"name": "TFCC_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}},
               {"name": "TF_CONFIG", "value": _trainjob_tf_config(counts, role)},
               {"name": "TFCC_TASK", "value": f"{role}-$(TFCC_INDEX)"},
               {"name": "TFCC_RUN_DIR", "value": f"{TFJOB_RUNS}/$(TFCC_TASK)"}]
        gpus = _k8s_gpus(cluster, role, notes, f"a TrainJob gives every pod of its {role} job")
        if role == PS and not gpus:  # it holds variables on its CPU: TensorFlow would take every GPU's memory
            env.append({"name": GPUS, "value": ""})
        env += _k8s_user_env(cluster, name)
        container = {"name": TRAINJOB_CONTAINER, "image": image, "command": command, **_k8s_code_dir(cluster),
                     "env": env}
        if role != EVALUATOR:  # it serves nothing
            container["ports"] = [{"name": "tensorflow", "containerPort": TRAINJOB_PORT}]
        container["volumeMounts"] = [{"name": "tfcc-runs", "mountPath": TFJOB_RUNS}]
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
        # A failed pod fails its Job (backoffLimit 0, no restart in place), and JobSet's failure policy restarts
        # every Job; one that refused its input (its exit code) fails the Job for good (PodFailurePolicy).
        jobs.append({"name": role, "replicas": 1, "template": {"spec": {
            "parallelism": counts[role], "completions": counts[role], "completionMode": "Indexed",
            "backoffLimit": 0,
            "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
                "containerName": TRAINJOB_CONTAINER, "operator": "In", "values": [REFUSED_INPUT]}}]},
            "template": {"spec": {"restartPolicy": "Never", "containers": [container], "volumes": [volume]}}}}})
    jobset: dict = {}
    if cluster.parameter_server and counts.get(CHIEF):
        # The workers and ps serve until stopped: the run is over when the chief (and the evaluator, which
        # evaluates the last checkpoint, then ends) finished; JobSet then ends the servers.
        jobset["successPolicy"] = {"operator": "All",
                                   "targetReplicatedJobs": [CHIEF] + ([EVALUATOR] if cluster.evaluated else [])}
    jobset["failurePolicy"] = {"maxRestarts": t.max_restarts, "restartStrategy": "Recreate",
                               "rules": [{"name": "refusedInput", "action": "FailJobSet",
                                          "onJobFailureReasons": ["PodFailurePolicy"]}]}
    jobset["network"] = {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    jobset["replicatedJobs"] = jobs
    runtime = {"apiVersion": TRAINER_API, "kind": "TrainingRuntime", "metadata": {"name": name},
               "spec": {"template": {"spec": jobset}}}
    trainjob = {"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": {"name": name},
                "spec": {"runtimeRef": {"apiGroup": TRAINER_GROUP, "kind": "TrainingRuntime", "name": name}}}
    notes += _k8s_secrets_note(cluster, name)
    notes.append(f"restarts: the cluster's max_restarts ({t.max_restarts}) is the JobSet's failurePolicy.maxRestarts: "
                 "when a task fails, its Job fails (backoffLimit 0) and JobSet recreates every pod, at most that many "
                 f"times; a task that exits {REFUSED_INPUT} (it refused its input) fails the TrainJob at once")
    if cluster.parameter_server and counts.get(CHIEF):
        notes.append("parameter-server training: the TrainJob completes when the chief"
                     + (" and the evaluator" if cluster.evaluated else "")
                     + " finished (the JobSet's successPolicy); JobSet then ends the workers and ps, which serve "
                     "until stopped")
    notes.append(f"the TrainingRuntime {name} is namespaced: apply the file in the namespace the TrainJob is to run "
                 "in; the cluster needs Kubeflow Trainer v2 and JobSet")
    job_names = [job["name"] for job in jobs]
    head = f"""\
# {name}.yaml: a tfcc cluster as a Kubeflow Trainer v2 TrainJob and its TrainingRuntime (tfcc export trainjob).
# The cluster: {_describe(cluster)}.
# Apply both with: kubectl apply -f {name}.yaml   (trainer.kubeflow.org/v1alpha1: Kubeflow Trainer v2, on JobSet;
# the runtime first, then the TrainJob, which names it in runtimeRef).
# Trainer v2 runs TensorFlow only on a plain runtime and sets no TF_CONFIG. This runtime's JobSet has one replicated
# job per role ({", ".join(job_names)}), each an Indexed Job of the role's tasks, and each container builds its TF_CONFIG
# from its pod: the label {JOBSET_NAME_LABEL} (the TrainJob's name) gives every task's stable
# address <trainjob>-<role>-0-<index>.<trainjob>:{TRAINJOB_PORT} (JobSet's headless service), the annotation
# {COMPLETION_INDEX} the pod's own index; its task name and run folder follow from them.
# The image needs Python, TensorFlow 2.21, tf-keras 2.21 and tfcc's agent/ and trainer/ in {TFJOB_ROOT}.
# failurePolicy.maxRestarts is the cluster's max_restarts: when a task fails, JobSet recreates every pod.
"""
    return Export({f"{name}.yaml": _k8s_yaml(head, runtime, trainjob)}, notes)
