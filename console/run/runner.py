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
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable

from agent.protocol import (CANCEL, CHECK_PORTS, FINISHED, FIREWALL, JOB, LOGS, LOST, LOG_MESSAGE, MEASURE, METRICS,
                            METRICS_MESSAGE, NO_SUCH_TASK, NOT_STARTED, PORTS, RUNNING, RUNS_DIR, START, STATUS, STOP,
                            SLURM_LIVE_STATES, SUBMIT, SYSTEM_MESSAGE, parse_address, parse_task_name)
from console import cluster as cl
from console import exposure, text
from console.errors import RunError, TfccError
from console.remote.channel import AgentRequestError, AgentTimeout
from console.remote.deploy import make_bundle
from console.remote.link import HostLink
from console.remote.ssh import SSHError
from console.run.launch import (GPUS, SLURM_PORT_BASE, check_user_file, firewall_request, keras_choice,
                               secret_values, slurm_login, task_command)
from console.run.seeding import Seeding, copy_backup, plan_seeding
from console.states import FOLLOW_ERROR, RECONNECTED, RECONNECTING, TaskState
from console.store.manifests import (Manifest, check_run_id, console_id, manifest_path, read_manifest,
                                     write_manifest)
from console import workdir as workdir_facts
from console.workdir import Workdir, collect as collect_workdir, excluded_module, human_bytes, locate as workdir_of
from trainer.tf_config import PS, TRAINING_ROLES

log = logging.getLogger("console.run.runner")


def message_size(message: dict) -> int:
    """About the bytes a follow's message holds (its lines or its text): what a backlog counts."""
    if message.get("type") == SYSTEM_MESSAGE:  # a host's sample (queued as its "record"): 200 bytes a task or GPU
        sample = message.get("record") if isinstance(message.get("record"), dict) else {}
        return 100 + 200 * sum(len(part) for part in (sample.get("tasks"), sample.get("gpus"))
                               if isinstance(part, (dict, list)))
    lines = message.get("lines")
    if isinstance(lines, list):
        return 100 + sum(len(line) for line in lines if isinstance(line, str))
    text_ = message.get("text")
    return 100 + (len(text_) if isinstance(text_, str) else 0)


class Backlog:
    """What the follows delivered that the run's consumer has not handled yet, in bytes. Over ``HIGH`` a
    follow that delivers more is held at its agent (``Follow.pause``); at ``LOW`` they all go on. A host that
    writes faster than the console reads costs the console this much, not the whole file: nothing is lost,
    each follow sends on from where it was held."""

    HIGH = 8 << 20
    LOW = 2 << 20

    def __init__(self):
        self._lock = threading.Lock()
        self.size = 0
        self.peak = 0
        self.holds = 0  # how many times a follow was held (the bench reads it)
        self.dropped_samples = 0  # system samples not queued while past HIGH
        self._held: dict[int, object] = {}

    def delivered(self, follow, message: dict) -> None:
        """A follow's ``message`` was queued (on the channel's reader thread: this waits for nothing)."""
        size = message_size(message)
        with self._lock:
            self.size += size
            self.peak = max(self.peak, self.size)
            hold = follow is not None and self.size > self.HIGH and id(follow) not in self._held
            if hold:
                self._held[id(follow)] = follow
                self.holds += 1
        if hold:
            follow.pause(True)

    def take_sample(self, message: dict) -> bool:
        """A host's system sample, counted as a follow's message is (as it will be queued: ``{"type": "system",
        "record": ...}``, which ``handled`` takes off once done); False (not queued) while the console is past
        ``HIGH``: a newer sample comes a second later."""
        size = message_size({"type": SYSTEM_MESSAGE, "record": message})
        with self._lock:
            if self.size > self.HIGH:
                self.dropped_samples += 1
                return False
            self.size += size
            self.peak = max(self.peak, self.size)
        return True

    def handled(self, message: dict) -> None:
        """A queued ``message`` was handled (on the consumer's thread)."""
        size = message_size(message)
        with self._lock:
            self.size -= size
            going = list(self._held.values()) if self.size <= self.LOW else []
            if going:
                self._held.clear()
        for follow in going:
            follow.pause(False)


class Run:
    """A run of a cluster: the tasks, their hosts, and what has been read of each."""

    def __init__(self, cluster: cl.Cluster, run_id: str, ask_host_key=None):
        self.cluster = cluster
        self.run_id = check_run_id(run_id)
        names = cluster.task_names()
        if cluster.slurm is not None:  # every task is followed through the login host (the nodes share its files)
            login = slurm_login(cluster.slurm)
            self.tasks = [TaskState(name, login.name) for name in names]
            self.links = {login.name: HostLink(login, ask_host_key)}
        else:
            self.tasks = [TaskState(name, t.host) for name, t in zip(names, cluster.tasks)]
            self.links = {h.name: HostLink(h, ask_host_key) for h in cluster.hosts
                          if any(t.host == h.name for t in cluster.tasks)}
        self.job: dict = {}  # a Slurm run's job as its login host last said it (``watch_job``)
        self._attempts: dict[str, int] = {}  # a Slurm run: each task's attempt when stop_each ended it
        self.tf_configs: list[str] | None = None
        # An elastic run's tasks that it goes on without (name -> why), and each change of its size, oldest first
        # ({"at", "tasks", "why"}): kept in the manifest.
        self.left: dict[str, str] = {}
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
        self._nodes: set[str] = set()                        # a Slurm run's nodes its samples named (capped)
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

    def _member_indexes(self) -> set[int]:
        return {i for i, t in enumerate(self.tasks) if t.name not in self.left}

    def _links_of(self, tasks: list[TaskState]) -> list[tuple[str, HostLink]]:
        hosts = {t.host for t in tasks}
        return [(name, link) for name, link in self.links.items() if name in hosts]

    def leave(self, tasks: list[TaskState], why: str) -> None:
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
            self._write_manifest(self.tf_configs)
        log.info("run %s: %s; its tasks now: %s", self.run_id, why, ", ".join(t.name for t in self.members))

    def _write_manifest(self, configs: list[str]) -> None:
        write_manifest(Manifest(self.run_id, self.cluster, [(t.name, t.host) for t in self.tasks], configs,
                                dict(self.left), list(self.resizes), sorted(self.moved), dict(self.speed)))

    def note_speed(self, verdict) -> None:
        """Keep a breakdown's scaling efficiency (a console.speed.Verdict) in the manifest: ``tfcc runs`` says it."""
        self.speed = {"speedup": round(verdict.speedup, 3), "efficiency": round(verdict.efficiency, 3),
                      "workers": len(verdict.workers), "kind": verdict.kind, "time": time.time()}
        if self.tf_configs is not None:
            self._write_manifest(self.tf_configs)

    def _take_membership(self, saved: Manifest) -> None:
        """What the manifest says of an elastic run's members (who left, each change of size, who moved to a spare
        and has no folder there yet): a resume or a later console goes on from there."""
        self.left, self.resizes, self.moved = dict(saved.left), list(saved.resizes), set(saved.moved)
        self.speed = dict(saved.speed)
        for task in self.tasks:
            if task.name in self.left:
                task.leave()

    def mark_left(self, name: str, why: str) -> None:
        """Say anew why task ``name`` is out of the run (a person took its host back: it is asked again)."""
        self.left[name] = why
        if self.tf_configs is not None:
            self._write_manifest(self.tf_configs)

    # ----------------------------------------------------------------- start

    def start(self, on_progress=None, resume: bool = False, explicit: bool = False) -> None:
        """Deploy, pick ports, write TF_CONFIG and start every task (returns at once).

        A run id names one run: a new run refuses an id that exists. ``resume`` starts the
        tasks of an existing run again in their run folders, with the same TF_CONFIG (the
        trainer's backups then resume training); ``explicit``: a person asked for it (not a restart), and
        there must be a backup to resume from. ``on_progress(host, sent, total)``
        follows each host's upload in bytes.
        """
        with self._sampling:
            self._nodes.clear()  # a Slurm job's nodes are this start's: a restart may get others
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
                self._collect_workdir()
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

        at_once(self._links_of(self.members), connect)
        if self.cluster.slurm is not None:
            self._submit(resume, explicit)
            return
        if resume:
            self._seed_backups(self._check_stopped(explicit))
            self.joining.clear()
            # Tasks moved to a spare host: new addresses, so a new TF_CONFIG for every task.
            moved, self.moved = bool(self.moved), set()
            configs = self._new_configs() if moved else self._with_free_ports(self._member_configs(previous))
        else:
            configs = self._new_configs()
        self.tf_configs = configs
        self.exposed = exposure_words(self.cluster)
        started: list[TaskState] = []
        try:
            self._start_tasks(configs, resume, started, refresh=resume and explicit)
        except Exception as exc:
            if not started:
                raise
            # Half a cluster would wait for the rest for an hour, holding its ports and GPUs.
            stopped = self._stop_tasks(started)
            if not isinstance(exc, TfccError):
                raise
            raise RunError(f"{exc.cause} (starting run {self.run_id}, after {', '.join(t.name for t in started)} "
                           f"had started: {'stopped again' if stopped else 'STILL RUNNING: tfcc stop ' + self.run_id})",
                           (exc.fix + "; then " if exc.fix else "") + f"start it again with tfcc resume {self.run_id}"
                           ) from None

    # ----------------------------------------------------------------- a Slurm run

    def _submit(self, resume: bool, explicit: bool = False) -> None:
        """A Slurm run's start: one job from the login host, every task a rank of it (agent/slurm.py). A restart
        (``resume``) while the job's own script still runs submits nothing: the script starts the tasks again
        (each new attempt's step), and this waits until their folders say so; once the job has ended it is
        submitted again in the same folders (the trainer goes on from its backups). ``explicit``: a person's
        resume, refused while the job still runs."""
        link = next(iter(self.links.values()))
        slurm = self.cluster.slurm
        self.code_refreshed = None
        if resume:
            if self.tf_configs is None:
                self._previous_configs(True)
            job = self.job_state()
            if job["state"] in SLURM_LIVE_STATES and not job["script_ended"]:
                if explicit:
                    raise RunError(f"run {self.run_id}'s Slurm job {job['job_id']} is still {job['state'].lower()}",
                                   f"follow it with tfcc attach {self.run_id}, or stop it with tfcc stop "
                                   f"{self.run_id} before resuming")
                if self._await_next_attempt(link):
                    return
            if all(s is not None and s["phase"] == FINISHED for s in self._statuses().values()):
                raise RunError(f"run {self.run_id} finished: every task ended well", "start a new run to train again")
        else:
            self._previous_configs(False)
        training = self.cluster.training
        workdir = (self.workdir or self._collect_workdir()) if training.user_code else None
        keras = keras_choice(self.cluster, workdir)
        tasks = []
        for task, spec in zip(self.tasks, self.cluster.tasks):
            argv, env = task_command(self.cluster, spec, slurm.python or "python3", link.dist,
                                     workdir.script if workdir is not None else None, keras)
            if spec.role != PS:
                env.pop(GPUS, None)  # Slurm gives each task its GPUs (--gres); a ps holds variables on its CPU
            tasks.append({"task": task.name, "argv": argv, "env": env})
        shipped = {}  # (no secret_env: a Slurm cluster file refuses it, console/cluster.py)
        if workdir is not None:  # its blobs went to the login host with the deploy: each task's work/ from them
            shipped["workdir"] = workdir.entries()
            if resume and explicit:  # a person resumes with the code as it is now (as _start_tasks does)
                shipped["refresh_work"] = True
        reply = link.connect().call(SUBMIT, timeout=90, run_id=self.run_id, tasks=tasks, jobs=slurm.jobs(),
                                    port_base=SLURM_PORT_BASE, sbatch=slurm.sbatch_options(), srun=slurm.srun_options(),
                                    python=slurm.python or "python3", python_path=[link.dist],
                                    cpus_per_task=slurm.cpus_per_task, max_restarts=training.max_restarts,
                                    console=console_id(), fresh=not resume, **shipped)
        if shipped.get("refresh_work"):
            refreshed = reply.get("work_refreshed")
            self.code_refreshed = refreshed_words(workdir.root, {task: r for task, r in refreshed.items()
                                                                 if isinstance(r, dict)}
                                                  if isinstance(refreshed, dict) else {})
        self.job = {"job_id": reply["job_id"], "state": "PENDING", "reason": "", "nodes": ""}
        # Slurm picks the nodes: each task's TF_CONFIG is made on its node (tf_config.json in its folder)
        self.tf_configs = self.tf_configs or ["{}" for _ in self.tasks]
        self._write_manifest(self.tf_configs)
        for task in self.tasks:
            task.attempt = max(task.attempt, 1)
        log.info("run %s: submitted as Slurm job %s", self.run_id, reply["job_id"])

    def _await_next_attempt(self, link: HostLink, timeout: float = 120.0) -> bool:
        """Until the job's script has started every task again: each one's attempt past the one ``stop_each``
        ended. False when the script ended first (its restarts spent): the job is to be submitted again."""
        before = self._attempts or {t.name: t.attempt for t in self.members}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stop.is_set():
            statuses = [link.connect().call(STATUS, run_id=self.run_id, task=t.name) for t in self.members]
            if all(s["exit"] is None and (s.get("attempt") or 0) > before.get(t.name, 0)
                   for t, s in zip(self.members, statuses)):
                return True
            job = self.job_state()
            if job["script_ended"] or job["state"] not in SLURM_LIVE_STATES:
                return False
            self._stop.wait(1.0)
        raise RunError(f"Slurm job {self.job.get('job_id')} did not start the tasks of run {self.run_id} again in "
                       f"{timeout:.0f} s", f"tfcc stop {self.run_id}, then tfcc resume {self.run_id}")

    def job_state(self) -> dict:
        """A Slurm run's job as its login host says it now: state, Slurm's reason, nodes, whether its script
        ended."""
        link = next(iter(self.links.values()))
        self.job = link.connect().call(JOB, run_id=self.run_id)
        return self.job

    def watch_job(self, on_job: Callable[[dict], None], interval: float = 2.0) -> None:
        """A Slurm run: ``on_job(job)`` each time its job's state, reason or nodes change, on a thread of its own,
        until every task ended or ``detach``."""
        def watch() -> None:
            said = None
            while not self._stop.is_set():
                try:
                    job = self.job_state()
                except TfccError as exc:
                    log.info("run %s: the job's state: %s", self.run_id, exc)
                else:
                    now = (job.get("state"), job.get("reason"), job.get("nodes"))
                    if now != said:
                        said = now
                        on_job({k: v for k, v in job.items() if k != "output"})  # (tfcc logs says its output)
                if self.job.get("state") not in SLURM_LIVE_STATES and all(t.ended for t in self.members):
                    return  # (a restart within the job, or a new job, keeps it watched)
                self._stop.wait(interval)

        thread = threading.Thread(target=watch, name=f"tfcc-job-{self.run_id}", daemon=True)
        thread.start()

    def _collect_workdir(self) -> Workdir:
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

    def _new_configs(self) -> list[str]:
        """Each task's TF_CONFIG with free ports on their hosts for the ``auto`` ones; kept in the manifest."""
        ports: list = [t.port for t in self.cluster.tasks]

        def pick(name: str, link: HostLink) -> None:
            auto = [i for i, t in enumerate(self.cluster.tasks) if t.host == name and t.port == "auto"]
            if auto:
                free = link.connect().call(PORTS, count=len(auto))["ports"]
                for i, port in zip(auto, free):
                    ports[i] = port

        at_once(self._links_of(self.members), pick)
        return self._configs_for(ports)

    def _configs_for(self, ports: list) -> list[str]:
        """Each member's TF_CONFIG with ``ports`` (a left task keeps its last one: none is given to it); kept in
        the manifest."""
        members = self._member_indexes()
        configs = [self.cluster.tf_config(i, ports, members) if i in members
                   else (self.tf_configs[i] if self.tf_configs else self.cluster.tf_config(i, ports))
                   for i in range(len(self.tasks))]
        self._write_manifest(configs)
        return configs

    def _member_configs(self, configs: list[str]) -> list[str]:
        """A resume's TF_CONFIGs: the run's own while its members are the same; after a change of its size, one
        for each member of the run now, on the ports each task had."""
        members = self._member_indexes()
        ports = [parse_address(a)[1] if a else None for a in (task_address(t.name, c)
                                                              for t, c in zip(self.tasks, configs))]
        if all(self.cluster.tf_config(i, ports, members) == configs[i] for i in members):
            return configs
        return self._configs_for(ports)

    def _with_free_ports(self, configs: list[str]) -> list[str]:
        """A resume keeps the run's TF_CONFIG while its ports are free; when another process took one
        meanwhile, every task gets a new TF_CONFIG (it must be the same cluster for all) with new ports
        for the ``auto`` ones. A fixed port that is taken cannot change: the error names its holder."""
        addresses = [task_address(t.name, c) for t, c in zip(self.tasks, configs)]
        ports = [parse_address(a)[1] if a else None for a in addresses]  # an evaluator has none
        taken: dict[int, dict] = {}
        members = self._member_indexes()

        def check(name: str, link: HostLink) -> None:
            mine = [i for i, t in enumerate(self.tasks) if t.host == name and ports[i] is not None and i in members]
            answers = link.connect().call(CHECK_PORTS, ports=[ports[i] for i in mine])["ports"]
            taken.update((i, a) for i, a in zip(mine, answers) if not a["free"])

        at_once(self._links_of(self.members), check)
        if not taken:
            return configs
        words = "; ".join(f"{self.tasks[i].name} on {self.tasks[i].host}: {text.port_in_use_text(a)}"
                          for i, a in sorted(taken.items()))
        fixed = [i for i in taken if self.cluster.tasks[i].port != "auto"]
        if fixed:
            raise RunError(f"cannot resume run {self.run_id}: {words}",
                           "stop that process, or set the task's port to \"auto\" in the cluster file")
        configs = self._new_configs()
        self.ports_changed = f"{words}: every task got a new TF_CONFIG with new ports"
        log.warning("run %s: %s", self.run_id, self.ports_changed)
        return configs

    def _stop_tasks(self, tasks: list["TaskState"]) -> bool:
        """Stop ``tasks`` now (a start that failed halfway); whether that worked for each."""
        return not self.stop_each(grace=2, only=tasks)

    def relaunch(self, tasks: list["TaskState"]) -> None:
        """Start ``tasks`` again in their run folders with the TF_CONFIG they had (the others go on:
        a parameter-server coordinator takes a worker back)."""
        started: list[TaskState] = []
        self._start_tasks(self.tf_configs, True, started, only=tasks)

    def _training_tasks(self) -> set[str]:
        return {t.name for t in self.tasks if parse_task_name(t.name)[0] in TRAINING_ROLES}

    def _seed_backups(self, statuses: dict[str, dict | None]) -> None:
        """Before every training task starts again: copy the backup they resume from to each that lacks it
        (console/run/seeding.py), and to each task that rejoins the run the newest of the others; said in
        ``self.seeded`` (the session says it)."""
        self.seeded = None
        if self.cluster.training.user_code or self.cluster.parameter_server:
            return  # a script keeps its own backups; the coordinator alone backs up
        seeding = plan_seeding(statuses, self.joining)
        if seeding is None:
            return
        hosts = {t.name: t.host for t in self.tasks}
        folders = {name: f"{self.links[hosts[name]].home}/{RUNS_DIR}/{self.run_id}/{name}" for name in hosts}
        copy_backup(seeding, statuses, folders, lambda name: self.links[hosts[name]].transport.files())
        self.seeded = seeding

    def _statuses(self) -> dict[str, dict | None]:
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

    def _start_tasks(self, configs: list[str], resume: bool, started: list["TaskState"],
                     only: list["TaskState"] | None = None, refresh: bool = False) -> None:
        """Start the tasks (``only`` these). ``refresh``: a person resumes a script's run: each task's copy of
        the script's files is brought up to date with the workdir as it is now, and ``code_refreshed`` says so
        (a resume that ran each task's old copy would repeat the failure it was fixed for)."""
        training = self.cluster.training
        workdir = (self.workdir or self._collect_workdir()) if training.user_code else None
        refresh = refresh and workdir is not None
        refreshed: dict[str, dict] = {}
        keras = keras_choice(self.cluster, workdir)  # once for every task: their code's files are read here
        shipped = {"workdir": workdir.entries()} if workdir is not None else {}
        console = console_id()
        if training.secret_env:  # read at each start: in memory only, to the tasks' environment over the channel
            shipped["secret_env"] = secret_values(self.cluster)

        def start(i: int, task: TaskState, spec: cl.Task) -> None:
            link = self.links[task.host]
            task.address = task_address(task.name, configs[i])
            argv, env = task_command(self.cluster, spec, link.host.interpreter, link.dist,
                                     workdir.script if workdir is not None else None, keras)
            wall = firewall_request(self.cluster, task.address, configs[i])
            try:
                reply = link.connect().call(START, run_id=self.run_id, task=task.name, tf_config=configs[i],
                                            console=console, argv=argv, env=env, python_path=[link.dist],
                                            fresh=not resume, **shipped, **({"firewall": wall} if wall else {}),
                                            **({"refresh_work": True} if refresh else {}))
            except AgentRequestError as exc:
                if exc.code == FIREWALL:
                    raise RunError(f"host {task.host}: {exc}") from None
                raise
            task.attempt = reply.get("attempt", 1)
            if isinstance(reply.get("work_refreshed"), dict):
                refreshed[task.name] = reply["work_refreshed"]
            started.append(task)

        self.code_refreshed = None
        at_once([(i, task, spec) for i, (task, spec) in enumerate(zip(self.tasks, self.cluster.tasks))
                 if (task in only if only is not None else task.name not in self.left)], start)
        if refresh:
            self.code_refreshed = refreshed_words(workdir.root, refreshed)

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

    def _check_stopped(self, explicit: bool) -> dict[str, dict | None]:
        """A resume's checks, before anything starts: no task runs, not every one finished, no task's folder
        vanished while others hold backups unless the console can copy one to it (tfcc's trainer under
        MultiWorkerMirrored: console/run/seeding.py), some folder is there, and (a person's resume of tfcc's
        trainer, ``explicit``) some task has a backup to resume from. Each task's status."""
        statuses = self._statuses()
        phases = {name: NOT_STARTED if s is None else s["phase"] for name, s in statuses.items()}
        if all(phase == FINISHED for phase in phases.values()):
            raise RunError(f"run {self.run_id} finished: every task ended well", "start a new run to train again")
        running = [task for task, phase in phases.items() if phase == RUNNING]
        if running:
            raise RunError(f"{', '.join(running)} of run {self.run_id} still running",
                           f"follow it with tfcc attach {self.run_id}, or stop it with tfcc stop {self.run_id} "
                           "before resuming")
        # A task moved to a spare host has no folder there yet: it starts afresh (a worker of tfcc's trainer gets
        # a copy of the newest backup first).
        missing = [t for t in self.members if statuses[t.name] is None and t.name not in self.moved]
        backed_up = [name for name, s in statuses.items() if s is not None and s.get("backups")]
        seedable = not self.cluster.training.user_code and not self.cluster.parameter_server and \
            all(t.name in self._training_tasks() for t in missing)
        if missing and (len(missing) == len(self.members) or (backed_up and not seedable)):
            where = ", ".join(f"{t.name} on {t.host}" for t in missing)
            raise RunError(f"run {self.run_id} has no run folder any more for {where}: "
                           + ("a resume would start it from nothing, and the other tasks would drop their backups"
                              if backed_up else "there is nothing to resume from"),
                           "start a new run (tfcc run)" + (f"; the backups stay in the folders of "
                                                           f"{', '.join(backed_up)}" if backed_up else ""))
        if explicit and not backed_up and not missing and not self.cluster.training.user_code:
            raise RunError(f"no task of run {self.run_id} has a backup yet (it trained less than its "
                           f"backup_seconds, {self.cluster.training.backup_seconds:g} s): there is nothing to resume "
                           "from", "start a new run (tfcc run)")
        return statuses

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
        """The tasks whose load a sample named ``name`` may carry: the run's tasks on that host (a Slurm node's:
        any of the run's, which Slurm places)."""
        return {t.name for t in self.tasks if self.cluster.slurm is not None or t.host == name}

    def _system_source(self, name: str) -> bool:
        """Whether system samples named ``name`` are kept: a host of the run, or one of a Slurm job's nodes (the
        first ``slurm.nodes`` names its login host's agent sends: a host cannot grow the console's hosts)."""
        if self.cluster.slurm is None:
            return name in self.links
        with self._sampling:
            if name in self._nodes or len(self._nodes) < max(1, self.cluster.slurm.nodes):
                self._nodes.add(name)
                return True
        return False

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
                # a Slurm run's samples are its nodes', each named (the login host's agent streams them)
                node = message.get("node") if self.cluster.slurm is not None else None
                name = node if isinstance(node, str) and node else host
                if not self._system_source(name) or not self.backlog.take_sample(message):
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

    def _send_stop(self, tasks: list[TaskState], grace: float, done: bool = False) -> list[dict | TfccError]:
        """The one stop: ``tasks``, all hosts at once (SIGTERM, then SIGKILL after ``grace``), whatever fails;
        each one's answer, or the error that kept it from answering. ``done``: the stop is their normal end
        (they end ``finished``)."""
        def stop(task: TaskState) -> dict | TfccError:
            try:
                return self.links[task.host].connect().call(STOP, timeout=grace + 30, run_id=self.run_id,
                                                            task=task.name, grace=grace, done=done)
            except TfccError as exc:
                log.warning("could not stop %s of run %s: %s", task.name, self.run_id, exc)
                if isinstance(exc, AgentTimeout):  # a host gone silent: the next call connects anew (or fails fast)
                    self.links[task.host].drop()
                return exc

        return at_once([(t,) for t in tasks], stop)

    def stop(self, grace: float = 10.0) -> list[dict]:
        """Stop every task in the run; their answers in order, or the first error once every host had its go.
        A Slurm run: its job is cancelled (``scancel``, after SIGTERM and ``grace``)."""
        if self.cluster.slurm is not None:
            answer = next(iter(self.links.values())).connect().call(CANCEL, timeout=grace + 60, run_id=self.run_id,
                                                                    grace=grace)
            return [{**answer, "task": t.name} for t in self.members]
        answers = self._send_stop(self.members, grace)
        for answer in answers:
            if isinstance(answer, TfccError):
                raise answer
        return answers

    def stop_each(self, grace: float = 10.0, only: list[TaskState] | None = None, done: bool = False) -> list[str]:
        """Stop every task in the run (or ``only`` these), whatever fails; the hosts where a stop had no answer."""
        if self.cluster.slurm is not None:
            return self._end_attempt(grace, done)
        tasks = self.members if only is None else only
        return [task.host for task, answer in zip(tasks, self._send_stop(tasks, grace, done))
                if isinstance(answer, TfccError)]

    def _end_attempt(self, grace: float, done: bool) -> list[str]:
        """A Slurm run's ``stop_each``: the servers' end after the chief's is the chief's wrapper's (``done``);
        else this attempt's tasks end (SIGTERM to the job's step, SIGKILL after ``grace``) and the job's script
        starts the next (``_await_next_attempt``). Each task's attempt is noted first."""
        if done:
            return []
        link = next(iter(self.links.values()))
        self._attempts = {t.name: t.attempt for t in self.members}  # the attempt followed (its launched record)
        try:
            statuses = [link.connect().call(STATUS, run_id=self.run_id, task=t.name) for t in self.members]
            # Only the attempt followed: one the job's script has already replaced (a failed step ends by itself,
            # srun --kill-on-bad-exit) is not to be ended too.
            if any(s["phase"] == RUNNING and s.get("attempt") == t.attempt for t, s in zip(self.members, statuses)):
                link.connect().call(CANCEL, timeout=grace + 60, run_id=self.run_id, grace=grace, step_only=True)
        except TfccError as exc:
            log.warning("could not end the attempt of Slurm run %s: %s", self.run_id, exc)
            return [link.host.name]
        return []

    def cancel_job(self) -> None:
        """A Slurm run given up: its job goes (its script would start the tasks again, with nobody following)."""
        if self.cluster.slurm is not None and self.job.get("job_id"):
            try:
                next(iter(self.links.values())).connect().call(CANCEL, timeout=90, run_id=self.run_id, grace=10)
            except TfccError as exc:
                log.warning("could not cancel the Slurm job of run %s: %s", self.run_id, exc)

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

    def logs(self, task: str, max_bytes: int) -> list[tuple[str, str]]:
        """The newest ``max_bytes`` of each of ``task``'s streams, as its host's agent reads them: (stream, text)."""
        host = next(t.host for t in self.tasks if t.name == task)
        said = self.links[host].connect().call(LOGS, run_id=self.run_id, task=task, max_bytes=max_bytes)["logs"]
        return [(stream, words) for stream, words in said.items() if isinstance(words, str)]

    def status(self) -> list[dict]:
        return at_once([(t,) for t in self.members], lambda task: self.links[task.host].connect().call(
            STATUS, run_id=self.run_id, task=task.name))

    def detach(self) -> None:
        self._stop.set()
        for link in self.links.values():
            link.drop()
        self.wait(timeout=5)
        with self._sampling:
            samplers = list(self._samplers.values())
        for thread in samplers:
            thread.join(timeout=5)


def refreshed_words(root: Path, refreshed: dict[str, dict]) -> str:
    """What a person's resume did to the tasks' copies of a script's files (each host's ``work_refreshed``,
    hostile data), in one line."""
    def names(key: str) -> list[str]:
        found = {n for r in refreshed.values() if isinstance(r.get(key), list) for n in r[key][:50]
                 if isinstance(n, str)}
        return sorted(text.printable(n[:200]) for n in found)

    changed, kept = names("changed"), names("kept")
    count = max((r["count"] for r in refreshed.values() if isinstance(r.get("count"), int)), default=0)
    if count <= 0:
        words = f"the tasks run the code of {root} as it was at the last start: none of its files changed since"
    else:
        shown = ", ".join(changed[:5]) + (", ..." if count > len(changed[:5]) else "")
        words = (f"the tasks run the code of {root} as it is now: {count} file{'s' if count != 1 else ''} changed "
                 f"since the last start ({shown})")
    if kept:
        words += (f"; {', '.join(kept[:5])} left as the script made it (a link or a folder of its own stands "
                  "there)")
    return words


def exposure_words(cluster: cl.Cluster) -> str | None:
    """The run's tasks on a public address, the risk and the fix, in one line; None for none (resolving the
    hosts' names here: a thread that may wait on the network calls it)."""
    problem = exposure.exposure_problem(cluster, exposure.public_tasks(cluster))
    return f"{problem[0]}; {problem[1]}" if problem else None


def task_address(name: str, tf_config: str) -> str:
    """A task's host:port in its TF_CONFIG (by the TF_CONFIG's own task: in an elastic run that shrank, worker-2
    may be worker 1); "" for a task outside the training cluster (an evaluator). ``name``: for older manifests."""
    config = json.loads(tf_config)
    role, index = parse_task_name(name)
    own = config.get("task")
    if isinstance(own, dict) and isinstance(own.get("type"), str) and isinstance(own.get("index"), int):
        role, index = own["type"], own["index"]
    cluster = config["cluster"]
    return cluster[role][index] if role in cluster else ""


def at_once(items: list[tuple], work: Callable) -> list:
    """``work(*item)`` for every item on its own thread; the results in order, or the first error
    (after every item has had its go: none is left half done behind the caller's back)."""
    if len(items) <= 1:
        return [work(*item) for item in items]
    with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="tfcc-host") as pool:
        futures = [pool.submit(work, *item) for item in items]
        wait(futures)
    return [f.result() for f in futures]
