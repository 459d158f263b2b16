"""What this console received of each run, kept on its own disk (Qt-free; it never reaches a host).

While a ``RunSession`` follows a run, its ``History`` appends what arrives to
``<state>/runs/<run_id>/`` (beside the manifest ``<state>/runs/<run_id>.json``):

- ``<task>.jsonl``: the task's metrics lines as its host's ``metrics.jsonl`` has them (as the
  agent sends them: a byte that is not UTF-8 there is U+FFFD here), from its first line, so a
  session, which reads each task from its first record, adds only the lines the cache lacks;
- ``console.jsonl``: what the console itself said of the run (task ends, supervision, the
  watchdog, the tasks' states), one JSON object a line;
- ``system-<host>.jsonl``: the host's system samples, when the session delivers them;
- ``summary.json`` (written whole, at each change of the run's state): state, hosts and tasks,
  start, end, duration, final metrics, and whether each task's end was received (the cache then
  holds its whole history);
- ``store/``: a snapshot of the session's metrics store when the session ended (``MetricsStore.save``,
  console.store.snapshot), with the byte offset of each task's metrics file it covers and the records
  supervision needs again. The next session of the run (a reattach) fills its store from it and reads each task on
  from that offset; a finished run reopens from it. Nothing is decoded again: 128 workers ×
  100,000 steps come back in about a second (bench/dashboard_load.py), where replaying their
  lines takes a minute.

Lines are appended as they come, to buffered files flushed once per batch the session handles.
``fill_from_cache`` fills a ``MetricsStore`` with what the cache holds of a run (console.catalog
decides when that is enough, and replays the rest from the hosts). A damaged file is read as far as
it is good, with a note saying what was skipped; nothing here raises for a damaged cache.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import shutil
import threading
import time
from pathlib import Path

from agent.protocol import END, RUNNING
from console.errors import RunError, TfccError, make_state_dir, state_dir
from console.files import open_private, write_atomically
from console.states import RunState, SessionKind, run_state
from console.store import snapshot as snapshots
from console.store.manifests import check_run_id, manifest_path
from trainer.records import Batch, RecordType, decode_line, metrics_of
from trainer.tf_config import chief_name

log = logging.getLogger("console.store.cache")

SUMMARY = "summary.json"
STORE = "store"  # the folder of the metrics store's snapshot (MetricsStore.save) when the session ended
CONSOLE = "console.jsonl"
# The console's own lines in console.jsonl: a note it said of the run, or a task's supervision state.
NOTE, STATE = "note", "state"
CONSOLE_TASK = "console"  # the task a note of the console itself (not of one task) is under
# Supervision's events after which the run's state is worked out again; the summary is written after each
# but a restarting (then only when something changed).
CHANGES_STATE = (SessionKind.RESTARTING, SessionKind.RESTARTED, SessionKind.GAVE_UP, SessionKind.OFFERED)
WRITES_SUMMARY = (SessionKind.TASK_ENDED, SessionKind.ENDED, SessionKind.RESTARTED, SessionKind.GAVE_UP,
                  SessionKind.OFFERED)


# How long a session waits for the cache of its run while another keeps it: the session before
# it (a reattach, a resume) may be writing its snapshot still.
WRITER_WAIT_SECONDS = 3.0


def _lock_within(handle, seconds: float) -> None:
    """Take ``handle``'s exclusive lock, trying for ``seconds``; ``BlockingIOError`` if it stays taken."""
    deadline = time.monotonic() + seconds
    pause = threading.Event()
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            pause.wait(0.05)


class HistoryError(TfccError):
    """A run's history cannot be had; the message says what to do."""


def cache_dir(run_id: str) -> Path:
    return state_dir() / "runs" / check_run_id(run_id)


def task_file(folder: Path, task: str) -> Path:
    return folder / f"{task}.jsonl"


def _system_file(folder: Path, host: str) -> Path:
    return folder / f"system-{host}.jsonl"


# ============================================================================ writing


class History:
    """The cache of one run, written by the session that follows it (on the session's thread).

    ``lines`` takes a task's metrics lines as the agent sent them (with the byte offset of the
    host's file after them), ``on_event`` is the session's listener (records for the summary,
    task ends, supervision, states, system samples), ``flush`` ends a batch, ``close`` the session.
    Nothing is read or written before the first of them: a session is made on the UI thread.
    A cache that cannot be written is said once in the log and the run goes on without it.
    """

    def __init__(self, run):
        self.run = run
        self.run_id = run.run_id
        self.folder = cache_dir(run.run_id)
        self._lock = threading.Lock()
        self._opened = False
        self._broken: str | None = None
        self._files: dict[str, object] = {}   # file name -> its open append handle
        self._cached: dict[str, int] = {}     # task -> lines its cache file holds
        self._seen: dict[str, int] = {}       # task -> lines this session received (from the task's first)
        self._summary: dict = {}
        self._changed = False                 # the summary changed since it was written
        self._rewrite: set[str] = set()       # tasks whose file is written anew from their first lines
        self._lock_file = None                # held while this session keeps the cache (one writer)

    # ------------------------------------------------------------ the session's calls

    def lines(self, task: str, lines: list[str], offset: int | None = None, skipped: int = 0) -> None:
        """A task's metrics lines, as its host's file has them; ``offset`` is where they end in it (``skipped``:
        the bytes by which the file's lines are longer: a line over the cap comes as a short note)."""
        if not lines:
            return
        with self._lock:
            if not self._ready():
                return
            try:
                handle = self._handle(task_file(self.folder, task).name, task)
                seen = self._seen.get(task, 0)
                if seen == 0 and offset is not None and offset - skipped - sum(len(line.encode("utf-8")) + 1
                                                                              for line in lines) > 0:
                    # Not the task's first line (a session reads from the first): the lines cannot be
                    # matched with the cache's. Kept, and the cache is marked not whole.
                    self._gap(task)
                    self._cached[task] = self._seen[task] = 0
                    seen = 0
                skip = max(0, min(len(lines), self._cached.get(task, 0) - seen))  # what it has (a replay)
                self._seen[task] = seen + len(lines)
                if skip == len(lines):
                    return
                handle.write("".join(line + "\n" for line in lines[skip:]).encode("utf-8"))
                self._cached[task] = self._cached.get(task, 0) + len(lines) - skip
                info = self._task_info(task)
                if info.get("complete"):  # a relaunched task writes on: its end is to come again
                    info["complete"] = False
                    self._changed = True
            except OSError as exc:
                self._give_up(exc)

    def on_event(self, event) -> None:
        """A session event: what the summary and ``console.jsonl`` keep of it."""
        kind = event.kind
        if kind == SessionKind.RECORDS:
            self._records(event.task.name, event.batch if isinstance(event.batch, Batch) else Batch(event.records))
            return
        note = None
        with self._lock:
            if not self._ready():
                return
            if kind == SessionKind.TASK_ENDED:
                task = event.task
                message = event.message or {}
                exit_ = message.get("exit") or {}
                info = self._task_info(task.name)
                ended = exit_.get("ended") if isinstance(exit_, dict) else None
                ended = ended if isinstance(ended, (int, float)) and math.isfinite(ended) else None
                info.update(phase=task.phase, stopped=bool(message.get("stopped")), ended=ended,
                            complete=message.get("type") == END)
                note = {"kind": NOTE, "time": ended or time.time(), "task": task.name, "event": task.phase,
                        "text": f"process ended: {event.text}"}
                self._update_state()
            elif kind == SessionKind.CONNECTION:
                note = {"kind": NOTE, "time": time.time(), "task": event.task.name,
                        "event": (event.message or {}).get("type", kind), "text": event.text}
            elif kind in SessionKind.NOTED:
                note = {"kind": NOTE, "time": time.time(), "task": CONSOLE_TASK, "event": kind, "text": event.text}
                if kind == SessionKind.WHERE:  # each task's stacks, as they were when the run stalled
                    note["where"] = (event.message or {}).get("where")
                if kind in CHANGES_STATE:
                    self._update_state()
            elif kind == SessionKind.STATE:
                note = {"kind": STATE, "time": time.time(), "task": event.task.name,
                        "state": (event.message or {}).get("state", ""), "text": event.text}
            elif kind == SessionKind.ENDED:
                self._update_state(ended=True)
            elif kind == SessionKind.SYSTEM:
                self._system(event)
            if note is not None:
                self._append(CONSOLE, json.dumps(note, allow_nan=False, default=str) + "\n")
            if kind in WRITES_SUMMARY or (kind == SessionKind.RESTARTING and self._changed):
                self._write_summary()

    def restore_store(self, store) -> snapshots.Snapshot | None:
        """Fill the (empty) ``store`` from the snapshot the run's last session left, where this cache
        vouches for it: every task's file holds at least the lines the snapshot covers and none is to
        be written anew. Returns the snapshot (its ``offsets``: where each task's metrics file is to be
        read on from), or None: nothing restored, the session reads every task from its first record.
        Before the session receives anything (it counts the restored lines as seen)."""
        with self._lock:
            if not self._ready():
                return None
            state = snapshots.read(self.folder / STORE)
            if state is None:
                return None
            lines, offsets = state.lines, state.offsets
            tasks = {t.name for t in self.run.tasks}
            if not (lines and offsets and set(lines) <= tasks and set(offsets) <= tasks):
                return None
            if any(name in self._rewrite or not isinstance(n, int) or self._cached.get(name, 0) < n
                   for name, n in lines.items()):
                log.info("run %s: its cache does not hold what its snapshot covers: read from the first records",
                         self.run_id)
                return None
        try:
            store.restore(self.folder / STORE, state)  # not under the cache's lock: it takes a while
        except (OSError, ValueError) as exc:
            log.warning("run %s: its metrics snapshot cannot be read (%s): read from the first records",
                        self.run_id, exc)
            return None
        with self._lock:
            self._seen.update(lines)
        return state

    def forget_seen(self) -> None:
        """A snapshot could not be taken up after all: the session reads every task from its first line."""
        with self._lock:
            self._seen.clear()

    def save_store(self, store, offsets: dict[str, int], kept: dict[str, list[dict]]) -> None:
        """Keep ``store`` as the run's snapshot, with where each task's metrics file was read to
        (``offsets``), the records supervision needs again (``kept``) and how many lines of each task it
        covers; at the session's end (on its thread, after everything it received was handled)."""
        with self._lock:
            if not self._opened or self._broken:
                return
            lines = dict(self._seen)
            try:
                for handle in self._files.values():
                    handle.flush()
                sizes = {name: task_file(self.folder, name).stat().st_size for name in lines
                         if task_file(self.folder, name).exists()}
            except OSError as exc:
                log.warning("run %s: no metrics snapshot: %s", self.run_id, exc)
                return
        try:
            store.save(self.folder / STORE, offsets=offsets, kept=kept, lines=lines, sizes=sizes)
        except OSError as exc:
            log.warning("run %s: its metrics snapshot could not be written: %s", self.run_id, exc)

    def flush(self) -> None:
        """The end of a batch: what was appended goes to the disk (buffered till now)."""
        with self._lock:
            for handle in self._files.values():
                try:
                    handle.flush()
                except OSError as exc:
                    self._give_up(exc)
                    return

    def close(self) -> None:
        with self._lock:
            if self._opened and not self._broken and self._changed:
                self._write_summary()
            for handle in self._files.values():
                try:
                    handle.close()
                except OSError as exc:
                    log.warning("run %s: closing its history cache: %s", self.run_id, exc)
            self._files.clear()
            self._unlock()

    def _unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing releases the lock
            self._lock_file = None

    # ------------------------------------------------------------ inside

    def _ready(self) -> bool:
        """Open the cache on first use: the folder, the summary so far, what each task's file holds."""
        if self._broken:
            return False
        if self._opened:
            return True
        self._opened = True
        try:
            make_state_dir(self.folder)
            self._lock_file = open_private(self.folder / ".writer", "a")
            try:
                _lock_within(self._lock_file, WRITER_WAIT_SECONDS)
            except BlockingIOError:  # another session (this console's or another's) keeps it: one writer
                self._lock_file.close()
                self._lock_file = None
                self._broken = "another session keeps it"
                log.info("run %s: another session keeps its history cache", self.run_id)
                return False
            old, _ = read_summary(self.run_id)
            tasks = [t.name for t in self.run.tasks]
            hosts: dict[str, list[str]] = {}
            for t in self.run.tasks:
                hosts.setdefault(t.host, []).append(t.name)
            cluster = self.run.cluster
            self._summary = {
                "run_id": self.run_id, "state": old.get("state", RunState.RUNNING), "hosts": hosts, "tasks": {},
                "workload": cluster.training.trains,
                "epochs": cluster.training.epochs, "start": old.get("start"), "end": old.get("end"),
                "duration": old.get("duration"), "metrics": old.get("metrics") or {},
                "task_metrics": old.get("task_metrics") or {}}
            for name in tasks:
                before = (old.get("tasks") or {}).get(name) or {}
                info = {"phase": before.get("phase", RUNNING), "stopped": bool(before.get("stopped")),
                        "ended": before.get("ended"), "complete": bool(before.get("complete")),
                        "gap": bool(before.get("gap"))}
                path = task_file(self.folder, name)
                if info["gap"] or not old:
                    # It missed or damaged lines once, or no summary vouches for it: this session, which
                    # reads the task from its first record, writes it anew when its first lines come
                    # (until then, what it holds stays: a replay that cannot reach the host keeps it).
                    self._rewrite.add(name)
                    info.update(gap=False, complete=False)
                self._cached[name] = 0 if name in self._rewrite else _whole_lines(path)
                self._summary["tasks"][name] = info
            if not old:
                self._changed = True
                self._write_summary()
        except OSError as exc:
            self._give_up(exc)
            return False
        return True

    def _task_info(self, task: str) -> dict:
        return self._summary["tasks"].setdefault(task, {"phase": RUNNING, "stopped": False, "ended": None,
                                                        "complete": False, "gap": False})

    def _gap(self, task: str) -> None:
        info = self._task_info(task)
        if not info.get("gap"):
            log.warning("run %s: the history of %s misses lines (its session did not read it from the start)",
                        self.run_id, task)
            info["gap"] = True
            self._changed = True

    def _handle(self, name: str, task: str | None = None):
        handle = self._files.get(name)
        if handle is None:
            fresh = task in self._rewrite
            self._rewrite.discard(task)
            handle = self._files[name] = open_private(self.folder / name, "wb" if fresh else "ab")
            if task is not None and task not in self._cached:  # not a task of the run's manifest
                self._cached[task] = _whole_lines(self.folder / name)
        return handle

    def _append(self, name: str, text: str) -> None:
        try:
            self._handle(name).write(text.encode("utf-8"))
        except OSError as exc:
            self._give_up(exc)

    def _records(self, task: str, batch: Batch) -> None:
        """The run's start and each task's last metrics, as its batch of records has them (no other work)."""
        start, last = batch.launched_at, batch.last_metrics
        if start is None and last is None:
            return
        with self._lock:
            if not self._ready():
                return
            summary = self._summary
            if start is not None and (summary.get("start") is None or start < summary["start"]):
                summary["start"] = start
                self._changed = True
            if last is not None:
                metrics = metrics_of(last)
                if metrics:
                    summary["task_metrics"][task] = metrics
                    names = list(summary["task_metrics"])  # the chief's numbers are the run's
                    summary["metrics"] = summary["task_metrics"][chief_name(names) or names[0]]
                    self._changed = True

    def _system(self, event) -> None:
        """System samples (``system`` records of a host): one file per host."""
        message = event.message or {}
        records = event.records or ([message] if message else [])
        host = getattr(event, "host", "") or (event.task.host if event.task is not None else None)
        for record in records:
            if not isinstance(record, dict):
                continue
            where = host or record.get("host")
            if not isinstance(where, str) or not where:
                continue
            try:
                check_run_id(where)  # a host's name becomes a file name: nothing odd in it
            except RunError:
                continue
            self._append(_system_file(self.folder, where).name,
                         json.dumps(record, allow_nan=False, default=str) + "\n")

    def _update_state(self, ended: bool = False) -> None:
        tasks = self.run.tasks
        state = run_state([t.phase for t in tasks],
                          [self._task_info(t.name).get("stopped", False) for t in tasks])
        summary = self._summary
        if state != summary.get("state"):
            summary["state"] = state
            self._changed = True
        if state in RunState.ENDED:
            ends = [i.get("ended") for i in summary["tasks"].values() if isinstance(i.get("ended"), (int, float))]
            end = max(ends) if ends else (time.time() if ended else summary.get("end"))
            if end is not None and end != summary.get("end"):
                summary["end"] = end
                self._changed = True
        elif summary.get("end") is not None:
            summary["end"] = None
            self._changed = True
        start, end = summary.get("start"), summary.get("end")
        summary["duration"] = end - start if isinstance(start, (int, float)) and isinstance(end, (int, float)) \
            else None

    def _write_summary(self) -> None:
        if self._broken:
            return
        try:
            for handle in self._files.values():  # the lines before the summary that counts them whole
                handle.flush()
            self._summary["updated"] = time.time()
            write_atomically(self.folder / SUMMARY, json.dumps(self._summary, indent=1, default=str), mode=0o600)
            self._changed = False
        except (OSError, ValueError) as exc:
            self._give_up(exc)

    def _give_up(self, exc: BaseException) -> None:
        if not self._broken:
            self._broken = str(exc)
            log.warning("run %s: its history cannot be kept in %s (%s); the run goes on without it",
                        self.run_id, self.folder, exc)
        for handle in self._files.values():
            try:
                handle.close()
            except OSError:
                pass
        self._files.clear()
        self._unlock()


def _whole_lines(path: Path) -> int:
    """How many whole lines ``path`` holds; a last line cut by a crash is dropped from the file."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    count = 0
    with open(path, "rb+") as f:
        while True:
            chunk = f.read(1 << 22)
            if not chunk:
                break
            count += chunk.count(b"\n")
        f.seek(size - 1)
        if f.read(1) != b"\n":
            keep, end = 0, size  # the end of the last whole line: looked for backwards, however long the cut one
            while end > 0:
                start = max(0, end - (1 << 20))
                f.seek(start)
                found = f.read(end - start).rfind(b"\n")
                if found >= 0:
                    keep = start + found + 1
                    break
                end = start
            f.truncate(keep)
            log.warning("%s ended in a cut line (a crash while writing); it was dropped", path)
    return count


# ============================================================================ reading


def read_summary(run_id: str) -> tuple[dict, str | None]:
    """A run's ``summary.json``: (its content, None), or ({}, why not) when missing or damaged."""
    path = cache_dir(run_id) / SUMMARY
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError) as exc:
        return {}, f"the history summary of run {run_id} ({path}) is damaged ({type(exc).__name__}); it is ignored"
    if not isinstance(data, dict):
        return {}, f"the history summary of run {run_id} ({path}) is damaged (not an object); it is ignored"
    return data, None


def whole(summary: dict, tasks: list[str]) -> bool:
    """Whether the cache holds every task's whole history: the session received each one's end."""
    infos = summary.get("tasks") or {}
    return bool(tasks) and all(isinstance(infos.get(t), dict) and infos[t].get("complete") and not infos[t].get("gap")
                               for t in tasks)


def _decode(line: str) -> dict | None:
    """One cached line as a JSON object with a string ``type`` or ``kind``, else None (damaged)."""
    try:
        item = json.loads(line)
    except ValueError:
        return None
    if isinstance(item, dict) and (isinstance(item.get("type"), str) or isinstance(item.get("kind"), str)):
        return item
    return None


def read_lines(path: Path, notes: list[str], batch: int = 20_000, metrics: bool = False, cut: list | None = None):
    """The records of a cached file, in batches, read as far as it is good, with one note on what was not.

    ``metrics``: a task's metrics lines, decoded as the session decodes them (a line that is no record
    was one on the host too: it comes as an ``unreadable`` record, as it did live). Other files are
    the console's own: a line that is no object is skipped. A last line cut short (a crash while it
    was written) is skipped, and said; ``cut`` gets the file's path then.
    """
    bad = 0
    first = None
    ended_cut = False
    out = []
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                if not raw.endswith(b"\n"):
                    ended_cut = True
                    break
                line = raw[:-1].decode("utf-8", "replace")
                record = decode_line(line) if metrics else _decode(line)
                if record is None or record.get("type") == RecordType.UNREADABLE:
                    bad += 1
                    first = first or number
                    if record is None:
                        continue
                out.append(record)
                if len(out) >= batch:
                    yield out
                    out = []
    except OSError as exc:
        notes.append(f"{path} could not be read to its end ({exc.strerror or exc}); what came before is shown")
    if out:
        yield out
    said = []
    if bad:
        said.append(f"{bad} line(s) that are not records (the first is line {first}): "
                    + ("shown as unreadable, as they came" if metrics else "skipped"))
    if ended_cut:
        said.append("its last line was cut short (a crash while it was written) and is skipped")
        if cut is not None:
            cut.append(path)
    if said:
        notes.append(f"{path.name} of this run's history here has {' and '.join(said)}; the rest is shown")


def _mark_for_rewrite(run_id: str, tasks: list[str]) -> None:
    """The cache of ``tasks`` is damaged: the next replay from the hosts writes it anew."""
    summary, _ = read_summary(run_id)
    infos = summary.get("tasks")
    if not isinstance(infos, dict):
        return
    for task in tasks:
        if isinstance(infos.get(task), dict):
            infos[task]["gap"] = True
    try:
        write_atomically(cache_dir(run_id) / SUMMARY, json.dumps(summary, indent=1, default=str), mode=0o600)
    except OSError as exc:
        log.warning("run %s: cannot mark its damaged history cache (%s)", run_id, exc)


def _read_objects(path: Path, notes: list[str]):
    for batch in read_lines(path, notes):
        yield from batch


def _snapshot_is_whole(folder: Path, tasks: list[str]) -> bool:
    """Whether the snapshot in ``folder`` covers everything its cache holds (no session wrote on after it)."""
    state = snapshots.read(folder / STORE)
    if state is None:
        return False
    sizes = state.sizes
    try:
        return all(sizes.get(task, 0) == (task_file(folder, task).stat().st_size
                                          if task_file(folder, task).exists() else 0) for task in tasks)
    except OSError:
        return False


def fill_from_cache(run_id: str, store, tasks: list[str], hosts: list[str] | None = None) -> list[str]:
    """Put what the cache holds of ``run_id`` into ``store``; the notes on what was damaged. The metrics
    and system samples come from the snapshot when it covers the whole cache, else from the lines;
    what the console said (notes, states) from ``console.jsonl``."""
    folder = cache_dir(run_id)
    notes: list[str] = []
    restored = False
    if _snapshot_is_whole(folder, tasks):
        try:
            store.restore(folder / STORE)  # the store as the session left it: nothing decoded again
            restored = True
        except (OSError, ValueError) as exc:  # the store is empty again: read the lines instead
            log.warning("run %s: its metrics snapshot cannot be read (%s): reading its cache", run_id, exc)
    damaged = []
    for task in [] if restored else tasks:
        path = task_file(folder, task)
        if path.exists():
            cut: list = []
            for records in read_lines(path, notes, metrics=True, cut=cut):
                store.ingest(task, records)
            if cut:
                damaged.append(task)
    if damaged:  # a line lost in a crash: the next replay from the hosts writes the task's file anew
        _mark_for_rewrite(run_id, damaged)
    console = folder / CONSOLE
    if console.exists():
        for item in _read_objects(console, notes):
            if item.get("kind") == STATE and isinstance(item.get("task"), str):
                store.set_state(item["task"], str(item.get("state", "")), str(item.get("text", "")))
            elif item.get("kind") == NOTE and isinstance(item.get("task"), str):
                when = item.get("time")
                store.note(item["task"], str(item.get("event", "")), str(item.get("text", "")),
                           when if isinstance(when, (int, float)) else None)
    ingest_system = getattr(store, "ingest_system", None)
    if ingest_system is not None and not restored:
        for path in sorted(folder.glob("system-*.jsonl")):
            host = path.name[len("system-"):-len(".jsonl")]
            if hosts is not None and host not in hosts:
                continue
            for record in _read_objects(path, notes):
                ingest_system(host, record, tasks=set(tasks))  # the host's name as the session gave it
    return notes


def remove_cache(run_id: str) -> None:
    """Delete this console's manifest and history cache of a run (never following a link out of them)."""
    folder = cache_dir(run_id)
    if folder.is_symlink():
        folder.unlink()
    elif folder.is_dir():
        shutil.rmtree(folder)
    manifest_path(run_id).unlink(missing_ok=True)
