"""The words tfcc uses for what happens in a run, for the CLI and the window alike (Qt-free).

Each function turns one kind of record or message into the one line both front ends
show; neither front end words these on its own.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

from console.states import RECONNECTING, Mark
from trainer.records import FIT, GLOBAL_STEP, PLAN_FIELDS, Event, RecordType
from trainer.records import number as metric_value  # a record's metric as a float: NaN for none
from trainer.tf_config import PS


def metric_text(value, digits: int = 4) -> str:
    """A metric as text: ``nan`` for a missing, non-finite or non-numeric value (a diverged loss is
    ``null`` in the metrics file), never an error."""
    value = metric_value(value)
    return f"{value:.{digits}f}" if math.isfinite(value) else "nan"


def count(index) -> str:
    """A 0-based epoch or step index as people count it (1-based); "?" if it is not a number."""
    value = metric_value(index)
    return f"{int(value) + 1}" if math.isfinite(value) else "?"


def epoch_text(r: dict) -> str:
    """An epoch record: ``epoch 3 done  loss 0.1234  val_loss …  val_accuracy …``."""
    val = "".join(f"  {key} {metric_text(r.get(key))}" for key in ("val_loss", "val_accuracy") if key in r)
    return f"epoch {count(r.get('epoch'))} done  loss {metric_text(r.get('loss'))}{val}"


def event_text(r: dict) -> str:
    """An event record of the trainer (docs/metrics.md)."""
    name = r.get("event")
    if name == Event.LAUNCHED:
        return f"launched (pid {r.get('pid')}), waiting for the cluster"
    if name == Event.CLUSTER_FORMED:
        return f"cluster formed: {r.get('strategy')}, {r.get('num_replicas')} replicas"
    if name == Event.STARTED and r.get("asynchronous"):
        workers, replicas = r.get("num_workers"), r.get("replicas_per_worker")
        return (f"training started (parameter servers: {r.get('num_ps')}): each step one worker's batch of "
                f"{r.get('global_batch')} = {replicas} replica{'s' * (replicas != 1)} × {r.get('per_replica_batch')}, "
                f"{workers} worker{'s' * (workers != 1)} taking steps independently")
    if name == Event.STARTED:
        workers, replicas = r.get("num_workers"), r.get("replicas_per_worker")
        return (f"training started: global batch {r.get('global_batch')} = {workers} worker{'s' * (workers != 1)} × "
                f"{replicas} replica{'s' * (replicas != 1)} × {r.get('per_replica_batch')}")
    if name == Event.TRAIN_BEGIN:
        fit = r.get(FIT)
        return f"fit began (fit {fit} of the script)" if isinstance(fit, int) and fit > 1 else "fit began"
    if name == Event.TRAIN_END:
        seconds = metric_value(r.get("train_time"))
        return f"fit ended after {duration_text(seconds)} of training" if math.isfinite(seconds) else "fit ended"
    if name == Event.SAVING:
        return "training done; saving the model" + (f" to {r['path']}" if r.get("path") else " (its part of it)")
    if name == Event.SAVED:
        return f"model saved in {metric_text(r.get('seconds'), 1)} s"
    if name == Event.FINISHED:
        return "finished" + (f", model saved to {r['model']}" if r.get("model") else "")
    if name == Event.FAILED:
        return f"FAILED: {r.get('error') or 'no reason given'}"
    if name == Event.RESUMED:
        return resumed_text(r)
    if name == Event.SERVING:
        return f"serving ({r.get('role', '?')}): the coordinator drives it"
    if name == Event.EVALUATING:
        return f"evaluating the chief's checkpoints as they come ({r.get('validation_examples')} validation examples)"
    if name == Event.EVALUATED:
        metrics = r.get("metrics")
        metrics = "  ".join(f"{k} {metric_text(v)}" for k, v in (metrics.items() if isinstance(metrics, dict) else ()))
        return f"evaluated the checkpoint of epoch {count(r.get('epoch'))}  {metrics}".rstrip()
    return str(name)


# A backup's plan, field by field (trainer.records.PLAN_FIELDS), as a resume says what changed since it.
PLAN_WORDS = dict(zip(PLAN_FIELDS, ("workers", "replicas", "per-replica batch", "global batch", "steps per epoch",
                                    "learning rate", "seed"), strict=True))


def _plan_value(value) -> str:
    number = metric_value(value)
    if not math.isfinite(number):
        return "?"
    return f"{int(number)}" if number == int(number) and abs(number) < 1e15 else f"{number:.6g}"


def changes_text(changed) -> str:
    """A resume's ``changed`` field ({field: [backup's, now]}): ``workers 2 → 1, learning rate 0.004 → 0.002``
    (a host's record: unknown fields and malformed values are left out)."""
    if not isinstance(changed, dict):
        return ""
    parts = [f"{PLAN_WORDS[k]} {_plan_value(v[0])} → {_plan_value(v[1])}" for k, v in changed.items()
             if k in PLAN_WORDS and isinstance(v, (list, tuple)) and len(v) == 2]
    return ", ".join(parts)


def resumed_text(r: dict) -> str:
    """A ``resumed`` event: where an attempt took up training, and what changed since its backup."""
    if r.get("note"):
        return f"attempt {r.get('attempt', '?')}: {r['note']}"
    text = (f"attempt {r.get('attempt', '?')} resumed from its backup of epoch {count(r.get('epoch'))} "
            f"step {count(r.get('step'))} (step {r.get(GLOBAL_STEP)} of the run)")
    changes = changes_text(r.get("changed"))
    if changes:
        text += f"; changed since the backup: {changes}"
    if r.get("position") is not None:
        text += f"; the global batch changed: it goes on at step {_plan_value(r.get('position'))} of the new stream"
    return text


def resizes_text(names: list[str], resizes: list) -> str:
    """An elastic run's changes of size (its manifest's ``resizes``: {"at", "tasks", "why"}), from its tasks
    ``names``: ``3 tasks → 2 (worker-2 left: its host did not answer for 30 s) → 3 (worker-2 back: tfcch2 answers
    again)``; "" for none."""
    parts, before = [], list(names)
    for change in resizes:
        now = change.get("tasks") if isinstance(change, dict) else None
        if not isinstance(now, list):
            continue
        gone, back = [t for t in before if t not in now], [t for t in now if t not in before]
        who = "; ".join(w for w in (f"{', '.join(gone)} left" if gone else "",
                                    f"{', '.join(back)} back" if back else "") if w)
        why = str(change.get("why") or "")
        parts.append(f"{len(now)} ({who}: {why})" if who else f"{len(now)} ({why})")
        before = now
    return f"{len(names)} tasks → " + " → ".join(parts) if parts else ""


def seeded_text(seeding) -> str:
    """A resume's copy of a backup (``console.run.seeding.Seeding``) to the tasks that lacked it."""
    return (f"copied {seeding.donor}'s backup of step {seeding.step} to {', '.join(seeding.recipients)}, "
            "which lacked it, so that every task resumes from it")


def port_in_use_text(port: dict) -> str:
    """A port the agent could not bind (its ``check_ports`` answer): ``port 2222 is in use by pid 42 (…)``."""
    who = port.get("holder") or {}
    by = f" by pid {who['pid']} ({who['command']})" if who.get("pid") else ""
    return f"port {port['port']} is in use{by}"


def unreadable_text(r: dict) -> str:
    """A damaged line of a metrics file (decoded as ``unreadable``), or one too big for a record."""
    why = f" ({r['why']})" if r.get("why") else ""
    return f"a line of its metrics file is not a record{why}, skipped: {str(r.get('raw', ''))[:80]!r}"


def outcome_text(phase: str, exit: dict | None = None, error: str | None = None) -> str:
    """How a task ended: ``finished (exit code 0)``, ``failed (exit code 1)``, ``error: …``."""
    if error:
        return f"{phase}: {error}"
    code = (exit or {}).get("returncode")
    return f"{phase} (exit code {code})" if code is not None else phase


def connection_text(host: str, message: dict) -> str:
    """A ``reconnecting`` or ``reconnected`` message of a task's follow."""
    if message["type"] == RECONNECTING and message.get("first"):
        return f"cannot reach host {host} ({message['error']}); trying again (the task may still run there)"
    if message["type"] == RECONNECTING:
        return f"lost the connection to host {host} ({message['error']}); reconnecting (the task goes on there)"
    return f"reconnected to host {host} after {message['after']:.0f} s; following on from where it stopped"


STATE_BADGES = {Mark.STALLED: "STALLED", Mark.FAILED: "FAILED", Mark.RESTARTING: "restarting",
                Mark.STOPPING: "stopping…", Mark.STOPPED: "stopped", Mark.LEFT: "LEFT THE RUN"}
STOPPING_WORDS = "stop asked by you: every task gets SIGTERM, then SIGKILL after {grace:g} s"
STOPPED_BY_YOU = "stopped by you"
STOPPED_ELSEWHERE = "stopped on request (tfcc stop, or another console)"
STOPPED_BY_TFCC = "stopped by tfcc (the run's own rule: stop_on_nan)"  # a Mark, as a badge
STOPPED_WITH_GROUP = "stopped by tfcc: another task of the run failed, and its tasks stop together"
STOPPED_FOR_RESIZE = "stopped by tfcc: the elastic run starts again on other tasks"


def state_text(state: str, words: str = "", width: int = 70) -> str:
    """A task's supervision state as a short badge line: ``FAILED: killed by SIGKILL`` (the whole
    words go to a tooltip)."""
    badge = STATE_BADGES.get(state, state)
    short = words.split(": ", 1)[1] if words.startswith(("worker-", "chief-")) and ": " in words else words
    short = re.sub(r" \([^()]*\)", "", short.split("; ", 1)[0])  # the details stay in the tooltip
    if len(short) > width:
        short = short[:width - 1] + "…"
    return f"{badge}: {short}" if short else badge


def alive_text(r: dict) -> str:
    """A server's liveness record: ``serving (ps): CPU 12%, memory 230 MB``."""
    rss, cpu = metric_value(r.get("rss_bytes")), metric_value(r.get("cpu_percent"))
    memory = f", memory {rss / (1 << 20):.0f} MB" if math.isfinite(rss) else ""
    return f"serving ({r.get('role', '?')}): CPU {f'{cpu:.0f}' if math.isfinite(cpu) else '?'}%{memory}"


def size_text(count: float) -> str:
    """Bytes as people read them: ``512 B``, ``1.2 KB``, ``606 KB``, ``3.4 MB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" or count >= 10 else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GB"


def variables_text(variables: list[dict]) -> str:
    """What a parameter server holds: ``holds 8 variables, 592 KB``."""
    total = sum(v.get("bytes") or 0 for v in variables)
    return f"holds {len(variables)} variable{'s' * (len(variables) != 1)}, {size_text(total)}"


MAX_LINE_TEXT = 2000  # a record's line in the events list: a host's megabyte of "error" is cut here


def record_text(r: dict) -> str:
    """A task's record as a line of the events list: an epoch, an event, or a line that was no record. A record
    of a shape no task of tfcc's writes (a field of another type: a host's) is said as such, never an error."""
    kind = r.get("type")
    try:
        if kind == RecordType.EPOCH:
            text = epoch_text(r)
        elif kind == RecordType.UNREADABLE:
            text = unreadable_text(r)
        else:
            text = event_text(r)
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
        text = f"a record of an unknown shape: {str(r)[:200]}"
    return text if len(text) <= MAX_LINE_TEXT else text[:MAX_LINE_TEXT - 1] + "…"


def event_line(e: dict) -> str:
    """An item of a metrics store's events: the console's own words, or its record worded."""
    return e["text"] if "text" in e else record_text(e.get("record") or {})


def after_training_text(r: dict) -> str:
    """What a task does after its last epoch, from its newest event (the progress line says it)."""
    name = r.get("event")
    if name == Event.SAVING:
        return "saving the model…"
    if name == Event.SAVED:
        return f"model saved in {metric_text(r.get('seconds'), 1)} s; ending…"
    return "finished"


def marker_text(marker) -> str:
    """A marker on the plots' time axis (console.store.metrics.Marker), as its tooltip says it."""
    if marker.kind == marker.RESTART:
        changes = changes_text(marker.changed)
        return (f"attempt {marker.attempt} took up training at step {int(marker.step)}"
                + (f"; changed since the backup: {changes}" if changes else ""))
    if marker.kind == marker.STALL:
        return f"{marker.task} stalled: {marker.words}"
    return (f"{marker.task}: {marker.metric} is {metric_text(marker.value)} at step "
            f"{count(metric_value(marker.step) - 1)}")


def marker_label(marker) -> str:
    """A marker's short label on the plot: ``attempt 2`` (``attempt 3: 2 workers`` when an elastic run changed size),
    ``stall``, ``NaN``."""
    if marker.kind == marker.RESTART:
        workers = (marker.changed or {}).get("num_workers")
        size = (f": {_plan_value(workers[1])} workers" if isinstance(workers, (list, tuple)) and len(workers) == 2
                else "")
        return f"attempt {marker.attempt}{size}"
    return {marker.STALL: "stall", marker.NAN: "NaN"}.get(marker.kind, marker.kind)


_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` a host sent, as a terminal may show it: a carriage return ends a line (a progress bar's
    updates), every other control character (an escape sequence, a bell) is shown as ``\\xNN``, never run."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def duration_text(seconds) -> str:
    """``1:02:03``; ``-`` for no duration."""
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        return "-"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def start_text(when) -> str:
    """``2026-11-24 10:10`` in local time; ``-`` for no time."""
    if not isinstance(when, (int, float)) or not math.isfinite(when):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(when))


def settings_text(cluster) -> str:
    """A run's key settings in a few words: ``multi_worker_mirrored, batch 32 per replica, 8 epochs, lr 0.001``
    (a script: its file and the strategy tfcc sets up)."""
    t = cluster.training
    strategy = getattr(t, "strategy", "auto")
    if t.user_code:
        return f"{'module' if t.module else 'script'} {t.code_name}, strategy {strategy}"
    batch = f"global batch {t.global_batch}" if t.global_batch else f"batch {t.per_replica_batch} per replica"
    return f"{t.workload}, strategy {strategy}, {batch}, {t.epochs} epochs, lr {metric_text(t.learning_rate)}"


def hosts_words(hosts: dict) -> str:
    """``2 workers, 1 ps on 2 hosts`` from {host: [task names]}."""
    roles: dict[str, int] = {}
    for tasks in hosts.values():
        for task in tasks:
            role = str(task).rpartition("-")[0] or str(task)
            roles[role] = roles.get(role, 0) + 1
    said = ", ".join(f"{n} {role}{'s' * (n != 1 and role != PS)}" for role, n in roles.items())
    return f"{said} on {len(hosts)} host{'s' * (len(hosts) != 1)}" if hosts else ""


def machines_words(names: list[str], machines: dict[str, list[int]]) -> str:
    """``2 workers on 2 hosts`` of a cluster: its task ``names``, and where its placement plans them (machine ->
    the indexes of its tasks: console.run.placement.Placement.machines)."""
    placed = sorted((tasks, machine) for machine, tasks in machines.items() if tasks)  # the first task's first
    return hosts_words({machine: [names[i] for i in tasks] for tasks, machine in placed})


def job_words(job: dict) -> str:
    """A Slurm run's job in a few words: "Slurm job 12: pending (Resources)", "... running on node[1-2]"."""
    state = str(job.get("state") or "?").lower()
    words = f"Slurm job {job.get('job_id', '?')}: {state}"
    if job.get("reason") and state != "running":
        words += f" ({job['reason']})"
    if job.get("nodes"):
        words += f" on {job['nodes']}"
    return words


def refreshed_words(root: Path, refreshed: dict[str, dict]) -> str:
    """What a person's resume did to the tasks' copies of a script's files (each host's ``work_refreshed``,
    hostile data), in one line."""
    def names(key: str) -> list[str]:
        found = {n for r in refreshed.values() if isinstance(r.get(key), list) for n in r[key][:50]
                 if isinstance(n, str)}
        return sorted(printable(n[:200]) for n in found)

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
