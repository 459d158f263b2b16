"""A store's snapshot is typed: it goes to its files and comes back equal, and one of another shape or
format is none (the session then reads its run from the first records)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from console.store import snapshot
from console.store.snapshot import Snapshot


def full() -> Snapshot:
    return Snapshot(
        tables=[("worker-0", "step", ["loss", "step_time"]), ("host:here", "sys", ["sys:cpu_cores"])],
        workers=["worker-0"], hosts=["here"],
        progress={"worker-0": {"epoch": 1, "step": 3, "steps_per_epoch": 10, "epochs": 2, "global_step": 14,
                               "first_time": 1.0, "last_time": 9.5, "recent_step_times": [0.1, 0.2],
                               "after": None}},
        epochs=[{"task": "worker-0", "type": "epoch", "epoch": 0, "loss": 0.5}],
        events=[{"time": 2.0, "task": "worker-0", "event": "epoch", "record": {"type": "epoch", "epoch": 0}}],
        restarts=[(2, 15.0)],
        markers=[{"kind": "restart", "task": "worker-0", "step": 15.0, "time": 9.0, "metric": "", "value": None,
                  "attempt": 2, "words": ""}],
        states={"worker-0": ("stalled", "no step for 60 s")}, alive={"ps-0": {"type": "alive", "cpu_percent": 3.0}},
        gpus_used={"here": [0, 1], "there": None}, origin=1.0, base=1.0, diverged=[("nan", "worker-0")],
        offsets={"worker-0": 4096}, lines={"worker-0": 31}, sizes={"worker-0": 4096},
        kept={"worker-0": [{"type": "event", "event": "launched"}, {"type": "step", "global_step": 14}]})


def test_a_snapshot_round_trips_through_its_text_and_its_files(tmp_path):
    state = full()
    assert Snapshot.from_json(state.to_json()) == state
    arrays = [{"x": np.arange(3, dtype=np.float32), "t": np.zeros(3, np.float32), "0": np.ones(3, np.float32),
               "1": np.full(3, 0.1, np.float32)},
              {"x": np.array([5.0, 6.0]), "t": np.array([0.0, 1.0], np.float32), "0": np.array([1.5, 2.0], np.float32)}]
    snapshot.write(tmp_path / "store", state, iter(arrays))
    again = snapshot.read(tmp_path / "store")
    assert again == state
    tables = list(snapshot.table_arrays(tmp_path / "store", again))
    assert [(owner, kind, sorted(a)) for owner, kind, a in tables] == [
        ("worker-0", "step", ["loss", "step_time", "t", "x"]), ("host:here", "sys", ["sys:cpu_cores", "t", "x"])]
    np.testing.assert_array_equal(tables[0][2]["step_time"], arrays[0]["1"])
    np.testing.assert_array_equal(tables[1][2]["x"], arrays[1]["x"])


@pytest.mark.parametrize("damage", [
    lambda d: d.update(format=1),                    # a version that kept words, not data
    lambda d: d.update(kept=["not", "a", "dict"]),
    lambda d: d.update(offsets="everywhere"),
    lambda d: d.update(origin="soon"),
    lambda d: d.pop("format"),
])
def test_a_snapshot_of_another_shape_or_format_is_none(tmp_path, damage):
    data = json.loads(full().to_json())
    damage(data)
    with pytest.raises(ValueError):
        Snapshot.from_json(json.dumps(data))
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / snapshot.STATE).write_text(json.dumps(data))
    assert snapshot.read(tmp_path / "store") is None


def test_arrays_that_lack_a_table_are_refused_before_any_is_given(tmp_path):
    state = full()
    snapshot.write(tmp_path / "store", state, iter([{"x": np.zeros(1), "t": np.zeros(1, np.float32)}]))
    with pytest.raises(ValueError, match="lacks"):
        next(snapshot.table_arrays(tmp_path / "store", state))


def test_an_older_writers_leftovers_are_removed_and_the_state_goes_last(tmp_path):
    folder = tmp_path / "store"
    folder.mkdir()
    (folder / ".store.12345.npz").write_bytes(b"half a file")
    state = Snapshot(tables=[("w", "step", [])])

    def tables():
        assert not (folder / snapshot.STATE).exists()  # no state while its arrays are written
        yield {"x": np.zeros(1), "t": np.zeros(1, np.float32)}

    snapshot.write(folder, state, tables())
    assert sorted(p.name for p in folder.iterdir()) == [snapshot.STATE, snapshot.ARRAYS]


def test_long_lists_are_encoded_in_pieces_as_one_json_would_be():
    events = [{"time": float(i), "task": "worker-0", "event": "evaluated", "record": {"n": i, "x": [i, "a"]}}
              for i in range(2 * snapshot.JSON_PIECE + 7)]
    state = snapshot.Snapshot(workers=["worker-0"], events=events, epochs=[{"epoch": 1}], restarts=[(1, 20)])
    text = state.to_json()
    assert json.loads(text) == json.loads(json.dumps({"format": snapshot.Snapshot.FORMAT,
                                                      **dataclasses.asdict(state)}))
    assert snapshot.Snapshot.from_json(text) == state
