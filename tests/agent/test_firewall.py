"""The agent's firewall rules (agent/firewall.py): what it asks nft for, and what it takes away when.

nft itself runs on the SSH test hosts (tests/console/remote/test_ssh.py): here a stand-in records the scripts.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from agent import firewall


@pytest.fixture
def fake_nft(tmp_path, monkeypatch):
    """A stand-in for nft that keeps each script it is given (in ``scripts``), run "as root"."""
    log = tmp_path / "nft.log"
    script = tmp_path / "nft"
    script.write_text(f"#!/bin/sh\ncat >> {log}\necho ---- >> {log}\n")
    script.chmod(0o755)
    monkeypatch.setattr(firewall, "how", lambda: ([str(script)], "root"))

    def scripts() -> list[str]:
        return [s.strip() for s in log.read_text().split("----") if s.strip()] if log.exists() else []
    return scripts


def test_a_tasks_table_admits_its_peers_and_loopback_and_drops_the_rest():
    rules = firewall.ruleset("tfcc_0123456789abcdef", 23456, ["10.0.0.2", "10.0.0.3", "fd00::2"])
    assert rules.splitlines() == [
        "table inet tfcc_0123456789abcdef", "delete table inet tfcc_0123456789abcdef",
        "table inet tfcc_0123456789abcdef {", "  chain input {",
        "    type filter hook input priority -5; policy accept;",
        '    iifname "lo" tcp dport 23456 accept',
        "    ip saddr { 10.0.0.2, 10.0.0.3 } tcp dport 23456 accept",
        "    ip6 saddr { fd00::2 } tcp dport 23456 accept",
        "    tcp dport 23456 drop", "  }", "}"]
    # Whatever a run and a task are called, the table's name is one nft takes, and it is theirs alone.
    names = {firewall.table_name(r, t) for r in ("r1", "a.b-c_d", "x" * 64) for t in ("worker-0", "chief-0")}
    assert len(names) == 6 and all(re.fullmatch(r"tfcc_[0-9a-f]{16}", n) for n in names)


def test_the_training_users_sockets_alone_reach_the_runs_tasks_from_this_host():
    """The peers' addresses let in every user of a peer host, and loopback every user of this one: the output chain
    refuses a connection to the task's port on a local address, and to any task of the run, unless its socket is
    the training user's; the forward chain drops what this host routes to them (a container's)."""
    rules = firewall.ruleset("tfcc_0123456789abcdef", 23456, ["10.0.0.2"],
                             [("10.0.0.1", 23456), ("10.0.0.2", 23457), ("fd00::2", 23458)], uid=1001)
    assert rules.splitlines()[7:] == [
        "    tcp dport 23456 drop", "  }", "  chain output {",
        "    type filter hook output priority -5; policy accept;",
        "    fib daddr type local tcp dport 23456 meta skuid != 1001 reject with tcp reset",
        "    ip daddr . tcp dport { 10.0.0.1 . 23456, 10.0.0.2 . 23457 } meta skuid != 1001 reject with tcp reset",
        "    ip6 daddr . tcp dport { fd00::2 . 23458 } meta skuid != 1001 reject with tcp reset", "  }",
        "  chain forward {", "    type filter hook forward priority -5; policy accept;",
        "    ip daddr . tcp dport { 10.0.0.1 . 23456, 10.0.0.2 . 23457 } drop",
        "    ip6 daddr . tcp dport { fd00::2 . 23458 } drop", "  }", "}"]
    assert firewall.resolve_endpoints(["127.0.0.1:2222", "[::1]:2223"]) == [("127.0.0.1", 2222), ("::1", 2223)]
    for bad in ("no-port", "h:0", "h:x", 7):
        with pytest.raises(firewall.FirewallError):
            firewall.resolve_endpoints([bad])


def test_peers_are_resolved_here_and_one_that_is_not_is_a_clear_error():
    assert firewall.resolve(["127.0.0.1", "localhost", "[::1]"]) == ["127.0.0.1", "::1"]
    with pytest.raises(firewall.FirewallError, match="'no-such-host.invalid' does not resolve on this host"):
        firewall.resolve(["no-such-host.invalid"])
    with pytest.raises(firewall.FirewallError, match="is no host address"):
        firewall.resolve(["x" * 300])


def test_rules_are_noted_set_and_taken_away_and_a_port_that_is_none_is_refused(tmp_path, fake_nft):
    entry = firewall.allow_only(tmp_path, "r1", "worker-0", 23456, ["127.0.0.1"])
    note = tmp_path / "firewall" / f"{entry['table']}.json"
    assert json.loads(note.read_text())["port"] == 23456 and "tcp dport 23456 drop" in fake_nft()[0]
    assert firewall.remove(tmp_path, entry["table"]) and not note.exists()
    assert fake_nft()[1].endswith(f"delete table inet {entry['table']}")
    for port in (0, 70000, "23456", True, None):
        with pytest.raises(firewall.FirewallError, match="is no TCP port"):
            firewall.allow_only(tmp_path, "r1", "worker-0", port, ["127.0.0.1"])


def test_a_host_that_cannot_set_rules_says_why_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(firewall, "how", lambda: (None, "nft (nftables) is not installed"))
    with pytest.raises(firewall.FirewallError) as err:
        firewall.allow_only(tmp_path, "r1", "worker-0", 23456, ["127.0.0.1"])
    assert str(err.value).startswith("firewall = true, but this host cannot set nftables rules (nft (nftables) is "
                                     "not installed); log in as root there")
    assert not (tmp_path / "firewall").exists()


def test_the_sweep_takes_away_what_no_task_serves_and_leaves_a_starting_one(tmp_path, fake_nft):
    tables = {t: firewall.allow_only(tmp_path, "r1", t, 23456 + i, ["127.0.0.1"])["table"]
              for i, t in enumerate(("gone", "serving", "starting", "old-start"))}
    old = tmp_path / "firewall" / f"{tables['old-start']}.json"
    os.utime(old, (0, 0))  # a start that died before its supervisor, long ago
    (tmp_path / "firewall" / "tfcc_notjson.json").write_text("{half")  # being written: left alone
    gone = firewall.sweep(tmp_path, running=lambda r, t: t == "serving", started=lambda r, t: t == "gone")
    assert sorted(gone) == sorted([tables["gone"], tables["old-start"]])
    left = sorted(p.stem for p in (tmp_path / "firewall").glob("*.json"))
    assert left == sorted([tables["serving"], tables["starting"], "tfcc_notjson"])
