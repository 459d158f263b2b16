"""The metrics file's vocabulary: record types, event names, the fields that are no metric, a line read.

Standard library only (Python 3.9+): the trainer and the capture around a user's script write these
records on the hosts, the console reads them; docs/metrics.md says what each one holds. A record is a
JSON object on a line with a string ``type``; ``decode_line`` is the one reading of such a line.
"""

from __future__ import annotations

import json
import math


class RecordType:
    """A record's ``type``."""

    STEP = "step"              # one training step of one worker (or a captured step: ``captured``)
    EPOCH = "epoch"            # an epoch's end: its training and validation metrics
    EVENT = "event"            # a moment of the task's life (``event``: one of Event's names)
    ALIVE = "alive"            # a parameter-server worker or ps says it serves, with its CPU and memory
    SYSTEM = "system"          # a host's load (the agent's system op, added by the console; not in the file)
    UNREADABLE = "unreadable"  # what ``decode_line`` makes of a line that is no record: it keeps the line
    BREAKDOWN = "breakdown"    # where one worker's step time went, measured when asked (trainer/breakdown.py)
    METRICS = (STEP, EPOCH)    # the records that carry training metrics
    ALL = (STEP, EPOCH, EVENT, ALIVE, SYSTEM, UNREADABLE, BREAKDOWN)


class Event:
    """An ``event`` record's ``event``, in the order a task meets them."""

    LAUNCHED = "launched"              # the process started and its TF_CONFIG is valid
    CLUSTER_FORMED = "cluster_formed"  # the strategy exists: every task of the cluster joined
    SERVING = "serving"                # a parameter-server worker or ps serves (the coordinator drives it)
    EVALUATING = "evaluating"          # the evaluator waits for the chief's checkpoints
    STARTED = "started"                # training starts: the strategy and the batch plan
    RESUMED = "resumed"                # an attempt took up the backup every task holds
    TRAIN_BEGIN = "train_begin"        # a user's script's fit begins (the capture)
    BACKING_UP = "backing_up"          # a backup is being written
    BACKED_UP = "backed_up"            # a backup is on disk
    TRAIN_END = "train_end"            # a user's script's fit ended (the capture)
    EVALUATED = "evaluated"            # the evaluator evaluated an epoch's checkpoint
    SAVING = "saving"                  # training is done; the model is being saved
    SAVED = "saved"                    # the model is saved
    FINISHED = "finished"              # training and saving are done
    FAILED = "failed"                  # the task stops on an error (``error`` says what to do)
    ALL = (LAUNCHED, CLUSTER_FORMED, SERVING, EVALUATING, STARTED, RESUMED, TRAIN_BEGIN, BACKING_UP, BACKED_UP,
           TRAIN_END, EVALUATED, SAVING, SAVED, FINISHED, FAILED)
    UP = (SERVING, EVALUATING)         # a task that takes no part in synchronous training is up
    LIFE = (LAUNCHED, CLUSTER_FORMED, SERVING, EVALUATING, STARTED, RESUMED, TRAIN_BEGIN, TRAIN_END, FAILED,
            FINISHED)                  # the moments supervision takes a task's state from
    QUIET = (BACKING_UP, BACKED_UP, RESUMED)  # bookkeeping, or said once for the run: not in the lines people read
    AFTER_TRAINING = (SAVING, SAVED, FINISHED)  # what a task does after its last epoch


# A user's script run by tfcc's capture (trainer/capture.py) says so in its launched event's workload, and its
# records that come from no reporter say where they come from in ``captured``.
# What a backup records of the plan it was made under (trainer.plan's words, and the seed, which orders the input
# stream); a ``resumed`` event's ``changed`` says which of them differ now: {field: [the backup's, now]}.
LOST_PEER = "lost contact with another task of the cluster"  # how a trainer says a peer went away (UnavailableError)
PLAN_FIELDS = ("num_workers", "num_replicas", "per_replica_batch", "global_batch", "steps_per_epoch", "learning_rate",
               "seed")

SCRIPT_WORKLOAD = "script"
CAPTURED = "captured"
FROM_SUMMARY, FROM_PRINT, FROM_SCHEDULE = "summary", "print", "schedule"
# A script's records go on one step axis that never goes back: a later ``fit`` of the same script (train, restore,
# train again) says which it is in ``fit`` (2, 3, ...) and goes on after what came before; a summary whose own step
# is not the optimizer's (``step=epoch``) is put at the optimizer's step when it was written, its own in
# ``summary_step``.
FIT, SUMMARY_STEP = "fit", "summary_step"

# A record's place on the run's one step axis, the same on every task: what the plots draw against.
GLOBAL_STEP = "global_step"
# A step's loss: ``loss``, the step's own (the trainer instruments the step), else ``loss_avg``, Keras's running
# mean over the epoch so far (a model whose step cannot be instrumented; parameter-server training).
LOSS, LOSS_AVG = "loss", "loss_avg"
LOSS_FIELDS = (LOSS, LOSS_AVG)

# Fields of a step or epoch record that say where and when it is, not how training goes: every other
# numeric field is a metric.
PLACE_FIELDS = frozenset({"type", "task_type", "task_index", "time", "epoch", "step", GLOBAL_STEP, "attempt",
                          "steps", "event", CAPTURED, FIT, SUMMARY_STEP})


MAX_FIELDS = 1000  # a record with more fields is no tfcc record: kept as unreadable (its fields would be columns)
MAX_DEPTH = 16     # nested deeper than this: the same
MAX_RAW = 4096     # an unreadable record keeps this much of its line (the file on the host has all of it)


def _too_deep(value, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return True
    if isinstance(value, dict):
        return any(isinstance(v, (dict, list)) and _too_deep(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(isinstance(v, (dict, list)) and _too_deep(v, depth + 1) for v in value)
    return False


def decode_line(line: str) -> dict:
    """One line of a metrics file as a record: a JSON object with a string ``type``, else an
    ``unreadable`` record that keeps the line (a damaged file loses nothing it has); one with more than
    ``MAX_FIELDS`` fields or nested deeper than ``MAX_DEPTH`` is unreadable too (a hostile task's)."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        record = None
    if isinstance(record, dict) and isinstance(record.get("type"), str):
        if len(record) <= MAX_FIELDS and not _too_deep(record):
            return record
        return {"type": RecordType.UNREADABLE, "raw": line[:MAX_RAW],
                "why": f"over {MAX_FIELDS} fields or nested over {MAX_DEPTH} deep"}
    return {"type": RecordType.UNREADABLE, "raw": line[:MAX_RAW]}


def number(value) -> float:
    """A record's field as a float: NaN for a missing, non-finite or non-numeric one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def step_loss(record: dict):
    """A step record's loss as written: its ``loss``, else its ``loss_avg``; None when it has neither."""
    return record.get(LOSS, record.get(LOSS_AVG))


def metrics_of(record: dict) -> dict:
    """The metrics of an epoch record (its fields but the place ones and its duration), or a ``finished``
    or ``evaluated`` event's ``metrics``."""
    if record.get("type") == RecordType.EVENT:
        metrics = record.get("metrics")
        return dict(metrics) if isinstance(metrics, dict) else {}
    return {k: v for k, v in record.items() if k not in PLACE_FIELDS and k != "epoch_time"}


class Batch:
    """A task's records as they came, sorted by type once: what the console's store, cache and supervision
    each read of them, without going through the records again."""

    __slots__ = ("records", "steps", "others", "resumes", "started", "launched_at", "last_metrics")

    def __init__(self, records: list):
        self.records = records
        self.steps: list[dict] = []
        self.others: list[dict] = []     # every record but the steps, in order
        self.resumes: list[int] = []     # where in ``records`` the resumed events are (an attempt's cut)
        self.started: dict | None = None  # the first started event
        self.launched_at: float | None = None  # the earliest launch's time
        self.last_metrics: dict | None = None  # the last record with a task's final metrics (epoch, finished)
        for i, r in enumerate(records):
            kind = r.get("type")
            if kind == RecordType.STEP:
                self.steps.append(r)
                continue
            self.others.append(r)
            if kind == RecordType.EPOCH:
                self.last_metrics = r
            elif kind == RecordType.EVENT:
                name = r.get("event")
                if name == Event.RESUMED:
                    self.resumes.append(i)
                elif name == Event.STARTED and self.started is None:
                    self.started = r
                elif name == Event.LAUNCHED:
                    when = number(r.get("time"))
                    if math.isfinite(when) and (self.launched_at is None or when < self.launched_at):
                        self.launched_at = when
                elif name in (Event.FINISHED, Event.EVALUATED) and isinstance(r.get("metrics"), dict):
                    self.last_metrics = r

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def split_at_resumes(self) -> list[Batch]:
        """The batch cut after each resumed event: each attempt's steps after its own cut."""
        if not self.resumes or self.resumes == [len(self.records) - 1]:
            return [self]
        parts, start = [], 0
        for i in self.resumes:
            parts.append(Batch(self.records[start:i + 1]))
            start = i + 1
        if start < len(self.records):
            parts.append(Batch(self.records[start:]))
        return parts
