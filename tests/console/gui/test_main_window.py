"""The window against real local agents: add hosts, Check, Start, live curves, the diagram, Stop."""

from __future__ import annotations

import json
import threading

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QMessageBox

from console import cluster as cl
from console.gui.main_window import MainWindow
from console.profiles import Profiles
from console.run.runner import Run
from console.text import event_line
from tests.console.gui.conftest import save_shot
from tests.helpers.waiting import bound

pytestmark = pytest.mark.slow


def add_host(qtbot, window, name: str, local: bool = True, address: str = "", **fields) -> None:
    dialog = window.setup.open_host_dialog()
    qtbot.keyClicks(dialog.name, name)
    if local:
        dialog.local.setChecked(True)
    qtbot.keyClicks(dialog.address, address)
    for field, text in fields.items():
        getattr(dialog, field).clear()
        qtbot.keyClicks(getattr(dialog, field), text)
    ok = dialog.buttons.button(QDialogButtonBox.Ok)
    assert ok.isEnabled(), dialog.error.text()
    qtbot.mouseClick(ok, Qt.LeftButton)


def curve_points(window, task: str, metric: str) -> int:
    curve = window.dashboard.curves.get((task, metric))
    x = curve.getData()[0] if curve is not None else None
    return 0 if x is None else len(x)


def test_add_two_hosts_check_start_watch_and_stop(qtbot, gui_homes, shots, dialogs):
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    window.show()
    window.files.act_new.trigger()
    assert window.cluster.hosts == [] and not window.act_start.isEnabled()

    add_host(qtbot, window, "alpha")
    add_host(qtbot, window, "beta")
    assert window.cluster.task_names() == ["worker-0", "worker-1"]
    assert window.setup.hosts_table.rowCount() == 2 and window.setup.hosts_table.item(1, 1).text() == "beta"
    window.setup.epochs.setValue(200)        # still training when Stop is pressed
    window.setup.batch.setValue(16)
    assert window.setup.batch_label.text() == "global 32 = 2 workers × 1 replica × 16"

    with qtbot.waitSignal(window.checker.finished, timeout=90_000) as checked:
        window.act_check.trigger()
    report = checked.args[0]
    assert report.ready, [str(p) for p in report.problems]
    assert [window.setup.hosts_table.item(r, 0).data(Qt.UserRole) for r in range(2)] == ["ok", "ok"]
    assert "Ready to start" in window.check_view.details.toPlainText()
    save_shot(window, shots, "window-checked")

    with qtbot.waitSignal(window.session.run_started, timeout=90_000):
        window.act_start.trigger()
    assert window.act_stop.isEnabled()

    def both_workers_plotted():
        return curve_points(window, "worker-0", "loss") > 0 and all(  # the loss once: the cluster's
            curve_points(window, w, "step_time") > 0 for w in ("worker-0", "worker-1"))

    qtbot.waitUntil(both_workers_plotted, timeout=180_000)
    qtbot.waitUntil(lambda: window.run_control.started_event is not None, timeout=30_000)
    started = window.run_control.started_event
    assert window.diagram.chief == "worker-0"
    assert window.diagram.split.from_run
    expected = (f"global {started['global_batch']} = {started['num_workers']} workers × "
                f"{started['replicas_per_worker']} replica × {started['per_replica_batch']}")
    assert window.diagram.batch_label.text() == expected == "global 32 = 2 workers × 1 replica × 16"
    assert [t.name for h in window.diagram.hosts for t in h.tasks if t.is_chief] == ["worker-0"]
    qtbot.waitUntil(lambda: window.dashboard.progress_view.bars["worker-1"].value() > 0, timeout=60_000)
    header = window.dashboard.header.text()
    assert f"<b>{window.session.run.run_id}</b> · <b>running</b>" in header and "2 workers on 2 hosts" in header
    assert "digits, strategy auto, batch 16 per replica" in header
    save_shot(window, shots, "dashboard-running")
    window.tabs.setCurrentWidget(window.diagram)
    window.diagram._on_task_clicked("worker-1")
    shown = window.diagram.tf_config.toPlainText()
    assert shown.startswith("TF_CONFIG of worker-1 (on beta):")
    assert json.loads(shown.split("\n", 1)[1]) == json.loads(window.session.run.cluster.tf_config(
        1, [int(t.address.rsplit(":", 1)[1]) for t in window.session.run.tasks]))
    save_shot(window, shots, "diagram-running")
    window.tabs.setCurrentWidget(window.dashboard)

    csv_rows = window.dashboard.export_csv(gui_homes / "metrics.csv")
    assert csv_rows >= 2 and (gui_homes / "metrics.csv").read_text().startswith(
        "source,kind,global_step,time,metric,value")
    assert window.dashboard.export_png(gui_homes / "plots.png")

    # Save the profile, detach and quit: the run goes on. Opening the window again reopens the
    # profile and reattaches to the run with its whole history; Stop from there.
    window.files.save(gui_homes / "two.toml")
    run_id = window.session.run.run_id
    window.act_detach.trigger()
    # Detached: the Dashboard says so and how to follow again, no ETA counts down, no second run beside it
    assert window.dashboard.notice.isVisible() and f"Detached: run {run_id} goes on" in window.dashboard.notice.text()
    bars = window.dashboard.progress_view.bars.values()
    assert all("ETA" not in b.text() and b.text().endswith("detached") for b in bars)
    assert not window.act_start.isEnabled() and run_id in window.act_start.toolTip()
    for width, height in ((1440, 900), (1280, 720)):
        window.resize(width, height)
        save_shot(window, shots, f"dashboard-detached-{width}")
    window.close()
    assert not window.threads.busy()

    again = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(again)
    again.show()
    assert again.files.path == gui_homes / "two.toml" and [h.name for h in again.cluster.hosts] == ["alpha", "beta"]
    qtbot.waitUntil(lambda: again.session.run is not None, timeout=60_000)
    assert again.session.run.run_id == run_id
    assert not again.dashboard.notice.isVisible() and again.run_control.detached_from is None
    qtbot.waitUntil(lambda: all(curve_points(again, w, "step_time") > 0 for w in ("worker-0", "worker-1")),
                    timeout=60_000)
    x, _ = again.session.store.series("worker-0", "loss")
    assert x[0] == 1.0, "the reattached run shows its whole history, from the first step"
    qtbot.waitUntil(lambda: again.run_control.started_event is not None, timeout=30_000)
    assert again.diagram.split.from_run and again.diagram.chief == "worker-0"
    # Stop asks first; a no leaves the run be. A yes: every bar says "stopping…" at once, without an ETA; each
    # task ends "stopped" (never failed, never lost, never red), with one "stop asked by you" event.
    dialogs.answer("QMessageBox.question", QMessageBox.No)
    again.act_stop.trigger()
    assert again.session.active and not again.session.store.states_snapshot()
    dialogs.answer("QMessageBox.question", QMessageBox.Yes)
    bars = again.dashboard.progress_view.bars
    shown = {name: [] for name in bars}  # what each bar said, in order
    for name, bar in bars.items():
        bar.set_progress = (lambda value, words, _set=bar.set_progress, _name=name:
                            (shown[_name].append(words), _set(value, words)))
    with qtbot.waitSignal(again.session.ended, timeout=90_000):
        again.act_stop.trigger()
    # The tasks end within a second of the stop (their SIGTERM ends them): "stopping…" may be shown for a frame or
    # not at all; whatever a bar said from the stop on had no ETA, and no badge turned red.
    for name, words in shown.items():
        after = words[next((i for i, w in enumerate(words) if w.startswith(("stopping…", "stopped"))), len(words)):]
        assert not any("ETA" in w for w in after), words
    badges = again.dashboard.progress_view.badges
    assert all("b00020" not in b.styleSheet() for b in badges.values())
    assert [t.phase for t in again.session.run.tasks] == ["stopped", "stopped"]
    assert "<b>stopped</b>" in again.dashboard.header.text()
    events = again.session.store.events_snapshot()
    names = [e["event"] for e in events]
    assert "started" in names and "launched" in names
    assert names.count("stopping") == 1 and not {"failed", "lost"} & set(names), names
    assert [e["text"] for e in events if e["event"] == "stopped"] == ["process ended: stopped by you"] * 2
    qtbot.waitUntil(lambda: all(b._text.startswith("stopped") for b in bars.values()), timeout=30_000)
    for width, height in ((1440, 900), (1280, 720)):
        again.resize(width, height)
        save_shot(again, shots, f"dashboard-stopped-{width}")
    qtbot.waitUntil(lambda: again.statusBar().currentMessage() ==
                    f"Run {run_id} stopped (Resume goes on from the newest backups)", timeout=30_000)
    assert not again.act_detach.isEnabled() and again.act_resume.isEnabled(), "an ended run: nothing to detach"
    again.close()
    assert not again.threads.busy()


def test_start_on_the_embedded_default_trains_digits_on_two_local_workers(qtbot, gui_homes):
    """The README's first command: the window opens on the embedded default, and Start trains."""
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    window.show()
    assert window.cluster == cl.default() and window.cluster.training.workload == "digits"
    with qtbot.waitSignal(window.session.ended, timeout=300_000):
        window.act_start.trigger()
    run = window.session.run
    assert [(t.name, t.phase) for t in run.tasks] == [("worker-0", "finished"), ("worker-1", "finished")]
    epochs = window.session.store.epochs
    assert len(epochs) == 2 * window.cluster.training.epochs
    assert epochs[-1]["val_accuracy"] > 0.8, "digits really trained"
    # The dashboard draws val_accuracy once for the cluster, a point per epoch at the epoch's last step.
    board = window.dashboard
    qtbot.waitUntil(lambda: curve_points(window, "worker-0", "epoch:val_accuracy") == window.cluster.training.epochs,
                    timeout=30_000)
    x, y = board.curves[("worker-0", "epoch:val_accuracy")].getData()
    steps = window.run_control.started_event["steps_per_epoch"]
    assert list(x) == [steps * (e + 1) for e in range(window.cluster.training.epochs)]
    assert y[-1] == pytest.approx(epochs[-1]["val_accuracy"], abs=1e-6)
    assert ("worker-1", "epoch:val_accuracy") not in board.curves, "a cluster-wide number is drawn once"
    assert "accuracy" in board._layout_plots and "loss" in board._layout_plots
    assert window.run_control.started_event["num_workers"] == 2 and window.diagram.chief == "worker-0"
    window.close()


FAILS_FIRST_TIME = """
import os, signal
if os.environ["TFCC_ATTEMPT"] == "1":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_that_failed_while_the_window_was_closed_is_offered_and_resumed(qtbot, gui_homes, shots):
    """Its tasks were killed while no console followed the run: the reopened window names the cause on
    the tasks (badges in the dashboard and the diagram), offers the restart instead of doing it, and
    Resume starts every task again as attempt 2, which finishes."""
    script = gui_homes / "fails_first.py"
    script.write_text(FAILS_FIRST_TIME)
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                         cl.Training(script=str(script)))
    path = gui_homes / "away.toml"
    cl.save(cluster, path)
    run = Run(cluster, "away")
    run.start()
    qtbot.waitUntil(lambda: all(s["phase"] == "failed" for s in run.status()), timeout=30_000)
    run.detach()

    window = MainWindow(path, profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.act_resume.isEnabled(), timeout=60_000)
    assert window.session.run.run_id == "away" and window.session.run.tasks[0].attempt == 0  # not restarted
    qtbot.waitUntil(lambda: "(Resume starts every task again from their backups)"
                    in window.statusBar().currentMessage(), timeout=30_000)  # once every task's end is in
    said = [event_line(e) for e in window.session.store.events_snapshot() if e["event"] == "offered"]
    assert said == ["run away failed while no console followed it; Resume starts every task again from their "
                    "backups"]
    qtbot.waitUntil(lambda: window.dashboard.progress_view.badges["worker-1"].text()
                    == "FAILED: the task was killed by SIGKILL", timeout=30_000)
    assert window.diagram.states["worker-0"][0] == "failed"
    window.tabs.setCurrentWidget(window.diagram)
    save_shot(window, shots, "window-failed-run-offered")

    with qtbot.waitSignal(window.session.ended, timeout=60_000):
        window.act_resume.trigger()
    assert [t.phase for t in window.session.run.tasks] == ["finished", "finished"]
    assert [t.attempt for t in window.session.run.tasks] == [2, 2]
    assert not window.act_resume.isEnabled()  # nothing left to resume
    window.close()
    assert not window.threads.busy()


def test_a_parameter_server_cluster_from_the_window(qtbot, gui_homes, shots):
    """chief + 2 workers + ps started with Deploy & Start: the coordinator's curves, every task's row (the
    servers' with their liveness), the diagram's coordinator and ps, and every task ending well."""
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    window.show()
    window.set_cluster(cl.Cluster([cl.Host(name="here", local=True)],
                                  [cl.Task(host="here", role="chief"), cl.Task(host="here"), cl.Task(host="here"),
                                   cl.Task(host="here", role="ps"), cl.Task(host="here", role="evaluator")],
                                  cl.Training(epochs=3)), None)
    assert window.diagram.split.asynchronous
    with qtbot.waitSignal(window.session.ended, timeout=240_000):
        window.act_start.trigger()
    run = window.session.run
    assert [t.phase for t in run.tasks] == ["finished"] * 5
    store = window.session.store
    assert set(store.alive) == {"chief-0", "worker-0", "worker-1", "ps-0"}  # every task said it lives
    # the coordinator's running mean (loss_avg) in the loss plot; validation once for the cluster
    assert curve_points(window, "chief-0", "loss_avg") > 0
    assert window.dashboard.curves[("chief-0", "loss_avg")] in window.dashboard.plots["loss"].items
    assert curve_points(window, "chief-0", "epoch:val_accuracy") == 3
    final = [e for e in store.epochs if e["task"] == "chief-0"][-1]
    # (asynchronous training: which worker's gradients land when is the machine's; 3 epochs reach 0.89 to 0.97)
    assert final["val_accuracy"] >= 0.85
    qtbot.waitUntil(lambda: window.dashboard.progress_view.bars["ps-0"].text().startswith("serving (ps): CPU"),
                    timeout=30_000)
    save_shot(window, shots, "window-parameter-server-dashboard")
    window.tabs.setCurrentWidget(window.diagram)
    assert window.diagram.split.from_run and "each step: one worker's batch" in window.diagram.split.label
    ps = next(t for h in window.diagram.hosts for t in h.tasks if t.name == "ps-0")
    assert {v["name"] for v in ps.variables} >= {"dense/kernel", "dense/bias"}  # the model's variables, on the ps
    assert len(window.diagram.exchanges) == 2 * 3  # each worker with the ps: pull variables, push gradients
    evaluator = next(t for h in window.diagram.hosts for t in h.tasks if t.name == "evaluator-0")
    assert evaluator.address == "" and evaluator.devices == []  # apart from training
    said = [event_line(e) for e in store.events_snapshot() if e["task"] == "evaluator-0"]
    assert any(t.startswith("evaluated the checkpoint of epoch 3  val_loss") for t in said), said
    save_shot(window, shots, "window-parameter-server-diagram")
    window.files.dirty = False
    window.close()


def test_a_host_key_answer_belongs_to_its_question_and_an_unanswered_one_is_closed(qtbot, gui_homes):
    """A dialog left open past its time once answered the next host's question: Trust on host A's dialog
    trusted host B's key, whose fingerprint was never shown. Each answer now counts for its own question."""
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    results: dict[str, bool] = {}

    def ask(host: str, fp: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: results.__setitem__(host, window.asker(host, "ssh-ed25519", fp)))
        thread.start()
        qtbot.waitUntil(lambda: window.fingerprint_dialog is not None and window.fingerprint_dialog.host == host,
                        timeout=30_000)
        return thread

    window.asker.timeout = bound(3)  # unanswered this long: a no (long enough to see its dialog on a busy machine)
    first = ask("host-a", "SHA256:aaaa")
    stale = window.fingerprint_dialog
    qtbot.waitUntil(lambda: not first.is_alive(), timeout=30_000)  # nobody answered: a no
    assert results["host-a"] is False
    qtbot.waitUntil(lambda: not stale.isVisible(), timeout=30_000)  # and its dialog went with it
    window.asker.timeout = 30
    second = ask("host-b", "SHA256:bbbb")
    stale.accept()  # a late click on host A's dialog
    assert second.is_alive() and "host-b" not in results  # answers nothing of host B's
    window.fingerprint_dialog.accept()  # host B's own dialog, its fingerprint shown
    qtbot.waitUntil(lambda: not second.is_alive(), timeout=30_000)
    assert results["host-b"] is True
    window.files.dirty = False
