"""The set-up scripts a new machine runs first: CI says what its interpreter already has."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def ci_interpreter_report(tmp_path: Path, python: str) -> str:
    """``.ci/run --interpreter`` with ``python`` as the python3 on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin")
    env.pop("PYTHONPATH", None)
    done = subprocess.run(["bash", str(ROOT / ".ci" / "run"), "--interpreter"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_ci_warns_when_its_interpreter_alone_imports_what_the_install_steps_should_provide(tmp_path):
    out = ci_interpreter_report(tmp_path, sys.executable)  # this venv's: it has them all
    assert f"ci: scripts/test builds .venv from {tmp_path / 'bin' / 'python3'}: {sys.executable} " in out, out
    assert "ci: WARNING: that interpreter alone imports tensorflow, PySide6, paramiko" in out, out


def test_ci_says_a_bare_interpreter_imports_none_of_them(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    out = ci_interpreter_report(tmp_path, str(tmp_path / "bare" / "bin" / "python"))
    assert "imports none of tensorflow, PySide6, paramiko" in out, out
