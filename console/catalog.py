"""The runs this console knows: listing them, finding those still going, a run's whole history, deleting one.

``overview`` lists every run for ``tfcc runs`` and the window's Runs panel, from the manifests and the
history cache (console.store), asking the hosts of the runs not known to have ended; ``running_runs``
finds the runs still going on a cluster's hosts (a window reattaches to them); ``load_store`` fills a
``MetricsStore`` with a run's whole history, from the cache when it is whole, else replayed from the
hosts by a run session; ``delete_run`` removes a run from its hosts and from here. Each blocks: call it
off the UI thread.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from dataclasses import dataclass, field

from agent.protocol import (ENDED, FAILED, FINISHED, LEFT, LOST, NO_SUCH_TASK, NOT_STARTED, PENDING, REMOVE, RUNNING,
                            STATUS)
from console import cluster as cl
from console import text
from console import speed
from console.errors import RunError, TfccError, state_dir
from console.remote.channel import AgentRequestError
from console.run.launch import at_once
from console.run.placement import placement_for
from console.run.runner import RECONNECTING, Run
from console.run.session import REPLAY, RunSession
from console.states import RunState, SessionKind, run_state
from console.store.cache import (CONSOLE_TASK, SUMMARY, cache_dir, fill_from_cache, read_summary, remove_cache, task_file,
                                 whole)
from console.store.labels import forget as forget_label
from console.store.labels import read_labels
from console.store.manifests import check_run_id, console_id, known_runs, manifest_path, read_manifest
from console.store.metrics import MetricsStore

log = logging.getLogger("console.catalog")

HOST_ASK_SECONDS = 5.0  # how long ``overview`` waits for hosts to say how a run's tasks are
CATCH_UP_SECONDS = 30.0  # then for the end of runs that ended unfollowed to be read (once: the cache is whole after)


class HistoryError(TfccError):
    """A run's history cannot be had; the message says what to do."""


# ============================================================================ a run's whole history


def load_store(run_id: str, ask_host_key=None, store=None, timeout: float = 120.0, prefer_cache: bool = True):
    """A run's whole history in a ``MetricsStore`` (blocking: call it off the UI thread), and its tasks
    in cluster order: from the local cache when it holds every task's whole history, else replayed
    from the run's hosts (following every task from its first record, as a reattach does; that
    replay completes the cache). When the hosts cannot be asked, what the cache holds is shown with
    a note that says so; with no cache either, a ``HistoryError`` says what to do.
    """
    run_id = check_run_id(run_id)
    store = MetricsStore() if store is None else store
    summary, damaged = read_summary(run_id)
    notes = [damaged] if damaged else []
    try:
        manifest = read_manifest(run_id)
        tasks = [name for name, _ in manifest.tasks]
        hosts = sorted({host for _, host in manifest.tasks})
    except RunError as exc:
        manifest = None
        tasks = [t for t in (summary.get("tasks") or {})]
        hosts = sorted(summary.get("hosts") or {})
        if not tasks:
            raise HistoryError(f"run {run_id} has no history here: {exc}") from None
        notes.append(f"{exc.cause}: the history comes from this console's cache alone")
    cached = any(task_file(cache_dir(run_id), t).exists() for t in tasks)
    if prefer_cache and whole(summary, tasks) or manifest is None:
        notes += fill_from_cache(run_id, store, tasks, hosts)
        _say(store, run_id, notes)
        return store, tasks
    try:
        _replay(run_id, store, ask_host_key, timeout)
    except TfccError as exc:
        if not cached:
            raise HistoryError(f"the history of run {run_id} cannot be had: {exc.cause}",
                               exc.fix or "try again when its hosts answer") from None
        fresh = MetricsStore()
        notes.append(f"only what this console received of run {run_id} is shown: its hosts could not be asked "
                     f"({exc})")
        notes += fill_from_cache(run_id, fresh, tasks, hosts)
        _say(fresh, run_id, notes)
        return fresh, tasks
    _say(store, run_id, notes)
    return store, tasks


def _say(store, run_id: str, notes: list[str]) -> None:
    for note in notes:
        log.warning("run %s: %s", run_id, note)
        store.note(CONSOLE_TASK, "history", note)


def _replay(run_id: str, store, ask_host_key, timeout: float) -> None:
    """Follow every task of the run from its first record to its end, into ``store`` (the session
    writes the cache as it goes). A host that cannot be reached ends it at once, as does a run still
    going after ``timeout`` seconds (the caller follows a running run live instead)."""
    run = Run.load(run_id, ask_host_key)
    session = RunSession(run, store, watchdog=math.inf, restarts=0, found_failures=REPLAY)  # (it never acts on the run)
    unreachable: list[str] = []
    stop = threading.Event()

    def on_event(event) -> None:
        if event.kind == SessionKind.CONNECTION and event.message.get("type") == RECONNECTING:
            unreachable.append(f"host {event.task.host}: {event.message.get('error')}")
            stop.set()
        elif event.kind == SessionKind.ENDED:
            stop.set()

    session.subscribe(on_event)
    session.follow()
    try:
        deadline = time.monotonic() + timeout
        while not session.wait(0.1):
            if stop.is_set() and unreachable or time.monotonic() > deadline:
                break
        if unreachable:
            raise HistoryError(unreachable[0], "check that the host is up and reachable, then try again")
        if not session.wait(0):
            raise HistoryError(f"run {run_id} sent no end of its tasks within {timeout:.0f} s",
                               "if it still runs, follow it live")
    finally:
        session.detach()


# ============================================================================ the list of runs


@dataclass
class RunInfo:
    """What ``tfcc runs`` and the Runs panel show of one run."""

    run_id: str
    state: str = RunState.UNKNOWN
    hosts: dict = field(default_factory=dict)     # host -> its tasks
    workload: str | None = None
    start: float | None = None
    end: float | None = None
    duration: float | None = None
    metrics: dict = field(default_factory=dict)   # the final ones (the chief's last epoch, or its finished event)
    phases: dict | None = None                     # task -> its phase, when its hosts were asked
    note: str = ""                                 # why something is not known
    name: str = ""                                 # what the person calls it (console.store.labels)
    notes: str = ""                                # the person's notes on it
    settings: str = ""                             # its key settings in words (text.settings_text)
    manifest_problem: bool = False                 # its manifest is missing or damaged: its hosts are not asked
    resizes: list = field(default_factory=list)    # an elastic run's changes of size (the manifest's)
    speed: dict = field(default_factory=dict)      # its newest breakdown's scaling efficiency (the manifest's)
    caught_up: bool = False                        # it ended while no console followed it: its end was read now

    @property
    def cluster_text(self) -> str:
        return "; ".join(f"{host}: {', '.join(tasks)}" for host, tasks in self.hosts.items())

    @property
    def tasks(self) -> list[str]:
        return [t for tasks in self.hosts.values() for t in tasks]

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "state": self.state, "hosts": self.hosts, "workload": self.workload,
                "start": self.start, "end": self.end, "duration": self.duration, "metrics": self.metrics,
                "phases": self.phases, "note": self.note, "name": self.name, "notes": self.notes,
                "settings": self.settings, "resizes": self.resizes, "speed": self.speed}

    @property
    def speed_text(self) -> str:
        """``scaling: 1.87× on 2 workers, 93 % of linear`` from its newest breakdown ("" for none)."""
        if not self.speed:
            return ""
        return speed.scaling_text(self.speed["speedup"], int(self.speed["workers"]), self.speed["efficiency"])

    @property
    def sizes_text(self) -> str:
        """An elastic run's changes of size in words ("" for none); see ``text.resizes_text``."""
        return text.resizes_text(self.tasks, self.resizes)


def run_info(run_id: str, labels: dict | None = None) -> RunInfo:
    """What the manifest, the cache and the person's labels (``read_labels``, read here when None) say of a run
    (no host is asked)."""
    if labels is None:
        labels = read_labels()
    info = RunInfo(run_id)
    notes = []
    path = manifest_path(run_id)
    if not path.exists():
        notes.append("no manifest (the history cache alone)")
        info.manifest_problem = True
    else:
        try:
            manifest = read_manifest(run_id)  # checked: a damaged one says so, and what to do
            for name, host in manifest.tasks:
                info.hosts.setdefault(host, []).append(name)
            info.resizes = manifest.resizes
            info.speed = manifest.speed
            info.settings = text.settings_text(manifest.cluster)
            created = json.loads(path.read_text(encoding="utf-8")).get("created")
            info.start = created if isinstance(created, (int, float)) else None
        except RunError as exc:
            notes.append(str(exc))
            info.manifest_problem = True
        except (OSError, ValueError, AttributeError) as exc:
            notes.append(f"its manifest cannot be read ({type(exc).__name__})")
            info.manifest_problem = True
    summary, damaged = read_summary(run_id)
    if damaged:
        notes.append("its history summary is damaged")
    if summary:
        info.state = summary.get("state") if summary.get("state") in (RunState.RUNNING, *RunState.ENDED) else RunState.UNKNOWN
        if not info.hosts and isinstance(summary.get("hosts"), dict):
            info.hosts = {str(h): list(t) for h, t in summary["hosts"].items() if isinstance(t, list)}
        info.workload = summary.get("workload")
        for key in ("start", "end", "duration"):
            value = summary.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                setattr(info, key, value)
        if isinstance(summary.get("metrics"), dict):
            info.metrics = summary["metrics"]
    info.note = "; ".join(notes)
    given = labels.get(run_id) or {}
    info.name, info.notes = given.get("name", ""), given.get("notes", "")
    return info


def ask_hosts(infos: list[RunInfo], ask_host_key=None, timeout: float = HOST_ASK_SECONDS) -> None:
    """Ask the hosts of each run in ``infos`` how its tasks are, all at once, for at most ``timeout``
    seconds: their phases and the run's state; a host that does not answer in time is a note."""
    threads = []
    runs = []
    lock = threading.Lock()

    def ask(info: RunInfo, run) -> None:
        phases, stopped = {}, []
        try:
            for task in run.tasks:  # a task an elastic run went on without: its host is not asked
                if task.name in run.left:
                    phases[task.name], stopped = LEFT, stopped + [False]
                    continue
                status = run.links[task.host].connect().call(STATUS, timeout=timeout, run_id=run.run_id,
                                                             task=task.name)
                phases[task.name] = status["phase"]
                stopped.append(bool(status.get("stopped")))
        except TfccError as exc:
            with lock:
                info.note = "; ".join(filter(None, [info.note, f"{task.host}: {exc.cause}"]))
            return
        with lock:
            info.phases = phases
            state = run_state(list(phases.values()), stopped)
            if state != RunState.RUNNING or info.state not in RunState.ENDED:
                info.state = state

    for info in infos:
        try:
            run = Run.load(info.run_id, ask_host_key)
        except TfccError as exc:
            info.note = "; ".join(filter(None, [info.note, exc.cause]))
            continue
        runs.append(run)
        thread = threading.Thread(target=ask, args=(info, run), name=f"tfcc-runs-{info.run_id}", daemon=True)
        thread.start()
        threads.append((info, thread))
    deadline = time.monotonic() + timeout
    for info, thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            with lock:
                info.note = "; ".join(filter(None, [info.note, f"its hosts gave no answer in {timeout:.0f} s"]))
    for run in runs:  # a connect still in progress gives up what it opens
        threading.Thread(target=run.detach, name="tfcc-runs-drop", daemon=True).start()


def catch_up(infos: list[RunInfo], ask_host_key=None, timeout: float = CATCH_UP_SECONDS) -> None:
    """Runs that ended while no console followed them (their hosts just said so): what their tasks wrote since
    is read from the hosts into the cache, all at once for at most ``timeout`` seconds, and each ``info`` then
    says the run's real end, duration and final metrics. One that cannot be read in time keeps what the cache
    had, with a note that says so (the next listing tries again). Only this call's thread changes ``infos``: a
    reading thread that outlives the call leaves them as they were returned."""
    done: dict[str, RunInfo | str] = {}  # run id -> its fresh info, or why it could not be read
    lock = threading.Lock()

    def read(info: RunInfo) -> None:
        try:
            _replay(info.run_id, MetricsStore(), ask_host_key, timeout)
            found: RunInfo | str = run_info(info.run_id)
        except TfccError as exc:
            found = f"its end could not be read: {exc.cause}"
        except Exception as exc:  # noqa: BLE001 - a note on the run; the log has the traceback
            log.exception("reading the end of run %s", info.run_id)
            found = f"its end could not be read: {exc}"
        with lock:
            done[info.run_id] = found

    threads = [threading.Thread(target=read, args=(info,), name=f"tfcc-catch-up-{info.run_id}", daemon=True)
               for info in infos]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for info, thread in zip(infos, threads):
        thread.join(max(0.0, deadline - time.monotonic()))
        with lock:
            found = done.get(info.run_id, f"its end was not read within {timeout:.0f} s")
        if isinstance(found, str):
            info.note = "; ".join(filter(None, [info.note, found]))
            continue
        for key in ("end", "duration", "metrics", "workload"):
            setattr(info, key, getattr(found, key))
        if found.state in RunState.ENDED:
            info.state = found.state
        info.caught_up = True


def overview(ask_host_key=None, ask: bool = True, timeout: float = HOST_ASK_SECONDS) -> list[RunInfo]:
    """Every run this console knows (oldest first): from its manifest and history cache; the hosts of
    those not known to have ended are asked (``ask``) for at most ``timeout`` seconds."""
    ids = set(known_runs())
    runs_folder = state_dir() / "runs"
    if runs_folder.is_dir():  # a cache whose manifest went (deleted by hand)
        ids.update(p.name for p in runs_folder.iterdir() if p.is_dir() and (p / SUMMARY).exists())
    infos = []
    given = read_labels()
    for run_id in sorted(ids):
        try:
            infos.append(run_info(run_id, given))
        except RunError:
            continue
    if ask:
        unsure = [i for i in infos if i.state not in RunState.ENDED and i.hosts and not i.manifest_problem]
        ask_hosts(unsure, ask_host_key, timeout)
        catch_up([i for i in unsure if i.state in RunState.ENDED], ask_host_key)
    now = time.time()
    for info in infos:
        if info.state == RunState.RUNNING and info.start is not None:
            info.duration = now - info.start
    return infos


def check_known(run_id: str) -> None:
    """A RunError when this console knows no run ``run_id`` (neither a manifest nor a history)."""
    if not manifest_path(run_id).exists() and not cache_dir(run_id).exists():
        known = known_runs()
        raise RunError(f"no run {run_id!r} is known to this console",
                       "tfcc runs lists them" + (f" (the newest is {known[-1]})" if known else ""))


def delete_run(run_id: str, ask_host_key=None) -> list[str]:
    """Delete a run: its folders on its hosts (refused while a task runs: nothing is deleted then),
    then its manifest and history here. Blocking. The lines that say what was deleted."""
    run_id = check_run_id(run_id)
    if not manifest_path(run_id).exists():
        if cache_dir(run_id).exists():
            remove_cache(run_id)
            forget_label(run_id)
            return [f"run {run_id}: this console's history of it deleted (it had no manifest: its hosts are "
                    "not known)"]
        raise RunError(f"no run {run_id!r} is known to this console", "tfcc runs lists them")
    run = Run.load(run_id, ask_host_key)
    said = []
    try:
        def ask(task):
            try:
                return run.links[task.host].connect().call(STATUS, run_id=run_id, task=task.name)
            except AgentRequestError as exc:
                if exc.code == NO_SUCH_TASK:
                    return {"phase": NOT_STARTED}
                raise

        try:
            statuses = at_once([(t,) for t in run.tasks], ask)
        except TfccError as exc:
            raise RunError(f"cannot delete run {run_id}: {exc.cause}",
                           (exc.fix + "; " if exc.fix else "") + "nothing was deleted") from None
        alive = [t.name for t, s in zip(run.tasks, statuses) if s.get("phase") in (RUNNING, PENDING)]
        if alive:
            raise RunError(f"run {run_id} still runs ({', '.join(alive)}); nothing was deleted",
                           f"stop it first (tfcc stop {run_id}), then delete it")

        def remove(name, link):
            try:
                answer = link.connect().call(REMOVE, run_id=run_id, console=console_id())
            except TfccError as exc:
                return f"{name}: NOT deleted ({exc})"
            return f"{name}: deleted {', '.join(answer.get('tasks') or []) or 'nothing (no folder there)'}"

        said = at_once(list(run.links.items()), remove)
    finally:
        run.detach()
    failed = [line for line in said if "NOT deleted" in line]
    if failed:
        raise RunError(f"run {run_id} was not deleted everywhere: {'; '.join(failed)}",
                       f"tfcc delete {run_id} again once the host answers (its manifest is kept till then)")
    remove_cache(run_id)
    forget_label(run_id)
    return said + [f"run {run_id}: manifest and history deleted from this console"]


# ============================================================================ runs still going


def _same_place(cluster: cl.Cluster, ran: cl.Cluster, addresses: set) -> bool:
    """Whether a run of ``ran`` ran where ``cluster`` runs: the same hosts, or the same Slurm login host."""
    return placement_for(cluster).same_place(ran, addresses)


def running_runs(cluster: cl.Cluster, ask_host_key=None, limit: int = 20, failed_too: bool = False) -> list:
    """The runs this console started on ``cluster``'s hosts that still have a task going (newest
    first; blocking: it asks each host); with ``failed_too``, also the newest of them when it
    failed while no one stopped it (a window offers its restart)."""
    found = []
    seen = False  # the newest run on these hosts has been looked at
    offered = None
    addresses = {(h.name, h.address, h.local) for h in cluster.hosts}
    for run_id in list(reversed(known_runs()))[:limit]:
        try:
            run = Run.load(run_id, ask_host_key)
        except TfccError:
            continue
        if not _same_place(cluster, run.cluster, addresses):
            run.detach()
            continue
        newest = not seen
        seen = True
        try:
            status = run.status()
        except Exception as exc:  # a host that cannot say: that run is not offered, the others still are
            log.info("run %s: no status (%s)", run_id, exc)
            run.detach()
            continue
        phases = [s["phase"] for s in status]
        failed = (failed_too and newest and FINISHED not in phases and any(p in (FAILED, LOST) for p in phases)
                  and not any(s.get("stopped") for s in status))
        if any(p not in ENDED for p in phases):
            found.append(run)
        elif failed:
            offered = run  # after the runs still going: following one of them comes first
        else:
            run.detach()
    return found + ([offered] if offered is not None else [])
