"""The window's thread goes first: the console's reading threads give way while it handles its events."""

from __future__ import annotations

import threading
import time

from console.store.metrics import MetricsStore
from console.threads import BUSY_HOLD_SECONDS, GIVE_WAY_SECONDS, Window, WINDOW
from tests.helpers.waiting import bound, wait_until


def test_a_reading_thread_waits_while_the_window_is_busy_and_not_when_it_is_idle():
    window = Window(hold=60)  # the mark lasts until idle() here: a preempted test thread cannot outlast it
    assert window.give_way() is False, "idle: no wait"
    window.busy()
    waited, started, done, idle_said = [], threading.Event(), threading.Event(), threading.Event()

    def reader():
        started.set()
        t = time.perf_counter()
        window.give_way(most=30.0)
        waited.append((time.perf_counter() - t, idle_said.is_set()))
        done.set()

    thread = threading.Thread(target=reader)
    thread.start()
    assert started.wait(bound(5))
    assert not done.wait(0.02), "it waits while the window is busy"
    idle_said.set()
    window.idle()
    assert done.wait(bound(5))
    thread.join(bound(5))
    took, after_idle = waited[0]
    assert took >= 0.015 and after_idle, "it waited until the window said it was idle"
    window.busy()
    t0 = time.perf_counter()
    assert window.give_way(most=0.02) is True
    assert 0.015 <= time.perf_counter() - t0 < bound(1.0), "at most `most`: a window busy for long never stops a reader"
    lapsing = Window(hold=0.0)  # a loop that never says it waits: the mark lapses after its hold
    lapsing.busy()
    assert not lapsing.is_busy() and lapsing.give_way() is False
    held = Window()  # by default the mark lapses after BUSY_HOLD_SECONDS
    held.busy()
    assert wait_until(lambda: not held.is_busy(), BUSY_HOLD_SECONDS + 5) and held.give_way() is False


def test_the_store_adding_a_flood_gives_way_to_a_busy_window(monkeypatch):
    flood = [{"type": "event", "event": "evaluated", "epoch": i, "metrics": {"n": i}} for i in range(2_600)]
    waits = []
    real = WINDOW.give_way

    def counted(most=GIVE_WAY_SECONDS):
        WINDOW.busy()  # the window is at work whenever the store asks
        waits.append(real(most))
        return waits[-1]

    monkeypatch.setattr(WINDOW, "hold", 60)  # busy until its `most` each time, however late the store asks
    WINDOW.give_way = counted
    try:
        t0 = time.perf_counter()
        MetricsStore().ingest("worker-0", flood)
        busy = time.perf_counter() - t0
    finally:
        del WINDOW.give_way
        WINDOW.idle()
    assert waits == [True] * 10, "once every 256 events"
    assert busy >= 10 * GIVE_WAY_SECONDS * 0.9, busy
