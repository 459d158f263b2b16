"""The seeded hangs (tests/data/scripts/hangs, their table in its kinds.py) run under tfcc's supervision, and what the
console said of each: for tests/console/run/test_hangs.py and bench/hangs.py.

Each kind's folder is a user's workdir; the line where its stuck task waits carries ``# tfcc-test: hangs here``.
"""

from __future__ import annotations

import importlib.util
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from console import cluster as cl
from console.run.runner import Run
from console.run.session import RunSession
from console.states import SessionKind
from console.store.metrics import MetricsStore

HANGS = Path(__file__).resolve().parents[1] / "data" / "scripts" / "hangs"
MARK = "tfcc-test: hangs here"
# What the stall's words must hold where it is not the marked file:line: a stopped task has no stack; a task that
# waits on a named pipe waits in TensorFlow's native code (the pipe is named).
NAMES = {"sigstop": ["worker-1", "is stopped"], "fifo": ["worker-1", "is stuck opening the named pipe", "latest.csv"]}


def kinds() -> list[dict]:
    """The table of seeded hangs (tests/data/scripts/hangs/kinds.py)."""
    spec = importlib.util.spec_from_file_location("hang_kinds", HANGS / "kinds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KINDS


def kind(name: str) -> dict:
    return next(k for k in kinds() if k["name"] == name)


def markers(folder: Path) -> list[str]:
    """Each ``file:line`` of ``folder`` (a kind's workdir) marked as where a stuck thread waits."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if MARK in line:
                found.append(f"{path.relative_to(folder).as_posix()}:{n}")
    return found


@dataclass
class Seen:
    """What the console said of one seeded hang."""

    kind: str
    said: list[tuple[float, str, str]] = field(default_factory=list)  # (when, kind, words) of supervision
    where: dict | None = None      # the first 'where' event's report (console.hangs' as_dict())
    where_at: float | None = None  # when it was said (time.monotonic)
    last_step_at: float | None = None  # the last step any task made before it (when the console got it)
    markers: list[str] = field(default_factory=list)
    run: Run | None = None

    @property
    def seconds(self) -> float | None:
        """From the hang (the last step the console got) to the verdict."""
        if self.where_at is None or self.last_step_at is None:
            return None
        return self.where_at - self.last_step_at

    def stalled(self) -> str:
        return next((w for _, k, w in self.said if k == SessionKind.STALLED), "")

    def wrong(self, table: dict) -> str:
        """Why the console's words do not name the hang right ("" when they do): the stuck tasks named, the user's
        file:line (or the stopped state, or the named pipe) in the stall's words, every other task in a group of its
        own kind (waiting, serving, ended), the stacks kept."""
        if self.where is None:
            return "no 'where' was said: " + " | ".join(w for _, _, w in self.said)
        words = self.stalled()
        ended = {t["task"] for t in self.where["tasks"] if t["state"] == "ended"}
        named = set(self.where["stuck"])
        if not set(table["stuck"]) <= named or named - set(table["stuck"]) - ended:
            return f"stuck {self.where['stuck']}, not {table['stuck']}: {self.where['lines']}"
        want = NAMES.get(table["name"], self.markers)
        missing = [m for m in want if m not in words]
        if missing:
            return f"{missing} not in the stall's words: {words}"
        others = [t for t in task_names(table["tasks"]) if t not in named]
        grouped = {t for g in self.where["groups"] if not g["stuck"] for t in g["tasks"]}
        if not set(others) <= grouped:
            return f"{sorted(set(others) - grouped)} not grouped apart from the stuck: {self.where['lines']}"
        if not all(t["stack"] for t in self.where["tasks"]):
            return "a task's stack is not kept"
        return ""


def task_names(roles: list[str]) -> list[str]:
    counts: dict[str, int] = {}
    names = []
    for role in roles:
        names.append(f"{role}-{counts.get(role, 0)}")
        counts[role] = counts.get(role, 0) + 1
    return names


def cluster_of(table: dict, folder: Path, hosts: list[cl.Host] | None = None, max_restarts: int = 0) -> cl.Cluster:
    """``table``'s tasks (``tasks``: their roles) on ``hosts`` (default: this machine), round robin; its script or module."""
    hosts = hosts or [cl.Host(name="here", local=True)]
    tasks = [cl.Task(host=hosts[i % len(hosts)].name, role=role) for i, role in enumerate(table["tasks"])]
    training = cl.Training(script=str(folder / table["script"]) if table.get("script") else "",
                           module=table.get("module") or "", workdir=str(folder) if table.get("module") else "",
                           args=list(table.get("args") or []), max_restarts=max_restarts)
    return cl.Cluster(hosts, tasks, training)


def run_seeded(table: dict, workdir: Path, run_id: str, hosts: list[cl.Host] | None = None,
               max_restarts: int = 0, timeout: float = 300.0, to_the_end: bool = False) -> Seen:
    """Copy ``table``'s folder into ``workdir``, run it under supervision and follow it until the console says where
    the tasks are (or, ``to_the_end``, until the session ends); the run is stopped after."""
    folder = workdir / table["name"]
    shutil.copytree(HANGS / table["name"], folder, ignore=shutil.ignore_patterns("__pycache__"))
    seen = Seen(table["name"], markers=markers(folder))
    run = seen.run = Run(cluster_of(table, folder, hosts, max_restarts), run_id)
    run.start()
    session = RunSession(run, MetricsStore())
    said = threading.Event()

    def on_event(event) -> None:
        now = time.monotonic()
        if event.kind == SessionKind.RECORDS and seen.where is None and any(
                r.get("type") == "step" for r in event.records):
            seen.last_step_at = now
        elif event.kind in SessionKind.SUPERVISION:
            seen.said.append((now, event.kind, event.text))
            if event.kind == SessionKind.WHERE and seen.where is None:
                seen.where, seen.where_at = event.message.get("where"), now
            if event.kind == SessionKind.STALLED:
                said.set()

    session.subscribe(on_event)
    session.follow()
    try:
        if to_the_end:
            session.wait(timeout)
        else:
            said.wait(timeout)
    finally:
        session.detach()
        run.stop(grace=1)
        run.detach()
    return seen
