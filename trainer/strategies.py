"""The distribution strategies' words, and the word for a ``tf.distribute`` strategy object (no TensorFlow).

Standard library only (Python 3.9+): the trainer's option, its records' ``strategy``, the cluster file's
``training.strategy`` and the console's checks and diagram all say a strategy with these words;
``trainer/plan.py`` holds the rules that choose one.
"""

from __future__ import annotations


class Strategy:
    """A strategy's word (``--strategy``, a record's ``strategy``, a cluster file's ``training.strategy``)."""

    AUTO = "auto"                                    # picked by the cluster's tasks and a task's devices
    DEFAULT = "default"                              # one device of one task
    MIRRORED = "mirrored"                            # every device of one task
    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"  # synchronous over the chief and workers
    PARAMETER_SERVER = "parameter_server"            # asynchronous: the chief coordinates, the ps hold variables
    ALL = (AUTO, DEFAULT, MIRRORED, MULTI_WORKER_MIRRORED, PARAMETER_SERVER)
    LOCAL = "local"  # a user's script without peers: whatever it runs, it runs alone (the capture's word, no choice)


def strategy_name(strategy) -> str:
    """Strategy's word for a ``tf.distribute`` strategy object (a script's own: its class says)."""
    name = type(strategy).__name__
    if "ParameterServer" in name:
        return Strategy.PARAMETER_SERVER
    if "CollectiveAllReduce" in name or "MultiWorker" in name:
        return Strategy.MULTI_WORKER_MIRRORED
    if "Mirrored" in name:
        return Strategy.MIRRORED
    if name.startswith("_Default"):
        return Strategy.DEFAULT
    return name
