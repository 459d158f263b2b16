"""The Runs panel in the window: finished runs listed with their numbers, opened with their whole history
(after a console restart too), two runs overlaid, a run deleted only after a yes, a live run never
replaced without asking, TensorBoard opened in the browser and stopped with the window."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QMessageBox

from console import catalog

from console.store import cache
from console.gui.main_window import MainWindow
from console.profiles import Profiles
from console.store import manifests
from tests.console.gui.conftest import save_shot
from console.gui.runs_panel import COLUMNS
from console.store import labels
from tests.helpers.scripted import ended_unfollowed, finished_run, scripted_cluster


def open_window(qtbot, homes) -> MainWindow:
    window = MainWindow(profiles=Profiles(homes / "profiles.json"))
    qtbot.addWidget(window)
    window.show()
    return window


def show_runs(qtbot, window, count: int) -> list[list[str]]:
    window.tabs.setCurrentWidget(window.runs_panel)  # shown: it lists the runs on a thread
    qtbot.waitUntil(lambda: len(window.runs_panel.rows()) == count, timeout=30_000)
    return window.runs_panel.rows()


def click(qtbot, button) -> None:
    assert button.isEnabled(), button.text()
    qtbot.mouseClick(button, Qt.LeftButton)


def overlaid_points(window, metric: str = "loss", run_id: str | None = None) -> list[int]:
    return [len(curve.getData()[0]) for (run, owner, m), curve in window.dashboard.overlay_curves.items()
            if m == metric and curve.getData()[0] is not None and run_id in (None, run)]


def test_finished_runs_are_listed_opened_and_several_compared(qtbot, gui_homes, monkeypatch, shots):
    finished_run(gui_homes, "run-a", epochs=2, steps=30)
    finished_run(gui_homes, "run-b", epochs=1, steps=20, seed=3.0)
    finished_run(gui_homes, "run-c", epochs=3, steps=30, seed=2.0)
    monkeypatch.setattr(catalog, "_replay", lambda *a, **k: pytest.fail("the cache is whole: no host is asked"))
    window = open_window(qtbot, gui_homes)
    rows = show_runs(qtbot, window, 3)[1:]
    assert [r[0] for r in rows] == ["run-b", "run-a"]  # the newest first
    col = {name: COLUMNS.index(name) for name in COLUMNS}
    assert [rows[1][col["State"]], rows[1][col["Cluster"]]] == ["finished", "here: worker-0, worker-1"]
    metrics = slice(col["Loss"], col["Val accuracy"] + 1)
    assert rows[1][metrics] == ["0.0167", "0.6000", "0.7000"]  # final loss, accuracy, val_accuracy
    assert rows[0][metrics] == ["0.1500", "0.5000", "0.6000"]
    assert rows[1][col["Start"]] != "-" and rows[1][col["Duration"]].count(":") == 2
    assert rows[1][col["Settings"]] == "script scripted.py, strategy auto"
    assert rows[1][col["Name"]] == rows[1][col["Notes"]] == ""

    # A run's name and notes are the person's: written in place, kept by this console, listed again
    panel = window.runs_panel
    with qtbot.waitSignal(panel.labelled, timeout=30_000):
        panel.table.item(2, COLUMNS.index("Name")).setText("baseline\x1b[31m, lr 1e-3")
    with qtbot.waitSignal(panel.labelled, timeout=30_000):
        panel.table.item(2, COLUMNS.index("Notes")).setText("the first one that converged")
    qtbot.waitUntil(lambda: labels.label("run-a") == {"name": "baseline[31m, lr 1e-3",
                                                      "notes": "the first one that converged"}, timeout=30_000)
    assert not panel.table.item(2, 0).flags() & Qt.ItemIsEditable and panel.table.item(2, 1).flags() & Qt.ItemIsEditable
    panel.refresh()
    qtbot.waitUntil(lambda: panel.rows()[2][col["Name"]] == "baseline[31m, lr 1e-3", timeout=30_000)
    assert panel.rows()[2][col["Notes"]] == "the first one that converged" and panel.rows()[0][col["Name"]] == ""

    window.runs_panel.select("run-a")
    click(qtbot, window.runs_panel.open_button)
    qtbot.waitUntil(lambda: window.dashboard.store.points("worker-0", "loss") == 60, timeout=30_000)
    store = window.dashboard.store
    assert store is not window.session.store and store.points("worker-1", "loss") == 60
    assert window.dashboard.order == ["worker-0", "worker-1"]
    assert sorted((e["task"], e["epoch"]) for e in store.epochs) == [
        ("worker-0", 0), ("worker-0", 1), ("worker-1", 0), ("worker-1", 1)]
    assert window.tabs.currentWidget() is window.dashboard

    window.tabs.setCurrentWidget(window.runs_panel)
    for run_id in ("run-b", "run-c"):  # two runs compared with run-a, each in its colour
        window.runs_panel.select(run_id)
        click(qtbot, window.runs_panel.compare_button)
        qtbot.waitUntil(lambda: run_id in window.dashboard.compared, timeout=30_000)
    assert window.tabs.currentWidget() is window.runs_panel, "the Runs tab stays: more can be compared"
    assert window.dashboard.compared["run-b"].points("worker-0", "loss") == 20
    assert window.dashboard.store is store  # run-a stays the one shown
    colours = window.runs_panel.compared_rows()
    assert set(colours) == {"run-b", "run-c"} and len(set(colours.values())) == 2
    assert colours["run-b"] == window.dashboard.compared_colour("run-b").name()
    save_shot(window, shots, "runs-compare-table")
    window.tabs.setCurrentWidget(window.dashboard)
    qtbot.waitUntil(lambda: 20 in overlaid_points(window, run_id="run-b") and
                    90 in overlaid_points(window, run_id="run-c"), timeout=30_000)  # drawn dashed behind run-a
    assert window.dashboard.chip_texts() == ["┅ run run-b  ✕", "┅ run run-c  ✕"]
    save_shot(window, shots, "runs-compare")
    window.dashboard.chips.itemAt(1).widget().click()  # run-c's chip: compared no more, in the table too
    assert list(window.dashboard.compared) == ["run-b"] and set(window.runs_panel.compared_rows()) == {"run-b"}
    window.tabs.setCurrentWidget(window.runs_panel)
    window.runs_panel.select("run-b")
    assert window.runs_panel.compare_button.text() == "Uncompare"
    click(qtbot, window.runs_panel.compare_button)  # on the compared run again: no more overlay
    assert not window.dashboard.compared and window.runs_panel.compare_button.text() == "Compare"
    assert window.runs_panel.compared_rows() == {}
    save_shot(window, shots, "runs-panel")


def test_a_run_reopened_after_a_console_restart_shows_its_whole_history(qtbot, gui_homes, monkeypatch):
    window = open_window(qtbot, gui_homes)
    window.set_cluster(scripted_cluster(gui_homes, epochs=3, steps=40), None)
    with qtbot.waitSignal(window.session.ended, timeout=60_000):
        window.act_start.trigger()
    run_id = window.session.run.run_id
    live = window.session.store
    assert live.points("worker-0", "loss") == 120
    window.close()  # the console quits; a new one starts

    monkeypatch.setattr(catalog, "_replay", lambda *a, **k: pytest.fail("the cache is whole: no host is asked"))
    again = open_window(qtbot, gui_homes)
    assert again.session.run is None
    rows = show_runs(qtbot, again, 1)
    assert [rows[0][0], rows[0][2]] == [run_id, "finished"]
    again.runs_panel.select(run_id)
    click(qtbot, again.runs_panel.open_button)
    qtbot.waitUntil(lambda: again.dashboard.store.points("worker-1", "loss") == 120, timeout=30_000)
    store = again.dashboard.store
    assert [store.points(t, "loss") for t in ("worker-0", "worker-1")] == \
        [live.points(t, "loss") for t in ("worker-0", "worker-1")]
    assert sorted((e["task"], e["epoch"], e["val_accuracy"]) for e in store.epochs) == \
        sorted((e["task"], e["epoch"], e["val_accuracy"]) for e in live.epochs)
    # its Logs tab has the end of each task's logs, read from its host (not blank)
    views = again.dashboard.events_view.log_views
    qtbot.waitUntil(lambda: {"worker-0", "worker-1"} <= set(views), timeout=30_000)
    for task in ("worker-0", "worker-1"):
        qtbot.waitUntil(lambda: "scripted: 3 epochs of 40 steps done" in views[task].toPlainText(), timeout=30_000)


def test_delete_asks_first_and_removes_only_after_yes(qtbot, gui_homes, dialogs):
    finished_run(gui_homes, "doomed", epochs=1, steps=5)
    finished_run(gui_homes, "kept", epochs=1, steps=5)
    window = open_window(qtbot, gui_homes)
    show_runs(qtbot, window, 2)
    window.runs_panel.select("doomed")

    dialogs.answer("QMessageBox.question", QMessageBox.No)
    click(qtbot, window.runs_panel.delete_button)
    assert "Delete run doomed?" in dialogs.asked[-1][1][2] and "here" in dialogs.asked[-1][1][2]
    assert (gui_homes / "local-home" / "runs" / "doomed").is_dir()
    assert manifests.manifest_path("doomed").exists()
    assert [r[0] for r in window.runs_panel.rows()] == ["kept", "doomed"]

    dialogs.answer("QMessageBox.question", QMessageBox.Yes)
    click(qtbot, window.runs_panel.delete_button)
    qtbot.waitUntil(lambda: [r[0] for r in window.runs_panel.rows()] == ["kept"], timeout=30_000)
    assert not (gui_homes / "local-home" / "runs" / "doomed").exists()
    assert not manifests.manifest_path("doomed").exists() and not cache.cache_dir("doomed").exists()
    assert (gui_homes / "local-home" / "runs" / "kept").is_dir()


def test_a_live_run_is_not_replaced_without_asking(qtbot, gui_homes, dialogs):
    finished_run(gui_homes, "old", epochs=1, steps=10)
    window = open_window(qtbot, gui_homes)
    window.set_cluster(scripted_cluster(gui_homes, forever=True, tasks=1), None)
    with qtbot.waitSignal(window.session.run_started, timeout=60_000):
        window.act_start.trigger()
    live_store = window.session.store
    qtbot.waitUntil(lambda: live_store.points("worker-0", "loss") == 60, timeout=30_000)
    try:
        show_runs(qtbot, window, 2)
        window.runs_panel.select("old")
        dialogs.answer("QMessageBox.question", QMessageBox.No)
        click(qtbot, window.runs_panel.open_button)
        assert dialogs.asked[-1][1][1] == "A run is followed"
        assert window.session.active and window.dashboard.store is live_store

        dialogs.answer("QMessageBox.question", QMessageBox.Yes)
        click(qtbot, window.runs_panel.open_button)
        qtbot.waitUntil(lambda: window.dashboard.store.points("worker-0", "loss") == 10, timeout=30_000)
        assert window.session.run is None  # detached: the live run goes on without this window
        live_id = [i for i in window.runs_panel.infos if i != "old"][0]
        assert (gui_homes / "local-home" / "runs" / live_id / "worker-0" / "trained").exists()
    finally:
        from console.run.runner import Run

        run = Run.load([i for i in catalog.overview(ask=False) if i.run_id != "old"][0].run_id)
        run.stop(grace=0.5)
        run.detach()


def test_opening_a_run_still_going_follows_it_live(qtbot, gui_homes, dialogs):
    from console.run.runner import Run

    going = Run(scripted_cluster(gui_homes, forever=True, tasks=1), "going")
    going.start()  # started by another console: this window does not follow it
    try:
        window = open_window(qtbot, gui_homes)
        rows = show_runs(qtbot, window, 1)
        assert [rows[0][0], rows[0][2]] == ["going", "running"]
        window.runs_panel.select("going")
        assert not window.runs_panel.delete_button.isEnabled()  # a run still going is not deleted
        click(qtbot, window.runs_panel.open_button)
        qtbot.waitUntil(lambda: window.session.run is not None, timeout=30_000)
        assert window.session.run.run_id == "going" and window.session.active
        assert window.dashboard.store is window.session.store
        qtbot.waitUntil(lambda: window.session.store.points("worker-0", "loss") == 60, timeout=30_000)
        assert window.act_stop.isEnabled() and window.tabs.currentWidget() is window.dashboard
        dialogs.answer("QMessageBox.question", QMessageBox.Yes)
        with qtbot.waitSignal(window.session.ended, timeout=60_000):  # followed: Stop stops it (once asked)
            window.act_stop.trigger()
        assert window.threads.join(60)
    finally:
        going.stop(grace=0.5)
        going.detach()


@pytest.mark.slow
def test_open_tensorboard_shows_it_in_the_browser_and_the_window_stops_it(qtbot, gui_homes, monkeypatch):
    pytest.importorskip("tensorboard")
    finished_run(gui_homes, "boarded", epochs=1, steps=5)
    opened = []
    # No browser here: the address stays under the list, to copy (a status-bar line passes).
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: opened.append(url.toString()) and False))
    window = open_window(qtbot, gui_homes)
    show_runs(qtbot, window, 1)
    window.runs_panel.select("boarded")
    click(qtbot, window.runs_panel.tensorboard_button)
    qtbot.waitUntil(lambda: bool(opened), timeout=120_000)
    assert opened[0].startswith("http://127.0.0.1:")
    line = window.runs_panel.tensorboard_line
    assert line.isVisible() and f"answers at <a href='{opened[0]}'>{opened[0]}</a> (no browser opened it" in line.text()
    assert (cache.cache_dir("boarded") / "tensorboard" / "train").is_dir()
    server = window.runs_panel.tensorboards._servers["boarded"]
    process = server.process
    assert process.poll() is None
    window.close()
    assert process.poll() is not None  # the window's quit stopped it


def test_a_run_that_finished_while_the_window_was_closed_is_offered_with_its_real_end(qtbot, gui_homes):
    """The window followed a run's first epoch and was closed; the run finished. The next window reads its end
    from its host: the empty Dashboard offers it ("finished while you were away"), the Runs tab lists its real
    finals and duration, and the offer's link opens its whole history."""
    ended_unfollowed(gui_homes, "away")
    window = open_window(qtbot, gui_homes)
    board = window.dashboard
    qtbot.waitUntil(lambda: "while you were away" in board.empty_state.text(), timeout=30_000)
    assert "Run away finished while you were away: in " in board.empty_state.text()
    assert "loss 0.0333" in board.empty_state.text() and "accuracy 0.7000" in board.empty_state.text()
    rows = show_runs(qtbot, window, 1)
    col = {name: COLUMNS.index(name) for name in COLUMNS}
    assert rows[0][col["State"]] == "finished" and rows[0][col["Loss"]:col["Val accuracy"] + 1] == [
        "0.0333", "0.7000", "0.8000"]
    assert rows[0][col["Duration"]] != "-"
    window.tabs.setCurrentWidget(board)
    with qtbot.waitSignal(window.runs_panel.history_loaded, timeout=30_000):
        board.empty_state.linkActivated.emit("open:away")
    assert board.run_header.run_id == "away" and "<b>finished</b>" in board.header.text()
    window.close()


def test_a_run_of_another_workload_is_compared_no_more_one_of_the_same_stays(qtbot, gui_homes):
    finished_run(gui_homes, "base", epochs=1, steps=5)
    window = open_window(qtbot, gui_homes)
    show_runs(qtbot, window, 1)
    window.runs_panel.select("base")
    click(qtbot, window.runs_panel.compare_button)
    qtbot.waitUntil(lambda: "base" in window.dashboard.compared, timeout=30_000)
    window.set_cluster(scripted_cluster(gui_homes, epochs=1, steps=5), None)  # the same script: a baseline still
    with qtbot.waitSignal(window.session.ended, timeout=60_000):
        window.act_start.trigger()
    assert "base" in window.dashboard.compared
    other = gui_homes / "other"
    other.mkdir()
    window.set_cluster(scripted_cluster(other, epochs=1, steps=5), None)  # another script: no baseline
    with qtbot.waitSignal(window.session.ended, timeout=60_000):
        window.act_start.trigger()
    assert "base" not in window.dashboard.compared and window.dashboard.chip_texts() == []
    window.files.dirty = False
    window.close()
