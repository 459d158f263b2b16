"""Waiting on a condition with a deadline (never a sleep that hopes)."""

from __future__ import annotations

import threading
import time


def wait_until(predicate, timeout: float) -> bool:
    """Whether ``predicate()`` came true within ``timeout`` seconds (checked every 20 ms)."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        tick.wait(0.02)
    return True
