"""Parts of the Dashboard's plots: the series selector beside them and the value table at the cursor.

A series is what one name stands for in every plot (a worker, the cluster, the epochs, the validation values, a
host, a compared run); the selector lists each once, in a stable order, with its line as drawn, and hides or shows
it everywhere. The value table floats at the cursor, a row per visible series of the plot under it.
"""

from __future__ import annotations

import datetime as dt
import html
import math

from PySide6.QtCore import QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QIcon, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QLabel, QListWidget, QListWidgetItem

from console.text import metric_text

ICON = QSize(28, 12)


def line_icon(pen: QPen, symbol: str | None = None) -> QIcon:
    """A short stretch of a series' line as it is drawn (its colour, dash and mark)."""
    pixmap = QPixmap(ICON)
    pixmap.fill(Qt.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.Antialiasing)
    drawn = QPen(pen)
    drawn.setWidthF(max(2.0, pen.widthF()))
    drawn.setCosmetic(True)
    painter.setPen(drawn)
    middle = ICON.height() // 2
    painter.drawLine(1, middle, ICON.width() - 2, middle)
    if symbol:
        painter.setBrush(pen.color() if symbol == "o" else Qt.white)
        painter.setPen(QPen(pen.color(), 1.5))
        centre = QPoint(ICON.width() // 2, middle)
        if symbol == "o":
            painter.drawEllipse(centre, 4, 4)
        else:
            painter.drawPolygon([centre + QPoint(0, -5), centre + QPoint(5, 0), centre + QPoint(0, 5),
                                 centre + QPoint(-5, 0)])
    painter.end()
    return QIcon(pixmap)


class SeriesList(QListWidget):
    """Every series of the plots once, in a stable order, each with its line; unchecked: hidden in every plot."""

    toggled = Signal(str, bool)  # a series' name, shown

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setIconSize(ICON)
        self.setToolTip("The series of the plots: uncheck one to hide it in every plot")
        self._items: dict[str, QListWidgetItem] = {}
        self._ranks: dict[str, tuple] = {}
        self.itemChanged.connect(self._on_self_item_changed)

    def names(self) -> list[str]:
        """The series listed, in their order."""
        return [self.item(i).text() for i in range(self.count())]

    def show_series(self, series: dict[str, tuple], hidden: set[str]) -> None:
        """List ``series`` ({name: (rank, pen, symbol)}), each at its rank's place; names no longer drawn go."""
        self.blockSignals(True)
        try:
            for name in [n for n in self._items if n not in series]:
                self.takeItem(self.row(self._items.pop(name)))
                self._ranks.pop(name, None)
            for name, (rank, pen, symbol) in sorted(series.items(), key=lambda kv: (kv[1][0], kv[0])):
                if name in self._items:
                    continue
                item = QListWidgetItem(line_icon(pen, symbol), name)
                item.setToolTip(name)
                item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
                item.setCheckState(Qt.Unchecked if name in hidden else Qt.Checked)
                row = sum(1 for other, r in self._ranks.items() if (r, other) < (rank, name))
                self.insertItem(row, item)
                self._items[name], self._ranks[name] = item, rank
        finally:
            self.blockSignals(False)

    def _on_self_item_changed(self, item: QListWidgetItem) -> None:
        self.toggled.emit(item.text(), item.checkState() == Qt.Checked)


def _when(seconds) -> str:
    if seconds is None or not math.isfinite(seconds):
        return ""
    try:
        return dt.datetime.fromtimestamp(seconds).strftime("%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return ""


def _step(step) -> str:
    return "" if step is None or not math.isfinite(step) else f"{step:.0f}"


class ValueTable(QLabel):
    """A table that floats at the cursor: per visible series of the plot under it, its value, smoothed value,
    step and time. Hidden when the mouse leaves the plots (the person moves; nothing to click)."""

    MARGIN = 14  # pixels between the cursor and the table

    def __init__(self, parent):
        super().__init__(parent)
        self.setTextFormat(Qt.RichText)
        self.setAttribute(Qt.WA_TransparentForMouseEvents)
        self.setStyleSheet("background: rgba(255, 255, 255, 235); color: #1a1a1a; border: 1px solid #9a9a9a; "
                           "padding: 4px; font-size: 9pt")
        self.rows: list[dict] = []
        self.hide()

    def show_rows(self, title: str, rows: list[dict], more: int, at: QPoint) -> None:
        """``rows`` ({series, colour, value, smoothed, step, time}) under ``title``, near ``at`` (the cursor, in
        the parent's coordinates), inside the parent."""
        self.rows = rows
        if not rows:
            self.hide()
            return
        smoothed = any(r["smoothed"] is not None for r in rows)
        head = "<tr><th align=left>series</th><th align=right>value</th>" + \
            ("<th align=right>smoothed</th>" if smoothed else "") + \
            "<th align=right>step</th><th align=right>time</th></tr>"
        body = "".join(
            f"<tr><td><span style='color:{r['colour']}'>■</span> {html.escape(r['series'])}</td>"
            f"<td align=right>{metric_text(r['value'], 4)}</td>"
            + (f"<td align=right>{'' if r['smoothed'] is None else metric_text(r['smoothed'], 4)}</td>"
               if smoothed else "")
            + f"<td align=right>{_step(r['step'])}</td><td align=right>{_when(r['time'])}</td></tr>" for r in rows)
        tail = f"<tr><td colspan=5><i>… {more} more (the series list hides some)</i></td></tr>" if more else ""
        self.setText(f"<b>{html.escape(title)}</b><table cellspacing=0 cellpadding=2>{head}{body}{tail}</table>")
        self.adjustSize()
        room = self.parentWidget().rect()
        x, y = at.x() + self.MARGIN, at.y() + self.MARGIN
        if x + self.width() > room.right():
            x = at.x() - self.MARGIN - self.width()
        if y + self.height() > room.bottom():
            y = at.y() - self.MARGIN - self.height()
        self.setGeometry(QRect(max(0, x), max(0, y), self.width(), self.height()))
        self.show()
        self.raise_()

    def clear_rows(self) -> None:
        self.rows = []
        self.hide()
