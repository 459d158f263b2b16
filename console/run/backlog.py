"""What the follows delivered that a run's consumer has not handled yet, counted in bytes (Qt-free)."""

from __future__ import annotations

import threading

from agent.protocol import SYSTEM_MESSAGE


def message_size(message: dict) -> int:
    """About the bytes a follow's message holds (its lines or its text): what a backlog counts."""
    if message.get("type") == SYSTEM_MESSAGE:  # a host's sample (queued as its "record"): 200 bytes a task or GPU
        sample = message.get("record") if isinstance(message.get("record"), dict) else {}
        return 100 + 200 * sum(len(part) for part in (sample.get("tasks"), sample.get("gpus"))
                               if isinstance(part, (dict, list)))
    lines = message.get("lines")
    if isinstance(lines, list):
        return 100 + sum(len(line) for line in lines if isinstance(line, str))
    text_ = message.get("text")
    return 100 + (len(text_) if isinstance(text_, str) else 0)


class Backlog:
    """What the follows delivered that the run's consumer has not handled yet, in bytes. Over ``HIGH`` a
    follow that delivers more is held at its agent (``Follow.pause``); at ``LOW`` they all go on. A host that
    writes faster than the console reads costs the console this much, not the whole file: nothing is lost,
    each follow sends on from where it was held."""

    HIGH = 8 << 20
    LOW = 2 << 20

    def __init__(self):
        self._lock = threading.Lock()
        self.size = 0
        self.peak = 0
        self.holds = 0  # how many times a follow was held (the bench reads it)
        self.dropped_samples = 0  # system samples not queued while past HIGH
        self._held: dict[int, object] = {}

    def delivered(self, follow, message: dict) -> None:
        """A follow's ``message`` was queued (on the channel's reader thread: this waits for nothing)."""
        size = message_size(message)
        with self._lock:
            self.size += size
            self.peak = max(self.peak, self.size)
            hold = follow is not None and self.size > self.HIGH and id(follow) not in self._held
            if hold:
                self._held[id(follow)] = follow
                self.holds += 1
        if hold:
            follow.pause(True)

    def take_sample(self, message: dict) -> bool:
        """A host's system sample, counted as a follow's message is (as it will be queued: ``{"type": "system",
        "record": ...}``, which ``handled`` takes off once done); False (not queued) while the console is past
        ``HIGH``: a newer sample comes a second later."""
        size = message_size({"type": SYSTEM_MESSAGE, "record": message})
        with self._lock:
            if self.size > self.HIGH:
                self.dropped_samples += 1
                return False
            self.size += size
            self.peak = max(self.peak, self.size)
        return True

    def handled(self, message: dict) -> None:
        """A queued ``message`` was handled (on the consumer's thread)."""
        size = message_size(message)
        with self._lock:
            self.size -= size
            going = list(self._held.values()) if self.size <= self.LOW else []
            if going:
                self._held.clear()
        for follow in going:
            follow.pause(False)
