"""Make ready in the window's Check (console/gui/provision_view.py): a real check of a local host whose cluster file
asks for an [environment] not made there offers Make ready beside that problem; a click makes it off the window's
thread (the real agent, tiny stand-in wheels at the console's own versions, offline), a row per host follows it to
its end, and the check runs again and is ready; Cancel mid-push leaves the host not ready and says so."""

from __future__ import annotations

import importlib.metadata
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox, QProgressBar

from console import checks
from console import cluster as cl
from console import provision
from console.gui.colors import ALARM
from console.gui.main_window import MainWindow
from console.profiles import Profiles
from tests.console.gui.conftest import save_shot
from tests.console.gui.test_where_view import fits_in
from tests.helpers.wheels import console_stack_stand_ins, make_wheel

SIZES = ((1440, 900), (1280, 720))


@pytest.fixture
def homes(gui_homes, monkeypatch) -> Path:
    """The agent's home, the console's and its cache of locks and wheels, all the test's own (uv's cache too: the
    resolve here runs uv)."""
    monkeypatch.setenv("TFCC_HOME", str(gui_homes / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(gui_homes / "console-home"))
    monkeypatch.setenv(provision.CACHE_VARIABLE, str(gui_homes / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(gui_homes / "xdg-cache"))
    return gui_homes


def environment_cluster(folder: Path, *more: str) -> cl.Cluster:
    """One local host with two workers, and an [environment] of the console's TensorFlow stack (stand-ins),
    tfccdep 2.0 and ``more``, from a find_links folder alone (no index)."""
    wheels = folder / "wheels"
    console_stack_stand_ins(wheels)
    make_wheel(wheels, "tfccdep", "2.0")
    packages = ", ".join(f'"{name}"' for name in ["tfccdep==2.0", *more])
    path = folder / "cluster.toml"
    path.write_text(f"""
[[hosts]]
name = "here"
local = true

[[tasks]]
host = "here"

[[tasks]]
host = "here"

[environment]
tensorflow = "console"
index = ""
find_links = ["{wheels}"]
packages = [{packages}]
""")
    return cl.load(path)


def window_on(qtbot, homes: Path, cluster: cl.Cluster, size=SIZES[0]) -> MainWindow:
    window = MainWindow(profiles=Profiles(homes / "profiles.json"))
    qtbot.addWidget(window)
    window.resize(*size)
    window.show()
    window.set_cluster(cluster, None)
    return window


def checked(qtbot, window: MainWindow) -> checks.Report:
    """The Check run from the window, to its report."""
    with qtbot.waitSignal(window.check_control.checked, timeout=60_000):
        window.act_check.trigger()
    return window.setup.report


def on_screen(widget, window) -> bool:
    """``widget`` is shown inside ``window``, none of it cut by the window's edge."""
    corner = widget.mapTo(window, widget.rect().bottomRight())
    return widget.isVisible() and widget.mapTo(window, widget.rect().topLeft()).y() >= 0 \
        and corner.x() < window.width() and corner.y() < window.height()


def checked_again(qtbot, window: MainWindow, before: checks.Report) -> checks.Report:
    """The report of the check that Make ready ran by itself once it ended (a report other than ``before``)."""
    qtbot.waitUntil(lambda: not window.check_control.busy and window.setup.report is not None
                    and window.setup.report is not before, timeout=120_000)
    return window.setup.report


def row_of(view, host: str) -> int:
    return next(r for r in range(view.table.rowCount()) if view.table.item(r, 0).text() == host)


def test_make_ready_makes_the_environment_then_the_check_is_ready(qtbot, homes, shots):
    window = window_on(qtbot, homes, environment_cluster(homes))
    view = window.check_view.provision_view
    assert view.isHidden(), "nothing offered before a check"

    report = checked(qtbot, window)
    fixable = [p for p in report.problems if p.remedy == checks.MAKE_READY]
    assert [p.cause for p in fixable] == ["the cluster file's [environment] is not made on here yet"]
    page = window.check_view.details.toPlainText()
    assert "Not ready" in page and "\nMake ready (above) fixes it." in page
    assert view.button.isVisible() and view.button.isEnabled() and not view.cancel_button.isVisible()
    assert view.status.text().startswith("Make ready fixes the problem marked below")

    seen = []  # (stage, what the row's bar said) as each host's progress came, after the view drew it

    def on_progressed(result):
        bar = view.table.cellWidget(row_of(view, result.name), 2)
        seen.append((result.stage, bar.format() if isinstance(bar, QProgressBar) else None))

    window.check_control.provisioner.progressed.connect(on_progressed)
    qtbot.mouseClick(view.button, Qt.LeftButton)
    # The window waits on nothing: Make ready goes, Cancel is offered, Check and Start wait for it.
    assert not view.button.isVisible() and view.cancel_button.isVisible() and view.cancel_button.isEnabled()
    assert not window.act_check.isEnabled() and not window.act_start.isEnabled()
    assert view.status.text() == "Making the hosts ready…"
    qtbot.waitUntil(lambda: view.table.isVisible() and view.table.rowCount() == 1, timeout=60_000)  # a row a host

    qtbot.waitUntil(lambda: not view.running, timeout=120_000)  # after every host's progress
    stages = [stage for stage, _ in seen]
    assert stages[0] == provision.CONNECTING and stages[-1] == provision.MADE, stages
    assert {provision.RESOLVING, provision.FETCHING, provision.PUSHING, provision.INSTALLING} <= set(stages), stages
    pushing = [said for stage, said in seen if stage == provision.PUSHING]
    assert pushing and all(" of " in said for said in pushing), pushing  # the bar: bytes pushed of the bytes lacked
    row = row_of(view, "here")
    assert view.table.rowCount() == 1, "one row a host (two workers, one host)"
    assert view.table.item(row, 1).text() == "made"
    line = view.table.item(row, 3).text()
    assert line.startswith("made: 6 packages, Python ") and line.endswith(" pushed"), line
    assert view.table.item(row, 3).foreground().color().name() != ALARM

    # Then the check runs again by itself, and is ready: the host's tasks run in the environment made there.
    report = checked_again(qtbot, window, report)
    assert report.ready, [str(p) for p in report.problems]
    probe = report.hosts[0].probe
    assert probe["python_executable"].startswith(str(homes / "host-home" / "envs")), probe["python_executable"]
    version = importlib.metadata.version("tensorflow")
    assert probe["tensorflow"] == version
    page = window.check_view.details.toPlainText()
    assert "Ready to start" in page and version in page
    assert view.status.text().startswith("Every host is ready: 1 made, 0 had it already")
    assert not view.button.isVisible() and not view.cancel_button.isVisible()
    assert view.isVisible() and view.table.isVisible(), "the rows stay after the check they led to"
    assert window.act_check.isEnabled() and window.act_start.isEnabled()
    assert window.tabs.currentWidget() is window.check_view

    for size in SIZES:
        window.resize(*size)
        QApplication.processEvents()  # the layout at this size
        assert fits_in(view.status, window), size
        assert window.check_view.details.height() >= 100, size
        save_shot(window, shots, f"window-make-ready-end-{size[0]}x{size[1]}")

    # A Check the person asks for starts anew: the rows of the provision go, nothing is offered (all is ready).
    checked(qtbot, window)
    assert view.isHidden() and not view.results
    window.close()


def test_cancel_while_pushing_leaves_the_host_not_ready_and_says_cancelled(qtbot, homes, shots, monkeypatch):
    make_wheel(homes / "wheels", "tfccbig", "1.0", payload=80 << 20)  # a third of what goes: the push holds there
    window = window_on(qtbot, homes, environment_cluster(homes, "tfccbig==1.0"))
    view = window.check_view.provision_view

    # The push holds once a third of its bytes went (the big wheel), until the person's Cancel reached the
    # provision: a cancel that lands while it pushes, whatever the machine's pace.
    paused, cancelled = threading.Event(), threading.Event()
    real_upload, real_cancel = provision.upload_blobs, provision.Provision.cancel

    def upload_blobs(blobs, files, home, on_progress, **how):
        def progress(sent, total):
            on_progress(sent, total)
            if sent >= total // 3 and not paused.is_set():
                paused.set()
                assert cancelled.wait(60), "nobody cancelled"
        return real_upload(blobs, files, home, progress, **how)

    def cancel(self):
        real_cancel(self)
        cancelled.set()

    monkeypatch.setattr(provision, "upload_blobs", upload_blobs)
    monkeypatch.setattr(provision.Provision, "cancel", cancel)

    first = checked(qtbot, window)
    assert view.button.isVisible()
    qtbot.mouseClick(view.button, Qt.LeftButton)
    qtbot.waitUntil(paused.is_set, timeout=120_000)
    qtbot.waitUntil(lambda: "here" in view.results and view.results["here"].pushed > 0, timeout=30_000)
    row = row_of(view, "here")
    bar = view.table.cellWidget(row, 2)
    assert view.table.isVisible() and view.table.item(row, 1).text() == "pushing the wheels"
    assert isinstance(bar, QProgressBar) and 0 < bar.value() < bar.maximum() and " MB of " in bar.format()
    for size in SIZES:
        window.resize(*size)
        QApplication.processEvents()
        assert on_screen(view.cancel_button, window) and fits_in(view.status, window), size
        save_shot(window, shots, f"window-make-ready-pushing-{size[0]}x{size[1]}")

    qtbot.mouseClick(view.cancel_button, Qt.LeftButton)
    assert not view.cancel_button.isEnabled() and view.status.text().startswith("Cancelling")
    qtbot.waitUntil(lambda: not view.running, timeout=60_000)
    assert view.results["here"].stage == provision.CANCELLED and view.table.item(row, 1).text() == "cancelled"
    assert view.table.item(row, 3).text() == "cancelled: nothing half made is used; make it ready again"
    assert view.status.text().startswith("Make ready was cancelled: nothing half made is used")

    # The check runs again: the host is not ready, and Make ready is offered again.
    report = checked_again(qtbot, window, first)
    assert not report.ready
    assert [p.cause for p in report.problems if p.remedy == checks.MAKE_READY] == [
        "the cluster file's [environment] is not made on here yet"]
    assert "Not ready" in window.check_view.details.toPlainText()
    assert view.button.isVisible() and view.table.item(row, 1).text() == "cancelled"
    assert not any(p.name.startswith("spec-") for p in (homes / "host-home" / "envs").glob("*")), "nothing made"
    for size in SIZES:
        window.resize(*size)
        QApplication.processEvents()
        save_shot(window, shots, f"window-make-ready-cancelled-{size[0]}x{size[1]}")
    window.close()


def test_a_host_that_cannot_be_made_ready_says_why_in_the_alarm_colour(qtbot, homes):
    """A package no find_links folder holds: the host's line says why and what to do, in the alarm colour; the
    check runs again and offers Make ready again."""
    window = window_on(qtbot, homes, environment_cluster(homes, "tfccnowhere==1.0"))
    view = window.check_view.provision_view
    first = checked(qtbot, window)
    qtbot.mouseClick(view.button, Qt.LeftButton)
    checked_again(qtbot, window, first)
    row = row_of(view, "here")
    assert view.results["here"].stage == provision.FAILED and view.table.item(row, 1).text() == "FAILED"
    line = view.table.item(row, 3)
    assert line.text().startswith("no set of wheels for its platform") and "tfccnowhere" in line.text(), line.text()
    assert line.text().endswith("or set python for that host to another Python")
    assert line.toolTip() == line.text(), "the whole line, however narrow the column"
    assert {line.foreground().color().name(), view.table.item(row, 1).foreground().color().name()} == {ALARM}
    assert view.status.text().startswith("1 of 1 host(s) not ready (here): each one's line says why")
    assert ALARM in view.status.styleSheet()
    assert not window.setup.report.ready and view.button.isVisible()
    assert window.statusBar().currentMessage() == "1 problem(s) found; see the Check tab"
    window.set_cluster(cl.default(), None)  # another cluster: Make ready is for the hosts checked, offered no more
    assert view.button.isHidden() and window.check_control.cluster is None
    window.close()


def test_make_ready_that_cannot_run_says_why_in_one_line_and_is_offered_again(qtbot):
    """The view over a plain job: a provision that could not even begin says why, and the button comes back."""
    from console.checks import Problem
    from console.gui.jobs import ProvisionJob, Threads
    from console.gui.provision_view import ProvisionView

    job = ProvisionJob(Threads(), None)
    view = ProvisionView(job)
    qtbot.addWidget(view)  # (not shown: what it would show is what it does not hide)
    assert view.isHidden()
    view.offer([Problem("here", "the cluster file's [environment] is not made on here yet", "make it ready",
                        ("here",), remedy=checks.MAKE_READY)])
    assert not view.isHidden() and not view.button.isHidden()
    with qtbot.waitSignal(view.asked, timeout=1000):
        view.button.click()
    job.started.emit()
    assert view.button.isHidden() and not view.cancel_button.isHidden()
    job.failed.emit("[environment] requirements names /nowhere/req.txt, which cannot be read (No such file or "
                    "directory); give the path of a requirements file")
    assert view.status.text().startswith("Make ready could not run: [environment] requirements names /nowhere")
    assert ALARM in view.status.styleSheet()
    assert not view.button.isHidden() and view.cancel_button.isHidden()


def test_a_module_the_code_imports_that_the_host_lacks_is_offered_and_installed_with_the_rest(qtbot, homes, shots,
                                                                                              dialogs):
    """A user's script imports a package no host has: the Check's problem offers it (ticked) beside Make ready;
    Make ready adds it to the cluster's [environment] (an edit to save) and installs it with the rest; the check
    then finds it."""
    cluster = environment_cluster(homes)
    make_wheel(homes / "wheels", "tfccextra", "1.0")
    code = homes / "code"
    code.mkdir()
    (code / "train.py").write_text("import tfccextra\nimport tensorflow as tf\nprint(tfccextra.__version__)\n")
    cluster.training.script = str(code / "train.py")
    window = window_on(qtbot, homes, cluster)
    view = window.check_view.provision_view
    report = checked(qtbot, window)
    [offered] = [p for p in report.problems if p.package]
    assert offered.package == "tfccextra" and offered.remedy == checks.MAKE_READY
    [box] = [view.offers_layout.itemAt(i).widget() for i in range(view.offers_layout.count())
             if view.offers_layout.itemAt(i).widget() is not None]
    assert box.isVisible() and box.isChecked() and box.text() == "add tfccextra to [environment]"
    for size in SIZES:
        window.resize(*size)
        QApplication.processEvents()
        assert on_screen(box, window) and on_screen(view.button, window), size
        save_shot(window, shots, f"window-make-ready-offered-{size[0]}x{size[1]}")
    qtbot.mouseClick(view.button, Qt.LeftButton)
    assert window.cluster.environment.packages == ["tfccdep==2.0", "tfccextra"]
    assert window.windowTitle().endswith("*") or "*" in window.windowTitle(), window.windowTitle()
    report = checked_again(qtbot, window, report)
    assert report.ready, [str(p) for p in report.problems]
    assert view.results["here"].packages["tfccextra"] == "1.0"
    dialogs.answer("QMessageBox.question", QMessageBox.Discard)  # the edit is unsaved: closing asks
    window.close()


@pytest.mark.slow
def test_make_ready_on_two_ssh_hosts_with_no_route_out(qtbot, bare_ssh_hosts, homes, shots):
    """Two SSH test hosts whose Python has no TensorFlow and that reach no index: the Check says the environment
    is not made there, Make ready makes it on both (a row each), and the check is then ready with the same versions
    on both."""
    from tests.console.test_provision import cluster_file, offline

    bare_ssh_hosts.known_hosts(homes / "known_hosts")
    wheels = homes / "wheels"
    console_stack_stand_ins(wheels)
    make_wheel(wheels, "tfccdep", "2.0")
    window = window_on(qtbot, homes, cl.load(cluster_file(homes, bare_ssh_hosts, offline(wheels))))
    view = window.check_view.provision_view
    names = [h.name for h in bare_ssh_hosts.hosts]
    report = checked(qtbot, window)
    assert [str(p) for p in report.problems if p.remedy == checks.MAKE_READY] == [
        f"hosts: the cluster file's [environment] is not made on {', '.join(names)} yet; make the hosts ready "
        "(tfcc provision, or Make ready in the window)"]
    qtbot.mouseClick(view.button, Qt.LeftButton)
    report = checked_again(qtbot, window, report)
    assert [view.table.item(row_of(view, n), 1).text() for n in names] == ["made", "made"]
    assert report.ready, [str(p) for p in report.problems]
    versions = {(r.probe["tensorflow"], r.probe["tf_keras"], r.probe["python"]) for r in report.hosts}
    assert len(versions) == 1, versions
    for size in SIZES:
        window.resize(*size)
        QApplication.processEvents()
        save_shot(window, shots, f"window-make-ready-ssh-{size[0]}x{size[1]}")
    window.close()
