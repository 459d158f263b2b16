"""Where a worker's step time goes, measured when someone asks (docs/why-slow.md).

The console asks every training task, through its agent (``MEASURE_FILE`` in the task's folder: ``{"ask",
"at_step", "asked"}``; the worker takes it away once read). A worker that finds the ask raises its flag, a variable
its training step reads: the step sums the flags of all replicas with its other outputs (trainer.report), so every
worker learns at the same step that all have the ask, and there each one, in the same order:

1. all-reduces tensors the size of its gradients with its peers, as the update does: the communication alone (the
   only collective: every worker arrives at it from the same step, and calls it as many times as the others);
2. runs its model forward and backward on a replica's share of a global batch of zeros shaped as its data, in its
   replicas (``strategy.run``), with no update and no all-reduce: its compute alone (the layers' state is put
   back), on every worker at once as they leave the all-reduce together, for at least ``COMPUTE_SECONDS`` (a CPU
   quota shows);
3. pulls batches from a fresh iterator of its own input (the dataset ``fit`` was given), for about a second and
   no longer than ``FIRST_BATCH_SECONDS`` for the first: its pipeline alone (data of no known shape: the compute
   runs after it, on the batch pulled);
4. goes back to training and times real steps (after two, while the cluster settles again), with what held its
   CPU meanwhile: its cgroup's limit and throttling, its allowed cores, the busiest other processes.

It writes one ``breakdown`` record; the console's ``console.speed`` puts the workers' records together. Until
asked it costs one clock read a step, one ``stat`` each ``LOOK_SECONDS`` and one scalar more among the step's
outputs. Without a flag (a step that returns no dict of logs, ``jit_compile``) it does not measure (a worker
alone in an all-reduce would wait for peers that never join): its record says why.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time

import tensorflow as tf

from agent import system
from agent.protocol import MEASURE_FILE, RUN_DIR_VARIABLE, RUN_ID_VARIABLE
from trainer.records import RecordType

log = logging.getLogger("trainer.breakdown")

LOOK_SECONDS = 0.5      # how often a worker looks for an ask
PART_SECONDS = 0.8      # the input pipeline is pulled about this long (at least LEAST_REPEATS batches): it is local
LEAST_REPEATS = 3
FIRST_BATCH_SECONDS = 15.0  # a fresh iterator's first batch (a shuffle buffer filling) is waited for this long
REPEATS = 5             # the all-reduce: this many calls on every worker (see _repeat); the compute at least this many
COMPUTE_SECONDS = 0.6   # and for at least this long (a cgroup's CPU quota shows over several of its 0.1 s periods)
SETTLE_STEPS = 2        # real steps after the measuring that are not timed (the cluster settles again)
TIMED_SECONDS = 2.0     # then real steps are timed at least this long
TIMED_STEPS = 5         # and at least this many
TIMED_MOST_SECONDS = 20.0  # a step slower than this is timed once
ALL_REDUCE_TIMEOUT = 60.0  # seconds the measurement's all-reduce waits for every peer
EXPIRE_SECONDS = 60.0   # an ask not every worker had by then is dropped (its flag lowered): the console gave up


def _first_of(element):
    """The model's input of a dataset element: ``x`` of ``(x, y[, weights])``, else the element."""
    if isinstance(element, (tuple, list)) and element:
        return element[0]
    return element


def _rows(value) -> int | None:
    for leaf in tf.nest.flatten(value):
        shape = getattr(leaf, "shape", None)
        if shape is not None and len(shape) and shape[0] is not None:
            return int(shape[0])
    return None


def _cut(value, rows: int):
    return tf.nest.map_structure(lambda t: t[:rows], value)


def _sync(result) -> None:
    """Wait for ``result`` (a per-replica value, a tensor or a structure of them) to be computed."""
    for leaf in tf.nest.flatten(result, expand_composites=True):
        if hasattr(leaf, "numpy"):
            leaf.numpy()
            return


def _repeat(call, times: int) -> float:
    """Seconds one ``call()`` takes, over ``times`` calls: as many on every worker, whatever each one's pace (a call
    that holds a collective op is matched with its peers' call by call: one more on one worker than on another would
    meet the other's next training step)."""
    start = time.perf_counter()
    for _ in range(times):
        _sync(call())
    return (time.perf_counter() - start) / times


def _repeat_for(call, seconds: float, least: int) -> float:
    """Seconds one ``call()`` takes, over at least ``least`` calls and ``seconds``: for a call that holds no
    collective op (long enough for a CPU quota to show: a cgroup's limit throttles by the tenth of a second)."""
    done, start = 0, time.perf_counter()
    while True:
        _sync(call())
        done += 1
        took = time.perf_counter() - start
        if done >= least and took >= seconds:
            return took / done


def _synchronized(model) -> bool:
    """Whether a layer of ``model`` all-reduces in its forward pass (a synchronized batch norm): its compute must
    then run as many times on every worker."""
    layers = getattr(model, "submodules", None)
    if layers is None and hasattr(model, "_flatten_layers"):
        layers = list(model._flatten_layers(include_self=False))
    return any("SyncBatchNormalization" in type(layer).__name__ or getattr(layer, "synchronized", False) is True
               for layer in layers or ())


def _problem(part: str, exc: BaseException) -> str:
    return f"{part}: {type(exc).__name__}: {exc}"[:300]


class StepBreakdown:
    """Measures a worker's step time when the console asks (``after_step`` after each of its steps)."""

    def __init__(self, writer, model, data=None, run_dir: str | None = None, flag=None, no_flag: str = ""):
        self.writer = writer
        self.model = model
        self.data = data
        # This worker's "asked" flag, summed over the cluster's replicas in each step's outputs (trainer.report):
        # the step whose sum counts every replica is where all measure. None: it cannot measure (``no_flag``: why).
        self.flag = flag
        self.no_flag = no_flag or "this model's training step carries no flag of tfcc's"
        strategy = getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
        self.replicas = max(1, int(getattr(strategy, "num_replicas_in_sync", 1) or 1))
        folder = run_dir if run_dir is not None else os.environ.get(RUN_DIR_VARIABLE)
        self.path = os.path.join(folder, MEASURE_FILE) if folder else None
        self._next_look = 0.0
        self._pending: dict | None = None  # an ask this worker has: measured once every worker has it
        self._batch: int | None = None     # the global batch the steps show
        self._last_step = -1
        self._timing: dict | None = None   # the real steps being timed after a measurement
        self._off = False

    # ---------------------------------------------------------------- each step

    def after_step(self, global_step: int, step_time: float | None = None, asked: float | None = None,
                   examples: float | None = None) -> bool:
        """After each step (or each execution of several): ``step_time``, the reporter's time of each of its steps
        (from the previous step's end: an epoch's end, its validation and backup, are in none); ``asked``, the
        replicas of the cluster whose worker had the ask when the step began (the flags' sum); ``examples``, the
        step's global batch. Whether it measured now (the pause is no step's time). Whatever fails in it, training
        goes on: the breakdown is off for the rest of this fit."""
        if self._off:
            return False
        try:
            return self._after_step(global_step, step_time, asked, examples)
        except Exception:  # noqa: BLE001 - never the user's training's end
            log.warning("tfcc: the step-time breakdown failed; it is off for this fit (training goes on)",
                        exc_info=True)
            self._off = True
            self._lower()
            return False

    def _after_step(self, global_step, step_time, asked, examples) -> bool:
        last, self._last_step = self._last_step, global_step
        if examples:
            self._batch = int(examples)
        if self._timing is not None:
            self._time_step(global_step, step_time, global_step - last)
            return False
        pending = self._pending
        now = time.monotonic()
        if pending is not None:
            if asked is not None and asked >= self.replicas - 0.5:
                # The same step on every worker: each measures now, and no step runs meanwhile.
                self._pending = None
                self._lower()
                self._measure(pending, global_step)
                return True
            if asked is None:  # the step's outputs carry no flag (no dict of logs): no step to agree on
                self._pending = None
                self._lower()
                self._cannot(pending, global_step, "this model's training step returns no dict of logs, so tfcc "
                                                   "cannot agree on a step with the other workers")
            elif now - pending["read"] > EXPIRE_SECONDS:
                self._pending = None
                self._lower()
                log.warning("tfcc: ask %s dropped: not every worker had it in %.0f s", pending["ask"], EXPIRE_SECONDS)
        if self.path is None or now < self._next_look:
            return False
        self._next_look = now + LOOK_SECONDS
        ask = self._take_ask()
        if ask is None:
            return False
        if self.flag is None:
            self._cannot(ask, global_step, self.no_flag)
            return False
        ask["read"] = now
        self._pending = ask
        self.flag.assign(1.0)  # counted in the next step's flags; measured once every worker has it
        log.warning("tfcc: asked (%s) at step %d; measuring once every worker has the ask", ask["ask"], global_step)
        return False

    def _lower(self) -> None:
        if self.flag is not None:
            self.flag.assign(0.0)

    def _cannot(self, ask: dict, global_step: int, why: str) -> None:
        self.writer.write({"type": RecordType.BREAKDOWN, "ask": ask["ask"], "at_step": ask["at_step"],
                           "step": global_step, "problems": [f"not measured: {why}"], "time": time.time()})

    def _take_ask(self) -> dict | None:
        """The ask in this task's folder, taken away (a later fit of the same script does not measure it again)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                ask = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            ask = None
        try:
            os.unlink(self.path)
        except OSError:
            pass
        try:
            name, at_step = ask["ask"], ask["at_step"]
        except (KeyError, TypeError):
            return None
        if not isinstance(name, str) or isinstance(at_step, bool) or not isinstance(at_step, int):
            return None
        return {"ask": name, "at_step": at_step}

    # ---------------------------------------------------------------- the measurement

    def _measure(self, ask: dict, global_step: int) -> None:
        # Said in the task's log (stderr): the pause it makes in training is tfcc's.
        log.warning("tfcc: measuring where this worker's step time goes (ask %s) after step %d", ask["ask"],
                    global_step)
        began = time.perf_counter()
        record = {"type": RecordType.BREAKDOWN, "ask": ask["ask"], "at_step": ask["at_step"], "step": global_step}
        problems = []
        strategy = getattr(self.model, "distribute_strategy", None) or tf.distribute.get_strategy()
        try:
            local = max(1, len(strategy.extended.worker_devices))
        except Exception:  # noqa: BLE001 - the default strategy has none to say
            local = 1
        record["replicas"], record["local_replicas"] = self.replicas, local
        if self._batch:
            record["batch"] = self._batch
        try:  # first: the only collective, which every worker reaches from the same step
            self._all_reduce(record, strategy)
        except Exception as exc:  # noqa: BLE001 - a part that cannot be measured is said, the rest goes on
            log.warning("measuring the all-reduce", exc_info=True)
            problems.append(_problem("all-reduce", exc))
        # The compute next, on every worker at once as they leave the all-reduce together (one worker's compute
        # timed while another pulls its input would be timed on a busier machine), on zeros of the data's shape.
        zeros = self._zeros()
        if zeros is not None:
            self._part("compute", problems, self._compute, record, strategy, zeros)
        batch = self._part("input", problems, self._input, record)
        if zeros is None and batch is not None:  # no shape to make zeros of: the batch the input probe pulled
            self._part("compute", problems, self._compute, record, strategy, batch)
        if problems:
            record["problems"] = problems
        record["measure_time"] = time.perf_counter() - began
        log.warning("tfcc: measured in %.1f s (%s)", record["measure_time"], "; ".join(problems) or "every part")
        self._timing = {"record": record, "settle": SETTLE_STEPS, "start": None, "from": None,
                        "cpu": None, "procs": None, "limit": None, "host": None}

    @staticmethod
    def _part(name: str, problems: list, measure, *args):
        try:
            return measure(*args)
        except Exception as exc:  # noqa: BLE001 - a part that cannot be measured is said, the rest goes on
            log.warning("measuring the %s", name, exc_info=True)
            problems.append(_problem(name, exc))
            return None

    def _input(self, record: dict):
        """The pipeline alone: seconds per batch of a fresh iterator (on a thread: a first batch that does not come
        in ``FIRST_BATCH_SECONDS`` is said, not waited for); the first batch's input (for the compute)."""
        data = self.data
        if isinstance(data, tf.data.Dataset):
            record["input"] = "dataset"
            pulled: dict = {}

            def pull() -> None:
                try:
                    iterator = iter(data)
                    pulled["first"] = next(iterator)
                    done, start = 0, time.perf_counter()
                    while True:
                        try:
                            next(iterator)
                        except StopIteration:
                            break
                        done += 1
                        if done >= LEAST_REPEATS and time.perf_counter() - start >= PART_SECONDS:
                            break
                    if done:
                        pulled["time"] = (time.perf_counter() - start) / done
                except Exception as exc:  # noqa: BLE001 - said in the record
                    pulled["error"] = exc

            thread = threading.Thread(target=pull, name="tfcc-input-probe", daemon=True)
            thread.start()
            thread.join(FIRST_BATCH_SECONDS + 10 * PART_SECONDS)
            if "error" in pulled:
                raise pulled["error"]
            if "first" not in pulled:
                raise TimeoutError(f"a fresh iterator's first batch took more than {FIRST_BATCH_SECONDS:.0f} s "
                                   "(a large shuffle buffer filling?)")
            if "time" in pulled:
                policy = data.options().experimental_distribute.auto_shard_policy
                # Sharded by file, each worker reads only its files: a share of what the fresh iterator reads.
                workers = max(1, self.replicas // max(1, record.get("local_replicas") or 1))
                share = workers if policy == tf.data.experimental.AutoShardPolicy.FILE else 1
                record["input_time"] = pulled["time"] / share
            record.setdefault("batch", _rows(_first_of(pulled["first"])))
            return _first_of(pulled["first"])
        if data is not None and _rows(data) is not None:  # arrays or tensors in memory: no pipeline to wait on
            record["input"], record["input_time"] = "arrays", 0.0
            return data
        record["input"] = None  # a generator, a Keras 3 PyDataset, a distributed dataset: not measured
        return None

    def _zeros(self):
        """A global batch of zeros shaped as the dataset's input (arrays in memory: their first rows), or None."""
        rows = self._batch or 1
        if not isinstance(self.data, tf.data.Dataset):
            return _cut(self.data, rows) if self.data is not None and _rows(self.data) is not None else None
        spec = _first_of(self.data.element_spec)

        def zeros(s):
            shape = s.shape
            if not isinstance(s, tf.TensorSpec) or shape.rank is None or None in shape[1:]:
                raise ValueError("the input's shape is not known")
            return tf.zeros([rows, *shape[1:]], s.dtype)

        try:
            return tf.nest.map_structure(zeros, spec)
        except (ValueError, TypeError):
            return None

    def _compute(self, record: dict, strategy, batch) -> None:
        """Forward and backward on a replica's share of a global batch in every local replica; no update, no
        all-reduce."""
        model = self.model
        rows = _rows(batch)
        if rows is None:
            return
        per_replica = max(1, math.ceil((record.get("batch") or rows) / self.replicas))
        x = tf.nest.map_structure(tf.convert_to_tensor, _cut(batch, min(rows, per_replica)))
        variables = model.trainable_variables
        kept = [v.read_value() if hasattr(v, "read_value") else tf.identity(v) for v in model.non_trainable_variables]

        def forward_backward(inputs):
            with tf.GradientTape() as tape:
                outputs = model(inputs, training=True)
                loss = tf.add_n([tf.reduce_mean(tf.cast(o, tf.float32)) for o in tf.nest.flatten(outputs)])
            grads = [g for g in tape.gradient(loss, variables) if g is not None]
            return tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads]) if grads else loss

        step = tf.function(lambda inputs: strategy.run(forward_backward, args=(inputs,)))
        try:
            _sync(step(x))  # traced
            if _synchronized(model):
                record["compute_time"] = _repeat(lambda: step(x), REPEATS)
            else:  # local: as long as it takes to show a CPU quota (its count is this worker's own)
                record["compute_time"] = _repeat_for(lambda: step(x), COMPUTE_SECONDS, REPEATS)
            record["replica_batch"] = _rows(x)
        finally:
            for variable, value in zip(model.non_trainable_variables, kept):
                variable.assign(value)  # a batch norm's moving statistics as they were

    def _all_reduce(self, record: dict, strategy) -> None:
        """All-reduce tensors the size of the gradients with every peer (the first call waits for them all)."""
        shapes = [(tuple(v.shape), tf.as_dtype(v.dtype)) for v in self.model.trainable_variables]  # Keras 3: names
        if not shapes:
            return
        # Bounded: a peer that never joins fails this worker's training (tfcc restarts the run from its backup)
        # rather than holding it for ever.
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=ALL_REDUCE_TIMEOUT)

        def reduce():  # made in the replica: on its device, as its gradients are
            values = [tf.zeros(shape, dtype) for shape, dtype in shapes]
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, values, options=options)

        step = tf.function(lambda: strategy.run(reduce))
        started = time.perf_counter()
        _sync(step())
        record["waited_for_peers"] = time.perf_counter() - started  # traced, and waited for the slowest
        record["all_reduce_time"] = _repeat(step, REPEATS)
        record["gradient_bytes"] = sum(math.prod(shape) * dtype.size for shape, dtype in shapes)

    def finished(self) -> None:
        """``fit`` ended: a measurement whose real steps were being timed is written with the steps it has."""
        timing, self._timing = self._timing, None
        if timing is None:
            return
        record = timing["record"]
        if timing.get("start") is not None and self._last_step > timing["from"]:
            steps = self._last_step - timing["from"]
            record["step_time"], record["timed_steps"] = timing["sum"] / steps, steps
            record["cpu"] = self._cpu(timing, time.perf_counter() - timing["start"])
        else:
            record.setdefault("problems", []).append("real steps: training ended before any was timed")
        record["time"] = time.time()
        self.writer.write(record)

    # ---------------------------------------------------------------- real steps, timed

    def _time_step(self, global_step: int, step_time: float | None, steps: int) -> None:
        timing = self._timing
        if timing["settle"] > 0:
            timing["settle"] -= 1
            if timing["settle"] == 0:
                timing["start"], timing["from"] = time.perf_counter(), global_step
                timing["sum"] = 0.0
                times = os.times()
                timing["cpu"] = times.user + times.system
                timing["procs"] = system.processes()
                timing["limit"] = system.cpu_limit()
                timing["host"] = system.host_cpu_times()
            return
        took = time.perf_counter() - timing["start"]
        timing["sum"] += step_time * max(1, steps) if step_time is not None else took - timing["sum"]
        steps = global_step - timing["from"]
        if not (took >= TIMED_MOST_SECONDS or (steps >= TIMED_STEPS and took >= TIMED_SECONDS)):
            return
        self._timing = None
        record = timing["record"]
        record["step_time"] = timing["sum"] / max(1, steps)
        record["timed_steps"] = steps
        record["cpu"] = self._cpu(timing, took)
        record["time"] = time.time()
        self.writer.write(record)

    @staticmethod
    def _cpu(timing: dict, took: float) -> dict:
        times = os.times()
        cpu = {"used": round((times.user + times.system - timing["cpu"]) / took, 3),
               "cores": os.cpu_count()}
        try:
            cpu["allowed"] = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            pass
        before, after = timing["limit"] or {}, system.cpu_limit()
        if after.get("limit") is not None:
            cpu["limit"] = after["limit"]
            periods = (after.get("periods") or 0) - (before.get("periods") or 0)
            if periods > 0 and after.get("throttled") is not None:
                cpu["throttled"] = round(((after["throttled"] or 0) - (before.get("throttled") or 0)) / periods, 3)
        host, now = timing["host"], system.host_cpu_times()
        if host is not None and now is not None and now[1] > host[1]:
            cpu["host_busy"] = round((now[0] - host[0]) / (now[1] - host[1]), 3)
        cpu["others"] = system.busiest_others(timing["procs"], system.processes(), took,
                                              os.environ.get(RUN_ID_VARIABLE))
        return cpu
