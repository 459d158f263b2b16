"""tfcc's own errors, and where the tracebacks of everything else go (Qt-free).

Every message of a ``TfccError`` says what is wrong and what to do. The front ends
catch errors at one place each (``console.cli.main`` for every ``tfcc`` command, the
window's exception hook for its slots): a ``TfccError`` is shown as its one line; any
other exception is a bug, shown as one line that names the log file its traceback
went to (``record``).
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from pathlib import Path

import platformdirs

log = logging.getLogger("console.errors")


class TfccError(Exception):
    """A problem a person can act on; ``str(error)`` is the one line to show them.

    ``cause`` says what is wrong and ``fix`` (when given apart) what to do about it.
    ``timed_out``: the other side gave no answer in time (rather than a refusal), so a
    check reports it as "no answer in N s".
    """

    timed_out = False

    def __init__(self, cause: str, fix: str | None = None, timed_out: bool | None = None):
        super().__init__(cause if fix is None else f"{cause}; {fix}")
        self.cause = cause
        self.fix = fix
        if timed_out is not None:
            self.timed_out = timed_out


def state_dir() -> Path:
    """The console's own folder: run manifests, profiles, the error log."""
    return Path(os.environ.get("TFCC_CONSOLE_HOME") or platformdirs.user_state_dir("tfcc"))


def log_path() -> Path:
    return state_dir() / "tfcc.log"


def record(exc: BaseException) -> Path | None:
    """Append ``exc`` with its traceback to the log file; its path, or None if it cannot be written."""
    path = log_path()
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n{text}")
    except OSError as write_error:
        log.warning("cannot write %s (%s)", path, write_error)
        return None
    return path


def describe(exc: BaseException) -> str:
    """The one line for a person: a TfccError's own words, else the bug and where its traceback is."""
    if isinstance(exc, TfccError):
        return str(exc)
    path = record(exc)
    where = f"the details are in {path}" if path else "the details could not be written to a log file"
    return (f"unexpected {type(exc).__name__}: {exc} ({where}; please report it with that file)")
