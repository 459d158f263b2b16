"""What a run's hosts must have installed: the cluster file's ``[environment]``, as one spec (Qt-free).

A spec is the list of requirements every host's environment is made from (by default this console's own
TensorFlow, tf-keras, NumPy, TensorBoard and scikit-learn at its versions), where the console fetches their wheels,
and whether TensorFlow's CUDA wheels go on hosts with GPUs. Its ``key`` names it on every host (``envs/spec-<key>``
there names the environment made for it: agent/envs.py), so a start finds the environment whatever the host's
platform made of it. console/provision.py makes it; docs/provision.md tells the whole story.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from console import cluster as cl
from console.cluster_fields import GPU_ALWAYS, GPU_AUTO, TF_CONSOLE
from console.errors import TfccError

# What tfcc's trainer (and a script written after TensorFlow's guides) needs: the console's own versions of these.
CONSOLE_STACK = ("tensorflow", "tf-keras", "numpy", "tensorboard", "scikit-learn")
# TensorFlow 2.21's CUDA wheels are CUDA 12: NVIDIA's minor-version compatibility runs them on a driver of 525.60.13
# or newer (https://www.tensorflow.org/install/pip, "Hardware requirements").
CUDA_DRIVER = (525, 60, 13)
MAX_REQUIREMENTS = 500
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


class SpecError(TfccError):
    """An ``[environment]`` that cannot be made as it is; the message says what to do."""


@dataclass(frozen=True)
class Spec:
    requirements: tuple[str, ...]  # pip's words, one requirement each
    gpu: str                       # GPU_AUTO, GPU_NEVER, GPU_ALWAYS
    index: str                     # "" for none: find_links alone
    find_links: tuple[str, ...]
    required: bool                 # the cluster file has [environment]: its tasks run in it, or do not start

    @property
    def key(self) -> str:
        """The spec's name on every host (16 hex digits): what it asks for, not where it comes from."""
        words = json.dumps({"requirements": list(self.requirements), "gpu": self.gpu}, sort_keys=True)
        return hashlib.sha256(words.encode()).hexdigest()[:16]

    def python_env(self) -> dict:
        """What a start and a probe send the agent: the environment the tasks run in."""
        return {"spec": self.key, "required": self.required}

    def for_gpu(self, gpu: bool) -> list[str]:
        """The requirements for a host with NVIDIA GPUs (``gpu``): TensorFlow with its CUDA wheels."""
        if not gpu:
            return list(self.requirements)
        out = []
        for requirement in self.requirements:
            found = _NAME.match(requirement)
            if found and normalize(found[1]) == "tensorflow" and "and-cuda" not in (found[2] or ""):
                extras = [e.strip() for e in (found[2] or "[]")[1:-1].split(",") if e.strip()] + ["and-cuda"]
                requirement = f"tensorflow[{','.join(extras)}]{found[3]}"
            out.append(requirement)
        return out

    def as_dict(self) -> dict:
        return {**asdict(self), "key": self.key}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def console_stack() -> list[str]:
    """This console's TensorFlow stack, pinned to its versions (those it has installed)."""
    pins = []
    for name in CONSOLE_STACK:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return pins


def requirements_file(cluster: cl.Cluster) -> Path | None:
    """The ``[environment]`` requirements file: relative to the script's folder (a module's: its workdir)."""
    env = cluster.environment
    if env is None or not env.requirements:
        return None
    path = Path(env.requirements).expanduser()
    if path.is_absolute():
        return path
    t = cluster.training
    base = Path(t.workdir).expanduser() if t.workdir else Path(t.script).expanduser().parent if t.script else Path()
    return base / path


def read_requirements(path: Path) -> list[str]:
    """The requirements in a requirements file: one a line, comments and blank lines left out; an option line
    (``-r``, ``--index-url``) is refused with where its setting goes instead."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"[environment] requirements names {path}, which cannot be read "
                                f"({getattr(exc, 'strerror', None) or exc})",
                                "give the path of a requirements file (relative to the script's folder)") from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            raise SpecError(f"{path.name} line {number} is an option ({line.split()[0]}), which tfcc does "
                                    "not read", "list requirements only; put an index in [environment] index and "
                                    "wheel folders in find_links")
        out.append(line)
    return out


def spec_of(cluster: cl.Cluster) -> Spec:
    """The environment ``cluster``'s tasks run in (its ``[environment]``, else tfcc's default one)."""
    env = cluster.environment or cl.Environment()
    requirements = console_stack() if env.tensorflow == TF_CONSOLE else []
    requirements += env.packages
    path = requirements_file(cluster)
    if path is not None:
        requirements += read_requirements(path)
    if not requirements:
        raise SpecError("[environment] asks for nothing (tensorflow = \"none\" and no packages)",
                                "list what your code needs in packages or requirements")
    if len(requirements) > MAX_REQUIREMENTS:
        raise SpecError(f"[environment] asks for {len(requirements)} requirements",
                                f"list at most {MAX_REQUIREMENTS}")
    return Spec(tuple(dict.fromkeys(requirements)), env.gpu, env.index, tuple(env.find_links),
                cluster.environment is not None)


def add_packages(cluster: cl.Cluster, packages: list[str]) -> list[str]:
    """Add ``packages`` (pip's words) to ``cluster``'s ``[environment]``, in place (made with its defaults if the
    cluster has none: this console's stack and these); those it did not list already."""
    env = cluster.environment if cluster.environment is not None else cl.Environment()
    listed = {normalize(_NAME.match(p)[1]) for p in env.packages if _NAME.match(p)}
    added = [p for p in dict.fromkeys(packages) if _NAME.match(p) and normalize(_NAME.match(p)[1]) not in listed]
    if added:
        env.packages = [*env.packages, *added]
        cluster.environment = env
    return added


def wants_gpu(spec: Spec, probe: dict) -> bool:
    """Whether a host with ``probe`` gets TensorFlow's CUDA wheels."""
    return spec.gpu == GPU_ALWAYS or (spec.gpu == GPU_AUTO and bool(probe.get("gpus")))


def driver_problem(probe: dict) -> str | None:
    """Why a host's NVIDIA driver cannot run TensorFlow's CUDA 12 wheels (what to do), or None."""
    drivers = {g.get("driver") for g in probe.get("gpus") or [] if g.get("driver")}
    for driver in sorted(drivers):
        numbers = tuple(int(p) if p.isdigit() else 0 for p in driver.split("."))
        if numbers < CUDA_DRIVER:
            return (f"its NVIDIA driver {driver} is older than the {'.'.join(map(str, CUDA_DRIVER))} TensorFlow's "
                    "CUDA 12 wheels need: update the driver there, or set gpu = \"never\" in [environment]")
    return None


def driver_words(probe: dict) -> str:
    """What a GPU host gets, said: "CUDA 12 wheels (driver 580.159.04 meets 525.60.13 or newer)"."""
    drivers = sorted({g.get("driver") for g in probe.get("gpus") or [] if g.get("driver")})
    have = f"driver {', '.join(drivers)} meets" if drivers else "needs a driver of"
    return f"TensorFlow's CUDA 12 wheels ({have} {'.'.join(map(str, CUDA_DRIVER))} or newer)"


# Which manylinux platforms uv resolves for (uv pip compile --python-platform).
_MANYLINUX = (17, *range(28, 41))


def uv_platform(facts: dict) -> str:
    """uv's ``--python-platform`` for a host's platform facts (agent/envs.py's): ``x86_64-manylinux_2_36``; the
    newest manylinux its C library runs (glibc 2.36: 2_36; older than 2.28: 2_17)."""
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(facts.get("machine", ""), facts.get("machine", ""))
    if facts.get("system") != "linux" or machine not in ("x86_64", "aarch64"):
        raise SpecError(f"tfcc makes environments on Linux on x86_64 or aarch64, not on {facts.get('system')} "
                                f"{facts.get('machine')}", "install the packages there yourself and set python for "
                                "the host to that interpreter")
    if facts.get("libc") != "glibc":
        raise SpecError("its C library is not glibc (TensorFlow has no musllinux wheels)",
                                "use a glibc Linux host, or install the packages there yourself")
    try:
        minor = int(str(facts.get("libc_version", "")).split(".")[1])
    except (IndexError, ValueError):
        minor = 17
    usable = [m for m in _MANYLINUX if m <= minor] or [17]
    return f"{machine}-manylinux_2_{usable[-1]}"


def platform_key(facts: dict, gpu: bool) -> str:
    """Hosts of one platform share a lock and their wheels: the Python (implementation, major.minor), the machine,
    the C library's version and whether they get CUDA wheels."""
    python = ".".join(str(facts.get("python", "")).split(".")[:2])
    return f"{facts.get('implementation', 'cpython')}{python}-{uv_platform(facts)}" + ("-cuda" if gpu else "")
