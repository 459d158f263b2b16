"""Open the tfcc window: ``tfcc`` or ``tfcc gui [CLUSTER]``."""

from __future__ import annotations

import logging
import sys


def main(cluster_path: str | None = None) -> int:
    from PySide6.QtWidgets import QApplication

    import pyqtgraph as pg

    from console.gui.main_window import MainWindow

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    pg.setConfigOptions(antialias=False, useOpenGL=False)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("tfcc")
    window = MainWindow(cluster_path)
    window.show()
    if cluster_path is None and window.path is None:
        window.look_for_runs()  # open_profile looks by itself
    return app.exec()
