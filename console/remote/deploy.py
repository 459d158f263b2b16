"""Deploy tfcc's code to a host, content-addressed (Qt-free).

``agent/`` and ``trainer/`` (and a run's own files) go to
``<home>/dist/<hash>/`` on the host, where the hash covers every file's path
and bytes. Deploying the same code again finds the folder and uploads nothing;
an upload goes to a temporary name first and is renamed into place, so an
interrupted upload never becomes visible.

A script's workdir goes file by file as ``<home>/blobs/<sha256>`` (``upload_blobs``): only
what the host's agent says it lacks, each file whole under a temporary name first.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path

from agent.protocol import BLOBS_DIR
from console import PROJECT_ROOT

log = logging.getLogger("console.remote")
PACKAGES = ("agent", "trainer")


@dataclass(frozen=True)
class Bundle:
    files: tuple[tuple[str, Path], ...]   # (relative path on the host, local file)
    digest: str

    @property
    def name(self) -> str:
        return self.digest[:16]

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for _, p in self.files)


def make_bundle(extra: dict[str, Path] | None = None) -> Bundle:
    """The code to deploy: agent/, trainer/ and ``extra`` {relative path: local file}."""
    files = []
    for package in PACKAGES:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            files.append((path.relative_to(PROJECT_ROOT).as_posix(), path))
    for rel, path in sorted((extra or {}).items()):
        files.append((rel, Path(path)))
    digest = hashlib.sha256()
    for rel, path in files:
        digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return Bundle(tuple(files), digest.hexdigest())


def deploy(bundle: Bundle, files, home: str, on_progress=None) -> tuple[str, int]:
    """Put ``bundle`` under ``<home>/dist/<name>``; returns (that folder, bytes uploaded)."""
    target = f"{home}/dist/{bundle.name}"
    if files.exists(f"{target}/.complete"):
        return target, 0
    tmp = f"{home}/dist/.{bundle.name}.{uuid.uuid4().hex[:8]}.tmp"
    sent = 0
    total = bundle.size
    try:
        for rel, local in bundle.files:
            parent = f"{tmp}/{rel}".rsplit("/", 1)[0]
            files.makedirs(parent)
            files.put(local, f"{tmp}/{rel}")
            sent += local.stat().st_size
            if on_progress:
                on_progress(sent, total)
        with_marker = f"{tmp}/.complete"
        marker = PROJECT_ROOT / "pyproject.toml"  # any small file: its presence is the marker
        files.put(marker, with_marker)
        try:
            files.rename(tmp, target)
        except OSError:
            if not files.exists(f"{target}/.complete"):  # not another deploy that won the race
                raise
            files.remove_tree(tmp)
    except BaseException:
        files.remove_tree(tmp)
        raise
    log.info("deployed %s (%d bytes) to %s", bundle.name, sent, target)
    return target, sent


def upload_blobs(blobs: list[tuple[str, Path, int]], files, home: str, on_progress=None,
                 in_chunks: bool = False) -> int:
    """Put each (sha256, local file, size) at ``<home>/blobs/<sha256>``; returns the bytes uploaded.

    Each goes into a temporary folder first and is renamed into place once whole; the folder
    is removed whatever happens. The agent checks each blob's content when it copies it.
    ``on_progress(sent, total)`` after each file, or with ``in_chunks`` as each file goes (a big wheel's
    copy is followed, and an ``on_progress`` that raises ends it there).
    """
    if not blobs:
        return 0
    folder = f"{home}/{BLOBS_DIR}"
    tmp = f"{folder}/.upload-{uuid.uuid4().hex[:8]}.tmp"
    total = sum(size for _, _, size in blobs)
    sent = 0
    files.makedirs(tmp)
    try:
        for sha, local, size in blobs:
            if in_chunks and on_progress:
                files.put(local, f"{tmp}/{sha}", lambda done, before=sent: on_progress(before + done, total))
            else:
                files.put(local, f"{tmp}/{sha}")
            files.rename(f"{tmp}/{sha}", f"{folder}/{sha}")
            sent += size
            if on_progress:
                on_progress(sent, total)
    finally:
        files.remove_tree(tmp)
    log.info("uploaded %d file(s) of a workdir (%d bytes) to %s", len(blobs), sent, folder)
    return sent
