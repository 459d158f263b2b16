"""``python trainer/capture.py SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``): run a user's script unchanged
and capture its training.

It runs as ``python SCRIPT ARGS`` (``python -m MODULE ARGS``) would, and what it trains is captured from the
outside (docs/your-script.md).

The script runs as ``__main__`` with its own ``sys.argv`` and its folder first on ``sys.path``
(as ``coverage run`` and ``python -m cProfile`` run one); a module with the folder it runs in first, its
package imported as ``python -m`` imports it (so ``from . import model`` works). Nothing is imported before the script
imports it: an import hook patches TensorFlow and Keras the moment the script first imports them.
What is captured goes to the task's metrics file (``$TFCC_RUN_DIR/metrics.jsonl``), the records of
docs/metrics.md:

- every Keras ``fit`` (tf-keras or Keras 3, any strategy) gets tfcc's ``MetricsReporter`` unless it
  has one: the step loss, step time, throughput, each epoch's and validation metrics, the batch
  ``fit`` trains with (the ``started`` event);
- every ``tf.summary`` scalar the script writes (its event files are read as they grow: a step record
  per summary step);
- every line it prints with ``name: number`` or ``name = number`` pairs outside ``fit`` (an epoch
  record when the line names an epoch, else a step record);
- ``ClusterCoordinator.schedule`` loops: the steps scheduled and their pace;
- its lifecycle: ``launched``, ``cluster_formed`` (a MultiWorkerMirrored or ParameterServer
  strategy exists), ``serving`` (a parameter-server worker or ps serves; SIGTERM then ends it cleanly).

A Stop's SIGTERM stops a ``fit`` after a step every task agrees on, the script's own ``BackupAndRestore``
backing up there, and ends the process (``trainer.stopping.ScriptStop``); outside ``fit`` it ends it at once.

A failure of the capture itself never fails the script: it is logged to stderr once and the script
goes on. It is started by its path, not with ``-m``: ``-m`` would look for tfcc's ``trainer`` package
in the script's folder first, where many projects have a ``trainer.py`` of their own; when the script's
folder has a ``trainer`` or ``agent`` module, tfcc's own step out of its way (``_own_modules``).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib.abc
import importlib.util
import inspect
import logging
import os
import re
import runpy
import signal
import struct
import sys
import threading
import time
import weakref
from pathlib import Path

if __name__ == "__main__" and __package__ in (None, ""):  # started by its path: tfcc's code is beside it
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from agent.protocol import KERAS_REASON_VARIABLE, METRICS, RUN_DIR_VARIABLE, task_name  # noqa: E402
from trainer.metrics import MetricsWriter  # noqa: E402
from trainer.strategies import Strategy, strategy_name  # noqa: E402
from trainer import stacks  # noqa: E402
from trainer.process import collector_paused, sigterm_back  # noqa: E402
from trainer.records import (CAPTURED, FROM_PRINT, FROM_SCHEDULE, FROM_SUMMARY, GLOBAL_STEP,  # noqa: E402
                             SCRIPT_WORKLOAD, SUMMARY_STEP, Event, RecordType)
from trainer.tf_config import PS, TRAINING_ROLES, WORKER, ClusterConfig, tf_config_as_given  # noqa: E402

log = logging.getLogger("trainer.capture")

SUMMARY_POLL_SECONDS = 1.0   # how often the script's summary event files are read
SUMMARY_FLUSH_MILLIS = 1000  # a summary writer that sets none flushes this often (TensorFlow's default: 2 min)
SCHEDULE_EVERY = 10          # every so many scheduled steps, one is fetched to time the pace


# --------------------------------------------------------------------------- tfcc's own modules

_PACKAGES = ("trainer", "agent")
_OWN: dict = {}  # tfcc's own modules while they stand aside for the script's own of the same names


def _step_aside() -> None:
    """The script has a ``trainer`` or ``agent`` module of its own: its imports get it, not tfcc's."""
    for name in list(sys.modules):
        if name.split(".")[0] in _PACKAGES:
            _OWN[name] = sys.modules.pop(name)


@contextlib.contextmanager
def _own_modules():
    """tfcc's own modules for an import of the capture's (the script's own, if any, stay as they are)."""
    if not _OWN:
        yield
        return
    theirs = {n: sys.modules.pop(n) for n in list(sys.modules) if n.split(".")[0] in _PACKAGES}
    sys.modules.update(_OWN)
    try:
        yield
    finally:
        for name in list(sys.modules):
            if name.split(".")[0] in _PACKAGES:
                _OWN[name] = sys.modules.pop(name)
        sys.modules.update(theirs)


def _shadows(folder: str) -> bool:
    """Whether ``folder`` holds a module named like one of tfcc's packages."""
    return any(os.path.exists(os.path.join(folder, name + ext)) for name in _PACKAGES for ext in (".py", ""))


# --------------------------------------------------------------------------- printed metrics

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
_WORD = r"[A-Za-z_][A-Za-z0-9_./-]*"
# ``name: value`` (a space after the colon: "localhost:12345" is no metric), ``name = value`` or ``name is
# value``; a name may have one word before it ("Test Loss: 0.3", "val loss = 0.4": test_loss, val_loss). A
# value is a whole number: "1,234" is none.
_PAIR = re.compile(r"(?:^|(?<=[\s,;|(\[{]))(?P<name>" + _WORD + r"(?: " + _WORD + r")?)"
                   r"(?:\s*=\s*|:\s+|\s+is\s+)(?P<value>" + _NUMBER + r")(?=$|[\s;|)\]}%]|,(?!\d)|\.(?:\s|$))",
                   re.IGNORECASE)
# Settings printed as they are (argparse's ``Namespace(lr=0.001, ...)``, a config dump): never metrics.
_SETTINGS = re.compile(r"\bNamespace\(|^\s*(?:args|config|params|hparams|flags|settings)\s*[:=]", re.IGNORECASE)
_PLACE = re.compile(r"\b(?P<name>epoch|step)\s+(?P<value>\d+)\b", re.IGNORECASE)  # "Epoch 3/10", "step 40:"
_PLACES = {"epoch": "epoch", "step": "step", GLOBAL_STEP: "step", "iteration": "step", "iter": "step"}
# Without an epoch or a step a line counts only for names that are metrics ("Number of devices: 2" is none).
_METRIC = re.compile(r"loss|acc|auc|precision|recall|lr|learning|err|mse|mae|perplexity|ppl|f1|score|reward|"
                     r"entropy|top\d", re.IGNORECASE)
# After fit, "final loss: 2.30" repeats fit's loss; a name that says evaluation stays as it is.
_REPEATS = frozenset({"final", "last", "train", "training", "trained"})
_EVALUATION = re.compile(r"^(?:val|eval|evaluation|test|valid|validation)(?:_|$)", re.IGNORECASE)
# Keras's progress bar (evaluate, predict, a fit it did not run): no metric of the script's own.
_PROGRESS_BAR = re.compile(r"\d+/\d+ [\[━=.>\s]|[━]|/step\b|\bETA:")


def parse_line(line: str) -> dict | None:
    """The metrics a printed line holds: ``{"epoch"|"step": n, name: value, ...}``; None when it holds
    no value other than where it is (a line like "Epoch 3/10") or nothing that looks like a metric
    without saying its epoch or step ("Number of devices: 2", "Total params: 1,234")."""
    if _PROGRESS_BAR.search(line) or _SETTINGS.search(line):
        return None
    values: dict = {}
    for match in _PAIR.finditer(line):
        words, text = match.group("name").split(" "), match.group("value")
        place = _PLACES.get(words[-1].lower()) if len(words) == 1 else None
        if place is not None:
            if place not in values and re.fullmatch(r"[-+]?\d+(?:\.0*)?", text):
                values[place] = int(float(text))
            continue
        if len(words) == 2 and _PLACES.get(words[0].lower()):  # "epoch 3, loss: ..." read as "Epoch" "3" elsewhere
            words = words[1:]
        try:
            values.setdefault("_".join(words), float(text))
        except ValueError:
            continue
    for match in _PLACE.finditer(line):
        values.setdefault(match.group("name").lower(), int(match.group("value")))
    named = [name for name in values if name not in ("epoch", "step")]
    if not named:
        return None
    if "epoch" not in values and "step" not in values:
        values = {name: value for name, value in values.items() if _METRIC.search(name)}
    return values or None


class _PrintedMetrics:
    """``sys.stdout`` for the script: everything goes through unchanged; each complete line outside
    ``fit`` is also read for metrics."""

    def __init__(self, stream, capture: "Capture"):
        self._stream = stream
        self._capture = capture
        self._partial = ""

    def write(self, text):
        written = self._stream.write(text)
        try:
            if self._capture.fitting or not isinstance(text, str):
                self._partial = ""
                return written
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()[-4096:]
            for line in lines:
                if ":" in line or "=" in line or " is " in line or _PLACE.search(line):
                    self._capture.printed(line)
        except Exception:  # the script's output matters more than its metrics
            self._capture.failed("reading printed metrics")
        return written

    def __getattr__(self, name):
        return getattr(self._stream, name)


# --------------------------------------------------------------------------- summaries


def _tfrecords(data: bytes):
    """Complete TFRecords in ``data`` (length, its CRC, the record, its CRC): (records, bytes used)."""
    records, at = [], 0
    while len(data) - at >= 12:
        (length,) = struct.unpack_from("<Q", data, at)
        end = at + 12 + length + 4
        if end > len(data):
            break
        records.append(data[at + 12:at + 12 + length])
        at = end
    return records, at


class _SummaryFollower:
    """Reads the event files of every summary writer the script made, from where it stopped."""

    def __init__(self, capture: "Capture"):
        self.capture = capture
        self.logdirs: list[str] = []
        self.prefixes: dict[str, str] = {}  # logdir -> what its tags are prefixed with
        self.offsets: dict[str, int] = {}
        self.pending: dict[str, dict] = {}  # event file -> its newest step's row, which may grow yet
        self.writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # writer -> its logdir, as added
        self._lock = threading.Lock()
        self._reading = threading.Lock()  # the follower's thread and the script's end read in turn
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def add(self, logdir) -> str | None:
        """Follow ``logdir``; the folder as followed, or None where it cannot be (a tensor, a bucket)."""
        try:
            logdir = os.fspath(logdir)
        except TypeError:
            return None  # a tensor: the writer's folder is decided in a graph
        if isinstance(logdir, bytes):
            logdir = logdir.decode(errors="replace")
        if "://" in logdir:
            return None  # a bucket (gs://, s3://): not this host's disk
        with self._lock:
            if logdir not in self.logdirs:
                self.logdirs.append(logdir)
                # The first writer's tags as they are; another's under its folder's name ("test/loss" beside
                # the train writer's "loss", as the TensorBoard guide writes them), so none mixes with another.
                self.prefixes[logdir] = "" if len(self.logdirs) == 1 else os.path.basename(
                    os.path.normpath(logdir)) + "/"
            if self._thread is None:
                self._thread = threading.Thread(target=self._follow, name="tfcc-capture-summaries", daemon=True)
                self._thread.start()
        return logdir

    def _follow(self) -> None:
        while True:
            self._wake.wait(SUMMARY_POLL_SECONDS)
            self._wake.clear()
            try:
                self.read()
            except Exception:
                self.capture.failed("reading summaries")

    def writer_made(self, writer, logdir: str) -> None:
        try:
            self.writers[writer] = logdir
        except TypeError:
            pass

    def logdir_of(self, writer) -> str | None:
        """The folder this follows of ``writer``; None for a writer it does not follow."""
        try:
            return self.writers.get(writer)
        except TypeError:
            return None

    def flush(self) -> None:
        """At the script's end: what its writers hold reaches their files, then is read."""
        for writer in list(self.writers.keys()):
            try:
                writer.flush()
            except Exception:
                pass
        self.read(whole=True)

    def read(self, whole: bool = False) -> None:
        """What the event files gained. A step's scalars are events of their own, and a read may end
        between two of them: the newest step of a file waits for a newer one, or for ``whole`` (its
        writer flushed or closed, the script's end), so each step is one record."""
        with self._reading:
            self._read_all(whole)

    def _read_all(self, whole: bool) -> None:
        with self._lock:
            logdirs = list(self.logdirs)
        for logdir in logdirs:
            try:
                names = sorted(n for n in os.listdir(logdir) if _written_here(n))
            except OSError:
                continue
            for name in names:
                self._read_file(logdir, os.path.join(logdir, name), self.prefixes.get(logdir, ""), whole)

    def _read_file(self, logdir: str, path: str, prefix: str, whole: bool) -> None:
        offset = self.offsets.get(path, 0)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(16 << 20)
        except OSError:
            return
        records, used = _tfrecords(data)
        self.offsets[path] = offset + used
        # A row per (summary step, where it goes: None for as written); the newest of the last read first
        rows: dict[tuple, dict] = self.pending.pop(path, {})
        if records:
            from tensorflow.core.util import event_pb2  # the script imported TensorFlow: it made the writer
        for raw in records:
            event = event_pb2.Event.FromString(raw)
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                number = _scalar(value)
                if number is None:
                    continue
                step = int(event.step)
                row = rows.setdefault((step, self.capture.summary_at(logdir, value.tag, step)),
                                      {"time": event.wall_time})
                row[prefix + value.tag] = number
        keys = list(rows)  # in the file's order
        if keys and not whole:
            self.pending[path] = {keys[-1]: rows[keys.pop()]}
        for key in keys:
            step, noted = key
            at, own = ((self.capture.axis.place(("summary", path), step), {}) if noted is None
                       else (noted, {SUMMARY_STEP: step}))
            self.capture.write({"type": RecordType.STEP, GLOBAL_STEP: at, CAPTURED: FROM_SUMMARY, **own,
                                **rows[key]})


def _written_here(name: str) -> bool:
    """Whether an event file is this process's: ``events.out.tfevents.<time>.<host>.<pid>.<n>.v2``.
    Another's (an earlier attempt's, kept in the task's work folder; one shipped with the workdir) is
    history, not this run's curve."""
    if not name.startswith("events.out.tfevents."):
        return False
    parts = name.split(".")  # the host may hold dots: the pid is counted from the end
    return len(parts) >= 7 and parts[-3 if parts[-1] == "v2" else -2] == str(os.getpid())


def _scalar(value) -> float | None:
    """A summary value as a number, when it is a scalar (``tf.summary.scalar``, or a TF1 simple value)."""
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if not value.HasField("tensor"):
        return None
    tensor = value.tensor
    if any(d.size != 1 for d in tensor.tensor_shape.dim):
        return None
    for field in ("float_val", "double_val", "int_val", "int64_val"):
        values = getattr(tensor, field)
        if len(values) == 1:
            return float(values[0])
    content = tensor.tensor_content
    formats = {1: "<f", 2: "<d", 3: "<i", 9: "<q", 19: "<e"}  # DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_HALF
    fmt = formats.get(tensor.dtype)
    if fmt and len(content) == struct.calcsize(fmt):
        return float(struct.unpack(fmt, content)[0])
    return None


# --------------------------------------------------------------------------- scheduled steps


class _ScheduledSteps:
    """A ``ClusterCoordinator.schedule`` loop's steps: counted as scheduled; every ``SCHEDULE_EVERY``-th
    one's result is waited for off the script's thread, which times the pace the workers keep."""

    def __init__(self, capture: "Capture"):
        self.capture = capture
        self.count = 0
        self._lock = threading.Lock()
        self._pending: list = []
        self._ready = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._mark = (0, time.perf_counter())
        self._trained_to = 0  # the optimizer's step (on the axis) at the previous fetch

    def scheduled(self, remote_value) -> None:
        with self._lock:
            self.count += 1
            if self.count % SCHEDULE_EVERY:
                return
            if self._thread is None:
                self._mark = (0, time.perf_counter())
                self._trained_to = self.capture.axis.top  # a loop after fit goes on from fit's last step
                self._thread = threading.Thread(target=self._fetching, name="tfcc-capture-schedule", daemon=True)
                self._thread.start()
            self._pending.append((self.count, remote_value))
            self._ready.notify()

    def _fetching(self) -> None:
        while True:
            with self._lock:
                while not self._pending:
                    self._ready.wait()
                count, remote_value = self._pending.pop(0)
            try:
                remote_value.fetch()
            except Exception:  # a step that failed is the script's to see
                continue
            now = time.perf_counter()
            done = count - self._mark[0]
            took = (now - self._mark[1]) / max(1, done)
            self._mark = (count, now)
            at, _ = self.capture.optimizer_placed()
            if at is not None:
                trained, self._trained_to = at > self._trained_to, max(self._trained_to, at)
                if not trained:
                    continue  # the optimizer took no step: an evaluation loop, no training step
            else:
                at = self.capture.axis.place(("schedule",), count)
            self.capture.write({"type": RecordType.STEP, GLOBAL_STEP: at, "steps": done, "step_time": took,
                                "time": time.time(), CAPTURED: FROM_SCHEDULE})


# --------------------------------------------------------------------------- one step axis


class _StepAxis:
    """The script's one step axis, which never goes back. Each source counts its own steps (a ``fit``, an
    optimizer's ``iterations``, a printed or scheduled count, a summary writer's steps); a count put on the
    axis goes on from where its source's previous count was, and one that went back (a new loop, a restored
    model's fresh optimizer) goes on after everything recorded so far. ``after`` sources (a later fit, a new
    optimizer) start after what came before; a summary's steps, read a second after they were written, are
    taken as they are (other sources may be ahead by then)."""

    MAX_SOURCES = 1000  # the sources kept (a script that makes an optimizer a step forgets the oldest)

    def __init__(self):
        self.top = 0
        self._sources: dict = {}  # key -> [base, last count]
        self._lock = threading.Lock()

    def place(self, key, count: int, after: bool = False) -> int:
        with self._lock:
            source = self._sources.get(key)
            if source is None:
                if len(self._sources) >= self.MAX_SOURCES:
                    self._sources.pop(next(iter(self._sources)))
                source = self._sources[key] = [self.top if after and count <= self.top else 0, count]
            elif count < source[1]:  # the source counts again from the start: after what came before
                source[0] = self.top
            source[1] = count
            at = source[0] + count
            self.top = max(self.top, at)
            return at

    def seen(self, key) -> bool:
        with self._lock:
            return key in self._sources

    def align(self, key, count: int, at: int) -> None:
        """``key``'s count ``count`` is at ``at`` (an optimizer at the end of the fit it trained in)."""
        with self._lock:
            self._sources.pop(key, None)
            if len(self._sources) >= self.MAX_SOURCES:
                self._sources.pop(next(iter(self._sources)))
            self._sources[key] = [at - count, count]
            self.top = max(self.top, at)


# --------------------------------------------------------------------------- the capture


class Capture:
    """What tfcc learns of one script's process, written to its metrics file."""

    MAX_SUMMARY_NOTES = 100_000  # summaries noted as written off the optimizer's step, not yet read

    def __init__(self, writer: MetricsWriter, config: ClusterConfig):
        self.writer = writer
        self.config = config  # the script's TF_CONFIG as given (the script judges it)
        self.cluster = config.cluster
        self._fit_depth = 0
        self._failed: set[str] = set()
        self._printed = 0  # lines of printed metrics without a step of their own
        self._place: dict | None = None  # "epoch 3:" alone on a line: where the next line's values are
        self._progressed = False  # training began: a fit, an optimizer's step, or a printed epoch or step
        self._optimizers: list = []  # weak references, in the order the script made them
        self.axis = _StepAxis()
        self._fits = 0
        # After a fit: the names it reported and the optimizer's step when it ended. A line printed then, the
        # optimizer no further, repeats fit's numbers (not recorded) or, after an ``evaluate``, says evaluation.
        self._fitted: dict | None = None
        self._evaluated = False
        # (logdir, tag, its own step) -> where each write of it goes on the axis, in the order written (None: at its
        # own step); each read of one takes the first
        self._summary_at: dict[tuple, collections.deque] = {}
        self._summary_notes = 0
        self._summary_lock = threading.Lock()  # the script writes, the follower's thread reads
        self.summaries = _SummaryFollower(self)
        self.scheduled = _ScheduledSteps(self)
        self._stop = None  # the stop of the script's fits (trainer/stopping.py), from its first fit

    @property
    def fitting(self) -> bool:
        return self._fit_depth > 0

    def failed(self, what: str) -> None:
        """The capture could not do ``what``: said once on stderr; the script goes on."""
        if what not in self._failed:
            self._failed.add(what)
            log.warning("tfcc could not capture metrics while %s (the script goes on)", what, exc_info=True)

    def write(self, record: dict) -> None:
        record.setdefault("time", time.time())
        self.writer.write(record)

    # ---------------------------------------------------------------- lifecycle

    def launched(self, script: str) -> None:
        try:
            address = self.config.address
        except IndexError:
            address = None  # a task index the cluster lacks: the script will say so
        self.writer.event(Event.LAUNCHED, pid=os.getpid(), address=address, cluster=self.cluster,
                          is_chief=self.config.is_chief, workload=SCRIPT_WORKLOAD, script=script, capture=True,
                          python=sys.version.split()[0], **_keras_reason())
        if self.config.num_workers <= 1 and not self.cluster.get(PS):
            # No peer to wait for: a single task's cluster has formed (its strategy is local).
            self.writer.event_once(Event.CLUSTER_FORMED, strategy=Strategy.LOCAL, num_replicas=None)

    def formed(self, strategy) -> None:
        sigterm_back()  # the script's own SIGTERM handler, else the default: tfcc's stop ends it at once
        self.writer.event_once(Event.CLUSTER_FORMED, strategy=strategy_name(strategy),
                               num_replicas=getattr(strategy, "num_replicas_in_sync", None))

    def serving(self) -> None:
        """A worker or ps of parameter-server training serves: SIGTERM (the run is over) ends it cleanly."""
        self.writer.event_once(Event.SERVING, role=self.config.task.type, strategy=Strategy.PARAMETER_SERVER)

    def join(self, server) -> None:
        """``Server.join()``: serve until SIGTERM (TensorFlow's own join would need a SIGKILL), then end."""
        done = threading.Event()
        try:
            signal.signal(signal.SIGTERM, lambda *_: done.set())
        except ValueError:  # not the main thread: TensorFlow's own join, as the script asked
            self._joining(server)
            return
        while not done.wait(1.0):
            pass
        self.writer.event(Event.FINISHED, metrics={}, train_time=None, model=None, role=self.config.task.type)
        self.writer.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # the server's threads would hold the process up

    # ---------------------------------------------------------------- fit

    def fit(self, original, model, args, kwargs):
        reporter = stop = None
        try:
            signature = inspect.signature(original)
            bound = signature.bind(model, *args, **kwargs)
            callbacks = bound.arguments.get("callbacks")
            if callbacks is None or isinstance(callbacks, (list, tuple)):
                callbacks = list(callbacks or [])
                stop = self._stop_for(model, callbacks)
                if stop is not None:
                    callbacks.append(stop)  # after the script's: they have seen a step before it stops there
                    bound.arguments["callbacks"] = callbacks
                    args, kwargs = bound.args[1:], bound.kwargs
                if not any(getattr(c, "_tfcc_reporter", False) for c in callbacks):
                    with _own_modules():
                        from trainer.report import reporter_for

                    self._fits += 1
                    fit = self._fits
                    reporter = reporter_for(model, path_or_writer=self.writer, lifecycle=True,
                                            place=lambda step: self.axis.place(("fit", fit), step, after=True),
                                            fit=fit if fit > 1 else None)
                    reporter.measure_data = bound.arguments.get("x")  # a breakdown pulls from it when asked
                    callbacks.append(reporter)
                    bound.arguments["callbacks"] = callbacks
                    args, kwargs = bound.args[1:], bound.kwargs
        except Exception:
            self.failed("adding tfcc's reporter to fit")
        self._fit_depth += 1
        self._progressed = True
        history = None
        try:
            history = original(model, *args, **kwargs)
        finally:
            self._fit_depth -= 1
            try:
                self._fit_ended(model, reporter, history)
            except Exception:
                self.failed("noting the end of fit")
        if stop is not None and stop.told:
            self._exit_stopped(stop, model)
        return history

    def _stop_for(self, model, callbacks):
        """The stop of this fit (trainer/stopping.py), watching its ``callbacks``; None: SIGTERM is the script's
        own (a handler of its own, or ignored), or this fit is of the other Keras than the first's."""
        try:
            with _own_modules():
                from trainer.report import callback_class
                from trainer.stopping import GracefulScriptStop, ScriptStop
            cls = callback_class(model, ScriptStop, GracefulScriptStop)
            if self._stop is None:
                if (threading.current_thread() is not threading.main_thread()
                        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
                    return None
                me = task_name(self.config.task.type, self.config.task.index)
                peers = ()
                if strategy_name(model.distribute_strategy) == Strategy.MULTI_WORKER_MIRRORED:
                    peers = tuple(name for role in TRAINING_ROLES for name in
                                  (task_name(role, i) for i in range(len(self.cluster.get(role) or [])))
                                  if name != me)
                self._stop = cls(me, peers)
                self._stop.install()
            if not isinstance(self._stop, cls):
                return None
            self._stop.watch(callbacks)
            return self._stop
        except Exception:
            self.failed("adding tfcc's stop to fit")
            return None

    def _exit_stopped(self, stop, model) -> None:
        """A stop's end: what the script keeps is said, what was captured is written, and the process ends as the
        trainer's does (``EXIT_STOPPED``); the script's code after its fit does not run."""
        with _own_modules():
            from trainer.stopping import EXIT_STOPPED
        if stop.stopped_at is None:
            at, kept = "at the end of fit", "fit had ended: its backups are as it left them"
        else:
            # The optimizer's count: the run's step (a resumed fit's goes on from its backup's), as recorded.
            at = f"after step {_iterations(getattr(model, 'optimizer', None)) or stop.stopped_at}"
            kept = "; ".join(stop.said) or "the script keeps no BackupAndRestore: nothing was backed up"
        print(f"tfcc: stopped on SIGTERM {at}; {kept}", file=sys.stderr, flush=True)
        try:
            sys.stdout.flush()
            self.summaries.flush()
            self.writer.close()
        finally:
            os._exit(EXIT_STOPPED)

    def _fit_ended(self, model, reporter, history) -> None:
        """Fit's optimizer goes on the axis where fit left it (a later print or schedule is placed after it);
        what fit reported is kept for the lines printed next."""
        last = getattr(reporter, "_coordinated", None) or reporter
        optimizer = getattr(model, "optimizer", None)
        end = _iterations(optimizer)
        if last is not None and last._at is not None and end is not None:
            self.axis.align(("optimizer", id(optimizer)), end, last._at)
        names = set(getattr(history, "history", None) or {})
        self._fitted = {"names": {name.lower() for name in names}, "top": self.axis.top, "restored": False}
        self._evaluated = False

    def restored(self, *_) -> None:
        """The script restored a model or checkpoint (``load_model``, ``load_weights``, a ``tf.train.Checkpoint``'s
        ``restore`` or ``read``, an optimizer's own variables): an optimizer first seen after a fit has the count
        it was saved at, not steps trained since."""
        if self._fitted is not None and not self.fitting:
            self._fitted["restored"] = True

    def _quietly(self, original, model, *args, **kwargs):
        self._fit_depth += 1
        try:
            return original(model, *args, **kwargs)
        finally:
            self._fit_depth -= 1

    def _evaluating(self, original, model, *args, **kwargs):
        """``evaluate``: what is printed next is evaluation (a restored model's, or after training)."""
        try:
            return self._quietly(original, model, *args, **kwargs)
        finally:
            self._evaluated = True

    # ---------------------------------------------------------------- printed lines

    def optimizer_made(self, optimizer) -> None:
        try:
            self._optimizers.append(weakref.ref(optimizer))
        except TypeError:
            return
        self._optimizers = [ref for ref in self._optimizers[-100:] if ref() is not None]

    def _newest_optimizer(self):
        for ref in self._optimizers[::-1]:
            optimizer = ref()
            if optimizer is not None:
                return optimizer
        return None

    def _optimizer_step(self) -> int | None:
        """The steps the script's newest optimizer has applied (its ``iterations``), where it can be read now."""
        return _iterations(self._newest_optimizer())

    def optimizer_placed(self) -> tuple[int | None, object]:
        """(the newest optimizer's step on the axis, its source key), or (None, None) without one. An optimizer
        first seen after a fit and a restore is a restored model's: it is where training is, whatever count it
        was saved at, and has trained only once its count grows."""
        optimizer = self._newest_optimizer()
        step = self._optimizer_step()
        if step is None:
            return None, None
        key = ("optimizer", id(optimizer))
        if self._fitted is not None and self._fitted["restored"] and not self.axis.seen(key):
            self.axis.align(key, step, self.axis.top)
        return self.axis.place(key, step, after=True), key

    def printed(self, line: str) -> None:
        if self._serves():  # a parameter server or a worker that serves: what it prints is no training number
            return
        values = parse_line(line)
        if values is None:
            place = {m.group("name").lower(): int(m.group("value")) for m in _PLACE.finditer(line)}
            self._place = place or None  # "epoch 3:" then "loss=2.44" on the next line
            return
        if self._place and "epoch" not in values and "step" not in values:
            values = {**self._place, **values}
        self._place = None
        step = self._optimizer_step()
        placed = "epoch" in values or "step" in values
        if placed:
            self._progressed = True
        elif not (self._progressed or step):
            return  # nothing trained yet: settings or a description printed before training, not progress
        at = self.optimizer_placed()[0] if step is not None else None
        if not placed and self._fitted is not None and (at is None or at <= self._fitted["top"]):
            values = self._after_fit(values)  # nothing trained since fit: its numbers again, or evaluation
            if not values:
                return
        record = {CAPTURED: FROM_PRINT, **values}
        if "epoch" in values and "step" not in values:
            record["type"] = RecordType.EPOCH
            if at is not None:
                record[GLOBAL_STEP] = at
        else:
            self._printed += 1
            record["type"] = RecordType.STEP
            record[GLOBAL_STEP] = at if at is not None else self.axis.place(
                ("print",), int(values.get("step", self._printed)), after=True)
        self.write(record)

    def _after_fit(self, values: dict) -> dict:
        """A line printed after ``fit`` with no training since: after an ``evaluate``, evaluation (a name that
        does not say so gets ``eval_``); else what fit reported already ("final loss: 2.30" beside fit's own
        loss) is left out and the rest kept."""
        kept = {}
        for name, value in values.items():
            words = name.lower().split("_")
            said = words[-1] if len(words) == 2 and words[0] in _REPEATS else name.lower()
            if self._evaluated:
                kept[name if _EVALUATION.search(name) else f"eval_{said}"] = value
            elif said not in self._fitted["names"]:
                kept[name] = value
        return kept

    # ---------------------------------------------------------------- patches

    def patch(self, name: str, module) -> None:
        """Patch ``module`` (``tensorflow``, ``keras`` or ``tf_keras``, just imported)."""
        patches = {"tensorflow": self._patch_tensorflow, "keras": self._patch_keras, "tf_keras": self._patch_keras}
        try:
            patches[name](module)
        except Exception:
            self.failed(f"patching {name}")

    def _patch_keras(self, keras) -> None:
        model = getattr(keras, "Model", None)
        if model is not None and not getattr(model.fit, "_tfcc", False):
            original = model.fit
            capture = self

            @functools.wraps(original)
            def fit(self, *args, **kwargs):
                return capture.fit(original, self, args, kwargs)

            fit._tfcc = True
            model.fit = fit
            for name in ("predict", "summary"):  # what these print is Keras's, not the script's
                _replace(model, name, self._quietly)
            _replace(model, "evaluate", self._evaluating)  # the same; and the script's next lines are evaluation
            _after(model, "load_weights", self.restored)
        for api in (getattr(keras, "models", None), getattr(keras, "saving", None)):
            _then(api, "load_model", self.restored)
        optimizers = getattr(keras, "optimizers", None)
        for cls in {getattr(optimizers, "Optimizer", None), getattr(getattr(optimizers, "legacy", None),
                                                                     "Optimizer", None)} - {None}:
            _after(cls, "__init__", lambda optimizer, *_: self.optimizer_made(optimizer))
            if hasattr(cls, "load_own_variables"):  # a .keras file's optimizer
                _after(cls, "load_own_variables", self.restored)

    def _patch_tensorflow(self, tf) -> None:
        from tensorflow.python.checkpoint import checkpoint as checkpoints
        from tensorflow.python.distribute import collective_all_reduce_strategy as mwms
        from tensorflow.python.distribute import parameter_server_strategy_v2 as pss
        from tensorflow.python.distribute.coordinator import cluster_coordinator as coordinator
        from tensorflow.python.training import server_lib

        for cls in (mwms.CollectiveAllReduceStrategy, pss.ParameterServerStrategyV2):
            _after(cls, "__init__", lambda strategy, *_: self.formed(strategy))
        _after(server_lib.Server, "__init__", lambda server, *_: self._server_made())
        for name in ("restore", "read"):
            _after(checkpoints.Checkpoint, name, self.restored)
        _replace(server_lib.Server, "join", lambda original, server: (
            self.join(server) if self._serves() else original(server)))
        _after(coordinator.ClusterCoordinator, "schedule",
               lambda result, *_: None if self.fitting else self.scheduled.scheduled(result), with_result=True)
        from tensorflow.python.ops import summary_ops_v2

        original = summary_ops_v2.create_file_writer_v2
        if getattr(original, "_tfcc", False):
            return

        @functools.wraps(original)
        def create_file_writer(logdir, max_queue=None, flush_millis=None, *args, **kwargs):
            if self.fitting:  # Keras's TensorBoard callback: fit is captured already
                return original(logdir, max_queue, flush_millis, *args, **kwargs)
            writer = original(logdir, max_queue, SUMMARY_FLUSH_MILLIS if flush_millis is None else flush_millis,
                              *args, **kwargs)
            followed = self.summaries.add(logdir)
            if followed is not None:
                self.summaries.writer_made(writer, followed)
            for name in ("flush", "close"):  # read at once what they write: a worker may delete its folder next
                _then(writer, name, self._flushed)
            return writer

        create_file_writer._tfcc = True
        original_write = summary_ops_v2.write

        @functools.wraps(original_write)
        def write(tag, tensor, step=None, *args, **kwargs):
            if not self.fitting:
                self._summary_written(summary_ops_v2, tf, tag, step)
            return original_write(tag, tensor, step, *args, **kwargs)

        write._tfcc = True
        # At their source (an API module made later, "import tensorflow.summary", copies them from there) and
        # in every API module that has them already (tf.summary, tf.compat.v2.summary).
        summary_ops_v2.create_file_writer_v2 = create_file_writer
        summary_ops_v2.write = write
        for module in list(sys.modules.values()):
            if getattr(module, "create_file_writer", None) is original:
                module.create_file_writer = create_file_writer
            if getattr(module, "write", None) is original_write:
                module.write = write

    def _summary_written(self, summary_ops_v2, tf, tag, step) -> None:
        """A summary written outside a graph (a custom loop's per-epoch ``tf.summary.scalar(..., step=epoch)``):
        its step, and the optimizer's now, so that reading it puts it where training was."""
        try:
            if not tf.executing_eagerly():
                return  # in a tf.function: its step is a tensor of the graph (commonly the optimizer's)
            logdir = self.summaries.logdir_of(getattr(summary_ops_v2._summary_state, "writer", None))
            if logdir is None or not bool(summary_ops_v2.should_record_summaries()):
                return  # nothing written where the follower reads: nothing to place
            own = summary_ops_v2.get_step() if step is None else step
            optimizer = self._optimizer_step()
            if own is None or optimizer is None:
                return
            own = int(own.numpy() if hasattr(own, "numpy") else own)
            if not isinstance(tag, str):
                return
            # Off the optimizer's step it counts something else (epochs, most often): placed where training is.
            at = self.optimizer_placed()[0] if own != optimizer else None
            with self._summary_lock:
                key = (logdir, tag, own)
                notes = self._summary_at.get(key)
                if notes is None:
                    if at is None:
                        return  # at its own step, as a write that was not noted is
                    notes = self._summary_at[key] = collections.deque()
                while self._summary_notes >= self.MAX_SUMMARY_NOTES:  # writes never read (a writer not followed)
                    oldest = next(iter(self._summary_at))
                    self._summary_notes -= len(self._summary_at.pop(oldest))
                    if oldest == key:
                        notes = self._summary_at[key] = collections.deque()
                notes.append(at)
                self._summary_notes += 1
        except Exception:
            self.failed("noting a summary's step")

    def summary_at(self, logdir: str, tag: str, own: int) -> int | None:
        """Where the summary ``tag`` written into ``logdir`` at its step ``own`` goes on the axis, read once per
        write in the order written: a step placed where training was when it was written off the optimizer's
        step; None: at its own step."""
        key = (logdir, tag, own)
        with self._summary_lock:
            notes = self._summary_at.get(key)
            if not notes:
                return None
            at = notes.popleft()
            self._summary_notes -= 1
            if not notes:
                del self._summary_at[key]
            return at

    def _flushed(self) -> None:
        try:
            self.summaries.read(whole=True)
        except Exception:
            self.failed("reading summaries")

    def _joining(self, server) -> None:
        type(server).join.__wrapped__(server)

    def _serves(self) -> bool:
        return self.config.task.type in (WORKER, PS) and bool(self.cluster.get(PS))

    def _server_made(self) -> None:
        if self._serves():
            self.serving()


def _iterations(optimizer) -> int | None:
    """The steps ``optimizer`` has applied (its ``iterations``), where it can be read now."""
    if optimizer is None:
        return None
    try:
        return int(optimizer.iterations.numpy())
    except Exception:
        return None


def _keras_reason() -> dict:
    """``{"keras_reason": ...}``: the Keras tfcc gave the script and why, as the console said it; {} without."""
    reason = os.environ.get(KERAS_REASON_VARIABLE)
    return {"keras_reason": reason[:300]} if reason else {}


def _after(cls, name: str, then, with_result: bool = False) -> None:
    """Patch ``cls.name`` to call ``then(self, ...)`` (or ``then(result, self, ...)``) after it returns."""
    original = cls.__dict__.get(name) or getattr(cls, name)
    if getattr(original, "_tfcc", False):
        return

    @functools.wraps(original)
    def patched(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        try:
            then(*((result, self) if with_result else (self,)), *args)
        except Exception:
            log.warning("tfcc's capture after %s.%s failed (the script goes on)", cls.__name__, name, exc_info=True)
        return result

    patched._tfcc = True
    setattr(cls, name, patched)


def _then(owner, name: str, then) -> None:
    """``owner.name(...)`` (a writer's method, on this object only; an API module's function) calls ``then()``
    after it returns; ``then``'s failure is logged, the script goes on."""
    original = getattr(owner, name, None)
    if original is None or getattr(original, "_tfcc", False):
        return

    @functools.wraps(original)
    def patched(*args, **kwargs):
        result = original(*args, **kwargs)
        try:
            then()
        except Exception:
            log.warning("tfcc's capture after %s failed (the script goes on)", name, exc_info=True)
        return result

    patched._tfcc = True
    try:
        setattr(owner, name, patched)
    except (AttributeError, TypeError):
        pass


def _replace(cls, name: str, body) -> None:
    """Patch ``cls.name`` to ``body(original, self, ...)``."""
    original = cls.__dict__.get(name) or getattr(cls, name)
    if getattr(original, "_tfcc", False):
        return

    @functools.wraps(original)
    def patched(self, *args, **kwargs):
        return body(original, self, *args, **kwargs)

    patched._tfcc = True
    setattr(cls, name, patched)


class _PatchingFinder(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow``, ``keras`` and ``tf_keras`` as Python would, and patches each once it is
    loaded (whichever the script imports first, and whenever)."""

    NAMES = ("tensorflow", "keras", "tf_keras")

    def __init__(self, capture: Capture):
        self.capture = capture
        self._finding: set[str] = set()

    def find_spec(self, name, path=None, target=None):
        if name not in self.NAMES or name in self._finding:
            return None
        self._finding.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, name, self.capture)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, name: str, capture: Capture):
        self.loader, self.name, self.capture = loader, name, capture

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        with collector_paused():  # as the trainer imports TensorFlow: a quarter less CPU (trainer/process.py)
            self.loader.exec_module(module)
        self.capture.patch(self.name, module)

    def __getattr__(self, name):
        return getattr(self.loader, name)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        sys.exit(0 if argv else 2)
    module = None
    if argv[0] == "-m":
        if len(argv) < 2:
            print("tfcc-capture: error: -m needs a module: capture.py -m pkg.mod [ARGS...]", file=sys.stderr)
            sys.exit(2)
        module, args = argv[1], argv[2:]
        script = module
    else:
        script, args = argv[0], argv[1:]
        if not os.path.isfile(script):
            print(f"tfcc-capture: error: script {script!r} does not exist", file=sys.stderr)
            sys.exit(2)
    config = tf_config_as_given()  # the script will say what is wrong with it
    writer = MetricsWriter.shared(Path(os.environ.get(RUN_DIR_VARIABLE, ".")) / METRICS,
                                  {"task_type": config.task.type, "task_index": config.task.index})
    capture = Capture(writer, config)
    stacks.arm()  # where its threads are, when its agent asks (a hang)
    capture.launched(script)
    for name in _PatchingFinder.NAMES:  # imported already (a sitecustomize): patched now
        if name in sys.modules:
            capture.patch(name, sys.modules[name])
    sys.meta_path.insert(0, _PatchingFinder(capture))
    sys.stdout = _PrintedMetrics(sys.stdout, capture)
    # As python runs it: a script's folder first on the path; a module's from the folder it runs in (the cwd).
    sys.argv = [script, *args]
    sys.path[0] = os.getcwd() if module else os.path.dirname(os.path.abspath(script))
    if _shadows(sys.path[0]) or _shadows(os.getcwd()):
        _step_aside()
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)  # sys.argv[0]: the module's file
        else:
            runpy.run_path(script, run_name="__main__")
    finally:
        try:
            sys.stdout.flush()
            capture.summaries.flush()  # what the script's writers hold at its end
        except Exception:
            capture.failed("reading summaries")


if __name__ == "__main__":
    main()
