"""The file actions: a cluster file that cannot be read, and the CSV export."""

from __future__ import annotations

from console import cluster as cl
from tests.helpers.synthetic import feed
from tests.console.gui.test_window_settings import window_on


def test_a_bad_cluster_file_says_why_and_keeps_the_window(qtbot, gui_homes):
    bad = gui_homes / "bad.toml"
    bad.write_text("[[tasks]]\nhost = 'nowhere'\n")
    w = window_on(qtbot, gui_homes, bad)
    assert w.files.path is None and w.cluster == cl.default()
    assert "the cluster has no hosts; add a [[hosts]] table" in w.statusBar().currentMessage()
    w.close()


def test_csv_export_runs_off_the_ui_thread_and_reports(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    feed(w.dashboard.store, workers=2, steps=50, rate=1000.0, burst=50).join()
    with qtbot.waitSignal(w.files.exported, timeout=30_000) as done:
        w.files.export_csv(gui_homes / "m.csv")
    assert done.args[0] == f"Wrote 500 rows to {gui_homes / 'm.csv'}"  # 100 steps x 5 fields
    with qtbot.waitSignal(w.files.exported, timeout=30_000) as failed:
        w.files.export_csv(gui_homes / "no" / "such" / "dir.csv")
    assert failed.args[0].startswith(f"Could not write {gui_homes / 'no' / 'such' / 'dir.csv'}: No such file")
    assert failed.args[0].endswith("choose another place")
    w.close()
