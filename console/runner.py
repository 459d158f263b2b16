"""Start, follow, attach to and stop a run on a cluster's hosts (Qt-free core).

One agent channel per host; every task of the run is followed from byte
offsets, so a dropped channel is reopened and followed on from where it
stopped: nothing is lost and nothing is delivered twice. The console keeps a
small manifest per run (which task runs on which host) so that ``attach`` and
``stop`` work from a later console process.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from agent.runs import STREAMS, name_problem
from console import cluster as cl
from console.agent_client import (AgentClient, AgentRequestError, AgentTimeout, ChannelClosed, LocalTransport,
                                  last_words)
from console.deploy import LocalFiles, deploy, make_bundle
from console.errors import TfccError, state_dir
from console.ssh import SSHError
from trainer.workloads import ORIGIN_VARIABLE as MODEL_FILE_ORIGIN

log = logging.getLogger("console.runner")


ENDED = ("finished", "failed", "lost", "error")
WATCHDOG_SECONDS = 120.0  # how long a cluster may take to form before tfcc says who it waits for
CONNECT_TIMEOUT = 10.0    # each step of reaching a host's agent (an SSH connect, the agent's first answer)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class RunError(TfccError):
    """A run cannot start or be found; the message says what to do."""


def check_run_id(run_id) -> str:
    """``run_id`` if it can name a run (a folder on every host and a manifest here), else a RunError.

    Checked before anything touches a disk: ``../x`` must never become a path.
    """
    problem = name_problem("run id", run_id)
    if problem:
        raise RunError(problem)
    return run_id


def manifest_path(run_id: str) -> Path:
    return state_dir() / "runs" / f"{check_run_id(run_id)}.json"


def check_user_file(path: str, what: str) -> Path:
    """A user's model file or script, checked here so that its errors name the user's own file."""
    from trainer.config import ConfigError
    from trainer.workloads import check_model_file

    local = Path(path).expanduser()
    where = f"training.{what} {path!r}" + (f" ({local.resolve()})" if not local.is_absolute() else "")
    if not local.exists():
        raise RunError(f"{where} does not exist", "check the path (a relative one starts at the folder tfcc runs in)")
    if not local.is_file():
        raise RunError(f"{where} is not a regular file", "give the path of a .py file")
    if what == "model_file":
        try:
            check_model_file(local)
        except ConfigError as exc:
            raise RunError(str(exc)) from None
    else:
        try:
            source = local.read_bytes()
            compile(source, str(local), "exec", dont_inherit=True)
        except OSError as exc:
            raise RunError(f"{where} cannot be read ({exc.strerror})", "check its permissions") from None
        except (SyntaxError, ValueError) as exc:
            line = f" at line {exc.lineno}" if getattr(exc, "lineno", None) else ""
            raise RunError(f"script {str(local)!r} has a syntax error{line}: {getattr(exc, 'msg', exc)}",
                           "fix the script") from None
    return local


@dataclass
class Manifest:
    """What the console keeps of a run it started (``<state>/runs/<id>.json``), checked when read."""

    run_id: str
    cluster: cl.Cluster
    tasks: list[tuple[str, str]]  # (task name, host name), in cluster order
    tf_configs: list[str]         # each task's TF_CONFIG, as its process got it


@dataclass
class TaskState:
    name: str
    host: str
    address: str = ""
    offsets: dict = field(default_factory=lambda: {name: 0 for name in STREAMS})
    records: int = 0
    launched_at: float | None = None
    cluster_formed: bool = False
    phase: str = "starting"
    exit: dict | None = None


class HostLink:
    """The console's connection to one host's agent: a local subprocess or over SSH.

    ``timeout`` bounds each step of connecting (the SSH connect, the agent's first answer),
    so a check's deadline holds.
    """

    def __init__(self, host: cl.Host, ask_host_key=None, timeout: float = CONNECT_TIMEOUT):
        self.host = host
        self.timeout = timeout
        self.ssh = None
        if not host.local:
            from console.ssh import SSHConnection

            self.ssh = SSHConnection(host.address, user=host.user, port=host.port, key=host.key, ask=ask_host_key,
                                     timeout=timeout)
        self.home: str | None = None
        self.dist: str | None = None
        self.client: AgentClient | None = None
        self.lock = threading.Lock()     # one connect at a time
        self.stage = "connecting"        # how far the last connect got (a check names it when time runs out)
        self._state = threading.Lock()   # held only for a moment: closing never waits for a connect
        self._generation = 0             # drop() counts up: a connect it overtook closes what it opened

    def _deploy(self, bundle, on_progress=None) -> None:
        """Put the code on the host (local hosts; SSH hosts deploy in ``connect``)."""
        self.home = os.environ.get("TFCC_HOME") or str(Path.home() / ".tfcc")
        self.dist, _ = deploy(bundle, LocalFiles(), self.home, on_progress)

    def connect(self, bundle=None, on_progress=None) -> AgentClient:
        """The agent on this host, started (and the code deployed) if need be.

        ``on_progress(sent, total)`` follows a deploy's upload in bytes.
        """
        with self.lock:
            with self._state:
                client = self.client
                generation = self._generation
            if client is not None and not client.closed.is_set():
                return client
            bundle = bundle or make_bundle()
            self.stage = "connecting"
            if self.ssh is None:
                if self.dist is None:
                    self.stage = "deploying"
                    self._deploy(bundle, on_progress)
                self.stage = "starting the agent"
                try:
                    channel = LocalTransport(python=self.host.interpreter, agent_root=Path(self.dist),
                                             stderr_dir=Path(self.home)).open_channel()
                except OSError as exc:
                    raise RunError(f"host {self.host.name}: the agent did not start with {self.host.interpreter!r} "
                                   f"({exc.strerror})", "set python in the host's entry to a Python 3.9+ "
                                   "interpreter") from None
            elif self.dist is not None:
                self.ssh.connect()
                self.stage = "starting the agent"
                channel = self.ssh.open_agent_channel(self.dist, self.host.interpreter)
            else:
                # One exec finds the home and, when the code is already there, starts the agent.
                self.home, channel = self.ssh.start_agent(bundle.name, self.host.interpreter)
                if channel is None:
                    self.stage = "deploying"
                    files = self.ssh.sftp()
                    try:
                        self.dist, _ = deploy(bundle, files, self.home, on_progress)
                    finally:
                        files.close()
                    self.stage = "starting the agent"
                    channel = self.ssh.open_agent_channel(self.dist, self.host.interpreter)
                else:
                    self.dist = f"{self.home}/dist/{bundle.name}"
            self.stage = "starting the agent"
            client = AgentClient(channel)
            try:
                client.hello(timeout=self.timeout)
            except ChannelClosed:
                words = last_words(channel.stderr_tail())
                client.close()
                raise RunError(f"host {self.host.name}: the agent did not start with {self.host.interpreter!r}"
                               + (f" (it said: {words})" if words else " (it exited without a word)"),
                               "set python in the host's entry to a working Python 3.9+ interpreter") from None
            except AgentTimeout:
                process = getattr(channel, "process", None)
                if process is not None:  # a local agent that hangs: nothing to wait for
                    process.kill()
                client.close()
                raise RunError(f"host {self.host.name}: no answer in {self.timeout:.0f} s from the agent started "
                               f"with {self.host.interpreter!r}",
                               f"check that this interpreter starts on {self.host.name} (run it there by hand) "
                               "and that the host is not overloaded", timed_out=True) from None
            with self._state:
                dropped = generation != self._generation
                if not dropped:
                    self.client = client
            if dropped:  # nobody wants this one any more (a detach, the end of a check)
                client.close()
                raise RunError(f"host {self.host.name}: the connection was closed while it was being opened")
            self.stage = "connected"
            return client

    def close(self, client: AgentClient | None = None) -> None:
        """Close the channel (only if it is still ``client``, when given)."""
        with self._state:
            current = self.client
            if current is None or (client is not None and client is not current):
                return
            self.client = None
        current.close()

    def drop(self) -> None:
        """Close the whole connection (for a new one later); never waits for a connect in progress,
        which closes what it opens."""
        with self._state:
            self._generation += 1
        self.close()
        if self.ssh is not None:
            self.ssh.close()


class Run:
    """A run of a cluster: the tasks, their hosts, and what has been read of each."""

    def __init__(self, cluster: cl.Cluster, run_id: str, ask_host_key=None):
        self.cluster = cluster
        self.run_id = check_run_id(run_id)
        names = cluster.task_names()
        self.tasks = [TaskState(name, t.host) for name, t in zip(names, cluster.tasks)]
        self.links = {h.name: HostLink(h, ask_host_key) for h in cluster.hosts
                      if any(t.host == h.name for t in cluster.tasks)}
        self.tf_configs: list[str] | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ----------------------------------------------------------------- manifest

    @property
    def manifest_path(self) -> Path:
        return manifest_path(self.run_id)

    def _write_manifest(self, tf_configs: list[str]) -> None:
        path = self.manifest_path
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"run_id": self.run_id, "created": time.time(), "cluster": cl.dumps(self.cluster),
                "tasks": [{"name": t.name, "host": t.host, "tf_config": c} for t, c in zip(self.tasks, tf_configs)]}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)

    @staticmethod
    def read_manifest(run_id: str) -> "Manifest":
        """A run's manifest, checked: a damaged one is a RunError that says which file and what to do."""
        path = manifest_path(run_id)
        if not path.is_file():
            known = known_runs()
            raise RunError(f"no run {run_id!r} is known to this console",
                           "tfcc runs lists them" + (f" (the newest is {known[-1]})" if known else ""))
        damaged = (f"the manifest of run {run_id} ({path}) is damaged",
                   "tfcc cannot follow or stop that run from it; its tasks may still run on their hosts "
                   "(stop them there if so), then delete the file")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            tasks = data["tasks"]
            cluster = cl.loads(data["cluster"], source=f"the cluster in {path}")
            names = cluster.task_names()
            if (not isinstance(tasks, list) or len(tasks) != len(names) or [t["name"] for t in tasks] != names
                    or not all(isinstance(t["tf_config"], str) and isinstance(t["host"], str) for t in tasks)):
                raise ValueError("its tasks do not match its cluster")
            for t in tasks:
                json.loads(t["tf_config"])
        except OSError as exc:
            raise RunError(f"the manifest of run {run_id} ({path}) cannot be read ({exc.strerror})",
                           "check its permissions") from None
        except (ValueError, KeyError, TypeError, cl.ClusterFileError) as exc:
            raise RunError(f"{damaged[0]} ({type(exc).__name__}: {str(exc)[:200]})", damaged[1]) from None
        return Manifest(run_id, cluster, [(t["name"], t["host"]) for t in tasks], [t["tf_config"] for t in tasks])

    @classmethod
    def load(cls, run_id: str, ask_host_key=None) -> "Run":
        saved = cls.read_manifest(run_id)
        run = cls(saved.cluster, run_id, ask_host_key)
        run.tf_configs = saved.tf_configs
        for task, config in zip(run.tasks, run.tf_configs):
            role, index = task.name.rsplit("-", 1)
            try:
                task.address = json.loads(config)["cluster"][role][int(index)]
            except (KeyError, IndexError, TypeError, ValueError):
                task.address = "?"
        return run

    # ----------------------------------------------------------------- start

    def start(self, on_progress=None, resume: bool = False) -> None:
        """Deploy, pick ports, write TF_CONFIG and start every task (returns at once).

        A run id names one run: a new run refuses an id that exists. ``resume`` starts the
        tasks of an existing run again in their run folders, with the same TF_CONFIG (the
        trainer's backups then resume training). ``on_progress(host, sent, total)``
        follows each host's upload in bytes.
        """
        training = self.cluster.training
        previous = self._previous_configs(resume)
        extra = {}
        if training.model_file:
            extra["user/" + Path(training.model_file).name] = check_user_file(training.model_file, "model_file")
        if training.script:
            extra["user/" + Path(training.script).name] = check_user_file(training.script, "script")
        try:
            bundle = make_bundle(extra)
        except OSError as exc:
            raise RunError(f"cannot read {exc.filename!r} to deploy it ({exc.strerror})",
                           "check that the file is there and readable") from None
        for name, link in self.links.items():
            link.connect(bundle, None if on_progress is None else
                         (lambda sent, total, name=name: on_progress(name, sent, total)))
        if resume:
            self._check_stopped()
            configs = previous
        else:
            ports: list = [t.port for t in self.cluster.tasks]
            for name, link in self.links.items():
                auto = [i for i, t in enumerate(self.cluster.tasks) if t.host == name and t.port == "auto"]
                if auto:
                    free = link.client.call("ports", count=len(auto))["ports"]
                    for i, port in zip(auto, free):
                        ports[i] = port
            configs = [self.cluster.tf_config(i, ports) for i in range(len(self.tasks))]
            self._write_manifest(configs)
        self.tf_configs = configs
        started: list[TaskState] = []
        try:
            self._start_tasks(configs, resume, started)
        except TfccError as exc:
            if not started:
                raise
            # Half a cluster would wait for the rest for an hour, holding its ports and GPUs.
            stopped = self._stop_tasks(started)
            raise RunError(f"{exc.cause} (starting run {self.run_id}, after {', '.join(t.name for t in started)} "
                           f"had started: {'stopped again' if stopped else 'STILL RUNNING: tfcc stop ' + self.run_id})",
                           (exc.fix + "; then " if exc.fix else "") + f"start it again with tfcc resume {self.run_id}"
                           ) from None

    def _stop_tasks(self, tasks: list["TaskState"]) -> bool:
        """Stop ``tasks`` now (a start that failed halfway); whether that worked for each."""
        ok = True
        for task in tasks:
            try:
                self.links[task.host].connect().call("stop", timeout=30, run_id=self.run_id, task=task.name, grace=2)
            except TfccError as exc:
                log.warning("could not stop %s of run %s: %s", task.name, self.run_id, exc)
                ok = False
        return ok

    def _start_tasks(self, configs: list[str], resume: bool, started: list["TaskState"]) -> None:
        training = self.cluster.training
        for i, (task, spec) in enumerate(zip(self.tasks, self.cluster.tasks)):
            link = self.links[task.host]
            host = link.host
            role, index = task.name.rsplit("-", 1)
            task.address = json.loads(configs[i])["cluster"][role][int(index)]
            if training.script:
                argv = [host.interpreter, f"{link.dist}/user/{Path(training.script).name}", *training.args]
            else:
                args = training.trainer_args()
                if training.model_file:
                    args[args.index("--model-file") + 1] = f"{link.dist}/user/{Path(training.model_file).name}"
                argv = [host.interpreter, "-m", "trainer", "--run-dir", "{run_dir}", *args]
            env = {"TF_USE_LEGACY_KERAS": "1"}
            if training.model_file and not training.script:
                env[MODEL_FILE_ORIGIN] = str(Path(training.model_file).expanduser().resolve())
            if spec.gpus:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.gpus))
            link.connect().call("start", run_id=self.run_id, task=task.name, tf_config=configs[i],
                                argv=argv, env=env, python_path=[link.dist], fresh=not resume)
            started.append(task)

    def _previous_configs(self, resume: bool) -> list[str] | None:
        """For a resume, the run's TF_CONFIGs; for a new run, None (and the id must be new)."""
        exists = self.manifest_path.exists()
        if not resume:
            if exists:
                raise RunError(f"run {self.run_id} exists already",
                               f"resume it with tfcc resume {self.run_id}, or choose another --run-id")
            return None
        if not exists:
            raise RunError(f"there is no run {self.run_id} to resume", "tfcc runs lists the runs of this console")
        saved = self.read_manifest(self.run_id)
        theirs = saved.tasks
        ours = [(t.name, t.host) for t in self.tasks]
        if theirs != ours:
            raise RunError(f"run {self.run_id} ran {', '.join(f'{n} on {h}' for n, h in theirs)}; this cluster has "
                           f"{', '.join(f'{n} on {h}' for n, h in ours)}",
                           f"resume with the same tasks on the same hosts (tfcc resume {self.run_id} uses the run's "
                           "own cluster), or start a new run")
        return saved.tf_configs

    def _check_stopped(self) -> None:
        phases = {}
        for task in self.tasks:  # a task that never started (its start failed halfway) has no folder yet
            try:
                phases[task.name] = self.links[task.host].connect().call(
                    "status", run_id=self.run_id, task=task.name)["phase"]
            except AgentRequestError:
                phases[task.name] = "not started"
        if all(phase == "finished" for phase in phases.values()):
            raise RunError(f"run {self.run_id} finished: every task ended well", "start a new run to train again")
        running = [task for task, phase in phases.items() if phase == "running"]
        if running:
            raise RunError(f"{', '.join(running)} of run {self.run_id} still running",
                           f"follow it with tfcc attach {self.run_id}, or stop it with tfcc stop {self.run_id} "
                           "before resuming")

    # ----------------------------------------------------------------- follow

    def follow(self, on_message: Callable[[TaskState, dict], None], poll: float = 0.2) -> None:
        """Follow every task on its own thread until it ends; reconnects after a drop."""
        for task in self.tasks:
            thread = threading.Thread(target=self._follow_task, args=(task, on_message, poll),
                                      name=f"tfcc-follow-{task.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _follow_task(self, task: TaskState, on_message, poll: float) -> None:
        """Follow one task until it ends on its host; every lost connection is tried again, with backoff.

        Only a refused host key (it will not change by itself) or the agent's refusal of the
        follow itself ends the following early; the front ends hear of an outage once
        (``reconnecting``) and of its end (``reconnected``).
        """
        link = self.links[task.host]
        backoff = {"delay": 0.2, "heard": False}  # reset by the first message a follow delivers
        outage: float | None = None

        def deliver(message, task=task):
            backoff.update(delay=0.2, heard=True)
            kind = message.get("type")
            if kind == "following":
                if task.launched_at is None and message.get("started"):
                    task.launched_at = message["started"]  # the agent started it: user scripts count too
                if task.phase == "starting":
                    task.phase = "running"
            elif kind == "metrics":
                task.offsets["metrics.jsonl"] = message["offset"]
                task.records += len(message["records"])
                for r in message["records"]:
                    if r.get("event") == "launched":  # the newest launch counts (a resumed run has several)
                        task.launched_at = r.get("time") or task.launched_at
                        task.cluster_formed = False
                        task.phase = "waiting for the cluster"
                    elif r.get("event") == "cluster_formed":
                        task.cluster_formed = True
                        task.phase = "training"
            elif kind == "log":
                task.offsets[message["stream"]] = message["offset"]
            elif kind == "end":
                task.phase, task.exit = message["phase"], message.get("exit")
            on_message(task, message)

        while not self._stop.is_set():
            client = None
            try:
                client = link.connect()
                handle = client.follow(self.run_id, task.name, deliver, offsets=dict(task.offsets), poll=poll)
                if outage is not None:
                    on_message(task, {"type": "reconnected", "host": task.host,
                                      "after": round(time.monotonic() - outage, 1)})
                    outage = None
                while not handle.done.wait(0.5):
                    if self._stop.is_set():
                        link.close(client)
                        return
                if handle.end is not None:
                    return
                if handle.error and handle.error != "channel closed":
                    task.phase = "error"
                    on_message(task, {"type": "error", "error": handle.error})
                    return
                error = "the connection closed"
            except SSHError as exc:
                if not exc.retry:
                    task.phase = "error"
                    on_message(task, {"type": "error", "error": str(exc)})
                    return
                error = str(exc)
            except (TfccError, ChannelClosed, OSError, TimeoutError) as exc:
                error = str(exc) or type(exc).__name__
            except Exception as exc:  # a bug must not end the following for good: log it and go on
                log.exception("following %s", task.name)
                error = f"{type(exc).__name__}: {exc}"
            log.info("following %s: %s; reconnecting", task.name, error)
            link.close(client)
            if outage is None:
                outage = time.monotonic()
                on_message(task, {"type": "reconnecting", "host": task.host, "error": error,
                                  "first": not backoff["heard"]})
            self._stop.wait(backoff["delay"])
            backoff["delay"] = min(backoff["delay"] * 2, 5.0)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def waiting_report(self, after: float) -> str | None:
        """The startup watchdog: who waits for whom, once the cluster has not formed after ``after`` s.

        TensorFlow's own wait is silent for up to an hour.
        """
        waiting = [t for t in self.tasks if t.launched_at is not None and not t.cluster_formed
                   and t.phase not in ENDED]
        if not waiting or any(t.cluster_formed for t in self.tasks):
            return None
        waited = time.time() - min(t.launched_at for t in waiting)
        if waited < after:
            return None
        missing = [t for t in self.tasks if t.launched_at is None or t.phase in ENDED]
        names = ", ".join(t.name for t in waiting)
        if missing:
            who = "; ".join(
                f"{t.name} at {t.address} on host {t.host} "
                + (f"ended ({t.phase})" if t.phase in ENDED else "has not started")
                for t in missing)
            return (f"{names} waited {waited:.0f} s for the cluster to form: {who}. "
                    f"See tfcc logs {self.run_id} {missing[0].name}; restart the run when it is fixed")
        if not any(t.records for t in self.tasks):  # nothing reports: a script without tfcc's reporter
            return (f"{names} started {waited:.0f} s ago and none has said that training began: tfcc hears that "
                    "from its trainer or a script with MetricsReporter. See tfcc logs "
                    f"{self.run_id} {waiting[0].name}; if the tasks wait for each other, a port may be blocked "
                    "between hosts (tfcc check tests every pair)")
        return (f"{names} waited {waited:.0f} s for the cluster to form although every task started: a port may be "
                "blocked between hosts (tfcc check tests every pair)")

    # ----------------------------------------------------------------- control

    def stop(self, grace: float = 10.0) -> list[dict]:
        results = []
        for task in self.tasks:
            client = self.links[task.host].connect()
            results.append(client.call("stop", timeout=grace + 30, run_id=self.run_id, task=task.name, grace=grace))
        return results

    def status(self) -> list[dict]:
        return [self.links[t.host].connect().call("status", run_id=self.run_id, task=t.name) for t in self.tasks]

    def detach(self) -> None:
        self._stop.set()
        for link in self.links.values():
            link.drop()
        self.wait(timeout=5)


def connection_words(task: TaskState, message: dict) -> str:
    """What a ``reconnecting`` or ``reconnected`` message means, in the words both front ends show."""
    if message["type"] == "reconnecting" and message.get("first"):
        return f"cannot reach host {task.host} ({message['error']}); trying again (the task may still run there)"
    if message["type"] == "reconnecting":
        return (f"lost the connection to host {task.host} ({message['error']}); reconnecting "
                "(the task goes on there)")
    return f"reconnected to host {task.host} after {message['after']:.0f} s; following on from where it stopped"


def known_runs() -> list[str]:
    """The ids of the runs this console has manifests of (oldest first)."""
    return sorted(p.stem for p in (state_dir() / "runs").glob("*.json") if name_problem("run id", p.stem) is None)
