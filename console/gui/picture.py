"""The Dashboard's plots as a picture that stands alone: the run over them, the key and the final values under them."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPen

from console.store.metrics import MetricsStore
from console.text import duration_text, metric_text

KEY_WIDTH = 260  # a series' place in the key: its line and its name, elided


def run_picture(plots: QImage, font: QFont, header, store: MetricsStore, key: list[tuple[str, QPen]]) -> QImage:
    """``plots`` under the run (``header``, a RunHeader or None: name, state; the store's duration; cluster,
    settings), over the ``key`` (each series' name and pen) and the store's final values."""
    width = max(plots.width(), 900)
    font = QFont(font)
    font.setPointSize(10)
    metrics = QFontMetrics(font)
    line = metrics.height() + 4
    h = header
    title = (f"{h.name} ({h.run_id})" if h is not None and h.name else h.run_id if h is not None else "tfcc")
    about = [part for part in (h.state if h else "", duration_text(store.runtime())
                               if store.runtime() is not None else "", h.cluster if h else "",
                               h.settings if h else "") if part]
    final = store.final_metrics()
    values = "final: " + "  ".join(f"{k} {metric_text(v)}" for k, v in final.items()) if final else ""
    per_row = max(1, width // KEY_WIDTH)
    key_rows = -(-len(key) // per_row)
    image = QImage(width, 2 * line + plots.height() + (key_rows + 2) * line + 8, QImage.Format_RGB32)
    image.fill(Qt.white)
    painter = QPainter(image)
    painter.setFont(font)
    painter.setPen(QColor("#222"))
    bold = QFont(font)
    bold.setBold(True)
    painter.setFont(bold)
    painter.drawText(8, line - 4, title)
    painter.setFont(font)
    painter.drawText(8, 2 * line - 4, " · ".join(about))
    painter.drawImage(0, 2 * line, plots)
    y = 2 * line + plots.height() + 4
    for i, (name, pen) in enumerate(key):
        row, col = divmod(i, per_row)
        x, top = 8 + col * KEY_WIDTH, y + row * line
        painter.setPen(pg.mkPen(pen))
        painter.drawLine(x, top + line // 2, x + 28, top + line // 2)
        painter.setPen(QColor("#222"))
        painter.drawText(x + 34, top + line - 6, metrics.elidedText(name, Qt.ElideRight, 220))
    painter.drawText(8, y + key_rows * line + line - 6, values)
    painter.end()
    return image
