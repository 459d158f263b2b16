"""What is on disk, to show that a refused command changed nothing."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` (links not followed): its kind, size, mtime and a file's bytes."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            info = path.lstat()
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
            out[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns, data)
    return out
