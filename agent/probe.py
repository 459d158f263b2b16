"""What a host has for training: Python, TensorFlow, CPUs, memory, disk, GPUs.

Standard library only. Package versions come from installed metadata (no
TensorFlow import); TensorFlow's own view (built with CUDA, visible GPUs) is
asked for only on request, in a child process with a timeout. A missing or
failing ``nvidia-smi`` means "no GPU", not an error.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

GPU_FIELDS = ("index", "name", "uuid", "memory.total", "memory.used", "utilization.gpu", "driver_version")
NVIDIA_SMI_ARGS = ["--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"]
_MISSING = ("[N/A]", "[Not Supported]", "N/A", "")


def _number(text: str):
    if text in _MISSING:
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def parse_nvidia_smi(text: str) -> list:
    """Rows of ``nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits``.

    Fields are separated by ", "; ``[N/A]`` and ``[Not Supported]`` become None.
    """
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(", ")]
        if len(parts) != len(GPU_FIELDS):
            raise ValueError(f"nvidia-smi line has {len(parts)} fields, expected {len(GPU_FIELDS)}: {line!r}")
        row = dict(zip(GPU_FIELDS, parts))
        gpus.append({
            "index": _number(row["index"]),
            "name": row["name"],
            "uuid": None if row["uuid"] in _MISSING else row["uuid"],
            "memory_total_mib": _number(row["memory.total"]),
            "memory_used_mib": _number(row["memory.used"]),
            "utilization_percent": _number(row["utilization.gpu"]),
            "driver": None if row["driver_version"] in _MISSING else row["driver_version"],
        })
    return gpus


def gpus(nvidia_smi: str = "nvidia-smi", timeout: float = 10.0) -> dict:
    """GPUs from nvidia-smi; ``{"gpus": [], "note": why}`` when there are none to see."""
    path = shutil.which(nvidia_smi) if os.sep not in nvidia_smi else nvidia_smi
    if not path:
        return {"gpus": [], "note": "nvidia-smi not found: no NVIDIA driver on this host"}
    try:
        proc = subprocess.run([path, *NVIDIA_SMI_ARGS], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"gpus": [], "note": f"nvidia-smi gave no answer in {timeout:.0f} s"}
    except OSError as exc:
        return {"gpus": [], "note": f"nvidia-smi could not run: {exc.strerror}"}
    if proc.returncode != 0:
        reason = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
        return {"gpus": [], "note": f"nvidia-smi failed: {reason[0] if reason else f'exit code {proc.returncode}'}"}
    try:
        return {"gpus": parse_nvidia_smi(proc.stdout)}
    except ValueError as exc:
        return {"gpus": [], "note": f"cannot read nvidia-smi's output: {exc}"}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _venv_config(executable: str):
    """The ``pyvenv.cfg`` settings of the venv ``executable`` belongs to, or None outside a venv.

    As ``site`` finds it: beside the executable or one folder up (symlinks not resolved).
    """
    folder = os.path.dirname(os.path.abspath(executable))
    for candidate in (folder, os.path.dirname(folder)):
        path = os.path.join(candidate, "pyvenv.cfg")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        config = {"prefix": candidate}
        for line in lines:
            key, eq, value = line.partition("=")
            if eq:
                config[key.strip().lower()] = value.strip()
        return config
    return None


def _site_packages(prefix: str) -> list:
    """The site-packages folders of an installation or venv at ``prefix`` (POSIX layout)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return [os.path.join(prefix, lib, version, "site-packages") for lib in ("lib", "lib64")]


def search_path() -> list:
    """The folders an ``import`` in this interpreter would search with ``site`` on, in order.

    The agent runs with ``-S``, where a venv's interpreter keeps the base installation's
    ``sys.prefix`` (``site`` is what switches it to the venv), so ``sys.path`` and
    ``site.getsitepackages()`` would miss the venv's packages. Read ``pyvenv.cfg`` instead:
    the venv's site-packages, then the base's only with ``include-system-site-packages``.
    """
    paths = [p for p in sys.path if "site-packages" not in p and "dist-packages" not in p]
    venv = _venv_config(sys.executable)
    if venv is not None:
        paths += _site_packages(venv["prefix"])
        if venv.get("include-system-site-packages", "false").lower() == "true":
            paths += _base_site_packages()
        return paths
    paths += [p for p in sys.path if p not in paths]
    try:
        import site

        paths += [site.getusersitepackages()] if site.ENABLE_USER_SITE is not False else []
    except AttributeError:
        pass
    return paths + _base_site_packages()


def _base_site_packages() -> list:
    try:
        import site

        return list(site.getsitepackages([sys.base_prefix]))
    except (AttributeError, TypeError):  # some virtualenv builds of site.py
        return _site_packages(sys.base_prefix)


def package_version(name: str, paths=None):
    """The installed version of ``name`` as an import in this interpreter would see it, or None.

    Read from the ``*.dist-info/METADATA`` (or ``*.egg-info/PKG-INFO``) files on the
    interpreter's search path (``search_path``: venvs included, ``-S`` or not), the first
    found winning, as for an import. The agent runs with ``-S`` and reads these files
    itself: ``site`` hooks and ``importlib.metadata`` cost 0.1 s of CPU per host and check.
    """
    wanted = _normalize(name)
    for folder in search_path() if paths is None else paths:
        try:
            entries = os.listdir(folder or ".")
        except OSError:
            continue
        for entry in entries:
            stem, dot, kind = entry.rpartition(".")
            if kind not in ("dist-info", "egg-info") or _normalize(stem.split("-")[0]) != wanted:
                continue
            meta = os.path.join(folder, entry, "METADATA" if kind == "dist-info" else "PKG-INFO")
            try:
                with open(meta, encoding="utf-8", errors="replace") as f:
                    for line in f:
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break  # end of the headers
            except OSError:
                continue
    return None


def memory() -> dict:
    info = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                key, value = line.split(":", 1)
                if key in ("MemTotal", "MemAvailable"):
                    info[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return {"total_bytes": info.get("MemTotal"), "available_bytes": info.get("MemAvailable")}


def probe(home: Path, with_tensorflow: bool = False) -> dict:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    home.mkdir(parents=True, exist_ok=True)
    disk = shutil.disk_usage(home)
    result = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "tensorflow": package_version("tensorflow") or package_version("tensorflow-cpu"),
        "tf_keras": package_version("tf-keras"),
        "cpus": cpus,
        "memory": memory(),
        "disk_free_bytes": disk.free,
        "home": str(home),
        "code": Path(__file__).resolve().parent.parent.name,  # the deployed dist folder: the code's hash
        "time": time.time(),
        **gpus(),
    }
    if with_tensorflow:
        result["tensorflow_view"] = tensorflow_view()
    return result


MAX_MODULES = 500  # names asked about at most (a script imports tens)


def missing_modules(names: list, paths: list | None = None) -> list:
    """Which of ``names`` (top-level module names) this interpreter cannot import: found neither among its
    built-in and standard modules nor on its search path (venvs included), looked up without importing."""
    import importlib.machinery

    paths = [p for p in (search_path() if paths is None else paths) if p]
    standard = set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
    missing = []
    for name in dict.fromkeys(names[:MAX_MODULES]):
        if not isinstance(name, str) or not name.isidentifier() or name in standard:
            continue
        try:
            found = importlib.machinery.PathFinder.find_spec(name, paths)
        except (ImportError, ValueError, OSError):
            found = None
        if found is None:
            missing.append(name)
    return missing


def tensorflow_view(timeout: float = 120.0) -> dict:
    """TensorFlow's own view, from a child process (importing it takes seconds)."""
    code = ("import json, os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3'); import tensorflow as tf; "
            "print(json.dumps({'version': tf.__version__, 'built_with_cuda': tf.test.is_built_with_cuda(), "
            "'gpus': [d.name for d in tf.config.list_physical_devices('GPU')]}))")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"importing TensorFlow took more than {timeout:.0f} s"}
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])
