"""The agent's JSON-lines protocol over stdin/stdout.

Each request is one JSON object on a line: ``{"id": N, "op": "...", ...}``.
Each answer carries the request's ``id``: ``{"id": N, "ok": true, ...}`` or
``{"id": N, "ok": false, "error": "what is wrong and what to do", "code": ...}``
(the codes are ``protocol.ERROR_CODES``). A ``follow`` (a task's files) and a ``system`` (the
host's load, about once a second) answer with a stream of ``{"id": N, "type": ...}`` messages
and end with ``{"id": N, "type": "end", ...}``.
Requests run concurrently (a ``stop`` can come while a ``follow`` streams). The
agent exits when stdin closes; the tasks it started keep running.

Operations: ``protocol.OPS``, each handled by ``Server.op_<name>``.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import threading
import time

from agent import __version__, envs, firewall, ports, probe, protocol, runs, slurm, system, workdir
from agent.protocol import PROTOCOL_VERSION
from agent.runs import AgentError
from agent.watch import FolderWatch

FAST_POLL = 0.01  # seconds between a follow's looks while lines come, where it polls (no inotify)
STREAMING = (protocol.FOLLOW, protocol.SYSTEM)  # ops that answer until their end: stdin's close ends them
# (an env_make also ends when stdin closes, but it is waited for: its installer is killed and its folder removed)


class Server:
    def __init__(self, inp, out):
        self.listeners = ports.Listeners()
        self._in = inp
        self._out = out
        self._lock = threading.Lock()
        self.closed = threading.Event()
        self._going: dict = {}  # a follow's request id -> set while it may send (``pause`` clears it)
        self.ended = threading.Event()  # stdin closed: the console went away
        self._cancelled: set = set()    # env_make request ids an env_cancel ended

    def send(self, message: dict) -> bool:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            if self.closed.is_set():
                return False
            try:
                self._out.write(data)
                self._out.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.closed.set()
                return False
        return True

    def serve(self) -> None:
        requests = []
        for raw in self._in:
            if not raw.strip():
                continue
            try:
                req = json.loads(raw)
                if not isinstance(req, dict):
                    raise ValueError("a request is a JSON object")
            except ValueError as exc:
                self._refuse(None, f"bad request line ({exc}); send one JSON object per line", protocol.BAD_REQUEST)
                continue
            worker = threading.Thread(target=self._handle, args=(req,), daemon=True)
            worker.start()
            if req.get("op") not in STREAMING:
                requests.append(worker)
        # stdin closed: answer what was asked, then stop streaming and exit.
        self.ended.set()
        for worker in requests:
            worker.join(timeout=60)
        self.closed.set()
        self.listeners.release()

    def _refuse(self, rid, error: str, code: str) -> None:
        self.send({"id": rid, "ok": False, "error": error, "code": code})

    def _handle(self, req: dict) -> None:
        rid = req.get("id")
        op = req.get("op")
        handler = HANDLERS.get(op) if isinstance(op, str) else None
        if handler is None:
            self._refuse(rid, f"unknown op {op!r}; ops are {', '.join(protocol.OPS)}", protocol.UNKNOWN_OP)
            return
        try:
            result = handler(self, req)
        except AgentError as exc:
            self._refuse(rid, str(exc), exc.code)
        except Exception as exc:  # an agent bug must not kill the other requests
            self._refuse(rid, f"agent error: {type(exc).__name__}: {exc}", protocol.AGENT_BUG)
        else:
            if result is not None:
                self.send({"id": rid, "ok": True, **result})

    # ----------------------------------------------------------------- operations

    def op_hello(self, req):
        theirs = req.get("protocol")
        if theirs is not None and theirs != PROTOCOL_VERSION:
            raise AgentError(
                f"the console speaks agent protocol {theirs} but this agent speaks {PROTOCOL_VERSION}; "
                "deploy the console's agent to this host again", protocol.PROTOCOL_MISMATCH
            )
        return {
            "agent_version": __version__,
            "protocol": PROTOCOL_VERSION,
            "python": platform.python_version(),
            "python_executable": sys.executable,
            "platform": platform.platform(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "home": str(runs.home()),
        }

    def op_start(self, req):
        """Start a task (runs.start); ``python_env`` ({"spec", "required"}): it runs with that environment's
        Python where this host has it made (agent/envs.py)."""
        python = envs.python_for(runs.home(), req.get("python_env"))
        argv = req.get("argv")
        if python is not None and isinstance(argv, list) and argv:
            bin_dir = os.path.dirname(python)
            given = req.get("env") if isinstance(req.get("env"), dict) else {}
            path = given.get("PATH") if isinstance(given.get("PATH"), str) else os.environ.get("PATH", os.defpath)
            env = {**given, "VIRTUAL_ENV": os.path.dirname(bin_dir), "PATH": bin_dir + os.pathsep + path}
            req = {**req, "argv": [python, *argv[1:]], "env": env}
        return runs.start(req)

    def op_status(self, req):
        return runs.status(req.get("run_id"), req.get("task"))

    def op_env_status(self, req):
        """This host's platform (from ``python``, else the agent's interpreter), the free space where environments
        go, the environment made for ``spec`` (its marker), if any, and whether it reaches ``index`` (agent/envs.py)."""
        python = req.get("python")
        if python is not None and not isinstance(python, str):
            raise AgentError("env_status: python is an interpreter's path", protocol.BAD_ARGUMENT)
        spec, index = req.get("spec"), req.get("index")
        if index is not None and not isinstance(index, str):
            raise AgentError("env_status: index is a package index's URL", protocol.BAD_ARGUMENT)
        return envs.status(runs.home(), envs.check_hash(spec, "env_status: spec") if spec else None, python, index)

    def op_env_make(self, req):
        """Make an environment offline from wheels pushed as blobs (agent/envs.py): ``{"type": "progress",
        "stage": ...}`` messages as it goes (and one with ``beat`` every ``envs.BEAT_SECONDS`` whatever it does: the
        console hears the host is there), then an end with its marker (``env``), why it failed, or ``cancelled``."""
        rid = req.get("id")
        first, stage = [True], [protocol.ENV_PREPARING]
        lock = threading.Lock()
        done = threading.Event()

        def emit(now: str, **more) -> None:
            with lock:
                message = {"id": rid, "type": protocol.PROGRESS, "stage": now, **more}
                if first[0]:
                    message["ok"], first[0] = True, False
                stage[0] = now
                self.send(message)

        def beat() -> None:
            while not done.wait(envs.BEAT_SECONDS):
                with lock:
                    if not first[0]:
                        self.send({"id": rid, "type": protocol.PROGRESS, "stage": stage[0], "beat": True})

        def stop() -> bool:
            return self.ended.is_set() or self.closed.is_set() or rid in self._cancelled

        def end(**said) -> None:
            with lock:
                self.send({"id": rid, **({"ok": True} if first[0] else {}), "type": protocol.END, **said})
                first[0] = False

        threading.Thread(target=beat, name="tfcc-env-beat", daemon=True).start()
        try:
            env = envs.make(runs.home(), req, emit, stop)
        except envs.Cancelled:
            end(cancelled=True)
            return None
        except AgentError as exc:
            if first[0]:
                raise
            end(error=str(exc), code=exc.code)
            return None
        finally:
            done.set()
            self._cancelled.discard(rid)
        end(env=env)
        return None

    def op_env_cancel(self, req):
        """End an env_make (``make``: its request's id): its installer is killed and nothing of it is left."""
        self._cancelled.add(req.get("make"))
        return {}

    def op_list(self, req):
        return {"tasks": runs.list_runs()}

    def op_stop(self, req):
        done = req.get("done", False)
        if not isinstance(done, bool):
            raise AgentError(f"stop: done must be true or false, not {done!r}", protocol.BAD_ARGUMENT)
        return runs.stop(req.get("run_id"), req.get("task"), float(req.get("grace", 10.0)), done)

    def op_measure(self, req):
        """Ask a running task to measure where its step time goes (docs/why-slow.md)."""
        return runs.measure(req.get("run_id"), req.get("task"), req.get("ask"), req.get("at_step"))

    def op_stacks(self, req):
        """Where each thread of a running task is now (its Python stacks), or why it cannot say (runs.stacks)."""
        return runs.stacks(req.get("run_id"), req.get("task"), req.get("wait", runs.STACKS_WAIT))

    def op_submit(self, req):
        """A run's tasks as one Slurm job from this login host (agent/slurm.py)."""
        return slurm.submit(req)

    def op_job(self, req):
        return slurm.job(req.get("run_id"))

    def op_cancel(self, req):
        step_only = req.get("step_only", False)
        if not isinstance(step_only, bool):
            raise AgentError(f"cancel: step_only must be true or false, not {step_only!r}", protocol.BAD_ARGUMENT)
        return slurm.cancel(req.get("run_id"), float(req.get("grace", slurm.GRACE)), step_only)

    def op_remove(self, req):
        """Delete a run's folder on this host (every task of it here), refused while a task runs."""
        return runs.remove_run(req.get("run_id"), req.get("console"))

    def op_missing_blobs(self, req):
        """Which of ``sha256`` (a list of sha256 hex strings) have no blob in ``<home>/blobs`` yet."""
        try:
            missing = workdir.missing(runs.home(), req.get("sha256"))
        except workdir.WorkdirError as exc:
            raise AgentError(str(exc), exc.code) from None
        return {"missing": missing, "blobs": str(workdir.blobs_dir(runs.home()))}

    def op_logs(self, req):
        """The last ``max_bytes`` of a task's stdout and stderr."""
        folder = runs.task_dir(req.get("run_id"), req.get("task"))
        runs.status(req.get("run_id"), req.get("task"))
        limit = int(req.get("max_bytes", 65536))
        out = {}
        for name in protocol.LOG_STREAMS:
            try:
                with open(folder / name, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    f.seek(max(0, f.tell() - limit))
                    out[name] = f.read().decode("utf-8", "replace")
            except FileNotFoundError:
                out[name] = ""
        return {"logs": out}

    def op_probe(self, req):
        """Python, TensorFlow and tf-keras versions, CPUs, memory, free disk, GPUs, the code's hash; with
        ``firewall``, whether nftables rules can be set here (``firewall``: "root" or "sudo", else
        ``firewall_problem`` says why not: asked only then, a sudo that may not would be logged); with
        ``modules`` (top-level names a user's code imports), ``missing_modules``: those this Python lacks."""
        result = probe.probe(runs.home(), with_tensorflow=bool(req.get("tensorflow")))
        paths = None
        if req.get("python_env") is not None:  # the environment the tasks run in: its versions, not the agent's
            spec = (req["python_env"] or {}).get("spec") if isinstance(req["python_env"], dict) else None
            env = envs.find(runs.home(), envs.check_hash(spec, "probe: python_env's spec"))
            result["env"] = env
            if env is not None:
                standard = [p for p in probe.search_path() if p not in ("", ".") and "site-packages" not in p
                            and "dist-packages" not in p]  # Python's own: nothing the host installed beside it
                paths = envs.site_packages(env) + standard
                result.update(python=env.get("python_version"), python_executable=env["python"],
                              tensorflow=probe.package_version("tensorflow", paths)
                              or probe.package_version("tensorflow-cpu", paths),
                              tf_keras=probe.package_version("tf-keras", paths))
        modules = req.get("modules")
        if modules is not None:
            if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
                raise AgentError("probe: modules must be a list of module names", protocol.BAD_ARGUMENT)
            result["missing_modules"] = probe.missing_modules(modules, paths)
        if req.get("firewall"):
            command, word = firewall.how()
            result.update(firewall=word if command else None, firewall_problem=None if command else word)
        return result

    def op_check_ports(self, req):
        """Can each port be bound here, and if not, which process holds it."""
        return {"ports": [ports.check_free(int(p)) for p in req.get("ports", [])]}

    def op_listen(self, req):
        """Hold listeners on ``ports`` for at most ``seconds`` (a reachability check)."""
        seconds = float(req.get("seconds", 30))
        if not 0 < seconds <= 300:
            raise AgentError(f"listen: seconds {seconds:g} must be more than 0 and at most 300", protocol.BAD_ARGUMENT)
        return self.listeners.listen([int(p) for p in req.get("ports", [])], seconds)

    def op_release(self, req):
        return {"released": self.listeners.release(req.get("ports"))}

    def op_connect(self, req):
        """Try a TCP connection to each target ({host, port}) at once, each within ``connect_timeout`` s."""
        return {"results": ports.connect_all(req.get("targets", []), float(req.get("connect_timeout", 3.0)))}

    def op_ports(self, req):
        """``count`` TCP ports that are free on this host now (for port = "auto")."""
        count = int(req.get("count", 1))
        if not 1 <= count <= 256:
            raise AgentError(f"ports: count {count} must be from 1 to 256", protocol.BAD_ARGUMENT)
        return {"ports": runs.free_ports(count)}

    def op_follow(self, req):
        """Stream metrics records and log text from byte offsets until the task ends.

        A file is read only when it has grown (a stat first). Between looks the follow waits
        for a change in the task's folder (inotify: a new line goes out at once), or, where
        it polls, ``FAST_POLL`` s while lines come, twice as long after each quiet look, up
        to ``poll`` s. The task's state is looked at every ``poll`` s.
        """
        rid = req.get("id")
        run_id, task = req.get("run_id"), req.get("task")
        folder = runs.task_dir(run_id, task)
        first = runs.status(run_id, task)  # a clear error for a task that is not here
        offsets = {name: int((req.get("offsets") or {}).get(name, 0)) for name in protocol.STREAMS}
        poll = max(FAST_POLL, float(req.get("poll", 0.2)))
        # "started": when the agent started the task (the watchdog's clock, whatever the task writes).
        self.send({"id": rid, "ok": True, "type": protocol.FOLLOWING, "offsets": offsets, "started": first["started"],
                   "phase": first["phase"]})
        watch = FolderWatch(folder)
        attempt = first.get("attempt") if first["phase"] == protocol.RUNNING else None  # a Slurm task's (else None)
        unfinished: dict = {}  # stream -> its size when a look found no complete line after its offset
        scans: dict = {name: {} for name in protocol.STREAMS}  # how far a long line being written was read
        pause = FAST_POLL
        look_at_state = 0.0
        going = self._going[rid] = threading.Event()
        going.set()
        try:
            while not self.closed.is_set():
                if not going.is_set():  # the console is behind: it says when to go on (or closes the channel)
                    going.wait(0.5)
                    continue
                ended = False
                if time.monotonic() >= look_at_state:
                    # Read the end state first: whatever was written before it is read below.
                    state = runs.status(run_id, task)
                    ended = state["phase"] not in (protocol.RUNNING, protocol.PENDING)
                    if attempt is None and state["phase"] == protocol.RUNNING:
                        attempt = state.get("attempt")
                    elif not ended and attempt is not None and state.get("attempt") not in (None, attempt):
                        # A Slurm job's next attempt runs in this folder: the one followed ended with its step
                        # (killed, no end of its own). The console follows the next one anew.
                        ended = True
                        state = {**state, "phase": protocol.LOST, "exit": None}
                    look_at_state = time.monotonic() + poll
                sent = False
                while going.is_set():
                    sent_any = self._send_new(rid, folder, offsets, unfinished, scans)
                    if sent_any is None:
                        return None  # channel closed
                    if not sent_any:
                        break
                    sent = True
                if not going.is_set():
                    look_at_state = 0.0  # held before all was read: the end, if any, is read again after
                    continue
                if ended:
                    self._going.pop(rid, None)  # ended before its end is said: a pause after it finds none
                    self.send({"id": rid, "type": protocol.END, "phase": state["phase"], "exit": state["exit"],
                               "offsets": offsets, "stopped": state["stopped"]})
                    return None
                until_state = max(0.0, look_at_state - time.monotonic())
                if watch.watching:
                    watch.wait(until_state, self.closed)
                else:
                    pause = FAST_POLL if sent else min(pause * 2, poll)
                    self.closed.wait(min(pause, until_state))
        finally:
            watch.close()
            self._going.pop(rid, None)
        return None

    def op_pause(self, req):
        """Hold a follow (``follow``: its request's id) while ``paused`` is true, and let it go on when false: a
        console that has more to handle than it will hold says so; nothing is lost, the follow sends on from
        where it stopped. A follow that has ended is no error (it ended meanwhile)."""
        going = self._going.get(req.get("follow"))
        if going is not None:
            going.clear() if req.get("paused", True) else going.set()
        return {"following": going is not None}

    def _send_new(self, rid, folder, offsets, unfinished, scans=None):
        """Send what each stream has in complete lines after its offset; whether anything was sent,
        None when the channel is closed. A stream is read only when its size says there is news."""
        sent = False
        for name in protocol.STREAMS:
            try:
                size = os.stat(folder / name).st_size
            except OSError:
                continue  # not written yet
            if size <= offsets[name] or unfinished.get(name) == size:
                continue
            lines, end, skipped = runs.read_new(folder / name, offsets[name],
                                                scan=None if scans is None else scans[name])
            if not lines:
                unfinished[name] = size  # a line being written: read again when the size changes
                continue
            if name == protocol.METRICS:
                # The lines as they are in the file: the console decodes each once (a damaged
                # one too, which it shows as such); nothing is decoded and encoded again here.
                # A line over the cap comes as words that say so: "skipped" says by how many bytes it is shorter.
                message = {"id": rid, "type": protocol.METRICS_MESSAGE, "offset": end,
                           "lines": [line.decode("utf-8", "replace") for line in lines]}
                if skipped:
                    message["skipped"] = skipped
            else:
                message = {"id": rid, "type": protocol.LOG_MESSAGE, "stream": name,
                           "text": b"\n".join(lines).decode("utf-8", "replace") + "\n", "offset": end}
            if not self.send(message):
                return None
            offsets[name] = end
            sent = True
        return sent

    def op_system(self, req):
        """Sample this host's CPUs, memory and GPUs and the run's tasks here about every ``interval``
        seconds (default 1), until every task of the run on this host has ended."""
        rid, run_id = req.get("id"), req.get("run_id")
        try:
            interval = float(req.get("interval", 1.0))
        except (TypeError, ValueError):
            interval = float("nan")
        if not 0.1 <= interval <= 3600:
            raise AgentError(f"system: interval {req.get('interval')!r} must be a number of seconds from 0.1 to 3600",
                             protocol.BAD_ARGUMENT)
        if not runs.run_tasks(run_id):
            raise AgentError(f"no task of run {run_id} on this host (tfcc runs lists what is here)",
                             protocol.NO_SUCH_TASK)
        if (runs.home() / protocol.RUNS_DIR / run_id / protocol.SLURM_JOB_FILE).exists():
            return self._nodes_system(rid, run_id, interval)
        sampler = system.Sampler()
        tasks = system.running_tasks(run_id)
        sampler.baseline(tasks)
        self.send({"id": rid, "ok": True, "type": protocol.SAMPLING, "interval": interval, "tasks": sorted(tasks)})
        while tasks and not self.closed.wait(interval):
            tasks = system.running_tasks(run_id)
            if tasks and not self.send({"id": rid, **sampler.sample(tasks)}):
                return None  # channel closed
        if not self.closed.is_set():
            self.send({"id": rid, "type": protocol.END})
        return None


    def _nodes_system(self, rid, run_id: str, interval: float):
        """A Slurm run's ``system``: each node's samples as its first task writes them (agent/slurm.py), from
        where each file ends now, every message with its ``node``; until every task of the run has ended."""
        folder = runs.home() / protocol.RUNS_DIR / run_id / protocol.SLURM_SYSTEM_DIR
        offsets: dict = {}
        self.send({"id": rid, "ok": True, "type": protocol.SAMPLING, "interval": interval,
                   "tasks": runs.run_tasks(run_id)})
        while not self.closed.wait(interval):
            for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
                node = path.name[:-len(".jsonl")]
                if protocol.name_problem("task", node):
                    continue
                try:
                    size = path.stat().st_size
                except OSError:
                    continue
                offset = offsets.setdefault(node, size)  # what it had before this op began is not streamed
                if size < offset:  # moved aside (bounded) and begun anew
                    offset = 0
                lines, offsets[node], _ = runs.read_new(path, offset)
                for line in lines[-50:]:  # a console that was away gets the newest, not a backlog
                    try:
                        sample = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(sample, dict) and not self.send({"id": rid, **sample, "node": node}):
                        return None  # channel closed
            if all(runs.status(run_id, task)["phase"] not in (protocol.RUNNING, protocol.PENDING)
                   for task in runs.run_tasks(run_id)):
                break
        if not self.closed.is_set():
            self.send({"id": rid, "type": protocol.END})
        return None


# The op table: each op of the protocol to its handler (a missing handler fails at import).
HANDLERS = {op: getattr(Server, f"op_{op}") for op in protocol.OPS}


def _sweep_firewall() -> None:
    try:
        firewall.sweep(runs.home(), runs.serves, runs.started)
    except Exception as exc:  # the agent serves whatever happens here
        print(f"tfcc-agent: firewall sweep: {exc}", file=sys.stderr, flush=True)


def main() -> int:
    # Run folders 0700 and their files 0600, the tasks' too (they inherit it): another user of this host
    # reads nothing of a run (its TF_CONFIG names the ports), whatever the login's umask.
    os.umask(0o077)
    # Firewall rules of tasks whose supervisor did not live to take them away (killed, a reboot): gone now.
    threading.Thread(target=_sweep_firewall, name="tfcc-firewall-sweep", daemon=True).start()
    Server(sys.stdin.buffer, sys.stdout.buffer).serve()
    # The console sends the agent's stderr to a file it reads when the agent dies; a clean end leaves none.
    stderr_file = os.environ.get(protocol.AGENT_STDERR_VARIABLE)
    if stderr_file:
        try:
            os.unlink(stderr_file)
        except OSError:
            pass
    return 0
