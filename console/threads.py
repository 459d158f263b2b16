"""The window's thread goes first: the console's reading threads give way while it handles its events.

A session decoding a flood of records, or an agent channel reading one, compete with the window's thread for
the interpreter: PySide6 gives the interpreter up on each call into Qt, and a frame makes hundreds, each waiting
for a busy thread to hand it back (bench/hostile_host.py --why: the window's thread on a core for 30 of a 130 ms
stall). The window says when its thread is at work (``WINDOW.busy``: its timers' and its plots' paints' first
words) and when its loop is about to wait again (``WINDOW.idle``, from Qt's event dispatcher); the reading threads call ``give_way`` between two pieces of their work and
wait, at most ``GIVE_WAY_SECONDS``, while it is at work. Headless (no window) nobody is ever busy: nothing waits.
"""

from __future__ import annotations

import threading
import time

GIVE_WAY_SECONDS = 0.02  # a reading thread waits for the window this long at most, then does one piece
BUSY_HOLD_SECONDS = 0.05  # a busy mark lasts this long at most without the loop's word (a loop that never waits)


class Window:
    """Whether a window's thread is at work now."""

    def __init__(self, hold: float = BUSY_HOLD_SECONDS):
        self._idle = threading.Event()
        self._idle.set()
        self._until = 0.0
        self.hold = hold

    def busy(self) -> None:
        """The window's thread began a piece of its work (till the loop waits again, or ``hold`` seconds)."""
        self._until = time.monotonic() + self.hold
        self._idle.clear()

    def idle(self) -> None:
        """The window's thread handled what it had and is about to wait."""
        self._idle.set()

    def is_busy(self) -> bool:
        return not self._idle.is_set() and time.monotonic() < self._until

    def give_way(self, most: float = GIVE_WAY_SECONDS) -> bool:
        """Wait while the window's thread is busy, ``most`` seconds at most; whether it had to wait."""
        left = min(most, self._until - time.monotonic())
        if self._idle.is_set() or left <= 0:
            return False
        self._idle.wait(left)
        return True


WINDOW = Window()


def give_way() -> bool:
    """A reading thread, between two pieces of its work: the window's thread first (see the module)."""
    return WINDOW.give_way()
