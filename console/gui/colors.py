"""The plots' encodings, defined once: a colour per worker (the same in every plot, legend and
diagram), and greys with their own shapes and dashes for what belongs to no one worker (the
cluster's numbers, epochs, validation, hosts and their GPUs), so that no such line reads as a worker's."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

# Distinct on white and for common colour-vision deficiencies (Okabe-Ito, then tab10 extras); no grey:
# greys are the encodings below.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C564B", "#9467BD",
           "#BCBD22", "#17BECF", "#2CA02C", "#E7298A")

CLUSTER = ("#1A1A1A", Qt.SolidLine)        # a number of the whole cluster per step (drawn once)
EPOCH = ("#4D4D4D", Qt.SolidLine, "o")     # training values per epoch: ● on a dark grey line
VALIDATION = ("#4D4D4D", Qt.DashLine, "d")  # validation values per epoch: ◆ on a dashed dark grey line
HOST_GREYS = ("#3A3A3A", "#7A7A7A", "#A8A8A8")  # hosts, in turn; then dashes tell them apart
HOST_STYLES = (Qt.DashDotLine, Qt.DashDotDotLine)
GPU_STYLES = (Qt.DotLine, Qt.DashLine)      # a host's GPUs: its grey, dotted or dashed, thin


def worker_color(index: int) -> QColor:
    """The colour of the task at ``index`` in the cluster's task order."""
    base = QColor(PALETTE[index % len(PALETTE)])
    if index >= len(PALETTE):  # past the palette: the same hues, darker each round
        base = base.darker(100 + 35 * (index // len(PALETTE)))
    return base


def host_encoding(index: int, gpu: int | None = None) -> tuple[QColor, Qt.PenStyle]:
    """The colour and dash of the host at ``index`` of the run's hosts (or of its GPU ``gpu``)."""
    colour = QColor(HOST_GREYS[index % len(HOST_GREYS)])
    if gpu is not None:
        return colour, GPU_STYLES[gpu % len(GPU_STYLES)]
    return colour, HOST_STYLES[(index // len(HOST_GREYS)) % len(HOST_STYLES)]

# A compared run's curves, each run its own colour (dashed): Paul Tol's muted scheme, apart from the workers'.
COMPARED = ("#882255", "#117733", "#332288", "#999933", "#AA4499", "#44AA99")


def compared_color(index: int) -> QColor:
    """The colour of the ``index``-th compared run (in the order they were added)."""
    return QColor(COMPARED[index % len(COMPARED)])

# The parts of a step in "why is it slow?" (console.speed.PARTS): what to act on warm, compute green, the rest grey.
STEP_PARTS = {"input": "#E69F00", "compute": "#009E73", "communication": "#56B4E9", "peers": "#D55E00",
              "other": "#BBBBBB"}

# What failed or is stuck, to look at: the failure view, a failed task's badge, Where are they?'s stuck groups.
ALARM = "#b00020"
