"""What a host's CPUs, memory and GPUs are doing, and each task's processes: the ``system`` op's records.

Standard library only, Linux. Host CPU busy time comes from ``/proc/stat``, memory
from ``/proc/meminfo``, a task's CPU time and resident memory from
``/proc/<pid>/stat`` of every process in its process group (the supervisor, the
trainer and whatever the trainer started). CPU percentages are over the time since
the previous sample of the same ``Sampler``, so a sampler's first sample is a
baseline. GPUs come from ``nvidia-smi`` (the query and parser of ``agent.probe``):
a host without it has no GPUs, never an error. Where there is no ``/proc``, the
fields are null.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from agent import probe, protocol, runs

try:
    TICKS = os.sysconf("SC_CLK_TCK")  # the unit of /proc/<pid>/stat's CPU times
    PAGE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):
    TICKS, PAGE = 100, 4096

PROC = "/proc"        # Linux's process file system (none elsewhere: the fields are null)
SMI_TIMEOUT = 2.0     # seconds one nvidia-smi query may take (the sample waits for it)
SMI_RETRY = 30.0      # after a failed query, seconds before the next try (not one process a second)
RESCAN = 10.0         # seconds between looks at every process for a task's new ones (between: its known ones;
                      # every sample while a task's own process is younger than this: it starts others then)
MIB = 1 << 20


def host_cpu_times():
    """``(busy, total)`` CPU time of every core since boot from ``/proc/stat``, in ticks; None without it."""
    try:
        with open(f"{PROC}/stat", encoding="ascii") as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest and guest_nice are in user and nice already)
    values = [int(v) for v in first[1:9]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values)
    return total - idle, total


def memory() -> dict:
    """Total, used (total less available, as ``free`` counts it), available and swap used, in bytes."""
    fields = {}
    try:
        with open(f"{PROC}/meminfo", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("MemTotal", "MemAvailable", "MemFree", "SwapTotal", "SwapFree"):
                    fields[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        fields = {}
    total = fields.get("MemTotal")
    available = fields.get("MemAvailable", fields.get("MemFree"))  # kernels before 3.14 lack MemAvailable
    swap = None
    if "SwapTotal" in fields and "SwapFree" in fields:
        swap = fields["SwapTotal"] - fields["SwapFree"]
    return {"memory_total_bytes": total,
            "memory_used_bytes": total - available if total is not None and available is not None else None,
            "memory_available_bytes": available,
            "swap_used_bytes": swap}


def process_groups(pgids, among=None) -> dict:
    """``{pgid: (cpu ticks, rss bytes, pids)}`` of the live processes in each of ``pgids``: one pass
    over the processes ``among`` (default: every one in /proc)."""
    wanted = {int(p) for p in pgids if p}
    found = {p: [0, 0, []] for p in wanted}
    if not wanted:
        return {}
    if among is None:
        try:
            among = os.listdir(PROC)
        except OSError:
            return {}
    for entry in map(str, among):
        if not entry.isdigit():
            continue
        try:
            with open(f"{PROC}/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # it ended meanwhile
        fields = stat[stat.rfind(b")") + 2:].split()
        # After the name: state(0) ppid(1) pgrp(2) ... utime(11) stime(12) ... rss(21, pages)
        try:
            if fields[0] == b"Z" or int(fields[2]) not in wanted:
                continue
            group = found[int(fields[2])]
            group[0] += int(fields[11]) + int(fields[12])
            group[1] += int(fields[21]) * PAGE
            group[2].append(int(entry))
        except (IndexError, ValueError):
            continue
    return {p: (v[0], v[1], tuple(v[2])) for p, v in found.items() if v[2]}


def visible_gpus(value):
    """A task's ``CUDA_VISIBLE_DEVICES`` as a list (indexes as numbers, UUIDs as text); None when unset."""
    if value is None:
        return None
    return [int(v) if v.strip().isdigit() else v.strip() for v in str(value).split(",") if v.strip()]


def running_tasks(run_id: str) -> dict:
    """``{name: {"pgid", "pid", "gpus"}}`` of the tasks of ``run_id`` that run on this host now.

    ``pid`` is the task's own process (the trainer), else its supervisor's while the trainer
    is being started; ``gpus`` its ``CUDA_VISIBLE_DEVICES`` (None when the console set none).
    """
    tasks = {}
    for name in runs.run_tasks(run_id):
        try:
            state = runs.status(run_id, name)
        except runs.AgentError:  # its folder went away meanwhile
            continue
        if state["phase"] != protocol.RUNNING:
            continue
        folder = runs.task_dir(run_id, name)
        try:
            saved = runs.read_json(folder / protocol.STATE_FILE) or {}
            child = (runs.read_json(folder / protocol.CHILD_FILE) or {}).get("pid")
            env = (runs.read_json(folder / protocol.SPEC_FILE) or {}).get("env") or {}
        except (OSError, ValueError, AttributeError):
            continue
        pgid = saved.get("pgid", saved.get("pid"))
        fields = runs._stat_fields(child) if child else []
        if len(fields) < 3 or fields[2] != str(pgid):  # an earlier launch's child.json: not this one's yet
            child = None
        tasks[name] = {"pgid": pgid, "pid": child or saved.get("pid"),
                       "gpus": visible_gpus(env.get("CUDA_VISIBLE_DEVICES"))}
    return tasks


class GpuQuery:
    """Each GPU's utilisation and memory from ``nvidia-smi``, at most one query per sample.

    No ``nvidia-smi``: ``[]`` for good (it is looked for once). A failed or slow query:
    ``[]``, and no new try for ``SMI_RETRY`` seconds.
    """

    def __init__(self, command: str = "nvidia-smi"):
        self.path = shutil.which(command) if os.sep not in command else command
        self.note = None if self.path else "nvidia-smi not found: no NVIDIA driver on this host"
        self._not_before = 0.0

    def __call__(self) -> list:
        if not self.path or time.monotonic() < self._not_before:
            return []
        try:
            proc = subprocess.run([self.path, *probe.NVIDIA_SMI_ARGS], capture_output=True, text=True,
                                  timeout=SMI_TIMEOUT, stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                reason = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
                raise ValueError(f"nvidia-smi failed: {reason[0] if reason else f'exit code {proc.returncode}'}")
            rows = probe.parse_nvidia_smi(proc.stdout)
        except FileNotFoundError:
            self.path, self.note = None, "nvidia-smi not found: no NVIDIA driver on this host"
            return []
        except subprocess.TimeoutExpired:
            return self._failed(f"nvidia-smi gave no answer in {SMI_TIMEOUT:g} s")
        except (OSError, ValueError) as exc:
            return self._failed(str(exc))
        self.note = None
        return [{"index": row["index"], "name": row["name"], "utilization_percent": row["utilization_percent"],
                 "memory_used_bytes": _bytes(row["memory_used_mib"]),
                 "memory_total_bytes": _bytes(row["memory_total_mib"])} for row in rows]

    def _failed(self, why: str) -> list:
        self.note = why
        self._not_before = time.monotonic() + SMI_RETRY
        return []


def _bytes(mib):
    return None if mib is None else int(mib * MIB)


class Sampler:
    """Successive samples of one host: each CPU percentage is over the time since the previous one."""

    def __init__(self, nvidia_smi: str = "nvidia-smi"):
        self.gpus = GpuQuery(nvidia_smi)
        self.cpus = os.cpu_count()
        self._host = None                  # (busy, total) ticks at the previous sample
        self._groups: dict = {}            # pgid -> (cpu ticks, monotonic time) at the previous sample
        self._members: dict = {}           # pgid -> its processes at the previous sample
        self._scanned = None               # when every process was last looked at (monotonic)
        self._seen: dict = {}              # a task's own process -> when a sample first had it (monotonic)

    def baseline(self, tasks: dict) -> None:
        """Start the CPU clocks: the first ``sample`` gives the percentages since now."""
        self._host = host_cpu_times()
        now = time.monotonic()
        self._groups = {pgid: (group[0], now) for pgid, group in self._process_groups(tasks).items()}

    def _process_groups(self, tasks: dict) -> dict:
        """``process_groups`` of the tasks: of every process every ``RESCAN`` s, and at each sample while
        a task's own process is new (it starts its helpers then); in between, of their known processes."""
        now = time.monotonic()
        pgids = {t.get("pgid") for t in tasks.values() if t.get("pgid")}
        self._seen = {t.get("pid"): self._seen.get(t.get("pid"), now) for t in tasks.values()}
        settled = all(now - first >= RESCAN for first in self._seen.values())
        groups = None
        if settled and self._scanned is not None and now - self._scanned < RESCAN and pgids <= set(self._members):
            groups = process_groups(pgids, [pid for pgid in pgids for pid in self._members[pgid]])
            if set(groups) != pgids:
                groups = None
        if groups is None:
            groups = process_groups(pgids)
            self._scanned = now
        self._members = {pgid: group[2] for pgid, group in groups.items()}
        return groups

    def sample(self, tasks: dict) -> dict:
        """The record for now. ``tasks``: ``{name: {"pgid", "pid", "gpus"}}`` of the tasks that run."""
        now = time.monotonic()
        host = host_cpu_times()
        cpu_percent = None
        if host is not None and self._host is not None and host[1] > self._host[1]:
            cpu_percent = round(100.0 * (host[0] - self._host[0]) / (host[1] - self._host[1]), 1)
        self._host = host
        groups = self._process_groups(tasks)
        seen = {}
        out_tasks = {}
        for name, task in tasks.items():
            pgid = task.get("pgid")
            group = groups.get(pgid)
            percent = rss = None
            if group is not None:
                ticks, rss, _ = group
                seen[pgid] = (ticks, now)
                before = self._groups.get(pgid)
                if before is not None and now > before[1]:
                    # A member that ended takes its ticks away: never below 0.
                    percent = round(max(0.0, 100.0 * (ticks - before[0]) / TICKS / (now - before[1])), 1)
            out_tasks[name] = {"pid": task.get("pid"), "cpu_percent": percent, "rss_bytes": rss,
                               "gpus": task.get("gpus")}
        self._groups = seen
        record = {"type": protocol.SYSTEM_MESSAGE, "time": time.time(), "cpus": self.cpus, "cpu_percent": cpu_percent,
                  **memory(), "gpus": self.gpus(), "tasks": out_tasks}
        if self.gpus.note and self.gpus.path:
            record["gpu_note"] = self.gpus.note  # nvidia-smi is there but failed: say why, once a sample
        return record


# --------------------------------------------------------------------------- what holds a process back
# (a step-time breakdown's system part: trainer/breakdown.py reads them in its own process)

CGROUP_ROOT = "/sys/fs/cgroup"


def _cgroup_folders(pid="self") -> list:
    """The cgroup folders whose CPU controller limits ``pid``: its own and each above it, v1 (``cpu``) or v2."""
    try:
        with open(f"{PROC}/{pid}/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        names = controllers.split(",")
        if "cpu" in names:  # v1: mounted as cpu, cpu,cpuacct or cpuacct,cpu
            mounts = [os.path.join(CGROUP_ROOT, m) for m in ("cpu", "cpu,cpuacct", "cpuacct,cpu")]
        elif controllers == "":
            mounts = [CGROUP_ROOT, os.path.join(CGROUP_ROOT, "unified")]
        else:
            continue
        for mount in mounts:
            if os.path.isdir(mount):
                folder = os.path.join(mount, path.lstrip("/"))
                while folder.startswith(mount):
                    found.append(folder)
                    if folder == mount:
                        break
                    folder = os.path.dirname(folder)
                break
    return found


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return None


def cpu_limit(pid="self") -> dict:
    """The CPU a cgroup lets ``pid`` use: ``{"limit": cores or None, "periods": n, "throttled": n, "where": path}``,
    the periods and throttled periods counted so far by the tightest limit's cgroup (v1 ``cpu.cfs_quota_us``,
    v2 ``cpu.max``); ``{}`` without cgroups."""
    best: dict = {}
    for folder in _cgroup_folders(pid):
        limit = None
        quota = _read(os.path.join(folder, "cpu.cfs_quota_us"))
        period = _read(os.path.join(folder, "cpu.cfs_period_us"))
        if quota is not None and period is not None:
            try:
                if int(quota) > 0 and int(period) > 0:
                    limit = int(quota) / int(period)
            except ValueError:
                pass
        else:
            both = (_read(os.path.join(folder, "cpu.max")) or "").split()
            if len(both) == 2 and both[0] != "max":
                try:
                    limit = int(both[0]) / int(both[1])
                except (ValueError, ZeroDivisionError):
                    pass
        if limit is None or (best and best["limit"] <= limit):
            continue
        stat = {}
        for line in (_read(os.path.join(folder, "cpu.stat")) or "").splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                stat[key] = int(value)
        best = {"limit": round(limit, 3), "periods": stat.get("nr_periods"), "throttled": stat.get("nr_throttled"),
                "where": folder}
    return best


def processes() -> dict:
    """``{pid: (cpu ticks, process group)}`` of every live process, one pass over /proc."""
    found = {}
    try:
        entries = os.listdir(PROC)
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{PROC}/{entry}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rfind(b")") + 2:].split()
            if fields[0] != b"Z":
                found[int(entry)] = (int(fields[11]) + int(fields[12]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _environment_value(pid: int, name: str):
    raw = None
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "replace")
    return None


def busiest_others(before: dict, after: dict, seconds: float, run_id: str | None, least: float = 0.25,
                   most: int = 3) -> list:
    """The processes that used the most CPU between two ``processes()`` passes ``seconds`` apart, at least
    ``least`` of a core each, but for those of run ``run_id`` (their ``TFCC_RUN_ID``) and of this process's
    group: ``[{"pid", "name", "cpu"}]`` (cores), the busiest first."""
    if seconds <= 0:
        return []
    mine = os.getpgrp()
    busy = []
    for pid, (ticks, group) in after.items():
        if group == mine or pid not in before:
            continue
        cores = (ticks - before[pid][0]) / TICKS / seconds
        if cores >= least:
            busy.append((cores, pid))
    out = []
    for cores, pid in sorted(busy, reverse=True):
        if run_id is not None and _environment_value(pid, protocol.RUN_ID_VARIABLE) == run_id:
            continue
        name = (_read(f"{PROC}/{pid}/comm") or "?").strip()
        out.append({"pid": pid, "name": name, "cpu": round(cores, 2)})
        if len(out) >= most:
            break
    return out
