"""Port checks through the agent: busy ports name their holder; listeners come and go."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent.runs import free_ports
from console.remote.channel import AgentClient, AgentRequestError
from console.remote.local import local_agent


@pytest.fixture
def client(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path))
    c = AgentClient(local_agent())
    yield c
    c.close()


def test_busy_port_names_its_holder(client):
    code = ("import socket, sys; s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen(); "
            "print(s.getsockname()[1], flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, "tfcc-test-holder"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(holder.stdout.readline())
        (free,) = free_ports(1)
        busy, ok = client.call("check_ports", ports=[port, free])["ports"]
        assert ok == {"port": free, "free": True}
        assert busy["free"] is False and busy["error"] == "Address already in use"
        assert busy["holder"]["pid"] == holder.pid and "tfcc-test-holder" in busy["holder"]["command"]
    finally:
        holder.kill()
        holder.wait()


def test_listen_connect_release(client, tmp_path):
    (port,) = free_ports(1)
    assert client.call("listen", ports=[port], seconds=30) == {"id": 1, "ok": True, "listening": [port], "failed": {}}
    other = AgentClient(local_agent())
    try:
        (result,) = other.call("connect", targets=[{"host": "127.0.0.1", "port": port}], connect_timeout=3)["results"]
        assert result["ok"] and result["ms"] >= 0
        assert client.call("release", ports=[port])["released"] == [port]
        (result,) = other.call("connect", targets=[{"host": "127.0.0.1", "port": port}], connect_timeout=3)["results"]
        assert result == {"host": "127.0.0.1", "port": port, "ok": False, "error": "refused"}
    finally:
        other.close()


def test_listeners_end_with_the_channel(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path))
    (port,) = free_ports(1)
    first = AgentClient(local_agent())
    first.call("listen", ports=[port], seconds=60)
    first.close()
    second = AgentClient(local_agent())
    try:
        assert second.call("check_ports", ports=[port])["ports"][0]["free"] is True
        with pytest.raises(AgentRequestError, match="seconds 500 must be more than 0 and at most 300"):
            second.call("listen", ports=[port], seconds=500)
    finally:
        second.close()
