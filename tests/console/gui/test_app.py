"""Opening the window: what a machine needs first (a display, Qt's xcb libraries), and the window's error boundary."""

from __future__ import annotations

import os
import re
import gc
import subprocess
import sys
import threading
from pathlib import Path

import PySide6
import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from console.errors import TfccError
from console.gui import app
from console.gui.main_window import MainWindow

ROOT = Path(__file__).resolve().parents[3]
XCB_PLUGIN = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Qt's xcb plugin is Linux's")
def test_the_xcb_platform_plugin_finds_every_library_it_needs():
    """What scripts/start and scripts/test install from Debian is all the real window needs."""
    assert XCB_PLUGIN.exists(), f"PySide6 has no xcb plugin at {XCB_PLUGIN}"
    ldd = subprocess.run(["ldd", str(XCB_PLUGIN)], capture_output=True, text=True, timeout=30)
    missing = sorted({line.split()[0] for line in ldd.stdout.splitlines() if "not found" in line})
    assert not missing, f"missing for {XCB_PLUGIN.name}: {missing}; add their packages to scripts/debian-packages.sh"


def test_without_a_display_tfcc_says_how_to_go_on_instead_of_aborting(tmp_path):
    """Plain ``tfcc`` where there is no display: exit 2 and one line naming the ways forward, not Qt's abort."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env.update(HOME=str(tmp_path / "home"), TFCC_CONSOLE_HOME=str(tmp_path / "console-home"))
    tfcc = Path(sys.executable).parent / "tfcc"
    done = subprocess.run([str(tfcc)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "qt.qpa" not in done.stderr, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("tfcc: error: no display to open the window on"), line
    for way in ("desktop session", "ssh -X", f"xvfb-run {tfcc}`", f"`{tfcc} run`"):  # tfcc is not on PATH here
        assert way in line, (way, line)
    env["PATH"] = f"{tfcc.parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["tfcc"], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and "`xvfb-run tfcc`" in done.stderr and "`tfcc run`" in done.stderr, done.stderr


@pytest.mark.parametrize("env", [
    {"QT_QPA_PLATFORM": "offscreen"},
    {"QT_QPA_PLATFORM": "vnc:size=800x600"},
    {"QT_QPA_PLATFORM": "xcb;minimal"},
    {"WAYLAND_DISPLAY": "wayland-0"},
])
def test_platforms_that_need_no_x_display_pass_the_check(env):
    app.check_platform(env)


@pytest.mark.parametrize("env", [{}, {"QT_QPA_PLATFORM": "xcb"}, {"QT_QPA_PLATFORM": "xcb", "WAYLAND_DISPLAY": "w-0"}])
def test_no_display_for_the_platform_is_a_tfcc_error(env):
    with pytest.raises(TfccError, match="no display to open the window on"):
        app.check_platform(env)


def test_missing_xcb_libraries_name_the_apt_get_line(monkeypatch):
    monkeypatch.setattr(app, "missing_libraries", lambda path: ["libxcb-icccm.so.4", "libxkbcommon-x11.so.0"])
    with pytest.raises(TfccError) as raised:
        app.check_platform({"DISPLAY": ":0"})
    message = str(raised.value)
    assert "libxcb-icccm.so.4, libxkbcommon-x11.so.0" in message
    assert "sudo apt-get install -y libxcb-icccm4 libxkbcommon-x11-0" in message and "bash scripts/start" in message
    app.check_platform({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"})  # not xcb: its libraries do not matter


def test_ldd_output_gives_the_missing_libraries(monkeypatch):
    out = ("\tlinux-vdso.so.1 (0x00007ffd)\n"
           "\tlibQt6XcbQpa.so.6 => /x/Qt/lib/libQt6XcbQpa.so.6 (0x00007f)\n"
           "\tlibxcb-icccm.so.4 => not found\n"
           "\tlibxcb-keysyms.so.1 => not found\n"
           "\tlibxcb-icccm.so.4 => not found\n")
    assert app.parse_ldd(out) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    assert app.missing_libraries(XCB_PLUGIN) == []  # this machine has them (the test above)
    assert app.missing_libraries(Path("/no/such/plugin.so")) == []


def test_the_debian_package_of_each_library_is_the_one_the_set_up_scripts_install():
    listed = re.findall(r'^\s*"(\S+) (\S+\.so\.\d+)"', (ROOT / "scripts" / "debian-packages.sh").read_text(), re.M)
    assert len(listed) > 10
    assert [(app.debian_package(soname), soname) for _, soname in listed] == listed


@pytest.mark.qt_no_exception_capture  # the window's own hook is under test
def test_an_unexpected_error_in_a_slot_is_one_line_in_the_window_and_the_log(qtbot, gui_homes, monkeypatch, capfd):
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # main replaces it; restored after the test
    monkeypatch.setattr(app, "configure_process", lambda: None)
    monkeypatch.setattr(app.gc, "freeze", lambda: None)
    opened = []  # main returns at once, keeping its window alive here; the test runs the loop

    def run_loop(*_):
        opened.extend(w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible())
        return 0

    monkeypatch.setattr(QApplication, "exec", run_loop)
    assert app.main() == 0
    (window,) = opened
    qtbot.addWidget(window)

    def boom():
        raise ValueError("boom")

    QTimer.singleShot(0, boom)
    qtbot.waitUntil(lambda: "unexpected ValueError: boom" in window.statusBar().currentMessage(), timeout=30_000)
    log = gui_homes / "console-home" / "tfcc.log"
    assert f"the details are in {log}" in window.statusBar().currentMessage()
    assert "Traceback" in log.read_text() and "ValueError: boom" in log.read_text()
    box = window.error_box
    assert box.isVisible() and "unexpected ValueError: boom" in box.text()
    err = capfd.readouterr().err
    assert "tfcc: error: unexpected ValueError: boom" in err and "Traceback" not in err
    QTimer.singleShot(0, boom)  # a second one: the same box says it, no pile of boxes
    qtbot.waitUntil(lambda: "(2 errors" in box.text(), timeout=30_000)
    box.close()


def test_a_display_with_no_x_server_is_a_tfcc_error_not_an_abort():
    """A stale DISPLAY (an ssh session without -X, a stopped Xvfb): Qt would abort; tfcc says why."""
    with pytest.raises(TfccError, match="cannot open the X display ':4321' .*no X server answers"):
        app.check_platform({"DISPLAY": ":4321"})


def test_garbage_is_collected_on_the_gui_thread_only_however_much_other_threads_allocate(qtbot):
    """Python collects cycles in whichever thread allocates; in an SSH or follow thread that destroyed
    the window's Qt objects off the GUI thread (a CI run hung 15 minutes). The window's process
    collects on its GUI thread's timer instead."""
    app.configure_process()
    collected_on: list[int] = []

    def seen(phase, info):
        if phase == "start":
            collected_on.append(threading.get_ident())

    def churn():  # what a thread replaying a run's history does: allocate, some of it in cycles
        for _ in range(50_000):
            cycle: list = []
            cycle.append(cycle)

    gc.callbacks.append(seen)
    try:
        worker = threading.Thread(target=churn)
        worker.start()
        worker.join(timeout=60)
        qtbot.waitUntil(lambda: bool(collected_on), timeout=30_000)  # the GUI thread's timer collected
    finally:
        gc.callbacks.remove(seen)
    assert set(collected_on) == {threading.get_ident()}


def test_the_window_says_when_its_thread_handles_events_and_when_it_waits(qtbot, monkeypatch):
    """console.threads.WINDOW is busy while the window's timers and paints work and idle once its loop waits;
    restore_process leaves it idle (the reading threads then never wait)."""

    from PySide6.QtCore import QEventLoop, QTimer

    from console import threads
    from console.gui import app as gui_app

    gui_app.configure_process()  # as the window's start-up does (the autouse fixture did already: once is kept)
    monkeypatch.setattr(threads.WINDOW, "hold", 60)  # busy until the loop's own word, however slow this machine
    from console.gui.dashboard import Dashboard
    from console.store.metrics import MetricsStore

    board = Dashboard(MetricsStore())  # a timer of the window's at work: busy till the loop waits again
    qtbot.addWidget(board)
    board.store.version += 1
    board._on_timer_timeout()
    assert threads.WINDOW.is_busy()
    loop = QEventLoop()  # the window's loop (QTest's wait never waits: it polls)
    QTimer.singleShot(20, loop.quit)
    loop.exec()
    assert not threads.WINDOW.is_busy(), "the loop waited: idle"
    board.set_store(MetricsStore(), ["worker-0"], live=True)  # a run: its plots, not the empty state
    board.show()
    qtbot.waitExposed(board)
    threads.WINDOW.idle()
    board.plot_area.viewport().update()
    painted = []
    real = type(board.plot_area).__mro__[1].paintEvent

    def paint(view, event):
        painted.append(threads.WINDOW.is_busy())
        real(view, event)

    type(board.plot_area).__mro__[1].paintEvent = paint  # what the plots' paint finds: busy already
    try:
        qtbot.waitUntil(lambda: bool(painted), timeout=30_000)
    finally:
        type(board.plot_area).__mro__[1].paintEvent = real
    assert painted[0] is True
    gui_app.restore_process()
    assert not threads.WINDOW.is_busy()
    gui_app.configure_process()
