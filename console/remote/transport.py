"""What a host's transport gives the console: its tfcc home, its files, its agent (Qt-free).

Two implementations: ``console.remote.local.LocalTransport`` (this machine) and
``console.remote.ssh.SSHConnection`` (a host over SSH). ``HostLink`` uses either
through this interface alone.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Protocol

from console.remote.channel import Channel


class Files(Protocol):
    """File operations on a host: a deploy, and fetching a folder (a run's TensorBoard logs)."""

    def exists(self, path: str) -> bool: ...
    def makedirs(self, path: str) -> None: ...
    def put(self, local: Path, remote: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def remove_tree(self, path: str) -> None: ...
    def get_tree(self, remote: str, local: Path) -> int: ...
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


def same_file(path: Path, size, mtime) -> bool:
    """Whether ``path`` is a regular file of ``size`` bytes last changed at ``mtime`` (whole seconds)."""
    try:
        here = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(here.st_mode) and here.st_size == size and int(here.st_mtime) == int(mtime or 0)
