"""File → Export cluster as…: the preview follows the choices, a cluster a format cannot carry says why,
and the files are written off the UI thread, never over a folder's files unless asked."""

from __future__ import annotations

from console import cluster as cl
from console import export
from tests.console.gui.conftest import save_shot
from tests.console.gui.test_window_settings import window_on


def _names(dialog) -> list[str]:
    return [dialog.files.item(i).text() for i in range(dialog.files.count())]


def _shown(qtbot, dialog):
    """``dialog`` once its preview shows the choices made (it renders off the UI thread)."""
    qtbot.waitUntil(lambda: not dialog.rendering, timeout=10_000)
    return dialog


def _opened(qtbot, w):
    return _shown(qtbot, w.files.open_export_dialog())


def test_the_preview_shows_each_file_of_the_chosen_format_and_its_options(qtbot, gui_homes, shots):
    w = window_on(qtbot, gui_homes)
    dialog = _opened(qtbot, w)
    qtbot.waitExposed(dialog)
    assert _names(dialog) == ["launch-local.sh", "README.md"]  # the default cluster: two workers here
    assert "export TF_CONFIG=" in dialog.text.toPlainText()
    dialog.files.setCurrentRow(1)
    assert dialog.text.toPlainText() == dialog.current.files["README.md"]
    assert not dialog.image.isVisible() and not dialog.time_limit.isVisible()

    dialog.format.setCurrentIndex(dialog.format.findData("slurm"))
    _shown(qtbot, dialog)
    assert dialog.time_limit.isVisible() and dialog.port_base.isVisible() and not dialog.image.isVisible()
    assert _names(dialog) == ["tfcc.sbatch"]
    sbatch = dialog.text.toPlainText()
    assert "#SBATCH --time=1:00:00" in sbatch and "#SBATCH --ntasks=2" in sbatch and "srun" in sbatch
    dialog.time_limit.setText("2:30:00")
    _shown(qtbot, dialog)
    assert "#SBATCH --time=2:30:00" in dialog.text.toPlainText()

    dialog.format.setCurrentIndex(dialog.format.findData("tfjob"))
    _shown(qtbot, dialog)
    assert dialog.image.isVisible()
    assert "REPLACE-WITH-YOUR-IMAGE" in dialog.text.toPlainText() and "--image" in dialog.notes.text()
    dialog.image.setText("registry.example/tfcc:1")
    _shown(qtbot, dialog)
    assert "image: registry.example/tfcc:1" in dialog.text.toPlainText()
    assert dialog.btn_export.isEnabled()
    dialog.layout().activate()  # the rows hidden meanwhile give their room back before the picture
    save_shot(dialog, shots, "export_dialog")

    assert [dialog.format.itemData(i) for i in range(dialog.format.count())] == list(export.FORMATS)
    dialog.format.setCurrentIndex(dialog.format.findData("trainjob"))
    _shown(qtbot, dialog)
    assert dialog.image.isVisible() and dialog.name.isVisible() and not dialog.time_limit.isVisible()
    assert _names(dialog) == ["tfcc.yaml"]
    manifests = dialog.text.toPlainText()
    assert "kind: TrainingRuntime" in manifests and "kind: TrainJob" in manifests and "TF_CONFIG" in manifests
    assert "image: registry.example/tfcc:1" in manifests  # the image given for the TFJob goes on
    dialog.name.setText("digits")
    _shown(qtbot, dialog)
    assert _names(dialog) == ["digits.yaml"] and "name: digits" in dialog.text.toPlainText()
    assert dialog.btn_export.isEnabled()
    dialog.reject()
    w.close()


def test_a_cluster_the_format_cannot_carry_says_why_and_exports_nothing(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    w.cluster.tasks.append(cl.Task(host=w.cluster.tasks[0].host, role="evaluator"))
    dialog = _opened(qtbot, w)
    dialog.format.setCurrentIndex(dialog.format.findData("slurm"))
    _shown(qtbot, dialog)
    assert "evaluator" in dialog.notes.text() and not dialog.btn_export.isEnabled() and dialog.files.count() == 0
    dialog.format.setCurrentIndex(dialog.format.findData("scripts"))
    _shown(qtbot, dialog)
    assert dialog.btn_export.isEnabled() and dialog.files.count() > 0
    dialog.reject()
    w.close()


def test_export_writes_off_the_ui_thread_and_never_over_files_unless_asked(qtbot, gui_homes):
    w = window_on(qtbot, gui_homes)
    target = gui_homes / "out"
    dialog = _opened(qtbot, w)
    dialog.format.setCurrentIndex(dialog.format.findData("slurm"))
    _shown(qtbot, dialog)
    dialog.folder.setText(str(target))
    _shown(qtbot, dialog)
    with qtbot.waitSignal(w.files.exported, timeout=30_000) as done:
        dialog.btn_export.click()
    assert done.args[0].startswith(f"Wrote 1 files to {target}")
    written = {p.name: p.read_text() for p in target.iterdir()}
    assert list(written) == ["tfcc.sbatch"] and written["tfcc.sbatch"] == dialog.current.files["tfcc.sbatch"]

    dialog = _opened(qtbot, w)  # again, into the same folder, another format: refused
    dialog.folder.setText(str(target))
    _shown(qtbot, dialog)
    with qtbot.waitSignal(w.files.exported, timeout=30_000) as refused:
        dialog.btn_export.click()
    assert refused.args[0] == (f"Nothing exported: folder {str(target)!r} is not empty (it holds tfcc.sbatch); "
                               "choose a new or empty folder, or tick \"replace what the folder holds\"")
    assert {p.name: p.read_text() for p in target.iterdir()} == written
    assert w.statusBar().currentMessage() == refused.args[0]

    dialog = _opened(qtbot, w)
    dialog.folder.setText(str(target))
    _shown(qtbot, dialog)
    dialog.force.setChecked(True)
    with qtbot.waitSignal(w.files.exported, timeout=30_000) as replaced:
        dialog.btn_export.click()
    assert replaced.args[0].startswith("Wrote ")
    assert sorted(p.name for p in target.iterdir()) == ["README.md", "launch-local.sh", "tfcc.sbatch"]
    w.close()


def test_the_preview_renders_off_the_ui_thread_once_typing_pauses(qtbot, gui_homes, monkeypatch):
    """Reading the user's code is disk work: never on the UI thread, and not once per keystroke."""
    import threading

    renders = []
    real = export.render
    monkeypatch.setattr(export, "render", lambda *a, **k: (renders.append(threading.current_thread()),
                                                          real(*a, **k))[1])
    w = window_on(qtbot, gui_homes)
    dialog = _opened(qtbot, w)
    dialog.format.setCurrentIndex(dialog.format.findData("slurm"))
    for n in range(1, 7):
        dialog.name.setText("digits"[:n])
        assert not dialog.btn_export.isEnabled()  # what Export would write is not shown yet
    with qtbot.waitSignal(dialog.rendered, timeout=10_000):
        pass
    _shown(qtbot, dialog)
    assert _names(dialog) == ["digits.sbatch"] and dialog.btn_export.isEnabled()
    assert len(renders) == 2 and threading.main_thread() not in renders  # the first preview, then one for all
    dialog.reject()
    w.close()
