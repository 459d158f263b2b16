"""The channel to an agent against one that sends what no agent of tfcc's sends (a hostile or broken host)."""

from __future__ import annotations

import pytest

from console.remote.channel import MAX_MESSAGE, AgentClient, ChannelClosed
from console.remote.local import local_agent

HOSTILE_AGENT = """\
import json, sys
out = sys.stdout.buffer
first = json.loads(sys.stdin.readline())
out.write(b"[" * 200000 + b"]" * 200000 + b"\\n")    # nested past any parser
out.write(b"[1, 2]\\n" + b'"a string"\\n' + b"null\\n")   # JSON, but no message
out.write(b"x" * (4 << 20) + b"\\n")                  # a long line that is no JSON
out.write(json.dumps({"id": first["id"], "ok": True, "pid": 1}).encode() + b"\\n")
out.flush()
second = json.loads(sys.stdin.readline())
out.write(b"y" * (MAX + 4096))                        # a message over the cap, never ended
out.flush()
sys.stdin.readline()                                  # until the console closes the channel
""".replace("MAX", str(MAX_MESSAGE))


@pytest.fixture
def hostile_agent(tmp_path):
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "__main__.py").write_text(HOSTILE_AGENT)
    client = AgentClient(local_agent(agent_root=tmp_path), timeout=30)
    yield client
    client.close()


def test_lines_that_are_no_message_are_skipped_and_one_over_the_cap_closes_the_channel(hostile_agent):
    """A line nested past any parser, JSON that is no object and a long line that is no JSON are each skipped
    (the reader goes on: the answer after them comes); a message over ``MAX_MESSAGE`` closes the channel (what
    waits on it says so) before more than that is held."""
    assert hostile_agent.call("hello")["pid"] == 1
    with pytest.raises(ChannelClosed):
        hostile_agent.call("status")
    assert hostile_agent.closed.wait(10)
