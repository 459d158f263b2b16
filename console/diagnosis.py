"""Runtime diagnosis: a failed or stalled task's stderr tail and exit status -> cause, fix, retryable.

One table of failure signatures, each keyed on the real message text of TensorFlow 2.21,
tf-keras 2.21, NCCL or CUDA (read in their sources and the installed wheel, or seen in runs
here), tried in order; the first that matches is the diagnosis. The order is the point:

1. errors this task raised itself (a missing module, Keras 3, a busy port, data that ran out,
   memory, NCCL, a collective group that does not add up, ...);
2. the consequences of another task's end (a peer lost, heartbeats stopped, a barrier timed
   out): a survivor's log says "connection reset", but the cause lies elsewhere and restarting
   every task can help;
3. the host OOM killer (exit 137, or SIGKILL with the shell's "Killed");
4. a GPU host that cannot use its GPUs (driver too old, CUDA libraries missing): worth fixing,
   but it explains nothing that 1-3 explain;

then, with no signature, the exit status alone: a signal (retryable), a Python traceback (an
error in the training code, permanent), the trainer's own ``tfcc-trainer: error:`` line.
Known noise ("failed call to cuInit" and the other start-up lines of a CPU host, which appear
in healthy logs) is dropped before anything is matched, so it is never a cause.

Qt-free and TensorFlow-free: the console imports it for every front end.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agent.protocol import task_name


@dataclass(frozen=True)
class Diagnosis:
    """What ended a task, in words a TensorFlow user understands."""

    name: str        # short id, e.g. "peer-lost"
    cause: str       # one sentence: what happened
    fix: str         # what to do
    retryable: bool  # whether restarting every task from the backups can help


PORT_IN_USE = "port-in-use"  # a task's TensorFlow port was taken (supervision retries when tfcc chose it)
_RESTART = ("tfcc restarts every task of the run from its backups with the same TF_CONFIG "
            "(up to the run's max_restarts; `tfcc resume RUN` after that)")
_LOGS = "the task's log (`tfcc logs RUN TASK`)"

# Start-up lines of healthy runs (a CPU host with the full TensorFlow wheel prints all of them).
# "failed call to cuInit" is noise unless it names a driver mismatch, which is a real problem.
_NOISE = re.compile(
    r"failed call to cuInit(?!.*(?:DRIVER_MISMATCH|insufficient))"
    r"|Could not find cuda drivers on your machine, GPU will not be used"
    r"|oneDNN custom operations are on"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|^To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags"
    r"|All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|Unable to register cu(?:DNN|FFT|BLAS) factory"
    r"|TF-TRT Warning: Could not find TensorRT",
    re.IGNORECASE,
)

_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
# "ValueError: boom", "tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:"
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception|Exit|Interrupt))(?::[ \t]*(.*))?$",
                        re.MULTILINE)
_INNER_EXCEPTION = re.compile(r"^[ \t]+([A-Z]\w*(?:Error|Exception)): (.+)$", re.MULTILINE)
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")  # "{{function_node __wrapped__Foo_device_/job:…}} "
_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\].*$")                    # " [Op:Foo] name: "
_TRAINER_ERROR = re.compile(r"^tfcc-trainer: error: (.+)$", re.MULTILINE)
_SHELL_KILLED = r"^(?:.*\bline \d+:\s+\d+ )?Killed\b"  # bash: "Killed" or "x.sh: line 3: 4242 Killed  python ..."

PIP_NAMES = {"sklearn": "scikit-learn", "cv2": "opencv-python", "PIL": "pillow", "yaml": "pyyaml",
             "tensorflow_datasets": "tensorflow-datasets"}


def _tasks(text: str) -> list[str]:
    return [task_name(job, int(index)) for job, index in _TASK.findall(text)]


def _unhealthy(match: re.Match, text: str) -> dict:
    """The task that stopped sending heartbeats: named after the list's head, or before "heartbeat timeout"."""
    found = re.search(r"stopped sending heartbeats\):\s*(/job:\S+)|Task (/job:\S+) heartbeat timeout", text)
    named = _tasks(found[0]) if found else []
    return {"peer": named[0] if named else "another task of the run"}


def _late(match: re.Match, text: str) -> dict:
    """The first task a barrier's timeout names as late."""
    found = re.search(r"Some timed out task names:\s*(/job:\S+)", text)
    named = _tasks(found[1]) if found else []
    return {"late": f" (late: {named[0]})" if named else ""}


def _remote_peer(match: re.Match, text: str) -> dict:
    """The task a failed call was talking to: gRPC says "from remote target /job:worker/…/task:0"."""
    named = _tasks(" ".join(re.findall(r"remote target (\S+)", text)))
    return {"peer": named[-1] if named else "another task of the run"}


# A traceback's frame in a task's copy of the user's workdir (agent.workdir: <run>/<task>/work/), its code line.
_WORK_FRAME = re.compile(r'^\s*File "[^"\n]*?/runs/[^/"\n]+/[^/"\n]+/work/([^"\n]+)", line (\d+), in [^\n]*\n'
                         r'(?:[ \t]+(\S[^\n]*)\n)?',
                         re.MULTILINE)


def _user_frame(text: str, code: CodeFacts | None) -> str | None:
    """Where the last traceback went last in the user's own files: ``main.py:42 (`x = undefined + 1`)``, the path
    as it is on this machine when ``code`` knows it (tfcc's capture and runpy frames are not the user's)."""
    found = _last(_WORK_FRAME, text)
    if found is None:
        return None
    rel, line, source = found[1], found[2], (found[3] or "").strip()
    local = code.local_file(rel) if code is not None else None
    where = f"{local or rel}:{line}"
    if source:
        where += f" (`{source if len(source) <= 80 else source[:79] + '…'}`)"
    return where


def _line_of(match: re.Match, text: str) -> str:
    """The line ``match`` is on, trimmed (an error's own words)."""
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    line = text[start:end if end >= 0 else len(text)].strip()
    return line if len(line) <= 200 else line[:199] + "…"


def _first(pattern: str, text: str, template: str) -> str:
    """``template`` filled with the groups that took part in the first match of ``pattern``, or ""."""
    found = re.search(pattern, text)
    return template.format(*(group for group in found.groups() if group is not None)) if found else ""


@dataclass(frozen=True)
class _Signature:
    name: str
    pattern: str          # a regular expression over the stderr tail and the trainer's error
    cause: str            # may name {fields} that ``detail`` gives
    fix: str
    retryable: bool
    detail: Callable[[re.Match, str], dict] | None = None
    on_success: bool = False            # also worth saying when the task exited 0
    exits: frozenset[int] | None = None  # only with one of these exit statuses

    def diagnose(self, text: str, returncode: int | None) -> Diagnosis | None:
        if self.exits is not None and returncode not in self.exits:
            return None
        match = re.search(self.pattern, text, re.MULTILINE)
        if match is None:
            return None
        fields = self.detail(match, text) if self.detail else {}
        return Diagnosis(self.name, self.cause.format(**fields), self.fix.format(**fields), self.retryable)


# Section 2 of the table: what a task says when another one ended first (the cause lies there).
CONSEQUENCES = frozenset({"nccl-peer-lost", "heartbeat-lost", "barrier-timeout", "peer-lost"})

_SIGNATURES: tuple[_Signature, ...] = (
    # 1. errors this task raised itself
    _Signature(
        "cpu-lacks-avx", r"The TensorFlow library was compiled to use (\w+) instructions, but these aren't "
                         r"available on your machine",
        "the CPU of the task's host lacks the {flag} instructions this TensorFlow is built for, "
        "so TensorFlow aborted as it loaded",
        "run the task on a host whose CPU has {flag} (see the flags in /proc/cpuinfo), "
        "or install a TensorFlow built for this CPU there", False,
        detail=lambda m, t: {"flag": m[1]}),
    _Signature(
        "tf-keras-missing", r"TF_USE_LEGACY_KERAS set to True, but you do not have the tf_keras package installed"
                            r"|No module named 'tf_keras'",
        "TF_USE_LEGACY_KERAS=1 makes tf.keras the tf-keras package (Keras 2), but tf-keras is not installed "
        "in the task's Python on its host",
        "install tf-keras of TensorFlow's minor version there (pip install 'tf-keras==2.21.*' beside "
        "TensorFlow 2.21); `tfcc check` shows each host's TensorFlow and tf-keras", False),
    _Signature(
        "module-missing", r"ModuleNotFoundError: No module named '([\w.]+)'",
        "the training code imports the module '{module}', which is not installed in the task's Python on its host",
        "install it on that host (pip install {package}) in the Python its `python` setting names, "
        "or drop the import; then start the run again", False,
        detail=lambda m, t: {"module": m[1], "package": PIP_NAMES.get(m[1].split(".")[0], m[1].split(".")[0])}),
    _Signature(
        "keras3-multiworker", r"Attempt to convert a value \(PerReplica",
        "the script trains with Keras 3 (`import keras`), whose fit fails under MultiWorkerMirroredStrategy "
        "before the first step (keras-team/keras#20585)",
        "use tf-keras (Keras 2): `import tf_keras as keras`, or set TF_USE_LEGACY_KERAS=1 before importing "
        "TensorFlow and use tf.keras", False),
    _Signature(
        "keras-mixed", r"The added layer must be an instance of class Layer\. Received: layer=<keras\."
                       r"|Only instances of `keras\.Layer` can be added to a Sequential model\. Received: <tf_keras\.",
        "the script mixes Keras 3 objects (`import keras`) with tf-keras ones (tf.keras) in one model",
        "use tf-keras throughout: `import tf_keras as keras`, or tf.keras with TF_USE_LEGACY_KERAS=1 set "
        "before importing TensorFlow, and no plain `import keras`", False),
    _Signature(
        "keras2-code-on-keras3", r"(Invalid filepath extension for saving"
                                 r"|the filepath provided must end in `\.weights\.h5`|The filename must end in `\.weights\.h5`"
                                 r"|`keras\.optimizers\.legacy` is not supported in Keras 3"
                                 r"|object has no attribute '(?:fit|evaluate|predict)_generator')",
        "the script is written for Keras 2 (tf.keras), but it ran under Keras 3, which refused a Keras 2 call: {what}",
        "set keras = \"tf-keras\" in [training] (tf.keras is then Keras 2, as the code expects), or update the "
        "code for Keras 3; then start the run again", False,
        detail=lambda m, t: {"what": _line_of(m, t)}),
    _Signature(
        "keras3-code-on-tf-keras", r"module 'tf_keras[\w.]*' has no attribute '(\w+)'",
        "the script uses Keras 3's API (keras.{attr}), but it ran under tf-keras (Keras 2), which has no {attr}",
        "import keras (Keras 3) for it and set keras = \"keras3\" in [training] where Keras 3 can run (one "
        "training task), or write it for Keras 2; then start the run again", False,
        detail=lambda m, t: {"attr": m[1]}),
    _Signature(
        "collective-config-late", r"Collective ops must be configured at program startup"
                                  r"|Collective ops are already configured",
        "the script created MultiWorkerMirroredStrategy after TensorFlow had started (a tensor, dataset or "
        "model was made first), or created it twice",
        "create the strategy once, right after importing TensorFlow and before any other TensorFlow call", False),
    _Signature(
        PORT_IN_USE, r"Could not start gRPC server|could not start this task's gRPC server"
                       r"|is already in use on this host",
        "the task's TensorFlow port{port} is taken on its host (by another program, or a task of an earlier "
        "run still going), so TensorFlow could not start its gRPC server",
        "stop what holds the port (`tfcc check` names the process), or give the task another port "
        "or port = \"auto\" in the cluster file", False,
        detail=lambda m, t: {"port": _first(r"resolved for '[^']*:(\d+)'|\bport (\d+) of task", t, " {}")}),
    _Signature(
        # Not AUTO's warning "... failed to apply FILE sharding policy because of the following reason: Found ...".
        "autoshard-file", r"(?<!following reason: )Found an unshardable source dataset|--autoshard file needs",
        "autoshard policy FILE splits the data by input files, but this dataset is not read from files",
        "set autoshard to \"auto\" or \"data\" in the training settings, or read the data from files "
        "(e.g. TFRecords)", False),
    _Signature(
        "input-exhausted", r"Your (?:input|dataset|dataset iterator) ran out of data",
        "the training data ran out before the epochs were done: the dataset gives fewer batches than "
        "steps_per_epoch × epochs{needed}, so training stopped early",
        "`.repeat()` the dataset (before batching it), or set steps_per_epoch to the number of batches "
        "one pass over the data gives", False,
        detail=lambda m, t: {"needed": _first(r"\(in this case, (\d+) batches\)", t, " ({} were needed)")},
        on_success=True),
    _Signature(
        "disk-full", r"No space left on device",
        "the disk of the task's host is full, so writing a backup, checkpoint, log or the model failed",
        "free space on that host (`tfcc check` shows its free disk; old runs are in ~/.tfcc/runs), "
        "then `tfcc resume RUN`", False),
    _Signature(
        # Not the allocator's "ran out of memory trying to allocate ... The caller indicates that this is not
        # a failure" nor a start-up CUDA_ERROR_OUT_OF_MEMORY: TensorFlow goes on after both.
        "out-of-memory", r"OOM when allocating|ResourceExhaustedError",
        "TensorFlow ran out of memory{device}: the tensors of one training step do not fit",
        "lower the batch per replica in the training settings or use a smaller model; check that no other "
        "process holds that GPU's memory (nvidia-smi)", False,
        detail=lambda m, t: {"device": _first(r"OOM when allocating .*? on \S*?/device:([A-Z]+:\d+)", t, " on {}")}),
    _Signature(
        "nccl-error", r"NCCL: (?:unhandled (?:cuda|system) error|internal error|invalid (?:argument|usage))"
                      r"|nccl(?:UnhandledCuda|System|Internal)Error|ncclInvalid(?:Argument|Usage)",
        "NCCL, the library that moves gradients between the GPUs, failed{error}",
        "set NCCL_DEBUG=WARN in the tasks' environment to see why (often the network interface: set "
        "NCCL_SOCKET_IFNAME; in a container, a small /dev/shm), or set communication to \"ring\" in the "
        "training settings to do without NCCL", False,
        detail=lambda m, t: {"error": _first(r"NCCL: ([a-z][a-z ]+[a-z])", t, ": {}")}),
    _Signature(
        "collective-mismatch", r"is joining a group with size|but that group has size"
                               r"|is joining a group that is already full|is joining a group with incompatible"
                               r"|Shape mismatch in the collective instance",
        "the workers do not agree on the all-reduce group{sizes}: they have different numbers of GPUs "
        "or run different model code",
        "give every worker task the same number of GPUs (its gpus in the cluster file), check that each GPU "
        "host's TensorFlow sees its GPUs (`tfcc check`), and run the same script on every host", False,
        detail=lambda m, t: {"sizes": _first(r"with size ?(\d+), but that group has size (\d+)", t,
                                             " (a task joined it with {} replicas in all, the group has {})")}),
    _Signature(  # seen here when a stopped task went on beside its peer's next attempt
        "collective-out-of-step", r"Collective instance \d+ expected type \d+ and data_type \d+ but got type",
        "the tasks ran different collective operations at the same point: they are out of step (one is from "
        "an earlier attempt, or went on after being stopped) or run different code",
        "restart every task together: " + _RESTART + "; if it recurs after a full restart, run the same "
        "script and TensorFlow version on every host", True),
    _Signature(
        "incarnation-mismatch", r"current incarnation doesn't match with one in the group"
                                r"|Incarnation ID mismatch|tried to connect with a different incarnation",
        "only part of the cluster was restarted: a task came back while the others still expected "
        "its previous process",
        "restart every task together, never one alone: " + _RESTART, True),
    # 2. another task ended: this one only lost its partner
    _Signature(
        "nccl-peer-lost", r"remote process exited or there was a network error|ncclRemoteError",
        "NCCL lost a peer: another task's process ended or the network between the GPU hosts failed",
        _RESTART + "; if it recurs, read the diagnosis of the task that ended first, or set "
        "NCCL_SOCKET_IFNAME to the hosts' network interface", True),
    _Signature(
        "heartbeat-lost", r"The following tasks are unhealthy \(stopped sending heartbeats\)"
                          r"|heartbeat timeout\. This indicates that the remote task has failed",
        "{peer} sent no heartbeat for 10 s (TensorFlow's limit): its process froze or was stopped, crashed, "
        "or its host became unreachable",
        _RESTART + "; if it recurs, look at that task's host (memory, swapping, `tfcc check`)", True,
        detail=_unhealthy),
    _Signature(
        "barrier-timeout", r"Barrier timed out|Shutdown barrier has failed",
        "the tasks did not all reach a synchronisation point in time{late}: one had stopped, "
        "fallen far behind, or could not be reached",
        _RESTART + "; if it recurs, read that task's diagnosis and test the ports between the hosts "
        "with `tfcc check`", True,
        detail=_late),
    _Signature(
        # Not "Collective ops is aborted by: X" alone: X can be this task's own error.
        "peer-lost", r"UnavailableError|Connection reset by peer|Socket closed"
                     r"|lost contact with another task of the cluster",
        "this task lost contact with {peer}: that task ended (killed, crashed, or stopped by its own error) "
        "or its host became unreachable, and MultiWorkerMirroredStrategy cannot go on without every task",
        _RESTART + "; the other task's own diagnosis says why it ended, and `tfcc check` tests the ports "
        "between the hosts", True,
        detail=_remote_peer),
    # 3. the host's out-of-memory killer (exit 137 without "Killed" is the fallback's, below)
    _Signature(
        "host-oom", _SHELL_KILLED,
        "the task was killed with SIGKILL, most likely by the host's out-of-memory killer (the host ran out "
        "of RAM)",
        "lower the batch per replica, or run fewer tasks on that host or give it more memory; "
        + _RESTART, True, exits=frozenset({137, -signal.SIGKILL})),
    # 4. a GPU host that cannot use its GPUs
    _Signature(
        "cuda-driver-too-old", r"CUDA driver version is insufficient for CUDA runtime version"
                               r"|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|does not match DSO version",
        "the NVIDIA driver of the task's host is too old for the CUDA libraries this TensorFlow uses, "
        "so TensorFlow cannot use its GPUs",
        "upgrade the host's NVIDIA driver (nvidia-smi shows its version; TensorFlow's install page names the "
        "CUDA version each release needs), or install a TensorFlow built for that driver", False,
        on_success=True),
    _Signature(
        "gpu-libs-missing", r"Cannot dlopen some GPU libraries",
        "TensorFlow found a GPU but not the CUDA libraries it needs{libraries}, so the task ran without its GPUs",
        "install TensorFlow with its CUDA libraries in that host's Python (pip install "
        "'tensorflow[and-cuda]==2.21.*'), or clear the task's gpus in the cluster file to train on the CPU",
        False,
        detail=lambda m, t: {"libraries": _first(r"Could not load dynamic library '([^']+)'", t, " ({} first)")},
        on_success=True),
)

class CodeFacts(Protocol):
    """What the console knows of the user's code on this machine, for the diagnosis (``Run`` answers)."""

    def not_shipped(self, module: str) -> str | None:
        """Why ``module`` is in the workdir here but was not shipped (an exclusion's words), or None."""

    def local_file(self, rel: str) -> str | None:
        """The path on this machine of ``rel``, a file of the shipped workdir, or None."""

    def run_as_module(self, missing: str | None) -> tuple[str, str | None] | None:
        """For a script that failed on a relative import (``missing`` None) or on importing ``missing``: the
        fix that runs it as a module, and where ``missing`` lives (``myproject/ in /repo``); or None."""


_RELATIVE_IMPORT = re.compile(r"ImportError: attempted relative import with no known parent package")
_HOST_OOM = next(s for s in _SIGNATURES if s.name == "host-oom")
_MODULE_MISSING = next(s for s in _SIGNATURES if s.name == "module-missing")
_SIGNAL_WHY = {
    signal.SIGKILL: "by tfcc's stop, a person, or the host's out-of-memory killer",
    signal.SIGTERM: "asked to stop from outside: a person, a scheduler or the host shutting down",
    signal.SIGINT: "interrupted (Ctrl-C)",
    signal.SIGHUP: "its terminal or session closed",
    signal.SIGSEGV: "a crash inside TensorFlow or another native library",
    signal.SIGBUS: "a crash inside TensorFlow or another native library",
    signal.SIGABRT: "TensorFlow aborted on a fatal check (a log line starting with F)",
}


def diagnose(stderr_tail: str, returncode: int | None, metrics_error: str | None = None,
             code: CodeFacts | None = None) -> Diagnosis | None:
    """The most specific diagnosis of a task's end, else one from its exit status alone, else None.

    ``stderr_tail`` is the end of the task's stderr; ``returncode`` its exit status (negative: killed
    by that signal, as subprocess reports it; None: still running or unknown); ``metrics_error`` the
    ``error`` of the trainer's ``failed`` event. A clean exit (0) gets a diagnosis only from a signature
    that matters even then (its data ran out, it could not use its GPUs). ``code``: what this machine knows
    of the user's code (``CodeFacts``): a module the task could not import that is in the workdir here (not
    shipped, or off a script's import path), and how the script runs as a module.
    """
    text = "\n".join(line for line in (stderr_tail or "").splitlines() if not _NOISE.search(line))
    if metrics_error:
        text += "\n" + metrics_error
    if returncode != 0 and _RELATIVE_IMPORT.search(text):
        return _relative_import(code)
    for signature in _SIGNATURES:
        if returncode == 0 and not signature.on_success:
            continue
        found = signature.diagnose(text, returncode)
        if found is not None and found.name == _MODULE_MISSING.name and code is not None:
            found = _in_the_workdir(text, code) or found
        if found is not None:
            return found
    if returncode is None or returncode == 0:
        return None
    return _from_exit(text, returncode, metrics_error, code)


def _relative_import(code: CodeFacts | None) -> Diagnosis:
    run = code.run_as_module(None) if code is not None else None
    fix = run[0] if run is not None else (
        "make the script's folder a package and run it as a module: module = \"pkg.main\" in [training] in place "
        "of script, with workdir the folder that holds pkg/")
    return Diagnosis("relative-import-in-script",
                     "the script uses a relative import (from . import …), which Python allows only in a module of "
                     "a package run with python -m; a file run by its path has no package", fix, False)


def _in_the_workdir(text: str, code: CodeFacts) -> Diagnosis | None:
    """A missing module that is in the workdir here: not shipped (an exclusion), or off a script's import path."""
    module = re.search(_MODULE_MISSING.pattern, text, re.MULTILINE)[1]
    why = code.not_shipped(module)
    if why is None:
        run = code.run_as_module(module)
        if run is None:
            return None
        fix, where = run
        return Diagnosis("module-off-the-path",
                         f"the training code imports the module '{module}', which is your project's ({where}) but "
                         "not on the import path: a script run by its path has only its own folder there",
                         fix, False)
    return Diagnosis("module-not-shipped",
                     f"the training code imports the module '{module}', which is in your workdir on this machine "
                     f"but was not shipped to the hosts: {why}",
                     "remove that exclusion (a `!` line in .tfccignore re-includes it) or make the module a regular "
                     "file of the workdir; then start a new run (a resume keeps each task's copy of the workdir "
                     "as it was)", False)


def _signal_number(returncode: int) -> int | None:
    """The signal that ended the task: subprocess says -N; a shell in between says 128 + N."""
    number = -returncode if returncode < 0 else returncode - 128 if 128 < returncode <= 128 + 64 else None
    return number if number is not None and 1 <= number <= 64 else None


def _from_exit(text: str, returncode: int, metrics_error: str | None,
               code: CodeFacts | None = None) -> Diagnosis | None:
    if returncode == 128 + signal.SIGKILL:
        return Diagnosis(_HOST_OOM.name, _HOST_OOM.cause, _HOST_OOM.fix, _HOST_OOM.retryable)
    number = _signal_number(returncode)
    if number is not None:
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        why = _SIGNAL_WHY.get(number, "sent from outside the task or raised by a fault inside it")
        return Diagnosis("killed-by-signal", f"the task was killed by {name} ({why})",
                         f"{_RESTART}; if it happens again, look at {_LOGS} and its host", True)
    exception = _last_exception(text)
    if exception is not None:
        where = _user_frame(text, code)
        if where is not None:
            return Diagnosis("training-error", f"error in the training code at {where}: {exception}",
                             "fix it there, then start the run again; a restart would fail the same way", False)
        return Diagnosis("training-error", f"error in the training code: {exception}",
                         f"fix it where the traceback in {_LOGS} points, then start the run again; "
                         "a restart would fail the same way", False)
    said = _TRAINER_ERROR.findall(text) or [metrics_error]
    if said[-1]:
        cause, _, fix = said[-1].partition("; ")
        return Diagnosis("bad-input", cause, fix or "correct it in the cluster file or the training settings, "
                         "then start the run again", False)
    return None


def _last(pattern: re.Pattern, text: str, start: int = 0) -> re.Match | None:
    matches = list(pattern.finditer(text, start))
    return matches[-1] if matches else None


def _last_exception(text: str) -> str | None:
    """``Name: message`` from the last exception line, with TensorFlow's wrappings taken off: for
    "Graph execution error:" the message's first line after the "Detected at node" frames, for autograph's
    "in user code:" the block's own error, and never "{{function_node …}}" or "[Op:…]"."""
    found = _last(_EXCEPTION, text)
    if found is None:
        return None
    name, message = found[1], (found[2] or "").strip()
    if message == "in user code:":  # autograph: the error is the block's last indented "Name: message" line
        inner = _last(_INNER_EXCEPTION, text, found.end())
        if inner is not None:
            name, message = inner[1], inner[2].strip()
    elif message == "Graph execution error:":
        rest = text[found.end():].splitlines()
        in_frames = any(line.startswith("Detected at node") for line in rest[:3])
        for line in rest:
            if in_frames and (line.startswith("Detected at node") or not line.strip() or line[:1].isspace()):
                continue
            if line.strip():
                message = line.strip()
                break
    message = _FUNCTION_NODE.sub("", _OP_SUFFIX.sub("", message))
    message = message if len(message) <= 200 else message[:197] + "..."
    return f"{name}: {message}" if message else name


# ================================================================= where the user's code failed (the failure view)

_TRACEBACK = "Traceback (most recent call last):"
MESSAGE_LINES = 40  # of an exception's message that goes on after its first line
# A log line of absl, TensorFlow's C++ or Python's logging, which other threads print between a traceback's lines.
_LOG_LINE = re.compile(r"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+:? [IWEF]|"
                       r"WARNING: All log messages|(?:INFO|WARNING|ERROR):[\w.]+:)")
_ANY_FRAME = re.compile(r'^(\s*)File "([^"\n]*)", line (\d+), in ([^\n]*)$')
_WORK_PATH = re.compile(r"/runs/[^/]+/[^/]+/work/(.+)$")


@dataclass(frozen=True)
class CodeError:
    """Where a task's last traceback went last in the user's own files, and what it raised."""

    file: str        # relative to the workdir (as the person knows it: ``trainer/task.py``)
    line: int
    code: str        # that line of code ("" when the traceback did not show it)
    exception: str   # ``NameError: name 'undefined' is not defined`` (TensorFlow's wrappings taken off)
    traceback: str   # the whole last traceback, each frame of the user's own files by its workdir path, the
                     # rest (Python's, TensorFlow's, Keras's, tfcc's) folded into one line per run of them

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def last_traceback(text: str, own: bool = False) -> str:
    """The last traceback in ``text`` (a task's stderr, noise and all), from its first line to its exception's last
    (the lines after one that ends with ":", TensorFlow's "Graph execution error:", up to ``MESSAGE_LINES``);
    ``own``: the last one that goes through the user's own files (not one printed at shutdown, "Exception ignored
    in ..."). Log lines of other threads within it are left out. "" when none."""
    starts = [found.start() for found in re.finditer(re.escape(_TRACEBACK), text)]
    for start in reversed(starts):
        traceback = _one_traceback(text[start:])
        if not own or _WORK_FRAME.search(traceback + "\n"):
            return traceback
    return ""


def _one_traceback(text: str) -> str:
    lines = text.splitlines()
    out = [lines[0]]
    frames = True
    said = 0  # lines of the exception's message after its first (one that ends with ":" goes on: TensorFlow's)
    for line in lines[1:]:
        if frames and _LOG_LINE.match(line):
            continue  # another thread's log line, printed between the frames
        if frames and (line.startswith((" ", "\t")) or not line.strip()):
            out.append(line)
        elif frames:
            frames = False
            out.append(line)  # the exception's line
            if not line.rstrip().endswith(":"):
                break
        elif _TRACEBACK in line or said == MESSAGE_LINES:
            break
        else:
            out.append(line)
            said += 1
    return "\n".join(out).rstrip()


def folded_traceback(traceback: str) -> str:
    """``traceback`` with each frame of the user's own files named by its workdir path and each run of other
    frames (Python's, TensorFlow's, Keras's, tfcc's capture) folded into one line that counts them."""
    out: list[str] = []
    folded = 0
    lines = traceback.splitlines()
    i = 0
    while i < len(lines):
        frame = _ANY_FRAME.match(lines[i])
        if frame is None:
            if folded:
                out.append(f"  … {folded} frame{'s' * (folded != 1)} of Python, TensorFlow, Keras or tfcc")
                folded = 0
            out.append(lines[i])
            i += 1
            continue
        body = i + 1  # the frame's code line, and Python 3.11's ^^^^ marks under it
        while body < len(lines) and lines[body].startswith("    ") and not _ANY_FRAME.match(lines[body]):
            body += 1
        own = _WORK_PATH.search(frame[2])
        if own is None:
            folded += 1
        else:
            if folded:
                out.append(f"  … {folded} frame{'s' * (folded != 1)} of Python, TensorFlow, Keras or tfcc")
                folded = 0
            out.append(f'{frame[1]}File "{own[1]}", line {frame[3]}, in {frame[4]}')
            out.extend(lines[i + 1:body])
        i = body
    if folded:
        out.append(f"  … {folded} frame{'s' * (folded != 1)} of Python, TensorFlow, Keras or tfcc")
    return "\n".join(out)


def code_error(stderr: str) -> CodeError | None:
    """Where the user's code failed, from a task's stderr (None: its last traceback, if any, never went through
    the user's files: a signal, a lost peer, tfcc's own refusal)."""
    traceback = last_traceback(stderr, own=True)
    found = _last(_WORK_FRAME, traceback + "\n") if traceback else None
    exception = _last_exception(traceback) if found is not None else None
    if exception is None:
        return None
    return CodeError(found[1], int(found[2]), (found[3] or "").strip(), exception, folded_traceback(traceback))
