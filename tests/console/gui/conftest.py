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
def gui_homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    monkeypatch.setenv("TFCC_KNOWN_HOSTS", str(tmp_path / "known_hosts"))
    monkeypatch.setenv("TFCC_SSH_CONFIG", str(tmp_path / "ssh_config"))
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "2")
    return tmp_path


def save_shot(widget, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    assert widget.grab().save(str(path)), f"could not save {path}"
    return path
