"""Where a run's tasks are, in words: every task's stacks (the agent's stacks op) grouped by where they are, one line
a group, and a verdict when one group differs (Qt-free).

Each task's answer is ``faulthandler``'s dump of its threads (trainer/stacks.py). A frame is the user's own
(``CODE``: under the task's copy of their workdir, shown as the path in their workdir; tfcc's trainer when it is the
one that trains), TensorFlow's (``TF``: tensorflow, tf_keras, keras), tfcc's (``TFCC``: the capture, the watcher,
``runpy``: folded away) or another library's (``LIB``: the standard library, NumPy). A thread is *in the user's code*
when its innermost user frame calls no TensorFlow (it waits on a lock, a queue, a socket, a sleep), *in TensorFlow*
when it does (``fit``'s step, ``evaluate``, a ``tf.function``, the input iterator, a server's ``join``, the
coordinator); a thread of neither is idle. A task is where its main thread is, unless one of its threads waits in the
user's code where its peers do not: that is where it is stuck, and the others wait for it (a step's collectives
wait for every worker). A task's process that is stopped, a zombie, silent, or whose host does not answer is
said as such; a task that reads a named pipe that gives nothing (the agent sees it in ``/proc``) is stuck there.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from agent.protocol import (PIPE_OPEN as OPEN, PIPE_READ as READ, WHERE_ANSWERED as ANSWERED,
                            WHERE_SILENT as SILENT, WHERE_STOPPED as STOPPED, WHERE_ZOMBIE as ZOMBIE, parse_task_name)
from trainer.tf_config import CHIEF, EVALUATOR, PS

CODE, TF, TFCC, LIB = "code", "tf", "tfcc", "lib"
IN_CODE, IN_TF, IDLE = "in code", "in tf", "idle"  # where a thread is (Place.kind)

# Beside the stacks op's states (agent/protocol.py): a host that does not answer, a task that has ended.
UNREACHABLE, GONE = "unreachable", "ended"
STATE_WORDS = {
    STOPPED: "is stopped (SIGSTOP: a debugger, Ctrl-Z or a job scheduler froze it) and answers no peer",
    ZOMBIE: "has ended, its process not yet reaped",
    SILENT: "gave no answer within the wait (a script run without tfcc's capture, or a thread that holds Python "
            "in native code)",
    UNREACHABLE: "cannot be asked: its host does not answer",
}

_THREAD = re.compile(r'^(?P<current>Current thread|Thread) (?P<ident>0x[0-9a-fA-F]+)(?: "[^"]*")? '
                     r'\(most recent call first\):\s*$')
_FRAME = re.compile(r'^\s+File "(?P<path>.*)", line (?P<line>\d+) in (?P<func>.*)$')
MAX_DUMP_CHARS = 256 * 1024  # of a task's dump read (the agent says no more; a host that says more is cut)
MAX_LINE_CHARS = 4096        # a longer line of a dump is no frame faulthandler writes
TF_PACKAGES = frozenset({"tensorflow", "tf_keras", "keras", "tensorflow_core", "tensorflow_estimator"})
# tfcc's trainer's own machinery (around a user's script, and beside tfcc's trainer): folded away.
TFCC_FILES = frozenset({"capture.py", "stacks.py", "__main__.py", "metrics.py", "stopping.py", "report.py",
                        "breakdown.py", "records.py", "process.py"})
TFCC_STANDS_IN = frozenset({"join"})  # the capture's frames that are a TensorFlow call's (a server's join)
# Frames that only wrap the call a person made (Keras's and TensorFlow's traceback filters).
WRAPPERS = frozenset({"error_handler", "wrapper", "_method_wrapper", "filter_traceback", "decorated", "wrapped",
                      "_disallow_inside_tf_function", "inner", "bound_method_wrapper", "new_func", "_call"})
MAX_SOURCE_BYTES = 2 << 20  # a source file bigger than this is not read for its line
MAX_SNIPPET = 60
FIT_STEP, SERVER_JOIN = "fit's step", "a server's join"  # calls people name (tf_call), the grouping asks after
MAX_STACK_LINES = 400  # of one task's stack, kept with the run's history


@dataclass(frozen=True)
class Frame:
    path: str   # as the task's host has it
    line: int
    func: str
    kind: str   # CODE | TF | TFCC | LIB
    shown: str  # the path as the person knows it (a user's: in their workdir; tfcc's trainer: trainer/...)
    source: str = ""  # the line's text, where the console has the file

    @property
    def at(self) -> str:
        return f"{self.shown}:{self.line}"


@dataclass
class Thread:
    ident: str
    main: bool
    frames: list[Frame]  # innermost first, as faulthandler writes them


@dataclass(frozen=True)
class Place:
    """Where one thread is: ``kind`` IN_CODE (blocked in the user's code at ``at``), IN_TF (in a TensorFlow call
    ``call`` made from the user's ``at``), or IDLE; ``called_by_tf``: a user's function TensorFlow runs (a
    generator, a ``py_function``): its step waits for it; ``collective``: a call whose collectives wait for every
    worker."""

    kind: str
    at: Frame | None = None
    call: str = ""
    collective: bool = False
    called_by_tf: bool = False
    main: bool = False
    frames: tuple = ()  # the thread's whole stack (path, line): a thread that waits shows the same one ask after ask

    @property
    def key(self) -> tuple:
        return (self.kind, self.at.shown if self.at else "", self.at.line if self.at else 0, self.call)

    def words(self) -> str:
        """``data.py:42 (`queue.get()`)``, ``fit's step (main.py:57 `model.fit`)``."""
        if self.kind == IN_CODE:
            return f"{self.at.at}" + (f" (`{self.call}`)" if self.call else "")
        where = f" ({self.at.at}" + (f" `{_callee(self)}`" if _callee(self) else "") + ")" if self.at else ""
        return f"{self.call}{where}"


def _callee(place: Place) -> str:
    """What the user's line calls, as written (``model.fit``; a step function by its name: ``train_step``), where
    the console has the line."""
    if not place.at.source:
        return ""
    if place.call in _CALLEE:
        return _named_call(place.at.source, _CALLEE[place.call])
    found = re.search(r"([A-Za-z_][\w.]*)\s*\(", place.at.source)
    return found.group(1) if found else ""


_CALLEE = {FIT_STEP: "fit", "evaluate": "evaluate", "predict": "predict", SERVER_JOIN: "join",
           "the coordinator's join": "join", "the coordinator's fetch": "fetch",
           "the coordinator's schedule": "schedule"}


def _named_call(source: str, name: str) -> str:
    found = re.search(rf"([A-Za-z_][\w.]*\.{name}|\b{name})\s*\(", source)
    return found.group(1) if found else ""


@dataclass
class TaskWhere:
    """One task's answer, read: its state, threads, its main thread's place and the places where its threads wait
    in the user's code."""

    task: str
    host: str
    state: str
    threads: list[Thread] = field(default_factory=list)
    main: Place | None = None
    waits: list[Place] = field(default_factory=list)  # its threads in the user's code (the main one first)
    fifos: list[tuple[str, str]] = field(default_factory=list)  # named pipes its threads wait on: (path, read | open)
    detail: str = ""                                  # an unreachable host's error, an ended task's end
    cut: bool = False                                  # its dump was longer than the agent says back

    @property
    def role(self) -> str:
        return parse_task_name(self.task)[0]


@dataclass
class Group:
    tasks: list[str]
    words: str        # what they do, after their names ("is stuck in data.py:42 (`queue.get()`)")
    stuck: bool = False


@dataclass
class Report:
    """A run's tasks grouped by where they are (``read``): ``lines`` one a group; ``verdict`` one line when a group
    differs ("" when nothing differs); ``stuck`` the tasks named; ``places`` the user's file:line each stuck task
    waits at (the restart policy compares attempts by it)."""

    tasks: list[TaskWhere]
    groups: list[Group]
    verdict: str
    stuck: list[str]
    places: tuple[str, ...]
    mismatch: bool = False  # workers in different distributed calls (each waits for the others)

    @property
    def lines(self) -> list[str]:
        return [f"{names_text(g.tasks)} {g.words}" for g in self.groups]

    def stack_lines(self, task: str) -> list[str]:
        """``task``'s whole stack, thread by thread, innermost first, tfcc's frames folded; paths as the person
        knows them."""
        where = next(t for t in self.tasks if t.task == task)
        if where.state != ANSWERED:
            return [STATE_WORDS.get(where.state, "has ended") + (f" ({where.detail})" if where.detail else "")]
        lines = []
        own = [t for t in where.threads if not t.main and _tfcc_thread(t)]
        for thread in where.threads:
            if thread in own:
                continue
            lines.append(f"{'main thread' if thread.main else 'thread ' + thread.ident}:")
            folded = 0
            for frame in thread.frames:
                if frame.kind == TFCC:
                    folded += 1
                    continue
                if folded:
                    lines.append(f"    ({folded} frame{'s' * (folded != 1)} of tfcc's own)")
                    folded = 0
                mark = {CODE: "> ", TF: "  ", LIB: "  "}[frame.kind]
                lines.append(f"  {mark}{frame.at} in {frame.func}" + (f"    {frame.source}" if frame.source else ""))
            if folded:
                lines.append(f"    ({folded} frame{'s' * (folded != 1)} of tfcc's own)")
        if own:
            lines.append(f"({len(own)} thread{'s' * (len(own) != 1)} of tfcc's own)")
        for path, how in where.fifos:
            lines.append(f"a thread waits to {how} the named pipe {path}")
        if where.cut:
            lines.append("(cut: the dump was longer than the agent says back)")
        return lines

    def as_dict(self) -> dict:
        """What is kept and said of it (the run's history, ``--json``, the window's Where are they?): ``lines`` one a
        group and ``groups`` the same with their tasks and whether they are stuck; each task's stack at most
        ``MAX_STACK_LINES`` lines."""
        def stack(task: str) -> list[str]:
            lines = self.stack_lines(task)
            return lines if len(lines) <= MAX_STACK_LINES else \
                lines[:MAX_STACK_LINES] + [f"({len(lines) - MAX_STACK_LINES} more lines)"]

        return {"verdict": self.verdict, "stuck": self.stuck, "places": list(self.places), "lines": self.lines,
                "groups": [{"tasks": g.tasks, "words": g.words, "stuck": g.stuck} for g in self.groups],
                "tasks": [{"task": t.task, "host": t.host, "state": t.state, "detail": t.detail,
                           "place": t.main.words() if t.main else "", "waits": [p.words() for p in t.waits],
                           "fifos": [{"path": path, "in": how} for path, how in t.fifos], "stack": stack(t.task)}
                          for t in self.tasks]}

    def same(self, other: "Report | None") -> bool:
        """Whether ``other`` (an earlier ask) found the same tasks stuck at the same places."""
        def seen(report: Report) -> tuple:
            return (tuple(report.stuck), report.places, tuple((tuple(g.tasks), g.stuck) for g in report.groups),
                    tuple((t.task, t.main.key if t.main else None) for t in report.tasks),
                    tuple((t.task, tuple((p.key, p.frames) for p in t.waits)) for t in report.tasks
                          if t.task in report.stuck))

        return other is not None and seen(self) == seen(other)


def _tfcc_thread(thread: Thread) -> bool:
    """A thread tfcc started (its watcher, its metrics writer, its stop's watch): tfcc's frames, no user's."""
    return any(f.kind == TFCC for f in thread.frames) and all(f.kind != CODE for f in thread.frames)


def names_text(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# ============================================================================ reading an answer


def parse(dump: str) -> list[tuple[str, bool, list[tuple[str, int, str]]]]:
    """faulthandler's dump: each thread's (ident, current, frames innermost first as (path, line, func))."""
    threads: list = []
    for line in dump[:MAX_DUMP_CHARS].splitlines():
        if len(line) > MAX_LINE_CHARS:
            continue
        head = _THREAD.match(line)
        if head:
            threads.append((head["ident"], head["current"] == "Current thread", []))
        elif line.startswith("Stack (most recent call first):"):
            threads.append(("0x0", True, []))
        else:
            frame = _FRAME.match(line)
            if frame and threads:
                threads[-1][2].append((frame["path"], int(frame["line"]), frame["func"].rstrip()))
    return threads


class Paths:
    """Which frames are whose, for one task: its copy of the user's workdir (``work``), tfcc's code on its host
    (``code``), the user's workdir on this machine (``local``, for each line's text), and whether tfcc's own trainer
    trains (its frames are then the code)."""

    def __init__(self, work: str | None, code: list[str], local: Path | None, trainer: bool,
                 files: dict | None = None):
        self.work = _folder(work)
        self.code = [c for c in (_folder(c) for c in code) if c]
        self.local = local
        self.trainer = trainer
        self.own = OWN  # tfcc's code here (its trainer's lines)
        self.files = {} if files is None else files  # file here -> its lines, read once for every task's frames

    def frame(self, path: str, line: int, func: str) -> Frame:
        kind, shown, local = self._kind(path)
        if local is None:
            return Frame(path, line, func, kind, shown)
        if local not in self.files:
            self.files[local] = _lines(local)
        return Frame(path, line, func, kind, shown, _snippet(self.files[local], line))

    def _kind(self, path: str) -> tuple[str, str, Path | None]:
        if self.work and path.startswith(self.work):
            rel = path[len(self.work):]
            return CODE, rel, _inside(self.local, rel)
        for code in self.code:
            if path.startswith(code):
                rel = path[len(code):]
                top = PurePosixPath(rel).parts[0] if rel else ""
                if self.trainer and top == "trainer" and PurePosixPath(rel).name not in TFCC_FILES:
                    return CODE, rel, _inside(self.own, rel)
                return TFCC, rel, None
        parts = PurePosixPath(path).parts
        if PurePosixPath(path).name == "runpy.py" or path == "<frozen runpy>":  # how the capture runs a script
            return TFCC, path, None
        if any(p in TF_PACKAGES for p in parts[:-1]) and ("site-packages" in parts or "dist-packages" in parts):
            return TF, _library_path(parts), None
        return LIB, _library_path(parts), None


OWN = Path(__file__).resolve().parent.parent  # tfcc's code on this machine


def _folder(path: str | None) -> str:
    return (path.rstrip("/") + "/") if isinstance(path, str) and path.strip("/") else ""


def _library_path(parts: tuple) -> str:
    """A library's file from its package on (``tensorflow/python/eager/execute.py``), the standard library's by
    its name."""
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1:])
    return parts[-1] if parts else ""


def _inside(folder: Path | None, rel: str) -> Path | None:
    """``folder / rel`` where it stays inside ``folder`` (a host names the paths: ``..`` or an absolute one reach
    no further), else None."""
    if folder is None:
        return None
    try:
        base = folder.resolve()
        path = (base / rel).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    return path if path.is_relative_to(base) and path != base else None


def _lines(path: Path) -> list[str]:
    """The lines of ``path``, a regular file of this machine's (no pipe or device is opened), read anew at each ask
    (the person may have edited it), at most ``MAX_SOURCE_BYTES``; [] where it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except (OSError, ValueError):
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_SOURCE_BYTES).decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    finally:
        os.close(fd)


def _snippet(lines: list[str], line: int) -> str:
    """Line ``line`` (1-based) of ``lines`` as a short snippet: its comment left out, cut to ``MAX_SNIPPET``."""
    words = lines[line - 1].strip() if 1 <= line <= len(lines) else ""
    words = re.sub(r"\s*#.*$", "", words) if "#" in words and "'" not in words and '"' not in words else words
    return words if len(words) <= MAX_SNIPPET else words[:MAX_SNIPPET - 1] + "…"


def place_of(thread: Thread) -> Place:
    """Where ``thread`` is (tfcc's frames left out): in the user's code where its innermost user frame calls no
    TensorFlow; else in the outermost TensorFlow call the user's code made (``fit``, not the step function it runs),
    at the user's frame that made it."""
    # tfcc's capture stands in for some of TensorFlow's calls (a server's join): those frames count as TensorFlow's.
    frames = [(replace(f, kind=TF) if f.kind == TFCC and f.func in TFCC_STANDS_IN else f) for f in thread.frames
              if f.kind != TFCC or f.func in TFCC_STANDS_IN]
    for i, frame in enumerate(frames):
        if frame.kind != CODE:
            continue
        inner, outer = frames[:i], frames[i + 1:]
        if any(f.kind == TF for f in inner):
            return _tf_place(frames, i, thread.main)
        # A user's function that TensorFlow calls (a generator, a py_function, a map's function).
        by_tf = any(f.kind == TF for f in outer)
        lib = [f for f in inner if f.kind == LIB]
        call = frame.source or (f"{PurePosixPath(lib[-1].shown).stem}.{lib[-1].func}" if lib else "")
        return Place(IN_CODE, frame, call, called_by_tf=by_tf, main=thread.main,
                     frames=tuple((f.path, f.line) for f in thread.frames))
    called = [f for f in frames if f.kind == TF]
    if called and thread.main:
        call, collective = tf_call(called)
        return Place(IN_TF, None, call, collective, main=True)
    return Place(IDLE, main=thread.main)


def _tf_place(frames: list[Frame], innermost: int, main: bool) -> Place:
    """A thread whose user code calls TensorFlow: the outermost call people name (``fit``, not the step function
    tfcc's or Keras's code runs inside it), at the user's frame that made it; else the innermost call."""
    boundaries = [j for j in range(len(frames) - 1, innermost - 1, -1)
                  if frames[j].kind == CODE and j > 0 and frames[j - 1].kind == TF]
    found = None
    for j in boundaries:  # outermost first
        k = j - 1
        while k >= 0 and frames[k].kind != CODE:
            k -= 1
        call, collective = tf_call([f for f in frames[k + 1:j] if f.kind == TF])
        found = found or (call, collective, frames[j])
        if not call.startswith(UNNAMED):
            return Place(IN_TF, frames[j], call, collective, main=main)
    call, collective, at = found
    return Place(IN_TF, at, call, collective, main=main)


UNNAMED = "TensorFlow's "


def tf_call(frames: list[Frame]) -> tuple[str, bool]:
    """The TensorFlow call ``frames`` (innermost first) are in, as people name it, and whether its collectives wait
    for every worker."""
    for frame in reversed(frames):  # from the call the person made inwards
        path, func = frame.shown, frame.func
        if func in WRAPPERS:
            continue
        if func in ("fit", "train_on_batch"):
            return FIT_STEP, True
        if func in ("evaluate", "test_on_batch"):
            return "evaluate", True
        if func in ("predict", "predict_on_batch"):
            return "predict", True
        if (path.endswith("server_lib.py") or path.endswith("trainer/capture.py")) and func == "join":
            return SERVER_JOIN, False
        if "cluster_coordinator" in path and func in ("join", "fetch", "schedule", "done"):
            return f"the coordinator's {func}", False
        if "iterator_ops" in path and func in ("__next__", "get_next", "next"):
            return "the input iterator", False
        if ("polymorphic_function" in path or "def_function" in path) and func == "__call__":
            return "a tf.function", True
        if "distribute_lib" in path and func in ("run", "reduce", "gather"):
            return f"strategy.{func}", True
        if "collective" in path or "all_reduce" in func or "batch_reduce" in func:
            return "an all-reduce", True
    name = next((f.func for f in reversed(frames) if f.func not in WRAPPERS), frames[-1].func)
    return f"{UNNAMED}{name}", False


def read_task(task: str, host: str, answer: dict | Exception, local: Path | None, trainer: bool,
              files: dict | None = None) -> TaskWhere:
    """One task's answer (the stacks op's dict, or the error that kept its host from answering), read (``files``:
    the user's files read so far, shared by every task of an ask)."""
    if isinstance(answer, Exception):
        return TaskWhere(task, host, UNREACHABLE, detail=str(answer))
    if not isinstance(answer, dict):  # a host that says anything: a task that gave no answer
        return TaskWhere(task, host, SILENT)
    state = answer.get("state")
    if state == GONE:
        return TaskWhere(task, host, GONE, detail=str(answer.get("detail") or ""))
    if state != ANSWERED or not isinstance(answer.get("stacks", ""), str):
        return TaskWhere(task, host, state if isinstance(state, str) and state in STATE_WORDS else SILENT)
    code = answer.get("code")
    paths = Paths(answer.get("work"), code if isinstance(code, list) else [], local, trainer, files)
    threads = []
    for ident, current, frames in parse(str(answer.get("stacks") or "")):
        read = [paths.frame(*f) for f in frames]
        # The main thread starts at a module (a script's, or runpy's for python -m and tfcc's capture); a thread
        # Python started at threading's bootstrap; one TensorFlow's runtime runs Python on (a generator, a
        # py_function) at TensorFlow's frames.
        outermost = read[-1] if read else None
        main = outermost is not None and (outermost.func == "<module>" or outermost.path == "<frozen runpy>"
                                          or PurePosixPath(outermost.path).name == "runpy.py")
        threads.append(Thread(ident, main, read))
    mains = [t for t in threads if t.main]
    for extra in mains[1:]:
        extra.main = False
    threads.sort(key=lambda t: not t.main)
    places = [place_of(t) for t in threads]
    main = next((p for p in places if p.main), None)
    waits = [p for p in places if p.kind == IN_CODE]
    fifos = []
    for fifo in answer.get("fifos") or []:  # {"path", "in": "read" | "open"}
        if isinstance(fifo, dict) and isinstance(fifo.get("path"), str):
            fifos.append((fifo["path"], OPEN if fifo.get("in") == OPEN else READ))
    return TaskWhere(task, host, ANSWERED, threads, main, waits, fifos, cut=bool(answer.get("cut")))


# ============================================================================ grouping


def read(answers: list[tuple[str, str, dict | Exception]], local: Path | None = None, trainer: bool = False,
         silent: dict[str, float] | None = None, before: "Report | None" = None) -> Report:
    """Each task's answer (task, host, answer), grouped and worded. ``local``: the user's workdir on this machine
    (the lines' text); ``trainer``: tfcc's own trainer trains (its frames are the code); ``silent``: how long each
    task has made no step, when asked of a stalled run (then tasks all alike are a verdict too); ``before``: an
    ask a moment earlier: a task is stuck only where its thread waited then too, with the same whole stack (one
    look catches a healthy task in its generator)."""
    files: dict = {}
    tasks = [read_task(task, host, answer, local, trainer, files) for task, host, answer in answers]
    silent = silent or {}
    training = [t for t in tasks if t.role != EVALUATOR]  # an evaluator is a sidecar: no peer waits for it
    answered = [t for t in training if t.state == ANSWERED]
    # A place most of the training tasks wait at is where they all are (an uploader's queue); one few are at is not.
    counts: dict[tuple, int] = {}
    for t in answered:
        for key in {p.key for p in t.waits}:
            counts[key] = counts.get(key, 0) + 1
    common = {key for key, n in counts.items() if n > len(answered) / 2} if len(answered) > 1 else set()
    earlier = {t.task: t for t in before.tasks} if before is not None else None
    pipes: dict[tuple, int] = {}
    for t in answered:
        # (a pipe read at one look may be one that gives, read as it comes: it counts where it was waited on before)
        waited = set(t.fifos) if earlier is None else set(t.fifos) & set(getattr(earlier.get(t.task), "fifos", ()))
        t.fifos = [p for p in t.fifos if p in waited]
        for pipe in set(t.fifos):
            pipes[pipe] = pipes.get(pipe, 0) + 1
    own: dict[str, list[Place]] = {}
    for t in answered:
        mine = [p for p in t.waits if p.key not in common and _waited(p, t.task, earlier)]
        strong = [p for p in mine if p.main or p.called_by_tf]
        # A thread of the user's own that waits (an uploader between uploads, a watcher between looks) is no cause
        # by itself; beside a strong one it is said too (a deadlock's other side).
        if strong:
            own[t.task] = strong + [p for p in mine if p not in strong]
    groups: list[Group] = []
    stuck: list[str] = []
    places: list[str] = []

    def add(names: list[str], words: str, is_stuck: bool) -> None:
        for g in groups:  # (each stuck task its own line: its words are of one task)
            if g.words == words and not is_stuck and not g.stuck:
                g.tasks += names
                return
        groups.append(Group(list(names), words, is_stuck))

    for t in training:
        if t.state in STATE_WORDS:
            add([t.task], STATE_WORDS[t.state] + (f" ({t.detail})" if t.detail and t.state == UNREACHABLE else ""),
                True)
            stuck.append(t.task)
        elif t.task in own:
            ps = own[t.task]
            words = f"is stuck in {ps[0].words()}"
            if len(ps) > 1:
                words += (f"; its other thread{'s' * (len(ps) > 2)} wait{'s' * (len(ps) == 2)} in "
                          + " and ".join(p.words() for p in ps[1:]))
            add([t.task], words, True)
            stuck.append(t.task)
            places += [p.at.at for p in ps if p.at is not None]
        elif t.state == ANSWERED and any(pipes[p] <= len(answered) / 2 or len(answered) == 1 for p in set(t.fifos)):
            mine = sorted(p for p in set(t.fifos) if pipes[p] <= len(answered) / 2 or len(answered) == 1)
            where = f" ({t.main.words()})" if t.main and t.main.kind != IDLE else ""
            opening = [path for path, how in mine if how == OPEN]
            reading = [path for path, how in mine if how == READ]
            words = "; ".join(([f"is stuck reading the named pipe {', '.join(reading)}, which gives nothing"]
                               if reading else []) +
                              ([f"is stuck opening the named pipe {', '.join(opening)}: nothing opens its other "
                                "end"] if opening else []))
            add([t.task], words + where, True)
            stuck.append(t.task)
    others = [t for t in training if t.task not in stuck and t.state == ANSWERED]
    ended = [t for t in training if t.state == GONE]
    mismatch = ""
    in_calls = [t for t in others if t.main is not None and t.main.kind == IN_TF and t.main.collective]
    if not stuck and len({t.main.call for t in in_calls}) > 1:
        # Workers in different distributed calls (evaluate on the chief alone): each waits for the others.
        odd = _odd_ones(in_calls)
        rest = [t for t in in_calls if t not in odd]
        for t in odd:
            add([t.task], f"is in {t.main.words()}", True)
            stuck.append(t.task)
            if t.main.at is not None:
                places.append(t.main.at.at)
        mismatch = (f"{names_text([t.task for t in odd])} {'is' if len(odd) == 1 else 'are'} in "
                    f"{odd[0].main.words()} while {names_text([t.task for t in rest])} "
                    f"{'is' if len(rest) == 1 else 'are'} in {rest[0].main.words()}: every worker must make "
                    "the same distributed calls, in the same order")
        others = [t for t in others if t not in odd]
    for t in others + [t for t in tasks if t.role == EVALUATOR and t.state == ANSWERED]:
        place = t.main
        if place is None or place.kind == IDLE:
            add([t.task], "is in no code of the script's or TensorFlow's (only idle threads)", False)
        elif place.kind == IN_CODE:
            add([t.task], f"is in {place.words()}", False)
        elif t.role == PS or place.call == SERVER_JOIN:
            add([t.task], f"serves ({place.words()})", False)
        elif stuck and place.collective and t.role != EVALUATOR:
            add([t.task], f"waits for {'it' if len(stuck) == 1 else 'them'} in {place.words()}", False)
        else:
            add([t.task], f"is in {place.words()}", False)
    for t in tasks:
        if t.role == EVALUATOR and t.state != ANSWERED:
            add([t.task], STATE_WORDS.get(t.state, "has ended") + (f" ({t.detail})" if t.detail else ""), False)
    for t in ended:
        add([t.task], f"has ended ({t.detail})" if t.detail else "has ended", False)
    for g in groups:  # plural forms of what a group of several does
        if len(g.tasks) > 1:
            g.words = _plural(g.words)
    verdict = ""
    if mismatch:
        verdict = mismatch
    elif stuck:
        verdict = "; ".join(f"{names_text(g.tasks)} {g.words}" for g in groups if g.stuck or g.words.startswith(
            "wait"))
    elif ended and others:
        # Tasks that wait in a call that needs every worker (a collective, the coordinator) for one that ended.
        waiting = [t for t in others if t.main is not None and t.main.kind == IN_TF and t.role != PS
                   and t.main.call != SERVER_JOIN and (t.main.collective or "coordinator" in t.main.call)]
        if waiting:
            needs = ("parameter-server training needs its workers until the coordinator's end"
                     if any(t.role == PS for t in tasks) else "every worker must take part in every step")
            verdict = (f"{names_text([t.task for t in waiting])} {_plural('waits ', len(waiting))}in "
                       f"{waiting[0].main.words()} for {names_text([t.task for t in ended])}, which "
                       f"{'has' if len(ended) == 1 else 'have'} ended: {needs}")
            stuck += [t.task for t in waiting + ended]
    elif silent and others:
        # Asked of a stalled run: all alike in TensorFlow means the wait is where no Python stack shows it.
        same = {t.main.key for t in others if t.main is not None}
        if len(same) == 1 and others[0].main is not None and others[0].main.kind == IN_TF:
            verdict = (f"every task is in {others[0].main.words()}: none is elsewhere in Python; the wait is inside "
                       "TensorFlow (a peer's host, the network, a native op, the input)")
    return Report(tasks, groups, verdict, stuck, tuple(sorted(set(places))), bool(mismatch))


def _waited(place: Place, task: str, earlier: dict | None) -> bool:
    """Whether ``place`` is where ``task``'s thread also waited at the ask before (the same whole stack); with no
    ask before, it is taken as it is."""
    if earlier is None:
        return True
    then = earlier.get(task)
    return then is not None and any(p.key == place.key and p.frames == place.frames for p in then.waits)


def _odd_ones(tasks: list[TaskWhere]) -> list[TaskWhere]:
    """Of workers in different distributed calls, those elsewhere: not in fit's step, else the fewer, else the
    chief's group."""
    by_call: dict[str, list[TaskWhere]] = {}
    for t in tasks:
        by_call.setdefault(t.main.call, []).append(t)
    others = [ts for call, ts in by_call.items() if call != FIT_STEP]
    if len(others) < len(by_call):
        return [t for ts in others for t in ts]
    fewest = min(len(ts) for ts in by_call.values())
    small = [ts for ts in by_call.values() if len(ts) == fewest]
    return next((ts for ts in small if any(t.role == CHIEF or t.task.endswith("-0") for t in ts)), small[0])


def _plural(words: str, n: int = 2) -> str:
    if n == 1:
        return words
    for one, many in (("is ", "are "), ("has ", "have "), ("waits ", "wait "), ("serves ", "serve "),
                      ("gave ", "gave ")):
        if words.startswith(one):
            return many + words[len(one):]
    return words


def local_workdir(cluster) -> Path | None:
    """The user's workdir on this machine (its files' lines are read from it), or None for tfcc's trainer."""
    training = cluster.training
    if training.workdir:
        return Path(os.path.expanduser(training.workdir))
    if training.script:
        return Path(os.path.expanduser(training.script)).parent
    return None
