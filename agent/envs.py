"""Python environments this host keeps for runs: ``<home>/envs/<hash>/``, made offline from pushed wheels.

The console works out which wheels an environment holds (one lock for each platform of its hosts, console/
provision.py), pushes those this host lacks as blobs (``<home>/blobs/<sha256>``, as a script's files), and the
installer with them (uv, one static binary: ``<home>/tools/uv-<sha>``). ``make`` then builds the environment with
no network: a virtual environment from this host's Python, the wheels installed by their exact names and hashes
and nothing else, every installed version read back; only then its marker (``ENV_MARKER``: what it holds) is
written and the folder renamed into place. A half-made environment is never used: a make cut short (a cancel, a
host killed) leaves a temporary folder that the next make of the same environment removes.

``<hash>`` names what the environment holds (the Python and every wheel's sha256): hosts of one platform share
it, and a second make of it does nothing. ``envs/spec-<spec>`` names the environment made for a cluster's
``[environment]`` (``spec``: its hash, the same on every host): a start's ``python_env`` finds it there.

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

from agent import protocol, workdir
from agent.runs import AgentError

_HASH = re.compile(r"[0-9a-f]{16,64}")
# A wheel's file name (PEP 427): name-version(-build)?-python-abi-platform.whl, no folder.
_WHEEL = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-([A-Za-z0-9_.!+]+)(-[0-9][^-/]*)?"
                    r"-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl")
MAX_WHEELS = 2000
INSTALL_TIMEOUT = 3600.0  # seconds one installer run may take (TensorFlow's GPU build unpacks 5 GB)
PROBE_TIMEOUT = 30.0
REACH_TIMEOUT = 3.0      # seconds a host has to show it reaches the package index
DOWNLOAD_TIMEOUT = 60.0  # seconds without a byte from the index before a host's download is given up
BEAT_SECONDS = 5.0       # a make says it goes on this often (agent/server.py; a console that hears nothing gives up)


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def envs_dir(home: Path) -> Path:
    return home / protocol.ENVS_DIR


def fingerprint() -> str:
    """This host as an environment sees it: its machine, C library, the Python the agent runs (the one environments
    are made from) and whether it has NVIDIA's driver. Hosts that share a home but differ in any of these each find
    their own environment for a spec."""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        libc = ""
    words = repr((platform.machine(), libc, sys.executable, platform.python_version(),
                  bool(shutil.which("nvidia-smi"))))
    return hashlib.sha256(words.encode()).hexdigest()[:12]


def _pointer(home: Path, spec: str) -> Path:
    return envs_dir(home) / f"spec-{spec}-{fingerprint()}"


def _sha256s(values, what: str) -> list:
    try:
        return workdir.check_sha256s(values, what)
    except workdir.WorkdirError as exc:
        raise AgentError(str(exc), exc.code) from None


def check_hash(value, what: str) -> str:
    if not isinstance(value, str) or not _HASH.fullmatch(value):
        raise AgentError(f"{what} must be 16 to 64 lowercase hexadecimal digits, not {value!r}"[:200],
                         protocol.BAD_ARGUMENT)
    return value


# --------------------------------------------------------------------------- this host's platform


def platform_facts(python: str | None = None) -> dict:
    """What decides which wheels fit this host: its OS, machine, C library and the Python the environment is made
    from (``python``, else the agent's own interpreter)."""
    facts = {"system": platform.system().lower(), "machine": platform.machine().lower()}
    try:
        name, _, version = os.confstr("CS_GNU_LIBC_VERSION").partition(" ")
        facts["libc"], facts["libc_version"] = name, version  # "glibc", "2.36"
    except (ValueError, OSError, AttributeError):  # musl, or not Linux
        facts["libc"], facts["libc_version"] = platform.libc_ver()[0] or "", ""
    if python is None or python == sys.executable:
        facts.update(python=platform.python_version(), implementation=sys.implementation.name,
                     python_executable=sys.executable)
        return facts
    code = ("import json, platform, sys; print(json.dumps({'python': platform.python_version(), "
            "'implementation': sys.implementation.name, 'python_executable': sys.executable}))")
    try:
        proc = subprocess.run([python, "-S", "-c", code], capture_output=True, text=True, timeout=PROBE_TIMEOUT)
        facts.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        raise AgentError(f"the Python {python!r} does not run on this host; set python for this host to an "
                         "interpreter (3.9 or newer) that does", protocol.BAD_ARGUMENT) from None
    return facts


def find(home: Path, spec: str) -> dict | None:
    """The environment made here for ``spec`` (its marker, with ``path`` and ``python``), or None."""
    try:
        made = _pointer(home, check_hash(spec, "an environment's spec")).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not _HASH.fullmatch(made):
        return None
    return read_marker(envs_dir(home) / made)


def read_marker(folder: Path) -> dict | None:
    """An environment's marker (what it holds), with ``path`` and ``python``; None if it is not whole."""
    try:
        with open(folder / protocol.ENV_MARKER, encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    python = folder / "bin" / "python"
    if not isinstance(marker, dict) or not os.path.exists(python):
        return None
    return {**marker, "path": str(folder), "python": str(python)}


def reaches(index) -> dict:
    """Whether this host reaches the package index at ``index`` (an http(s) URL): any answer of its server counts
    (a proxy of the host's own too); ``{"reached": bool, "why": what kept it from it}``."""
    if not isinstance(index, str) or urllib.parse.urlparse(index).scheme not in ("http", "https"):
        return {"reached": False, "why": "not an http(s) index"}
    try:
        with urllib.request.urlopen(urllib.request.Request(index, method="HEAD"), timeout=REACH_TIMEOUT):
            pass
    except urllib.error.HTTPError:  # its server answered
        pass
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return {"reached": False, "why": str(getattr(exc, "reason", None) or exc)[:200]}
    return {"reached": True, "why": ""}


def home_id(home: Path) -> str:
    """This home's random name, made once: hosts that share a home (one file system) say the same one."""
    path = home / protocol.HOME_ID_FILE
    home.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(uuid.uuid4().hex + "\n")
    for _ in range(50):  # another host's agent may be writing it this moment
        text = path.read_text(encoding="ascii", errors="replace").strip()
        if len(text) == 32:
            return text
        time.sleep(0.02)
    return text


def status(home: Path, spec: str | None, python: str | None = None, index: str | None = None) -> dict:
    """This host's platform, the free space where environments go, the environment made for ``spec``, and (asked
    with ``index``) whether this host reaches that package index."""
    folder = envs_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    return {"platform": platform_facts(python), "disk_free_bytes": shutil.disk_usage(folder).free,
            "envs": str(folder), "env": find(home, spec) if spec else None, "home_id": home_id(home),
            **({"index": reaches(index)} if index else {})}


def download(home: Path, wanted: list, emit, stop) -> None:
    """Fetch each ``(sha256, url)`` of ``wanted`` into this host's blobs, checked by its hash (a host that reaches
    the index downloads its wheels itself); ``emit`` says the bytes as they come."""
    blobs = workdir.blobs_dir(home)
    blobs.mkdir(parents=True, exist_ok=True)
    done, said = 0, 0
    emit(protocol.ENV_DOWNLOADING, done=0)
    for sha, url in wanted:
        tmp = blobs / f".download-{uuid.uuid4().hex[:8]}.tmp"
        digest = hashlib.sha256()
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as source, open(tmp, "wb") as out:
                for chunk in iter(lambda: source.read(1 << 20), b""):
                    if stop():
                        raise Cancelled()
                    digest.update(chunk)
                    out.write(chunk)
                    done += len(chunk)
                    if done - said >= 8 << 20:
                        emit(protocol.ENV_DOWNLOADING, done=done)
                        said = done
            if digest.hexdigest() != sha:
                raise AgentError(f"{url.rsplit('/', 1)[-1][:100]} from the index does not hold what the lock says (its "
                                 "sha256 differs); make it ready again", protocol.INSTALL_FAILED)
            os.replace(tmp, blobs / sha)
        except (urllib.error.URLError, OSError) as exc:
            raise AgentError(f"this host could not download {url.rsplit('/', 1)[-1][:100]} "
                             f"({getattr(exc, 'reason', None) or exc})", protocol.DOWNLOAD_FAILED) from None
        finally:
            if tmp.exists():
                tmp.unlink()
    emit(protocol.ENV_DOWNLOADING, done=done)


def packages_in(prefix: Path) -> dict:
    """``{normalized name: version}`` of every distribution installed in the environment at ``prefix``."""
    found = {}
    for site in sorted(prefix.glob("lib*/python*/site-packages")):
        for entry in os.listdir(site):
            if not entry.endswith(".dist-info"):
                continue
            try:
                with open(site / entry / "METADATA", encoding="utf-8", errors="replace") as f:
                    headers = {}
                    for line in f:
                        if not line.strip():
                            break
                        key, _, value = line.partition(":")
                        headers.setdefault(key.strip().lower(), value.strip())
            except OSError:
                continue
            if headers.get("name") and headers.get("version"):
                found[normalize(headers["name"])] = headers["version"]
    return found


def site_packages(env: dict) -> list:
    """The folders an import in environment ``env`` (a marker) searches for installed packages."""
    return [str(p) for p in sorted(Path(env["path"]).glob("lib*/python*/site-packages"))]


def python_for(home: Path, python_env) -> str | None:
    """The interpreter a start's ``python_env`` ({"spec", "required"}) runs a task with: the environment's, None
    (the argv's own) where it is not made here and not required; refused where it is required."""
    if python_env is None:
        return None
    if not isinstance(python_env, dict) or not isinstance(python_env.get("required", False), bool):
        raise AgentError("start: python_env is {\"spec\": hash, \"required\": true|false}", protocol.BAD_ARGUMENT)
    env = find(home, python_env.get("spec"))
    if env is not None:
        return env["python"]
    if python_env.get("required"):
        raise AgentError("the cluster file's [environment] is not made on this host yet; make it ready (tfcc "
                         "provision, or the Check's Make ready), then start again", protocol.NO_ENVIRONMENT)
    return None


# --------------------------------------------------------------------------- making one


class Cancelled(Exception):
    """The make was cancelled, or the console went away."""


def check_wheels(wheels) -> list:
    """A make's ``wheels``: ``[[file name, sha256], ...]`` checked as hostile input; ``(name, version, file, sha)``."""
    if not isinstance(wheels, list) or not wheels or len(wheels) > MAX_WHEELS:
        raise AgentError(f"env_make: wheels is a list of 1 to {MAX_WHEELS} [file name, sha256] pairs",
                         protocol.BAD_ARGUMENT)
    out, seen = [], set()
    for entry in wheels:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str):
            raise AgentError(f"env_make: {str(entry)[:80]!r} is not a [file name, sha256] pair", protocol.BAD_ARGUMENT)
        found = _WHEEL.fullmatch(entry[0])
        if not found or len(entry[0]) > workdir.MAX_NAME_BYTES:
            raise AgentError(f"env_make: {entry[0][:80]!r} is not a wheel's file name", protocol.BAD_ARGUMENT)
        _sha256s([entry[1]], "env_make")
        name = normalize(found.group(1))
        if name in seen:
            raise AgentError(f"env_make: two wheels of {name}", protocol.BAD_ARGUMENT)
        seen.add(name)
        out.append((name, found.group(2), entry[0], entry[1]))
    return out


def _installer_env() -> dict:
    """The installer's environment: nothing of this host's pip or uv settings (an index, a constraint, a cache of
    another user) and no virtual environment it would install into instead."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PIP_", "UV_", "PYTHON")) and k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}


def _human(size: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    return ""


def _lock(path: Path, stop) -> int:
    """Hold ``path``'s lock (another make of the same environment waits for it), checking ``stop`` meanwhile."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if stop():
                os.close(fd)
                raise Cancelled() from None
            time.sleep(0.2)


def _run(argv: list, stop, timeout: float = INSTALL_TIMEOUT) -> tuple:
    """Run the installer; killed (its whole group) when ``stop()`` turns true. (returncode, its last output)."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=_installer_env(), start_new_session=True)
    except OSError as exc:  # a home on a noexec disk, say
        raise AgentError(f"the installer cannot run from {os.path.dirname(argv[0])} ({exc.strerror or exc}); is "
                         "the tfcc home on a disk mounted noexec? set TFCC_HOME on this host to another folder, then "
                         "make it ready again", protocol.INSTALL_FAILED) from None
    out: list = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            if stop() or time.monotonic() > deadline:
                raise Cancelled()
            try:
                proc.wait(0.2)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
        reader.join(5)
    text = (out[0] if out else b"").decode("utf-8", "replace")
    return proc.returncode, text[-4000:]


def _installer_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    picked = [line for line in lines if line.lower().startswith(("error", "×", "caused by", "╰"))] or lines[-1:]
    return " ".join(picked)[:400] if picked else "no output"


def _tool(home: Path, sha: str) -> Path:
    """The installer pushed as the blob ``sha``, copied once to ``<home>/tools`` and made executable."""
    tools = home / protocol.TOOLS_DIR
    tools.mkdir(parents=True, exist_ok=True)
    target = tools / f"uv-{sha[:16]}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    tmp = tools / f".uv-{uuid.uuid4().hex[:8]}.tmp"
    try:
        shutil.copyfile(workdir.blobs_dir(home) / sha, tmp)
        if workdir._sha256_of(tmp) != sha:
            raise AgentError("env_make: the installer's blob does not hold what its name says; Make ready again",
                             protocol.MISSING_BLOB)
        os.chmod(tmp, 0o700)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def _remove_stale(folder: Path, env_hash: str) -> None:
    """What earlier makes left (cut short: a cancel the agent did not live through, a host killed): this
    environment's (its lock is ours now, so nobody builds there) and any other's whose lock nobody holds."""
    left: dict = {}
    for entry in folder.iterdir():
        name = entry.name
        if name.startswith(".") and name.endswith((".tmp", ".wheels")) and _HASH.fullmatch(name[1:].split(".")[0]):
            left.setdefault(name[1:].split(".")[0], []).append(entry)
    for made, entries in left.items():
        fd = None
        if made != env_hash:
            try:
                fd = os.open(folder / f".{made}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # another make builds it now
                if fd is not None:
                    os.close(fd)
                continue
        try:
            for entry in entries:
                shutil.rmtree(entry, ignore_errors=True)
        finally:
            if fd is not None:
                os.close(fd)


def make(home: Path, req: dict, emit, stop) -> dict:
    """Make the environment ``req`` asks for (``spec``, ``hash``, ``wheels``, ``uv``: the installer's sha256,
    ``need_bytes``, ``python``: the interpreter to make it from, else the agent's), offline; ``emit(stage, **)``
    says how far it got, ``stop()`` turns true to cancel. Its marker, with ``made``: false when it was there."""
    started = time.monotonic()
    spec = check_hash(req.get("spec"), "env_make: spec")
    env_hash = check_hash(req.get("hash"), "env_make: hash")
    wheels = check_wheels(req.get("wheels"))
    uv = _sha256s([req.get("uv")], "env_make: uv")[0]
    need = req.get("need_bytes", 0)
    python = req.get("python") or sys.executable
    if not isinstance(need, int) or not isinstance(python, str):
        raise AgentError("env_make: need_bytes is a number of bytes, python an interpreter's path",
                         protocol.BAD_ARGUMENT)
    folder = envs_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / env_hash
    done = read_marker(target)
    if done is not None:
        _point(home, spec, env_hash)
        return {**done, "made": False, "seconds": time.monotonic() - started}
    free = shutil.disk_usage(folder).free
    if free < need:
        raise AgentError(f"{_human(free)} free in {folder}, the environment needs {_human(need)}: free space there "
                         "(or set TFCC_HOME to a larger disk), then make it ready again", protocol.NO_SPACE)
    urls = req.get("urls") or {}
    if not isinstance(urls, dict) or not all(isinstance(u, str) and urllib.parse.urlparse(u).scheme in
                                             ("http", "https") for u in urls.values()):
        raise AgentError("env_make: urls maps a wheel's sha256 to its http(s) URL", protocol.BAD_ARGUMENT)
    absent = workdir.missing(home, [sha for *_, sha in wheels] + [uv])  # (each checked above)
    if any(sha in urls for sha in absent):
        download(home, [(sha, urls[sha]) for sha in absent if sha in urls], emit, stop)
        absent = workdir.missing(home, absent)
    if absent:
        raise AgentError(f"env_make: {len(absent)} wheel(s) are not on this host (blob {absent[0][:12]}…); push "
                         "them first (tfcc provision does), then make it again", protocol.MISSING_BLOB)
    emit(protocol.ENV_PREPARING, packages=len(wheels))
    lock = _lock(folder / f".{env_hash}.lock", stop)
    try:
        done = read_marker(target)  # another make finished it while this one waited
        if done is not None:
            _point(home, spec, env_hash)
            return {**done, "made": False, "seconds": time.monotonic() - started}
        _remove_stale(folder, env_hash)
        tmp = folder / f".{env_hash}.{uuid.uuid4().hex[:12]}.tmp"
        house = folder / f".{env_hash}.{uuid.uuid4().hex[:12]}.wheels"
        try:
            return _build(home, tmp, house, target, spec, env_hash, wheels, uv, python, emit, stop, started)
        finally:
            shutil.rmtree(house, ignore_errors=True)
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        os.close(lock)


def _build(home, tmp, house, target, spec, env_hash, wheels, uv, python, emit, stop, started) -> dict:
    house.mkdir(mode=0o700)
    blobs = workdir.blobs_dir(home)
    for _, _, filename, sha in wheels:  # the installer wants wheels by their names: links to the blobs
        try:
            os.link(blobs / sha, house / filename)
        except OSError:
            shutil.copyfile(blobs / sha, house / filename)
    (house / "requirements.txt").write_text(
        "".join(f"{name}=={version} --hash=sha256:{sha}\n" for name, version, _, sha in wheels), encoding="utf-8")
    tool = str(_tool(home, uv))
    code, said = _run([tool, "venv", "--no-config", "--quiet", "--relocatable", "--no-python-downloads",
                       "--python", python, str(tmp)], stop, PROBE_TIMEOUT * 4)
    if code != 0:
        raise AgentError(f"could not make a virtual environment from {python} ({_installer_line(said)}); set "
                         "python for this host to a working Python 3.9+, then make it ready again",
                         protocol.INSTALL_FAILED)
    emit(protocol.ENV_INSTALLING, packages=len(wheels))
    code, said = _run([tool, "pip", "sync", "--no-config", "--offline", "--no-index", "--find-links", str(house),
                       "--require-hashes", "--no-cache", "--link-mode", "copy", "--python", str(tmp / "bin" / "python"),
                       "--quiet", str(house / "requirements.txt")], stop)
    if code != 0:
        raise AgentError(f"the install failed: {_installer_line(said)}", protocol.INSTALL_FAILED)
    emit(protocol.ENV_CHECKING, packages=len(wheels))
    installed = packages_in(tmp)
    wanted = {name: version for name, version, _, _ in wheels}
    wrong = sorted(n for n in set(wanted) | set(installed) if installed.get(n) != wanted.get(n))
    if wrong:
        first = wrong[0]
        raise AgentError(f"the install holds {first} {installed.get(first) or '(none)'} where the lock says "
                         f"{wanted.get(first) or '(none)'}; make it ready again", protocol.INSTALL_FAILED)
    version = subprocess.run([str(tmp / "bin" / "python"), "-S", "-c", "import platform; "
                              "print(platform.python_version())"], capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT, env=_installer_env())
    marker = {"hash": env_hash, "spec": spec, "python_version": version.stdout.strip(), "base": python,
              "packages": installed, "installer": "uv", "made_at": time.time()}
    with open(tmp / protocol.ENV_MARKER, "w", encoding="utf-8") as f:
        json.dump(marker, f, indent=1, sort_keys=True)
    if os.path.lexists(target) and read_marker(target) is None:
        # One made here before whose Python is gone (the base interpreter removed): ours, under our lock.
        shutil.rmtree(target) if os.path.isdir(target) and not os.path.islink(target) else os.unlink(target)
    try:
        os.rename(tmp, target)
    except OSError:
        if read_marker(target) is None:
            raise
    _point(home, spec, env_hash)
    return {**read_marker(target), "made": True, "seconds": time.monotonic() - started}


def _point(home: Path, spec: str, env_hash: str) -> None:
    """``envs/spec-<spec>`` names ``env_hash``: written beside and renamed over (never half a name)."""
    pointer = _pointer(home, spec)
    tmp = pointer.with_name(f".{pointer.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(env_hash + "\n", encoding="ascii")
    os.replace(tmp, pointer)

