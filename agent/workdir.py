"""A script's folder on this host: its files as blobs by content, and each task's own copy (``work/``).

The console uploads each file of a script's workdir once, as ``<home>/blobs/<sha256>``
(``missing`` says which it still lacks). A task's first start copies the files its start
request names into ``<task folder>/work/``: a copy, never a link, so a script that rewrites a
file of its folder changes no blob; built in a temporary folder beside it and renamed into
place, so a half-built ``work/`` is never seen. A relaunch (resume, restart) keeps ``work/``
as the task left it: what the script wrote there (checkpoints by relative path) survives.

Every name comes from the console and is checked here as hostile: a sha256 is 64 lowercase
hex digits, a relative path has no empty, ``.`` or ``..`` part, is not absolute and has no
NUL; nothing is written outside the temporary folder, and no link is followed.

Standard library only, Python 3.9+ (``agent/`` is copied to hosts that have nothing else).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import uuid
from pathlib import Path

from agent import protocol

_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_ENTRIES = 100_000      # far above the console's own cap on a workdir's files
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
CHUNK = 1 << 20


class WorkdirError(Exception):
    """A request about blobs or a workdir that cannot be carried out; ``code`` is a ``protocol`` error code."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def blobs_dir(home: Path) -> Path:
    return home / protocol.BLOBS_DIR


def check_sha256s(values, what: str) -> list:
    """``values`` as a list of sha256 hex strings, or a refusal that names the first bad one."""
    if not isinstance(values, list):
        raise WorkdirError(f"{what} needs a list of sha256 hex strings", protocol.BAD_ARGUMENT)
    if len(values) > MAX_ENTRIES:
        raise WorkdirError(f"{what}: {len(values)} sha256s, more than the {MAX_ENTRIES} one request may name",
                           protocol.BAD_ARGUMENT)
    for value in values:
        if not isinstance(value, str) or not _SHA256.fullmatch(value):
            raise WorkdirError(f"{what}: {_shown(value)} is not a sha256 (64 lowercase hexadecimal digits)",
                               protocol.BAD_ARGUMENT)
    return values


def missing(home: Path, values) -> list:
    """Which of ``values`` (sha256 hex strings) have no blob here yet, in their order, each once."""
    folder = blobs_dir(home)
    return [sha for sha in dict.fromkeys(check_sha256s(values, protocol.MISSING_BLOBS))
            if not _is_blob(folder / sha)]


def _is_blob(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def path_problem(rel) -> str | None:
    """Why ``rel`` cannot name a file inside a task's ``work/`` folder, or None."""
    if not isinstance(rel, str) or not rel:
        return "is not a relative path (a non-empty string)"
    if "\0" in rel:
        return "has a NUL character"
    if rel.startswith("/"):
        return "is absolute"
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' part"
    try:
        encoded = [part.encode("utf-8") for part in parts]
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if len(rel.encode("utf-8")) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in encoded):
        return f"is too long (at most {MAX_PATH_BYTES} bytes, {MAX_NAME_BYTES} a name)"
    return None


def check_entries(entries) -> list:
    """A start's ``workdir``: a list of ``[relative path, sha256, executable]``, checked as hostile input;
    the entries as tuples, or a refusal that names the first bad one."""
    usage = "start: workdir is a list of [relative path, sha256, executable] entries"
    if not isinstance(entries, list):
        raise WorkdirError(usage, protocol.BAD_ARGUMENT)
    if len(entries) > MAX_ENTRIES:
        raise WorkdirError(f"start: workdir has {len(entries)} files, more than {MAX_ENTRIES}", protocol.BAD_ARGUMENT)
    files: set = set()
    folders: set = set()
    out = []
    for entry in entries:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise WorkdirError(f"{usage}, not {_shown(entry)}", protocol.BAD_ARGUMENT)
        rel, sha, executable = entry
        problem = path_problem(rel)
        if problem:
            raise WorkdirError(f"start: workdir path {_shown(rel)} {problem}; give paths inside the workdir",
                               protocol.BAD_ARGUMENT)
        check_sha256s([sha], f"start: workdir entry {rel!r}")
        if not isinstance(executable, bool):
            raise WorkdirError(f"start: workdir entry {rel!r}: executable is true or false, not {_shown(executable)}",
                               protocol.BAD_ARGUMENT)
        parents = ["/".join(rel.split("/")[:i]) for i in range(1, rel.count("/") + 1)]
        if rel in files or rel in folders or any(p in files for p in parents):
            raise WorkdirError(f"start: workdir path {rel!r} is named twice, or both as a file and as a folder",
                               protocol.BAD_ARGUMENT)
        files.add(rel)
        folders.update(parents)
        out.append((rel, sha, executable))
    return out


def work_dir(folder: Path) -> Path:
    return folder / protocol.WORK_DIR


def has_work(folder: Path) -> bool:
    """Whether the task in ``folder`` has its ``work/`` already (a relaunch keeps it); a ``work`` that is
    not a real folder is refused."""
    work = work_dir(folder)
    if not os.path.lexists(work):
        return False
    if work.is_symlink() or not work.is_dir():
        raise WorkdirError(f"{work} is not a folder; remove it, then start again", protocol.BAD_ARGUMENT)
    return True


def check_blobs(home: Path, entries: list) -> None:
    """Refuse a start whose files are not all here as blobs (before anything is written)."""
    folder = blobs_dir(home)
    absent = [(rel, sha) for rel, sha, _ in entries if not _is_blob(folder / sha)]
    if absent:
        rel, sha = absent[0]
        raise WorkdirError(f"start: {len(absent)} file(s) of the workdir are not on this host (the first: {rel!r}, "
                           f"blob {sha[:12]}… in {folder}); upload them first (tfcc does before each start), "
                           "then start again", protocol.MISSING_BLOB)


def materialise(home: Path, folder: Path, entries: list) -> bool:
    """Build ``folder/work/`` from the blobs of ``entries`` unless it exists (a relaunch keeps it as the
    task left it); whether it was built. Each file is copied and its content checked against its name."""
    if has_work(folder):
        return False
    check_blobs(home, entries)
    blobs = blobs_dir(home)
    tmp = folder / f".{protocol.WORK_DIR}.{uuid.uuid4().hex[:12]}.tmp"
    os.mkdir(tmp, 0o700)
    try:
        made = {""}
        for rel, sha, executable in entries:
            parent = rel.rpartition("/")[0]
            if parent not in made:
                os.makedirs(tmp / parent, exist_ok=True)
                made.add(parent)
            _copy(blobs / sha, tmp / rel, rel, sha, executable)
        os.rename(tmp, work_dir(folder))  # as private as the run folder it is in
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


MAX_CHANGED_NAMES = 20  # a refresh's reply names this many changed files at most (and counts them all)


def refresh(home: Path, folder: Path, entries: list) -> dict:
    """Bring ``folder/work/`` to the files of ``entries`` (a person resumes a run with the code as it is now):
    each file that differs or is missing is copied anew, beside it first and then renamed over it; nothing else
    in ``work/`` changes (what the script wrote there stays, a file since removed from the workdir too).
    ``{"changed": [the first relative paths], "count": how many}``. A folder of the path that is a link (the
    script's own) is never written through: that file is left as it is and named in ``"kept"``."""
    check_blobs(home, entries)
    blobs = blobs_dir(home)
    work = work_dir(folder)
    changed: list[str] = []
    kept: list[str] = []
    for rel, sha, executable in entries:
        target = work / rel
        if _in_the_way(work, rel):
            kept.append(rel)
            continue
        if os.path.isfile(target) and not os.path.islink(target) and _sha256_of(target) == sha:
            if bool(os.stat(target).st_mode & stat.S_IXUSR) == bool(executable):
                continue
        os.makedirs(target.parent, exist_ok=True)
        tmp = target.parent / f".tfcc-{uuid.uuid4().hex}.tmp"  # not from its name: a long one would grow too long
        try:
            _copy(blobs / sha, tmp, rel, sha, executable)
            os.replace(tmp, target)  # a link the script put there is replaced, never followed
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        changed.append(rel)
    return {"changed": changed[:MAX_CHANGED_NAMES], "count": len(changed), "kept": kept[:MAX_CHANGED_NAMES]}


def _in_the_way(work: Path, rel: str) -> bool:
    """Whether something the script made stands where ``rel`` goes: a link or a file as one of its folders, a
    folder (not a link) as the file itself."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        folder = work.joinpath(*parts[:i])
        if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
            return True
    target = work / rel
    return os.path.isdir(target) and not os.path.islink(target)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _copy(blob: Path, target: Path, rel: str, sha: str, executable: bool) -> None:
    """Copy ``blob`` to the new file ``target`` (never through a link), hashing as it goes."""
    digest = hashlib.sha256()
    src = os.open(blob, os.O_RDONLY | os.O_NOFOLLOW)
    with open(src, "rb") as inp:
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(dst, "wb") as out:
            for chunk in iter(lambda: inp.read(CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
            os.fchmod(out.fileno(), 0o700 if executable else 0o600)  # the owner's alone, as the run folder
    if digest.hexdigest() != sha:
        try:  # the next upload sends it anew
            os.unlink(blob)
        except OSError:
            pass
        raise WorkdirError(f"start: the blob of {rel!r} on this host does not hold what its name says (the file "
                           "changed while it was uploaded?); it was removed: start again to upload it anew",
                           protocol.MISSING_BLOB)
