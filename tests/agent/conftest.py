"""Fixtures of the agent's tests."""

from __future__ import annotations

import pytest

from console.remote.channel import AgentClient
from console.remote.local import local_agent


@pytest.fixture
def tfcc_home(tmp_path, monkeypatch):
    """The agent's folder (``$TFCC_HOME``) for one test: its runs and dist, never the real home's."""
    home = tmp_path / "home"
    monkeypatch.setenv("TFCC_HOME", str(home))
    return home


@pytest.fixture
def client(tfcc_home):
    """One real agent, a local subprocess in the test's own ``$TFCC_HOME``, closed at the end."""
    opened = AgentClient(local_agent())
    yield opened
    opened.close()
