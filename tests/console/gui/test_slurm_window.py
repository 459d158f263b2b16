"""The window on a real Slurm cluster (tests.helpers.slurmcluster): "Slurm cluster…" beside "Add…" sets the login
host and the job; the check asks Slurm (sbatch --test-only); Deploy & Start submits the job, and the window follows
it: the job's state in the status bar and the events, both tasks' curves, the diagram on the nodes Slurm chose."""

from __future__ import annotations

import sys

import pytest
from PySide6.QtWidgets import QApplication, QDialogButtonBox, QMessageBox

from agent import protocol
from console import cluster as cl
from console.gui.main_window import MainWindow
from console.profiles import Profiles
from tests.console.gui.conftest import save_shot


@pytest.fixture
def slurm(slurm_cluster, gui_homes):
    slurm_cluster.hosts.known_hosts(gui_homes / "known_hosts")
    yield slurm_cluster
    slurm_cluster.cancel_all()
    slurm_cluster.wait_for_no_jobs()


def test_the_slurm_dialog_makes_the_cluster_a_slurm_job_and_says_what_is_wrong(qtbot, gui_homes, dialogs):
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    form = window.setup
    dialog = form.open_slurm_dialog()
    ok = dialog.buttons.button(QDialogButtonBox.Ok)
    assert not ok.isEnabled()  # no login host yet
    assert dialog.shown_errors() == "", "nothing said before the person types"
    qtbot.keyClicks(dialog.login, "login1")
    qtbot.keyClicks(dialog.user, "bob smith")
    dialog.time.selectAll()
    qtbot.keyClicks(dialog.time, "soon")
    # Each problem under its own field, in the form's words (never the file's slurm.time), all at once.
    assert not ok.isEnabled()
    assert dialog.errors[dialog.time].text().startswith("Time limit: 'soon' is no time sbatch reads; write it like "
                                                        "1:00:00")
    assert dialog.errors[dialog.user].text().startswith("SSH user: 'bob smith': a login name is letters")
    assert "slurm." not in dialog.shown_errors() and dialog.errors[dialog.login].text() == ""
    dialog.user.clear()
    dialog.time.setText("30:00")
    dialog.nodes.setValue(3)
    dialog.tasks_per_node.setValue(2)
    dialog.partition.setText("gpu")
    assert ok.isEnabled(), dialog.shown_errors()
    assert dialog.sizeHint().height() <= 720 - 48, "the dialog fits a 1280x720 screen"
    dialog.accept()
    c = form.cluster
    assert c.slurm is not None and (c.slurm.login, c.slurm.nodes, c.slurm.partition) == ("login1", 3, "gpu")
    assert len(c.tasks) == 6 and form.hosts_table.rowCount() == 1
    assert form.hosts_table.item(0, 1).text() == "Slurm"
    assert form.hosts_table.item(0, 5).text() == "3 node(s) × 2 task(s), partition gpu, 30:00"
    assert not form.btn_add.isEnabled()  # a Slurm cluster has no hosts of its own
    assert "[slurm]" in cl.dumps(c)  # saved as a cluster file says it
    form.hosts_table.selectRow(0)
    form.btn_remove.click()
    form.remove_box.button(QMessageBox.Yes).click()
    assert form.cluster.slurm is None and not form.cluster.tasks and form.btn_add.isEnabled()
    window.files.dirty = False
    window.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_window_follows_a_slurm_job_on_the_nodes_slurm_chose(qtbot, slurm, gui_homes, shots, dialogs, request):
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    window.resize(1440, 900)
    window.show()
    cluster = cl.loads(f'[training]\nworkload = "digits"\nepochs = 30\nper_replica_batch = 16\n'
                       f'[slurm]\nlogin = "{slurm.login.address}"\nuser = "root"\nkey = "{slurm.hosts.client_key}"\n'
                       f'python = "{sys.executable}"\nnodes = 2\ncpus_per_task = 1\ntime = "10:00"\n')
    window.set_cluster(cluster, None)
    window.act_start.trigger()
    core = lambda: window.session.core  # noqa: E731
    qtbot.waitUntil(lambda: core() is not None, timeout=30_000)
    started = core()
    request.addfinalizer(lambda: started.run.stop(grace=0) if started.run.placement.job else None)  # whatever fails
    qtbot.waitUntil(lambda: all(t.phase == protocol.TRAINING for t in started.run.tasks), timeout=300_000)
    qtbot.waitUntil(lambda: all(started.store.points(t.name) > 20 for t in started.run.tasks), timeout=120_000)
    diagram = window.run_control.diagram
    qtbot.waitUntil(lambda: [h.name for h in diagram.hosts] == slurm.nodes, timeout=60_000)
    port = 8888 + int(started.run.placement.job["job_id"]) % 500 * 64  # each job its own ports (agent/slurm.py)
    assert [[t.address for t in h.tasks] for h in diagram.hosts] == [[f"{node}:{port}"] for node in slurm.nodes]
    notes = [e.get("text", "") for e in started.store.events_snapshot()]
    assert any("Slurm job" in n and f"running on {slurm.node_list}" in n for n in notes), notes[-10:]
    QApplication.processEvents()
    save_shot(window, shots, "window-slurm-1440")
    window.resize(1280, 720)
    QApplication.processEvents()
    save_shot(window, shots, "window-slurm-1280")
    dialogs.answer("QMessageBox.question", QMessageBox.Yes)  # Stop the run? Yes
    window.act_stop.trigger()
    qtbot.waitUntil(lambda: not window.session.active, timeout=120_000)
    assert all(t.phase == protocol.STOPPED for t in started.run.tasks), [t.phase for t in started.run.tasks]
    window.files.dirty = False
    window.close()


def test_the_windows_check_of_a_slurm_cluster_asks_slurm(qtbot, slurm, gui_homes, dialogs):
    """Check on a Slurm cluster: the login host's Slurm (sbatch --test-only); a partition it lacks is the
    check's problem, with the fix; one it has is ready. Nothing is submitted."""
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    before = slurm.job_ids()
    for partition, words in (("nope", f"Slurm on {slurm.login.address} has no partition 'nope'"), ("debug", "Ready to start")):
        window.set_cluster(cl.loads(f'[training]\nworkload = "digits"\n[slurm]\nlogin = "{slurm.login.address}"\n'
                                    f'user = "root"\nkey = "{slurm.hosts.client_key}"\nnodes = 2\n'
                                    f'partition = "{partition}"\n'), None)
        window.act_check.trigger()
        qtbot.waitUntil(lambda: not window.checking, timeout=60_000)
        assert words in window.check_view.details.toPlainText()
    assert slurm.job_ids() == before
    window.files.dirty = False
    window.close()
