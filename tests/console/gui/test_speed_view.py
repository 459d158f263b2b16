"""The window's "Why slow?" (console/gui/speed_view.py): on a real run of a user's script whose worker-1 reads
its input slowly (tests/data/scripts/why_slow, seeded as in the seeded-fault suite), the button asks, and the view
shows each worker's stacked bar, the verdict naming worker-1 input-bound with its fix, and the scaling."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from console import speed
from console.gui.colors import STEP_PARTS
from console.gui.main_window import MainWindow
from console.gui.speed_view import SpeedView
from console.profiles import Profiles
from tests.console.gui.conftest import save_shot
from tests.helpers.seeded import script_cluster


@pytest.mark.slow
def test_why_slow_shows_an_input_bound_worker_with_its_fix(qtbot, gui_homes, shots, dialogs, request):
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    window.resize(1440, 900)
    window.show()
    window.set_cluster(script_cluster(gui_homes, env={"SLOW_SHARE_ON_WORKER": "1"}), None)
    view = window.dashboard.speed_view
    assert not view.button.isEnabled()  # no run yet
    window.act_start.trigger()
    core = lambda: window.session.core  # noqa: E731
    qtbot.waitUntil(lambda: core() is not None, timeout=30_000)
    started = core()
    request.addfinalizer(lambda: started.run.stop_each(grace=0))  # its script trains until stopped: whatever fails
    qtbot.waitUntil(lambda: core() is not None and core().measure_problem() is None, timeout=180_000)
    qtbot.waitUntil(lambda: core()._newest_step >= 20, timeout=60_000)  # its input is slow from the first step
    assert view.button.isEnabled()
    with qtbot.waitSignal(window.session.explained, timeout=70_000):
        qtbot.mouseClick(view.button, Qt.LeftButton)
        assert "Measuring" in view.status.text()
    # What the view shows: a bar per worker whose parts add up to its step, worker-1 waiting on its input, worker-0
    # waiting for it; the verdict's line with the fix; the scaling efficiency.
    assert set(view.bars) == {"worker-0", "worker-1"}
    for parts in view.bars.values():
        assert sum(parts.values()) == pytest.approx(100, abs=0.5)
    # worker-1 waits on its input past the share that makes the verdict, worker-0 does not; how long worker-0 waits
    # for it depends on how busy this machine is (beside a training run: 1.5 % of its step; bench/why_slow.py)
    assert view.bars["worker-1"]["input"] >= 100 * speed.INPUT_SHARE > view.bars["worker-0"]["input"], view.bars
    assert view.findings[0].startswith("input-bound on worker-1: ")
    assert "num_parallel_calls=tf.data.AUTOTUNE" in view.verdict.text()
    assert view.scaling.startswith("scaling: ") and "on 2 workers" in view.scaling
    assert "input-bound" in view.status.text()
    assert window.statusBar().currentMessage().startswith("Why slow: input-bound on worker-1")
    assert len(view.bar_plot.getPlotItem().items) == len(speed.PARTS)  # a stacked bar item per part
    QApplication.processEvents()  # the layout with the bars' height
    label = view.bar_plot.getAxis("bottom").label  # "% of the step": inside the plot, not under the legend
    text = label.boundingRect().adjusted(0, 0, 0, -label.document().documentMargin())  # the text, not its margin
    assert label.mapRectToScene(text).bottom() <= view.bar_plot.height()
    save_shot(window, shots, "window-why-slow-1440")
    window.resize(1280, 720)
    QApplication.processEvents()  # the layout at the new size
    assert view.legend.geometry().top() >= view.bar_plot.geometry().bottom(), "nothing drawn over the bars' axis"
    save_shot(window, shots, "window-why-slow-1280")
    dialogs.answer("QMessageBox.question", QMessageBox.Yes)  # Stop the run? Yes
    window.act_stop.trigger()
    qtbot.waitUntil(lambda: not window.session.active, timeout=60_000)
    qtbot.waitUntil(lambda: not view.button.isEnabled(), timeout=30_000)  # the run's end: nothing to ask
    window.files.dirty = False
    window.close()


def test_a_refusal_says_why_and_the_button_comes_back(qtbot):
    view = SpeedView()
    qtbot.addWidget(view)
    view.set_available(True)
    with qtbot.waitSignal(view.asked):
        qtbot.mouseClick(view.button, Qt.LeftButton)
    assert not view.button.isEnabled()
    view.refused("Not now: it is not training yet; ask again once its first steps are in")
    assert view.button.isEnabled() and "not training yet" in view.status.text()


def test_each_measurement_adds_to_its_history_and_a_new_run_clears_it(qtbot):
    view = SpeedView()
    qtbot.addWidget(view)
    view.show()
    assert not view.bar_plot.isVisible() and "in about 5 to 15 s" in view.verdict.text()  # nothing yet: no axes
    for step, waited in ((100, 0.01), (400, 0.03)):
        view.show_verdict({"kind": speed.HEALTHY, "at_step": step, "findings": ["healthy: …"],
                           "workers": [{"task": "worker-0", "step": 0.05, "input": 0.0, "compute": 0.04 - waited,
                                        "communication": waited, "peers": 0.0, "other": 0.01}]})
    assert [s for s, _ in view.history] == [100, 400]
    assert view.history[1][1] == {"worker-0": pytest.approx(60)}  # its share spent waiting (the all-reduce)
    assert view.history_plot.isVisible() and view.bar_plot.isVisible()
    view.clear()
    assert view.bars == {} and view.history == [] and view.findings == [] and not view.bar_plot.isVisible()


def test_every_part_of_a_step_has_its_colour():
    assert tuple(STEP_PARTS) == speed.PARTS
