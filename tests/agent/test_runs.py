"""Reading a task's files from byte offsets (agent/runs.py's read_new): whole lines, and a line over the cap."""

from __future__ import annotations

from agent import runs
from agent.protocol import MAX_LINE


def test_a_long_line_written_slowly_is_read_through_once_and_skipped_with_a_note(tmp_path, monkeypatch):
    """A line over the cap grows a megabyte at a time: each look reads only what came since the last (the
    scan remembers how far it got), and once it ends it is one note; the line after it comes whole."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"type": "step", "step": 0}\n')
    lines, offset, skipped = runs.read_new(path, 0)
    assert lines == [b'{"type": "step", "step": 0}'] and skipped == 0
    read = []
    real_open = open

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def seek(self, where):
            return self.f.seek(where)

        def read(self, size=-1):
            data = self.f.read(size)
            read.append(len(data))
            return data

    monkeypatch.setattr("builtins.open", lambda p, mode="r", *a, **k: Counting(real_open(p, mode, *a, **k))
                        if str(p) == str(path) else real_open(p, mode, *a, **k))
    scan: dict = {}
    for _ in range(4):  # 4 MiB of one line, no end yet
        with real_open(path, "ab") as f:
            f.write(b"x" * MAX_LINE)
        assert runs.read_new(path, offset, scan=scan) == ([], offset, 0)
    assert sum(read) == 4 * MAX_LINE, "every byte read once"
    with real_open(path, "ab") as f:
        f.write(b'\n{"type": "step", "step": 1}\n')
    lines, end, skipped = runs.read_new(path, offset, scan=scan)
    assert lines == [runs.skipped_line(4 * MAX_LINE)] and scan == {}
    assert end == offset + 4 * MAX_LINE + 1 and skipped == 4 * MAX_LINE + 1 - len(lines[0]) - 1
    assert runs.read_new(path, end)[0] == [b'{"type": "step", "step": 1}']


def test_lines_end_at_line_feeds_only_a_progress_bars_returns_stay_in_its_line(tmp_path):
    """Keras's progress bar redraws with ``\\b`` and ``\\r``: the line is the epoch's, as a terminal shows it."""
    path = tmp_path / "stdout.log"
    path.write_bytes(b"Epoch 1/2\n\x08\x08\r 1/4 [=>..]\x08\x08\r 4/4 [====]\nlast, not ended")
    lines, offset, skipped = runs.read_new(path, 0)
    assert lines == [b"Epoch 1/2", b"\x08\x08\r 1/4 [=>..]\x08\x08\r 4/4 [====]"] and skipped == 0
    assert offset == path.read_bytes().index(b"last")


STUBBORN = """import signal, time, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a task that trains on through SIGTERM
print("up", flush=True)
time.sleep(120)
"""


def test_a_stop_that_kills_the_supervisor_takes_its_firewall_rules_away(tmp_path, monkeypatch):
    """docs/security.md: a task's supervisor takes its rules away when the task ends; a stop that had to kill the
    supervisor with the task (SIGKILL after the grace) takes them away itself, and forgets them."""
    import sys

    from agent import firewall
    from tests.helpers.waiting import wait_until

    log = tmp_path / "nft.log"
    nft = tmp_path / "nft"
    nft.write_text(f"#!/bin/sh\ncat >> {log}\necho ---- >> {log}\n")
    nft.chmod(0o755)
    monkeypatch.setattr(firewall, "how", lambda: ([str(nft)], "root"))
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "home"))
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    runs.start({"run_id": "walled", "task": "worker-0", "argv": [sys.executable, str(script)],
                "firewall": {"port": 23456, "peers": ["127.0.0.1"], "endpoints": ["127.0.0.1:23456"]}})
    table = firewall.table_name("walled", "worker-0")
    note = firewall.registry(tmp_path / "home") / f"{table}.json"
    assert note.exists() and f"table inet {table} {{" in log.read_text()
    out = tmp_path / "home" / "runs" / "walled" / "worker-0" / "stdout.log"
    assert wait_until(lambda: out.exists() and "up" in out.read_text(), 60)  # it ignores SIGTERM from here
    stopped = runs.stop("walled", "worker-0", grace=0.5)
    assert stopped["killed"] is True
    assert log.read_text().rstrip().endswith(f"table inet {table}\ndelete table inet {table}\n----".rstrip())
    assert not note.exists()


def test_a_firewall_request_whose_endpoints_are_no_list_is_refused_as_such(tmp_path, monkeypatch):
    """A start's firewall request is checked before anything is set: endpoints that are no list are a bad argument
    (one line), not the agent's own error."""
    import sys

    import pytest

    from agent import protocol

    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "home"))
    with pytest.raises(runs.AgentError) as refused:
        runs.start({"run_id": "walled", "task": "worker-0", "argv": [sys.executable, "-c", "pass"],
                    "firewall": {"port": 23456, "peers": ["127.0.0.1"], "endpoints": 7}})
    assert refused.value.code == protocol.BAD_ARGUMENT and "\"endpoints\": [host:port]" in str(refused.value)
