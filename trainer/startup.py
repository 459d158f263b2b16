"""TensorFlow's import without the garbage collector's repeated full passes.

``import tensorflow`` (with tf-keras) makes about a million objects in thousands of modules: Python's cyclic
collector runs a full pass over all of them again and again while they load, about a quarter of the import's
CPU (perf: ``gc_collect_main``; bench/tf_import.py). Each task of a run imports TensorFlow, every start and
restart, often several on one machine at once. Nothing made by an import is garbage, so the collector waits
until the import is over; the objects it made are then frozen (``gc.freeze``: kept out of later passes, which
then walk only what training makes).
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def collector_paused(freeze: bool = True):
    """Within: no automatic collection (an enclosing pause wins: nothing changes). After: the collector runs as
    before, and with ``freeze`` what exists by then is frozen."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        gc.enable()
