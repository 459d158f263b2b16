"""Files the console writes (cluster files, profiles, run manifests): whole or not at all (Qt-free)."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path


def write_atomically(path: str | Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it: a reader or a crash never sees
    half a file, and two writers never share a temporary file.

    A link is followed (the file it names is replaced; the link stays), and a file that exists keeps its
    permissions; a new one gets ``mode`` (None: what the umask leaves of 0o666)."""
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if mode is not None else 0o666)
        with open(fd, "w", encoding="utf-8") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)  # as it was, or as asked: whatever the umask
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


_FLAGS = {"a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC}


def open_private(path: str | Path, mode: str = "ab", encoding: str | None = None):
    """``open(path, mode)`` for writing (``a``, ``w``; ``b`` for bytes) where a new file is readable by its
    owner only: the console's own files (its history of runs, its log) hold hosts, ports and outputs."""
    fd = os.open(path, _FLAGS[mode[0]], 0o600)
    return open(fd, mode, encoding=None if "b" in mode else encoding or "utf-8")
