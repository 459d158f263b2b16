"""``python -m agent.supervise TASK_DIR``: run one task and record how it ended.

Started detached by the agent (its own session, stdin from /dev/null). It runs
the command of ``spec.json`` with stdout and stderr to ``stdout.log`` and
``stderr.log`` and, when the command ends, writes ``exit.json``. It outlives
the agent and the console, so a run keeps going when they go away.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from agent.protocol import CHILD_FILE, EXIT_FILE, SPEC_FILE, STDERR, STDOUT
from agent.runs import drop_firewall, proc_start_time, read_json, write_json


def main(argv, grace: float | None = None) -> int:
    """``grace``: a task told to stop (SIGTERM, SIGINT, SIGHUP) is killed this long after, if it has not ended
    (TensorFlow may catch SIGTERM): where nothing else will (a Slurm task, agent/slurm.py)."""
    folder = Path(argv[1])
    spec = read_json(folder / SPEC_FILE)
    env = dict(os.environ)
    env.update(spec["env"])
    paths = list(spec.get("python_path") or [])
    if spec["env"].get("PYTHONPATH"):
        paths.append(spec["env"]["PYTHONPATH"])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    else:
        env.pop("PYTHONPATH", None)
    received = []
    running: list = []  # the task's process, once started

    def stopping(signum, frame) -> None:
        received.append(signum)
        if grace is not None and running and len(received) == 1:
            os.kill(running[0].pid, signal.SIGTERM)
            killer = threading.Timer(grace, _kill, args=(running[0],))
            killer.daemon = True  # the task's end ends the supervisor: nothing waits for it
            killer.start()

    # A stop signals the whole process group: stay alive to record the task's end.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stopping)
    with open(os.devnull, "rb") as devnull, open(folder / STDOUT, "ab") as out, \
            open(folder / STDERR, "ab") as err:
        try:
            child = subprocess.Popen(spec["argv"], stdin=devnull, stdout=out, stderr=err,
                                     cwd=spec.get("cwd") or str(folder), env=env)
        except OSError as exc:
            err.write(f"tfcc-agent: cannot start {spec['argv'][0]!r}: {exc.strerror}\n".encode())
            write_json(folder / EXIT_FILE, {"returncode": 127, "ended": time.time(),
                                              "error": f"cannot start {spec['argv'][0]!r}: {exc.strerror}"})
            return 127
        running.append(child)
        write_json(folder / CHILD_FILE, {"pid": child.pid, "start_time": proc_start_time(child.pid)})
        while True:
            try:
                returncode = child.wait()
                break
            except InterruptedError:
                continue
    result = {"returncode": returncode, "ended": time.time()}
    if received:
        result["signals"] = [signal.Signals(s).name for s in received]
    if spec.get("firewall"):  # the port is closed now: its rules go before the end is recorded
        try:
            drop_firewall(folder)
        except Exception as exc:  # the next agent's sweep tries again; the end is recorded whatever happens
            print(f"tfcc-supervise: cannot take the firewall rules away: {exc}", file=sys.stderr, flush=True)
    write_json(folder / EXIT_FILE, result)
    return 0


def _kill(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.kill()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
