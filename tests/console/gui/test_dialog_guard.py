"""The window's tests cannot hang: a blocking dialog fails its test at once, and a stuck Qt loop times out.

Each case runs a small test session in a subprocess with the project's own pytest
settings (pyproject.toml) and this folder's fixtures, and gives it two minutes:
a session that hangs fails here instead of hanging the suite.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog, QMessageBox

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[3]
SESSION_SECONDS = 120


@pytest.fixture
def session(pytester, gui_homes, monkeypatch):
    """Runs test files given as text in a subprocess: the project's ini, this folder's conftest."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest("from tests.console.gui.conftest import *  # the window tests' fixtures\n")

    def run(source: str):
        path = pytester.makepyfile(source)
        try:
            return pytester.runpytest_subprocess(
                "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(pytester.path), "--confcutdir",
                str(pytester.path), "-p", "no:cacheprovider", "-n", "0", "-v", str(path), timeout=SESSION_SECONDS)
        except (pytester.TimeoutExpired, subprocess.TimeoutExpired):
            pytest.fail(f"the test session hung: no result in {SESSION_SECONDS} s", pytrace=False)

    return run


def test_a_failing_window_test_whose_close_asks_a_question_fails_at_once_and_the_next_test_runs(session):
    """Seen on a fresh machine: the window's closeEvent asked "Discard the changes?" in pytest-qt's
    teardown of a failed test, offscreen, where nobody can answer: the suite hung for 50 minutes."""
    result = session("""
        from console.gui.main_window import MainWindow
        from console.profiles import Profiles

        def test_fails_with_unsaved_changes(qtbot, tmp_path):
            window = MainWindow(profiles=Profiles(tmp_path / "profiles.json"))
            qtbot.addWidget(window)
            window.show()
            window.setup.batch.setValue(48)  # unsaved: closing the window asks whether to discard them
            with qtbot.waitSignal(window.checker.finished, timeout=60_000):
                window.act_check.trigger()
            assert window.files.dirty
            assert False, "deliberately failing"

        def test_the_next_one_runs(qtbot, tmp_path, monkeypatch):
            assert True
    """)
    out = result.stdout.str()
    assert "deliberately failing" in out
    assert "blocking dialog QMessageBox.question ('Unsaved changes')" in out, out
    assert "test_the_next_one_runs PASSED" in out and "not torn down" not in out, out
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("passed") == 1, outcomes


def test_a_test_can_answer_the_dialogs_it_expects(session):
    result = session("""
        from PySide6.QtWidgets import QFileDialog, QMessageBox
        from console.gui.main_window import MainWindow
        from console.profiles import Profiles

        def test_answers(qtbot, tmp_path, dialogs):
            window = MainWindow(profiles=Profiles(tmp_path / "profiles.json"))
            qtbot.addWidget(window)
            window.show()
            window.setup.batch.setValue(48)
            dialogs.answer("QMessageBox.question", QMessageBox.Cancel)
            window.files.act_new.trigger()  # "Discard the changes?" Cancel: nothing changes
            assert window.cluster.hosts and window.files.dirty
            dialogs.answer("QFileDialog.getSaveFileName", (str(tmp_path / "mine.toml"), ""))
            window.files.act_save_as.trigger()
            assert window.files.path == tmp_path / "mine.toml" and not window.files.dirty
            assert [name for name, _ in dialogs.asked] == ["QMessageBox.question", "QFileDialog.getSaveFileName"]

        def test_an_answer_left_over_fails(dialogs):
            dialogs.answer("QMessageBox.warning", QMessageBox.Ok)
    """)
    out = result.stdout.str()
    assert "test_answers PASSED" in out, out
    assert "an answer no dialog asked for: QMessageBox.warning" in out, out
    assert result.parseoutcomes().get("errors") == 1, out


def test_a_stuck_qt_loop_is_ended_by_the_per_test_timeout(session):
    """The last resort: pytest-timeout's thread method ends a Qt loop that the signal method cannot interrupt."""
    result = session("""
        import pytest
        from PySide6.QtCore import QEventLoop

        @pytest.mark.timeout(3)
        def test_waits_forever(qtbot):
            QEventLoop().exec()  # nothing quits it
    """)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret != 0 and "Timeout" in out, out


def test_the_guard_is_on_in_this_folder(qtbot, dialogs):
    with pytest.raises(AssertionError, match="blocking dialog QFileDialog.getOpenFileName [(]'Open cluster'[)]"):
        QFileDialog.getOpenFileName(None, "Open cluster")
    with pytest.raises(AssertionError, match="blocking dialog QMessageBox.exec [(]'Careful'[)]"):
        QMessageBox(QMessageBox.Warning, "Careful", "text").exec()
    assert len(dialogs.blocked) == 2
    dialogs.blocked.clear()  # seen here; the fixture would fail the test at teardown
