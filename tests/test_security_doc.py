"""docs/security.md: the figures it states are the code's (each bound's behaviour has a test of its own, named on
the page)."""

from __future__ import annotations


def test_the_bounds_docs_security_states_are_the_codes():
    """docs/security.md's table of what a host can make the console hold: each figure it states is the constant the
    code bounds it with (the behaviour at each bound has its own test, some with smaller figures set for speed)."""
    from agent.protocol import MAX_LINE, MESSAGE_LINES
    from console.errors import LOG_BYTES
    from console.gui.events_view import MAX_SHOWN, PER_TICK
    from console.remote.channel import MAX_MESSAGE
    from console.run.runner import Backlog
    from console.store.metrics import MAX_GPUS, MetricsStore
    from console.tensorboard import MAX_COPY_BYTES

    assert (MAX_LINE, MAX_MESSAGE, MESSAGE_LINES) == (1 << 20, 8 << 20, 256 << 10)
    assert (MetricsStore.MAX_COLUMNS, MetricsStore.MAX_EVENTS, MetricsStore.EVENT_BYTES) == (256, 20_000, 8 << 20)
    assert (Backlog.HIGH, Backlog.LOW, MAX_GPUS) == (8 << 20, 2 << 20, 16)
    assert (MAX_SHOWN, PER_TICK, MAX_COPY_BYTES, LOG_BYTES) == (2000, 200, 2 << 30, 5 << 20)


def test_every_test_the_page_names_exists():
    """Each ``tests/...`` file and ``file::test`` the page names is there (a renamed test cannot leave a promise
    unbacked unseen); a bare ``test_...`` name is one of the tests of the file named before it on its line."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "security.md").read_text()
    named = 0
    for line in page.splitlines():
        current = None
        for word in re.findall(r"`([^`]+)`", line):
            path, _, test = word.partition("::")
            if re.fullmatch(r"(tests/)?([\w.]+/)*test_\w+\.py", path):
                found = next((p for p in [root / path, *root.glob(f"tests/**/{path}")] if p.is_file()), None)
                assert found is not None, f"docs/security.md names {path}, which is not there"
                current = found.read_text()
            elif path.startswith("test_") and current is not None:
                test = path
            if test:
                assert current is not None and re.search(rf"^def {test}\(", current, re.M), f"no {word}"
                named += 1
    assert named >= 20
