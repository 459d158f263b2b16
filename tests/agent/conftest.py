"""Fixtures of the agent's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def tfcc_home(tmp_path, monkeypatch):
    """The agent's folder (``$TFCC_HOME``) for one test: its runs and dist, never the real home's."""
    home = tmp_path / "home"
    monkeypatch.setenv("TFCC_HOME", str(home))
    return home
