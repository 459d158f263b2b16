"""A user's own script through the window: the form shows what applies to it, the dashboard its captured
metrics, the diagram its real batch split once it reports it (and nothing invented before)."""

from __future__ import annotations

import re
import shutil

import pytest
from PySide6.QtWidgets import QGraphicsSimpleTextItem
from pytestqt.exceptions import TimeoutError as WaitTimedOut

from console import cluster as cl
from console.gui.main_window import MainWindow
from console.profiles import Profiles
from console.run.supervisor import waiting_report
from tests.console.gui.conftest import save_shot
from tests.console.gui.test_main_window import curve_points

pytestmark = pytest.mark.slow

SCRIPTS = cl.PROJECT_ROOT / "tests" / "data" / "scripts"
WATCHDOG_WORDS = "for the cluster to form"  # the startup watchdog's report (console.run.supervisor.waiting_report)


def window_on(qtbot, gui_homes, training: cl.Training) -> MainWindow:
    """The window at 1440×900 on two local workers of ``training``."""
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    window.resize(1440, 900)
    window.show()
    window.set_cluster(cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                                  training), None)
    return window


def scene_texts(window) -> list[str]:
    return [i.text() for i in window.diagram.scene.items() if isinstance(i, QGraphicsSimpleTextItem)]


def test_a_two_file_mwms_fit_script_through_the_window(qtbot, gui_homes, shots):
    """The tutorial-shaped MWMS fit script (main.py imports mnist_setup.py and reads config.json by a relative
    path) on two local workers, chosen and started from the window."""
    job = shutil.copytree(SCRIPTS / "mwms_fit", gui_homes / "mwms_fit")
    window = window_on(qtbot, gui_homes, cl.Training(epochs=5, per_replica_batch=16))

    # The form: the script's rows, not the trainer's settings it never reads.
    form = window.setup
    assert form.epochs.isVisibleTo(window) and form.batch_label.isVisibleTo(window)
    form.workload.setCurrentText("script")
    form.user_file.setText(str(job / "main.py"))
    form.script_args.setText("--epochs 2")
    t = window.cluster.training
    assert (t.script, t.workdir, t.args, t.keras, t.capture) == (str(job / "main.py"), "", ["--epochs", "2"],
                                                                "auto", True)
    for field in (form.workdir, form.script_args, form.keras, form.capture, form.user_file):
        assert field.isVisibleTo(window), field
    for field in (form.epochs, form.batch, form.batch_mode, form.lr, form.lr_rule, form.strategy,
                  form.communication, form.autoshard, form.batch_label, form.backup_seconds):
        assert not field.isVisibleTo(window), field
    assert form.keras.currentText() == "auto (tf-keras: 2 training tasks)"
    # The hidden rows give their room back: the restarts row comes right after the capture row.
    qtbot.waitUntil(lambda: 0 < form.max_restarts.geometry().top() - form.capture.geometry().bottom() < 20,
                    timeout=30_000)
    # Before the run: the diagram says the batch is unknown, with no numbers of the settings (16, 32, 64).
    assert not window.diagram.split.known
    assert window.diagram.batch_label.text() == ("batch: unknown until the script reports (its own numbers, "
                                                 "read from fit)")
    assert "per replica" not in scene_texts(window) and not any("32" in s for s in scene_texts(window))
    save_shot(window, shots, "script_form")
    window.tabs.setCurrentWidget(window.diagram)
    save_shot(window, shots, "script_diagram_before_the_run")

    with qtbot.waitSignal(window.session.ended, timeout=300_000):
        window.act_start.trigger()
    run = window.session.run
    assert [(task.name, task.phase) for task in run.tasks] == [("worker-0", "finished"), ("worker-1", "finished")]
    assert not window.setup_panel.isVisible(), "the run shown: its plots took the setup's room"
    window.act_setup.trigger()  # the setup back, as it was
    assert form.keras.isVisibleTo(window) and not form.epochs.isVisibleTo(window)  # the form stays the script's

    # The dashboard: the captured step loss (the global batch's: drawn once), each worker's step time and
    # throughput, and each epoch's training values.
    store = window.session.store
    steps = 2 * 10
    board = window.dashboard
    drawn = {("worker-0", "loss"): steps, ("worker-0", "step_time"): steps, ("worker-1", "step_time"): steps,
             ("worker-0", "epoch:loss"): 2, ("worker-0", "epoch:accuracy"): 2}
    qtbot.waitUntil(lambda: {key: curve_points(window, *key) for key in drawn} == drawn, timeout=30_000)
    for worker in ("worker-0", "worker-1"):  # each worker's capture reported each step
        assert len(store.series(worker, "loss")[0]) == len(store.series(worker, "examples_per_sec")[0]) == steps
    assert ("worker-1", "loss") not in board.curves, "the global batch's loss, the same on every worker: once"
    x, y = board.curves[("worker-0", "epoch:loss")].getData()
    assert list(x) == [10, 20] and y[-1] == pytest.approx([e for e in store.epochs if e["task"] == "worker-0"][-1]
                                                          ["loss"], abs=1e-6)
    _, loss = store.series("worker-0", "loss")
    assert loss[-1] < loss[0], "the script really trained"
    assert "loss" in board._layout_plots and "accuracy" in board._layout_plots

    # The log: fit's progress bar (verbose=1: redrawn with \b and \r) as a terminal leaves it, one line an epoch.
    def bars() -> list[str]:
        return [line for line in board.events_view.log_views["worker-0"].toPlainText().splitlines()
                if re.match(r"\s*\d+/10 \[", line)]
    try:
        qtbot.waitUntil(lambda: len(bars()) == 2, timeout=30_000)
    except WaitTimedOut:
        pytest.fail(f"not one line an epoch: {board.events_view.log_views['worker-0'].toPlainText()[-3000:]!r}")
    assert all(bar.lstrip().startswith("10/10 [====") and "loss: " in bar for bar in bars()), bars()
    shown = board.events_view.log_views["worker-0"].toPlainText()
    assert not [c for c in shown if ord(c) < 32 and c not in "\n\t"], "no control character shows as a glyph"

    # The diagram: the script's real split, from its captured started event.
    started = window.run_control.started_event
    assert started["source"] == "script" and started["per_worker_batch"] == 32
    diagram = window.diagram
    assert diagram.split.from_run and diagram.split.known
    assert diagram.batch_label.text() == "global 64 = 2 workers × 1 replica × 32"
    assert "from the run" in scene_texts(window) and diagram.source.text().startswith("From the run")
    assert diagram.chief == "worker-0"

    # No watchdog cried wolf: the capture's records told the session the cluster formed.
    events = store.events_snapshot()
    assert not [e for e in events if e["event"] in ("watchdog", "stalled", "alert", "failure")], events
    assert not [e for e in events if WATCHDOG_WORDS in str(e.get("text", ""))], events
    assert {"launched", "cluster_formed", "started", "train_end"} <= {e["event"] for e in events}
    assert all(t.cluster_formed for t in run.tasks) and waiting_report(run, after=0) is None  # however short

    save_shot(window, shots, "script_dashboard")
    window.tabs.setCurrentWidget(diagram)
    save_shot(window, shots, "script_diagram")
    window.resize(1280, 720)
    qtbot.waitUntil(lambda: window.width() == 1280, timeout=30_000)
    save_shot(window, shots, "script_diagram_1280x720")
    window.tabs.setCurrentWidget(board)
    save_shot(window, shots, "script_dashboard_1280x720")
    window.files.dirty = False
    window.close()
    assert not window.threads.busy()


def test_a_failed_script_keeps_the_layout_says_where_and_offers_no_resume(qtbot, gui_homes, shots):
    """The two-file MWMS script whose callback raises a NameError after the first epoch, at 1440×900 then 1280×720:
    while it runs the plots have at least half the window each way (the setup folded away); once it failed, the
    failure view names the user's own file:line and code, the events pane keeps its width, nothing is off the
    screen and no size is remembered from it; Resume is not offered (a restart would fail the same way); the
    whole log opens in a window of its own and saves."""
    job = shutil.copytree(SCRIPTS / "mwms_name_error", gui_homes / "mwms_name_error")
    window = window_on(qtbot, gui_homes, cl.Training(script=str(job / "main.py"), args=["--epochs", "3"]))
    board = window.dashboard
    events = board.split.sizes()[1]
    remembered = board.view()["events_width"]
    window.act_start.trigger()
    assert not window.setup_panel.isVisible(), "a run shown: the setup folds away for its plots"

    def plots_take_half() -> bool:
        area = board.plot_stack
        return area.isVisible() and area.width() >= window.width() / 2 and area.height() >= window.height() / 2

    qtbot.waitUntil(lambda: board.plot_stack.currentWidget() is board.plot_scroll and plots_take_half(),
                    timeout=60_000)
    assert board._fitting_columns() >= 2, "two columns of plots at 1440"
    qtbot.waitUntil(lambda: window.session.run is not None and not window.session.active, timeout=240_000)
    qtbot.waitUntil(lambda: board.failure_view.isVisible() and board.failure_view.error is not None,
                    timeout=30_000)
    view = board.failure_view
    assert view.where.text() == "reporting.py:7   print(f\"epoch {epoch} done, loss {logs['loss']:.4f}, best " \
                                "{best_loss:.4f}\")"
    assert view.exception.text() == "NameError: name 'best_loss' is not defined"
    assert view.next_step.text().startswith("Fix it in reporting.py, then Run ▸ Deploy & Start")
    assert not window.act_resume.isEnabled(), "no Resume for a code bug"
    qtbot.waitUntil(lambda: "Deploy & Start" in window.statusBar().currentMessage(), timeout=30_000)
    assert "Resume" not in window.statusBar().currentMessage()
    bars = board.progress_view.bars
    qtbot.waitUntil(lambda: bars[view.task].text().endswith("failed here")
                    and not any("ETA" in bar.text() for bar in bars.values()), timeout=30_000)  # where each ended
    qtbot.waitUntil(lambda: "accuracy" not in board._layout_plots, timeout=30_000)  # it reports none
    for width, height in ((1440, 900), (1280, 720)):
        window.resize(width, height)
        qtbot.waitUntil(lambda: window.width() == width and window.height() == height and plots_take_half(),
                        timeout=30_000)
        assert board.split.sizes()[1] == events, "the events pane keeps its width"
        right = board.events_view.mapTo(window, board.events_view.rect().bottomRight())
        assert right.x() < width and right.y() < height, "Events/Logs on the screen"
        assert window.minimumSizeHint().width() <= width
        save_shot(window, shots, f"failed-script-{width}x{height}")
    assert board.view()["events_width"] == remembered

    # The whole log of the failed task: its own window, as a terminal shows it, saved on a thread.
    board.events_view.show_log(view.task)
    with qtbot.waitSignal(board.events_view.whole_log_asked):
        board.events_view.whole_button.click()
    logs = window.run_control.log_windows[-1]
    qtbot.waitUntil(lambda: "NameError: name 'best_loss' is not defined" in logs.text.toPlainText(), timeout=60_000)
    assert logs.text.toPlainText().startswith("==> stdout.log <==") and logs.save_button.isEnabled()
    with qtbot.waitSignal(logs.saved, timeout=30_000) as saved:
        logs.save_to(gui_homes / "worker.log")
    assert saved.args == [f"Saved to {gui_homes / 'worker.log'}"]
    assert "Traceback (most recent call last):" in (gui_homes / "worker.log").read_text()
    logs.close()
    window.files.dirty = False
    window.close()
    assert not window.threads.busy()
