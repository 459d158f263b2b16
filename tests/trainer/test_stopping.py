"""trainer/stopping.py apart from a run (its runs: tests/trainer/test_process.py, tests/trainer/test_capture.py)."""

from __future__ import annotations

import signal


def test_a_validation_or_an_epochs_end_after_sigterm_is_no_step_the_patience_waits_for_them():
    """The patience ends a task whose steps do not come (a peer gone). SIGTERM during fit's validation, or before an
    epoch's end that saves a big model, is no step that hangs: the timer stops for them and starts again with the
    next epoch's steps."""
    from trainer.stopping import Stopping

    stop = Stopping()
    stop.active = True
    stop.on_test_begin()  # validating when SIGTERM comes: no timer yet
    stop._on_sigterm(signal.SIGTERM, None)
    assert stop.asked.is_set() and stop._patience is None
    stop.on_test_end()
    stop.on_epoch_begin(3)  # the next epoch's steps: the patience runs
    first = stop._patience
    assert first is not None and not first.finished.is_set() and stop._epoch == 3
    stop.on_test_begin()  # the next validation: it stops
    assert first.finished.is_set()
    stop.on_epoch_begin(4)
    assert stop._patience is not first and not stop._patience.finished.is_set()
    stop.on_train_end()
    assert stop._patience.finished.is_set()
