"""The metrics file's vocabulary: a line read as a record (a damaged one kept), a task's records sorted once."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from trainer.records import Batch, Event, RecordType, decode_line, metrics_of

ROOT = Path(__file__).resolve().parents[2]


def test_a_line_is_a_record_or_an_unreadable_one_that_keeps_it():
    assert decode_line('{"type": "step", "loss": 0.5}') == {"type": "step", "loss": 0.5}
    for line in ('{"type": "step", "loss": 0.', '[1, 2]', '{"loss": 1}', '{"type": 3}', ""):
        assert decode_line(line) == {"type": RecordType.UNREADABLE, "raw": line}


def test_a_batch_sorts_a_tasks_records_once_in_order():
    records = [{"type": "event", "event": "launched", "time": 12.0},
               {"type": "event", "event": "launched", "time": 10.0},
               {"type": "step", "global_step": 1}, {"type": "event", "event": "started", "n": 1},
               {"type": "epoch", "epoch": 0, "loss": 0.4, "epoch_time": 3.0, "time": 20.0},
               {"type": "event", "event": "started", "n": 2},
               {"type": "event", "event": "resumed", "global_step": 1}, {"type": "step", "global_step": 2},
               {"type": "event", "event": "finished", "metrics": {"loss": 0.3}}, {"type": "unreadable", "raw": "x"}]
    batch = Batch(records)
    assert list(batch) == records and len(batch) == 10
    assert batch.steps == [records[2], records[7]] and batch.others == [r for r in records if r["type"] != "step"]
    assert batch.started is records[3] and batch.launched_at == 10.0 and batch.resumes == [6]
    assert batch.last_metrics is records[8] and metrics_of(batch.last_metrics) == {"loss": 0.3}
    assert metrics_of(records[4]) == {"loss": 0.4}  # no place field, no duration
    parts = batch.split_at_resumes()  # each attempt's steps after its own cut
    assert [p.records for p in parts] == [records[:7], records[7:]]
    assert Batch(records[:7]).split_at_resumes()[0].records == records[:7]


def test_the_trainer_writes_every_event_it_names_and_names_no_other():
    """Event.ALL is the metrics file's: each name is written by the trainer or the capture."""
    written = set()
    for path in (ROOT / "trainer").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Event":
                written.add(node.attr)
    named = {name for name in vars(Event) if name.isupper() and isinstance(getattr(Event, name), str)}
    assert named <= written, named - written


def test_a_record_past_the_stated_bounds_is_unreadable_and_one_at_them_is_kept():
    """docs/security.md: a record of more than 1,000 fields or nested more than 16 deep is a note, not a record (its
    fields would be columns, its nesting a walk); one at the bounds is a record."""
    from trainer.records import MAX_DEPTH, MAX_FIELDS

    assert (MAX_FIELDS, MAX_DEPTH) == (1000, 16)  # as the page says

    def nested(depth: int) -> dict:
        value: dict = {"x": 1}
        for _ in range(depth):
            value = {"x": value}
        return {"type": "step", "deep": value}

    wide = {"type": "step", **{f"m{i}": i for i in range(MAX_FIELDS - 1)}}
    assert decode_line(json.dumps(wide)) == wide
    assert decode_line(json.dumps({**wide, "one_more": 1}))["type"] == "unreadable"
    assert decode_line(json.dumps(nested(MAX_DEPTH - 1))) == nested(MAX_DEPTH - 1)
    deep = decode_line(json.dumps(nested(MAX_DEPTH)))
    assert deep["type"] == "unreadable" and deep["why"] == "over 1000 fields or nested over 16 deep"
