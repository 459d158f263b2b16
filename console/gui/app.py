"""Open the tfcc window: ``tfcc`` or ``tfcc gui [CLUSTER]``."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
from pathlib import Path

from console import memory
from console.errors import TfccError, describe, log_to_file

GIL_SWITCH_SECONDS = 0.0001
DEFAULT_SWITCH_SECONDS = sys.getswitchinterval()
GC_INTERVAL_SECONDS = 0.5  # how often the GUI thread collects garbage
_collector = None  # the GUI thread's garbage collector, once configure_process ran
_dispatcher = None  # the GUI thread's event dispatcher, once it says when it wakes (configure_process)
# Qt platforms that draw without a display server (QT_QPA_PLATFORM=offscreen for tests, vnc, …).
NO_DISPLAY_PLATFORMS = {"offscreen", "minimal", "minimalegl", "vnc", "linuxfb", "eglfs", "vkkhrdisplay"}


class DisplayError(TfccError):
    """The window cannot open on this machine as it is; the message says what to do."""


def configure_process() -> None:
    """Process-wide settings of the window; call it once the QApplication exists.

    Follow threads catching up on a run's history are busy in Python, and PySide6 gives the
    GIL up on every call into Qt: at Python's default 5 ms switch interval, one redraw (a few
    hundred Qt calls) then waited seconds for the GIL. At 1 ms the worst stall while 32
    workers' histories stream in fell from about 2 s to about 0.6 s (bench/dashboard_load.py);
    at 0.1 ms a hostile host's floods stall the window under 100 ms (bench/hostile_host.py: at
    1 ms, 120-190 ms), the reading threads giving way while it works (console.threads).

    Python's cyclic garbage collector runs in whichever thread happens to allocate past its
    threshold. In a follow, SSH or job thread it destroys the window's Qt objects that sit in
    reference cycles (widgets, timers, pyqtgraph items) off the GUI thread, which crashes Qt or
    deadlocks it with the GIL held (a CI run hung 15 minutes with the GUI thread in a QPainter
    and an SSH thread in a class statement). So automatic collection is off and the GUI thread
    collects on a timer, as pyqtgraph recommends (its GarbageCollector).
    """
    global _collector
    memory.return_freed_arrays()  # a store the window lets go (another run, a reattach) goes back to the system
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    _say_when_awake()
    # What Python imports on first use while a run's first numbers come (pyqtgraph's numpy.ma; a host name's
    # encodings.idna on a follow's thread, which holds the import lock): here, at start, not mid-frame (a 30-60
    # ms stall of the window's thread, bench/hostile_host.py --why).
    import encodings.idna  # noqa: F401
    import numpy.ma  # noqa: F401
    if _collector is None:
        from pyqtgraph.util.garbage_collector import GarbageCollector

        _collector = GarbageCollector(interval=GC_INTERVAL_SECONDS)


def _say_when_awake() -> None:
    """The console's reading threads give way while this thread works (console.threads): Qt's event dispatcher
    says when its loop is about to wait again (the window's timers and paints say when they begin)."""
    global _dispatcher
    from PySide6.QtCore import QAbstractEventDispatcher, Qt

    from console import threads

    dispatcher = QAbstractEventDispatcher.instance()
    if dispatcher is None or dispatcher is _dispatcher:
        return
    dispatcher.aboutToBlock.connect(threads.WINDOW.idle, Qt.DirectConnection)
    _dispatcher = dispatcher


def restore_process() -> None:
    """Undo ``configure_process`` (tests that share one process with code that is not Qt's)."""
    global _collector
    if _collector is not None:
        _collector.timer.stop()
        _collector = None
        gc.enable()
        gc.collect()  # here, on the GUI thread: what waited for the timer
    sys.setswitchinterval(DEFAULT_SWITCH_SECONDS)
    global _dispatcher
    if _dispatcher is not None:
        from console import threads

        _dispatcher.aboutToBlock.disconnect(threads.WINDOW.idle)
        _dispatcher = None
        threads.WINDOW.idle()


# ------------------------------------------------------------------ before any QApplication

def check_platform(env=None) -> None:
    """Raise ``DisplayError`` where Qt would abort the process (exit 134) instead of opening the window.

    Qt needs a display for its xcb (X11) and wayland platforms and gives up with an abort
    when it has none, or when the xcb plugin's libraries are missing; say why, and the ways
    forward, before any QApplication exists.
    """
    env = os.environ if env is None else env
    platforms = [p.split(":")[0].strip().lower() for p in env.get("QT_QPA_PLATFORM", "").split(";") if p.strip()]
    if any(p in NO_DISPLAY_PLATFORMS for p in platforms):
        return
    x11, wayland = env.get("DISPLAY"), env.get("WAYLAND_DISPLAY")
    if not (x11 or wayland) or (platforms and set(platforms) <= {"xcb"} and not x11):
        raise DisplayError("no display to open the window on (DISPLAY and WAYLAND_DISPLAY are not set): "
                           + _ways_forward())
    xcb = platforms[0] == "xcb" if platforms else (x11 and not (wayland and env.get("XDG_SESSION_TYPE") == "wayland"))
    if xcb:
        missing = missing_libraries(xcb_plugin())
        if missing:
            packages = " ".join(dict.fromkeys(debian_package(m) for m in missing))
            raise DisplayError(
                f"Qt's X11 (xcb) platform cannot load: {', '.join(missing)} missing; install them with "
                f"`sudo apt-get install -y {packages}` (or run `bash scripts/start` in tfcc's folder, which "
                "installs everything the window needs)")
        problem = x_display_problem(x11)
        if problem:
            raise DisplayError(f"cannot open the X display {x11!r} (DISPLAY): {problem}; {_ways_forward()}")


def _ways_forward() -> str:
    tfcc = command_name()
    return (f"run tfcc in a desktop session, over `ssh -X`, or as `xvfb-run {tfcc}`; or use `{tfcc} run` "
            "for the same default run in this terminal")


def command_name() -> str:
    """How this person runs tfcc: ``tfcc`` when that is the one on PATH, else the path they ran
    (``.venv/bin/tfcc`` after ``bash scripts/start``)."""
    ran = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if ran is None or ran.name != "tfcc":
        return "tfcc"
    on_path = shutil.which("tfcc")
    if on_path and Path(on_path).resolve() == ran.resolve():
        return "tfcc"
    relative = os.path.relpath(ran.resolve(), Path.cwd())
    return relative if not relative.startswith("..") else str(ran.resolve())


def xcb_plugin() -> Path:
    import PySide6  # only the package's folder: no Qt library is loaded here

    return Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"


def missing_libraries(library: Path) -> list[str]:
    """The shared libraries ``library`` needs that the loader cannot find (by ``ldd``; [] when it cannot tell)."""
    ldd = shutil.which("ldd")
    if not (ldd and library.exists()):
        return []
    try:
        done = subprocess.run([ldd, str(library)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_ldd(done.stdout)


def x_display_problem(display: str) -> str | None:
    """Why libxcb cannot connect to ``display`` (a stale DISPLAY, no X server, no authority), or None."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("xcb")
    if not name:
        return None  # missing_libraries has said so
    xcb = ctypes.CDLL(name)
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    connection = xcb.xcb_connect(display.encode(), None)
    try:
        error = xcb.xcb_connection_has_error(connection)
    finally:
        xcb.xcb_disconnect(connection)
    if not error:
        return None
    return ("no X server answers there, or it refused this user (XAUTHORITY)" if error == 1  # XCB_CONN_ERROR
            else f"libxcb error {error}")


def parse_ldd(output: str) -> list[str]:
    """The "=> not found" libraries of ``ldd`` output, each once, in order."""
    return list(dict.fromkeys(line.split()[0] for line in output.splitlines() if line.rstrip().endswith("not found")))


def debian_package(soname: str) -> str:
    """The Debian package of a library, by Debian's naming policy (libfoo.so.1 -> libfoo1, libfoo-x11.so.0 -> libfoo-x11-0)."""
    name, _, version = soname.partition(".so.")
    name, version = name.lower(), version.split(".")[0]
    if name in ("libglib-2.0", "libgthread-2.0", "libgobject-2.0", "libgio-2.0"):
        return "libglib2.0-0"
    return f"{name}-{version}" if name[-1].isdigit() else f"{name}{version}"


# ------------------------------------------------------------------ the window

def install_error_boundary(window) -> None:
    """The window's one error boundary: an exception that escapes a slot becomes one line.

    The line (``console.errors.describe``: a tfcc error's own words, else the bug and the
    log file its traceback went to) goes to the status bar, a box that blocks nothing, and
    stderr; nothing prints a bare traceback.
    """
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QMessageBox

    count = [0]

    def hook(kind, exc, tb):
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, exc, tb)
            return
        if exc.__traceback__ is None:
            exc = exc.with_traceback(tb)
        line = describe(exc)
        print(f"tfcc: error: {line}", file=sys.stderr, flush=True)
        try:
            window.statusBar().showMessage(line)
            box = getattr(window, "error_box", None)
            if isinstance(box, QMessageBox) and box.isVisible() and box.property("tfcc_unexpected"):
                count[0] += 1  # one box, however many errors: a failing timer would open dozens
                box.setText(f"{line}\n\n({count[0]} errors since this box opened)")
                return
            count[0] = 1
            box = QMessageBox(QMessageBox.Critical, "tfcc: error", line, QMessageBox.Ok, window)
            box.setProperty("tfcc_unexpected", True)
            box.setAttribute(Qt.WA_DeleteOnClose)
            box.open()  # not exec(): nothing waits on it
            window.error_box = box
        except RuntimeError:  # the window is already gone: the line on stderr is all there is
            pass

    sys.excepthook = hook


def main(cluster_path: str | None = None) -> int:
    check_platform()  # before any QApplication: Qt would abort the process
    from PySide6.QtWidgets import QApplication

    import pyqtgraph as pg

    from console.gui.main_window import MainWindow

    log_to_file()  # as the CLI: warnings and tracebacks go to the log file
    pg.setConfigOptions(antialias=False, useOpenGL=False)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure_process()
    app.setApplicationName("tfcc")
    window = MainWindow(cluster_path)
    install_error_boundary(window)
    window.show()
    gc.freeze()  # what start-up made lives as long as the window: later collections skip it
    if cluster_path is None and window.files.path is None:
        window.run_control.look_for_runs(window.cluster)  # opening a profile looks by itself
    return app.exec()
