"""The cluster diagram's batch: the settings' split, a script's unknown one, and the run's own numbers."""

from __future__ import annotations

from PySide6.QtWidgets import QGraphicsSimpleTextItem

from console import cluster as cl
from console.gui.diagram import ClusterDiagram
from tests.console.test_diagram_model import CAPTURED


def texts(diagram: ClusterDiagram) -> list[str]:
    return [i.text() for i in diagram.scene.items() if isinstance(i, QGraphicsSimpleTextItem)]


def two_workers(**training) -> cl.Cluster:
    return cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")],
                      cl.Training(**training))


def test_a_scripts_batch_is_drawn_unknown_then_from_the_run(qtbot):
    diagram = ClusterDiagram()
    qtbot.addWidget(diagram)
    diagram.set_cluster(two_workers())
    assert "per replica" in texts(diagram) and "global batch 64" in texts(diagram)

    diagram.set_cluster(two_workers(script="main.py"))
    assert diagram.batch_label.text() == "batch: unknown until the script reports (its own numbers, read from fit)"
    shown = texts(diagram)
    assert "per replica" not in shown and "per worker" not in shown and not any("64" in s for s in shown)
    assert "from the run" not in shown and diagram.source.text().startswith("The script sets its own batch")

    diagram.set_run(CAPTURED, {"worker-0": "localhost:4000", "worker-1": "localhost:4001"})
    assert diagram.batch_label.text() == "global 64 = 2 workers × 1 replica × 32"
    shown = texts(diagram)
    assert "from the run" in shown and "per replica" in shown and "worker-1: 32" in shown
    assert diagram.source.text() == "From the run: the script's own numbers, read from its fit."

    diagram.set_run({"event": "started", "source": "script"})  # a loop's: no batch plan, no crash
    assert diagram.batch_label.text() == "batch: unknown (the run reported no batch plan)"


def test_after_a_run_the_diagram_follows_the_form_with_the_runs_numbers_below(qtbot):
    """A form edit after a run is drawn (4 workers, not the run's 2); the run's split is a line below; the clicked
    task is outlined and its whole TF_CONFIG is shown and copied."""
    import json

    from PySide6.QtGui import QGuiApplication

    from console.gui.diagram import SELECTED

    diagram = ClusterDiagram()
    qtbot.addWidget(diagram)
    ran = two_workers(script="main.py")
    diagram.set_cluster(ran)
    diagram.set_run(CAPTURED, {"worker-0": "localhost:4000", "worker-1": "localhost:4001"})
    assert diagram.split.from_run and not diagram.last_run.text()
    edited = two_workers(script="main.py", per_replica_batch=16)
    edited.tasks += [cl.Task(host="here"), cl.Task(host="here")]
    diagram.set_cluster(edited)
    assert not diagram.split.from_run and len([t for h in diagram.hosts for t in h.tasks]) == 4
    assert "from the run" not in texts(diagram)
    assert diagram.last_run.text() == ("The last run: global 64 = 2 workers × 1 replica × 32 (the settings have "
                                       "changed since)")
    diagram.set_cluster(ran)  # back to the run's settings: its numbers again
    assert diagram.split.from_run and not diagram.last_run.isVisibleTo(diagram)

    diagram._on_task_clicked("worker-1")
    assert diagram.selected == "worker-1" and diagram._items["worker-1"].pen().color() == SELECTED
    assert diagram._items["worker-0"].pen().color() != SELECTED
    shown = diagram.tf_config.toPlainText()
    config = json.loads(shown.split("\n", 1)[1])
    assert config["task"] == {"type": "worker", "index": 1} and len(config["cluster"]["worker"]) == 2
    diagram.copy_button.click()
    assert json.loads(QGuiApplication.clipboard().text()) == config


def test_an_elastic_run_that_went_on_without_a_host_is_drawn_so_and_offers_it_back(qtbot, tmp_path):
    """worker-2's host left: its box says so (grey, no replica), the batch splits over the 2 left; a right click
    offers to take the host back, on the others to go on without theirs; a run that is not elastic offers
    nothing."""
    hosts = [cl.Host(name=n, address=f"10.0.0.{i + 1}") for i, n in enumerate(("a", "b", "c"))]
    cluster = cl.Cluster(hosts, [cl.Task(host=h.name, port=4000) for h in hosts],
                         cl.Training(per_replica_batch=16, elastic=2))
    diagram = ClusterDiagram()
    qtbot.addWidget(diagram)
    diagram.resize(1280, 720)
    diagram.set_cluster(cluster)
    assert diagram.host_actions("worker-0") == []  # the settings, no run: nothing to ask
    started = {"num_workers": 2, "replicas_per_worker": 1, "per_replica_batch": 24, "global_batch": 48,
               "strategy": "multi_worker_mirrored"}
    diagram.set_states({"worker-2": ("left", "its host did not answer for 30 s after the failure")})
    diagram.set_run(started, {f"worker-{i}": f"10.0.0.{i + 1}:4000" for i in range(3)}, {"worker-2"})
    shown = texts(diagram)
    assert diagram.batch_label.text() == "global 48 = 2 workers × 1 replica × 24"
    assert "worker: left the run" in shown and "LEFT THE RUN" in shown and "worker-2: 24" not in shown
    assert diagram.host_actions("worker-2") == [("Take c back (at the next backup)", "take back", "c")]
    assert diagram.host_actions("worker-0") == [("Go on without a (restart on the other hosts)", "remove", "a")]
    asked = []
    diagram.host_asked.connect(lambda what, host: asked.append((what, host)))
    menu = diagram.task_menu("worker-2")  # what a right click opens
    assert [a.text() for a in menu.actions()] == ["Take c back (at the next backup)"]
    menu.actions()[0].trigger()
    diagram.task_menu("worker-1").actions()[0].trigger()
    assert asked == [("take back", "c"), ("remove", "b")]
    diagram.grab().save(str(tmp_path / "elastic.png"))
    cluster.training.elastic = 0
    diagram.set_cluster(cluster)
    diagram.set_run(started, {f"worker-{i}": f"10.0.0.{i + 1}:4000" for i in range(3)})
    assert diagram.host_actions("worker-0") == [] and diagram.task_menu("worker-0") is None
