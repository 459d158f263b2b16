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

import platformdirs

from agent.runs import STREAMS
from console import cluster as cl
from console.agent_client import AgentClient, ChannelClosed, LocalTransport
from console.deploy import LocalFiles, deploy, make_bundle

log = logging.getLogger("console.runner")


ENDED = ("finished", "failed", "lost", "error")
WATCHDOG_SECONDS = 120.0  # how long a cluster may take to form before tfcc says who it waits for


def state_dir() -> Path:
    return Path(os.environ.get("TFCC_CONSOLE_HOME") or platformdirs.user_state_dir("tfcc"))


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class RunError(Exception):
    """A run cannot start or be found; the message says what to do."""


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
    """The console's connection to one host's agent: a local subprocess or over SSH."""

    def __init__(self, host: cl.Host, ask_host_key=None):
        self.host = host
        self.ssh = None
        if not host.local:
            from console.ssh import SSHConnection

            self.ssh = SSHConnection(host.address, user=host.user, port=host.port, key=host.key, ask=ask_host_key)
        self.home: str | None = None
        self.dist: str | None = None
        self.client: AgentClient | None = None
        self.lock = threading.Lock()

    def _deploy(self, bundle, on_progress=None) -> None:
        """Put the code on the host (local hosts; SSH hosts deploy in ``connect``)."""
        self.home = os.environ.get("TFCC_HOME") or str(Path.home() / ".tfcc")
        self.dist, _ = deploy(bundle, LocalFiles(), self.home, on_progress)

    def connect(self, bundle=None, on_progress=None) -> AgentClient:
        """The agent on this host, started (and the code deployed) if need be.

        ``on_progress(sent, total)`` follows a deploy's upload in bytes.
        """
        with self.lock:
            if self.client is not None and not self.client.closed.is_set():
                return self.client
            bundle = bundle or make_bundle()
            if self.ssh is None:
                if self.dist is None:
                    self._deploy(bundle, on_progress)
                try:
                    channel = LocalTransport(python=self.host.interpreter, agent_root=Path(self.dist)).open_channel()
                except OSError as exc:
                    raise RunError(f"host {self.host.name}: the agent did not start with {self.host.interpreter!r} "
                                   f"({exc.strerror}); set python in the host's entry to a Python 3.9+ "
                                   "interpreter") from None
            elif self.dist is not None:
                channel = self.ssh.open_agent_channel(self.dist, self.host.interpreter)
            else:
                # One exec finds the home and, when the code is already there, starts the agent.
                self.home, channel = self.ssh.start_agent(bundle.name, self.host.interpreter)
                if channel is None:
                    files = self.ssh.sftp()
                    try:
                        self.dist, _ = deploy(bundle, files, self.home, on_progress)
                    finally:
                        files.close()
                    channel = self.ssh.open_agent_channel(self.dist, self.host.interpreter)
                else:
                    self.dist = f"{self.home}/dist/{bundle.name}"
            self.client = AgentClient(channel)
            try:
                self.client.hello()
            except ChannelClosed:
                self.client = None
                raise RunError(f"host {self.host.name}: the agent did not start with {self.host.interpreter!r}; "
                               "set python in the host's entry to a Python 3.9+ interpreter") from None
            return self.client

    def close(self, client: AgentClient | None = None) -> None:
        """Close the channel (only if it is still ``client``, when given)."""
        with self.lock:
            if self.client is not None and (client is None or client is self.client):
                self.client.close()
                self.client = None

    def drop(self) -> None:
        """Close the whole connection (for a new one later)."""
        self.close()
        if self.ssh is not None:
            self.ssh.close()


class Run:
    """A run of a cluster: the tasks, their hosts, and what has been read of each."""

    def __init__(self, cluster: cl.Cluster, run_id: str, ask_host_key=None):
        self.cluster = cluster
        self.run_id = run_id
        names = cluster.task_names()
        self.tasks = [TaskState(name, t.host) for name, t in zip(names, cluster.tasks)]
        self.links = {h.name: HostLink(h, ask_host_key) for h in cluster.hosts
                      if any(t.host == h.name for t in cluster.tasks)}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ----------------------------------------------------------------- manifest

    @property
    def manifest_path(self) -> Path:
        return state_dir() / "runs" / f"{self.run_id}.json"

    def _write_manifest(self, tf_configs: list[str]) -> None:
        path = self.manifest_path
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"run_id": self.run_id, "created": time.time(), "cluster": cl.dumps(self.cluster),
                "tasks": [{"name": t.name, "host": t.host, "tf_config": c} for t, c in zip(self.tasks, tf_configs)]}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, run_id: str, ask_host_key=None) -> "Run":
        path = state_dir() / "runs" / f"{run_id}.json"
        if not path.exists():
            known = sorted(p.stem for p in (state_dir() / "runs").glob("*.json"))
            raise RunError(f"no run {run_id!r} is known to this console; tfcc runs lists them"
                           + (f" (the newest is {known[-1]})" if known else ""))
        data = json.loads(path.read_text())
        run = cls(cl.loads(data["cluster"]), run_id, ask_host_key)
        for task, saved in zip(run.tasks, data["tasks"]):
            task.address = json.loads(saved["tf_config"])["cluster"][task.name.rsplit("-", 1)[0]][
                int(task.name.rsplit("-", 1)[1])]
        return run

    # ----------------------------------------------------------------- start

    def start(self, on_progress=None) -> None:
        """Deploy, pick ports, write TF_CONFIG and start every task (returns at once).

        ``on_progress(host, sent, total)`` follows each host's upload in bytes.
        """
        training = self.cluster.training
        extra = {}
        if training.model_file:
            extra["user/" + Path(training.model_file).name] = Path(training.model_file)
        if training.script:
            extra["user/" + Path(training.script).name] = Path(training.script)
        bundle = make_bundle(extra)
        for name, link in self.links.items():
            link.connect(bundle, None if on_progress is None else
                         (lambda sent, total, name=name: on_progress(name, sent, total)))
        ports: list = [t.port for t in self.cluster.tasks]
        for name, link in self.links.items():
            auto = [i for i, t in enumerate(self.cluster.tasks) if t.host == name and t.port == "auto"]
            if auto:
                free = link.client.call("ports", count=len(auto))["ports"]
                for i, port in zip(auto, free):
                    ports[i] = port
        configs = [self.cluster.tf_config(i, ports) for i in range(len(self.tasks))]
        self._write_manifest(configs)
        for i, (task, spec) in enumerate(zip(self.tasks, self.cluster.tasks)):
            link = self.links[task.host]
            host = link.host
            task.address = f"{host.tf_host}:{ports[i]}"
            if training.script:
                argv = [host.interpreter, f"{link.dist}/user/{Path(training.script).name}", *training.args]
            else:
                args = training.trainer_args()
                if training.model_file:
                    args[args.index("--model-file") + 1] = f"{link.dist}/user/{Path(training.model_file).name}"
                argv = [host.interpreter, "-m", "trainer", "--run-dir", "{run_dir}", *args]
            env = {"TF_USE_LEGACY_KERAS": "1"}
            if spec.gpus:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.gpus))
            link.client.call("start", run_id=self.run_id, task=task.name, tf_config=configs[i],
                             argv=argv, env=env, python_path=[link.dist])

    # ----------------------------------------------------------------- follow

    def follow(self, on_message: Callable[[TaskState, dict], None], poll: float = 0.2) -> None:
        """Follow every task on its own thread until it ends; reconnects after a drop."""
        for task in self.tasks:
            thread = threading.Thread(target=self._follow_task, args=(task, on_message, poll),
                                      name=f"tfcc-follow-{task.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _follow_task(self, task: TaskState, on_message, poll: float) -> None:
        link = self.links[task.host]
        delay = 0.2
        while not self._stop.is_set():
            client = None
            try:
                client = link.connect()

                def deliver(message, task=task):
                    kind = message.get("type")
                    if kind == "metrics":
                        task.offsets["metrics.jsonl"] = message["offset"]
                        task.records += len(message["records"])
                        for r in message["records"]:
                            if r.get("event") == "launched":
                                task.launched_at = r.get("time")
                                task.phase = "waiting for the cluster"
                            elif r.get("event") == "cluster_formed":
                                task.cluster_formed = True
                                task.phase = "training"
                    elif kind == "log":
                        task.offsets[message["stream"]] = message["offset"]
                    elif kind == "end":
                        task.phase, task.exit = message["phase"], message.get("exit")
                    on_message(task, message)

                handle = client.follow(self.run_id, task.name, deliver, offsets=dict(task.offsets), poll=poll)
                while not handle.done.wait(0.5):
                    if self._stop.is_set():
                        return
                if handle.end is not None:
                    return
                if handle.error and handle.error != "channel closed":
                    task.phase = "error"
                    on_message(task, {"type": "error", "error": handle.error})
                    return
            except (ChannelClosed, OSError, TimeoutError) as exc:
                log.info("following %s: %s; reconnecting", task.name, exc)
            link.close(client)
            self._stop.wait(delay)
            delay = min(delay * 2, 5.0)

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


def known_runs() -> list[str]:
    return sorted(p.stem for p in (state_dir() / "runs").glob("*.json"))
