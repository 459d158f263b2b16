"""Append-only JSON-lines metrics file, written by a background thread.

The training step only puts a dict on a queue; a writer thread serialises each
record and flushes it line by line, so a reader following the file (the agent)
sees every record as soon as it is complete and never a half line.
The record schema is documented in docs/metrics.md.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import queue
import threading
import time
from pathlib import Path

from agent.protocol import ATTEMPT_VARIABLE, METRICS, RUN_DIR_VARIABLE
from trainer.records import GLOBAL_STEP, RecordType
from trainer.tf_config import tf_config_as_given

log = logging.getLogger("trainer.metrics")

_STOP = object()

def _clean(value):
    """JSON has no NaN or infinity: write null (a diverged loss stays visible as null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def attempt_from_environment() -> int:
    """Which launch of its run this process is (tfcc's agent says; 1 when run by hand)."""
    try:
        return max(1, int(os.environ.get(ATTEMPT_VARIABLE, "1")))
    except ValueError:
        return 1


class MetricsWriter:
    """Writes records to ``path`` from a background thread.

    ``base`` fields (task type and index) are added to every record, and the attempt (which
    launch of the run wrote it).
    """

    def __init__(self, path: str | os.PathLike, base: dict | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._base = {"attempt": attempt_from_environment(), **(base or {})}
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._file = open(self.path, "a", encoding="utf-8")
        self._closed = False
        self._said: set[str] = set()  # events said once per process (event_once)
        self._thread = threading.Thread(target=self._run, name="tfcc-metrics-writer", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # what is queued reaches the file before the process ends

    _shared: dict = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, path: str | os.PathLike, base: dict | None = None) -> "MetricsWriter":
        """The process's one writer of ``path``: tfcc's capture and a script's own ``MetricsReporter``
        append through it, so their records keep one order and none is said twice."""
        key = os.path.abspath(path)
        with cls._shared_lock:
            writer = cls._shared.get(key)
            if writer is None or writer._closed:
                writer = cls._shared[key] = cls(path, base)
            return writer

    def set_base(self, **fields) -> None:
        self._base.update(fields)

    def event_once(self, name: str, **fields) -> bool:
        """``event`` unless this writer has said ``name`` already (whoever said it); whether it did now."""
        with self._shared_lock:
            if name in self._said:
                return False
            self._said.add(name)
        self.event(name, **fields)
        return True

    def said(self, name: str) -> bool:
        return name in self._said

    def write(self, record: dict) -> None:
        """Queue one record; never blocks on the disk."""
        if self._closed:
            raise RuntimeError("metrics writer is closed")
        self._queue.put({**self._base, **record})

    def event(self, name: str, **fields) -> None:
        self.write({"type": RecordType.EVENT, "event": name, "time": time.time(), **fields})

    def _run(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while True:  # what else is queued goes out with it: one write and one flush (whole lines)
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            lines = []
            for record in batch:
                if record is _STOP:
                    stop = True
                    break
                try:
                    lines.append(json.dumps(_clean(record), separators=(",", ":"), default=str) + "\n")
                except Exception:  # keep writing the next records whatever one of them holds
                    log.exception("could not write a metrics record")
            if lines:
                try:
                    self._file.write("".join(lines))
                    self._file.flush()
                except Exception:
                    log.exception("could not write %d metrics records", len(lines))
        self._file.close()

    def close(self, timeout: float = 30.0) -> None:
        """Write everything queued so far, then close the file."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout)


def read_records(path: str | os.PathLike) -> list[dict]:
    """All complete records of a metrics file (a trailing partial line is ignored)."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n"):
                records.append(json.loads(line))
    return records


def _number(value):
    """A value a script reports, as a float (a tensor's or a NumPy scalar's too); None if it is none."""
    try:
        return float(value.numpy() if hasattr(value, "numpy") else value)
    except (TypeError, ValueError):
        return None


_reported = {"steps": 0}


def report(step: int | None = None, *, epoch: int | None = None, **values) -> None:
    """Write one record of a script's own metrics to its tfcc metrics file, from any loop, under any
    strategy (docs/your-script.md)::

        report(step=step, loss=loss, learning_rate=lr)   # a step record
        report(epoch=epoch, val_accuracy=acc)            # an epoch record (no step given)

    ``step`` is the global step (the plots' x); values are numbers (tensors and NumPy scalars too).
    It writes to ``$TFCC_RUN_DIR/metrics.jsonl`` (``./metrics.jsonl`` outside tfcc); it never blocks.
    """
    task = tf_config_as_given().task
    writer = MetricsWriter.shared(Path(os.environ.get(RUN_DIR_VARIABLE, ".")) / METRICS,
                                  {"task_type": task.type, "task_index": task.index})
    kind = RecordType.EPOCH if step is None and epoch is not None else RecordType.STEP
    record: dict = {"type": kind, "time": time.time()}
    if epoch is not None:
        record["epoch"] = int(epoch)
    if record["type"] == RecordType.STEP:
        _reported["steps"] += 1
        record[GLOBAL_STEP] = int(step) if step is not None else _reported["steps"]
    for name, value in values.items():
        number = _number(value)
        if number is not None:
            record[name] = number
    writer.write(record)
