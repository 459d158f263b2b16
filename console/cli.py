"""``tfcc``: the headless front end on the console core.

    tfcc                       open the window on the last profile (first time: the embedded default)
    tfcc gui [CLUSTER]         open the window on a cluster file
    tfcc run [CLUSTER]         deploy, start every task, follow them; --json for JSON lines
    tfcc resume RUN            start a stopped or failed run's tasks again where their backups left off
    tfcc runs                  runs this console started: state, cluster, start, duration, final metrics
    tfcc delete RUN            delete a run's folders on its hosts and its history here (asks first)
    tfcc tensorboard RUN       copy the chief's TensorBoard logs here and serve them on 127.0.0.1
    tfcc attach RUN            follow a run again from its first record
    tfcc stop RUN              stop every task of a run (SIGTERM, then SIGKILL)
    tfcc logs RUN [TASK]       the end of the tasks' stdout and stderr
    tfcc check [CLUSTER]       hosts, versions, GPUs, ports free and reachable between every pair
    tfcc export FORMAT [CLUSTER] -o DIR   the cluster as launch scripts, a Slurm job, a Kubeflow TFJob or TrainJob

Ctrl-C detaches and leaves the run going (``--stop-on-exit`` stops it instead).
``tfcc run`` exits 0 only when every task finished. Errors are one ``tfcc: error:`` line
(exit 2); an unexpected one's traceback goes to the log file the line names.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import queue
import shlex
import sys
import threading
import time
import traceback
from pathlib import Path

from agent.protocol import FINISHED, SLURM_PORT_BASE, TRAINING
from console import catalog, checks, export, memory, provision
from console import cluster as cl
from console import cluster_fields, hangs, speed, text
from console.errors import RunError, TfccError, describe, log_to_file, log_to_terminal
from console.run.placement import placement_for
from console.run.runner import Run
from console.run.session import RunSession
from console.run.supervisor import WATCHDOG_SECONDS
from console.run.where import where
from console.states import RunState, SessionEvent, SessionKind
from console.store.manifests import check_run_id, new_run_id
from console.tensorboard import MAX_COPY_BYTES, TensorBoard, check_installed, fetch_logs
from trainer.records import Event, RecordType, step_loss


def strict_json(value) -> str:
    """One line of JSON that any parser reads: a non-finite number (a diverged loss) is ``null``,
    as in the metrics file itself, never Python's ``NaN``."""
    def finite(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, list):
            return [finite(x) for x in v]
        return v
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:  # rare: walk it only then
        return json.dumps(finite(value), allow_nan=False)


class Printer:
    """A run session's listener for the terminal: a line per event and epoch, a status line per
    worker (``status_line``), or every record as a JSON line (``--json``)."""

    def __init__(self, as_json: bool, out=None):
        self.as_json = as_json
        self.out = out  # None: sys.stdout as it is when printing
        self.lock = threading.Lock()
        self.last_step: dict[str, dict] = {}
        self.steps_per_epoch: dict[str, int] = {}
        self.closed = False  # the terminal's reader went away (a broken pipe)

    def emit(self, line: str) -> None:
        with self.lock:
            if self.closed:
                return
            try:
                print(text.printable(line), file=self.out or sys.stdout, flush=True)
            except BrokenPipeError:  # `tfcc attach RUN | head`: the reader has enough; say nothing more
                self.closed = True
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail either

    def on_event(self, event: SessionEvent) -> None:
        task = event.task
        if self.as_json:
            if event.kind == SessionKind.RECORDS:
                for record in event.records:
                    self.emit(strict_json({"task": task.name, "host": task.host, **record}))
            elif event.kind in (SessionKind.TASK_ENDED, SessionKind.CONNECTION):
                message = event.message
                self.emit(strict_json({"task": task.name, "host": task.host, "type": message["type"],
                                       **{k: v for k, v in message.items() if k not in ("id", "type")}}))
            elif event.kind in (SessionKind.WATCHDOG, SessionKind.JOB, *SessionKind.SUPERVISION):
                self.emit(strict_json({**event.message, "type": event.kind, "message": event.text}))
            elif event.kind == SessionKind.SYSTEM:  # a host's load (docs/metrics.md); the terminal's lines leave it out
                self.emit(strict_json({"type": RecordType.SYSTEM, "host": event.host,
                                       **{k: v for k, v in event.message.items() if k != "type"}}))
            return
        if event.kind == SessionKind.RECORDS:
            for record in event.records:
                try:
                    self._record(task.name, record)
                except (KeyError, TypeError, ValueError):  # a record of the right type with wrong fields
                    self.emit(f"{task.name}: {text.unreadable_text({'raw': strict_json(record)})}")
        elif event.kind in (SessionKind.TASK_ENDED, SessionKind.CONNECTION):
            self.emit(f"{task.name}: {event.text}")
        elif event.kind in (SessionKind.WATCHDOG, SessionKind.JOB, *SessionKind.SUPERVISION):
            self.emit(f"tfcc: {event.text}")
        elif event.kind == SessionKind.EXPLAINED:
            self.explained(event.message)

    def explained(self, verdict: dict) -> None:
        """A breakdown's verdict (console.speed.Verdict.as_dict()): the workers' parts, then each finding."""
        if self.as_json:
            self.emit(strict_json({**verdict, "type": speed.VERDICT_RECORD}))
            return
        rows = [speed.WorkerBreakdown(**{k: v for k, v in w.items() if k != "alone_rate"})
                for w in verdict.get("workers", [])]
        took = verdict.get("took")
        self.emit(f"tfcc: why slow (measured at step {verdict.get('at_step')}"
                  + (f", {took:.0f} s after asking)" if isinstance(took, (int, float)) else ")"))
        for line in speed.Verdict(verdict.get("ask", ""), rows, [], verdict.get("kind", "")).table():
            self.emit(f"  {line}")
        for line in verdict.get("findings", []):
            self.emit(f"  {line}")
        if verdict.get("speedup") is not None and verdict.get("efficiency") is not None:
            self.emit(f"  {speed.scaling_text(verdict['speedup'], len(rows), verdict['efficiency'])}")

    def _record(self, name: str, r: dict) -> None:
        kind = r.get("type")
        if kind == RecordType.STEP:
            self.last_step[name] = r
        elif kind in (RecordType.EPOCH, RecordType.UNREADABLE):
            self.emit(f"{name}: {text.record_text(r)}")
        elif kind == RecordType.EVENT:
            if r.get("event") == Event.STARTED:
                self.steps_per_epoch[name] = r.get("steps_per_epoch", "?")
            if r.get("event") not in Event.QUIET:
                self.emit(f"{name}: {text.event_text(r)}")

    def status_line(self, run: Run) -> None:
        if self.as_json:
            return
        parts = []
        for task in run.tasks:
            s = self.last_step.get(task.name)
            if s and task.phase == TRAINING:
                loss = step_loss(s)
                step_time = text.metric_value(s.get("step_time"))
                ms = f"{step_time * 1000:.0f}" if math.isfinite(step_time) else "?"
                parts.append(f"{task.name} e{text.count(s.get('epoch'))} {text.count(s.get('step'))}/"
                             f"{self.steps_per_epoch.get(task.name, '?')} loss {text.metric_text(loss)} {ms} ms")
        if parts:
            self.emit("  " + " | ".join(parts))


def _follow(run: Run, printer: Printer, stop_on_exit: bool, watchdog: float = WATCHDOG_SECONDS,
            why_slow: float | None = None, start_again: str = "tfcc run with its cluster file") -> int:
    session = RunSession(run, watchdog=watchdog)
    session.subscribe(printer.on_event)
    session.follow()
    asker = _WhySlow(session, why_slow)
    try:
        last = 0.0
        while not session.wait(timeout=0.5):
            asker.look()
            if time.monotonic() - last >= 2.0:
                last = time.monotonic()
                printer.status_line(run)
    except KeyboardInterrupt:
        session.detach()
        if stop_on_exit:
            print(f"tfcc: stopping run {run.run_id}", file=sys.stderr)
            run.stop()
            return 130
        print(f"tfcc: detached; run {run.run_id} goes on (tfcc attach {run.run_id}, tfcc stop {run.run_id})",
              file=sys.stderr)
        return 130
    session.detach()
    failed = [t for t in run.members if t.phase != FINISHED]
    for t in run.tasks:
        if t.name in run.left:
            print(f"tfcc: {t.name} on {t.host} left the run ({run.left[t.name]}); the others went on without it",
                  file=sys.stderr)
    for t in failed:
        print(f"tfcc: {t.name} on {t.host} ended {text.outcome_text(t.phase, t.exit)}; "
              f"its log: tfcc logs {run.run_id} {t.name}", file=sys.stderr)
    if failed:
        supervisor = session.supervisor
        if supervisor.code_failed and run.cluster.training.user_code:  # no backup of tfcc's to go on from
            print(f"tfcc: once the code is fixed, start the run again: {start_again}", file=sys.stderr)
        elif supervisor.backed_up_once:
            print(f"tfcc: to start the run again from its last backup: tfcc resume {run.run_id}", file=sys.stderr)
        else:
            print(f"tfcc: to start the run again: tfcc resume {run.run_id}", file=sys.stderr)
    return 1 if failed else 0


class _WhySlow:
    """``--why-slow SECONDS``: ask once, that long after the run's first steps came in (the verdict is printed as
    it comes, like every event)."""

    def __init__(self, session: RunSession, after: float | None):
        self.session, self.after = session, after
        self.training_since: float | None = None

    def look(self) -> None:
        if self.after is None:
            return
        if self.session.measure_problem() is not None:
            self.training_since = None
            return
        now = time.monotonic()
        if self.training_since is None:
            self.training_since = now
        if now - self.training_since >= self.after:
            self.after = None  # once
            try:
                self.session.why_slow()
                print("tfcc: asked every worker where its step time goes (the verdict follows)", file=sys.stderr)
            except RunError as exc:
                print(f"tfcc: {exc}", file=sys.stderr)


def cmd_why_slow(ns) -> int:
    """Attach to a running run quietly, ask its workers where their step time goes, print the verdict, detach."""
    run = Run.load(ns.run, make_asker(False))
    session = RunSession(run)
    printer = Printer(ns.json)
    verdicts: queue.SimpleQueue = queue.SimpleQueue()
    session.subscribe(lambda e: verdicts.put(e.message) if e.kind == SessionKind.EXPLAINED else None)
    session.follow()
    try:
        deadline = time.monotonic() + ns.wait
        while True:  # the session has read where training is (or the run is not training: said at the deadline)
            if session.measure_problem() is None or time.monotonic() >= deadline or session.wait(0.2):
                break
        session.why_slow()  # a RunError (one line: why not, what to do) when it cannot
        print(f"tfcc: asked every worker of run {run.run_id} where its step time goes; the verdict comes "
              f"{speed.ANSWER_WORDS}", file=sys.stderr)
        try:
            verdict = verdicts.get(timeout=speed.ANSWER_SECONDS + 15)
        except queue.Empty:
            raise RunError(f"run {run.run_id} gave no breakdown in time", "is it still training? tfcc runs says")
        printer.explained(verdict)
        return 0 if verdict.get("kind") != speed.UNMEASURED else 1
    finally:
        session.detach()


def cmd_where(ns) -> int:
    """Where each task of a running run is now, grouped (console.hangs: the one that differs, and where in the user's
    code), then each task's threads; training goes on undisturbed."""
    run = Run.load(ns.run, make_asker(False))
    try:
        report = where(run, ns.wait, looks=2)  # a host that does not answer: its tasks said so, the others' places
    finally:
        run.detach()
    if all(t.state == hangs.GONE for t in report.tasks):
        raise RunError(f"run {run.run_id} has ended: its tasks are nowhere now",
                       f"tfcc logs {run.run_id} shows how each ended")
    if ns.json:
        print(json.dumps({"run_id": run.run_id, **report.as_dict()}))
        return 0
    if report.verdict:
        print(text.printable(report.verdict))
    for line in report.lines:
        print(f"  {text.printable(line)}")
    for task in report.tasks:
        print(f"\n==> {task.task} on {task.host} <==")
        for line in report.stack_lines(task.task):
            print(text.printable(line))
    return 0


def make_asker(accept_new: bool):
    """Unknown host keys: the flag accepts them, a terminal asks, anything else refuses."""

    def ask(hostname: str, key_type: str, fp: str) -> bool:
        if accept_new:
            print(f"tfcc: accepting new host key of {hostname}: {key_type} {fp}", file=sys.stderr)
            return True
        if not sys.stdin.isatty():
            return False
        try:
            answer = input(f"The authenticity of host {hostname} can't be established.\n"
                           f"{key_type} key fingerprint is {fp}.\nTrust it and remember it (yes/no)? ")
        except EOFError:  # Ctrl-D: no
            return False
        return answer.strip().lower() in ("y", "yes")

    return ask


def cmd_run(ns) -> int:
    if ns.run_id is not None and ns.resume is not None:
        raise RunError("--run-id names a new run and --resume an existing one", "give one of them")
    given = ns.resume if ns.resume is not None else ns.run_id
    run_id = check_run_id(new_run_id() if given is None else given)  # before anything touches a disk
    cluster = cl.load(ns.cluster) if ns.cluster else cl.default()
    asker = make_asker(ns.accept_new_host_keys)
    run = Run(cluster, run_id, asker)
    resume = ns.resume is not None
    if not resume:
        run.placement.preflight(asker)  # a refusal is its one line: nothing submitted (Slurm's sbatch --test-only)
    run.start(resume=resume, explicit=resume)
    print(f"tfcc: {run.placement.started_words(run, 'resumed' if resume else 'started')}", file=sys.stderr)
    again = "tfcc run" + (f" {shlex.quote(ns.cluster)}" if ns.cluster else "")
    return _follow(run, Printer(ns.json), ns.stop_on_exit, ns.watchdog, ns.why_slow, start_again=again)


def cmd_resume(ns) -> int:
    run = Run.load(check_run_id(ns.run), make_asker(ns.accept_new_host_keys))
    run.start(resume=True, explicit=True)
    print(f"tfcc: {run.placement.started_words(run, 'resumed')}", file=sys.stderr)
    return _follow(run, Printer(ns.json), ns.stop_on_exit, ns.watchdog)


def cmd_attach(ns) -> int:
    run = Run.load(ns.run, make_asker(False))
    return _follow(run, Printer(ns.json), stop_on_exit=False, why_slow=ns.why_slow)


def cmd_stop(ns) -> int:
    run = Run.load(ns.run)
    for task, result in zip(run.members, run.stop(grace=ns.grace)):
        state = "stopped" if result["stopped"] else "was not running"
        print(f"{task.name} on {task.host}: {state}{' (killed after the grace period)' if result.get('killed') else ''}")
    left = [t for t in run.tasks if t.name in run.left]  # may still run where a network cut it off: asked too
    silent = run.stop_each(grace=ns.grace, only=left) if left else []
    for task in left:
        print(f"{task.name} on {task.host}: left the run earlier; "
              + ("its host does not answer (if it comes back, tfcc stop again)" if task.host in silent
                 else "not running there now"))
    run.detach()
    return 0


def _gib(n) -> str:
    return f"{n / 2**30:.1f}G" if n else "?"


def cmd_check(ns) -> int:
    cluster = cl.load(ns.cluster) if ns.cluster else cl.default()
    # A place of its own to ask (a Slurm login host: would it take the job?); else the hosts are checked.
    answer = placement_for(cluster).preflight(make_asker(ns.accept_new_host_keys), timeout=ns.deadline)
    if answer is not None:
        print(json.dumps(answer.as_dict()) if ns.json else "\n".join(answer.lines()))
        return 0
    report = checks.check(cluster, deadline=ns.deadline, ask_host_key=make_asker(ns.accept_new_host_keys))
    if ns.json:
        print(json.dumps(report.as_dict()))
        return 0 if report.ready else 1
    skews = checks.skew({r.name: r.probe for r in report.hosts if r.probe})
    print(f"{'host':<12} {'address':<16} {'state':<8} {'python':<8} {'tensorflow':<11} {'tf-keras':<9} "
          f"{'gpus':>4} {'cpus':>4} {'memory':>7} {'disk free':>9} {'clock':>7}")
    for r in report.hosts:
        p = r.probe or {}
        state = "ok" if r.ok else "FAILED"
        clock = f"{skews[r.name]:+.1f}s" if r.name in skews else ""
        print(f"{r.name:<12} {r.address:<16} {state:<8} {p.get('python', ''):<8} {p.get('tensorflow') or '-':<11} "
              f"{p.get('tf_keras') or '-':<9} {len(p.get('gpus') or []) if p else '':>4} {p.get('cpus', ''):>4} "
              f"{_gib((p.get('memory') or {}).get('total_bytes')) if p else '':>7} "
              f"{_gib(p.get('disk_free_bytes')) if p else '':>9} {clock:>7}")
    columns = [t for t in report.tasks if t["address"]]
    if len(report.hosts) > 1 and columns:
        print("\nreachability of the training ports (row: from host; column: task)")
        width = max(len(t["address"]) for t in columns) + 2
        print(f"{'':<12}" + "".join(f"{t['name'] + ' ' + t['address']:>{width + 10}}" for t in columns))
        for source, row in report.matrix.items():
            cells = []
            for t in columns:
                result = row.get(t["address"])
                cells.append("-" if result is None else ("ok" if result["ok"] else result["error"].upper()))
            print(f"{source:<12}" + "".join(f"{c:>{width + 10}}" for c in cells))
    if report.keras:
        print(f"\nkeras: {report.keras}")
    if report.problems:
        print(f"\n{len(report.problems)} problem(s):")
        for problem in report.problems:
            print(f"  - {problem}")
    else:
        print(f"\nready: every check passed in {report.seconds:.1f} s")
    for warning in report.warnings:
        print(f"warning: {warning}")
    return 0 if report.ready else 1


def cmd_provision(ns) -> int:
    """Make every host ready: the environment the run needs, offline where a host reaches no index
    (console/provision.py); a line a host as it goes, then each host's result."""
    cluster = cl.load(ns.cluster) if ns.cluster else cl.default()
    said: dict[str, tuple] = {}
    lock = threading.Lock()

    def progress(result) -> None:
        if ns.json:
            return
        key = (result.stage, result.pushed * 10 // max(1, result.to_push) if result.stage == provision.PUSHING else 0)
        more = {provision.PUSHING: f" {text.size_text(result.pushed)} of {text.size_text(result.to_push)}",
                provision.INSTALLING: f" {result.installing} packages",
                provision.RESOLVING: f" for {result.platform}" + (" (GPU build)" if result.gpu else "")}
        with lock:  # from each host's thread: one line at a time, each change once
            if said.get(result.name) == key or result.stage in provision.ENDS:
                return
            said[result.name] = key
            print(f"{result.name}: {result.stage}{more.get(result.stage, '')}", flush=True)

    report = provision.Provision(cluster, make_asker(ns.accept_new_host_keys), progress, timeout=ns.deadline).run()
    if ns.json:
        print(json.dumps(report.as_dict()))
        return 0 if report.ok else 1
    print()
    for r in report.hosts:
        print(f"{r.name}: {'FAILED: ' if r.stage == provision.FAILED else ''}{r.line}")
    print(f"\nenvironment {report.spec.key}: {len(report.spec.requirements)} requirements; "
          f"{text.size_text(report.fetched)} fetched, {text.size_text(report.pushed)} pushed in {report.seconds:.1f} s")
    for line in report.differs:
        print(f"differs between hosts: {line}")
    failed = [r for r in report.hosts if not r.ok]
    if failed:
        print(f"{len(failed)} of {len(report.hosts)} host(s) not ready; the others are")
    elif not report.differs:
        print("ready: every host has the same versions (tfcc check shows them)")
    return 0 if report.ok else 1


def cmd_logs(ns) -> int:
    run = Run.load(ns.run)
    names = [t.name for t in run.tasks]
    if ns.task and ns.task not in names:
        raise RunError(f"run {ns.run} has no task {ns.task!r}; its tasks are {', '.join(names)}")
    for task in run.tasks:
        if ns.task and task.name != ns.task:
            continue
        for stream, content in run.logs(task.name, ns.bytes):
            content = text.printable(content)  # what a task wrote: its escape sequences are shown, not run
            print(f"==> {task.name} on {task.host}: {stream} <==")
            print(content, end="" if content.endswith("\n") or not content else "\n")
    for heading, said in ([] if ns.task else run.placement.extra_logs(run)):  # a Slurm job's own output
        output = text.printable(said)
        print(f"==> {heading} <==")
        print(output, end="" if output.endswith("\n") or not output else "\n")
    run.detach()
    return 0


RUN_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy")  # the final metrics ``tfcc runs`` shows


def cmd_runs(ns) -> int:
    """Every run of this console: state, cluster, start, duration, final metrics (from its manifest and
    history); the hosts of a run not known to have ended are asked how its tasks are, each run within
    ``--timeout`` seconds. A damaged manifest or a host that does not answer is a note on its run."""
    infos = catalog.overview(make_asker(False), timeout=ns.timeout)
    if ns.json:
        print(strict_json([info.as_dict() for info in infos]))
        return 0
    if not infos:
        print("no runs yet (tfcc run starts one)")
        return 0
    width = max(len("run"), *(len(i.run_id) for i in infos))
    print(f"{'run':<{width}}  {'state':<8}  {'start':<16}  {'duration':>8}  "
          + "  ".join(f"{m:>12}" for m in RUN_METRICS) + "  cluster (host: tasks)")
    for info in infos:
        metrics = "  ".join(f"{text.metric_text(info.metrics[m]) if m in info.metrics else '-':>12}"
                            for m in RUN_METRICS)
        print(f"{info.run_id:<{width}}  {info.state:<8}  {text.start_text(info.start):<16}  "
              f"{text.duration_text(info.duration):>8}  {metrics}  {info.cluster_text or '-'}", flush=True)
        if info.sizes_text:
            print(f"{'':<{width}}  size: {info.sizes_text}")
        if info.speed_text:
            print(f"{'':<{width}}  {info.speed_text}")
        if info.phases is not None and info.state != RunState.FINISHED:
            print(f"{'':<{width}}  tasks now: " + ", ".join(f"{t} {p}" for t, p in info.phases.items()))
        if info.note:
            print(f"{'':<{width}}  note: {info.note}")
    return 0


def cmd_delete(ns) -> int:
    """Delete a run's folders on its hosts and this console's manifest and history of it, after a yes."""
    run_id = check_run_id(ns.run)
    if not ns.yes:
        catalog.check_known(run_id)  # an unknown run is said before any question
        info = catalog.run_info(run_id)
        where = ", ".join(info.hosts) or "its hosts"
        if not sys.stdin.isatty():
            raise RunError(f"deleting run {run_id} needs a yes", f"add --yes to delete it (its folders on {where} "
                                                                 "and its history here) without being asked")
        try:
            answer = input(f"Delete run {run_id}: its folders on {where} (metrics, logs, backups, the saved "
                           "model) and its history here? This cannot be undone (yes/no) ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print(f"tfcc: run {run_id} kept", file=sys.stderr)
            return 1
    for line in catalog.delete_run(run_id, make_asker(ns.accept_new_host_keys)):
        print(line)
    return 0


def cmd_tensorboard(ns) -> int:
    """Copy the chief's TensorBoard logs of a run here and serve them on 127.0.0.1 until Ctrl-C."""
    check_installed()
    logdir = fetch_logs(check_run_id(ns.run), make_asker(ns.accept_new_host_keys), int(ns.max_gb * 2**30))
    server = TensorBoard(logdir, ns.port)
    url = server.start()
    print(f"tfcc: TensorBoard of run {ns.run} (logs copied to {logdir}): {url}", flush=True)
    print("tfcc: Ctrl-C stops it", file=sys.stderr, flush=True)
    try:
        while server.running:
            server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def cmd_export(ns) -> int:
    """Write the cluster as launch scripts, a Slurm batch script, a TFJob or a TrainJob (docs/graduation.md)."""
    if ns.format not in export.FORMATS:  # before the cluster file: the first mistake on the line is named
        raise export.ExportError(f"unknown export format {ns.format!r}", f"use one of {', '.join(export.FORMATS)}")
    cluster = cl.load(ns.cluster) if ns.cluster else cl.default()
    given = export.slurm_options(cluster)  # a Slurm cluster file's time limit and CPUs, unless the line says
    options = export.Options(image=ns.image, time_limit=ns.time or given.time_limit, port_base=ns.port_base,
                             name=ns.name, cpus_per_task=ns.cpus_per_task or given.cpus_per_task,
                             into=Path(ns.output))
    files = export.render(ns.format, cluster, options)
    for path in export.write(files, ns.output, ns.force):
        print(f"wrote {path}")
    for note in files.notes:
        print(f"note: {note}")
    return 0


def cmd_gui(ns) -> int:
    if ns.cluster:
        cl.load(ns.cluster)  # a bad file: the usual one-line error, before any window
    from console.gui.app import main as gui_main

    return gui_main(ns.cluster)


def seconds(low: float, high: float, unit: str = "seconds"):
    """An argparse type: a number of ``unit`` from ``low`` to ``high``; anything else says the range."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # NaN fails too
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit} from {low:g} to {high:g}")
        return value
    return parse


def count(low: int, high: int):
    """An argparse type: a whole number from ``low`` to ``high``; anything else says the range."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from {low} to {high}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfcc", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an unexpected error here (it always goes to the log file)")
    parser.add_argument("--verbose", action="store_true",
                        help="print what tfcc does (connections, deploys, reconnects) on stderr as it goes")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="deploy, start and follow a cluster (default: the embedded default)")
    run.add_argument("cluster", nargs="?", help="a cluster file (TOML); default: two local workers on digits")
    run.add_argument("--json", action="store_true", help="print the event stream as JSON lines")
    run.add_argument("--stop-on-exit", action="store_true", help="Ctrl-C stops the run instead of detaching")
    run.add_argument("--run-id", help="name the run (default: time and a random suffix); it must be new")
    run.add_argument("--resume", metavar="RUN",
                     help="start an existing run's tasks again in their folders, from their last backup")
    run.add_argument("--watchdog", type=seconds(1, 86400), default=WATCHDOG_SECONDS,
                     help="seconds before saying which task the cluster waits for (default 120)")
    run.add_argument("--accept-new-host-keys", action="store_true",
                     help="trust hosts whose SSH key is not in known_hosts yet (a changed key is always refused)")
    run.add_argument("--why-slow", type=seconds(0, 86400), metavar="SECONDS",
                     help="once it has trained this long, ask where each worker's step time goes and print the "
                          "verdict (docs/why-slow.md)")
    run.set_defaults(func=cmd_run)
    resume = sub.add_parser("resume", help="start a run's tasks again where their backups left off")
    resume.add_argument("run")
    resume.add_argument("--json", action="store_true", help="print the event stream as JSON lines")
    resume.add_argument("--stop-on-exit", action="store_true", help="Ctrl-C stops the run instead of detaching")
    resume.add_argument("--watchdog", type=seconds(1, 86400), default=WATCHDOG_SECONDS,
                        help="seconds before saying which task the cluster waits for (default 120)")
    resume.add_argument("--accept-new-host-keys", action="store_true")
    resume.set_defaults(func=cmd_resume)
    attach = sub.add_parser("attach", help="follow a run again from its first record")
    attach.add_argument("run")
    attach.add_argument("--json", action="store_true")
    attach.add_argument("--why-slow", type=seconds(0, 86400), metavar="SECONDS",
                        help="once it has trained this long, ask where each worker's step time goes (as tfcc run)")
    attach.set_defaults(func=cmd_attach)
    why = sub.add_parser("why-slow", help="ask a running run's workers where their step time goes: input, "
                                          "compute, all-reduce, slower peers; the verdict and its fix")
    why.add_argument("run")
    why.add_argument("--json", action="store_true", help="print the verdict as one JSON line")
    why.add_argument("--wait", type=seconds(0, 3600), default=60.0,
                     help="seconds to wait for the run to be training before asking (default 60)")
    why.set_defaults(func=cmd_why_slow)
    where = sub.add_parser("where", help="where each task of a running run is now: every thread's stack (a hang)")
    where.add_argument("run")
    where.add_argument("--json", action="store_true", help="print every task's answer as one JSON line")
    where.add_argument("--wait", type=seconds(0.1, 30), default=5.0,
                       help="seconds each task has to answer (default 5)")
    where.set_defaults(func=cmd_where)
    stop = sub.add_parser("stop", help="stop every task of a run")
    stop.add_argument("run")
    stop.add_argument("--grace", type=seconds(0, 3600), default=10.0, help="seconds between SIGTERM and SIGKILL")
    stop.set_defaults(func=cmd_stop)
    check = sub.add_parser("check", help="check hosts, versions, GPUs and the training ports between every pair")
    check.add_argument("cluster", nargs="?", help="a cluster file (TOML); default: the embedded default")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--deadline", type=seconds(1, 3600), default=20.0, help="seconds each host has to answer")
    check.add_argument("--accept-new-host-keys", action="store_true")
    check.set_defaults(func=cmd_check)
    prov = sub.add_parser("provision", help="make every host ready: the Python environment the run needs, "
                                            "installed offline where a host reaches no index")
    prov.add_argument("cluster", nargs="?", help="a cluster file (TOML); default: the embedded default")
    prov.add_argument("--json", action="store_true", help="print the report as JSON")
    prov.add_argument("--deadline", type=seconds(1, 3600), default=20.0, help="seconds each host has to answer")
    prov.add_argument("--accept-new-host-keys", action="store_true")
    prov.set_defaults(func=cmd_provision)
    logs = sub.add_parser("logs", help="the end of a run's task logs (stdout and stderr)")
    logs.add_argument("run")
    logs.add_argument("task", nargs="?", help="one task, e.g. worker-1 (default: all)")
    logs.add_argument("--bytes", type=count(1, 1 << 30), default=65536, help="how much of the end of each log")
    logs.set_defaults(func=cmd_logs)
    gui = sub.add_parser("gui", help="open the window (the default command)")
    gui.add_argument("cluster", nargs="?", help="a cluster file (TOML); default: the last one opened")
    gui.set_defaults(func=cmd_gui)
    runs = sub.add_parser("runs", help="list runs: state, cluster, start, duration, final metrics")
    runs.add_argument("--json", action="store_true", help="print the list as one JSON array")
    runs.add_argument("--timeout", type=seconds(0.1, 600), default=5.0,
                      help="seconds the hosts of runs still going have to say how their tasks are (default 5)")
    runs.set_defaults(func=cmd_runs)
    delete = sub.add_parser("delete", help="delete a run: its folders on its hosts and its history here")
    delete.add_argument("run")
    delete.add_argument("--yes", action="store_true", help="do not ask first")
    delete.add_argument("--accept-new-host-keys", action="store_true")
    delete.set_defaults(func=cmd_delete)
    board = sub.add_parser("tensorboard", help="copy a run's TensorBoard logs here and serve them on 127.0.0.1")
    board.add_argument("run")
    board.add_argument("--port", type=count(1, 65535), help="the port (default: a free one)")
    board.add_argument("--max-gb", type=seconds(0.001, 4096, "GB"), default=MAX_COPY_BYTES / 2**30,
                       help="copy at most this many GB of logs (default %(default)g)")
    board.add_argument("--accept-new-host-keys", action="store_true")
    board.set_defaults(func=cmd_tensorboard)
    exp = sub.add_parser("export", help="write the cluster as launch scripts, a Slurm job, a Kubeflow TFJob or "
                         "a Kubeflow TrainJob")
    exp.add_argument("format", metavar="{" + ",".join(export.FORMATS) + "}",
                     help="scripts: a launch script per host; slurm: an sbatch script; tfjob: a Kubeflow TFJob "
                     "manifest (Training Operator v1); trainjob: a Kubeflow TrainJob and its TrainingRuntime "
                     "(Trainer v2)")
    exp.add_argument("cluster", nargs="?", help="a cluster file (TOML); default: the embedded default")
    exp.add_argument("-o", "--output", required=True, metavar="DIR", help="the folder to write into (made if missing)")
    exp.add_argument("--force", action="store_true", help="write into a folder that is not empty, replacing the "
                     "exported files there")
    exp.add_argument("--image", default="", help="tfjob, trainjob: the container image (TensorFlow, tf-keras and "
                     "tfcc's trainer)")
    exp.add_argument("--time", metavar="LIMIT", help="slurm: the job's time limit (default: the cluster file's "
                     f"[slurm] time, else {cluster_fields.SLURM['time'].default})")
    exp.add_argument("--port-base", type=count(1, 65535), default=SLURM_PORT_BASE, metavar="N",
                     help=f"slurm: the k-th task on a node listens on this port + k (default {SLURM_PORT_BASE})")
    cpus = cluster_fields.SLURM["cpus_per_task"]
    exp.add_argument("--cpus-per-task", type=count(cpus.low, cpus.high), metavar="N",
                     help="slurm: CPUs per task (default: the cluster file's [slurm] cpus_per_task, else "
                     f"{cpus.default})")
    exp.add_argument("--name", default="tfcc", help="slurm, tfjob, trainjob: the job's name and its file's "
                     "(default tfcc)")
    exp.set_defaults(func=cmd_export)
    return parser


class _Shown:
    """A terminal stream that shows every control character written to it (``text.printable``: an escape sequence
    as ``\\x1b``, a carriage return as a new line) instead of letting the terminal run it: text from hosts (an
    error, a check's problem, a run's note, a log) reaches the terminal through it, whatever prints it."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, data: str) -> int:
        self._stream.write(text.printable(data))
        return len(data)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _shown_streams():
    """Within: ``sys.stdout`` and ``sys.stderr`` are ``_Shown``; after, what they were."""
    was = sys.stdout, sys.stderr
    # (None: a start with no console, pythonw's: nothing is printed, and nothing to wrap)
    sys.stdout, sys.stderr = (None if s is None else _Shown(s) for s in was)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = was


def main(argv: list[str] | None = None) -> int:
    """Every command's one error boundary: one ``tfcc: error:`` line that says what to do, exit 2; everything it
    prints goes through one sanitiser (``_Shown``).

    A tfcc error is its own message; anything else is a bug, whose traceback goes to the
    log file that the line names (``--debug`` prints it here instead).
    """
    with _shown_streams():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug, verbose = "--debug" in argv, "--verbose" in argv  # anywhere on the line
    argv = [a for a in argv if a not in ("--debug", "--verbose")]
    ns = parser.parse_args(argv)
    if ns.command is None:
        ns = parser.parse_args(["gui", *argv])
    # Warnings and the tracebacks of threads go to the log file, never to the terminal unless asked for.
    log_to_file()
    memory.return_freed_arrays()  # a followed run's store, let go, goes back to the system (console/memory.py)
    try:
        with log_to_terminal() if debug or verbose else contextlib.nullcontext():
            code = ns.func(ns)
        sys.stdout.flush()  # what is buffered for a pipe whose reader left fails here (below), not at exit
        return code
    except KeyboardInterrupt:
        print("tfcc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tfcc runs | head`: the reader has had enough; nothing went wrong here
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail either
        return 0
    except Exception as exc:
        if debug and not isinstance(exc, TfccError):
            traceback.print_exc()
        print(f"tfcc: error: {describe(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
