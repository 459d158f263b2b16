"""The cluster diagram: hosts, their tasks, the crowned chief, replicas, and the global batch split."""

from __future__ import annotations

import copy
import json

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics, QGuiApplication, QPainter, QPen
from PySide6.QtWidgets import (QGraphicsItem, QGraphicsRectItem, QGraphicsScene, QGraphicsSimpleTextItem,
                               QGraphicsView, QLabel, QMenu, QPlainTextEdit, QPushButton, QSplitter, QVBoxLayout,
                               QWidget)

from console import cluster as cl
from console.gui.colors import worker_color
from console.run.supervisor import REMOVE_HOST, TAKE_BACK
from console.states import Mark
from console.text import size_text, state_text, variables_text
from console.diagram_model import BatchSplit, HostBox, picture
from trainer.tf_config import CHIEF, EVALUATOR, PS, TRAINING_ROLES, WORKER

TASK_W, TASK_H, PAD = 190, 96, 12
CROWN = "\u265b"  # ♛
SELECTED = QColor("#1f5fbf")  # the outline of the task clicked


class _TaskItem(QGraphicsRectItem):
    def __init__(self, name: str, on_click, *args, on_menu=None):
        super().__init__(*args)
        self.name = name
        self._on_click = on_click
        self._on_menu = on_menu
        self.setCursor(Qt.PointingHandCursor)
        self.setAcceptHoverEvents(True)

    def mousePressEvent(self, event):  # noqa: N802 (Qt's name)
        self._on_click(self.name)
        event.accept()

    def contextMenuEvent(self, event):  # noqa: N802 (Qt's name)
        if self._on_menu is not None:
            self._on_menu(self.name, event.screenPos())
            event.accept()


# What a task does, by role, under parameter-server training (True) or synchronous training (False).
ROLE_WORDS = {(CHIEF, True): "chief: coordinates, runs fit", (PS, True): "ps: holds the variables",
              (WORKER, True): "worker: takes steps", (EVALUATOR, True): "evaluator: reads the chief's",
              (EVALUATOR, False): "evaluator: reads the chief's"}
MIN_SCALE = 0.7  # the diagram is drawn no smaller than this to fit its view
EXCHANGE = "pull variables, push gradients"  # what a worker and a ps of parameter-server training trade
STATE_COLOURS = {Mark.FAILED: "#b00020", Mark.STALLED: "#c25e00", Mark.RESTARTING: "#1f5fbf", Mark.LEFT: "#555555"}


class ClusterDiagram(QWidget):
    """Draws a cluster; ``set_cluster`` follows the settings, ``set_run`` a run's own numbers. An elastic run's
    task offers (right click) to go on without its host, or to take back a host the run went on without:
    ``host_asked(what, host)`` (``REMOVE_HOST`` or ``TAKE_BACK``). While a run goes on (``set_where_available``)
    every task offers Where are they?: ``where_asked(task)``, that task's stack to be shown."""

    host_asked = Signal(str, str)
    where_asked = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.scene = QGraphicsScene(self)
        self.boxes: dict[str, QRectF] = {}
        self.exchanges: list = []
        self.view = QGraphicsView(self.scene)
        self.view.setRenderHint(QPainter.Antialiasing)
        self.view.setAlignment(Qt.AlignLeft | Qt.AlignTop)
        self.source = QLabel()
        self.source.setWordWrap(True)
        self.last_run = QLabel()  # the last run's own numbers, when the settings have changed since
        self.last_run.setStyleSheet("color: #1b7f3b")
        self.last_run.hide()
        self.tf_config = QPlainTextEdit()
        self.tf_config.setReadOnly(True)
        self.tf_config.setPlaceholderText("Click a task to see its TF_CONFIG.")
        self.tf_config.setFont(QFont("monospace"))
        self.copy_button = QPushButton("Copy TF_CONFIG")
        self.copy_button.setToolTip("Copy the selected task's TF_CONFIG (the JSON its environment variable holds)")
        self.copy_button.setEnabled(False)
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        below = QWidget()
        below_layout = QVBoxLayout(below)
        below_layout.setContentsMargins(0, 0, 0, 0)
        below_layout.addWidget(self.tf_config)
        below_layout.addWidget(self.copy_button, 0, Qt.AlignRight)
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.view)
        split.addWidget(below)
        split.setSizes([400, 160])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.source)
        layout.addWidget(self.last_run)
        layout.addWidget(split)
        self._cluster: cl.Cluster | None = None
        self._gpus: dict[str, int] = {}
        self._started: dict | None = None
        self._addresses: dict[str, str] = {}
        self._left: frozenset = frozenset()  # the tasks the run goes on without (an elastic run)
        self._run_cluster: cl.Cluster | None = None  # the cluster the run's numbers are of
        self.selected: str | None = None             # the task clicked (its TF_CONFIG below)
        self._items: dict[str, QGraphicsRectItem] = {}
        self.hosts: list[HostBox] = []
        self.split: BatchSplit | None = None
        self.chief: str | None = None
        self.states: dict[str, tuple[str, str]] = {}
        self.where_available = False  # a run goes on: a task's menu asks where the tasks are

    # ------------------------------------------------------------ inputs

    def set_cluster(self, cluster: cl.Cluster, gpus_by_host: dict[str, int] | None = None) -> None:
        self._cluster = cluster
        if gpus_by_host is not None:
            self._gpus = gpus_by_host
        self._redraw()

    def set_run(self, started: dict | None, addresses: dict[str, str] | None = None, left=frozenset()) -> None:
        """A run's "started" event (None: back to the settings) and the addresses it gave its tasks, of the
        cluster drawn now, and the tasks it goes on without (an elastic run). Settings changed since
        (``set_cluster``) are drawn; the run's numbers a line below."""
        self._started = started
        self._addresses = addresses or {}
        self._left = frozenset(left) if started is not None else frozenset()
        self._run_cluster = copy.deepcopy(self._cluster) if started is not None else None
        self._redraw()

    def set_where_available(self, available: bool) -> None:
        """Whether a run goes on whose tasks may be asked where they are (a task's right click)."""
        self.where_available = available

    def set_states(self, states: dict[str, tuple[str, str]]) -> None:
        """Each task's supervision state (stalled, failed with why, restarting): a badge on its box."""
        if states != self.states:
            self.states = dict(states)
            self._redraw()

    # ------------------------------------------------------------ drawing

    def _redraw(self) -> None:
        self.scene.clear()
        if self._cluster is None or not self._cluster.tasks:
            self.hosts, self.split, self.chief = [], None, None
            self.source.setText("Add hosts and tasks to see the cluster.")
            return
        of_run = self._started is not None and self._run_cluster == self._cluster
        self.hosts, self.split = picture(self._cluster, self._gpus, self._started if of_run else None,
                                         self._addresses if of_run else {}, self._left if of_run else frozenset())
        if self._started is not None and not of_run and self._run_cluster is not None:
            _, ran = picture(self._run_cluster, self._gpus, self._started, self._addresses)
            self.last_run.setText(f"The last run: {ran.label} (the settings have changed since)")
        else:
            self.last_run.setText("")
        self.last_run.setVisible(bool(self.last_run.text()))
        names = self._cluster.task_names()
        self._items = {}
        self.chief = next((t.name for h in self.hosts for t in h.tasks if t.is_chief), None)
        self.source.setText(self.split.source)
        y = self._draw_batch(self.split, names)
        x = 0.0
        self.boxes: dict[str, QRectF] = {}  # each task's box, in the scene
        for host in self.hosts:
            x += self._draw_host(host, names, x, y + 2 * PAD) + 2 * PAD
        self.exchanges = self._draw_exchanges() if self.split.asynchronous else []
        self.scene.setSceneRect(self.scene.itemsBoundingRect().adjusted(-PAD, -PAD, PAD, PAD))
        self._fit()

    def _fit(self) -> None:
        """A cluster wider than the view is drawn smaller (down to ``MIN_SCALE``, then it scrolls): every
        task in sight, rather than the last ones behind a scroll bar."""
        width = self.scene.sceneRect().width()
        room = self.view.viewport().width() - 4
        scale = max(MIN_SCALE, min(1.0, room / width)) if width > 0 and room > 0 else 1.0
        self.view.resetTransform()
        self.view.scale(scale, scale)

    def resizeEvent(self, event):  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit()

    def showEvent(self, event):  # noqa: N802 (Qt's name): a hidden tab's view had no width of its own yet
        super().showEvent(event)
        self._fit()

    def _text(self, text: str, x: float, y: float, size: int = 9, bold: bool = False,
              color: QColor | None = None, parent: QGraphicsItem | None = None) -> QGraphicsSimpleTextItem:
        item = QGraphicsSimpleTextItem(text, parent)
        font = QFont()
        font.setPointSize(size)
        font.setBold(bold)
        item.setFont(font)
        if color is not None:
            item.setBrush(QBrush(color))
        item.setPos(x, y)
        if parent is None:
            self.scene.addItem(item)
        return item

    def _draw_batch(self, split: BatchSplit, names: list[str]) -> float:
        roles = (WORKER,) if split.asynchronous else TRAINING_ROLES  # the replicas' holders
        workers = [n for n in names if n.split("-")[0] in roles and n not in self._left]
        width = max(TASK_W * 2 + PAD, len(workers) * max(1, split.replicas_per_worker) * 56.0)
        self.batch_label = self._text(split.label, 0, 0, 12, True)
        if split.problem:
            self._text(split.problem, 0, 20, 9, color=QColor("#b00020"))
        top = 42.0
        if not split.known:  # a script's own batch, not reported: no slices, no numbers of ours
            self.scene.addRect(QRectF(0, top, width, 26), QPen(QColor("#888"), 1, Qt.DashLine),
                               QBrush(QColor("#f4f4f4")))
            self._text("the script's batch: its own, split as its strategy splits it", 6, top + 5, 9,
                       color=QColor("#555"))
            return top + 26
        if split.from_run:
            tag = self._text("from the run", 0, 20, 9, True, QColor("#1b7f3b"))
            tag.setToolTip("the numbers the run's started event reported")
        self.scene.addRect(QRectF(0, top, width, 26), QPen(QColor("#333")), QBrush(QColor("#e8e8e8")))
        self._text(f"one step's batch {split.global_batch}, on one worker" if split.asynchronous
                   else f"global batch {split.global_batch}", 6, top + 5, 9, True)
        worker_w = width / max(1, len(workers))
        for i, name in enumerate(workers):
            colour = worker_color(names.index(name))
            wx = i * worker_w
            self.scene.addRect(QRectF(wx, top + 30, worker_w, 24), QPen(QColor("#333")), QBrush(colour.lighter(150)))
            self._text(f"{name}: steps of {split.per_worker}" if split.asynchronous else f"{name}: {split.per_worker}",
                       wx + 4, top + 34, 8)
            replica_w = worker_w / max(1, split.replicas_per_worker)
            for r in range(split.replicas_per_worker):
                rx = wx + r * replica_w
                self.scene.addRect(QRectF(rx, top + 58, replica_w, 22), QPen(QColor("#333")), QBrush(colour.lighter(120)))
                self._text(str(split.per_replica), rx + 4, top + 61, 8)
        self._text("per worker", width + 8, top + 34, 8, color=QColor("#555"))
        self._text("per replica", width + 8, top + 61, 8, color=QColor("#555"))
        return top + 80

    def _draw_exchanges(self) -> list:
        """Parameter-server training: a line from each worker to each ps (each step pulls the variables
        and pushes the gradients), under the hosts, labelled once."""
        workers = [n for n in self.boxes if n.startswith("worker-")]
        servers = [n for n in self.boxes if n.startswith("ps-")]
        lines = []
        bottom = max(r.bottom() for r in self.boxes.values()) + 3 * PAD + (32 if self.states else 0)
        pen = QPen(QColor("#6b6b6b"), 1.2, Qt.DashLine)
        for k, worker in enumerate(workers):
            for server in servers:
                a, b = self.boxes[worker], self.boxes[server]
                drop = bottom + 8 * k
                path = [(a.center().x(), a.bottom()), (a.center().x(), drop), (b.center().x(), drop),
                        (b.center().x(), b.bottom())]
                for (x1, y1), (x2, y2) in zip(path, path[1:]):
                    line = self.scene.addLine(x1, y1, x2, y2, pen)
                    line.setToolTip(f"{worker} ⇄ {server}: {EXCHANGE}")
                    lines.append(line)
        if lines:
            self._text(f"⇅ {EXCHANGE} (every worker with every ps)", 0, bottom + 8 * len(workers) + 4, 9,
                       color=QColor("#555"))
        return lines

    def _draw_host(self, host: HostBox, names: list[str], x: float, y: float) -> float:
        width = max(TASK_W + 2 * PAD, len(host.tasks) * (TASK_W + PAD) + PAD)
        height = TASK_H + 3 * PAD + 18 + (32 if self.states else 0)  # room for the tasks' badges
        asynchronous = bool(self.split and self.split.asynchronous)
        script = bool(self.split and self.split.script)  # what the chief does is the script's own business
        self.scene.addRect(QRectF(x, y, width, height), QPen(QColor("#555"), 1.5), QBrush(QColor("#f6f6f6")))
        self._text(f"{host.name}  ({host.address})", x + PAD, y + 6, 10, True)
        for i, task in enumerate(host.tasks):
            tx, ty = x + PAD + i * (TASK_W + PAD), y + 18 + 2 * PAD
            colour = worker_color(names.index(task.name))
            item = _TaskItem(task.name, self._on_task_clicked, QRectF(0, 0, TASK_W, TASK_H), on_menu=self._on_task_menu)
            item.setPos(tx, ty)
            item.setPen(QPen(QColor("#b8860b") if task.is_chief else QColor("#333"), 3 if task.is_chief else 1,
                             Qt.DashLine if task.role == cl.EVALUATOR else Qt.SolidLine))
            item.setBrush(QBrush(QColor("#e0e0e0") if task.left else colour.lighter(165) if task.role != cl.EVALUATOR
                                 else QColor("#fafafa")))
            self.boxes[task.name] = QRectF(tx, ty, TASK_W, TASK_H)
            self._items[task.name] = item
            if task.name == self.selected:
                item.setPen(QPen(SELECTED, 4))
            item.setToolTip("left the run: no TF_CONFIG now (right click: take its host back)" if task.left else
                            task.tf_config or "TF_CONFIG is written when the run picks the ports")
            self.scene.addItem(item)
            if task.is_chief:  # a big crown on the chief's box, and one in its title
                crown = self._text(CROWN, tx + TASK_W - 30, ty - 22, 20, color=QColor("#c89600"))
                crown.setToolTip("the chief: by convention the script's chief saves the model" if script
                                 else "the chief: saves the model and writes TensorBoard logs")
            title = f"{CROWN} {task.name}" if task.is_chief else task.name
            self._text(title, 6, 4, 10, True, QColor("#8a6d00") if task.is_chief else None, item)
            chief = f"{task.role}, the chief" if script else f"{task.role}, chief: saves the model"
            role = ROLE_WORDS.get((task.role, asynchronous)) or (chief if task.is_chief else task.role)
            role = f"{task.role}: left the run" if task.left else role
            self._text(role, 6, 24, 8, parent=item)
            self._text(task.address or ("checkpoints, apart from training" if task.role == cl.EVALUATOR else ""),
                       6, 40, 8, color=QColor("#444"), parent=item)
            if task.name in self.states:  # its state under the box: the badge, then why (cut to the box)
                state, why = self.states[task.name]
                tint = QColor(STATE_COLOURS.get(state, "#333"))
                badge, _, reason = state_text(state, why, width=200).partition(": ")
                self._text(badge, 0, TASK_H + 3, 9, True, tint, item).setToolTip(why)
                if reason:
                    line = self._text(reason, 0, TASK_H + 18, 8, False, tint, item)
                    line.setText(QFontMetrics(line.font()).elidedText(reason, Qt.ElideRight, TASK_W))
                    line.setToolTip(why)
            if task.variables:  # a ps of a run: what it holds, the biggest first
                self._text(variables_text(task.variables), 6, 55, 8, True, parent=item)
                for k, var in enumerate(sorted(task.variables, key=lambda v: -v["bytes"])[:2]):
                    size = size_text(var["bytes"])
                    line = self._text(f"{var['name']}  {size}", 6, 67 + 12 * k, 8, parent=item)
                    room = TASK_W - 20 - QFontMetrics(line.font()).horizontalAdvance(f"  {size}")
                    name = QFontMetrics(line.font()).elidedText(var["name"], Qt.ElideMiddle, int(room))
                    line.setText(f"{name}  {size}")
                item.setToolTip("\n".join(f"{v['name']} {v['shape']} {size_text(v['bytes'])}" for v in task.variables))
            dev_w = (TASK_W - 12 - 4 * (len(task.devices) - 1)) / max(1, len(task.devices))
            for d, device in enumerate(task.devices):
                rect = QGraphicsRectItem(QRectF(0, 0, dev_w, 26), item)
                rect.setPos(6 + d * (dev_w + 4), 62)
                rect.setPen(QPen(QColor("#333")))
                rect.setBrush(QBrush(colour.lighter(115)))
                self._text(device, 4, 5, 8, parent=rect)
        return width

    @property
    def _elastic_run(self) -> bool:
        """Whether a run's own numbers are drawn, of an elastic cluster (a person may change its hosts)."""
        return self._started is not None and self._run_cluster is not None and bool(self._run_cluster.training.elastic)

    def host_actions(self, name: str) -> list[tuple[str, str, str]]:
        """What a right click on task ``name`` offers: (words, what, host)."""
        task = next((t for h in self.hosts for t in h.tasks if t.name == name), None)
        if task is None or not self._elastic_run:
            return []
        if task.left:
            return [(f"Take {task.host} back (at the next backup)", TAKE_BACK, task.host)]
        return [(f"Go on without {task.host} (restart on the other hosts)", REMOVE_HOST, task.host)]

    def task_menu(self, name: str) -> QMenu | None:
        """The menu a right click on task ``name`` opens (None: nothing to offer)."""
        actions = self.host_actions(name)
        where = self.where_available and any(t.name == name for h in self.hosts for t in h.tasks)
        if not actions and not where:
            return None
        menu = QMenu(self)
        if where:
            menu.addAction("Where are they?", lambda: self.where_asked.emit(name)).setToolTip(
                f"Ask every task where it is now, and show {name}'s stack")
        for words, what, host in actions:
            menu.addAction(words, lambda what=what, host=host: self.host_asked.emit(what, host))
        return menu

    def _on_task_menu(self, name: str, where) -> None:
        menu = self.task_menu(name)
        if menu is not None:
            menu.exec(where)

    def _on_task_clicked(self, name: str) -> None:
        task = next((t for h in self.hosts for t in h.tasks if t.name == name), None)
        if task is None:
            return
        if self.selected != name:
            self.selected = name
            self._redraw()  # its box highlighted
        # The whole of it (cluster and task), compact and wrapped: an indented one was cut at its task part.
        self.tf_config.setPlainText(
            f"TF_CONFIG of {name} (on {task.host}):\n{json.dumps(json.loads(task.tf_config))}"
            if task.tf_config
            else f"{name}: TF_CONFIG is written when the run picks its port (port = \"auto\").")
        self.copy_button.setEnabled(bool(task.tf_config))
        self._copied = task.tf_config

    def _on_copy_button_clicked(self) -> None:
        if getattr(self, "_copied", ""):
            QGuiApplication.clipboard().setText(json.dumps(json.loads(self._copied)))
