"""tfcc's own errors, and where the tracebacks of everything else go (Qt-free).

Every message of a ``TfccError`` says what is wrong and what to do. The front ends
catch errors at one place each (``console.cli.main`` for every ``tfcc`` command, the
window's exception hook for its slots): a ``TfccError`` is shown as its one line; any
other exception is a bug, shown as one line that names the log file its traceback
went to (``record``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
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


class RunError(TfccError):
    """A run cannot start or be found; the message says what to do."""


def state_dir() -> Path:
    """The console's own folder: run manifests, profiles, the error log (``make_state_dir`` makes it)."""
    return Path(os.environ.get("TFCC_CONSOLE_HOME") or platformdirs.user_state_dir("tfcc"))


def make_state_dir(folder: Path | None = None) -> Path:
    """Make the state folder (readable by its owner only) and ``folder`` in it, if they are not there; before
    anything is written there (a command that reads only, or is refused, leaves no folder behind)."""
    path = state_dir()
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    return folder or path


def log_path() -> Path:
    return state_dir() / "tfcc.log"


LOG_BYTES = 5 << 20  # tfcc.log is rotated at this size: tfcc.log.1 and tfcc.log.2 are kept, no more
LOG_KEPT = 2
_log_lock = threading.Lock()


def append_to_log(text: str) -> Path:
    """Append ``text`` to the log file (readable by its owner only), rotating it when it has grown past
    ``LOG_BYTES``: a console that runs for months, or a host that fills the log, never fills the disk."""
    path = log_path()
    with _log_lock:
        make_state_dir(path.parent)
        try:
            if path.stat().st_size >= LOG_BYTES:
                for n in range(LOG_KEPT, 1, -1):
                    older = path.with_name(f"{path.name}.{n - 1}")
                    if older.exists():
                        os.replace(older, path.with_name(f"{path.name}.{n}"))
                os.replace(path, path.with_name(f"{path.name}.1"))
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with open(fd, "a", encoding="utf-8", errors="replace") as f:
            f.write(text)
    return path


def record(exc: BaseException) -> Path | None:
    """Append ``exc`` with its traceback to the log file; its path, or None if it cannot be written."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        return append_to_log(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n{text}")
    except OSError as write_error:
        log.warning("cannot write %s (%s)", log_path(), write_error)
        return None


def describe(exc: BaseException) -> str:
    """The one line for a person: a TfccError's own words, else the bug and where its traceback is."""
    if isinstance(exc, TfccError):
        return str(exc)
    path = record(exc)
    where = f"the details are in {path}" if path else "the details could not be written to a log file"
    return (f"unexpected {type(exc).__name__}: {exc} ({where}; please report it with that file)")


class LogFile(logging.Handler):
    """Log records to the log file of the console's state folder, found at each record (tests
    move the folder): warnings and errors, with their tracebacks, never on the terminal."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            append_to_log(f"{self.format(record)}\n")
        except Exception:  # a log that cannot be written must not become an error of its own
            self.handleError(record)


def log_to_file(level: int = logging.WARNING) -> None:
    """Send the console's log records of ``level`` and above to ``tfcc.log`` (once per process)."""
    root = logging.getLogger()
    if not any(isinstance(h, LogFile) for h in root.handlers):
        handler = LogFile(level)
        handler.setFormatter(logging.Formatter("%(asctime)s pid %(process)d %(name)s %(levelname)s: %(message)s"))
        root.addHandler(handler)
    if root.level > level:
        root.setLevel(level)


@contextlib.contextmanager
def log_to_terminal():
    """While in this ``with`` block, log records of INFO and above are printed on stderr too
    (``--verbose``, ``--debug``)."""
    handler = logging.StreamHandler()
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("tfcc: %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
