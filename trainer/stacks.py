"""Where each thread of a task is, when its agent asks: every thread's Python stack, dumped by the task itself.

The agent leaves an ask in the task's folder (``STACKS_ASK``: the stacks op, agent/runs.py); a watcher thread started
here (tfcc's trainer, and a user's script through the capture, unchanged) answers within a fraction of a second with
``faulthandler``'s dump of every thread (``STACKS_FILE``: a first line ``tfcc-stacks ASK``, the dump, a last line
``tfcc-stacks-end ASK``), written whole and renamed into place. ``faulthandler`` needs no lock a stuck thread could
hold, and writes at most 100 threads of 100 frames each: the answer stays bounded whatever the task does. A task
whose every thread holds the interpreter cannot run the watcher: the agent says it is silent.

Standard library only: no TensorFlow, so the watcher runs before a script imports it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import threading
import time

from agent.protocol import RUN_DIR_VARIABLE, STACKS_ASK, STACKS_FILE, STACKS_MARK

POLL_SECONDS = 0.2  # how often the watcher looks for an ask


def dump(folder: str, ask: str) -> None:
    """Write every thread's stack into ``folder``'s answer file for ``ask`` (whole, then renamed into place)."""
    path = os.path.join(folder, STACKS_FILE)
    partial = f"{path}.{os.getpid()}.part"
    with open(partial, "w", encoding="utf-8") as f:
        f.write(f"{STACKS_MARK} {ask}\n")
        f.flush()
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.write(f"{STACKS_MARK}-end {ask}\n")
    os.replace(partial, path)


def _watch(folder: str, stop: threading.Event) -> None:
    ask_path = os.path.join(folder, STACKS_ASK)
    answered = None
    while not stop.wait(POLL_SECONDS):
        try:
            with open(ask_path, encoding="utf-8") as f:
                ask = json.load(f).get("ask")
        except (OSError, ValueError, AttributeError):
            continue
        if not isinstance(ask, str) or not ask or len(ask) > 64 or ask == answered:
            continue
        try:
            dump(folder, ask)
            answered = ask
        except OSError:
            time.sleep(POLL_SECONDS)  # a full disk, a folder gone: the agent says the task is silent


def arm(folder: str | None = None) -> threading.Event | None:
    """Start the watcher for this task's run folder (``folder``, else the agent's ``TFCC_RUN_DIR``); the event
    that ends it, or None outside a run folder (run by hand)."""
    folder = folder or os.environ.get(RUN_DIR_VARIABLE)
    if not folder or not os.path.isdir(folder):
        return None
    stop = threading.Event()
    threading.Thread(target=_watch, args=(folder, stop), name="tfcc-stacks", daemon=True).start()
    return stop
