"""Open the tfcc window: ``tfcc`` or ``tfcc gui [CLUSTER]``."""

from __future__ import annotations

import gc
import logging
import sys


GIL_SWITCH_SECONDS = 0.001


def configure_process() -> None:
    """Process-wide settings of the window.

    Follow threads catching up on a run's history are busy in Python, and PySide6 gives the
    GIL up on every call into Qt: at Python's default 5 ms switch interval, one redraw (a few
    hundred Qt calls) then waited seconds for the GIL. At 1 ms the worst stall while 32
    workers' histories stream in fell from about 2 s to about 0.6 s (bench/dashboard_load.py).
    """
    sys.setswitchinterval(GIL_SWITCH_SECONDS)


def main(cluster_path: str | None = None) -> int:
    from PySide6.QtWidgets import QApplication

    import pyqtgraph as pg

    from console.gui.main_window import MainWindow

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    configure_process()
    pg.setConfigOptions(antialias=False, useOpenGL=False)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("tfcc")
    window = MainWindow(cluster_path)
    window.show()
    gc.freeze()  # what start-up made lives as long as the window: later collections skip it
    if cluster_path is None and window.path is None:
        window.look_for_runs()  # open_profile looks by itself
    return app.exec()
