"""Wait for a change in a task's folder: inotify where Linux gives it (through ctypes), else a poll.

A follow reads a task's files as soon as they grow. With inotify the agent sleeps until
a file in the folder is written, renamed into it or created, so a new line reaches the
console at once and a quiet task costs nothing between the follow's status checks.
Where inotify is missing (another system, no ctypes, the per-user limit of inotify
instances reached, or ``TFCC_AGENT_POLL`` set), ``wait`` sleeps instead, and the
follow shortens the sleep while data flows and lengthens it when idle.
"""

from __future__ import annotations

import os
import select
import threading

from agent.protocol import POLL_ONLY_VARIABLE

# <sys/inotify.h>
IN_MODIFY = 0x002
IN_CLOSE_WRITE = 0x008
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
EVENTS = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE

_libc = None
_libc_lock = threading.Lock()


def _inotify():
    """libc's inotify functions, or None where there are none."""
    global _libc
    with _libc_lock:
        if _libc is None:
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)  # the interpreter's own libc (no ldconfig run)
                libc.inotify_init1.argtypes = [ctypes.c_int]
                libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
                _libc = libc
            except (ImportError, OSError, AttributeError):
                _libc = False
        return _libc or None


class FolderWatch:
    """Changes to the files of one folder. ``wait(timeout)``: True when something changed (or may
    have: the poll cannot tell), False after ``timeout`` seconds of quiet."""

    def __init__(self, folder):
        self.fd = None
        self.why_not = ""
        if os.environ.get(POLL_ONLY_VARIABLE):
            self.why_not = f"{POLL_ONLY_VARIABLE} is set"
            return
        libc = _inotify()
        if libc is None:
            self.why_not = "no inotify on this system"
            return
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            self.why_not = f"inotify_init1: {os.strerror(_errno())}"
            return
        if libc.inotify_add_watch(fd, os.fsencode(str(folder)), EVENTS) < 0:
            self.why_not = f"inotify_add_watch: {os.strerror(_errno())}"
            os.close(fd)
            return
        self.fd = fd

    @property
    def watching(self) -> bool:
        return self.fd is not None

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        """Until a change, ``timeout`` seconds, or ``stop`` (polling: the whole timeout or ``stop``)."""
        if self.fd is None:
            stop.wait(timeout)
            return True
        try:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        except (OSError, ValueError):
            return True
        if not ready:
            return False
        try:
            while os.read(self.fd, 65536):  # what the events were does not matter: the follow looks
                pass
        except OSError:  # BlockingIOError: all read
            pass
        return True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()
