"""The files of a script's workdir that go to every host with it (Qt-free).

The workdir is ``training.workdir`` or, when that is empty, the script's own folder (a
relative path starts at the folder tfcc runs in). Everything in it is shipped except:

- what ``.gitignore`` and ``.tfccignore`` files exclude, at any level of the tree, each
  relative to its own folder, with git's rules (the last matching line wins, ``!`` re-includes,
  a deeper file wins over a shallower one, ``.tfccignore`` over ``.gitignore`` in one folder,
  nothing inside an excluded folder comes back);
- tfcc's defaults (``DEFAULT_EXCLUDES``: ``.git/``, caches, virtual environments...), which a
  ``!`` line may re-include;
- always: a folder holding ``pyvenv.cfg`` (a virtual environment) and tfcc's own folders
  (the local agent's ``$TFCC_HOME`` and the console's state folder);
- links: a link that points outside the workdir is never followed (a file of ~/.ssh must not
  travel through one), nor a link to a folder; a link to a file inside the workdir is shipped
  as a copy of that file. Skipped links, unreadable folders and special files (pipes, sockets)
  are listed in ``Workdir.skipped`` for the caller to log.

A workdir holds code and small files: more than ``MAX_BYTES`` or ``MAX_FILES`` is refused
with the biggest files named (data belongs outside, read from its own path on the hosts).
``excluded_module`` tells the diagnosis whether a module a host could not import is here but
was excluded.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from pathspec import GitIgnoreSpec

from agent.protocol import HOME_VARIABLE
from console import cluster as cl
from console.errors import RunError, state_dir

log = logging.getLogger("console.workdir")

MAX_BYTES = 100 << 20   # what a workdir may hold in all
MAX_FILES = 10_000      # and how many files
IGNORE_FILES = (".gitignore", ".tfccignore")  # one folder's, in rising precedence
# Keys, tokens and credentials: never sent to a host by default (a .tfccignore "!" can: the check names each).
SECRET_EXCLUDES = (".ssh/", ".aws/", ".gnupg/", ".kube/", ".docker/", ".netrc", ".git-credentials", ".pypirc",
                   ".env", ".env.*", "credentials*.json", "*.pem", "*.key", "*.p12", "*.pfx",
                   "id_rsa*", "id_ed25519*", "id_ecdsa*", "id_dsa*")
DEFAULT_EXCLUDES = (".git/", "__pycache__/", "*.pyc", ".venv/", "venv/", ".tox/", ".mypy_cache/", ".pytest_cache/",
                    ".ipynb_checkpoints/", "node_modules/", "*.egg-info/", ".tfcc/", *SECRET_EXCLUDES)
DEFAULTS = "tfcc's default excludes"
VENV_MARKER = "pyvenv.cfg"
BIGGEST = 5             # files an error about the size names
CHUNK = 1 << 20
_STOP_COUNTING = 10     # a walk stops at this many times MAX_FILES: the error is clear by then


@dataclass(frozen=True)
class WorkFile:
    rel: str          # its path in the workdir (posix)
    path: Path        # the file on this machine (a link's target, for a link inside the workdir)
    size: int
    sha256: str       # hex
    executable: bool


@dataclass(frozen=True)
class Skipped:
    rel: str
    why: str


@dataclass(frozen=True)
class Workdir:
    """What goes to the hosts: ``root``'s files, and the script's path in it."""

    root: Path
    script: str                     # relative to root (posix)
    files: tuple[WorkFile, ...]
    skipped: tuple[Skipped, ...] = ()

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def entries(self) -> list[list]:
        """The agent's ``start`` argument: ``[relative path, sha256, executable]`` per file."""
        return [[f.rel, f.sha256, f.executable] for f in self.files]

    def secrets(self) -> list[str]:
        """The files shipped that tfcc keeps home by default (keys and tokens a "!" line took back)."""
        spec = GitIgnoreSpec.from_lines(SECRET_EXCLUDES)
        return [f.rel for f in self.files if spec.match_file(f.rel)]

    def dotfiles(self) -> list[str]:
        """The files shipped whose name or a folder's starts with a dot (settings, and tokens a "!" let through)."""
        return [f.rel for f in self.files if any(part.startswith(".") for part in f.rel.split("/"))]

    def blobs(self) -> dict[str, WorkFile]:
        """One file per distinct content: what a host may lack."""
        out: dict[str, WorkFile] = {}
        for f in self.files:
            out.setdefault(f.sha256, f)
        return out


@dataclass(frozen=True)
class Exclusion:
    """Why a path of the workdir is not shipped: a line of an ignore file, a default, or always."""

    path: str                # relative; a folder ends with "/"
    rule: str                # the line as written, or why it is always left out
    source: str | None       # the ignore file (relative to the workdir) or DEFAULTS; None: always
    line: int | None = None

    def __str__(self) -> str:
        if self.source is None:
            return f"{self.path} is never shipped: {self.rule}"
        where = f"{self.source} (line {self.line})" if self.line else self.source
        return f"{self.path} is excluded by {self.rule.strip()!r} in {where}"


# --------------------------------------------------------------------------- where


def locate(training: cl.Training) -> tuple[Path, Path]:
    """The workdir and the file that runs (the script, or the module's file in the workdir), both absolute with
    links resolved; a RunError for a bad one."""
    if training.module:
        return _locate_module(training)
    script = Path(training.script).expanduser().resolve()
    if training.workdir:
        given = Path(training.workdir).expanduser()
        where = f"training.workdir {training.workdir!r}" + (f" ({given.resolve()})" if not given.is_absolute() else "")
        if not given.exists():
            raise RunError(f"{where} does not exist", "check the path (a relative one starts at the folder tfcc runs "
                           "in), or remove workdir to ship the script's own folder")
        if not given.is_dir():
            raise RunError(f"{where} is a file, not a folder", "give the folder to ship with the script "
                           "(or remove workdir: the script's own folder)")
        root = given.resolve()
    else:
        root = script.parent
    _refuse_wide(training, root)
    if not script.is_relative_to(root):
        raise RunError(f"training.script {training.script!r} ({script}) is outside its workdir {root}",
                       "put the script inside the workdir, or set training.workdir to a folder that holds it")
    return root, script


def _refuse_wide(training: cl.Training, root: Path) -> None:
    """Home, what holds it (/home, /) and its settings folders (~/.config, ~/.aws) hold keys and credentials:
    never a workdir."""
    home = Path.home().resolve()
    if home.is_relative_to(root) or root == Path(root.anchor) or (root.parent == home and root.name.startswith(".")):
        what = ("your home folder" if root == home else "the root folder" if root == Path(root.anchor) else
                f"{root.name}, a settings folder in your home folder" if root.parent == home else
                "a folder that holds your home folder")
        code = "module's package" if training.module else "script"
        raise RunError(f"{_named(training, root)} is {what}: tfcc would ship all of it to every host",
                       f"put the {code} and the files it needs in a folder of their own, or set training.workdir "
                       "to such a folder")


def module_files(module: str) -> tuple[str, str]:
    """Where ``python -m`` finds ``module`` in the folder it runs from: ``pkg/mod.py``, else the package's
    ``pkg/mod/__main__.py`` (posix, relative)."""
    path = module.replace(".", "/")
    return f"{path}.py", f"{path}/__main__.py"


def _locate_module(training: cl.Training) -> tuple[Path, Path]:
    """A module's workdir (``training.workdir``, else the folder tfcc runs in) and its file there."""
    given = Path(training.workdir or ".").expanduser()
    where = (f"training.workdir {training.workdir!r}" if training.workdir else "the folder tfcc runs in") + \
        (f" ({given.resolve()})" if not given.is_absolute() else "")
    if not given.is_dir():
        raise RunError(f"{where} is not a folder", "set training.workdir to the folder that holds the module's top "
                       f"package ({training.module.split('.')[0]}/), where you would run python -m {training.module}")
    root = given.resolve()
    _refuse_wide(training, root)
    top = training.module.split(".")[0]
    for rel in module_files(training.module):
        path = root / rel
        if path.is_file():
            resolved = path.resolve()
            if not resolved.is_relative_to(root):
                raise RunError(f"training.module {training.module!r} is {rel}, a link out of its workdir {root}",
                               "put the module's files inside the workdir")
            return root, resolved
    a, b = module_files(training.module)
    hint = (f"set training.workdir to the folder that holds {top}/ (where you would run python -m "
            f"{training.module})") if not (root / top).exists() else "check the module's name"
    raise RunError(f"training.module {training.module!r} is not in {where}: neither {a} nor {b} is there", hint)


def _named(training: cl.Training, root: Path) -> str:
    if training.workdir:
        return f"training.workdir {root}"
    return f"the folder tfcc runs in, {root} (the module's workdir)" if training.module else \
        f"the script's folder {root} (its workdir)"


def _own_folders() -> tuple[Path, ...]:
    """tfcc's own folders on this machine: never shipped, wherever they are."""
    home = Path(os.environ.get(HOME_VARIABLE) or Path.home() / ".tfcc")
    return tuple({home.expanduser().resolve(), state_dir().expanduser().resolve()})


# --------------------------------------------------------------------------- rules


class _IgnoreFile:
    """One ``.gitignore`` or ``.tfccignore``: its lines apply to the paths below its folder."""

    def __init__(self, folder: str, source: str, lines: list[str]):
        self.folder = folder  # "" for the workdir itself, else "sub/"
        self.source = source
        self.lines = lines
        # A blank line becomes a comment: each line keeps its index (pathspec drops blank ones).
        patterns = [line if line.strip() else "#" for line in lines]
        try:
            self.spec = GitIgnoreSpec.from_lines(patterns)
        except (ValueError, re.error):  # git ignores a line that is no pattern: so does tfcc
            patterns = [line if _valid(line) else "#" for line in patterns]
            log.info("%s: line(s) %s are not valid patterns; ignored", source,
                     ", ".join(str(i + 1) for i, line in enumerate(patterns) if line != lines[i] and lines[i].strip()))
            self.spec = GitIgnoreSpec.from_lines(patterns)

    def check(self, rel: str, is_dir: bool) -> Exclusion | bool | None:
        """An Exclusion, False (re-included by a ``!`` line), or None (no line matches)."""
        sub = rel[len(self.folder):]
        found = self.spec.check_file(sub + "/" if is_dir else sub)
        if found.include is None:
            return None
        if not found.include:
            return False
        return Exclusion(rel + ("/" if is_dir else ""), self.lines[found.index], self.source, found.index + 1)


def _valid(line: str) -> bool:
    try:
        GitIgnoreSpec.from_lines([line])
        return True
    except (ValueError, re.error):
        return False


class _Rules:
    """What is excluded in one workdir: its ignore files (read once each), the defaults, the always."""

    def __init__(self, root: Path):
        self.root = root
        self.own = _own_folders()
        self.defaults = _IgnoreFile("", DEFAULTS, list(DEFAULT_EXCLUDES))
        self._files: dict[str, list[_IgnoreFile]] = {}

    def ignore_files(self, folder: str) -> list[_IgnoreFile]:
        """``folder``'s ignore files, the strongest first (regular files only: no link is followed)."""
        if folder not in self._files:
            found = []
            for name in reversed(IGNORE_FILES):
                path = self.root / folder / name
                try:
                    if not stat.S_ISREG(path.lstat().st_mode):
                        continue
                    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
                except OSError:
                    continue
                found.append(_IgnoreFile(folder, folder + name, lines))
            self._files[folder] = found
        return self._files[folder]

    def own_exclusion(self, rel: str, is_dir: bool, path: str) -> Exclusion | None:
        """rel's exclusion (its folders are known to be shipped), or None; ``path``: where it is here."""
        if is_dir:
            if os.path.exists(os.path.join(path, VENV_MARKER)):
                return Exclusion(rel + "/", f"a virtual environment (it holds {VENV_MARKER})", None)
            if Path(os.path.realpath(path)) in self.own:
                return Exclusion(rel + "/", "tfcc's own folder", None)
        parts = rel.split("/")
        for depth in range(len(parts) - 1, -1, -1):  # the deepest folder's files first
            folder = "".join(part + "/" for part in parts[:depth])
            for ignore in self.ignore_files(folder):
                found = ignore.check(rel, is_dir)
                if found is not None:
                    return found or None
        return self.defaults.check(rel, is_dir) or None

    def exclusion(self, rel: str, is_dir: bool) -> Exclusion | None:
        """rel's exclusion or the first of its folders' (from the top), or None: whether it would be shipped."""
        parts = rel.split("/")
        for depth in range(1, len(parts) + 1):
            sub = "/".join(parts[:depth])
            folder = depth < len(parts) or is_dir
            found = self.own_exclusion(sub, folder, os.path.join(self.root, sub))
            if found is not None:
                return found
        return None


# --------------------------------------------------------------------------- collect


def collect(training: cl.Training, max_bytes: int | None = None, max_files: int | None = None,
            hashed: bool = True, leave_out: Path | None = None) -> Workdir:
    """The workdir of ``training.script``, its files hashed (unless ``hashed`` is False: an export copies them,
    its ``sha256`` then ""); a one-line RunError for a bad or too big one (caps: ``MAX_BYTES`` and
    ``MAX_FILES`` unless given). ``leave_out``: a folder whose files are not the code's (an export's own)."""
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    max_files = MAX_FILES if max_files is None else max_files
    root, script = locate(training)
    rules = _Rules(root)
    found, skipped = _walk(rules, root, max_files)
    if leave_out is not None:
        away = Path(leave_out).expanduser().resolve()
        if root.resolve().is_relative_to(away):
            raise RunError(f"the folder {str(away)!r} holds the code's own folder {str(root)!r}",
                           f"choose a folder outside {str(root)!r}")
        found = [item for item in found if not item[1].resolve().is_relative_to(away)]
    if len(found) > max_files:
        raise RunError(_too_many(training, root, found, max_files),
                       f"exclude them in {root / '.tfccignore'} or move data out of the folder")
    script_rel = script.relative_to(root).as_posix()
    if script_rel not in {rel for rel, _, _ in found}:
        why = rules.exclusion(script_rel, False)
        named = f"training.module {training.module!r} ({script_rel})" if training.module else \
            f"training.script {training.script!r}"
        raise RunError(f"{named} is not shipped with its workdir {root}: "
                       + (str(why) if why else "it is not a regular file there"),
                       "remove that exclusion" if why else "give a regular .py file")
    total = sum(st.st_size for _, _, st in found)
    if total > max_bytes:
        biggest = sorted(found, key=lambda item: -item[2].st_size)[:BIGGEST]
        raise RunError(f"{_named(training, root)} holds {human_bytes(total)} in {len(found)} files, more than "
                       f"the cap of {human_bytes(max_bytes)}; the biggest: "
                       + ", ".join(f"{rel} ({human_bytes(st.st_size)})" for rel, _, st in biggest),
                       f"exclude them in {root / '.tfccignore'} (a line per file or folder) or move data out of "
                       "the folder (the script can read it from its own path on each host)")
    files = []
    for rel, path, st in found:
        if not hashed:
            files.append(WorkFile(rel, path, st.st_size, "", bool(st.st_mode & 0o111)))
            continue
        try:
            digest, size = _sha256(path)
        except OSError as exc:
            raise RunError(f"cannot read {rel!r} in {_named(training, root)} ({exc.strerror or exc})",
                           "check its permissions, or exclude it in .tfccignore") from None
        files.append(WorkFile(rel, path, size, digest, bool(st.st_mode & 0o111)))
    return Workdir(root, script_rel, tuple(files), tuple(skipped))


def _walk(rules: _Rules, root: Path, max_files: int) -> tuple[list, list]:
    """(rel, path, stat) of each file to ship, sorted, and what was skipped; stops counting well past the cap."""
    found: list = []
    skipped: list[Skipped] = []
    folders = [""]
    while folders and len(found) <= max_files * _STOP_COUNTING:
        folder = folders.pop()
        try:
            with os.scandir(root / folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            skipped.append(Skipped(folder or ".", f"cannot be read ({exc.strerror or exc})"))
            continue
        for entry in entries:
            rel = folder + entry.name
            try:
                if not _utf8(entry.name):  # the agent takes only names it can write back as they are
                    skipped.append(Skipped(rel.encode("utf-8", "replace").decode(), "its name is not valid UTF-8"))
                elif entry.is_symlink():
                    _link(rules, root, entry, rel, found, skipped)
                elif entry.is_dir(follow_symlinks=False):
                    if rules.own_exclusion(rel, True, entry.path) is None:
                        folders.append(rel + "/")
                elif entry.is_file(follow_symlinks=False):
                    if rules.own_exclusion(rel, False, entry.path) is None:
                        found.append((rel, Path(entry.path), entry.stat(follow_symlinks=False)))
                else:
                    skipped.append(Skipped(rel, "not a regular file (a pipe, socket or device)"))
            except OSError as exc:  # gone meanwhile, or unreadable
                skipped.append(Skipped(rel, f"cannot be read ({exc.strerror or exc})"))
    found.sort(key=lambda item: item[0])
    return found, skipped


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:  # os.scandir's surrogate escapes: bytes that are no UTF-8
        return False


def _link(rules: _Rules, root: Path, entry: os.DirEntry, rel: str, found: list, skipped: list) -> None:
    """A link in the workdir: shipped as its target's copy when that is a shipped file inside, else skipped."""
    if rules.own_exclusion(rel, False, entry.path) is not None:
        return
    target = Path(os.path.realpath(entry.path))
    if not target.is_relative_to(root):
        skipped.append(Skipped(rel, f"a link to {target}, outside the workdir: not followed"))
    elif not target.exists():
        skipped.append(Skipped(rel, "a broken link"))
    elif target.is_dir():
        skipped.append(Skipped(rel, "a link to a folder: not followed"))
    elif not target.is_file():
        skipped.append(Skipped(rel, "a link to something that is not a regular file"))
    elif (why := rules.exclusion(target.relative_to(root).as_posix(), False)) is not None:
        skipped.append(Skipped(rel, f"a link to a file that is not shipped ({why})"))
    else:
        found.append((rel, target, target.stat()))


def _sha256(path: Path) -> tuple[str, int]:
    """The file's sha256 (hex) and size, read in chunks; a link is not followed (it changed meanwhile)."""
    digest = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with open(fd, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _too_many(training: cl.Training, root: Path, found: list, max_files: int) -> str:
    counted = f"more than {len(found) - 1}" if len(found) > max_files * _STOP_COUNTING else str(len(found))
    tops: dict[str, int] = {}
    for rel, _, _ in found:
        top = rel.split("/", 1)[0] + "/" if "/" in rel else "."
        tops[top] = tops.get(top, 0) + 1
    most = sorted(tops.items(), key=lambda item: -item[1])[:BIGGEST]
    return (f"{_named(training, root)} holds {counted} files, more than the cap of {max_files}; the most are in "
            + ", ".join(f"{'its top folder' if top == '.' else top} ({n} files)" for top, n in most))


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


# --------------------------------------------------------------------------- diagnosis


def excluded_module(training: cl.Training, module: str) -> Exclusion | None:
    """For ``No module named 'X'`` on a host: why ``X`` (the top-level name: ``X.py`` or the package
    ``X/``), which is in the workdir on this machine, was not shipped; None when it is not here or was
    shipped (or the workdir cannot be read now)."""
    name = module.split(".", 1)[0]
    if not training.user_code or not name.isidentifier():
        return None
    try:
        root, script = locate(training)
    except (RunError, OSError):
        return None
    rules = _Rules(root)
    # sys.path[0] is the script's folder, or the workdir itself for a module (python -m runs from it)
    folders = dict.fromkeys(([] if training.module else [script.parent.relative_to(root).as_posix()]) + ["."])
    for folder in folders:
        for candidate, is_dir in ((f"{name}.py", False), (name, True)):
            rel = candidate if folder == "." else f"{folder}/{candidate}"
            path = root / rel
            if path.is_symlink():
                target = Path(os.path.realpath(path))
                if not target.is_relative_to(root) or target.is_dir():
                    return Exclusion(rel, f"a link to {target}, which tfcc does not follow"
                                     + (" (outside the workdir)" if not target.is_relative_to(root) else ""), None)
            if (path.is_dir() if is_dir else path.is_file()):
                why = rules.exclusion(rel, is_dir)
                if why is not None:
                    return why
    return None


@dataclass(frozen=True)
class ModuleRun:
    """How a script that failed as a file runs as a module: ``python -m module`` from ``workdir``; ``found``:
    where its missing import lives (``myproject/ in /repo``), for an import that failed."""

    module: str
    workdir: Path
    found: str | None = None

    def fix(self, training: cl.Training) -> str:
        """The one-line fix, in the cluster file's words."""
        top = self.module.split(".")[0]
        given = Path(training.workdir).expanduser().resolve() if training.workdir else None
        where = "" if given == self.workdir else f", workdir = \"{self.workdir}\""
        return (f"run it as a module: module = \"{self.module}\"{where} in [training] in place of script (python "
                f"-m from the folder that holds {top}/, as you would run it by hand); then start the run again")


ANCESTORS = 6  # how far above a script's folder its project's root is looked for


def as_module(training: cl.Training, missing: str | None = None) -> ModuleRun | None:
    """For a script run by its path that failed on a relative import (``missing`` None) or on importing
    ``missing``: the module run that works, or None.

    A relative import: from the folder above the script's package (the highest folder of ``__init__.py``
    files above it; else its folder's parent, a namespace package). A failed import: from the nearest folder
    above the script's own that holds the missing module or package (a repository's root)."""
    if not training.script:
        return None
    script = Path(training.script).expanduser().resolve()
    home = Path.home().resolve()
    found = None
    if missing is None:
        base = script.parent
        while (base / "__init__.py").is_file() and base.parent != base:
            base = base.parent
        if base == script.parent:
            base = script.parent.parent
    else:
        top = missing.split(".", 1)[0]
        if not top.isidentifier():
            return None
        base = None
        for folder in list(script.parents)[1:1 + ANCESTORS]:
            if folder == home or folder == Path(folder.anchor):
                break
            for candidate, shown in ((folder / top, f"{top}/"), (folder / f"{top}.py", f"{top}.py")):
                if candidate.exists():
                    base, found = folder, f"{shown} in {folder}"
                    break
            if base is not None:
                break
        if base is None:
            return None
    if base == home or base == Path(base.anchor) or not script.is_relative_to(base):
        return None
    name = ".".join(script.relative_to(base).with_suffix("").parts)
    return ModuleRun(name, base, found) if cl.module_problem(name) is None else None
