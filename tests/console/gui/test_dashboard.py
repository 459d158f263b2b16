"""The dashboard under load, and its parts: curves per worker, progress, stragglers, export."""

from __future__ import annotations

import gc
import random
import time

import numpy as np
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from console.gui.colors import worker_color
from console.gui.dashboard import MAX_POINTS, Dashboard
from console.metrics_store import MetricsStore
from console.session import SUSPENDED
from tests.helpers.synthetic import feed, step_record
from tests.console.gui.conftest import save_shot


class StallProbe:
    """A 5 ms timer: the longest gap between its ticks is the event loop's longest stall."""

    def __init__(self, interval_ms: int = 5):
        self.interval = interval_ms / 1000
        self.longest = 0.0
        self._last = None
        self.timer = QTimer()
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._on_timer_timeout)

    def start(self):
        self._last = time.perf_counter()
        self.timer.start()

    def _on_timer_timeout(self):
        now = time.perf_counter()
        self.longest = max(self.longest, now - self._last - self.interval)
        self._last = now


def test_sixteen_workers_streaming_keep_the_event_loop_responsive(qtbot, shots):
    store = MetricsStore()
    board = Dashboard(store)
    qtbot.addWidget(board)
    board.resize(1100, 800)
    board.show()
    board.set_store(store, [f"worker-{i}" for i in range(16)])  # at Start: rows and curves made here
    feed(store, workers=16, steps=1, total_steps=40).join()  # the first step: first paint, fonts, axes
    qtbot.waitUntil(lambda: board._seen_version == board._slow_version == store.version, timeout=5_000)
    QApplication.processEvents()
    gc.freeze()  # as the window does after start-up: a full collection of this process takes ~90 ms here
    try:
        probe = StallProbe()
        probe.start()
        feeder = feed(store, workers=16, steps=39, rate=10.0, first_step=2, total_steps=40)  # 10 steps/s, 4 s
        qtbot.waitUntil(lambda: not feeder.is_alive(), timeout=30_000)
        qtbot.waitUntil(lambda: board._seen_version == board._slow_version == store.version, timeout=5_000)
        probe.timer.stop()
    finally:
        gc.unfreeze()
    assert probe.longest < 0.100, f"the event loop stalled for {probe.longest * 1000:.0f} ms"
    assert board.redraws >= 20, "the curves were redrawn as the data came"
    assert len(board.curves) == 16 * 3
    x, _ = board.curves[("worker-3", "loss")].getData()
    assert list(x[:3]) == [1.0, 2.0, 3.0] and len(x) == 40
    assert board.curves[("worker-5", "step_time")].opts["pen"].color() == worker_color(5)
    assert "worker-1" in [t for t, label in board.straggler_labels.items() if label.text()]
    assert [t for t, label in board.straggler_labels.items() if label.text()] == ["worker-1"]
    assert board.progress_bars["worker-0"].text().startswith("epoch 1/1  step 40/1000")
    save_shot(board, shots, "dashboard-16-workers")


def test_long_series_are_reduced_for_drawing_but_kept_whole(qtbot, tmp_path):
    store = MetricsStore()
    board = Dashboard(store)
    qtbot.addWidget(board)
    board.show()
    board.set_store(store, ["worker-0", "worker-1"])
    feeder = feed(store, workers=2, steps=20_000, rate=1000.0, burst=2_000)
    qtbot.waitUntil(lambda: not feeder.is_alive(), timeout=30_000)
    qtbot.waitUntil(lambda: board._seen_version == board._slow_version == store.version, timeout=5_000)
    x, y = board.curves[("worker-0", "loss")].getData()
    full_x, full_y = store.series("worker-0", "loss")
    assert len(full_x) == 20_000 and len(x) <= MAX_POINTS
    assert x[0] == 1.0 and x[-1] > 19_950, "the drawn curve spans the whole run"
    assert y.max() == full_y.max() and y.min() == full_y.min(), "the reduction keeps every peak"
    rows = board.export_csv(tmp_path / "m.csv")
    assert rows == 40_000
    assert (tmp_path / "m.csv").read_text().splitlines()[1].startswith("worker-0,1,")


def test_log_tails_per_worker(qtbot):
    board = Dashboard(MetricsStore())
    qtbot.addWidget(board)
    board.append_log("worker-1", "stdout", "epoch 1\nepoch 2\n")
    board.append_log("worker-1", "stderr", "W0000 warning\n")
    board.append_log("worker-0", "stdout", "hello\n")
    assert [board.logs.tabText(i) for i in range(board.logs.count())] == ["worker-1", "worker-0"]
    assert board.log_views["worker-1"].toPlainText() == "epoch 1\nepoch 2\n[stderr] W0000 warning"


def test_the_first_frame_draws_what_the_store_has_before_any_show(qtbot):
    """A dashboard given a store with data draws it on its first tick, shown or not yet (rows, curves)."""
    store = MetricsStore()
    feed(store, workers=2, steps=5, rate=1000.0, burst=5).join()
    board = Dashboard(store)
    qtbot.addWidget(board)
    board.timer.timeout.emit()
    assert board.redraws == 1 and board._seen_version == store.version
    assert sorted(board.progress_bars) == ["worker-0", "worker-1"] and len(board.curves) == 2 * 3
    board.timer.timeout.emit()  # nothing new: no frame
    assert board.redraws == 1


def test_a_diverged_loss_draws_as_a_gap(qtbot):
    store = MetricsStore()
    steps = [step_record(0, i + 1, 100, random.Random(i)) for i in range(6)]
    steps[3]["loss"] = None  # a diverged step, as the metrics file writes it
    store.ingest("worker-0", steps)
    board = Dashboard(store)
    qtbot.addWidget(board)
    board.show()
    qtbot.waitExposed(board)
    board.timer.timeout.emit()
    curve = board.curves[("worker-0", "loss")]
    x, y = curve.getData()
    assert len(x) == 6 and np.isnan(y[3]) and np.isfinite(np.delete(y, 3)).all()
    assert curve.opts["connect"] == "finite"  # the line breaks at the gap instead of vanishing


def test_a_restart_is_a_marker_on_every_plot_and_each_task_shows_its_state(qtbot, shots):
    """Attempt 2 resumed from step 5: a dashed marker at step 5 on each plot (labelled once), the redone
    steps gone from the curves; a stalled task and a restarting one say so on their rows."""
    store = MetricsStore()
    rng = random.Random(0)
    for task in ("worker-0", "worker-1"):
        first = [dict(step_record(0, g, 100, rng), attempt=1) for g in range(1, 9)]
        store.ingest(task, first)
    board = Dashboard(store)
    qtbot.addWidget(board)
    board.resize(900, 700)
    board.show()
    qtbot.waitExposed(board)
    board.set_store(store, ["worker-0", "worker-1"])
    store.set_state("worker-1", "stalled", f"{SUSPENDED}; its last step was epoch 1 step 8")  # as the session says
    store.set_state("worker-0", "restarting", "restart 1: from the newest common backup")
    board.timer.timeout.emit()
    board.slow_timer.timeout.emit()
    assert board.restart_lines == []
    assert board.straggler_labels["worker-1"].text() == "STALLED: is stopped and answers no peer"
    assert "its last step was epoch 1 step 8" in board.straggler_labels["worker-1"].toolTip()
    assert board.straggler_labels["worker-0"].text() == "restarting: restart 1: from the newest common backup"
    for task in ("worker-0", "worker-1"):
        store.set_state(task, "running")
        store.ingest(task, [{"type": "event", "event": "resumed", "global_step": 5, "attempt": 2}]
                     + [dict(step_record(0, g, 100, rng), attempt=2) for g in range(6, 10)])
    board.timer.timeout.emit()
    board.slow_timer.timeout.emit()
    assert len(board.restart_lines) == 1 and len(board.restart_lines[0]) == len(board.plots)
    assert {line.value() for _, line in board.restart_lines[0]} == {5.0}
    assert [plot for plot, _ in board.restart_lines[0]] == list(board.plots.values())
    x, _ = board.curves[("worker-0", "loss")].getData()
    assert list(x) == list(range(1, 10))  # 6-8 of attempt 1 were redone: drawn once, attempt 2's
    assert board.straggler_labels["worker-1"].text() == ""
    save_shot(board, shots, "dashboard-restart-marker")
