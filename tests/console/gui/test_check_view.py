"""The check's report: the hosts it marks."""

from __future__ import annotations

from PySide6.QtCore import Qt

from console import cluster as cl
from console.checks import HostReport, Problem, Report, reach_problem
from tests.console.gui.test_window_settings import window_on


def test_check_problems_mark_the_hosts_they_name_not_hosts_whose_name_is_a_prefix(qtbot, gui_homes):
    """Hosts "w" and "w2": a problem of w2's ("w2 -> worker-1") is not w's."""
    w = window_on(qtbot, gui_homes)
    w.set_cluster(cl.Cluster([cl.Host("w", local=True), cl.Host("w2", local=True)],
                             [cl.Task("w", port=2221), cl.Task("w2", port=2222)]), None)

    def marks():
        table = w.setup.hosts_table
        return {table.item(r, 1).text(): (table.item(r, 0).data(Qt.UserRole), table.item(r, 0).toolTip())
                for r in range(2)}

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


def test_warnings_are_shown_below_the_problems_and_leave_the_cluster_ready(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    hosts = [HostReport("w", "localhost", ok=True)]
    warning = Problem("cluster", "worker-0 (35.201.3.4) serves TensorFlow on a public address: …",
                      "set firewall = true in [training]", ("w",))
    w.checker.finished.emit(Report(hosts, [], {}, [], warnings=[warning]))
    page = w.check_view.details.toPlainText()
    assert "Ready to start" in page and "Every check passed." in page
    assert page.index("Warnings") > page.index("Every check passed.")
    assert "serves TensorFlow on a public address" in page and "Fix: set firewall = true in [training]" in page
    w.close()


def test_the_report_shows_what_was_collected_and_the_workload_files_and_comes_forward(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    w.tabs.setCurrentWidget(w.dashboard)
    probe = {"python": "3.11.7", "tensorflow": "2.21.0", "cpus": 8, "gpus": [],
             "memory": {"total_bytes": 32e9, "available_bytes": 20.5e9}, "disk_free_bytes": 123.4e9,
             "time": 1000.0 + 2.5, "_asked_at": 1000.0}
    files = [{"what": "script", "path": "/home/me/train.py", "ok": False,
              "problem": "cluster: training.script '/home/me/train.py' does not exist; check the path"}]
    problem = Problem("cluster", "training.script '/home/me/train.py' does not exist", "check the path")
    w.checker.finished.emit(Report([HostReport("w", "localhost", ok=True, probe=probe)], [], {}, [problem],
                                   files=files))
    assert w.tabs.currentWidget() is w.check_view, "the check's results come forward"
    page = w.check_view.details.toPlainText()
    for shown in ("memory free", "20.5 GB of 32.0 GB", "disk free", "123.4 GB", "clock vs this one", "+2.5 s",
                  "Workload files", "/home/me/train.py", "FAILED", "Not ready"):
        assert shown in page, shown
    assert "Every check passed" not in page
    w.close()


def test_before_a_check_the_tab_says_what_to_do_and_the_matrix_says_which_ports_it_tried(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    view = w.check_view
    assert "No check yet" in view.details.toPlainText() and "Ctrl+K" in view.details.toPlainText()
    assert not view._lower.isVisibleTo(view), "no matrix before a check"
    tasks = [{"name": "worker-0", "host": "a", "address": "10.0.0.1:2222", "picked": False},
             {"name": "worker-1", "host": "b", "address": "10.0.0.2:40123", "picked": True}]
    matrix = {"a": {"10.0.0.2:40123": {"ok": True}}, "b": {"10.0.0.1:2222": {"ok": True}}}
    hosts = [HostReport("a", "10.0.0.1", ok=True), HostReport("b", "10.0.0.2", ok=True)]
    w.checker.finished.emit(Report(hosts, tasks, matrix, []))
    assert view._lower.isVisibleTo(view)
    headers = [view.matrix.horizontalHeaderItem(i).text() for i in range(view.matrix.columnCount())]
    assert headers == ["worker-0\n10.0.0.1:2222", "worker-1\n10.0.0.2:40123 (auto)"]
    note = view.matrix_note.text()
    assert "worker-1 has the port \"auto\"" in note and "picks its own free ports at its start" in note
    w.checker.finished.emit(Report(hosts, [dict(t, picked=False) for t in tasks], matrix, []))
    assert "on the ports the run will use" in view.matrix_note.text()
    w.close()


def test_the_check_names_every_dotfile_the_workdir_will_ship(qtbot, gui_homes, tmp_path):
    """docs/security.md: a token file a "!" line takes back into the workdir is seen before it goes: the window's
    Check lists every dotfile that will ship, as tfcc check does (the workload files' row, as checks reads them)."""
    from console import checks

    proj = tmp_path / "proj"
    (proj / ".kube").mkdir(parents=True)
    (proj / "train.py").write_text("print(1)\n")
    (proj / ".env.production").write_text("TOKEN=x\n")
    (proj / ".kube" / "config").write_text("token: x\n")
    (proj / ".tfccignore").write_text("!.env.production\n")
    cluster = cl.default()
    cluster.training = cl.Training(script=str(proj / "train.py"))
    files, problems = checks.workload_files(cluster)
    w = window_on(qtbot, gui_homes)
    w.checker.finished.emit(Report([], [], {}, problems, files=files))
    page = w.check_view.details.toPlainText()
    assert "dotfiles shipped: .env.production, .tfccignore" in page
    assert ".kube" not in page
    w.close()
