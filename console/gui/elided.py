"""A line of text that never widens its layout: cut with "…" to the width it is given, the whole text in its
tooltip (Qt's HIG for long text in a narrow place)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget


PREFERRED_WIDTH = 360  # the most a line asks for; a layout may give it more, or less down to nothing


class ElidedLabel(QWidget):
    """One line of ``text`` (plain), elided at the right to the width the layout gives; its tooltip has it whole."""

    def __init__(self, text: str = "", parent=None):
        super().__init__(parent)
        self._text = ""
        self.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Fixed)  # as wide as its text wants, down to nothing
        self.setText(text)

    def text(self) -> str:
        return self._text

    def setText(self, text: str) -> None:  # noqa: N802 (QLabel's name: it replaces one)
        text = " ".join(text.split("\n")) if "\n" in text else text
        if text != self._text:
            self._text = text
            self.setToolTip(text if text else "")
            self.updateGeometry()
            self.update()

    def shown_text(self) -> str:
        """What is drawn now: the text, cut with "…" to the width."""
        return self.fontMetrics().elidedText(self._text, Qt.ElideRight, max(0, self.width()))

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        metrics = self.fontMetrics()
        return QSize(min(metrics.horizontalAdvance(self._text), PREFERRED_WIDTH) + 2, metrics.height() + 2)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(0, self.fontMetrics().height() + 2)

    def paintEvent(self, event):  # noqa: N802 (Qt's name)
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(self.rect(), Qt.AlignLeft | Qt.AlignVCenter, self.shown_text())
        painter.end()
