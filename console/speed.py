"""Why a run is slow: each worker's step split into input, compute, communication, waiting for slower peers and the
rest, a verdict with its fix, and the run's scaling efficiency (Qt-free; docs/why-slow.md).

The workers measure themselves (trainer/breakdown.py) at one step they all reach together and write a
``breakdown`` record each. ``explain`` puts those records together; ``Asks`` keeps the asks a session has out,
until every training task has answered or ``ANSWER_SECONDS`` have passed. The words of every finding are here.
"""

from __future__ import annotations

import math
import statistics
import time
import uuid
from dataclasses import dataclass, field

from trainer.records import number

ANSWER_SECONDS = 60.0  # an ask is answered within this, or said unanswered with what came
ANSWER_WORDS = "in about 5 to 15 s"  # what it takes, as the window and the CLI say it (bench/why_slow.py: 4-7 s)
VERDICT_RECORD = "why_slow"  # a verdict's "type" in ``tfcc … --json`` streams

# A verdict's kinds, the worst first.
INPUT_BOUND = "input-bound"
STRAGGLER = "straggler"
COMMUNICATION_BOUND = "communication-bound"
HEALTHY = "healthy"
UNMEASURED = "unmeasured"
NOTE = "note"  # what the system lane adds (memory, GPUs): a line beside the verdict, not the verdict
KINDS = (INPUT_BOUND, STRAGGLER, COMMUNICATION_BOUND, HEALTHY, UNMEASURED, NOTE)
KIND_WORDS = {INPUT_BOUND: "input-bound", STRAGGLER: "a straggler", COMMUNICATION_BOUND: "communication-bound",
              HEALTHY: "healthy", UNMEASURED: "not measured", NOTE: "a note"}

# The parts of a step, in the order a bar draws them.
PARTS = ("input", "compute", "communication", "peers", "other")
PART_WORDS = {"input": "waiting for input", "compute": "compute", "communication": "all-reduce",
              "peers": "waiting for slower peers", "other": "update and framework"}
WAITING = ("input", "communication", "peers")  # the parts a worker spends waiting (the window's history)

INPUT_SHARE = 0.25        # a worker that waits on its input this much of a step is input-bound
PEERS_SHARE = 0.25        # peers that wait for one worker this much of a step make it a straggler ...
STRAGGLER_RATIO = 1.8     # ... when its compute is this many times the others'
COMMUNICATION_SHARE = 0.35  # the all-reduce takes this much of each step, more than any other part: communication-bound
THROTTLED = 0.05          # a cgroup that throttled this share of its periods held the task back
OTHER_PROCESS = 0.3       # another process that used this much of a core on a straggler's host is named
SATURATED = 0.9           # a host this busy has no CPU to spare
OTHER_LOAD = 0.5          # cores busy on a worker's host beyond the run's workers there: other work held it
SHORT_OF_MEMORY = 0.05    # a host with less of its memory available than this pages
SWAPPED = 256 * 2**20     # a host that has swapped this much pages
GPU_IDLE = 40.0           # a GPU less busy than this (%) while compute is most of the step waits on its host


@dataclass
class WorkerBreakdown:
    """Where one worker's step went, in seconds (``PARTS``), with what its pipeline gives alone."""

    task: str
    step: float
    input: float = 0.0
    compute: float = 0.0
    communication: float = 0.0
    peers: float = 0.0
    other: float = 0.0
    pipeline_rate: float | None = None  # batches a second its input pipeline gives alone
    alone_rate: float | None = None     # examples a second it would train at alone
    record: dict = field(default_factory=dict, repr=False)

    def share(self, part: str) -> float:
        return getattr(self, part) / self.step if self.step > 0 else 0.0

    def as_dict(self) -> dict:
        return {"task": self.task, "step": self.step, **{p: getattr(self, p) for p in PARTS},
                "pipeline_rate": self.pipeline_rate, "alone_rate": self.alone_rate}


@dataclass
class Finding:
    kind: str
    words: str
    task: str | None = None


@dataclass
class Verdict:
    """What an ask found: each worker's breakdown, the findings (one line each), the scaling efficiency."""

    ask: str
    workers: list[WorkerBreakdown]
    findings: list[Finding]
    kind: str
    global_rate: float | None = None   # examples a second the run trains at
    speedup: float | None = None       # against one worker alone
    efficiency: float | None = None    # global rate / the sum of each worker's alone
    missing: list[str] = field(default_factory=list)  # training tasks that did not answer
    took: float | None = None          # seconds from the ask to the verdict
    at_step: int | None = None

    def lines(self) -> list[str]:
        """The verdict in words: one line a finding, then the scaling efficiency."""
        out = [f.words for f in self.findings]
        scaling = self.scaling_words()
        if scaling:
            out.append(scaling)
        return out

    def table(self) -> list[str]:
        """One line a worker: its step time and each part's share of it."""
        width = max((len(w.task) for w in self.workers), default=0)
        return [f"{w.task:<{width}}  step {_ms(w.step)}: " + ", ".join(
                    f"{PART_WORDS[p]} {w.share(p):.0%}" for p in PARTS) for w in self.workers]

    def scaling_words(self) -> str:
        if self.speedup is None or self.efficiency is None or len(self.workers) < 2:
            return ""  # one worker alone scales against nothing
        return scaling_text(self.speedup, len(self.workers), self.efficiency)

    def as_dict(self) -> dict:
        return {"ask": self.ask, "kind": self.kind, "findings": [f.words for f in self.findings],
                "workers": [w.as_dict() for w in self.workers], "global_rate": self.global_rate,
                "speedup": self.speedup, "efficiency": self.efficiency, "missing": list(self.missing),
                "took": self.took, "at_step": self.at_step, "time": time.time()}


def scaling_text(speedup: float, workers: int, efficiency: float) -> str:
    """``scaling: 1.87× on 2 workers, 93 % of linear``: the seeds' way of saying it."""
    return f"scaling: {speedup:.2f}× on {workers} worker{'s' if workers != 1 else ''}, {efficiency:.0%} of linear"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.0095 else f"{seconds * 1000:.1f} ms"


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _value(record: dict, key: str) -> float | None:
    value = number(record.get(key))
    return value if math.isfinite(value) and value >= 0 else None


# --------------------------------------------------------------------------- the breakdown


def breakdowns(records: dict[str, dict]) -> list[WorkerBreakdown]:
    """Each measured worker's step split into ``PARTS`` (they add up to its real step time).

    The input pipeline runs beside the compute and the all-reduce (``prefetch``): a worker waits on it only for
    what it takes beyond them. A worker that is ready before its slowest peer waits for it in the all-reduce.
    """
    rows = []
    for task, record in records.items():
        step = _value(record, "step_time")
        if not step:
            continue
        compute = min(_value(record, "compute_time") or 0.0, step)
        reduce = _value(record, "all_reduce_time") or 0.0
        pipeline = _value(record, "input_time")
        waited = max(0.0, min(pipeline, step) - compute - reduce) if pipeline is not None else 0.0
        row = WorkerBreakdown(task, step, input=waited, compute=compute, record=record)
        row.pipeline_rate = 1.0 / pipeline if pipeline else None
        rows.append(row)
    if not rows:
        return rows
    most_input = max(r.input for r in rows)
    most_compute = max(r.compute for r in rows)
    for row in rows:
        left = row.step - row.input - row.compute
        row.communication = min(_value(row.record, "all_reduce_time") or 0.0, left)
        left -= row.communication
        # Waiting for a peer that waits on its input: as long as that peer waits beyond this one.
        peers = most_input - row.input
        # Waiting for a peer that computes r times slower: its own work (compute, update, framework: the step but
        # the all-reduce and the input waited for) is taken as r times this one's, so this one idles 1 - 1/r of it.
        if row.compute > 0 and most_compute > row.compute:
            peers += max(0.0, row.step - row.communication - most_input) * (1.0 - row.compute / most_compute)
        row.peers = min(peers, left)
        row.other = max(0.0, left - row.peers)
    return rows


def _scaling(rows: list[WorkerBreakdown]) -> tuple[float | None, float | None, float | None]:
    """(global examples a second, speedup against one worker, efficiency): each worker alone would train its share
    of the global batch in its compute (no all-reduce, no peers), or at its pipeline's pace for that share if that
    is slower. The update and the framework's own work are left out: alone they are smaller than in a cluster, by
    how much the probes cannot tell, so the figure is a floor (bench/why_slow.py scaling: within a few points of
    the throughput measured for a small CNN; lower than measured for a model whose steps are mostly framework)."""
    batch = None
    for row in rows:
        batch = batch or _value(row.record, "batch")
    if not batch or not rows:
        return None, None, None
    step = statistics.median(r.step for r in rows)
    global_rate = batch / step
    replicas = max(1, int(_value(rows[0].record, "replicas") or len(rows)))
    alone = []
    for row in rows:
        share = batch * max(1, int(_value(row.record, "local_replicas") or 1)) / replicas
        pipeline = (_value(row.record, "input_time") or 0.0) * share / batch
        alone_step = max(row.compute, pipeline)
        if alone_step <= 0:
            return global_rate, None, None
        row.alone_rate = share / alone_step
        alone.append(row.alone_rate)
    efficiency = global_rate / sum(alone)
    return global_rate, efficiency * len(rows), efficiency


# --------------------------------------------------------------------------- the verdict


def _input_finding(row: WorkerBreakdown) -> Finding:
    needs = 1.0 / max(row.step - row.input, 1e-9)
    gives = row.pipeline_rate or 1.0 / row.step
    return Finding(INPUT_BOUND, f"input-bound on {row.task}: {row.share('input'):.0%} of each step waits for its "
                                f"input pipeline, which gives {_rate(gives)} batches/s where training needs "
                                f"{_rate(needs)} — parallelize its map (num_parallel_calls=tf.data.AUTOTUNE), add "
                                f".prefetch(tf.data.AUTOTUNE), cache decoded data (.cache()), or give its host more "
                                f"CPU",
                   row.task)


def _cause(row: WorkerBreakdown, rows: list[WorkerBreakdown] | None = None, hosts: dict[str, str] | None = None) -> str:
    """What held a straggler's CPU, from what it saw while its real steps were timed (``rows``, ``hosts``: every
    worker's, and where each runs: the work beside the run's on its host, a peer on the same host)."""
    cpu = row.record.get("cpu") if isinstance(row.record.get("cpu"), dict) else {}
    limit, throttled = _value(cpu, "limit"), _value(cpu, "throttled")
    cores, allowed = _value(cpu, "cores"), _value(cpu, "allowed")
    if limit is not None and (throttled or 0) >= THROTTLED:
        return (f"its cgroup limits it to {limit:g} CPU (throttled in {throttled:.0%} of periods) — raise the limit "
                f"(cpu.max, cpu.cfs_quota_us, a container's --cpus) or move the task to a host with CPU to spare")
    others = [o for o in cpu.get("others") or [] if isinstance(o, dict) and (_value(o, "cpu") or 0) >= OTHER_PROCESS]
    if others:
        named = ", ".join(f"pid {o.get('pid')} ({str(o.get('name'))[:40]}) uses {_value(o, 'cpu'):.1f} CPU"
                          for o in others[:2])
        return f"its host's CPU is busy with another process: {named} — stop it, or move the task to another host"
    if allowed is not None and cores is not None and allowed < cores:
        return (f"it may use only {allowed:g} of its host's {cores:g} cores (taskset, a cpuset) — let it use them "
                f"all or move the task")
    hosts = hosts or {}
    here = hosts.get(row.task)
    together = [r for r in rows or [] if r is not row and here is not None and hosts.get(r.task) == here]
    beside = _busy_hosts([row, *together], hosts)
    if beside:
        return f"{beside} while it was measured — stop that work, or move the task to a host with CPU to spare"
    busy = _value(cpu, "host_busy")
    if busy is not None and busy >= SATURATED:
        return f"its host's CPU is saturated ({busy:.0%} busy) — fewer tasks on that host, or a bigger host"
    if together:  # the same CPU computes faster for a peer: not a slower machine
        return (f"it shares {here} with {', '.join(r.task for r in together)}, which computes faster: the host's "
                f"CPU was not shared evenly — ask again; pin each task to cores of its own, or give it a host")
    return "its host computes slower than its peers' (a slower CPU or GPU) — give it a host like the others'"


def _busy_hosts(rows: list[WorkerBreakdown], hosts: dict[str, str]) -> str | None:
    """What else held the workers' hosts' CPUs while their steps were timed, in words: the busiest processes outside
    the run (``OTHER_PROCESS`` of a core or more, each named once with its host), else a host whose CPU work beyond
    the run's own workers' was ``OTHER_LOAD`` cores or more; None: neither."""
    seen: dict = {}
    load: dict[str, tuple[float, float]] = {}  # host -> (its cores busy, what the run's workers there used)
    for row in rows:
        host = hosts.get(row.task, row.task)
        cpu = row.record.get("cpu") if isinstance(row.record.get("cpu"), dict) else {}
        busy, cores, used = _value(cpu, "host_busy"), _value(cpu, "cores"), _value(cpu, "used")
        if busy is not None and cores and used is not None:  # (what the worker itself used: else nobody knows)
            total, own = load.get(host, (0.0, 0.0))
            load[host] = (max(total, busy * cores), own + used)
        for other in cpu.get("others") or []:
            if isinstance(other, dict) and (_value(other, "cpu") or 0) >= OTHER_PROCESS:
                seen.setdefault((host, other.get("pid")), (host, other))
    if seen:
        named = sorted(seen.values(), key=lambda item: -(_value(item[1], "cpu") or 0))[:2]
        return "other processes used the hosts' CPU (" + ", ".join(
            f"pid {o.get('pid')} ({str(o.get('name'))[:40]}) {_value(o, 'cpu'):.1f} CPU"
            + (f" on {host}" if len(load) > 1 else "") for host, o in named) + ")"
    beyond = {host: total - own for host, (total, own) in load.items() if total - own >= OTHER_LOAD}
    if beyond:
        host, cores = max(beyond.items(), key=lambda item: item[1])
        return f"other work kept {cores:.1f} cores of {host} busy beside the run's workers"
    return None


def _gpu_use(system: dict, task: str) -> float | None:
    """The mean utilisation (%) of the GPUs ``task`` sees, from its host's system record (None: no GPU known)."""
    gpus = [g for g in system.get("gpus") or [] if isinstance(g, dict)]
    seen = ((system.get("tasks") or {}).get(task) or {}).get("gpus")
    if seen is not None:
        gpus = [g for g in gpus if g.get("index") in seen or g.get("uuid") in seen]
    busy = [_value(g, "utilization_percent") for g in gpus]
    busy = [b for b in busy if b is not None]
    return statistics.mean(busy) if busy else None


def system_notes(rows: list[WorkerBreakdown], systems: dict[str, dict]) -> list[Finding]:
    """What each worker's host said in the system lane (``systems``: task → its host's newest system record) that
    the breakdown cannot see: a host short of memory, GPUs idle while compute is most of the step."""
    notes = []
    for row in rows:
        system = systems.get(row.task)
        if not isinstance(system, dict):
            continue
        total, available = _value(system, "memory_total_bytes"), _value(system, "memory_available_bytes")
        swapped = _value(system, "swap_used_bytes") or 0.0
        if (total and available is not None and available / total < SHORT_OF_MEMORY) or swapped >= SWAPPED:
            left = f"{available / total:.0%} of its memory available" if total and available is not None else ""
            notes.append(Finding(NOTE, f"{row.task}'s host is short of memory ({left}"
                                       f"{', ' if left and swapped else ''}"
                                       f"{f'{swapped / 2**30:.1f} GB swapped' if swapped else ''}): its steps may wait "
                                       f"on the disk — fewer tasks on that host, a smaller batch, or more memory",
                                 row.task))
        use = _gpu_use(system, row.task)
        if use is not None and use < GPU_IDLE and row.share("compute") >= 0.5:
            notes.append(Finding(NOTE, f"{row.task}'s GPUs were {use:.0f}% busy while compute was "
                                       f"{row.share('compute'):.0%} of its step: they wait on the host between "
                                       f"kernels — a larger batch per replica, or jit_compile=True", row.task))
    return notes


def shared_hosts(rows: list[WorkerBreakdown], hosts: dict[str, str]) -> list[Finding]:
    """Workers measured on one host share its CPU: what each does "alone" is at its share (the scaling figure)."""
    together: dict[str, list[str]] = {}
    for row in rows:
        if row.task in hosts:
            together.setdefault(hosts[row.task], []).append(row.task)
    return [Finding(NOTE, f"{' and '.join(tasks) if len(tasks) < 3 else f'{len(tasks)} workers'} share {host}: each is "
                          f"measured at its share of that host (the scaling figure too); one worker alone there would "
                          f"have it all — a worker a host scales better", None)
            for host, tasks in together.items() if len(tasks) > 1]


def explain(ask: str, records: dict[str, dict], missing: list[str] | None = None,
            why_missing: str = "did not answer in time", systems: dict[str, dict] | None = None,
            hosts: dict[str, str] | None = None) -> Verdict:
    """The verdict on the ``breakdown`` records of one ask (task name → record); ``missing``: the tasks asked that
    gave none, and ``why_missing`` in words; ``systems``: each task's host's newest system record; ``hosts``: each
    task's host."""
    rows = breakdowns(records)
    findings: list[Finding] = []
    if not rows:
        words = ("no worker could measure its step (" + "; ".join(
            p for r in records.values() for p in (r.get("problems") or [])[:1])[:300] + ")") if records else \
            "no worker answered: is the run still training?"
        if missing:
            words += f" ({', '.join(missing)} {why_missing})"
        return Verdict(ask, [], [Finding(UNMEASURED, words)], UNMEASURED, missing=list(missing or []))
    rows.sort(key=lambda r: r.task)
    for row in rows:
        if row.share("input") >= INPUT_SHARE:
            findings.append(_input_finding(row))
    inputs = {f.task for f in findings}
    slowest = max(rows, key=lambda r: r.compute)
    others = [r for r in rows if r is not slowest]
    if others and slowest.task not in inputs:
        waiting = max(r.share("peers") for r in others)
        typical = statistics.median(r.compute for r in others)
        if waiting >= PEERS_SHARE and slowest.compute >= STRAGGLER_RATIO * max(typical, 1e-9):
            findings.append(Finding(STRAGGLER, (
                f"{slowest.task} is a straggler: its compute takes {_ms(slowest.compute)} a step, its peers' "
                f"{_ms(typical)}, and they wait {waiting:.0%} of each step for it: {_cause(slowest, rows, hosts)}"),
                slowest.task))
    communication = statistics.mean(r.share("communication") for r in rows)
    largest = max(PARTS, key=lambda p: statistics.mean(r.share(p) for r in rows))
    if not findings and len(rows) > 1 and communication >= COMMUNICATION_SHARE and largest == "communication":
        reduce = statistics.median(r.communication for r in rows)
        size = _value(rows[0].record, "gradient_bytes")
        amount = f" ({size / 1e6:.2g} MB of gradients in {_ms(reduce)})" if size else ""
        places = {(hosts or {}).get(r.task) for r in rows}
        if len(places) == 1 and None not in places:  # no link between hosts: the workers split one host's CPU
            words = (f"communication-bound: {communication:.0%} of each step waits on the all-reduce{amount} — its "
                     f"workers share {places.pop()}, no link between hosts is in it: a worker the shared CPU holds "
                     f"back keeps its peers waiting in the all-reduce; a worker a host, or a larger batch per replica "
                     f"(fewer all-reduces per example)")
        else:
            words = (f"communication-bound: {communication:.0%} of each step waits on the all-reduce{amount} — a "
                     f"larger batch per replica (fewer all-reduces per example), RING or NCCL "
                     f"(training.communication), fewer hosts, or a faster link between them")
        busy = _busy_hosts(rows, hosts or {})
        if busy:  # a worker starved of CPU keeps its peers in the all-reduce: the link may not be the cause
            words += (f"; but {busy} while it was measured: a worker they hold back keeps its peers waiting in the "
                      f"all-reduce too — ask again when the hosts are quiet, before changing anything")
        findings.append(Finding(COMMUNICATION_BOUND, words))
    if not findings:
        compute = statistics.mean(r.share("compute") for r in rows)
        other = statistics.mean(r.share("other") for r in rows)
        if compute >= other:
            words = (f"healthy: compute-bound — compute is {compute:.0%} of each step, the all-reduce "
                     f"{communication:.0%}; no worker waits on its input or on a peer")
        else:
            words = (f"healthy: no worker waits on its input or on a peer; the update and the framework's own work "
                     f"are {other:.0%} of each step, compute {compute:.0%} (a small model: a larger batch per replica "
                     f"gives each step more to do)")
        findings.append(Finding(HEALTHY, words))
    findings += system_notes(rows, systems or {})
    findings += shared_hosts(rows, hosts or {})
    unpiped = [r.task for r in rows if r.record.get("input") is None]
    if unpiped:
        findings.append(Finding(UNMEASURED, (
            f"input not measured on {', '.join(unpiped)} (a generator, a Keras PyDataset, or data fit was not given "
            f"directly): any wait for it counts as update and framework")))
    problems = sorted({p for r in rows for p in r.record.get("problems") or []})
    if problems:
        findings.append(Finding(UNMEASURED, "not measured: " + "; ".join(problems)[:400]))
    if missing:
        findings.append(Finding(UNMEASURED, f"not measured: {', '.join(missing)} {why_missing}"))
    kind = min((f.kind for f in findings), key=KINDS.index)
    global_rate, speedup, efficiency = _scaling(rows)
    return Verdict(ask, rows, findings, kind, global_rate, speedup, efficiency, list(missing or []))


# --------------------------------------------------------------------------- the asks a session has out


@dataclass
class Ask:
    name: str
    tasks: list[str]
    at_step: int  # the newest step seen when asked
    first: float = field(default_factory=time.monotonic)  # when it was asked
    records: dict = field(default_factory=dict)


def new_ask() -> str:
    return "why-" + uuid.uuid4().hex[:10]


class Asks:
    """The asks out (the session keeps them under a lock: a front end's thread starts one)."""

    def __init__(self, context=None):
        self._asks: dict[str, Ask] = {}
        # () -> {"systems": task -> its host's newest system record, "hosts": task -> its host}
        self._context = context or dict

    def start(self, name: str, tasks: list[str], at_step: int) -> Ask:
        ask = self._asks[name] = Ask(name, list(tasks), at_step)
        return ask

    def get(self, name: str) -> Ask | None:
        return self._asks.get(name)

    def forget(self, name: str) -> None:
        self._asks.pop(name, None)

    def answered(self, task: str, record: dict) -> Verdict | None:
        """A task's ``breakdown`` record: the verdict once every task asked has answered."""
        ask = self._asks.get(str(record.get("ask")))
        if ask is None or task not in ask.tasks:
            return None
        ask.records[task] = record
        if all(t in ask.records for t in ask.tasks):
            return self._close(ask)
        return None

    def overdue(self, now: float | None = None) -> list[Verdict]:
        """The verdicts of asks that waited ``ANSWER_SECONDS``: on what came, the silent tasks named."""
        now = time.monotonic() if now is None else now
        out = []
        for ask in list(self._asks.values()):
            if now - ask.first >= ANSWER_SECONDS:
                out.append(self._close(ask, [t for t in ask.tasks if t not in ask.records]))
        return out

    def ended(self, ended: set[str]) -> list[Verdict]:
        """The verdicts of asks some of whose tasks ended before they answered (the run failed, or was stopped)."""
        out = []
        for ask in list(self._asks.values()):
            gone = [t for t in ask.tasks if t in ended and t not in ask.records]
            if gone:
                out.append(self._close(ask, gone, "ended before it answered (the run failed or was stopped)"))
        return out

    def _close(self, ask: Ask, missing: list[str] | None = None, why: str = "did not answer in time") -> Verdict:
        self._asks.pop(ask.name, None)
        verdict = explain(ask.name, ask.records, list(missing or []), why, **self._context())
        verdict.took = time.monotonic() - ask.first
        verdict.at_step = ask.at_step
        return verdict
