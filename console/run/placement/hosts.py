"""Hosts of one's own: tfcc picks the ports, writes each task's TF_CONFIG and starts it there (Qt-free).

A new run picks free ports on each host for the ``auto`` ones; a resume keeps the run's TF_CONFIGs while their
ports are free and its members are the same (else every task gets a new one: it must be one cluster for all),
and first copies the backup they resume from to each training task that lacks it (console/run/seeding.py).
"""

from __future__ import annotations

import logging

from agent.protocol import CHECK_PORTS, FINISHED, FIREWALL, NO_ENVIRONMENT, NOT_STARTED, PORTS, RUNNING, RUNS_DIR, \
    START, STOP, parse_address, parse_task_name
from console import cluster as cl
from console import environments, exposure, text
from console.errors import RunError, TfccError
from console.remote.channel import AgentRequestError, AgentTimeout
from console.run.launch import at_once, firewall_request, keras_choice, secret_values, task_address, task_command
from console.run.placement.base import Placement
from console.run.seeding import copy_backup, plan_seeding
from console.store.manifests import console_id
from trainer.tf_config import TRAINING_ROLES

log = logging.getLogger("console.run.placement")


def exposure_words(cluster: cl.Cluster) -> str | None:
    """The run's tasks on a public address, the risk and the fix, in one line; None for none (resolving the
    hosts' names here: a thread that may wait on the network calls it)."""
    problem = exposure.exposure_problem(cluster, exposure.public_tasks(cluster))
    return f"{problem[0]}; {problem[1]}" if problem else None


class OwnHosts(Placement):
    """The cluster file's ``[[hosts]]``: each task runs where its ``[[tasks]]`` entry says."""

    def hosts(self) -> list[cl.Host]:
        return [h for h in self.cluster.hosts if any(t.host == h.name for t in self.cluster.tasks)]

    def task_hosts(self) -> list[str]:
        return [t.host for t in self.cluster.tasks]

    def machines(self) -> dict[str, list[int]]:
        return {h.name: [i for i, t in enumerate(self.cluster.tasks) if t.host == h.name] for h in self.hosts()}

    def same_place(self, ran: cl.Cluster, addresses: set) -> bool:
        return ran.slurm is None and {(h.name, h.address, h.local) for h in ran.hosts} <= addresses

    # ------------------------------------------------------------ start

    def start(self, run, resume: bool, explicit: bool, previous: list[str] | None) -> None:
        if resume:
            self._seed_backups(run, self._check_stopped(run, explicit))
            run.joining.clear()
            # Tasks moved to a spare host: new addresses, so a new TF_CONFIG for every task.
            moved, run.moved = bool(run.moved), set()
            configs = self.new_configs(run) if moved else self._with_free_ports(run, self.member_configs(run,
                                                                                                         previous))
        else:
            configs = self.new_configs(run)
        run.tf_configs = configs
        run.exposed = exposure_words(run.cluster)
        started: list = []
        try:
            self._start_tasks(run, configs, resume, started, refresh=resume and explicit)
        except Exception as exc:
            if not started:
                raise
            # Half a cluster would wait for the rest for an hour, holding its ports and GPUs.
            stopped = not self.stop_each(run, 2, started, False)
            if not isinstance(exc, TfccError):
                raise
            raise RunError(f"{exc.cause} (starting run {run.run_id}, after {', '.join(t.name for t in started)} "
                           f"had started: {'stopped again' if stopped else 'STILL RUNNING: tfcc stop ' + run.run_id})",
                           (exc.fix + "; then " if exc.fix else "") + f"start it again with tfcc resume {run.run_id}"
                           ) from None

    def relaunch(self, run, tasks: list) -> None:
        self._start_tasks(run, run.tf_configs, True, [], only=tasks)

    def _start_tasks(self, run, configs: list[str], resume: bool, started: list, only: list | None = None,
                     refresh: bool = False) -> None:
        """Start the tasks (``only`` these). ``refresh``: a person resumes a script's run: each task's copy of
        the script's files is brought up to date with the workdir as it is now, and ``code_refreshed`` says so
        (a resume that ran each task's old copy would repeat the failure it was fixed for)."""
        training = run.cluster.training
        workdir = run.collected_workdir() if training.user_code else None
        refresh = refresh and workdir is not None
        refreshed: dict[str, dict] = {}
        keras = keras_choice(run.cluster, workdir)  # once for every task: their code's files are read here
        shipped = {"workdir": workdir.entries()} if workdir is not None else {}
        console = console_id()
        if training.secret_env:  # read at each start: in memory only, to the tasks' environment over the channel
            shipped["secret_env"] = secret_values(run.cluster)
        environment = environments.spec_of(run.cluster)  # the tasks run in it, where a host has it made

        def start(i: int, task, spec: cl.Task) -> None:
            link = run.links[task.host]
            task.address = task_address(task.name, configs[i])
            argv, env = task_command(run.cluster, spec, link.host.interpreter, link.dist,
                                     workdir.script if workdir is not None else None, keras)
            wall = firewall_request(run.cluster, task.address, configs[i])
            # A host's own python, set, overrides tfcc's default environment (not an [environment] of the file's).
            python_env = environment.python_env() if environment.required or not link.host.python else None
            try:
                reply = link.connect().call(START, run_id=run.run_id, task=task.name, tf_config=configs[i],
                                            console=console, argv=argv, env=env, python_path=[link.dist],
                                            fresh=not resume, **shipped, **({"firewall": wall} if wall else {}),
                                            **({"python_env": python_env} if python_env else {}),
                                            **({"refresh_work": True} if refresh else {}))
            except AgentRequestError as exc:
                if exc.code in (FIREWALL, NO_ENVIRONMENT):
                    raise RunError(f"host {task.host}: {exc}") from None
                raise
            task.attempt = reply.get("attempt", 1)
            if isinstance(reply.get("work_refreshed"), dict):
                refreshed[task.name] = reply["work_refreshed"]
            started.append(task)

        run.code_refreshed = None
        at_once([(i, task, spec) for i, (task, spec) in enumerate(zip(run.tasks, run.cluster.tasks))
                 if (task in only if only is not None else task.name not in run.left)], start)
        if refresh:
            run.code_refreshed = text.refreshed_words(workdir.root, refreshed)

    # ------------------------------------------------------------ TF_CONFIGs and ports

    def new_configs(self, run) -> list[str]:
        """Each task's TF_CONFIG with free ports on their hosts for the ``auto`` ones; kept in the manifest."""
        ports: list = [t.port for t in run.cluster.tasks]

        def pick(name: str, link) -> None:
            auto = [i for i, t in enumerate(run.cluster.tasks) if t.host == name and t.port == "auto"]
            if auto:
                free = link.connect().call(PORTS, count=len(auto))["ports"]
                for i, port in zip(auto, free):
                    ports[i] = port

        at_once(run.links_of(run.members), pick)
        return self._configs_for(run, ports)

    def _configs_for(self, run, ports: list) -> list[str]:
        """Each member's TF_CONFIG with ``ports`` (a left task keeps its last one: none is given to it); kept in
        the manifest."""
        members = run.member_indexes()
        configs = [run.cluster.tf_config(i, ports, members) if i in members
                   else (run.tf_configs[i] if run.tf_configs else run.cluster.tf_config(i, ports))
                   for i in range(len(run.tasks))]
        run.write_manifest(configs)
        return configs

    def member_configs(self, run, configs: list[str]) -> list[str]:
        """A resume's TF_CONFIGs: the run's own while its members are the same; after a change of its size, one
        for each member of the run now, on the ports each task had."""
        members = run.member_indexes()
        ports = [parse_address(a)[1] if a else None for a in (task_address(t.name, c)
                                                              for t, c in zip(run.tasks, configs))]
        if all(run.cluster.tf_config(i, ports, members) == configs[i] for i in members):
            return configs
        return self._configs_for(run, ports)

    def _with_free_ports(self, run, configs: list[str]) -> list[str]:
        """A resume keeps the run's TF_CONFIG while its ports are free; when another process took one
        meanwhile, every task gets a new TF_CONFIG (it must be the same cluster for all) with new ports
        for the ``auto`` ones. A fixed port that is taken cannot change: the error names its holder."""
        addresses = [task_address(t.name, c) for t, c in zip(run.tasks, configs)]
        ports = [parse_address(a)[1] if a else None for a in addresses]  # an evaluator has none
        taken: dict[int, dict] = {}
        members = run.member_indexes()

        def check(name: str, link) -> None:
            mine = [i for i, t in enumerate(run.tasks) if t.host == name and ports[i] is not None and i in members]
            answers = link.connect().call(CHECK_PORTS, ports=[ports[i] for i in mine])["ports"]
            taken.update((i, a) for i, a in zip(mine, answers) if not a["free"])

        at_once(run.links_of(run.members), check)
        if not taken:
            return configs
        words = "; ".join(f"{run.tasks[i].name} on {run.tasks[i].host}: {text.port_in_use_text(a)}"
                          for i, a in sorted(taken.items()))
        fixed = [i for i in taken if run.cluster.tasks[i].port != "auto"]
        if fixed:
            raise RunError(f"cannot resume run {run.run_id}: {words}",
                           "stop that process, or set the task's port to \"auto\" in the cluster file")
        configs = self.new_configs(run)
        run.ports_changed = f"{words}: every task got a new TF_CONFIG with new ports"
        log.warning("run %s: %s", run.run_id, run.ports_changed)
        return configs

    # ------------------------------------------------------------ a resume's checks and seeding

    def _seed_backups(self, run, statuses: dict[str, dict | None]) -> None:
        """Before every training task starts again: copy the backup they resume from to each that lacks it
        (console/run/seeding.py), and to each task that rejoins the run the newest of the others; said in
        ``run.seeded`` (the session says it)."""
        run.seeded = None
        if run.cluster.training.user_code or run.cluster.parameter_server:
            return  # a script keeps its own backups; the coordinator alone backs up
        seeding = plan_seeding(statuses, run.joining)
        if seeding is None:
            return
        hosts = {t.name: t.host for t in run.tasks}
        folders = {name: f"{run.links[hosts[name]].home}/{RUNS_DIR}/{run.run_id}/{name}" for name in hosts}
        copy_backup(seeding, statuses, folders, lambda name: run.links[hosts[name]].transport.files())
        run.seeded = seeding

    def _check_stopped(self, run, explicit: bool) -> dict[str, dict | None]:
        """A resume's checks, before anything starts: no task runs, not every one finished, no task's folder
        vanished while others hold backups unless the console can copy one to it (tfcc's trainer under
        MultiWorkerMirrored: console/run/seeding.py), some folder is there, and (a person's resume of tfcc's
        trainer, ``explicit``) some task has a backup to resume from. Each task's status."""
        statuses = run.statuses()
        phases = {name: NOT_STARTED if s is None else s["phase"] for name, s in statuses.items()}
        if all(phase == FINISHED for phase in phases.values()):
            raise RunError(f"run {run.run_id} finished: every task ended well", "start a new run to train again")
        running = [task for task, phase in phases.items() if phase == RUNNING]
        if running:
            raise RunError(f"{', '.join(running)} of run {run.run_id} still running",
                           f"follow it with tfcc attach {run.run_id}, or stop it with tfcc stop {run.run_id} "
                           "before resuming")
        # A task moved to a spare host has no folder there yet: it starts afresh (a worker of tfcc's trainer gets
        # a copy of the newest backup first).
        missing = [t for t in run.members if statuses[t.name] is None and t.name not in run.moved]
        backed_up = [name for name, s in statuses.items() if s is not None and s.get("backups")]
        training = {t.name for t in run.tasks if parse_task_name(t.name)[0] in TRAINING_ROLES}
        seedable = not run.cluster.training.user_code and not run.cluster.parameter_server and \
            all(t.name in training for t in missing)
        if missing and (len(missing) == len(run.members) or (backed_up and not seedable)):
            where = ", ".join(f"{t.name} on {t.host}" for t in missing)
            raise RunError(f"run {run.run_id} has no run folder any more for {where}: "
                           + ("a resume would start it from nothing, and the other tasks would drop their backups"
                              if backed_up else "there is nothing to resume from"),
                           "start a new run (tfcc run)" + (f"; the backups stay in the folders of "
                                                           f"{', '.join(backed_up)}" if backed_up else ""))
        if explicit and not backed_up and not missing and not run.cluster.training.user_code:
            raise RunError(f"no task of run {run.run_id} has a backup yet (it trained less than its "
                           f"backup_seconds, {run.cluster.training.backup_seconds:g} s): there is nothing to resume "
                           "from", "start a new run (tfcc run)")
        return statuses

    # ------------------------------------------------------------ stop

    def _send_stop(self, run, tasks: list, grace: float, done: bool = False) -> list:
        """The one stop: ``tasks``, all hosts at once (SIGTERM, then SIGKILL after ``grace``), whatever fails;
        each one's answer, or the error that kept it from answering. ``done``: the stop is their normal end
        (they end ``finished``)."""
        def stop(task) -> dict | TfccError:
            try:
                return run.links[task.host].connect().call(STOP, timeout=grace + 30, run_id=run.run_id,
                                                           task=task.name, grace=grace, done=done)
            except TfccError as exc:
                log.warning("could not stop %s of run %s: %s", task.name, run.run_id, exc)
                if isinstance(exc, AgentTimeout):  # a host gone silent: the next call connects anew (or fails fast)
                    run.links[task.host].drop()
                return exc

        return at_once([(t,) for t in tasks], stop)

    def stop(self, run, grace: float) -> list[dict]:
        answers = self._send_stop(run, run.members, grace)
        for answer in answers:
            if isinstance(answer, TfccError):
                raise answer
        return answers

    def stop_each(self, run, grace: float, only: list | None, done: bool) -> list[str]:
        tasks = run.members if only is None else only
        return [task.host for task, answer in zip(tasks, self._send_stop(run, tasks, grace, done))
                if isinstance(answer, TfccError)]
