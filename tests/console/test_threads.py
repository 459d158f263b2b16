"""The window's thread goes first: the console's reading threads give way while it handles its events."""

from __future__ import annotations

import threading
import time

from console.store.metrics import MetricsStore
from console.threads import BUSY_HOLD_SECONDS, GIVE_WAY_SECONDS, Window, WINDOW


def test_a_reading_thread_waits_while_the_window_is_busy_and_not_when_it_is_idle():
    window = Window()
    t0 = time.perf_counter()
    assert window.give_way() is False and time.perf_counter() - t0 < 0.005, "idle: no wait"
    window.busy()
    waited, started, done = [], threading.Event(), threading.Event()

    def reader():
        started.set()
        t = time.perf_counter()
        window.give_way(most=5.0)
        waited.append(time.perf_counter() - t)
        done.set()

    thread = threading.Thread(target=reader)
    thread.start()
    assert started.wait(5)
    assert not done.wait(0.02), "it waits while the window is busy"
    window.idle()
    assert done.wait(5)
    thread.join(5)
    assert 0.015 <= waited[0] < BUSY_HOLD_SECONDS
    window.busy()
    t0 = time.perf_counter()
    assert window.give_way(most=0.02) is True
    assert 0.015 <= time.perf_counter() - t0 < 1.0, "at most `most`: a window busy for long never stops a reader"
    lapsing = Window(hold=0.0)  # a loop that never says it waits: the mark lapses after its hold
    lapsing.busy()
    assert not lapsing.is_busy() and lapsing.give_way() is False


def test_the_store_adding_a_flood_gives_way_to_a_busy_window():
    flood = [{"type": "event", "event": "evaluated", "epoch": i, "metrics": {"n": i}} for i in range(2_600)]
    t0 = time.perf_counter()
    MetricsStore().ingest("worker-0", flood)
    idle = time.perf_counter() - t0
    waits = []
    real = WINDOW.give_way

    def counted(most=GIVE_WAY_SECONDS):
        WINDOW.busy()  # the window is at work whenever the store asks
        waits.append(real(most))
        return waits[-1]

    WINDOW.give_way = counted
    try:
        t0 = time.perf_counter()
        MetricsStore().ingest("worker-0", flood)
        busy = time.perf_counter() - t0
    finally:
        del WINDOW.give_way
        WINDOW.idle()
    assert waits == [True] * 10, "once every 256 events"
    assert busy >= 10 * GIVE_WAY_SECONDS * 0.9 > idle, (busy, idle)
