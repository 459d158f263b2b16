"""This machine as a host (hosts marked ``local``): the agent as a subprocess, files by copying (Qt-free)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from console import PROJECT_ROOT
from console.remote.channel import Channel, tail
from console.remote.transport import (CopyBudget, UnsafeHome, copy_first, local_home_problem, makedirs_private,
                                      refuse_past, same_file, unsafe_home_problem)



def local_agent(python: str = sys.executable, agent_root: Path = PROJECT_ROOT, env: dict | None = None,
                stderr_dir: Path | None = None) -> Channel:
    """``python -S -m agent`` in ``agent_root`` as a subprocess: its channel. ``stderr_dir``: where its
    stderr is kept (read when it dies at start; default: nowhere)."""
    env = dict(os.environ if env is None else env)
    env.pop("PYTHONPATH", None)  # the agent needs nothing but its own folder (the cwd)
    stderr_path = None
    if stderr_dir is not None:
        Path(stderr_dir).mkdir(parents=True, exist_ok=True)
        stderr_path = Path(stderr_dir) / f"agent-{uuid.uuid4().hex[:12]}.err"
        env["TFCC_AGENT_STDERR"] = str(stderr_path)
    # -S: the agent needs only the standard library; skipping site saves most of the start-up.
    with open(stderr_path or os.devnull, "wb") as err:
        proc = subprocess.Popen([python, "-S", "-m", "agent"], cwd=agent_root, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)

    def close():
        try:
            proc.stdin.close()
        except OSError:
            pass
        # An agent ends when its stdin closes; one that hangs is killed. Its stdout is closed
        # only after it has ended: closing it while the reader thread waits on it would wait too.
        threading.Thread(target=_reap, args=(proc,), name="tfcc-agent-reaper", daemon=True).start()

    def stderr_tail() -> str:
        if stderr_path is None:
            return ""
        text = tail(stderr_path)
        stderr_path.unlink(missing_ok=True)
        return text

    return Channel(proc.stdin, proc.stdout, close, f"local agent (pid {proc.pid})", stderr_tail, abort=proc.kill)


def _reap(proc: subprocess.Popen, grace: float = 2.0) -> None:
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    try:
        proc.stdout.close()
    except OSError:
        pass


class LocalFiles:
    """File operations on this machine (for hosts marked local)."""

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def makedirs(self, path: str) -> None:
        for folder in makedirs_private(path):
            os.makedirs(folder, mode=0o700, exist_ok=True)

    def put(self, local: Path, remote: str, progress=None) -> None:
        """Copy ``local`` to ``remote``; ``progress(bytes so far)`` as it goes (it may raise to end the copy)."""
        if progress is None:
            shutil.copyfile(local, remote)
            return
        done = 0
        with open(local, "rb") as source, open(remote, "wb") as target:
            for chunk in iter(lambda: source.read(1 << 20), b""):
                target.write(chunk)
                done += len(chunk)
                progress(done)

    def get(self, remote: str, local: Path, limit: int) -> int:
        try:
            fd = os.open(remote, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a link or a pipe: refused, no wait
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise FileNotFoundError(f"{remote} is a link, not a regular file") from None
            raise
        with os.fdopen(fd, "rb") as source, open(local, "wb") as target:
            info = os.fstat(source.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise FileNotFoundError(f"{remote} is not a regular file")
            refuse_past(remote, info.st_size, limit)
            return copy_first(source, target, info.st_size)

    def size(self, path: str) -> int:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            raise FileNotFoundError(f"{path} is not a regular file")
        return info.st_size

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def get_tree(self, remote: str, local: Path, budget: CopyBudget | None = None) -> int:
        """Copy the folder ``remote`` into ``local`` as ``SFTPFiles.get_tree`` does (folders and regular
        files, links not followed, unchanged files not copied again, each counted in ``budget``);
        FileNotFoundError when it is not there."""
        local.mkdir(parents=True, exist_ok=True)
        copied = 0
        with os.scandir(remote) as entries:
            for entry in entries:
                target = local / entry.name
                if entry.is_dir(follow_symlinks=False):
                    copied += self.get_tree(entry.path, target, budget)
                elif entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    if budget is not None:
                        budget.take(info.st_size, remote)
                    if not same_file(target, info.st_size, info.st_mtime):
                        shutil.copy2(entry.path, target, follow_symlinks=False)
                        copied += 1
        return copied

    def close(self) -> None:
        """Nothing to close."""


class LocalTransport:
    """The ``Transport`` of a local host: its home is ``$TFCC_HOME`` (default ``~/.tfcc``)."""

    description = "this machine"

    def __init__(self):
        self.home = os.environ.get("TFCC_HOME") or str(Path.home() / ".tfcc")

    def connect(self) -> None:
        """Nothing to open."""

    def start_agent(self, dist_name: str, python: str) -> tuple[str, Channel | None]:
        unsafe = local_home_problem(Path(self.home))
        if unsafe is not None:
            raise UnsafeHome(*unsafe_home_problem("this machine", *unsafe))
        dist = Path(self.home) / "dist" / dist_name
        return self.home, (self.open_agent(str(dist), python) if (dist / ".complete").exists() else None)

    def files(self) -> LocalFiles:
        return LocalFiles()

    def open_agent(self, dist: str, python: str) -> Channel:
        return local_agent(python, Path(dist), stderr_dir=Path(self.home))

    def close(self) -> None:
        """Nothing to close: each agent ends with its channel."""
