"""The desktop window (PySide6 + pyqtgraph) on the Qt-free console core."""
