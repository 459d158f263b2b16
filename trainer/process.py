"""How a task's process lives with TensorFlow: its import without the collector's repeated passes, and SIGTERM.

``import tensorflow`` (with tf-keras) makes about a million objects in thousands of modules: Python's cyclic
collector runs a full pass over all of them again and again while they load, about a quarter of the import's
CPU (perf: ``gc_collect_main``; bench/tf_import.py). Each task of a run imports TensorFlow, every start and
restart, often several on one machine at once. Nothing made by an import is garbage, so the collector waits
until the import is over; the objects it made are then frozen (``gc.freeze``: kept out of later passes, which
then walk only what training makes).

A MultiWorkerMirrored or ParameterServer strategy starts TensorFlow's coordination service, whose preemption
notifier takes SIGTERM at the C level (tsl's ``SigtermNotifier``) and only notes it: a task told to stop
trained on until the SIGKILL after the stop's grace. ``sigterm_back`` gives SIGTERM back what Python had for it
(a handler of the script's own, else the default: the process ends at once).
"""

from __future__ import annotations

import contextlib
import gc
import signal
import threading


@contextlib.contextmanager
def collector_paused():
    """Within: no automatic collection (an enclosing pause wins: nothing changes). After: what exists by then is
    frozen, and the collector runs as before."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def sigterm_back() -> None:
    """After a strategy is made: SIGTERM does what Python had set for it before TensorFlow took it over (nothing
    to do off the main thread, where Python cannot set a handler, or where Python never set one)."""
    if threading.current_thread() is not threading.main_thread():
        return
    handler = signal.getsignal(signal.SIGTERM)
    if handler is not None:
        signal.signal(signal.SIGTERM, handler)
