"""What the cluster diagram shows, worked out from the settings or a run's own numbers (Qt-free).

Hosts hold tasks; one task is the chief (the ``chief`` task, else worker 0);
each worker has replicas (its GPUs, or one CPU device); the global batch splits
into per-worker and per-replica slices. Before a run this follows the
settings; once a run's ``started`` event arrives it shows what the run reports.
A user's own script sets its batch itself: its split is unknown until the run
reports it (the capture's ``started`` event, read from ``fit``), never guessed
from settings the script does not read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agent.protocol import format_address, parse_address, parse_task_name
from console import cluster as cl
from console.run.placement import placement_for
from trainer.plan import GlobalSplit, replicas_per_worker, strategy_for
from trainer.strategies import Strategy
from trainer.tf_config import PS, TRAINING_ROLES, WORKER, chief_name


@dataclass
class TaskBox:
    name: str
    role: str
    host: str
    address: str
    is_chief: bool
    devices: list[str]
    tf_config: str | None   # None while its port is "auto" and no run has picked one
    variables: list[dict] = field(default_factory=list)  # a ps: the variables a run placed on it (its started event)
    left: bool = False      # an elastic run goes on without it (no replica, no TF_CONFIG now)


@dataclass
class HostBox:
    name: str
    address: str
    tasks: list[TaskBox] = field(default_factory=list)


@dataclass
class BatchSplit:
    num_workers: int
    replicas_per_worker: int
    per_replica: int
    global_batch: int
    strategy: str
    from_run: bool          # True: the numbers come from the run's "started" event
    problem: str = ""       # e.g. a global batch that does not split evenly
    unknown: str = ""       # the batch is a script's own and not reported (yet): why; the numbers are 0 then
    script: bool = False    # a user's script runs (its numbers are its own, never the settings')

    @property
    def known(self) -> bool:
        return not self.unknown

    @property
    def asynchronous(self) -> bool:
        return self.strategy == Strategy.PARAMETER_SERVER

    @property
    def source(self) -> str:
        """Where the numbers come from, in a sentence."""
        if self.from_run:
            return ("From the run: the script's own numbers, read from its fit." if self.script
                    else "From the run: the numbers it reported.")
        if self.unknown:
            return ("The script sets its own batch and strategy; tfcc shows them when the script reports them "
                    "(its Keras fit does, captured)." if self.script else "The run reported no batch plan.")
        return "Numbers from the settings (a run's own numbers replace them once it starts)."

    @property
    def label(self) -> str:
        if self.unknown:
            return f"batch: unknown {self.unknown}"
        if self.asynchronous:
            return (f"each step: one worker's batch of {self.global_batch} = {self.replicas_per_worker} "
                    f"replica{'s' if self.replicas_per_worker != 1 else ''} × {self.per_replica}; "
                    f"{self.num_workers} worker{'s' if self.num_workers != 1 else ''} take steps independently")
        return (f"global {self.global_batch} = {self.num_workers} worker{'s' if self.num_workers != 1 else ''} "
                f"× {self.replicas_per_worker} replica{'s' if self.replicas_per_worker != 1 else ''} "
                f"× {self.per_replica}")

    @property
    def per_worker(self) -> int:
        return self.per_replica * self.replicas_per_worker


def picture(cluster: cl.Cluster, gpus_by_host: dict[str, int] | None = None, started: dict | None = None,
            addresses: dict[str, str] | None = None, left=frozenset()) -> tuple[list[HostBox], BatchSplit]:
    """The diagram's content. ``gpus_by_host`` comes from a check; ``started`` is a run's
    "started" event; ``addresses`` maps task names to the host:port a run gave them; ``left``: the tasks an
    elastic run goes on without (the batch splits over the others, the first of which may be the chief now).
    A Slurm cluster's tasks stand on the nodes its placement plans until a run's addresses say which nodes Slurm
    chose."""
    gpus_by_host = gpus_by_host or {}
    addresses = addresses or {}
    names = cluster.task_names()
    t = cluster.training
    pss = cluster.parameter_server
    # The replicas' holders: under parameter-server training the workers (the chief coordinates).
    workers = [n for n in names if parse_task_name(n)[0] in ((WORKER,) if pss else TRAINING_ROLES) and n not in left]
    # An elastic run that went on without the chief's task: the first worker left leads (TF_CONFIG's worker 0).
    chief = chief_name(names)
    if chief in left:
        chief = next((n for n in names if parse_task_name(n)[0] == WORKER and n not in left), None)
    members = {i for i, n in enumerate(names) if n not in left}
    ports = []
    for name, task in zip(names, cluster.tasks):
        ports.append(parse_address(addresses[name])[1] if name in addresses else task.port)
    resolved = "auto" not in ports
    placement = placement_for(cluster)  # where each task is planned: a host of the cluster's, or a node to come
    planned = {i: machine for machine, indexes in placement.machines().items() for i in indexes}
    boxes = {h.name: HostBox(h.name, h.address or "localhost") for h in cluster.hosts}
    device_counts = []
    for i, (name, task) in enumerate(zip(names, cluster.tasks)):
        gpus = len(task.gpus) if task.gpus else gpus_by_host.get(task.host, 0)
        strategy = Strategy.PARAMETER_SERVER if pss else strategy_for(t.strategy, len(workers), gpus)
        if started is not None:
            count = _count(started.get("replicas_per_worker")) or 1
        else:
            count = replicas_per_worker(strategy, gpus, 1)
        if pss and task.role != WORKER or not task.in_cluster or name in left:
            devices = []  # the coordinator, the ps, an evaluator and a task that left hold no replica of training
        elif gpus and strategy in (Strategy.MIRRORED, Strategy.MULTI_WORKER_MIRRORED, Strategy.PARAMETER_SERVER):
            ids = task.gpus or list(range(gpus))
            devices = [f"GPU {g}" for g in ids[:count]]
        else:
            devices = ["CPU"] if count == 1 else [f"CPU {d}" for d in range(count)]
        if name in workers:
            device_counts.append(len(devices))
        host_name = planned.get(i, task.host)
        if placement.picks_machines:  # the node the place chose for it (its TF_CONFIG says), else the one planned
            if name in addresses:
                host_name = parse_address(addresses[name])[0]
            boxes.setdefault(host_name, HostBox(host_name, host_name))
            address = addresses.get(name) or format_address(host_name, ports[i])
        else:
            host = cluster.host(task.host)
            address = format_address(host.tf_host, ports[i]) if task.in_cluster else ""  # an evaluator serves nothing
        held = []
        if started is not None and task.role == PS:
            index = parse_task_name(name)[1]
            held = [v for v in started.get("variables") or [] if v.get(PS) == index]
        # (a place that picks the machines makes each task's TF_CONFIG where it starts it)
        config = cluster.tf_config(i, ports, members) if resolved and name not in left and \
            not placement.picks_machines else None
        boxes[host_name].tasks.append(TaskBox(name, task.role, host_name, address, name == chief, devices,
                                              config, held, name in left))
    per_worker = max(device_counts) if device_counts else 1
    reported = _batch_plan(started)
    if reported is not None:
        num_workers, replicas, per_replica, global_batch = reported
        split = BatchSplit(num_workers or len(workers), replicas or per_worker, per_replica, global_batch,
                           started.get("strategy") or "", True, script=t.user_code)
    elif started is not None or t.user_code:
        # A script's batch is its own; a started event without a batch plan (a loop's, an old run's) gives none.
        why = ("(the run reported no batch plan)" if started is not None
               else "until the script reports (its own numbers, read from fit)" if t.capture
               else "(the script's own; capture is off)")
        strategy = (started or {}).get("strategy") or (Strategy.PARAMETER_SERVER if pss else "")
        split = BatchSplit(len(workers), per_worker, 0, 0, strategy, False, unknown=why, script=t.user_code)
    else:
        replicas = per_worker if pss else per_worker * len(workers)  # the replicas of one step
        problem = ""
        if t.global_batch:
            shares = GlobalSplit(t.global_batch, max(1, replicas))
            per_replica = shares.per_replica
            if not shares.even:
                problem = (f"global batch {t.global_batch} does not split evenly over {replicas} replicas; "
                           f"use a multiple of {replicas}")
        else:
            per_replica = t.per_replica_batch
        split = BatchSplit(len(workers), per_worker, per_replica, per_replica * replicas,
                           Strategy.PARAMETER_SERVER if pss else strategy_for(t.strategy, len(workers), 0), False,
                           problem)
    idle = [b for b in boxes.values() if not b.tasks]  # a spare host of the cluster's
    return [b for b in boxes.values() if b.tasks] + idle, split


def _count(value) -> int | None:
    """A positive whole number of a record (an int, or a float that is one), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        return None
    return int(value) if value == int(value) else None


def _batch_plan(started: dict | None) -> tuple[int | None, int | None, int, int] | None:
    """A started event's batch plan: workers and replicas per worker (None when it does not say),
    per-replica and global batch; None without those two (a loop script's event, an old record)."""
    if started is None:
        return None
    per_replica, global_batch = _count(started.get("per_replica_batch")), _count(started.get("global_batch"))
    if per_replica is None or global_batch is None:
        return None
    return _count(started.get("num_workers")), _count(started.get("replicas_per_worker")), per_replica, global_batch
