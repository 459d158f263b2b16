"""The window's settings without a run: the batch line follows the edits, profiles, Check and Start refused."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QMessageBox

from console import cluster as cl
from console.gui.main_window import MainWindow
from console.profiles import Profiles
from tests.console.gui.conftest import save_shot


def window_on(qtbot, homes, path=None) -> MainWindow:
    w = MainWindow(path, profiles=Profiles(homes / "profiles.json"))
    qtbot.addWidget(w)
    w.show()
    return w


def test_first_start_is_the_embedded_default_and_the_batch_follows_edits(qtbot, gui_homes, shots):
    w = window_on(qtbot, gui_homes)
    assert w.files.path is None and w.cluster == cl.default()
    assert w.windowTitle() == "tfcc — untitled (embedded default)"
    assert w.setup.batch_label.text() == "global 64 = 2 workers × 1 replica × 32"
    w.setup.batch.setValue(48)
    assert w.setup.batch_label.text() == "global 96 = 2 workers × 1 replica × 48" and w.windowTitle().endswith("*")
    assert w.diagram.split.label == "global 96 = 2 workers × 1 replica × 48"
    w.setup.batch_mode.setCurrentText("global")
    w.setup.batch.setValue(101)
    assert "global batch 101 does not split evenly over 2 replicas" in w.setup.batch_label.text()
    assert w.cluster.training.global_batch == 101 and "--global-batch" in w.cluster.training.trainer_args()
    w.setup.batch.setValue(100)
    assert w.setup.batch_label.text() == "global 100 = 2 workers × 1 replica × 50"
    w.tabs.setCurrentWidget(w.diagram)
    save_shot(w, shots, "window-settings")
    w.files.save(gui_homes / "mine.toml")
    assert cl.load(gui_homes / "mine.toml").training.global_batch == 100 and not w.windowTitle().endswith("*")
    w.close()
    again = window_on(qtbot, gui_homes)
    assert again.files.path == gui_homes / "mine.toml" and again.setup.batch_mode.currentText() == "global"
    assert again.profiles.recent == [str(gui_homes / "mine.toml")]
    again.close()


def test_removing_every_host_blocks_start_and_check_explains(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    w.setup.hosts_table.selectRow(0)
    w.setup.btn_remove.click()  # asks first: a no keeps the host
    assert "Remove host local and its 2 tasks from this cluster?" in w.setup.remove_box.text()
    w.setup.remove_box.button(QMessageBox.No).click()
    assert [h.name for h in w.cluster.hosts] == ["local"]
    w.setup.btn_remove.click()
    w.setup.remove_box.button(QMessageBox.Yes).click()
    assert w.cluster.hosts == [] and not w.act_start.isEnabled() and not w.act_check.isEnabled()
    w.cluster.hosts.append(cl.Host(name="lonely", local=True))
    w._on_check_triggered()
    assert "the cluster has no tasks; add a [[tasks]] table" in w.check_view.details.toPlainText()
    w.files.dirty = False
    w.close()


def test_a_start_that_fails_says_why_and_start_works_again(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    w.cluster.hosts[0].python = str(gui_homes / "no-such-python")
    with qtbot.waitSignal(w.session.start_failed, timeout=60_000) as failed:
        w.act_start.trigger()
    assert f"the agent did not start with '{gui_homes / 'no-such-python'}'" in failed.args[0]
    assert "set python in the host's entry" in failed.args[0]
    assert failed.args[0] in w.statusBar().currentMessage()
    assert w.session.run is None and w.act_start.isEnabled() and not w.act_stop.isEnabled()
    w.files.dirty = False
    w.close()


def test_the_supervision_settings_are_the_cluster_files(qtbot, gui_homes):
    """max_restarts, backup_seconds and stop_on_nan: shown from the file, edited, saved, read back."""
    w = window_on(qtbot, gui_homes)
    assert (w.setup.max_restarts.value(), w.setup.backup_seconds.value(), w.setup.stop_on_nan.isChecked()) == \
        (3, 30.0, False)
    w.setup.max_restarts.setValue(5)
    w.setup.backup_seconds.setValue(12.5)
    w.setup.stop_on_nan.setChecked(True)
    assert "--backup-seconds" in w.cluster.training.trainer_args() and w.windowTitle().endswith("*")
    w.files.save(gui_homes / "kept.toml")
    t = cl.load(gui_homes / "kept.toml").training
    assert (t.max_restarts, t.backup_seconds, t.stop_on_nan) == (5, 12.5, True)
    w.close()


def test_every_action_is_in_a_menu_and_the_help_says_the_versions(qtbot, gui_homes, dialogs):
    """File, Run, View and Help menus; Check and Resume look different; exports wait for something to export;
    About names tfcc's version and what it runs on."""

    w = window_on(qtbot, gui_homes)
    assert [a.text() for a in w.menuBar().actions()] == ["&File", "&Run", "&View", "&Help"]
    run_menu = w.menuBar().actions()[1].menu()
    assert run_menu.actions() == [w.act_check, w.act_start, w.act_stop, w.act_resume, w.act_detach]
    assert w.act_check.icon().cacheKey() != w.act_resume.icon().cacheKey()
    assert [a.shortcut().toString() for a in w.view_actions] == ["Ctrl+1", "Ctrl+2", "Ctrl+3", "Ctrl+4"]
    w.view_actions[2].trigger()
    assert w.tabs.currentIndex() == 2
    w.file_menu.aboutToShow.emit()
    assert not w.files.act_export_csv.isEnabled() and not w.files.act_export_png.isEnabled(), "nothing to export"
    w.dashboard.store.ingest("worker-0", [{"type": "step", "global_step": 1, "loss": 1.0, "time": 1.0}])
    w.file_menu.aboutToShow.emit()
    assert w.files.act_export_csv.isEnabled() and w.files.act_export_png.isEnabled()
    dialogs.answer("QMessageBox.about", None)
    w.act_about.trigger()
    (name, args), = [(d, a) for d, a in dialogs.asked if d == "QMessageBox.about"]
    assert "tfcc 0.1.0" in args[2] and "PySide6" in args[2] and "Python" in args[2]
    from PySide6 import __version__ as pyside
    assert f"<td>PySide6</td><td>{pyside}</td>" in args[2] and "not installed</td>" not in args[2].split("tensorflow")[0]
    w.files.dirty = False
    w.close()


def test_quit_with_changes_offers_to_save_them(qtbot, gui_homes, dialogs):
    from PySide6.QtWidgets import QMessageBox

    w = window_on(qtbot, gui_homes)
    w.setup.batch.setValue(48)
    assert w.files.dirty
    dialogs.answer("QMessageBox.question", QMessageBox.Cancel)
    assert not w.close() and w.isVisible(), "Cancel keeps the window"
    dialogs.answer("QMessageBox.question", QMessageBox.Save)
    dialogs.answer("QFileDialog.getSaveFileName", (str(gui_homes / "kept.toml"), ""))
    assert w.close()
    assert cl.load(gui_homes / "kept.toml").training.per_replica_batch == 48


def test_the_window_fits_the_screen_it_opens_on_and_remembers_its_size_per_screen_size(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    w.fit_to_screen(QSize(1280, 720))
    assert w.width() <= 1280 - 16 and w.height() <= 720 - 48, "a first window: never larger than the screen"
    least = w.minimumSizeHint()
    assert least.width() <= 1280 - 16 and least.height() <= 720 - 48, "nothing in it makes it wider than the screen"
    w.fit_to_screen(QSize(2560, 1440))
    assert (w.width(), w.height()) == (1400, 860)
    w.resize(1500, 1000)
    w.close()
    screen = w.screen().availableGeometry().size()
    again = window_on(qtbot, gui_homes)
    assert again.profiles.window_size(f"{screen.width()}x{screen.height()}") == (1500, 1000), "kept at quit"
    again.profiles.set_window_size("1440x900", (1300, 800))
    again.profiles.set_window_size("1280x720", (1500, 1000))  # left larger than such a screen: never so
    again.fit_to_screen(QSize(1440, 900))
    assert (again.width(), again.height()) == (1300, 800)
    again.fit_to_screen(QSize(1280, 720))
    assert (again.width(), again.height()) == (1280 - 16, 720 - 48)
    again.close()


def test_the_setup_is_a_panel_that_folds_and_a_run_shown_folds_it(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    w.resize(1440, 900)
    assert w.setup_panel.isVisible() and w.act_setup.isChecked()
    w.act_setup.trigger()
    assert not w.setup_panel.isVisible()
    qtbot.waitUntil(lambda: w.tabs.width() > 1400, timeout=10_000)  # its room goes to the tabs
    w.act_setup.trigger()
    assert w.setup_panel.isVisible()
    w.run_control.run_shown.emit()  # a run started, reattached or opened: its plots take the room
    assert not w.setup_panel.isVisible() and not w.act_setup.isChecked()
    w.act_side.trigger()
    assert not w.dashboard.side_panel_shown() and not w.act_side.isChecked()
    w.act_side.trigger()
    assert w.dashboard.side_panel_shown()
    w.close()


def test_help_without_a_browser_says_where_the_guide_is(qtbot, gui_homes, monkeypatch):
    from PySide6.QtGui import QDesktopServices

    from console.gui.about import DOCS

    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: False))
    w = window_on(qtbot, gui_homes)
    w.act_docs.trigger()  # F1
    assert w.docs_box.isVisible() and str(DOCS) in w.docs_box.text() and DOCS.is_file()
    w.docs_box.accept()
    w.close()


def test_a_script_chosen_before_its_path_is_drawn_as_a_script_not_the_last_runs_split(qtbot, gui_homes):
    from tests.helpers.synthetic import started_record

    w = window_on(qtbot, gui_homes)
    w.diagram.set_run(started_record(0, 2, 100, 50), {})
    assert w.diagram.split.known, "the run's own numbers"
    w.setup.workload.setCurrentText("script")  # no path yet
    assert not w.diagram.split.known and "until the script reports" in w.diagram.split.label
    assert w.setup.user_file.placeholderText().startswith("your training script")
    w.files.dirty = False
    w.close()
