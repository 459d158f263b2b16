"""Waiting on a condition with a deadline (never a sleep that hopes), and the time bounds of the tests."""

from __future__ import annotations

import os
import threading
import time

# A test's time bounds hold on a loaded 2-core machine (the suite on both cores, a 2-worker training beside it);
# a slower machine raises them all at once: TFCC_TEST_TIME_SCALE=2 doubles each.
TIME_SCALE = float(os.environ.get("TFCC_TEST_TIME_SCALE") or 1)


def bound(seconds: float) -> float:
    """The time bound for what a test allows ``seconds`` on this machine (``TIME_SCALE`` times it)."""
    return seconds * TIME_SCALE


def wait_until(predicate, timeout: float, every: float = 0.02) -> bool:
    """Whether ``predicate()`` came true within ``bound(timeout)`` seconds (checked every ``every`` s)."""
    deadline = time.monotonic() + bound(timeout)
    tick = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        tick.wait(every)
    return True


def wait_for(predicate, timeout: float, why, every: float = 0.25) -> None:
    """``wait_until``, or the test fails with ``why()`` (what was seen instead)."""
    import pytest

    if not wait_until(predicate, timeout, every):
        pytest.fail(why())
