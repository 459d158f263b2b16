"""Take the README's screenshots: the window on the embedded default, during a real run.

    python scripts/readme_screenshots.py [OUT_DIR]   (default docs/images; offscreen, no display needed)

Starts the two local digits workers from the window, grabs the dashboard in the
third epoch (validation curves and the system lane) and the cluster diagram, stops
the run; trains a second, shorter run to its end and grabs the Runs tab and the
dashboard comparing the two.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs" / "images")
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="tfcc-shots-"))
    os.environ.update(TFCC_HOME=str(home / "host"), TFCC_CONSOLE_HOME=str(home / "console"),
                      TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="2")
    from PySide6.QtWidgets import QApplication

    from console.gui.app import configure_process
    from console.gui.main_window import MainWindow
    from console.profiles import Profiles

    app = QApplication([])
    configure_process()
    window = MainWindow(profiles=Profiles(home / "profiles.json"))
    window.resize(1400, 860)
    window.show()
    window.setup.epochs.setValue(8)

    def wait(condition, seconds: float, what: str) -> None:
        end = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > end:
                raise SystemExit(f"gave up waiting for {what}")
            app.processEvents()

    window.act_start.trigger()
    store = lambda: window.session.store  # noqa: E731
    wait(lambda: store().progress.get("worker-1") and store().progress["worker-1"].epoch >= 2, 300, "epoch 3")
    wait(lambda: window.run_control.started_event is not None, 30, "the started event")
    wait(lambda: store().points("worker-1", "sys:cpu_cores") >= 5, 30, "the system lane")
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # a few redraws
        app.processEvents()
    window.grab().save(str(out / "dashboard.png"))
    window.tabs.setCurrentWidget(window.diagram)
    window.diagram._on_task_clicked("worker-0")
    app.processEvents()
    window.grab().save(str(out / "diagram.png"))
    window.run_control.stop()  # Stop without its question (nobody answers it here)
    wait(lambda: not window.session.active, 60, "the run to stop")
    first = window.session.run.run_id

    window.tabs.setCurrentWidget(window.dashboard)
    window.setup.epochs.setValue(4)
    window.act_start.trigger()
    wait(lambda: window.session.run is not None and window.session.run.run_id != first, 120, "the second run")
    second = window.session.run.run_id
    wait(lambda: not window.session.active, 300, "the second run to end")
    panel = window.runs_panel
    window.tabs.setCurrentWidget(panel)
    panel.refresh()
    wait(lambda: panel.table.rowCount() == 2, 30, "the runs list")
    panel.select(second)
    panel.open_button.click()
    wait(lambda: window.dashboard.store.points("worker-0", "loss") > 0, 60, "the second run's history")
    panel.select(first)
    panel.compare_button.click()
    wait(lambda: window.dashboard.overlay is not None, 60, "the first run's history to compare")
    window.tabs.setCurrentWidget(window.dashboard)
    end = time.monotonic() + 1.5
    while time.monotonic() < end:  # a few redraws
        app.processEvents()
    window.grab().save(str(out / "compare.png"))
    window.tabs.setCurrentWidget(panel)
    app.processEvents()
    window.grab().save(str(out / "runs.png"))
    window.files.dirty = False
    window.close()
    print(f"wrote dashboard.png, diagram.png, runs.png and compare.png in {out}")


if __name__ == "__main__":
    main()
