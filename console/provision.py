"""Hosts made ready: the Python environment a run needs on every host, the same everywhere, offline (Qt-free).

``provision(cluster)`` asks every host at once what it has (its platform, free disk, the environment made for
the cluster's spec: console/environments.py). A host that has what the run needs is left as it is, in well under
a second. For the others, one lock for each platform among them (``uv pip compile`` for that platform: exact
versions, each wheel's URL and sha256), kept in this console's cache, so a second provision resolves nothing.
The wheels come once for each platform, from the cache or the index this console reaches (the hosts need none:
most training hosts reach no index), and go to each host content-addressed over SFTP as blobs (what a host has is
never sent again; hosts that share a home share them), with the installer (uv: its static binary). The host's
agent then makes the environment offline and reads every version back (agent/envs.py). Each host on its own
thread: a failure on one says why in one line and leaves the others ready; a cancel ends every host's step and
leaves nothing half made in use.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import threading
import time
import tomllib
import urllib.parse
import urllib.request
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import platformdirs

from agent.protocol import DOWNLOAD_FAILED, ENV_CANCEL, ENV_MAKE, ENV_STAGES, ENV_STATUS, MISSING_BLOBS, PROBE, PROGRESS
from console import cluster as cl
from console import environments as envs
from console.errors import TfccError, describe
from console.remote.deploy import make_bundle, upload_blobs
from console.remote.link import HostLink
from console.run.placement import placement_for
from console.text import size_text

log = logging.getLogger("console.provision")
CACHE_VARIABLE = "TFCC_CACHE"  # this console's cache of locks and wheels (default: the user's cache folder)
RESOLVE_TIMEOUT = 300.0
FETCH_TIMEOUT = 60.0           # seconds without a byte from the index before a download is given up
STATUS_TIMEOUT = 30.0
MARGIN = 1.1                   # an environment needs its wheels and what they unpack to, and a tenth more
NETWORK_WORDS = ("Request failed", "error sending request", "dns error", "Could not connect", "timed out",
                 "Connection refused", "Failed to fetch")  # what uv says when it could not reach the index
PUSH_STEP = 1 << 20            # a push's progress is said every this many bytes
SILENCE = 60.0                 # a make that says nothing this long (it beats every 5 s) is on a host gone

# A host's way through a provision, as its progress says (in order), and how it ended.
CONNECTING, RESOLVING, FETCHING, PUSHING = "connecting", "resolving", "fetching", "pushing"
DOWNLOADING, PREPARING, INSTALLING, CHECKING = ENV_STAGES  # the host's own (agent/envs.py)
READY, MADE, FAILED, SKIPPED, CANCELLED = "ready", "made", "failed", "skipped", "cancelled"
STAGES = (CONNECTING, RESOLVING, FETCHING, PUSHING, DOWNLOADING, PREPARING, INSTALLING, CHECKING)
ENDS = (READY, MADE, FAILED, SKIPPED, CANCELLED)


class ProvisionError(TfccError):
    """One host cannot be made ready; the message says what to do."""


class Cancelled(Exception):
    """A person cancelled the provision."""


class HostDownloadFailed(ProvisionError):
    """A host that reaches the index could not download a wheel from it: the wheels are pushed instead."""


class WheelMismatch(ProvisionError):
    """A wheel that does not hold what its lock says: the lock is dropped (the next provision resolves anew)."""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_VARIABLE) or platformdirs.user_cache_dir("tfcc"))


@dataclass
class HostResult:
    """One host's provision: where it got (``stage``, one of STAGES then one of ENDS) and what it holds."""

    name: str
    stage: str = CONNECTING
    line: str = ""            # what happened, in words (the failure: why and what to do)
    platform: str = ""        # its platform key (console/environments.py)
    gpu: bool = False
    python: str = ""          # the interpreter its tasks run with
    packages: dict = field(default_factory=dict)  # what its environment holds: {name: version}
    to_push: int = 0          # bytes it lacked
    pushed: int = 0           # bytes pushed to it so far
    downloaded: int = 0       # bytes it downloaded itself from the index (a host that reaches one)
    installing: int = 0       # packages being installed
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.stage in (READY, MADE, SKIPPED)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Report:
    spec: envs.Spec
    hosts: list[HostResult]
    fetched: int = 0          # bytes downloaded from an index (once for each platform)
    seconds: float = 0.0
    differs: list[str] = field(default_factory=list)  # packages whose versions differ between hosts, in words

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts) and not self.differs

    @property
    def pushed(self) -> int:
        return sum(h.pushed for h in self.hosts)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "spec": self.spec.as_dict(), "hosts": [h.as_dict() for h in self.hosts],
                "fetched": self.fetched, "pushed": self.pushed, "seconds": self.seconds, "differs": self.differs}


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    filename: str
    sha256: str
    url: str
    size: int | None


# --------------------------------------------------------------------------- the installer and its locks


_uv: list = []
_uv_lock = threading.Lock()


def uv_binary() -> Path:
    """This console's uv (the ``uv`` package's binary): it resolves here and is pushed to hosts of its platform.
    Found once, under a lock: ``uv.find_uv_bin`` reads ``sysconfig``, whose first read is not safe from threads
    (hosts asked at once saw ``EXE`` as None)."""
    with _uv_lock:
        if not _uv:
            try:
                import uv

                _uv.append(Path(uv.find_uv_bin()))
            except (ImportError, FileNotFoundError):
                found = shutil.which("uv")
                if not found:
                    raise ProvisionError("this console has no uv (the installer tfcc pushes to hosts)",
                                         "install it beside tfcc: pip install uv") from None
                _uv.append(Path(found))
        return _uv[0]


def _quiet_env() -> dict:
    """uv's environment here: none of this machine's pip or uv settings (an index, constraints) read."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and k != "VIRTUAL_ENV"}


_hashes: dict = {}
_hashes_lock = threading.Lock()


def file_sha256(path: Path) -> str:
    """A file's sha256, remembered by its path, size and time of change (a wheel is hashed once a session)."""
    info = path.stat()
    key = (str(path), info.st_size, info.st_mtime_ns)
    with _hashes_lock:
        if key in _hashes:
            return _hashes[key]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    with _hashes_lock:
        _hashes[key] = digest.hexdigest()
    return _hashes[key]


def _first_reason(text: str) -> str:
    """uv's refusal in one line: its own sentences, without the tree it draws."""
    lines = [line.strip(" ×╰─▶│").strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("hint:", "help:", "warning:"))]
    said = " ".join(lines)
    return said[:500] if said else "uv said nothing"


def _folder_listing(folder: str) -> list:
    """The wheels a find_links folder holds now (name, size, time of change): a lock resolved from it is kept only
    while it holds the same."""
    try:
        return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(folder).expanduser().glob("*.whl"))
    except OSError:
        return []


def lock(spec: envs.Spec, requirements: list[str], platform: str, facts: dict,
         cancel: threading.Event) -> tuple[list[Wheel], Path]:
    """The exact wheels of ``requirements`` for one platform (``uv pip compile``), and the lock's file: from the
    cache when it was resolved before from the same sources; a refusal names the package and the platform."""
    python = ".".join(str(facts.get("python", "")).split(".")[:2])
    sources = (spec.index, [(f, _folder_listing(f)) for f in spec.find_links])
    key = hashlib.sha256(repr((requirements, sources, platform)).encode()).hexdigest()[:24]
    cached = cache_dir() / "locks" / f"{key}.pylock.toml"
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        work = cached.parent / f".{key}.{uuid.uuid4().hex[:8]}"
        work.mkdir()
        try:
            (work / "requirements.in").write_text("".join(r + "\n" for r in requirements), encoding="utf-8")
            argv = [str(uv_binary()), "pip", "compile", "--no-config", "--quiet", "--only-binary", ":all:",
                    "--cache-dir", str(cache_dir() / "uv"),
                    "--python-version", python, "--python-platform", envs.uv_platform(facts),
                    "--no-header", "-o", str(work / "pylock.toml"), str(work / "requirements.in")]
            argv += ["--default-index", spec.index] if spec.index else ["--no-index"]
            for folder in spec.find_links:
                argv += ["--find-links", str(Path(folder).expanduser())]
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_quiet_env(), text=True)
            deadline = time.monotonic() + RESOLVE_TIMEOUT
            while proc.poll() is None:
                if cancel.is_set() or time.monotonic() > deadline:
                    proc.kill()
                    proc.communicate()
                    if cancel.is_set():
                        raise Cancelled()
                    raise ProvisionError(f"resolving the packages took over {RESOLVE_TIMEOUT:.0f} s",
                                         "check that this console reaches the index, then make it ready again")
                try:
                    proc.wait(0.2)
                except subprocess.TimeoutExpired:
                    pass
            _, err = proc.communicate()
            if proc.returncode != 0 and any(w in err for w in NETWORK_WORDS):
                raise ProvisionError(f"this console could not reach the index {spec.index or '(none)'} to resolve the "
                                     f"packages: {_first_reason(err)}",
                                     "check this console's network and proxy (HTTPS_PROXY), or put the wheels in a "
                                     "find_links folder and set index = \"\" in [environment]")
            if proc.returncode != 0:
                raise ProvisionError(f"no set of wheels for its platform ({python}, {envs.uv_platform(facts)}): "
                                     f"{_first_reason(err)}",
                                     "add wheels for that platform to find_links, change the versions in "
                                     "[environment], or set python for that host to another Python")
            os.replace(work / "pylock.toml", cached)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return read_lock(cached), cached


def read_lock(path: Path) -> list[Wheel]:
    """The wheels a PEP 751 lock (``pylock.toml``, one wheel a package) lists."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    wheels = []
    for package in data.get("packages", []):
        found = package.get("wheels") or []
        if not found:
            raise ProvisionError(f"{package.get('name')} {package.get('version')} has no wheel for this platform",
                                 "add a wheel of it to find_links, or pick a version that has one")
        wheel = found[0]
        url = wheel.get("url") or Path(wheel["path"]).resolve().as_uri()
        filename = wheel.get("name") or urllib.parse.unquote(url.rsplit("/", 1)[-1].split("#")[0])
        wheels.append(Wheel(envs.normalize(package["name"]), str(package["version"]), filename,
                            wheel["hashes"]["sha256"], url, wheel.get("size")))
    return wheels


# --------------------------------------------------------------------------- wheels here


class Cache:
    """This console's wheels, each once: ``<cache>/wheels/<sha256>/<file name>``, fetched whole, checked by their
    hash, renamed into place; the bytes it fetched from an index, counted."""

    def __init__(self, cancel: threading.Event):
        self.folder = cache_dir() / "wheels"
        self.cancel = cancel
        self.fetched = 0
        self._locks: dict = {}
        self._lock = threading.Lock()

    def path(self, wheel: Wheel) -> Path:
        return self.folder / wheel.sha256 / wheel.filename

    def get(self, wheel: Wheel, on_bytes=None) -> Path:
        """The wheel's file here, fetched (or copied from a find_links folder) if need be."""
        with self._lock:
            one = self._locks.setdefault(wheel.sha256, threading.Lock())
        with one:  # two platforms that share a wheel fetch it once
            target = self.path(wheel)
            if target.exists():
                return target
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{uuid.uuid4().hex[:8]}.tmp")
            digest = hashlib.sha256()
            remote = not wheel.url.startswith("file:")
            try:
                with urllib.request.urlopen(wheel.url, timeout=FETCH_TIMEOUT) as source, open(tmp, "wb") as out:
                    for chunk in iter(lambda: source.read(1 << 20), b""):
                        if self.cancel.is_set():
                            raise Cancelled()
                        digest.update(chunk)
                        out.write(chunk)
                        if remote:
                            with self._lock:
                                self.fetched += len(chunk)
                        if on_bytes is not None:
                            on_bytes(len(chunk))
                if digest.hexdigest() != wheel.sha256:
                    raise WheelMismatch(f"{wheel.filename} from {_where(wheel.url)} does not hold what its lock "
                                        "says (its sha256 differs)", "make it ready again (its versions are resolved "
                                        "anew)")
                os.replace(tmp, target)
            except WheelMismatch:
                raise
            except OSError as exc:
                raise ProvisionError(f"cannot fetch {wheel.filename} from {_where(wheel.url)} "
                                     f"({getattr(exc, 'reason', None) or exc.strerror or exc})",
                                     "check that this console reaches the index (or put the wheel in a find_links "
                                     "folder), then make it ready again") from None
            finally:
                tmp.unlink(missing_ok=True)
            return target


def _where(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    return parsed.netloc or os.path.dirname(parsed.path)


def unpacked_size(path: Path) -> int:
    """What a wheel unpacks to (its files' sizes, from its zip directory), read once a session for each file."""
    info = path.stat()
    return _unpacked_size(str(path), info.st_size, info.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _unpacked_size(path: str, _size: int, _mtime: int) -> int:
    with zipfile.ZipFile(path) as z:
        return sum(info.file_size for info in z.infolist())


def env_hash(facts: dict, wheels: list[Wheel]) -> str:
    """The name of an environment on its hosts: the Python it is made from (which, and where: hosts that share a
    home share it only with the same interpreter) and every wheel's content."""
    python = ".".join(str(facts.get("python", "")).split(".")[:2])
    words = repr((facts.get("implementation"), python, str(facts.get("python_executable")),
                  sorted((w.name, w.version, w.sha256) for w in wheels)))
    return hashlib.sha256(words.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- the provision


def console_has(probe: dict) -> bool:
    """Whether a host's Python has this console's TensorFlow and tf-keras (tfcc's default environment is then not
    needed there)."""
    stack = dict(r.split("==", 1) for r in envs.console_stack())
    return bool(probe.get("tensorflow")) and probe.get("tensorflow") == stack.get("tensorflow") \
        and probe.get("tf_keras") == stack.get("tf-keras")


class Provision:
    """One provision of a cluster's hosts; ``run()`` makes them ready, ``cancel()`` from any thread ends it.

    ``on_progress(result)`` is called from worker threads each time a host's ``HostResult`` changes (a copy)."""

    def __init__(self, cluster: cl.Cluster, ask_host_key=None, on_progress=None, timeout: float = 20.0):
        self.cluster = cluster
        self.spec = envs.spec_of(cluster)
        self.ask_host_key = ask_host_key
        self.on_progress = on_progress
        self.timeout = timeout
        self.cancelled = threading.Event()
        self.cache = Cache(self.cancelled)
        self._locks: dict = {}       # platform key -> the lock's wheels (or its error), made once
        self._lock = threading.Lock()
        self._platform_locks: dict = {}
        self._makes: dict = {}       # host name -> (client, its env_make's request id)
        self._homes: dict = {}       # a host's home id -> the lock its pushes hold (hosts that share a home)
        self.silence = SILENCE       # seconds a host's make may say nothing before it is taken for lost

    def cancel(self) -> None:
        self.cancelled.set()
        with self._lock:
            makes = list(self._makes.values())
        for client, rid in makes:
            client.notify(ENV_CANCEL, make=rid)

    def _said(self, result: HostResult, **changes) -> None:
        for key, value in changes.items():
            setattr(result, key, value)
        if self.on_progress is not None:
            try:
                self.on_progress(HostResult(**result.as_dict()))
            except Exception:
                log.exception("a provision's progress callback failed")

    def run(self) -> Report:
        started = time.monotonic()
        hosts = placement_for(self.cluster).environment_hosts()
        results = [HostResult(h.name) for h in hosts]
        bundle = make_bundle()
        with ThreadPoolExecutor(max_workers=max(1, len(hosts)), thread_name_prefix="tfcc-provision") as pool:
            futures = [pool.submit(self._host, host, result, bundle) for host, result in zip(hosts, results)]
            try:
                for future in futures:
                    future.result()
            except BaseException:  # Ctrl-C: every host's step ends (and its installer), then the pool is left
                self.cancel()
                raise
        report = Report(self.spec, results, self.cache.fetched, time.monotonic() - started)
        report.differs = differences(results)
        log.info("provision of %s: %s", self.spec.key, [(r.name, r.stage, r.line) for r in results])
        return report

    def _host(self, host: cl.Host, result: HostResult, bundle) -> None:
        started = time.monotonic()
        link = HostLink(host, self.ask_host_key, timeout=self.timeout)
        try:
            self._said(result, stage=CONNECTING)
            self._make_ready(host, result, link, bundle)
        except Cancelled:
            self._said(result, stage=CANCELLED, line="cancelled: nothing half made is used; make it ready again")
        except TfccError as exc:
            if self.cancelled.is_set():
                self._said(result, stage=CANCELLED, line="cancelled: nothing half made is used; make it ready again")
            else:
                words = exc.cause + (f": {exc.fix}" if exc.fix else "")
                self._said(result, stage=FAILED, line=words)
        except Exception as exc:  # a bug: this host's line says so, the traceback goes to the log
            log.exception("provision of %s", host.name)
            self._said(result, stage=FAILED, line=describe(exc))
        finally:
            result.seconds = time.monotonic() - started
            with self._lock:
                self._makes.pop(host.name, None)
            link.drop()

    def _check(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled()

    def _make_ready(self, host: cl.Host, result: HostResult, link: HostLink, bundle) -> None:
        spec = self.spec
        client = link.connect(bundle)
        self._check()
        status = client.call(ENV_STATUS, spec=spec.key, timeout=STATUS_TIMEOUT)
        probe = client.call(PROBE, python_env=spec.python_env(), timeout=STATUS_TIMEOUT)
        facts = status.get("platform") if isinstance(status.get("platform"), dict) else {}
        result.python = str(probe.get("python_executable") or "")
        if host.python and not spec.required:
            self._said(result, stage=SKIPPED, line=f"skipped: python is set for {host.name} ({host.python}): its "
                                                   "tasks run that interpreter, so tfcc makes nothing there")
            return
        if isinstance(status.get("env"), dict):
            env = status["env"]
            packages = _packages(env.get("packages"))
            self._said(result, stage=READY, python=str(env.get("python")), packages=packages,
                       line=f"ready: has it already ({len(packages)} packages, Python {env.get('python_version')})")
            return
        if not spec.required and console_has(probe):
            self._said(result, stage=READY, line=f"ready: its Python ({result.python}) has TensorFlow "
                                                 f"{probe['tensorflow']} and tf-keras {probe['tf_keras']} already")
            return
        if spec.index.startswith(("http://", "https://")):  # asked only of a host that needs the wheels
            status = client.call(ENV_STATUS, spec=spec.key, index=spec.index, timeout=STATUS_TIMEOUT)
        gpu = envs.wants_gpu(spec, probe)
        if gpu and (problem := envs.driver_problem(probe)):
            raise ProvisionError(problem)
        uv = uv_binary()
        if facts.get("machine") != os.uname().machine:
            raise ProvisionError(f"its machine is {facts.get('machine')}, this console's uv is for "
                                 f"{os.uname().machine}", "make the environment there by hand, or provision it from "
                                 "a console of that machine")
        platform = envs.platform_key(facts, gpu)
        self._said(result, stage=RESOLVING, platform=platform, gpu=gpu)
        wheels = self._lock_for(platform, facts, gpu)
        self._check()
        reached = bool((status.get("index") or {}).get("reached"))
        try:
            self._deliver(host, result, link, client, status, probe, gpu, platform, wheels, uv, reached)
        except HostDownloadFailed as exc:  # it reaches the index, yet a download failed: the wheels go from here
            log.info("%s: %s; pushing the wheels instead", host.name, exc.cause)
            self._said(result, downloaded=0)
            self._deliver(host, result, link, client, status, probe, gpu, platform, wheels, uv, False)

    def _deliver(self, host, result, link, client, status, probe, gpu, platform, wheels, uv, reached) -> None:
        """The wheels to the host (pushed, or downloaded there where it ``reached`` the index), then the make."""
        facts = status.get("platform") if isinstance(status.get("platform"), dict) else {}
        uv_sha = file_sha256(uv)
        # A host that reaches the index (it was asked) downloads the wheels the index has itself; the others get
        # them pushed, fetched here once.
        urls = {w.sha256: w.url for w in wheels if reached and w.url.startswith(("http://", "https://"))}
        everything = [w.sha256 for w in wheels] + [uv_sha]
        missing = client.call(MISSING_BLOBS, sha256=everything, timeout=STATUS_TIMEOUT)["missing"]
        self._said(result, stage=FETCHING)
        try:
            files = {w.sha256: self.cache.get(w) for w in wheels if w.sha256 in missing and w.sha256 not in urls}
        except WheelMismatch:
            self._forget_lock(platform)  # resolved anew next time (a find_links wheel rebuilt, an index changed)
            raise
        files[uv_sha] = uv
        self._check()
        # Hosts that share a home push into it one at a time: the second finds what the first pushed.
        with self._home_lock(str(status.get("home_id") or host.name)):
            missing = client.call(MISSING_BLOBS, sha256=everything, timeout=STATUS_TIMEOUT)["missing"]
            sizes = {sha: files[sha].stat().st_size for sha in missing if sha in files}
            unpacked = sum(self._unpacked_estimate(w) for w in wheels)
            downloads = [sha for sha in missing if sha in urls]
            download_bytes = sum(w.size or 0 for w in wheels if w.sha256 in downloads)
            pushes = [sha for sha in missing if sha not in urls and sha in files]
            need = int((sum(sizes.values()) + download_bytes + unpacked) * MARGIN)
            free = status.get("disk_free_bytes") or 0
            if free < need:
                raise ProvisionError(f"{size_text(free)} free in {status.get('envs')}, the environment needs "
                                     f"{size_text(need)}", "free space there (or set TFCC_HOME on that host to a "
                                                           "larger disk), then make it ready again")
            self._said(result, stage=PUSHING, to_push=sum(sizes.values()), pushed=0)
            self._push(link, result, [(sha, files[sha], sizes[sha]) for sha in pushes])
        self._check()
        env = self._install(host, result, client, self.spec, facts, wheels, uv_sha,
                            int((download_bytes + unpacked) * MARGIN), {sha: urls[sha] for sha in downloads})
        got = f", {size_text(result.downloaded)} downloaded by the host itself" if result.downloaded else ""
        packages = _packages(env.get("packages"))
        self._said(result, stage=MADE, python=str(env.get("python")), packages=packages,
                   line=f"made: {len(packages)} packages, Python {env.get('python_version')}"
                        + (f", {envs.driver_words(probe)}" if gpu else "") + f", {size_text(result.pushed)} pushed"
                        + got)

    def _push(self, link: HostLink, result: HostResult, todo: list) -> None:
        """Push ``todo`` ((sha256, file, size) each) as blobs, its bytes said as they go; a cancel ends it there."""
        if not todo:
            return

        def pushed(sent: int, _total: int) -> None:
            if sent - result.pushed >= PUSH_STEP or sent == result.to_push:
                self._said(result, pushed=sent)
            self._check()

        transfer = link.transport.files()
        try:
            upload_blobs(todo, transfer, link.home, pushed, in_chunks=True)
        except (Cancelled, TfccError):
            raise
        except Exception as exc:  # OSError, or the SSH connection's own (EOFError, paramiko's): the push ended there
            raise ProvisionError(f"the push of the wheels to {link.home}/blobs ended: "
                                 f"{getattr(exc, 'strerror', None) or describe(exc)}",
                                 "check that the host answers, its free disk space and the permissions there, then "
                                 "make it ready again") from None
        finally:
            transfer.close()
        self._said(result, pushed=result.to_push)

    def _home_lock(self, home: str) -> threading.Lock:
        with self._lock:
            return self._homes.setdefault(home, threading.Lock())

    def _forget_lock(self, platform: str) -> None:
        with self._lock:
            found = self._locks.pop(platform, None)
        if isinstance(found, tuple):
            found[1].unlink(missing_ok=True)

    def _unpacked_estimate(self, wheel: Wheel) -> int:
        """What a wheel unpacks to: read from its file here (the cache's, or a find_links folder's); one that only
        the host downloads, about four times its size."""
        here = self.cache.path(wheel)
        if not here.exists() and wheel.url.startswith("file:"):
            here = Path(urllib.request.url2pathname(urllib.parse.urlparse(wheel.url).path))
        return unpacked_size(here) if here.exists() else 4 * (wheel.size or 0)

    def _lock_for(self, platform: str, facts: dict, gpu: bool) -> list[Wheel]:
        with self._lock:
            one = self._platform_locks.setdefault(platform, threading.Lock())
        with one:  # the hosts of one platform wait for one lock
            if platform not in self._locks:
                try:
                    self._locks[platform] = lock(self.spec, self.spec.for_gpu(gpu), platform, facts, self.cancelled)
                except ProvisionError as exc:
                    self._locks[platform] = exc
            found = self._locks[platform]
        if isinstance(found, ProvisionError):
            raise ProvisionError(found.cause, found.fix)
        return found[0]

    def _install(self, host, result, client, spec, facts, wheels, uv_sha, need, urls) -> dict:
        """The host's agent makes the environment (env_make), its progress said as it comes; its marker."""
        heard = [time.monotonic()]

        def on_message(message: dict) -> None:
            heard[0] = time.monotonic()
            if message.get("type") != PROGRESS or message.get("stage") not in STAGES or message.get("beat"):
                return  # (a beat: the host is there)
            if message["stage"] == DOWNLOADING:
                self._said(result, stage=DOWNLOADING, downloaded=int(message.get("done") or 0))
            elif message["stage"] != result.stage:
                self._said(result, stage=message["stage"], installing=int(message.get("packages") or 0))

        follow = client.stream(ENV_MAKE, on_message, spec=spec.key, hash=env_hash(facts, wheels),
                               wheels=[[w.filename, w.sha256] for w in wheels], uv=uv_sha, need_bytes=need, urls=urls,
                               **({"python": host.python} if host.python else {}))
        with self._lock:
            self._makes[host.name] = (client, follow.rid)
        if self.cancelled.is_set():
            client.notify(ENV_CANCEL, make=follow.rid)
        while not follow.done.wait(0.5):
            if time.monotonic() - heard[0] > self.silence:  # the host went away without a word (no FIN, no RST)
                raise ProvisionError(f"{host.name} said nothing for {self.silence:.0f} s while "
                                     f"{result.stage if result.stage in STAGES else 'installing'}; the half-made "
                                     "environment is not used", "make it ready again when the host answers")
        if follow.error is not None and follow.end is None:
            if self.cancelled.is_set():
                raise Cancelled()
            if follow.error == "channel closed":
                raise ProvisionError(f"the connection to {host.name} was lost while "
                                     f"{result.stage if result.stage in STAGES else 'installing'}; the half-made "
                                     "environment is not used", "make it ready again when the host answers")
            raise ProvisionError(follow.error)
        end = follow.end or {}
        if end.get("cancelled"):
            raise Cancelled()
        if end.get("error"):
            raise (HostDownloadFailed if end.get("code") == DOWNLOAD_FAILED else ProvisionError)(str(end["error"]))
        if not isinstance(end.get("env"), dict):
            raise ProvisionError(f"{host.name}'s agent ended the make without saying what it made",
                                 "make it ready again")
        return end["env"]


def _packages(value) -> dict:
    """What a host says its environment holds, as {name: version} strings whatever it sent."""
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def differences(results: list[HostResult]) -> list[str]:
    """The packages whose versions differ between the hosts' environments (CUDA's nvidia-* among GPU hosts only),
    in words: "numpy: h0 has 2.1.3, h1 has 2.2.0"."""
    made = [r for r in results if r.ok and r.packages]
    out = []
    names = sorted({n for r in made for n in r.packages})
    for name in names:
        among = [r for r in made if not name.startswith("nvidia-") or r.gpu]
        versions = {r.name: r.packages.get(name) or "none" for r in among}
        if len(set(versions.values())) > 1 and not (name.startswith("nvidia-") and len(among) < 2):
            out.append(f"{name}: " + ", ".join(f"{h} has {v}" for h, v in versions.items()))
    return out


def provision(cluster: cl.Cluster, ask_host_key=None, on_progress=None, timeout: float = 20.0) -> Report:
    """Make every host of ``cluster`` ready (``Provision``)."""
    return Provision(cluster, ask_host_key, on_progress, timeout).run()
