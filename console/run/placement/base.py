"""Where a run's tasks run: the one interface every place implements (Qt-free).

Like ray's ``NodeProvider``, a place is chosen once from the cluster (``console.run.placement.placement_for``)
and nothing downstream asks which one it is: ``Run`` follows, samples, waits, detaches and reads status; the
placement starts the tasks (ports and TF_CONFIGs on hosts of one's own, a job on Slurm), stops them, ends an
attempt, cancels what is left of a run given up, says where each task runs, and what to check before a start.

The methods that act on a run take it (``console.run.runner.Run``): its tasks, links, members and manifest
are the run's; what only this place knows (a Slurm job's state) is the placement's.
"""

from __future__ import annotations

from console import cluster as cl


class Placement:
    """One place where tasks run. The base says what every place answers; each place fills it in."""

    name = "hosts"  #: what a person calls the place (a check's problem names it)
    #: Whether one task can be started again alone, the others going on (a parameter-server worker): a Slurm
    #: job's step ends every task with one, so there a restart is always the group's.
    relaunches_one = True
    #: Whether tfcc picks the tasks' ports (``port = "auto"``); a Slurm job's are its job id's.
    picks_ports = True
    #: Whether the place picks each task's machine when it starts (Slurm): its launch says where it runs.
    picks_machines = False

    def __init__(self, cluster: cl.Cluster):
        self.cluster = cluster

    # ------------------------------------------------------------ before a run

    def hosts(self) -> list[cl.Host]:
        """The hosts the console reaches for a run of the cluster (one link each)."""
        raise NotImplementedError

    def task_hosts(self) -> list[str]:
        """For each task of the cluster (in order), the name of the host it is followed through."""
        raise NotImplementedError

    def environment_hosts(self) -> list[cl.Host]:
        """The hosts tfcc makes the run's Python environment on (tfcc provision): where its tasks run, and the
        spares they may move to."""
        mine = {h.name for h in self.hosts()}
        return [h for h in self.cluster.hosts if h.spare or h.name in mine]

    def machines(self) -> dict[str, list[int]]:
        """Where the cluster's tasks are planned to run: each machine's name and its tasks' indexes, in order (a
        place that picks the machines names those it will pick, as many as it asks for)."""
        raise NotImplementedError

    def preflight(self, ask_host_key=None, timeout: float = 60.0) -> None:
        """Ask the place whether it would take the run; a TfccError (one line that says what to do) if not.
        Nothing is started."""

    def same_place(self, ran: cl.Cluster, addresses: set) -> bool:
        """Whether a run of ``ran`` ran here (``addresses``: this cluster's hosts as (name, address, local))."""
        raise NotImplementedError

    # ------------------------------------------------------------ a run's life

    def start(self, run, resume: bool, explicit: bool, previous: list[str] | None) -> None:
        """Start the run's members (its code and bundle are on every host already); ``previous``: a resume's
        TF_CONFIGs as the manifest has them."""
        raise NotImplementedError

    def relaunch(self, run, tasks: list) -> None:
        """Start ``tasks`` alone again with the TF_CONFIG they had (only where ``relaunches_one``)."""
        raise NotImplementedError

    def stop(self, run, grace: float) -> list[dict]:
        """Stop every member (a person's stop); their answers in order, or the first error."""
        raise NotImplementedError

    def stop_each(self, run, grace: float, only: list | None, done: bool) -> list[str]:
        """End the current attempt's tasks (``only`` these), whatever fails; the hosts that did not answer.
        ``done``: it is their normal end (a parameter-server run's servers after its chief finished)."""
        raise NotImplementedError

    def given_up(self, run) -> None:
        """The run was given up: take away what would start its tasks again behind the console's back."""

    def watch(self, run, on_change) -> None:
        """Tell ``on_change(state)`` of the place's own state of the run while it changes (a Slurm job's)."""

    def machine_of(self, task) -> str:
        """The machine ``task`` (a TaskState) runs on now: its host here; a node where the place picks them."""
        return task.host

    def launched(self, task, record: dict) -> None:
        """A task's launch record: where it runs now, when the place chose it (its address, its attempt)."""

    # ------------------------------------------------------------ what its hosts sample

    def sample_name(self, host: str, message: dict) -> str:
        """The name a system sample from ``host``'s agent is kept under."""
        return host

    def keeps_samples_of(self, run, name: str) -> bool:
        """Whether samples named ``name`` are kept (a host cannot grow the console's hosts)."""
        return name in run.links

    def tasks_sampled_on(self, run, name: str) -> set[str]:
        """The tasks whose load a sample named ``name`` may carry."""
        return {t.name for t in run.tasks if t.host == name}

    def restarted(self) -> None:
        """A new start of the run: what the place noted of the last one is forgotten."""

    # ------------------------------------------------------------ words

    def started_words(self, run, verb: str) -> str:
        """What ``tfcc run`` says once the run started (``verb``: started or resumed)."""
        return f"run {run.run_id} {verb}: {len(run.tasks)} tasks on {len(run.links)} host(s)"

    def export_defaults(self) -> dict:
        """What an export of the cluster takes from the place unless told otherwise (console.export.Options'
        fields): a Slurm cluster file's time limit and CPUs per task."""
        return {}

    def batch_options(self) -> list[str]:
        """The batch options the place chose (a Slurm cluster file's partition, account, QOS), for an export."""
        return []

    def extra_logs(self, run) -> list[tuple[str, str]]:
        """The place's own logs of the run beside the tasks' (heading, text): a Slurm job's output."""
        return []
