"""What a host's transport gives the console: its tfcc home, its files, its agent (Qt-free).

Two implementations: ``console.remote.local.LocalTransport`` (this machine) and
``console.remote.ssh.SSHConnection`` (a host over SSH). ``HostLink`` uses either
through this interface alone.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Protocol

from console.errors import TfccError
from console.remote.channel import Channel
from console.text import size_text


class Files(Protocol):
    """File operations on a host: a deploy, fetching a folder (a run's TensorBoard logs), and a file copied from
    one host to another (a resume's backup: ``get`` copies a regular file, never a link, of at most ``limit`` bytes,
    ``CopyTooBig`` past it; ``size`` is a regular file's, ``FileNotFoundError`` for anything else)."""

    def exists(self, path: str) -> bool: ...
    def makedirs(self, path: str) -> None: ...
    def put(self, local: Path, remote: str, progress=None) -> None: ...
    def get(self, remote: str, local: Path, limit: int) -> int: ...
    def size(self, path: str) -> int: ...
    def rename(self, src: str, dst: str) -> None: ...
    def remove_tree(self, path: str) -> None: ...
    def get_tree(self, remote: str, local: Path, budget: "CopyBudget | None" = None) -> int: ...
    def close(self) -> None: ...


class Transport(Protocol):
    description: str

    def connect(self) -> object:
        """Reach the host (an SSH login; nothing for this machine)."""

    def start_agent(self, dist_name: str, python: str) -> tuple[str, Channel | None]:
        """tfcc's home on the host, and the agent started from ``<home>/dist/<dist_name>`` if that
        is deployed (else None: deploy, then ``open_agent``)."""

    def files(self) -> Files: ...

    def open_agent(self, dist: str, python: str) -> Channel: ...

    def close(self) -> None: ...


class CopyTooBig(TfccError):
    """A folder fetched from a host holds more than the copy may take (``CopyBudget``)."""


class CopyBudget:
    """How many bytes a ``get_tree`` may copy here: a host's folder (a hostile one's, or logs grown for months)
    never fills this machine's disk. Each file counts with the size its host listed, and only that much of it is
    read (a file that grows meanwhile is copied as it was listed)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0  # the bytes of the files listed so far (those here already too)

    def take(self, size: int, what: str) -> None:
        self.used += max(0, int(size or 0))
        if self.used > self.limit:
            raise CopyTooBig(f"{what} holds over {size_text(self.limit)}, more than tfcc copies",
                             "look at it on its host, or raise the cap")


def refuse_past(path: str, size: int, limit: int) -> None:
    """A ``Files.get`` of ``path`` (``size`` bytes as listed) refuses it past ``limit``."""
    if size > limit:
        raise CopyTooBig(f"{path} holds {size_text(size)}, more than the {size_text(limit)} tfcc may copy here",
                         "free some space, or copy it by hand")


def copy_first(source, target, size: int) -> int:
    """The first ``size`` bytes of the open file ``source`` into ``target``, read by the megabyte (a file that grew
    since it was listed is copied as listed); the bytes copied."""
    left = size
    while left > 0:
        chunk = source.read(min(1 << 20, left))
        if not chunk:
            break
        target.write(chunk)
        left -= len(chunk)
    return size - left


def same_file(path: Path, size, mtime) -> bool:
    """Whether ``path`` is a regular file of ``size`` bytes last changed at ``mtime`` (whole seconds)."""
    try:
        here = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(here.st_mode) and here.st_size == size and int(here.st_mtime) == int(mtime or 0)


# Why a host's tfcc home must not be used: someone else could put code there that tfcc would run.
UNSAFE_OWNER, UNSAFE_WRITABLE = "owner", "writable"


class UnsafeHome(TfccError):
    """A host's tfcc home that another user owns or may write in: tfcc runs no code from it."""

    retry = False


def unsafe_home_problem(host: str, folder: str, why: str) -> tuple[str, str]:
    """The words (cause, fix) for a tfcc home (or its dist/) that another user owns or may write in."""
    cause = (f"host {host}: {folder} belongs to another user" if why == UNSAFE_OWNER else
             f"host {host}: {folder} is writable by other users")
    return (cause + ": tfcc will not run code from it (another user could put code there)",
            f"use a folder of your own that only you can write: chmod go-w {folder} (if it is yours), or set "
            "TFCC_HOME on that host to another folder")


def local_home_problem(home: Path) -> tuple[str, str] | None:
    """(the folder, why) when this machine's tfcc home or its dist/ is another user's or writable by others."""
    for folder in (home, home / "dist"):
        try:
            info = folder.stat()
        except OSError:  # not there (or not a folder): the deploy that makes it says what is wrong
            continue
        if info.st_uid != os.getuid():
            return str(folder), UNSAFE_OWNER
        if info.st_mode & 0o022:
            return str(folder), UNSAFE_WRITABLE
    return None


def makedirs_private(path: str) -> list[str]:
    """The folders of ``path`` that are missing, top first (each is made readable by its owner only)."""
    missing = []
    while path and path != "/" and not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return list(reversed(missing))
