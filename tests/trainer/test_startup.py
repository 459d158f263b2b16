"""TensorFlow's import with the collector paused (trainer/startup.py); the CPU it saves is bench/tf_import.py's."""

from __future__ import annotations

import gc

import pytest

from trainer.startup import collector_paused


@pytest.fixture
def collector():
    """The collector as the test found it, back afterwards (a pause that failed must not leak into the suite)."""
    was = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


def test_no_collection_within_and_what_was_made_is_frozen_after(collector):
    gc.enable()
    frozen = gc.get_freeze_count()
    with collector_paused():
        assert not gc.isenabled()
        made = [[i] for i in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() - frozen >= len(made)


def test_the_collector_is_back_after_an_import_that_failed(collector):
    gc.enable()
    with pytest.raises(ImportError), collector_paused():
        raise ImportError("no module named tensorflow")
    assert gc.isenabled()


def test_an_enclosing_pause_wins(collector):
    """TensorFlow imports Keras within its own import: the inner pause changes nothing, the outer one ends it."""
    gc.enable()
    with collector_paused():
        frozen = gc.get_freeze_count()
        with collector_paused():
            pass
        assert not gc.isenabled() and gc.get_freeze_count() == frozen
    assert gc.isenabled()


def test_a_script_that_turned_the_collector_off_keeps_it_off(collector):
    gc.disable()
    frozen = gc.get_freeze_count()
    with collector_paused():
        pass
    assert not gc.isenabled() and gc.get_freeze_count() == frozen
