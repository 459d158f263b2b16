"""A Slurm cluster: one job from its login host, every task a rank of it; Slurm picks the nodes (Qt-free).

Every task is followed through the login host (the nodes share its files). The job's own script starts each
attempt (agent/slurm.py): a group restart ends this attempt's step and waits for the next; once the script has
ended (its restarts spent), a restart submits the job again in the same folders.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from agent.protocol import CANCEL, FINISHED, JOB, RUNNING, SLURM_LIVE_STATES, STATUS, SUBMIT, parse_address
from console import cluster as cl
from console import text
from console.errors import RunError, TfccError
from console.run.launch import SLURM_PORT_BASE, keras_choice, slurm_environment, task_command
from console.run.placement.base import Placement
from console.run.placement.preflight import preflight
from console.store.manifests import console_id

log = logging.getLogger("console.run.placement")

NODE = "slurm-node-{}"  # a node of the job before Slurm picks it (the diagram draws its tasks there till then)


def launched_address(record: dict) -> str:
    """A launched record's own address (its cluster's entry for its task), or ""."""
    try:
        address = record["cluster"][record["task_type"]][int(record["task_index"])]
    except (KeyError, IndexError, TypeError, ValueError):
        return ""
    try:
        parse_address(address)
    except (ValueError, AttributeError):
        return ""
    return address[:300]


class SlurmJob(Placement):
    """The cluster file's ``[slurm]``: the job, as its login host last said it, is this placement's."""

    name = "Slurm"
    relaunches_one = False
    picks_ports = False
    picks_machines = True

    def __init__(self, cluster: cl.Cluster):
        super().__init__(cluster)
        self.slurm = cluster.slurm
        self.login = cl.Host(name=self.slurm.login, address=self.slurm.login, user=self.slurm.user,
                             port=self.slurm.port, key=self.slurm.key, python=self.slurm.python)
        self.job: dict = {}                  # the job as its login host last said it (``job_state``)
        self._attempts: dict[str, int] = {}  # each task's attempt when ``stop_each`` ended it
        self._nodes: set[str] = set()        # the nodes its samples named (capped at slurm.nodes)
        self._lock = threading.Lock()        # guards ``_nodes`` (one sampling thread, any reader)

    # ------------------------------------------------------------ before a run

    def hosts(self) -> list[cl.Host]:
        return [self.login]

    def environment_hosts(self) -> list[cl.Host]:
        raise RunError("tfcc makes environments on hosts of its own, not on a Slurm cluster's nodes",
                       "make the environment on the cluster's shared file system and set python in [slurm] to its "
                       "interpreter")

    def task_hosts(self) -> list[str]:
        return [self.login.name] * len(self.cluster.tasks)

    def machines(self) -> dict[str, list[int]]:
        """``slurm.nodes`` nodes of ``tasks_per_node`` tasks each, in rank order (as srun's block distribution
        places them); Slurm names them when the job starts."""
        per_node = self.slurm.tasks_per_node
        nodes: dict[str, list[int]] = {}
        for rank in range(len(self.cluster.tasks)):
            nodes.setdefault(NODE.format(rank // per_node), []).append(rank)
        return nodes

    def preflight(self, ask_host_key=None, timeout: float = 60.0):
        return preflight(self.cluster, ask_host_key, timeout=timeout)

    def same_place(self, ran: cl.Cluster, addresses: set) -> bool:
        theirs = ran.slurm
        return theirs is not None and \
            (self.slurm.login, self.slurm.user, self.slurm.port) == (theirs.login, theirs.user, theirs.port)

    # ------------------------------------------------------------ start

    def start(self, run, resume: bool, explicit: bool, previous: list[str] | None) -> None:
        """One job from the login host, every task a rank of it (agent/slurm.py). A restart (``resume``) while
        the job's own script still runs submits nothing: the script starts the tasks again (each new attempt's
        step), and this waits until their folders say so; once the job has ended it is submitted again in the
        same folders (the trainer goes on from its backups). ``explicit``: a person's resume, refused while the
        job still runs."""
        link = run.links[self.login.name]
        slurm = run.cluster.slurm
        run.code_refreshed = None
        if resume:
            job = self.job_state(run)
            if job["state"] in SLURM_LIVE_STATES and not job["script_ended"]:
                if explicit:
                    raise RunError(f"run {run.run_id}'s Slurm job {job['job_id']} is still {job['state'].lower()}",
                                   f"follow it with tfcc attach {run.run_id}, or stop it with tfcc stop "
                                   f"{run.run_id} before resuming")
                if self._await_next_attempt(run):
                    return
            if all(s is not None and s["phase"] == FINISHED for s in run.statuses().values()):
                raise RunError(f"run {run.run_id} finished: every task ended well", "start a new run to train again")
        training = run.cluster.training
        workdir = run.collected_workdir() if training.user_code else None
        keras = keras_choice(run.cluster, workdir)
        tasks = []
        for task, spec in zip(run.tasks, run.cluster.tasks):
            argv, env = task_command(run.cluster, spec, slurm.python or "python3", link.dist,
                                     workdir.script if workdir is not None else None, keras)
            env = slurm_environment(spec, env)  # only a ps keeps its GPU mask: Slurm gives the others theirs
            tasks.append({"task": task.name, "argv": argv, "env": env})
        shipped = {}  # (no secret_env: a Slurm cluster file refuses it, console/cluster.py)
        if workdir is not None:  # its blobs went to the login host with the deploy: each task's work/ from them
            shipped["workdir"] = workdir.entries()
            if resume and explicit:  # a person resumes with the code as it is now (as on hosts of one's own)
                shipped["refresh_work"] = True
        reply = link.connect().call(SUBMIT, timeout=90, run_id=run.run_id, tasks=tasks, jobs=slurm.jobs(),
                                    port_base=SLURM_PORT_BASE, sbatch=slurm.sbatch_options(), srun=slurm.srun_options(),
                                    python=slurm.python or "python3", python_path=[link.dist],
                                    cpus_per_task=slurm.cpus_per_task, max_restarts=training.max_restarts,
                                    console=console_id(), fresh=not resume, **shipped)
        if shipped.get("refresh_work"):
            refreshed = reply.get("work_refreshed")
            run.code_refreshed = text.refreshed_words(workdir.root, {task: r for task, r in refreshed.items()
                                                                     if isinstance(r, dict)}
                                                      if isinstance(refreshed, dict) else {})
        self.job = {"job_id": reply["job_id"], "state": "PENDING", "reason": "", "nodes": ""}
        # Slurm picks the nodes: each task's TF_CONFIG is made on its node (tf_config.json in its folder)
        run.tf_configs = run.tf_configs or ["{}" for _ in run.tasks]
        run.write_manifest(run.tf_configs)
        for task in run.tasks:
            task.attempt = max(task.attempt, 1)
        log.info("run %s: submitted as Slurm job %s", run.run_id, reply["job_id"])

    def _await_next_attempt(self, run, timeout: float = 120.0) -> bool:
        """Until the job's script has started every task again: each one's attempt past the one ``stop_each``
        ended. False when the script ended first (its restarts spent): the job is to be submitted again."""
        link = run.links[self.login.name]
        before = self._attempts or {t.name: t.attempt for t in run.members}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not run.detached:
            statuses = [link.connect().call(STATUS, run_id=run.run_id, task=t.name) for t in run.members]
            if all(s["exit"] is None and (s.get("attempt") or 0) > before.get(t.name, 0)
                   for t, s in zip(run.members, statuses)):
                return True
            job = self.job_state(run)
            if job["script_ended"] or job["state"] not in SLURM_LIVE_STATES:
                return False
            run.pause(1.0)
        raise RunError(f"Slurm job {self.job.get('job_id')} did not start the tasks of run {run.run_id} again in "
                       f"{timeout:.0f} s", f"tfcc stop {run.run_id}, then tfcc resume {run.run_id}")

    def job_state(self, run) -> dict:
        """The job as its login host says it now: state, Slurm's reason, nodes, whether its script ended."""
        self.job = run.links[self.login.name].connect().call(JOB, run_id=run.run_id)
        return self.job

    def watch(self, run, on_change: Callable[[dict], None], interval: float = 2.0) -> None:
        """``on_change(job)`` each time the job's state, reason or nodes change, on a thread of its own, until
        every task ended or the run is detached."""
        def watch() -> None:
            said = None
            while not run.detached:
                try:
                    job = self.job_state(run)
                except TfccError as exc:
                    log.info("run %s: the job's state: %s", run.run_id, exc)
                else:
                    now = (job.get("state"), job.get("reason"), job.get("nodes"))
                    if now != said:
                        said = now
                        on_change({k: v for k, v in job.items() if k != "output"})  # (tfcc logs says its output)
                if self.job.get("state") not in SLURM_LIVE_STATES and all(t.ended for t in run.members):
                    return  # (a restart within the job, or a new job, keeps it watched)
                run.pause(interval)

        threading.Thread(target=watch, name=f"tfcc-job-{run.run_id}", daemon=True).start()

    def machine_of(self, task) -> str:
        """Its node, from the address its launch gave (a node's samples come under its name); the node planned for
        it until then."""
        if task.address and task.address != "?":
            try:
                return parse_address(task.address)[0]
            except (ValueError, AttributeError):
                pass
        index = next((i for i, t in enumerate(self.cluster.task_names()) if t == task.name), 0)
        return NODE.format(index // self.slurm.tasks_per_node)

    def launched(self, task, record: dict) -> None:
        """Slurm chose its node: its address is in its TF_CONFIG; the job's script counts its attempts."""
        task.address = launched_address(record) or task.address
        if isinstance(record.get("attempt"), int) and record["attempt"] > task.attempt:
            task.attempt = record["attempt"]

    # ------------------------------------------------------------ stop

    def stop(self, run, grace: float) -> list[dict]:
        """The job is cancelled (``scancel``, after SIGTERM and ``grace``)."""
        answer = run.links[self.login.name].connect().call(CANCEL, timeout=grace + 60, run_id=run.run_id,
                                                           grace=grace)
        return [{**answer, "task": t.name} for t in run.members]

    def stop_each(self, run, grace: float, only: list | None, done: bool) -> list[str]:
        """The servers' end after the chief's is the chief's wrapper's (``done``); else this attempt's tasks end
        (SIGTERM to the job's step, SIGKILL after ``grace``) and the job's script starts the next
        (``_await_next_attempt``). Each task's attempt is noted first."""
        if done:
            return []
        link = run.links[self.login.name]
        self._attempts = {t.name: t.attempt for t in run.members}  # the attempt followed (its launched record)
        try:
            statuses = [link.connect().call(STATUS, run_id=run.run_id, task=t.name) for t in run.members]
            # Only the attempt followed: one the job's script has already replaced (a failed step ends by itself,
            # srun --kill-on-bad-exit) is not to be ended too.
            if any(s["phase"] == RUNNING and s.get("attempt") == t.attempt for t, s in zip(run.members, statuses)):
                link.connect().call(CANCEL, timeout=grace + 60, run_id=run.run_id, grace=grace, step_only=True)
        except TfccError as exc:
            log.warning("could not end the attempt of Slurm run %s: %s", run.run_id, exc)
            return [link.host.name]
        return []

    def given_up(self, run) -> None:
        """Its job goes (its script would start the tasks again, with nobody following), on a thread of its
        own."""
        threading.Thread(target=self._cancel, args=(run,), name=f"tfcc-cancel-{run.run_id}", daemon=True).start()

    def _cancel(self, run) -> None:
        if self.job.get("job_id"):
            try:
                run.links[self.login.name].connect().call(CANCEL, timeout=90, run_id=run.run_id, grace=10)
            except TfccError as exc:
                log.warning("could not cancel the Slurm job of run %s: %s", run.run_id, exc)

    # ------------------------------------------------------------ what its nodes sample

    def sample_name(self, host: str, message: dict) -> str:
        """The login host's agent streams each node's samples, each named by its node."""
        node = message.get("node")
        return node if isinstance(node, str) and node else host

    def keeps_samples_of(self, run, name: str) -> bool:
        """The first ``slurm.nodes`` node names its login host's agent sends: a host cannot grow the console's
        hosts."""
        with self._lock:
            if name in self._nodes or len(self._nodes) < max(1, self.slurm.nodes):
                self._nodes.add(name)
                return True
        return False

    def tasks_sampled_on(self, run, name: str) -> set[str]:
        """Any of the run's tasks: Slurm places them."""
        return {t.name for t in run.tasks}

    def restarted(self) -> None:
        with self._lock:
            self._nodes.clear()  # a job's nodes are this start's: a restart may get others

    # ------------------------------------------------------------ words

    def started_words(self, run, verb: str) -> str:
        return (f"run {run.run_id} {verb}: {len(run.tasks)} tasks, Slurm job {self.job.get('job_id')} from "
                f"{self.slurm.login}")

    def export_defaults(self) -> dict:
        return {"time_limit": self.slurm.time, "cpus_per_task": self.slurm.cpus_per_task}

    def batch_options(self) -> list[str]:
        return self.slurm.placement()

    def extra_logs(self, run) -> list[tuple[str, str]]:
        """The job's own output: srun's errors, its attempts."""
        job = self.job_state(run)
        return [(f"{text.job_words(job)}: slurm-{job.get('job_id')}.out", job.get("output") or "")]
