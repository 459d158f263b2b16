"""The window on the screens people have, 1280×720 and 1440×900: offscreen at each size, and on a real X server
(Xvfb) of each size, where the window sizes itself to the screen. During a run the plots have at least half of
the window each way; a failure with a long message changes no layout and puts nothing off the screen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QGuiApplication

from console.gui.main_window import MainWindow
from console.profiles import Profiles
from tests.console.gui.conftest import save_shot
from tests.helpers.synthetic import started_record, step_record

ROOT = Path(__file__).resolve().parents[3]
SIZES = ((1280, 720), (1440, 900))
LONG_FAILURE = ("worker-1 on local: error in the training code at trainer/model.py:88 (`logits = "
                "tf.keras.layers.Dense(num_classes)(features)`): ValueError: Input 0 of layer 'dense_2' is "
                "incompatible with the layer: expected axis -1 of input shape to have value 512, but received input "
                "with shape (None, 256) " * 3 + "; fix it there, then start the run again; a restart would fail the "
                "same way")


def shown_run(qtbot, homes, size=None) -> MainWindow:
    """The window (at ``size``, else as it sized itself to its screen) showing a live run of two workers."""
    import random

    window = MainWindow(profiles=Profiles(homes / "profiles.json"))
    qtbot.addWidget(window)
    if size is not None:
        window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    board = window.dashboard
    store = window.session.store
    board.set_store(store, ["worker-0", "worker-1"], live=True)
    window.run_control.run_shown.emit()  # as a start does: the setup folds away for the plots
    rng = random.Random(2)
    for w in range(2):
        store.ingest(f"worker-{w}", [started_record(w, 2, 200, 50)]
                     + [step_record(w, g, 50, rng) for g in range(1, 41)])
    qtbot.waitUntil(lambda: board.plot_stack.currentWidget() is board.plot_scroll and bool(board._layout_plots),
                    timeout=30_000)
    return window


def plots_take_half(window) -> bool:
    area = window.dashboard.plot_stack
    return area.width() >= window.width() / 2 and area.height() >= window.height() / 2


def check_the_window(qtbot, window, shots, name: str) -> None:
    board = window.dashboard
    qtbot.waitUntil(lambda: plots_take_half(window), timeout=30_000)
    events, least, size = board.split.sizes()[1], window.minimumSizeHint(), window.size()
    remembered = board.view()["events_width"]
    window.session.store.set_state("worker-1", "failed", LONG_FAILURE)
    qtbot.waitUntil(lambda: board.failure_view.isVisible(), timeout=30_000)
    qtbot.waitUntil(lambda: plots_take_half(window), timeout=30_000)
    assert window.size() == size and board.split.sizes()[1] == events and board.view()["events_width"] == remembered
    assert window.minimumSizeHint().width() <= least.width() <= window.width(), "the failure widened nothing"
    corner = board.events_view.mapTo(window, board.events_view.rect().bottomRight())
    assert corner.x() < window.width() and corner.y() < window.height(), "Events/Logs on the screen"
    badge = board.progress_view.badges["worker-1"]
    qtbot.waitUntil(lambda: badge.shown_text().endswith("…"), timeout=30_000)  # laid out: cut to its room
    save_shot(window, shots, name)


@pytest.mark.parametrize("size", SIZES, ids=["1280x720", "1440x900"])
def test_the_window_at_each_size_gives_the_plots_the_room_and_keeps_its_layout_on_a_failure(qtbot, gui_homes, shots,
                                                                                          size):
    """Offscreen: the window set to each size."""
    window = shown_run(qtbot, gui_homes, size)
    check_the_window(qtbot, window, shots, f"screen-{size[0]}x{size[1]}-failed")
    window.close()


@pytest.mark.parametrize("size", SIZES, ids=["1280x720", "1440x900"])
def test_the_setup_panel_fits_its_width_for_the_trainer_and_a_script(qtbot, gui_homes, shots, size):
    """The setup side panel scrolls up and down, never sideways: every row fits its width (it had a row of five
    host buttons, a long check box and a row of five restart settings wider than the panel)."""
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    panel = window.setup_panel
    seen: list[tuple] = []

    def settled(*state) -> bool:
        """Laid out: the panel's geometry the same over several turns of the event loop (a change of rows takes
        the scroll area more than one)."""
        seen.append(state)
        return len(seen) >= 5 and len(set(seen[-5:])) == 1

    for workload in ("digits", "script"):
        seen.clear()
        window.setup.workload.setCurrentText(workload)
        qtbot.waitUntil(lambda: window.setup.capture.isVisible() == (workload == "script"), timeout=10_000)
        assert window.setup.minimumSizeHint().width() <= panel.viewport().width(), workload
        qtbot.waitUntil(lambda: settled(window.setup.width(), window.setup.height(),
                                        panel.verticalScrollBar().isVisible()), timeout=10_000)
        assert not panel.horizontalScrollBar().isVisible(), workload
        save_shot(window, shots, f"setup-{workload}-{size[0]}x{size[1]}")
    window.files.set_dirty(False)  # the workload changed: closing would ask to save
    window.close()


def test_on_the_screen_it_opens_on(qtbot, gui_homes, shots):
    """As it opens on its screen (a real one under Xvfb, below): it sizes itself to fit, and the rest holds."""
    if QGuiApplication.platformName() == "offscreen":
        return  # the offscreen screen is no screen people have: the test above sets each size
    window = shown_run(qtbot, gui_homes)
    screen = window.screen().availableGeometry()
    assert window.frameGeometry().width() <= screen.width() and window.frameGeometry().height() <= screen.height()
    check_the_window(qtbot, window, shots, f"xvfb-{screen.width()}x{screen.height()}-failed")
    window.close()


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES, ids=["1280x720", "1440x900"])
def test_on_a_real_x_server_of_each_size(tmp_path, size):
    """The test above in a process of its own on an Xvfb screen of ``size`` (Qt's xcb platform, a real X server)."""
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", "1", "-screen", "0", f"{size[0]}x{size[1]}x24", "-nolisten",
                             "tcp"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        display = xvfb.stdout.readline().strip()
        assert display.isdigit(), "Xvfb did not start"
        env = dict(os.environ, DISPLAY=f":{display}", QT_QPA_PLATFORM="xcb", TFCC_SCREENSHOTS=str(tmp_path))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                               f"{Path(__file__).relative_to(ROOT)}::test_on_the_screen_it_opens_on"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert (tmp_path / f"xvfb-{size[0]}x{size[1]}-failed.png").is_file()
    finally:
        xvfb.terminate()
        xvfb.wait(30)
