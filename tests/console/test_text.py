"""The one wording of runs: numbers that never fail, records, outcomes, connections."""

from __future__ import annotations

from console import text


def test_metrics_read_nan_never_an_error():
    m = text.metric_text
    assert m(None) == m(float("nan")) == m(float("inf")) == m("x") == m(True) == "nan"
    assert m(0.123456) == "0.1235" and m(3) == "3.0000"
    assert text.count(0) == "1" and text.count("0") == text.count(None) == "?"


def test_records_and_outcomes():
    assert text.epoch_text({"epoch": 2, "loss": 0.25, "val_accuracy": 0.9}) == \
        "epoch 3 done  loss 0.2500  val_accuracy 0.9000"
    assert text.event_text({"event": "failed"}) == "FAILED: no reason given"
    assert text.event_text({"event": "finished", "model": "/r/model.keras"}) == "finished, model saved to /r/model.keras"
    assert text.outcome_text("failed", {"returncode": 1}) == "failed (exit code 1)"
    assert text.outcome_text("error", None, "no task worker-3") == "error: no task worker-3"
    assert text.unreadable_text({"raw": "[1, 2]"}) == "a line of its metrics file is not a record, skipped: '[1, 2]'"


def test_connection_words():
    lost = {"type": "reconnecting", "error": "refused"}
    assert text.connection_text("h1", lost) == \
        "lost the connection to host h1 (refused); reconnecting (the task goes on there)"
    assert text.connection_text("h1", {**lost, "first": True}).startswith("cannot reach host h1 (refused); trying again")
    assert text.connection_text("h1", {"type": "reconnected", "after": 8.4}) == \
        "reconnected to host h1 after 8 s; following on from where it stopped"


def test_backups_are_bookkeeping_not_lines_to_read(capsys):
    from console.cli import Printer
    from console.store.metrics import MetricsStore
    from console.states import TaskState
    from console.states import SessionEvent

    record = {"type": "event", "event": "backed_up", "epoch": 0}
    store = MetricsStore()
    store.ingest("worker-0", [record])
    assert store.events == []
    Printer(as_json=False).on_event(SessionEvent("records", TaskState("worker-0", "h"), records=[record]))
    assert capsys.readouterr().out == ""


def test_a_resume_says_what_changed_since_its_backup():
    base = {"event": "resumed", "attempt": 2, "epoch": 3, "step": 20, "global_step": 300}
    assert text.resumed_text(base) == "attempt 2 resumed from its backup of epoch 4 step 21 (step 300 of the run)"
    changed = {**base, "changed": {"num_workers": [2, 1], "learning_rate": [0.004, 0.002]}}
    assert text.resumed_text(changed).endswith(
        "; changed since the backup: workers 2 → 1, learning rate 0.004 → 0.002")
    moved = {**base, "changed": {"global_batch": [64, 32]}, "position": 600}
    assert text.resumed_text(moved).endswith(
        "global batch 64 → 32; the global batch changed: it goes on at step 600 of the new stream")
    # A host's record: unknown fields and malformed values are left out, never an error.
    hostile = {**base, "changed": {"rm -rf": [1, 2], "seed": "x", "global_batch": [None, "y"]}}
    assert text.resumed_text(hostile).endswith("changed since the backup: global batch ? → ?")
    assert text.resumed_text({**base, "changed": ["x"]}) == text.resumed_text(base)


def test_an_elastic_runs_changes_of_size_and_its_restart_marker_say_who_left_and_came_back():
    from console.store.metrics import Marker
    resizes = [{"at": 1.0, "tasks": ["worker-0", "worker-1"], "why": "its host did not answer for 30 s"},
               {"at": 2.0, "tasks": ["worker-0", "worker-1", "worker-2"], "why": "h2 answers again"}]
    assert text.resizes_text(["worker-0", "worker-1", "worker-2"], resizes) == (
        "3 tasks → 2 (worker-2 left: its host did not answer for 30 s) → 3 (worker-2 back: h2 answers again)")
    assert text.resizes_text(["worker-0"], []) == "" and text.resizes_text(["worker-0"], [{"tasks": 7}]) == ""
    shrunk = Marker(Marker.RESTART, "worker-0", 29, 0.0, attempt=2,
                    changed={"num_workers": [3, 2], "per_replica_batch": [16, 24]})
    assert text.marker_label(shrunk) == "attempt 2: 2 workers"
    assert text.marker_text(shrunk) == ("attempt 2 took up training at step 29; changed since the backup: workers "
                                        "3 → 2, per-replica batch 16 → 24")
    assert text.marker_label(Marker(Marker.RESTART, "worker-0", 29, 0.0, attempt=2)) == "attempt 2"


def test_a_scripts_fit_begins_and_ends_in_words():
    from console.text import event_text

    assert event_text({"type": "event", "event": "train_begin", "exact_step_loss": True}) == "fit began"
    assert event_text({"type": "event", "event": "train_begin", "fit": 2}) == "fit began (fit 2 of the script)"
    assert event_text({"type": "event", "event": "train_end", "train_time": 75.4}) == \
        "fit ended after 0:01:15 of training"
    assert event_text({"type": "event", "event": "train_end", "train_time": "x"}) == "fit ended"
