"""The shared vocabulary: op table, refusal codes, task names and addresses."""

from __future__ import annotations

import io
import json

import pytest

from agent import protocol, server
from agent.protocol import format_address, parse_address, parse_task_name, task_name


def test_the_op_table_is_the_protocols_ops_and_every_handler_is_in_it():
    assert list(server.HANDLERS) == list(protocol.OPS)
    handlers = {name[len("op_"):] for name in vars(server.Server) if name.startswith("op_")}
    assert handlers == set(protocol.OPS)


def _answers(tmp_path, monkeypatch, *requests) -> dict:
    """Each request's answer from an agent served in this process, by request id."""
    monkeypatch.setenv("TFCC_HOME", str(tmp_path))
    lines = [r if isinstance(r, str) else json.dumps(r) for r in requests]
    out = io.BytesIO()
    server.Server(io.BytesIO("\n".join(lines).encode() + b"\n"), out).serve()
    return {a["id"]: a for a in map(json.loads, out.getvalue().splitlines())}


def test_every_refusal_carries_a_code_next_to_its_text(tmp_path, monkeypatch):
    answers = _answers(tmp_path, monkeypatch, "[1]",
                       {"id": 1, "op": "launch"},
                       {"id": 2, "op": "hello", "protocol": 99},
                       {"id": 3, "op": "status", "run_id": "../etc", "task": "worker-0"},
                       {"id": 4, "op": "start", "run_id": "r", "task": "worker-0"},
                       {"id": 5, "op": "status", "run_id": "r", "task": "worker-0"},
                       {"id": 6, "op": "ports", "count": 0},
                       {"id": 7, "op": "ports", "count": "many"})
    codes = {rid: (a["ok"], a.get("code")) for rid, a in answers.items()}
    assert codes == {None: (False, protocol.BAD_REQUEST), 1: (False, protocol.UNKNOWN_OP),
                     2: (False, protocol.PROTOCOL_MISMATCH), 3: (False, protocol.BAD_NAME),
                     4: (False, protocol.BAD_ARGUMENT), 5: (False, protocol.NO_SUCH_TASK),
                     6: (False, protocol.BAD_ARGUMENT), 7: (False, protocol.AGENT_BUG)}
    assert answers[1]["error"] == f"unknown op 'launch'; ops are {', '.join(protocol.OPS)}"
    assert all(a["code"] in protocol.ERROR_CODES and a["error"] for a in answers.values())


def test_task_names():
    assert task_name("worker", 0) == "worker-0" and parse_task_name("chief-0") == ("chief", 0)
    assert parse_task_name(task_name("my-role", 12)) == ("my-role", 12)
    for bad in ("worker", "worker-", "-1", "worker-x", "worker-1.5"):
        with pytest.raises(ValueError, match="is not role-index"):
            parse_task_name(bad)


def test_addresses_round_trip_with_ipv6_in_brackets():
    assert format_address("10.0.0.1", 2222) == "10.0.0.1:2222" and format_address("::1", 5) == "[::1]:5"
    assert format_address("[::1]", 5) == "[::1]:5"
    assert parse_address("h:1") == ("h", 1) and parse_address("[::1]:1") == ("::1", 1)
    assert parse_address(format_address("fe80::1%eth0", 80)) == ("fe80::1%eth0", 80)
    for bad, why in (("host", "no host:port"), (":80", "no host:port"), ("h:0", "has port '0'"),
                     ("h:http", "has port 'http'"), ("h:65536", "has port"), ("::1:80", "goes in brackets")):
        with pytest.raises(ValueError, match=why):
            parse_address(bad)
