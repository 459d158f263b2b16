"""Metric ids: what the dashboard draws, each named once, with its plot and its label.

A step field by its name, ``epoch:<field>`` for epoch and validation values, ``sys:<name>`` for the system
lane; which plot each belongs to, its label, and which are the same on every worker (drawn once for the
cluster).
"""

from __future__ import annotations

from trainer.records import LOSS, LOSS_AVG

EPOCH = "epoch:"   # the prefix of an epoch (or validation) value's metric id
SYSTEM = "sys:"    # the prefix of the system lane's metric ids
# Step fields that are the same number on every worker (docs/metrics.md): one curve for the cluster.
CLUSTER_WIDE_STEP = frozenset({LOSS, LOSS_AVG, "global_batch", "global_examples_per_sec", "learning_rate"})
# Epoch fields that differ between workers; every other epoch value is a cluster-wide mean.
PER_WORKER_EPOCH = frozenset({"epoch_time"})
# The system lane (ingest_system): cores busy and memory, per host and per task; each GPU's load.
SYSTEM_METRICS = ("sys:cpu_cores", "sys:memory_gb", "sys:gpu_percent", "sys:gpu_memory_gb")
DEFAULT_PLOTS = ("loss", "accuracy", "step_time", "sys:cpu_cores", "sys:memory_gb")
X_AXES = ("step", "time", "relative")  # global step, wall-clock time, seconds since the run's first record
HOST = "host:"     # the prefix of a host's (and its GPUs') owner name in the system lane
CLUSTER_TASK = "cluster"  # the task an event of the whole cluster is listed under (an epoch every worker said)

PLOT_LABELS = {  # short: a plot's axis label (the legend says which curve is which)
    "loss": "loss",
    "accuracy": "accuracy",
    "step_time": "step time (s)",
    "examples_per_sec": "examples/s per worker",
    "global_examples_per_sec": "examples/s, cluster",
    "global_batch": "global batch",
    "learning_rate": "learning rate",
    "epoch_time": "epoch time (s)",
    "sys:cpu_cores": "CPU (cores busy)",
    "sys:memory_gb": "memory (GB)",
    "sys:gpu_percent": "GPU busy (%)",
    "sys:gpu_memory_gb": "GPU memory (GB)",
}


def plot_of(metric: str) -> str:
    """The plot a metric is drawn in: a field's training, epoch and validation values share one
    (``loss``, ``epoch:loss`` and ``epoch:val_loss`` are all in ``loss``)."""
    if metric.startswith(SYSTEM):
        return metric
    name = metric[len(EPOCH):] if metric.startswith(EPOCH) else metric
    if name.startswith("val_"):
        name = name[4:]
    return LOSS if name == LOSS_AVG else name  # a step's running mean is drawn with its loss


def plot_label(plot: str) -> str:
    return PLOT_LABELS.get(plot, plot.replace("_", " "))


def is_cluster_wide(metric: str) -> bool:
    """Whether every worker reports the same number (drawn and listed once, from one task)."""
    if metric.startswith(SYSTEM):
        return False
    if metric.startswith(EPOCH):
        return metric[len(EPOCH):] not in PER_WORKER_EPOCH
    return metric in CLUSTER_WIDE_STEP
