"""The window's settings without a run: the batch line follows the edits, profiles, bad files."""

from __future__ import annotations

from PySide6.QtCore import Qt

from console import cluster as cl
from console.checks import HostReport, Problem, Report, reach_problem
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
    assert w.path is None and w.cluster == cl.default()
    assert w.windowTitle() == "tfcc — untitled (embedded default)"
    assert w.batch_label.text() == "global 64 = 2 workers × 1 replica × 32"
    w.batch.setValue(48)
    assert w.batch_label.text() == "global 96 = 2 workers × 1 replica × 48" and w.windowTitle().endswith("*")
    assert w.diagram.split.label == "global 96 = 2 workers × 1 replica × 48"
    w.batch_mode.setCurrentText("global")
    w.batch.setValue(101)
    assert "global batch 101 does not split evenly over 2 replicas" in w.batch_label.text()
    assert w.cluster.training.global_batch == 101 and "--global-batch" in w.cluster.training.trainer_args()
    w.batch.setValue(100)
    assert w.batch_label.text() == "global 100 = 2 workers × 1 replica × 50"
    w.tabs.setCurrentWidget(w.diagram)
    save_shot(w, shots, "window-settings")
    w.save_profile(gui_homes / "mine.toml")
    assert cl.load(gui_homes / "mine.toml").training.global_batch == 100 and not w.windowTitle().endswith("*")
    w.close()
    again = window_on(qtbot, gui_homes)
    assert again.path == gui_homes / "mine.toml" and again.batch_mode.currentText() == "global"
    assert again.profiles.recent == [str(gui_homes / "mine.toml")]
    again.close()


def test_a_bad_cluster_file_says_why_and_keeps_the_window(qtbot, gui_homes):
    bad = gui_homes / "bad.toml"
    bad.write_text("[[tasks]]\nhost = 'nowhere'\n")
    w = window_on(qtbot, gui_homes, bad)
    assert w.path is None and w.cluster == cl.default()
    assert "the cluster has no hosts; add a [[hosts]] table" in w.statusBar().currentMessage()
    w.close()


def test_removing_every_host_blocks_start_and_check_explains(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    w.hosts_table.selectRow(0)
    w.btn_remove.click()
    assert w.cluster.hosts == [] and not w.act_start.isEnabled() and not w.act_check.isEnabled()
    w.cluster.hosts.append(cl.Host(name="lonely", local=True))
    w._on_check_triggered()
    assert "the cluster has no tasks; add a [[tasks]] table" in w.details.toPlainText()
    w.dirty = False
    w.close()


def test_csv_export_runs_off_the_ui_thread_and_reports(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    from console.synthetic import feed

    feed(w.dashboard.store, workers=2, steps=50, rate=1000.0, burst=50).join()
    with qtbot.waitSignal(w.exported, timeout=10_000) as done:
        w.export_csv(gui_homes / "m.csv")
    assert done.args[0] == f"Wrote 100 rows to {gui_homes / 'm.csv'}"
    with qtbot.waitSignal(w.exported, timeout=10_000) as failed:
        w.export_csv(gui_homes / "no" / "such" / "dir.csv")
    assert failed.args[0].startswith(f"Could not write {gui_homes / 'no' / 'such' / 'dir.csv'}: No such file")
    assert failed.args[0].endswith("choose another place")
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
    w.dirty = False
    w.close()


def test_check_problems_mark_the_hosts_they_name_not_hosts_whose_name_is_a_prefix(qtbot, gui_homes):
    """Hosts "w" and "w2": a problem of w2's ("w2 -> worker-1") is not w's."""
    w = window_on(qtbot, gui_homes)
    w.set_cluster(cl.Cluster([cl.Host("w", local=True), cl.Host("w2", local=True)],
                             [cl.Task("w", port=2221), cl.Task("w2", port=2222)]), None)

    def marks():
        return {w.hosts_table.item(r, 1).text(): (w.hosts_table.item(r, 0).data(Qt.UserRole),
                                                 w.hosts_table.item(r, 0).toolTip()) for r in range(2)}

    hosts = [HostReport("w", "localhost", ok=True), HostReport("w2", "localhost", ok=True)]
    tasks = [{"name": "worker-0", "host": "w", "address": "localhost:2221"},
             {"name": "worker-1", "host": "w2", "address": "localhost:2222"}]
    only_w2 = [reach_problem("w2", tasks[1], {"error": "refused"}),
               Problem("w2", "port 2222 is in use by pid 7 (python3)", "stop that process", ("w2",))]
    w.checker.finished.emit(Report(hosts, tasks, {}, only_w2))
    assert marks()["w"] == ("ok", "every check passed")
    assert marks()["w2"] == ("failed", "\n".join(map(str, only_w2)))

    both = [Problem("cluster", "TensorFlow differs between hosts: w has 2.21.0, w2 has 2.20.0",
                    "install the same version everywhere", ("w", "w2"))]
    w.checker.finished.emit(Report(hosts, tasks, {}, both))
    assert [mark for mark, _ in marks().values()] == ["failed", "failed"]
    w.close()
