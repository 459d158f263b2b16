"""One colour per worker, the same in every plot, legend and diagram."""

from __future__ import annotations

from PySide6.QtGui import QColor

# Distinct on white and for common colour-vision deficiencies (Okabe-Ito, then tab10 extras).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C564B", "#7F7F7F",
           "#BCBD22", "#17BECF", "#9467BD", "#2CA02C")


def worker_color(index: int) -> QColor:
    """The colour of the task at ``index`` in the cluster's task order."""
    base = QColor(PALETTE[index % len(PALETTE)])
    if index >= len(PALETTE):  # past the palette: the same hues, darker each round
        base = base.darker(100 + 35 * (index // len(PALETTE)))
    return base
