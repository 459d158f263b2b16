"""Small wheels of the tests' own, written by hand (a zip with METADATA, WHEEL and RECORD): what a provision
installs when it is the mechanics under test, not TensorFlow (console/provision.py, agent/envs.py)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import zipfile
from pathlib import Path


def _record(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest},{len(data)}"


def make_wheel(folder: Path, name: str, version: str, requires=(), payload: int = 0,
               tag: str = "py3-none-any", files: int = 0) -> Path:
    """``folder/<name>-<version>-<tag>.whl``: a package ``name`` whose ``__version__`` is ``version``, needing
    ``requires`` (pip's words), with ``payload`` random bytes (stored: a big wheel is big on the wire too) and
    ``files`` small modules more (an install of many files takes its time, as TensorFlow's 24,000)."""
    folder.mkdir(parents=True, exist_ok=True)
    module, extra = name.replace("-", "_"), files
    dist = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f"__version__ = {version!r}\n".encode(),
        f"{dist}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                             + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode(),
        f"{dist}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: tfcc-tests\nRoot-Is-Purelib: "
                          f"{'true' if tag.endswith('any') else 'false'}\nTag: {tag}\n").encode(),
    }
    if payload:
        files[f"{module}/payload.bin"] = os.urandom(payload)
    for number in range(extra):
        files[f"{module}/part{number // 1000}/m{number}.py"] = f"N = {number}\n".encode() * 20
    path = folder / f"{module}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        lines = []
        for rel, data in files.items():
            z.writestr(rel, data)
            lines.append(f"{rel},{_record(data)}")
        lines.append(f"{dist}/RECORD,,")
        z.writestr(f"{dist}/RECORD", "\n".join(lines) + "\n")
    return path


def console_stack_stand_ins(folder: Path) -> list[Path]:
    """A tiny wheel for each package of the console's TensorFlow stack, at the console's own versions (what tfcc's
    default environment pins): a provision's whole way with no download and no 600 MB."""
    from console.environments import CONSOLE_STACK

    return [make_wheel(folder, name, importlib.metadata.version(name)) for name in CONSOLE_STACK]
