"""Fixtures for the window's tests: screenshots, and a console home of the test's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def shots(request) -> Path:
    """Where the tests save their screenshots: $TFCC_SCREENSHOTS or build/screenshots/."""
    folder = Path(os.environ.get("TFCC_SCREENSHOTS") or ROOT / "build" / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def gui_homes(ssh_env, monkeypatch):
    """The test's own homes, known_hosts and ssh config (``ssh_env``), and small TensorFlow thread pools."""
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "2")
    return ssh_env


def save_shot(widget, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    assert widget.grab().save(str(path)), f"could not save {path}"
    return path
