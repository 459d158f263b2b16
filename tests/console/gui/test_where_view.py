"""The window's "Where are they?" (console/gui/where_view.py): on a real run of a user's script whose worker-1 waits
for data that never comes, the button asks every task off the window's thread and the view names worker-1 at its
line of the script, each task's stack a click away; a task's right click in the diagram asks too; a hang the stall
watchdog found (a 'where' event) is shown the same way."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from console import cluster as cl
from console import hangs
from console.gui.colors import ALARM
from console.gui.main_window import MainWindow
from console.gui.where_view import ASKING, WhereView
from console.profiles import Profiles
from console.run.runner import Run
from console.states import SessionKind
from tests.console.gui.conftest import save_shot
from tests.console.test_hangs import LIB, SITE, WATCHER, answer, fitting, work

# A user's script on two workers (no TensorFlow needed to hang): worker-0 waits for its peers in its step, worker-1
# has a thread there too, but its main thread waits for data that never comes. It says so just before it waits.
STUCK = """\
import json, os, threading

peers = threading.Event()
data = threading.Event()


def step():
    peers.wait(600)  # every worker waits here for the others


def next_batch():
    print("waiting for the next batch", flush=True)
    data.wait(600)  # the data that never comes


if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    threading.Thread(target=step, daemon=True).start()
    next_batch()
else:
    print("waiting for the peers", flush=True)
    step()
"""
STEP_LINE = 1 + STUCK.splitlines().index("    peers.wait(600)  # every worker waits here for the others")
DATA_LINE = 1 + STUCK.splitlines().index("    data.wait(600)  # the data that never comes")
STUCK_WORDS = f"worker-1 is stuck in stuck.py:{DATA_LINE} (`data.wait(600)`)"


def window_on(qtbot, gui_homes, training: cl.Training, size=(1440, 900)) -> MainWindow:
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    window.resize(*size)
    window.show()
    window.set_cluster(cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                                  training), None)
    return window


def fits_in(widget, window) -> bool:
    """``widget`` is shown whole inside ``window``: nothing of it cut by the window's edge or squeezed."""
    top_left = widget.mapTo(window, QPoint(0, 0))
    whole = not widget.wordWrap() or widget.height() >= widget.heightForWidth(widget.width())
    return (widget.isVisible() and whole and top_left.x() >= 0 and top_left.y() >= 0
            and top_left.x() + widget.width() <= window.width() and top_left.y() + widget.height() <= window.height())


def click_task(qtbot, view: WhereView, task: str) -> None:
    item = next(view.tasks.item(i) for i in range(view.tasks.count()) if view.tasks.item(i).data(Qt.UserRole) == task)
    qtbot.mouseClick(view.tasks.viewport(), Qt.LeftButton, pos=view.tasks.visualItemRect(item).center())


def test_where_are_they_names_the_stuck_worker_at_its_line_and_shows_its_stack(qtbot, gui_homes, shots, dialogs,
                                                                                request):
    script = gui_homes / "stuck.py"
    script.write_text(STUCK)
    window = window_on(qtbot, gui_homes, cl.Training(script=str(script)))
    view = window.dashboard.where_view
    assert not view.button.isEnabled() and view.isHidden()  # no run yet: nothing to ask
    assert window.diagram.task_menu("worker-1") is None
    window.act_start.trigger()
    qtbot.waitUntil(lambda: window.session.core is not None, timeout=30_000)
    started = window.session.core
    request.addfinalizer(lambda: started.run.stop_each(grace=0))  # its tasks wait for ten minutes: whatever fails
    assert view.button.isEnabled()  # a run goes on: it may be asked, before it trains (a script that never does)
    logs = window.dashboard.events_view.log_views
    qtbot.waitUntil(lambda: "waiting for the next batch" in logs["worker-1"].toPlainText() if "worker-1" in logs
                    else False, timeout=60_000)
    qtbot.waitUntil(lambda: "waiting for the peers" in logs["worker-0"].toPlainText() if "worker-0" in logs
                    else False, timeout=30_000)

    qtbot.mouseClick(view.button, Qt.LeftButton)
    assert view.isVisible() and view.status.text() == ASKING and not view.button.isEnabled()  # the window waits not
    qtbot.waitUntil(lambda: bool(view.lines), timeout=60_000)
    assert view.verdict.text() == STUCK_WORDS
    assert view.lines == [(STUCK_WORDS, True), (f"worker-0 is in stuck.py:{STEP_LINE} (`peers.wait(600)`)", False)]
    assert f"color:{ALARM}" in view.groups.text().split("<br>")[0]  # the stuck group in the alarm colour
    assert view.status.text().startswith("Asked at ") and view.button.isEnabled()
    assert window.statusBar().currentMessage() == f"Where are they? {STUCK_WORDS}"
    assert view.selected_task() == "worker-1"  # the stuck one's stack first
    click_task(qtbot, view, "worker-0")
    assert f"  > stuck.py:{STEP_LINE} in step    peers.wait(600)" in view.stack.toPlainText().splitlines()
    click_task(qtbot, view, "worker-1")
    stack = view.stack.toPlainText().splitlines()
    assert stack[0] == "worker-1 on here: stuck.py:" + f"{DATA_LINE} (`data.wait(600)`)"
    assert f"  > stuck.py:{DATA_LINE} in next_batch    data.wait(600)" in stack, stack
    assert not any("capture.py" in line for line in stack), stack  # tfcc's frames folded
    assert not any(t.ended for t in window.session.run.tasks)  # asked, not disturbed

    for size, name in (((1440, 900), "window-where-1440x900"), ((1280, 720), "window-where-1280x720")):
        window.resize(*size)
        QApplication.processEvents()  # the layout at this size
        for part in (view.verdict, view.groups, view.status):
            assert fits_in(part, window), (size, part.objectName() or part.text()[:40])
        assert view.stack.height() >= 100 and view.tasks.height() >= 100, size
        save_shot(window, shots, name)

    # A task's right click in the diagram asks again, in the Dashboard, with that task's stack shown.
    window.tabs.setCurrentWidget(window.diagram)
    menu = window.diagram.task_menu("worker-0")
    assert [a.text() for a in menu.actions()] == ["Where are they?"]
    menu.actions()[0].trigger()
    assert window.tabs.currentWidget() is window.dashboard and view.status.text() == ASKING
    qtbot.waitUntil(lambda: not view.waiting, timeout=60_000)
    assert view.selected_task() == "worker-0" and view.verdict.text() == STUCK_WORDS
    assert view.stack.toPlainText().startswith(f"worker-0 on here: stuck.py:{STEP_LINE}")

    dialogs.answer("QMessageBox.question", QMessageBox.Yes)  # Stop the run? Yes
    window.act_stop.trigger()
    qtbot.waitUntil(lambda: not window.session.active, timeout=60_000)
    qtbot.waitUntil(lambda: not view.button.isEnabled(), timeout=30_000)  # ended: nothing to ask
    assert not view.again_button.isEnabled() and window.diagram.task_menu("worker-0") is None
    assert view.verdict.text() == STUCK_WORDS  # what was found stays to read
    window.files.dirty = False
    window.close()


def test_a_hang_the_stall_watchdog_found_is_shown_from_its_where_event(qtbot, gui_homes, tmp_path):
    """The session's 'where' event (what the stall watchdog says when it calls a hang): its report's dict is shown,
    the stuck worker in the alarm colour, each task's stack a click away."""
    (tmp_path / "main.py").write_text("\n" * 56 + "    model.fit(dataset, epochs=args.epochs)\n")
    (tmp_path / "data.py").write_text("\n" * 41 + "        release.wait()  # never set\n")
    generator = (False, [(f"{LIB}/threading.py", 629, "wait"), (f"{work('worker-1')}/data.py", 42, "batches"),
                         (f"{SITE}/tensorflow/python/ops/script_ops.py", 269, "__call__")])
    report = hangs.read([("worker-0", "here", answer("worker-0", fitting("worker-0"), WATCHER)),
                         ("worker-1", "here", answer("worker-1", fitting("worker-1"), generator, WATCHER))],
                        tmp_path, silent={"worker-1": 63.2})
    window = window_on(qtbot, gui_homes, cl.Training(script=str(tmp_path / "main.py")))
    bridge = window.session
    bridge.core = core = bridge._session(Run(window.cluster, "hung"))  # a session followed: what it says is shown
    view = window.dashboard.where_view
    with qtbot.waitSignal(bridge.hang_located, timeout=5_000):
        core._say(SessionKind.WHERE, "where the tasks are: " + "; ".join(report.lines), {"where": report.as_dict()})
    assert view.isVisible() and view.status.text().startswith("Found by the stall watchdog")
    assert view.verdict.text() == report.verdict
    assert view.lines == [(report.lines[0], True), (report.lines[1], False)]
    assert window.statusBar().currentMessage().startswith("where the tasks are: worker-1 is stuck in data.py:42")
    assert view.selected_task() == "worker-1"
    assert "  > data.py:42 in batches    release.wait()" in view.stack.toPlainText().splitlines()
    click_task(qtbot, view, "worker-0")
    assert "  > main.py:57 in main    model.fit(dataset, epochs=args.epochs)" in view.stack.toPlainText()
    bridge.core = None
    window.files.dirty = False
    window.close()


def test_a_refusal_says_what_to_do_and_an_older_report_is_read_by_its_stuck_tasks(qtbot):
    view = WhereView()
    qtbot.addWidget(view)
    view.set_available(True)
    with qtbot.waitSignal(view.asked):
        qtbot.mouseClick(view.button, Qt.LeftButton)
    assert view.waiting and not view.button.isEnabled() and view.verdict.text() == ASKING
    view.refused("host here does not answer; check that it is up, then ask again")
    assert view.button.isEnabled() and view.again_button.isEnabled() and view.verdict.text() == ""
    assert view.status.text() == "host here does not answer; check that it is up, then ask again"
    # A report kept before reports kept their groups: its lines are marked by the stuck tasks they start with; a
    # host's words are shown as they are, never as markup.
    view.show_report({"verdict": "", "stuck": ["worker-1"], "lines": ["worker-1 is stuck in <b>x.py:3</b>",
                                                                     "worker-0 is in x.py:9"],
                      "tasks": [{"task": "worker-0", "host": "h", "state": "answered", "stack": ["main thread:"]},
                                {"task": "worker-1", "host": "h", "state": "stopped", "stack": ["is stopped"]}]})
    assert view.lines == [("worker-1 is stuck in <b>x.py:3</b>", True), ("worker-0 is in x.py:9", False)]
    assert "&lt;b&gt;x.py:3&lt;/b&gt;" in view.groups.text()
    assert view.verdict.text().startswith("Nothing stands out")
    assert [view.tasks.item(i).text() for i in range(view.tasks.count())] == ["worker-0", "worker-1   stuck"]
    view.clear()
    assert view.isHidden() and view.lines == [] and view.tasks.count() == 0
