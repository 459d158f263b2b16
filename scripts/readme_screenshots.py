"""Take the README's screenshots: the window on the embedded default, real runs, at 1440x900 and 1280x720.

    python scripts/readme_screenshots.py [OUT_DIR]   (default docs/images; offscreen, no display needed)

Checks the embedded default's hosts (the Check tab); starts the two local digits workers from the window and grabs
the Dashboard in their third epoch and the Cluster tab; lets the run end and grabs the Dashboard after it; trains
two shorter runs (other batch sizes) to their ends, opens the first run and compares the other two with it (the
Runs tab and the Dashboard); runs a two-file script that fails after its first epoch and grabs the failure view.
Each view at both sizes: ``<view>-1440x900.png`` and ``<view>-1280x720.png``.
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
SIZES = ((1440, 900), (1280, 720))


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
    window.resize(*SIZES[0])
    window.show()
    written = []

    def settle(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # a few redraws
            app.processEvents()

    def wait(condition, seconds: float, what: str) -> None:
        end = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > end:
                raise SystemExit(f"gave up waiting for {what}")
            app.processEvents()

    def shoot(tab, name: str, before=None) -> None:
        window.tabs.setCurrentWidget(tab)
        for width, height in SIZES:
            window.resize(width, height)
            settle(0.6)
            if before is not None:
                before()
                settle(0.2)
            path = out / f"{name}-{width}x{height}.png"
            window.grab().save(str(path))
            written.append(path.name)
        window.resize(*SIZES[0])

    window.act_check.trigger()
    wait(lambda: not window.checking, 120, "the check")
    shoot(window.check_view, "check")

    window.setup.epochs.setValue(5)
    window.act_start.trigger()
    store = lambda: window.session.store  # noqa: E731
    wait(lambda: store().progress.get("worker-1") and store().progress["worker-1"].epoch >= 2, 300, "epoch 3")
    wait(lambda: window.run_control.started_event is not None, 30, "the started event")
    wait(lambda: store().points("worker-1", "sys:cpu_cores") >= 5, 30, "the system lane")
    shoot(window.dashboard, "dashboard-during")
    shoot(window.diagram, "cluster", before=lambda: window.diagram._on_task_clicked("worker-0"))
    first = window.session.run.run_id
    wait(lambda: not window.session.active, 600, "the first run's end")
    shoot(window.dashboard, "dashboard-after")

    others = []
    for batch in (32, 128):  # two more runs, to compare
        window.setup.epochs.setValue(3)
        window.setup.batch.setValue(batch)
        window.act_start.trigger()
        wait(lambda: window.session.run is not None and window.session.run.run_id not in [first, *others], 120,
             "the next run")
        others.append(window.session.run.run_id)
        wait(lambda: not window.session.active, 600, "the run's end")
    panel = window.runs_panel
    window.tabs.setCurrentWidget(panel)
    panel.refresh()
    wait(lambda: panel.table.rowCount() == 3, 60, "the runs list")
    panel.select(first)
    panel.open_button.click()
    wait(lambda: window.dashboard.run_header is not None and window.dashboard.run_header.run_id == first, 60,
         "the first run's history")
    for run_id in others:
        window.tabs.setCurrentWidget(panel)
        panel.select(run_id)
        panel.compare_button.click()
        wait(lambda: run_id in window.dashboard.compared, 60, f"run {run_id} to compare")
    shoot(panel, "runs")
    shoot(window.dashboard, "compare")

    # A script that fails (a NameError in its callback after the first epoch, on both workers): the failure view.
    script = ROOT / "tests" / "data" / "scripts" / "mwms_name_error" / "main.py"
    window.setup.workload.setCurrentText("script")
    window.setup.user_file.setText(str(script))
    window.setup.script_args.setText("--epochs 3")
    window.act_start.trigger()
    view = window.dashboard.failure_view
    wait(lambda: view.isVisible() and view.error is not None, 300, "the script's failure")
    wait(lambda: not window.session.active, 120, "the failed run's end")
    shoot(window.dashboard, "failed")
    window.files.dirty = False
    window.close()
    print(f"wrote {', '.join(written)} in {out}")


if __name__ == "__main__":
    main()
