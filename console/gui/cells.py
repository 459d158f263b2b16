"""Table cells the person reads but does not edit: the Check's, the setup's tables and Make ready's host rows."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidgetItem


def cell(text: str, tooltip: str = "") -> QTableWidgetItem:
    """A table cell the person reads but does not edit."""
    item = QTableWidgetItem(text)
    item.setFlags(item.flags() & ~Qt.ItemIsEditable)
    if tooltip:
        item.setToolTip(tooltip)
    return item
