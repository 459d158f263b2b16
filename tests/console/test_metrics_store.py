"""The metrics store: bounded series, reduction for drawing, progress, stragglers, CSV."""

from __future__ import annotations

import csv
import random

import numpy as np

from console.metrics_store import MetricsStore, Series
from console.text import event_text
from tests.helpers.synthetic import started_record, step_record


def test_series_keeps_the_newest_points_one_by_one_and_in_bulk():
    s = Series(capacity=5)
    for i in range(8):
        s.append(float(i), float(10 * i))
    assert list(s.arrays()[0]) == [3.0, 4.0, 5.0, 6.0, 7.0]
    s.extend(np.array([8.0, 9.0]), np.array([80.0, 90.0]))
    assert list(s.arrays()[0]) == [5.0, 6.0, 7.0, 8.0, 9.0]
    s.extend(np.arange(10.0, 22.0), np.arange(10.0, 22.0))
    assert list(s.arrays()[0]) == [17.0, 18.0, 19.0, 20.0, 21.0] and s.appended == 22


def test_reduction_keeps_every_peak_and_stays_right_as_points_arrive():
    rng = np.random.default_rng(3)
    s = Series(capacity=100_000)
    ys = rng.normal(size=30_000)
    ys[12_345] = 50.0   # a spike
    ys[20_000] = np.nan  # a diverged step
    for start in range(0, 30_000, 7_000):  # in pieces: the cached part must stay right
        s.extend(np.arange(start + 1.0, min(start + 7_000, 30_000) + 1.0), ys[start:start + 7_000])
        x, y = s.reduced(1_000)
        full_x, full_y = s.arrays()
        assert len(x) <= 1_000 and np.all(np.diff(x) >= 0)
        assert np.nanmax(y) == np.nanmax(full_y) and np.nanmin(y) == np.nanmin(full_y)
        assert x[0] == 1.0 and x[-1] >= full_x[-1] - len(full_x) / 250
    assert 12_346.0 in x, "the spike is drawn"


def test_progress_eta_stragglers_and_events():
    store = MetricsStore()
    rng = random.Random(0)
    for w in range(3):
        store.ingest(f"worker-{w}", [started_record(w, 3, 100, 50)])
        store.ingest(f"worker-{w}", [step_record(w, k, 50, rng) for k in range(1, 21)])
    p = store.progress["worker-0"]
    assert (p.epoch, p.step, p.global_step, p.steps_per_epoch, p.epochs) == (0, 19, 20, 50, 2)
    assert p.fraction == 0.2 and 7.0 < p.eta() < 10.0  # 80 steps left at ~0.1 s
    assert store.stragglers() == ["worker-1"]  # the synthetic worker 1 is 1.6x slower
    events = store.events_snapshot()
    assert [e["event"] for e in events] == ["started"] * 3
    assert events[0]["text"].endswith("global batch 48 = 3 workers × 1 replica × 16")
    assert event_text({"event": "failed", "error": "boom; do X"}) == "FAILED: boom; do X"


def test_csv_export_has_every_point(tmp_path):
    store = MetricsStore()
    rng = random.Random(0)
    store.ingest("worker-0", [step_record(0, k, 10, rng) for k in range(1, 6)])
    store.ingest("worker-1", [{**step_record(1, 1, 10, rng), "loss": None}])
    assert store.write_csv(tmp_path / "m.csv") == 6
    rows = list(csv.reader(open(tmp_path / "m.csv")))
    assert rows[0] == ["worker", "global_step", "loss", "step_time", "examples_per_sec"]
    assert rows[1][:2] == ["worker-0", "1"] and rows[-1][:3] == ["worker-1", "1", ""]


def test_a_diverged_loss_is_a_gap_and_reads_nan_never_an_error():
    """The metrics file writes a non-finite loss as null (docs/metrics.md); a user's own reporter
    may write anything. The store keeps the step with a NaN (a gap in the plot) and its words say nan."""
    store = MetricsStore()
    steps = [{**step_record(0, i + 1, 100, random.Random(i)), "loss": 0.5 - 0.01 * i} for i in range(5)]
    steps[2]["loss"] = None
    steps[3]["loss"] = float("inf")
    steps[4].update(loss="diverged", step_time=None, examples_per_sec="fast")
    store.ingest("worker-0", steps + [{"type": "epoch", "epoch": 0, "loss": None, "val_accuracy": float("nan"),
                                       "time": 1.0}])
    x, y = store.series("worker-0", "loss")
    assert list(x) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert list(y[:2]) == [0.5, 0.49] and np.isnan(y[2]) and np.isinf(y[3]) and np.isnan(y[4])
    assert np.isnan(store.series("worker-0", "examples_per_sec")[1][4])
    assert store.events[-1]["text"] == "epoch 1 done  loss nan  val_accuracy nan"


def test_a_damaged_metrics_line_is_an_event_not_a_loss():
    store = MetricsStore()
    store.ingest("worker-0", [{"type": "unreadable", "raw": '{"type": "step", "loss": 0.'}])
    assert store.events[-1] == {"time": None, "task": "worker-0", "event": "unreadable",
                                "text": "a line of its metrics file is not a record, skipped: "
                                        "'{\"type\": \"step\", \"loss\": 0.'"}


def test_a_resumed_attempt_goes_on_from_its_backup_and_the_redone_steps_leave_the_curves():
    """Attempt 1 reached step 8, attempt 2 resumed from the backup of step 5: the curve is steps
    1-5 of attempt 1, then 6... of attempt 2 (no line back), and a marker stands at step 5."""
    store = MetricsStore()
    first = [{"type": "step", "global_step": g, "loss": 1.0, "attempt": 1} for g in range(1, 9)]
    second = [{"type": "event", "event": "resumed", "global_step": 5, "attempt": 2}] + \
             [{"type": "step", "global_step": g, "loss": 0.5, "attempt": 2} for g in range(6, 8)]
    seen = {}
    store.ingest("worker-0", first[:6])
    store.changed_series(seen, 100)
    store.ingest("worker-0", first[6:] + second)  # one message may hold both attempts
    x, y = store.series("worker-0", "loss")
    assert list(x) == [1, 2, 3, 4, 5, 6, 7] and list(y) == [1.0] * 5 + [0.5] * 2
    assert store.restarts == [(2, 5.0)]
    assert ("worker-0", "loss") in store.changed_series(seen, 100)  # the cut is a change to redraw
    store.ingest("worker-1", second[:1])
    assert store.restarts == [(2, 5.0)]  # one marker per attempt, whichever task says it


def test_supervision_states_of_tasks():
    store = MetricsStore()
    store.set_state("worker-1", "failed", "killed by SIGKILL")
    assert store.states == {"worker-1": ("failed", "killed by SIGKILL")}
    store.set_state("worker-1", "running")
    assert store.states == {}
