"""Waiting on a condition with a deadline (never a sleep that hopes)."""

from __future__ import annotations

import threading
import time


def wait_until(predicate, timeout: float, every: float = 0.02) -> bool:
    """Whether ``predicate()`` came true within ``timeout`` seconds (checked every ``every`` s)."""
    deadline = time.monotonic() + timeout
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
