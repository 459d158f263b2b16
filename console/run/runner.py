"""A run on a cluster's hosts: start and stop every task, all hosts at once, and follow each (Qt-free).

``console.run.session`` makes sense of what is followed.

One agent channel per host; every task of the run is followed from byte offsets, so a
dropped channel is reopened and followed on from where it stopped: nothing is lost and
nothing is delivered twice. While a host's tasks are followed, its agent can also stream
the host's load (``sample_system``: CPU, memory, GPUs, each task's processes). The run's
manifest (console.store.manifests) lets a later console attach to it, stop it or resume it.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from pathlib import Path
from typing import Callable

from agent.protocol import (LOGS, LOST, LOG_MESSAGE, MEASURE, METRICS, METRICS_MESSAGE, NO_SUCH_TASK, STACKS, STATUS,
                            SYSTEM_MESSAGE)
from console import cluster as cl
from console.errors import RunError, TfccError
from console.remote.channel import AgentRequestError
from console.remote.deploy import make_bundle
from console.remote.link import HostLink
from console.remote.ssh import SSHError
from console.run.backlog import Backlog
from console.run.launch import at_once, check_user_file, task_address
from console.run.placement import placement_for
from console.run.seeding import Seeding
from console.states import FOLLOW_ERROR, RECONNECTED, RECONNECTING, Left, TaskState
from console.store.manifests import Manifest, check_run_id, manifest_path, read_manifest, write_manifest
from console import workdir as workdir_facts
from console.workdir import Workdir, collect as collect_workdir, excluded_module, human_bytes, locate as workdir_of

log = logging.getLogger("console.run.runner")


class Run:
    """A run of a cluster: the tasks, their hosts, and what has been read of each."""

    def __init__(self, cluster: cl.Cluster, run_id: str, ask_host_key=None):
        self.cluster = cluster
        self.run_id = check_run_id(run_id)
        self.placement = placement_for(cluster)  # where its tasks run: the one place that knows
        self.tasks = [TaskState(name, host) for name, host in zip(cluster.task_names(), self.placement.task_hosts())]
        self.links = {h.name: HostLink(h, ask_host_key) for h in self.placement.hosts()}
        self.tf_configs: list[str] | None = None
        # An elastic run's tasks that it goes on without (name -> why), and each change of its size, oldest first
        # ({"at", "tasks", "why"}): kept in the manifest.
        self.left: dict[str, Left] = {}
        self.resizes: list[dict] = []
        self.speed: dict = {}  # the newest breakdown's scaling efficiency (note_speed), kept in the manifest
        self.ports_changed: str | None = None  # why the last resume gave the tasks new ports
        self.seeded: Seeding | None = None     # the backup the last resume copied to tasks that lacked it
        self.joining: set[str] = set()         # tasks that rejoin at the next start (they get the newest backup)
        self.moved: set[str] = set()           # tasks moved to a spare host since the last start (no folder there)
        self._ask_host_key = ask_host_key
        self.exposed: str | None = None        # which tasks serve on a public address: the risk and the fix
        self.workdir: Workdir | None = None    # a script's workdir as collected for the last start
        self.code_refreshed: str | None = None  # what a person's resume of a script's run did to its code: words
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sampling = threading.Lock()                     # guards the two maps below
        self._following: dict[str, threading.Thread] = {}    # task -> its newest follow thread
        self._samplers: dict[str, threading.Thread] = {}     # host -> its system thread while it runs
        self.backlog = Backlog()  # the follows' messages not handled yet: the consumer says ``handled``

    # ----------------------------------------------------------------- manifest

    @classmethod
    def load(cls, run_id: str, ask_host_key=None) -> "Run":
        saved = read_manifest(run_id)
        run = cls(saved.cluster, run_id, ask_host_key)
        run.tf_configs = saved.tf_configs
        run._take_membership(saved)
        for task, config in zip(run.tasks, run.tf_configs):
            try:
                task.address = task_address(task.name, config)
            except (KeyError, IndexError, TypeError, ValueError):
                task.address = "?"
        return run

    # ----------------------------------------------------------------- members

    @property
    def members(self) -> list[TaskState]:
        """The tasks in the run now: all but those an elastic run went on without."""
        return [t for t in self.tasks if t.name not in self.left]

    def member_indexes(self) -> set[int]:
        return {i for i, t in enumerate(self.tasks) if t.name not in self.left}

    def links_of(self, tasks: list[TaskState]) -> list[tuple[str, HostLink]]:
        hosts = {t.host for t in tasks}
        return [(name, link) for name, link in self.links.items() if name in hosts]

    def leave(self, tasks: list[TaskState], why: Left) -> None:
        """An elastic run goes on without ``tasks`` (``why``: in words): they are followed no more and get no
        TF_CONFIG; the next start gives the others one without them (the manifest says so from now)."""
        for task in tasks:
            self.left[task.name] = why
            task.leave()
        self._resized(why)

    def rejoin(self, tasks: list[TaskState], why: str) -> None:
        """``tasks`` are in the run again from its next start (which copies the others' newest backup to them
        first: what they kept from before they left is older)."""
        for task in tasks:
            self.left.pop(task.name, None)
            self.joining.add(task.name)
        self._resized(why)

    def spares(self) -> list[str]:
        """The spare hosts no task runs on (an elastic run moves a lost host's tasks to one)."""
        busy = {t.host for t in self.tasks}
        return [h.name for h in self.cluster.hosts if h.spare and h.name not in busy]

    def move(self, host: str, spare: str, why: str) -> list[TaskState]:
        """Every task of ``host`` runs on the spare host ``spare`` from the next start (with new TF_CONFIGs for
        all: a task's address changed); the run's cluster and manifest say so. The tasks moved."""
        self.cluster = copy.deepcopy(self.cluster)  # the run's own from now: the settings it came from stay
        self.placement.cluster = self.cluster       # (where the place plans its tasks follows)
        self.cluster.host(spare).spare = False      # it runs tasks now: a spare no more
        moved = []
        for task, spec in zip(self.tasks, self.cluster.tasks):
            if task.host == host:
                if not task.ended:  # what ran on the lost host is gone with it: its follow ends
                    task.change(LOST)
                spec.host = task.host = spare
                moved.append(task)
                self.moved.add(task.name)
        if spare not in self.links:
            self.links[spare] = HostLink(self.cluster.host(spare), self._ask_host_key)
        self._resized(f"{', '.join(t.name for t in moved)} moved from {host} to the spare host {spare} ({why})")
        return moved

    def _resized(self, why: str) -> None:
        self.resizes.append({"at": time.time(), "tasks": [t.name for t in self.members], "why": why})
        if self.tf_configs is not None:
            self.write_manifest(self.tf_configs)
        log.info("run %s: %s; its tasks now: %s", self.run_id, why, ", ".join(t.name for t in self.members))

    def write_manifest(self, configs: list[str]) -> None:
        write_manifest(Manifest(self.run_id, self.cluster, [(t.name, t.host) for t in self.tasks], configs,
                                dict(self.left), list(self.resizes), sorted(self.moved), dict(self.speed)))

    def note_speed(self, verdict) -> None:
        """Keep a breakdown's scaling efficiency (a console.speed.Verdict) in the manifest: ``tfcc runs`` says it."""
        self.speed = {"speedup": round(verdict.speedup, 3), "efficiency": round(verdict.efficiency, 3),
                      "workers": len(verdict.workers), "kind": verdict.kind, "time": time.time()}
        if self.tf_configs is not None:
            self.write_manifest(self.tf_configs)

    def _take_membership(self, saved: Manifest) -> None:
        """What the manifest says of an elastic run's members (who left, each change of size, who moved to a spare
        and has no folder there yet): a resume or a later console goes on from there."""
        self.left, self.resizes, self.moved = dict(saved.left), list(saved.resizes), set(saved.moved)
        self.speed = dict(saved.speed)
        for task in self.tasks:
            if task.name in self.left:
                task.leave()

    def mark_left(self, name: str, why: Left) -> None:
        """Say anew why task ``name`` is out of the run (a person took its host back: it is asked again)."""
        self.left[name] = why
        if self.tf_configs is not None:
            self.write_manifest(self.tf_configs)

    # ----------------------------------------------------------------- start

    def start(self, on_progress=None, resume: bool = False, explicit: bool = False) -> None:
        """Deploy, pick ports, write TF_CONFIG and start every task (returns at once).

        A run id names one run: a new run refuses an id that exists. ``resume`` starts the
        tasks of an existing run again in their run folders, with the same TF_CONFIG (the
        trainer's backups then resume training); ``explicit``: a person asked for it (not a restart), and
        there must be a backup to resume from. ``on_progress(host, sent, total)``
        follows each host's upload in bytes.
        """
        self.placement.restarted()
        training = self.cluster.training
        self.ports_changed = None
        previous = self._previous_configs(resume)
        extra = {}
        if training.model_file:
            extra["user/" + Path(training.model_file).name] = check_user_file(training.model_file, "model_file")
        if training.user_code:  # the script's folder goes as blobs: checked before any host is reached
            if training.script:
                check_user_file(training.script, "script")
            else:
                check_user_file(str(workdir_of(training)[1]), "module")
            if not resume or self.workdir is None:  # a resume keeps the tasks' work/: no need to look again
                self.collect_workdir()
        try:
            bundle = make_bundle(extra)
        except OSError as exc:
            raise RunError(f"cannot read {exc.filename!r} to deploy it ({exc.strerror})",
                           "check that the file is there and readable") from None
        workdir = self.workdir if training.user_code else None

        def connect(name: str, link: HostLink) -> None:
            progress = None if on_progress is None else (lambda sent, total: on_progress(name, sent, total))
            link.connect(bundle, progress)
            if workdir is not None:
                link.upload_blobs(workdir, progress)

        at_once(self.links_of(self.members), connect)
        self.placement.start(self, resume, explicit, previous)

    def collected_workdir(self) -> Workdir:
        """The script's workdir as collected for this start (collected now if not yet)."""
        return self.workdir or self.collect_workdir()

    def collect_workdir(self) -> Workdir:
        """The script's workdir, collected and hashed (console.workdir); what was skipped is logged."""
        workdir = collect_workdir(self.cluster.training)
        log.info("run %s: workdir %s, %d files, %s", self.run_id, workdir.root, len(workdir.files),
                 human_bytes(workdir.size))
        if workdir.skipped:
            log.warning("run %s: workdir %s: %d skipped: %s", self.run_id, workdir.root, len(workdir.skipped),
                        "; ".join(f"{s.rel} ({s.why})" for s in workdir.skipped[:10])
                        + ("; ..." if len(workdir.skipped) > 10 else ""))
        self.workdir = workdir
        return workdir

    def not_shipped(self, module: str) -> str | None:
        """Why ``module``, which a task could not import, is in the script's workdir here but was not
        shipped (the exclusion's words), or None (for the diagnosis)."""
        found = excluded_module(self.cluster.training, module)
        return None if found is None else str(found)

    def local_file(self, rel: str) -> str | None:
        """For the diagnosis (``CodeFacts``): ``rel`` (a file of a task's copy of the workdir) on this machine."""
        if not self.cluster.training.user_code:
            return None
        try:
            root = self.workdir.root if self.workdir is not None else workdir_of(self.cluster.training)[0]
        except TfccError:
            return None
        path = root / rel
        return str(path) if path.is_file() else None

    def run_as_module(self, missing: str | None) -> tuple[str, str | None] | None:
        """For the diagnosis (``CodeFacts``): the fix that runs the script, which failed on a relative import
        (``missing`` None) or on importing ``missing``, as a module; and where ``missing`` lives."""
        run = workdir_facts.as_module(self.cluster.training, missing)
        return None if run is None else (run.fix(self.cluster.training), run.found)

    def relaunch(self, tasks: list[TaskState]) -> None:
        """Start ``tasks`` again in their run folders with the TF_CONFIG they had (the others go on:
        a parameter-server coordinator takes a worker back)."""
        self.placement.relaunch(self, tasks)

    def statuses(self) -> dict[str, dict | None]:
        """Each task's status on its host (None: the host has no folder for it)."""
        statuses: dict[str, dict | None] = {}
        for task in self.members:  # a task that never started (its start failed halfway) has no folder yet
            try:
                statuses[task.name] = self.links[task.host].connect().call(STATUS, run_id=self.run_id,
                                                                           task=task.name)
            except AgentRequestError as exc:
                if exc.code != NO_SUCH_TASK:
                    raise
                statuses[task.name] = None
        return statuses

    def _previous_configs(self, resume: bool) -> list[str] | None:
        """For a resume, the run's TF_CONFIGs; for a new run, None (and the id must be new)."""
        exists = manifest_path(self.run_id).exists()
        if not resume:
            if exists:
                raise RunError(f"run {self.run_id} exists already",
                               f"resume it with tfcc resume {self.run_id}, or choose another --run-id")
            return None
        if not exists:
            raise RunError(f"there is no run {self.run_id} to resume", "tfcc runs lists the runs of this console")
        saved = read_manifest(self.run_id)
        self._take_membership(saved)  # a run made anew from its cluster (a window's Resume) knows it from here
        theirs = saved.tasks
        ours = [(t.name, t.host) for t in self.tasks]
        if theirs != ours:
            raise RunError(f"run {self.run_id} ran {', '.join(f'{n} on {h}' for n, h in theirs)}; this cluster has "
                           f"{', '.join(f'{n} on {h}' for n, h in ours)}",
                           f"resume with the same tasks on the same hosts (tfcc resume {self.run_id} uses the run's "
                           "own cluster), or start a new run")
        return saved.tf_configs

    # ----------------------------------------------------------------- follow

    def follow(self, on_message: Callable[[TaskState, dict], None], poll: float = 0.2,
               only: list[TaskState] | None = None) -> None:
        """Follow every task in the run (or ``only`` these) on its own thread until it ends or leaves the run;
        reconnects after a drop."""
        for task in (self.members if only is None else only):
            thread = threading.Thread(target=self._follow_task, args=(task, on_message, poll),
                                      name=f"tfcc-follow-{task.name}", daemon=True)
            thread.start()
            self._threads.append(thread)
            with self._sampling:
                self._following[task.name] = thread

    def _follow_task(self, task: TaskState, on_message, poll: float) -> None:
        """Follow one task until it ends on its host; every lost connection is tried again, with backoff.

        Only a refused host key (it will not change by itself) or the agent's refusal of the
        follow itself ends the following early; the front ends hear of an outage once
        (``reconnecting``) and of its end (``reconnected``).
        """
        link = self.links[task.host]
        host = task.host  # a task an elastic run moves to a spare host is followed there by a new follow
        backoff = {"delay": 0.2, "heard": False}  # reset by the first message a follow delivers
        outage: float | None = None
        current = {"follow": None}  # the follow now delivering (held by the backlog when it is over its mark)

        def deliver(message, task=task):
            # On the channel's reader thread: note how far the task has been read, hand the
            # message on, nothing more (a slow consumer must not hold up the agent's replies).
            backoff.update(delay=0.2, heard=True)
            kind = message.get("type")
            if kind == METRICS_MESSAGE:
                task.offsets[METRICS] = message["offset"]
            elif kind == LOG_MESSAGE:
                task.offsets[message["stream"]] = message["offset"]
            on_message(task, message)
            if kind in (METRICS_MESSAGE, LOG_MESSAGE):
                self.backlog.delivered(current["follow"], message)

        def gone() -> bool:
            return task.name in self.left or task.host != host

        while not self._stop.is_set() and not gone():
            client = None
            try:
                client = link.connect()
                handle = current["follow"] = client.follow(self.run_id, task.name, deliver,
                                                           offsets=dict(task.offsets), poll=poll)
                if outage is not None:
                    on_message(task, {"type": RECONNECTED, "host": task.host,
                                      "after": round(time.monotonic() - outage, 1)})
                    outage = None
                while not handle.done.wait(0.5):
                    if self._stop.is_set() or gone():
                        link.close(client)
                        return
                if handle.end is not None:
                    return
                if handle.error and handle.error != "channel closed":
                    on_message(task, {"type": FOLLOW_ERROR, "error": handle.error})
                    return
                error = "the connection closed"
            except SSHError as exc:
                if not exc.retry:
                    on_message(task, {"type": FOLLOW_ERROR, "error": str(exc)})
                    return
                error = str(exc)
            except (TfccError, OSError, TimeoutError) as exc:
                error = str(exc) or type(exc).__name__
            except Exception as exc:  # a bug must not end the following for good: log it and go on
                log.exception("following %s", task.name)
                error = f"{type(exc).__name__}: {exc}"
            log.info("following %s: %s; reconnecting", task.name, error)
            link.close(client)
            if outage is None:
                outage = time.monotonic()
                on_message(task, {"type": RECONNECTING, "host": task.host, "error": error,
                                  "first": not backoff["heard"]})
            deadline = time.monotonic() + backoff["delay"]  # the pause before the next try, ended by a leave
            while time.monotonic() < deadline and not gone():
                if self._stop.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
                    return
            backoff["delay"] = min(backoff["delay"] * 2, 5.0)

    def sample_system(self, on_system: Callable[[str, dict], None], interval: float = 1.0) -> None:
        """Stream each host's system records while its tasks are followed (call after ``follow``):
        ``on_system(host name, record)`` about every ``interval`` s, on one thread per host.

        A host that is sampled already keeps its thread. A host's thread reconnects after a drop,
        with backoff, and ends when its tasks' follows have ended, on ``detach``, or when the agent
        refuses; what it streams is no part of ``wait``: a run's end never waits for a sample.
        """
        with self._sampling:
            for host in self.links:
                if host in self._samplers:
                    continue
                thread = threading.Thread(target=self._sample_host, args=(host, on_system, interval),
                                          name=f"tfcc-system-{self.run_id}-{host}", daemon=True)
                self._samplers[host] = thread
                thread.start()

    def tasks_sampled_on(self, name: str) -> set[str]:
        """The tasks whose load a sample named ``name`` may carry (the placement says: a host's own, or any of a
        Slurm job's)."""
        return self.placement.tasks_sampled_on(self, name)

    def _followed(self, host: str) -> bool:
        """Whether a follow of one of ``host``'s tasks still runs (with ``_sampling`` held)."""
        return any(thread.is_alive() for name, thread in self._following.items()
                   if any(t.name == name and t.host == host for t in self.tasks))

    def _sample_host(self, host: str, on_system, interval: float) -> None:
        link = self.links[host]
        done = threading.Event()  # no more records: those that still come are dropped
        backoff = {"delay": 0.2}  # reset by each record delivered

        def deliver(message):
            if message.get("type") == SYSTEM_MESSAGE and not done.is_set():
                backoff["delay"] = 0.2
                name = self.placement.sample_name(host, message)  # a Slurm job's: its node's
                if not self.placement.keeps_samples_of(self, name) or not self.backlog.take_sample(message):
                    return  # a node name past the job's count, or a console behind: a sample is only a sample
                on_system(name, {k: v for k, v in message.items() if k not in ("id", "node")})

        def finished() -> bool:
            """Whether to end now: stopped, or the host's follows are over (then this thread is gone)."""
            if self._stop.is_set():
                return True
            with self._sampling:
                if self._followed(host):
                    return False
                self._samplers.pop(host, None)  # in the lock: a new follow of the host starts a new thread
                return True

        try:
            while not finished():
                try:
                    handle = link.connect().system(self.run_id, deliver, interval)
                    while not handle.done.wait(0.2):
                        if finished():
                            return
                    if handle.error and handle.error != "channel closed":
                        log.info("sampling host %s: the agent refused (%s)", host, handle.error)
                        return  # a refusal would repeat
                    if handle.end is None:
                        log.info("sampling host %s: the connection closed; reconnecting", host)
                    # else the host's tasks have ended: their follows say so soon, or a restart follows
                    # them again (then sampling goes on)
                except SSHError as exc:
                    if not exc.retry:
                        return
                    log.info("sampling host %s: %s; reconnecting", host, exc)
                except (TfccError, OSError, TimeoutError) as exc:
                    log.info("sampling host %s: %s; reconnecting", host, exc)
                except Exception:  # a bug must not take the following with it: log it, sample no more
                    log.exception("sampling host %s", host)
                    return
                deadline = time.monotonic() + backoff["delay"]
                backoff["delay"] = min(backoff["delay"] * 2, 5.0)
                while time.monotonic() < deadline:  # the pause before the next try, ended by the follows' end
                    if finished():
                        return
                    self._stop.wait(min(0.2, max(0.0, deadline - time.monotonic())))
        finally:
            done.set()
            with self._sampling:
                if self._samplers.get(host) is threading.current_thread():
                    del self._samplers[host]

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    # ----------------------------------------------------------------- control

    def stop(self, grace: float = 10.0) -> list[dict]:
        """Stop every task in the run; their answers in order, or the first error once every host had its go
        (a Slurm run: its job is cancelled)."""
        return self.placement.stop(self, grace)

    def stop_each(self, grace: float = 10.0, only: list[TaskState] | None = None, done: bool = False) -> list[str]:
        """End the current attempt's tasks (or ``only`` these), whatever fails; the hosts where a stop had no
        answer. ``done``: it is their normal end."""
        return self.placement.stop_each(self, grace, only, done)

    def measure(self, tasks: list[TaskState], ask: str, at_step: int) -> list[dict | TfccError]:
        """Give ``tasks`` (all hosts at once) the breakdown's ask ``ask`` (trainer/breakdown.py: they measure once
        every one has it; ``at_step``, the newest step seen, is said back). For each, its agent's answer, or the
        error that kept it from answering."""
        def measure(task: TaskState) -> dict | TfccError:
            try:
                return self.links[task.host].connect().call(MEASURE, timeout=15, run_id=self.run_id, task=task.name,
                                                            ask=ask, at_step=at_step)
            except TfccError as exc:
                log.warning("could not ask %s of run %s for a breakdown: %s", task.name, self.run_id, exc)
                return exc

        return at_once([(t,) for t in tasks], measure)

    def stacks(self, wait: float = 5.0, tasks: list[TaskState] | None = None) -> list[dict | TfccError]:
        """Where each member's (or each of ``tasks``') threads are now (the stacks op, all hosts at once): each one's
        answer (``state``: answered with ``stacks``, stopped, zombie, silent), or the error that kept its host from
        answering (console.run.where reads them)."""
        def ask(task: TaskState) -> dict | TfccError:
            try:
                return self.links[task.host].connect().call(STACKS, timeout=wait + 15, run_id=self.run_id,
                                                            task=task.name, wait=wait)
            except TfccError as exc:
                return exc

        return at_once([(t,) for t in (self.members if tasks is None else tasks)], ask)

    def logs(self, task: str, max_bytes: int) -> list[tuple[str, str]]:
        """The newest ``max_bytes`` of each of ``task``'s streams, as its host's agent reads them: (stream, text)."""
        host = next(t.host for t in self.tasks if t.name == task)
        said = self.links[host].connect().call(LOGS, run_id=self.run_id, task=task, max_bytes=max_bytes)["logs"]
        return [(stream, words) for stream, words in said.items() if isinstance(words, str)]

    def status(self) -> list[dict]:
        return at_once([(t,) for t in self.members], lambda task: self.links[task.host].connect().call(
            STATUS, run_id=self.run_id, task=task.name))

    @property
    def detached(self) -> bool:
        """Whether ``detach`` was called: a placement's waits end."""
        return self._stop.is_set()

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less once the run is detached (a placement's polls)."""
        self._stop.wait(seconds)

    def detach(self) -> None:
        self._stop.set()
        for link in self.links.values():
            link.drop()
        self.wait(timeout=5)
        with self._sampling:
            samplers = list(self._samplers.values())
        for thread in samplers:
            thread.join(timeout=5)
