"""The main window: hosts and tasks, training settings, Check / Deploy & Start / Stop / Detach,
the live dashboard, the cluster diagram and the check's details."""

from __future__ import annotations

import copy
import html
import logging
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QGroupBox,
                               QHBoxLayout, QHeaderView, QLabel, QLineEdit, QMainWindow, QMessageBox, QProgressBar,
                               QPushButton, QSpinBox, QSplitter, QStyle, QTableWidget, QTableWidgetItem, QTabWidget,
                               QTextBrowser, QToolBar, QVBoxLayout, QWidget)

from console import cluster as cl
from console.gui.dashboard import Dashboard
from console.gui.diagram import ClusterDiagram
from console.gui.dialogs import FingerprintDialog, HostDialog, ImportDialog
from console.gui.workers import CheckJob, HostKeyAsker, RunSession, Threads, running_runs
from console.picture import picture
from console.profiles import Profiles
from trainer.config import AUTOSHARD_POLICIES, COMMUNICATIONS, LR_RULES, STRATEGIES

log = logging.getLogger("console.gui")
WORKLOADS = ("digits", "synthetic", "file", "script")


def _item(text: str, tooltip: str = "") -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(item.flags() & ~Qt.ItemIsEditable)
    if tooltip:
        item.setToolTip(tooltip)
    return item


class MainWindow(QMainWindow):
    runs_found = Signal(list)          # runs still going on this profile's hosts (from a thread)
    exported = Signal(str)             # an export finished: what happened, in words

    def __init__(self, cluster_path: str | Path | None = None, profiles: Profiles | None = None):
        super().__init__()
        self.resize(1400, 860)
        self.profiles = profiles or Profiles()
        self.threads = Threads()
        self.asker = HostKeyAsker(parent=self)
        self.asker.asked.connect(self._on_asker_asked)
        self.fingerprint_dialog: FingerprintDialog | None = None
        self.checker = CheckJob(self.threads, self.asker, self)
        self.checker.progressed.connect(self._on_checker_progressed)
        self.checker.finished.connect(self._on_checker_finished)
        self.checker.failed.connect(self._on_checker_failed)
        self.session = RunSession(self.threads, self.asker, self)
        self.session.run_started.connect(self._on_session_run_started)
        self.session.start_failed.connect(self._on_session_start_failed)
        self.session.deploy_progressed.connect(self._on_session_deploy_progressed)
        self.session.records_received.connect(self._on_session_records_received)
        self.session.log_received.connect(self._on_session_log_received)
        self.session.task_ended.connect(self._on_session_task_ended)
        self.session.watchdog_fired.connect(self._on_session_watchdog_fired)
        self.session.stopped.connect(self._on_session_stopped)
        self.session.ended.connect(self._on_session_ended)
        self.runs_found.connect(self._on_runs_found)
        self.exported.connect(self._on_self_exported)
        self.report = None
        self.path: Path | None = None
        self.dirty = False
        self.checking = False
        self._loading = False
        self.started_event: dict | None = None

        self._build_actions()
        self._build_setup()
        self.dashboard = Dashboard()
        self.diagram = ClusterDiagram()
        self.details = QTextBrowser()
        self.matrix = QTableWidget()
        check_page = QSplitter(Qt.Vertical)
        check_page.addWidget(self.details)
        check_page.addWidget(self.matrix)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.dashboard, "Dashboard")
        self.tabs.addTab(self.diagram, "Cluster")
        self.tabs.addTab(check_page, "Check")
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.setup)
        split.addWidget(self.tabs)
        split.setSizes([470, 930])
        self.setCentralWidget(split)
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(260)
        self.progress.hide()
        self.statusBar().addPermanentWidget(self.progress)

        if cluster_path is not None:
            self.open_profile(cluster_path)
        elif self.profiles.last and Path(self.profiles.last).exists():
            self.open_profile(self.profiles.last)
        else:
            self.set_cluster(cl.default(), None)
        self._update_actions()

    # ================================================================= building

    def _build_actions(self) -> None:
        style = self.style()
        menu = self.menuBar().addMenu("&File")
        self.act_new = QAction("&New", self, shortcut=QKeySequence.New, triggered=self._on_new_triggered)
        self.act_open = QAction("&Open…", self, shortcut=QKeySequence.Open, triggered=self._on_open_triggered)
        self.act_save = QAction("&Save", self, shortcut=QKeySequence.Save, triggered=self._on_save_triggered)
        self.act_save_as = QAction("Save &As…", self, shortcut=QKeySequence.SaveAs,
                                   triggered=self._on_save_as_triggered)
        self.recent_menu = menu.addMenu("Open &Recent")
        for act in (self.act_new, self.act_open, self.act_save, self.act_save_as):
            menu.addAction(act)
        menu.insertMenu(self.act_save, self.recent_menu)
        menu.addSeparator()
        menu.addAction(QAction("Export metrics as &CSV…", self, triggered=self._on_export_csv_triggered))
        menu.addAction(QAction("Export plots as &PNG…", self, triggered=self._on_export_png_triggered))
        menu.addSeparator()
        menu.addAction(QAction("&Quit", self, shortcut=QKeySequence.Quit, triggered=self.close))
        self.act_check = QAction(style.standardIcon(QStyle.SP_BrowserReload), "Check", self, shortcut="Ctrl+K",
                                 triggered=self._on_check_triggered)
        self.act_check.setToolTip("Check every host: SSH, Python, TensorFlow, GPUs, ports free and reachable (Ctrl+K)")
        self.act_start = QAction(style.standardIcon(QStyle.SP_MediaPlay), "Deploy && Start", self, shortcut="F5",
                                 triggered=self._on_start_triggered)
        self.act_start.setToolTip("Upload what is missing, start every task and follow them (F5)")
        self.act_stop = QAction(style.standardIcon(QStyle.SP_MediaStop), "Stop", self, shortcut="Shift+F5",
                                triggered=self._on_stop_triggered)
        self.act_detach = QAction(style.standardIcon(QStyle.SP_DialogCloseButton), "Detach", self,
                                  triggered=self._on_detach_triggered)
        self.act_detach.setToolTip("Stop following the run; it goes on, and reappears when this profile is opened")
        bar = QToolBar("Actions")
        bar.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        for act in (self.act_check, self.act_start, self.act_stop, self.act_detach):
            bar.addAction(act)
        self.addToolBar(bar)
        self._fill_recent()

    def _build_setup(self) -> None:
        self.hosts_table = QTableWidget(0, 6)
        self.hosts_table.setHorizontalHeaderLabels(["", "Host", "Address", "User", "Python", "Tasks"])
        self.hosts_table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.hosts_table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.hosts_table.verticalHeader().hide()
        self.hosts_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.hosts_table.horizontalHeader().setStretchLastSection(True)
        self.hosts_table.horizontalHeader().setMaximumSectionSize(170)
        self.hosts_table.setTextElideMode(Qt.ElideMiddle)
        self.hosts_table.doubleClicked.connect(self._on_edit_host_clicked)
        self.hosts_table.itemSelectionChanged.connect(self._on_hosts_selection_changed)
        self.btn_add = QPushButton("Add…")
        self.btn_add.clicked.connect(self._on_add_host_clicked)
        self.btn_import = QPushButton("Import from ~/.ssh/config…")
        self.btn_import.clicked.connect(self._on_import_clicked)
        self.btn_edit = QPushButton("Edit…")
        self.btn_edit.clicked.connect(self._on_edit_host_clicked)
        self.btn_remove = QPushButton("Remove")
        self.btn_remove.clicked.connect(self._on_remove_host_clicked)
        buttons = QHBoxLayout()
        for b in (self.btn_add, self.btn_import, self.btn_edit, self.btn_remove):
            buttons.addWidget(b)
        self.tasks_table = QTableWidget(0, 5)
        self.tasks_table.setHorizontalHeaderLabels(["Task", "Host", "Role", "Port", "GPUs"])
        self.tasks_table.verticalHeader().hide()
        self.tasks_table.setSelectionMode(QAbstractItemView.NoSelection)
        self.tasks_table.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
        hosts_box = QGroupBox("Hosts")
        hl = QVBoxLayout(hosts_box)
        hl.addWidget(self.hosts_table)
        hl.addLayout(buttons)
        hl.addWidget(QLabel("Tasks (edit a host to change its tasks)"))
        hl.addWidget(self.tasks_table)

        self.workload = QComboBox()
        self.workload.addItems(WORKLOADS)
        self.user_file = QLineEdit()
        self.user_file.setPlaceholderText("your model file (build_model, train_dataset) or script")
        browse = QPushButton("…")
        browse.clicked.connect(self._on_browse_user_file_clicked)
        file_row = QHBoxLayout()
        file_row.addWidget(self.user_file)
        file_row.addWidget(browse)
        self.epochs = QSpinBox()
        self.epochs.setRange(1, 100000)
        self.batch_mode = QComboBox()
        self.batch_mode.addItems(["per replica", "global"])
        self.batch = QSpinBox()
        self.batch.setRange(1, 1 << 20)
        batch_row = QHBoxLayout()
        batch_row.addWidget(self.batch)
        batch_row.addWidget(self.batch_mode)
        self.lr = QDoubleSpinBox()
        self.lr.setDecimals(6)
        self.lr.setRange(1e-6, 10.0)
        self.lr.setSingleStep(0.0005)
        self.lr_rule = QComboBox()
        self.lr_rule.addItems(LR_RULES)
        self.strategy = QComboBox()
        self.strategy.addItems([s for s in STRATEGIES if s != "parameter_server"])
        self.communication = QComboBox()
        self.communication.addItems(COMMUNICATIONS)
        self.autoshard = QComboBox()
        self.autoshard.addItems(AUTOSHARD_POLICIES)
        self.batch_label = QLabel()
        self.batch_label.setWordWrap(True)
        self.batch_label.setStyleSheet("font-weight: bold")
        form = QFormLayout()
        form.addRow("Workload", self.workload)
        form.addRow("Model file / script", file_row)
        form.addRow("Epochs", self.epochs)
        form.addRow("Batch", batch_row)
        form.addRow("Learning rate", self.lr)
        form.addRow("LR scaling", self.lr_rule)
        form.addRow("Strategy", self.strategy)
        form.addRow("Communication", self.communication)
        form.addRow("Autoshard", self.autoshard)
        form.addRow("", self.batch_label)
        training_box = QGroupBox("Training")
        training_box.setLayout(form)
        for combo in (self.workload, self.batch_mode, self.lr_rule, self.strategy, self.communication, self.autoshard):
            combo.currentIndexChanged.connect(self._on_training_edited)
        for spin in (self.epochs, self.batch, self.lr):
            spin.valueChanged.connect(self._on_training_edited)
        self.user_file.textChanged.connect(self._on_training_edited)

        self.setup = QWidget()
        layout = QVBoxLayout(self.setup)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(hosts_box, 3)
        layout.addWidget(training_box, 2)

    # ================================================================= the cluster model

    def set_cluster(self, cluster: cl.Cluster, path: Path | None) -> None:
        self.cluster = cluster
        self.path = path
        self.report = None
        self._loading = True
        try:
            t = cluster.training
            workload = "script" if t.script else ("file" if t.model_file else t.workload)
            self.workload.setCurrentText(workload)
            self.user_file.setText(t.script or t.model_file)
            self.epochs.setValue(t.epochs)
            self.batch_mode.setCurrentIndex(1 if t.global_batch else 0)
            self.batch.setValue(t.global_batch or t.per_replica_batch)
            self.lr.setValue(t.learning_rate)
            self.lr_rule.setCurrentText(t.lr_scaling)
            self.strategy.setCurrentText(t.strategy)
            self.communication.setCurrentText(t.communication)
            self.autoshard.setCurrentText(t.autoshard)
        finally:
            self._loading = False
        self._refresh_tables()
        self._set_dirty(False)
        self._on_cluster_edited()

    def _on_training_edited(self, *_):
        if self._loading:
            return
        t = self.cluster.training
        workload = self.workload.currentText()
        path = self.user_file.text().strip()
        t.workload = workload if workload in ("digits", "synthetic", "file") else "digits"
        t.model_file = path if workload == "file" else ""
        t.script = path if workload == "script" else ""
        self.user_file.setEnabled(workload in ("file", "script"))
        t.epochs = self.epochs.value()
        if self.batch_mode.currentIndex() == 1:
            t.global_batch, t.per_replica_batch = self.batch.value(), 32
        else:
            t.global_batch, t.per_replica_batch = 0, self.batch.value()
        t.learning_rate = self.lr.value()
        t.lr_scaling = self.lr_rule.currentText()
        t.strategy = self.strategy.currentText()
        t.communication = self.communication.currentText()
        t.autoshard = self.autoshard.currentText()
        self._set_dirty(True)
        self._on_cluster_edited()

    def _on_cluster_edited(self) -> None:
        """Settings changed: the batch line and the diagram follow."""
        self.user_file.setEnabled(self.workload.currentText() in ("file", "script"))
        if self.cluster.tasks:
            _, split = picture(self.cluster, self._gpus_by_host())
            text = split.label + (f"  ({split.per_worker} per worker)" if split.replicas_per_worker > 1 else "")
            self.batch_label.setText(f"<span style='color:#b00020'>{html.escape(split.problem)}</span>"
                                     if split.problem else text)
        else:
            self.batch_label.setText("Add a host with a worker to see the global batch.")
        if self.started_event is None:
            self.diagram.set_cluster(copy.deepcopy(self.cluster), self._gpus_by_host())
        self._update_actions()

    def _gpus_by_host(self) -> dict[str, int]:
        if self.report is None:
            return {}
        return {r.name: len((r.probe or {}).get("gpus") or []) for r in self.report.hosts if r.probe}

    def _refresh_tables(self) -> None:
        c = self.cluster
        self.hosts_table.setRowCount(len(c.hosts))
        by_host = {r.name: r for r in (self.report.hosts if self.report else [])}
        problems = {}
        for p in (self.report.problems if self.report else []):
            for name in dict.fromkeys(p.hosts):  # the hosts it concerns, by name (a reach problem names both ends)
                problems.setdefault(name, []).append(str(p))
        style = self.style()
        for row, host in enumerate(c.hosts):
            tasks = [n for n, t in zip(c.task_names(), c.tasks) if t.host == host.name]
            status = _item("")
            r = by_host.get(host.name)
            if r is not None:
                bad = problems.get(host.name) or ([] if r.ok else [r.error or "failed"])
                icon = QStyle.SP_MessageBoxCritical if bad else QStyle.SP_DialogApplyButton
                status.setIcon(style.standardIcon(icon))
                status.setToolTip("\n".join(bad) if bad else "every check passed")
                status.setData(Qt.UserRole, "failed" if bad else "ok")
            self.hosts_table.setItem(row, 0, status)
            self.hosts_table.setItem(row, 1, _item(host.name))
            self.hosts_table.setItem(row, 2, _item("this machine" if host.local else host.address))
            self.hosts_table.setItem(row, 3, _item("" if host.local else host.user))
            python = host.python or ("this console's Python" if host.local else "python3")
            self.hosts_table.setItem(row, 4, _item(python, host.interpreter))
            self.hosts_table.setItem(row, 5, _item(", ".join(tasks) or "none"))
        names = c.task_names()
        self.tasks_table.setRowCount(len(c.tasks))
        chief = "chief-0" if "chief-0" in names else "worker-0"
        for row, (name, task) in enumerate(zip(names, c.tasks)):
            self.tasks_table.setItem(row, 0, _item(("\u265b " if name == chief else "") + name))
            self.tasks_table.setItem(row, 1, _item(task.host))
            self.tasks_table.setItem(row, 2, _item(task.role))
            self.tasks_table.setItem(row, 3, _item(str(task.port)))
            self.tasks_table.setItem(row, 4, _item(",".join(map(str, task.gpus)) or "all"))

    def _set_dirty(self, dirty: bool) -> None:
        self.dirty = dirty
        name = self.path.name if self.path else "untitled (embedded default)"
        self.setWindowTitle(f"tfcc — {name}{' *' if dirty else ''}")

    # ================================================================= hosts

    def _selected_host(self) -> cl.Host | None:
        rows = self.hosts_table.selectionModel().selectedRows()
        return self.cluster.hosts[rows[0].row()] if rows else None

    def _on_hosts_selection_changed(self) -> None:
        self._update_actions()

    def open_host_dialog(self, host: cl.Host | None = None) -> HostDialog:
        """The add (or edit) dialog, opened (not run) so that the UI goes on; applied on accept."""
        tasks = [t for t in self.cluster.tasks if host is not None and t.host == host.name]
        dialog = HostDialog({h.name for h in self.cluster.hosts}, host, tasks or None, self)
        dialog.accepted.connect(lambda: self._apply_host_dialog(dialog, host))
        dialog.open()
        self.host_dialog = dialog
        return dialog

    def _apply_host_dialog(self, dialog: HostDialog, old: cl.Host | None) -> None:
        new = dialog.host()
        tasks = dialog.tasks()
        if old is None:
            self.cluster.hosts.append(new)
            self.cluster.tasks.extend(tasks)
        else:
            index = self.cluster.hosts.index(old)
            self.cluster.hosts[index] = new
            first = next((i for i, t in enumerate(self.cluster.tasks) if t.host == old.name), len(self.cluster.tasks))
            kept = [t for t in self.cluster.tasks if t.host != old.name]
            self.cluster.tasks = kept[:first] + tasks + kept[first:]
        if any(t.role == "chief" for t in tasks):  # at most one chief
            for t in self.cluster.tasks:
                if t.role == "chief" and t not in tasks:
                    t.role = "worker"
        self.report = None
        self._set_dirty(True)
        self._refresh_tables()
        self._on_cluster_edited()

    def _on_add_host_clicked(self) -> None:
        self.open_host_dialog()

    def _on_edit_host_clicked(self, *_):
        host = self._selected_host()
        if host is not None:
            self.open_host_dialog(host)

    def _on_remove_host_clicked(self) -> None:
        host = self._selected_host()
        if host is None:
            return
        self.cluster.hosts.remove(host)
        self.cluster.tasks = [t for t in self.cluster.tasks if t.host != host.name]
        self.report = None
        self._set_dirty(True)
        self._refresh_tables()
        self._on_cluster_edited()

    def _on_import_clicked(self) -> None:
        dialog = ImportDialog({h.name for h in self.cluster.hosts}, self)
        self.import_dialog = dialog

        def apply():
            for host in dialog.chosen():
                self.cluster.hosts.append(host)
                self.cluster.tasks.append(cl.Task(host=host.name))
            self._set_dirty(True)
            self._refresh_tables()
            self._on_cluster_edited()

        dialog.accepted.connect(apply)
        dialog.open()

    def _on_browse_user_file_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Model file or script", str(Path.cwd()), "Python (*.py)")
        if path:
            self.user_file.setText(path)

    # ================================================================= check

    def _valid_cluster(self) -> cl.Cluster | None:
        try:
            cl.validate(self.cluster)
        except cl.ClusterFileError as exc:
            self.statusBar().showMessage(f"Cannot go on: {exc}")
            self.details.setHtml(f"<p style='color:#b00020'><b>The settings cannot work:</b> {html.escape(str(exc))}</p>")
            self.tabs.setCurrentIndex(2)
            return None
        return copy.deepcopy(self.cluster)

    def _on_check_triggered(self) -> None:
        cluster = self._valid_cluster()
        if cluster is None:
            return
        self.report = None
        self.progress.setRange(0, len(cluster.hosts) + 1)
        self.progress.setValue(0)
        self.progress.setFormat("checking %v/%m")
        self.progress.show()
        self.statusBar().showMessage("Checking the hosts…")
        self.checking = True
        self.checker.start(cluster)
        self._update_actions()

    def _on_checker_progressed(self, done: int, total: int, what: str) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.statusBar().showMessage(f"Checking: {what}")

    def _on_checker_failed(self, message: str) -> None:
        self.checking = False
        self.progress.hide()
        self.statusBar().showMessage(f"The check could not run: {message}")
        self._update_actions()

    def _on_checker_finished(self, report) -> None:
        self.checking = False
        self.report = report
        self.progress.hide()
        self._refresh_tables()
        self._show_report(report)
        self._on_cluster_edited()
        self.statusBar().showMessage(
            f"Ready: every check passed in {report.seconds:.1f} s" if report.ready
            else f"{len(report.problems)} problem(s) found; see the Check tab")
        if not report.ready:
            self.tabs.setCurrentIndex(2)

    def _show_report(self, report) -> None:
        rows = []
        for r in report.hosts:
            p = r.probe or {}
            gpus = p.get("gpus") or []
            rows.append(
                f"<tr><td><b>{html.escape(r.name)}</b></td><td>{'ok' if r.ok else 'FAILED'}</td>"
                f"<td>{html.escape(str(p.get('python', '')))}</td><td>{html.escape(str(p.get('tensorflow') or '-'))}</td>"
                f"<td>{html.escape(str(p.get('tf_keras') or '-'))}</td><td>{len(gpus)}"
                f"{' (' + html.escape(gpus[0].get('name', '')) + ')' if gpus else ''}</td>"
                f"<td>{p.get('cpus', '')}</td></tr>")
        problems = "".join(f"<li><b>{html.escape(p.where)}</b>: {html.escape(p.cause)}.<br><i>Fix:</i> "
                           f"{html.escape(p.fix)}</li>" for p in report.problems)
        self.details.setHtml(
            f"<h3>{'Ready to start' if report.ready else 'Not ready'}</h3>"
            "<table cellpadding=4><tr><th>host</th><th>state</th><th>Python</th><th>TensorFlow</th>"
            f"<th>tf-keras</th><th>GPUs</th><th>CPUs</th></tr>{''.join(rows)}</table>"
            + (f"<h4>Problems</h4><ul>{problems}</ul>" if problems else "<p>Every check passed.</p>"))
        columns = [t for t in report.tasks if t["address"]]
        sources = list(report.matrix)
        self.matrix.clear()
        self.matrix.setRowCount(len(sources))
        self.matrix.setColumnCount(len(columns))
        self.matrix.setHorizontalHeaderLabels([f"{t['name']}\n{t['address']}" for t in columns])
        self.matrix.setVerticalHeaderLabels([f"from {s}" for s in sources])
        for i, source in enumerate(sources):
            for j, t in enumerate(columns):
                result = report.matrix[source].get(t["address"])
                if result is None:
                    item = _item("—", "the task's own host")
                else:
                    item = _item("ok" if result["ok"] else result["error"])
                    if not result["ok"]:
                        item.setForeground(Qt.red)
                        problem = next((p for p in report.problems if p.where == f"{source} -> {t['name']}"), None)
                        if problem is not None:
                            item.setToolTip(str(problem))
                self.matrix.setItem(i, j, item)
        self.matrix.resizeColumnsToContents()

    # ================================================================= run

    def _on_start_triggered(self) -> None:
        cluster = self._valid_cluster()
        if cluster is None:
            return
        self.started_event = None
        self.session.start(cluster)
        self.dashboard.set_store(self.session.store, cluster.task_names())
        self.progress.setRange(0, 0)
        self.progress.setFormat("deploying")
        self.progress.show()
        self.statusBar().showMessage("Deploying and starting…")
        self.tabs.setCurrentIndex(0)
        self._update_actions()

    def _on_session_deploy_progressed(self, host: str, sent: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(sent)
        self.progress.setFormat(f"deploying to {host}: %p%")

    def _on_session_run_started(self, run_id: str) -> None:
        self.progress.hide()
        self.session.follow_watchdog()
        self.statusBar().showMessage(f"Run {run_id}: tasks started; waiting for the cluster to form")
        self._update_actions()

    def _on_session_start_failed(self, message: str) -> None:
        self.progress.hide()
        self.statusBar().showMessage(message)
        self.session.store.note("console", "failed", message)
        self._update_actions()

    def _on_session_records_received(self, task: str, records: list) -> None:
        for r in records:
            if r.get("event") == "started" and self.started_event is None:
                self.started_event = r
                run = self.session.run
                addresses = {t.name: t.address for t in run.tasks if t.address} if run else {}
                if run is not None:
                    self.diagram.set_cluster(copy.deepcopy(run.cluster), self._gpus_by_host())
                self.diagram.set_run(r, addresses)
                self.statusBar().showMessage(f"Training: {r.get('strategy')}, global batch {r.get('global_batch')}")

    def _on_session_log_received(self, task: str, stream: str, text: str) -> None:
        self.dashboard.append_log(task, stream, text)

    def _on_session_task_ended(self, task: str, phase: str) -> None:
        self.statusBar().showMessage(f"{task} {phase}")
        self._update_actions()

    def _on_session_watchdog_fired(self, message: str) -> None:
        self.statusBar().showMessage(message)

    def _on_session_stopped(self) -> None:
        self.statusBar().showMessage("Run stopped")
        self._update_actions()

    def _on_session_ended(self) -> None:
        run = self.session.run
        if run is not None:
            failed = [t.name for t in run.tasks if t.phase != "finished"]
            self.statusBar().showMessage(f"Run {run.run_id} ended" + (f"; not finished: {', '.join(failed)}"
                                                                       if failed else ": every task finished"))
        self._update_actions()

    def _on_stop_triggered(self) -> None:
        self.statusBar().showMessage("Stopping every task (SIGTERM, then SIGKILL after 10 s)…")
        self.session.stop()

    def _on_detach_triggered(self) -> None:
        run = self.session.run
        self.session.detach()
        if run is not None:
            self.statusBar().showMessage(f"Detached; run {run.run_id} goes on (open this profile to see it again)")
        self.started_event = None
        self._update_actions()

    # ================================================================= reattach

    def look_for_runs(self) -> None:
        """In the background: runs still going on this profile's hosts come back with their history."""
        cluster = copy.deepcopy(self.cluster)
        self.threads.start("reattach", lambda: self.runs_found.emit(running_runs(cluster, self.asker)))

    def _on_runs_found(self, runs: list) -> None:
        if not runs:
            return
        if self.session.active:  # already following a run that goes on: leave it be
            for run in runs:
                self.threads.start("drop", run.detach)
            return
        newest, others = runs[0], runs[1:]
        for run in others:
            self.threads.start("drop", run.detach)
        self.started_event = None
        self.session.attach(newest)
        self.dashboard.set_store(self.session.store, newest.cluster.task_names())
        self.statusBar().showMessage(f"Reattached to run {newest.run_id}, still going")
        self._update_actions()

    # ================================================================= files

    def maybe_discard(self) -> bool:
        if not self.dirty:
            return True
        answer = QMessageBox.question(self, "Unsaved changes", "Discard the changes to this cluster?",
                                      QMessageBox.Discard | QMessageBox.Cancel)
        return answer == QMessageBox.Discard

    def open_profile(self, path) -> bool:
        path = Path(path)
        try:
            cluster = cl.load(path)
        except cl.ClusterFileError as exc:
            self.statusBar().showMessage(f"Cannot open {path}: {exc}")
            self.profiles.forget(path)
            self._fill_recent()
            if not hasattr(self, "cluster"):
                self.set_cluster(cl.default(), None)
            if self.isVisible():
                box = QMessageBox(QMessageBox.Warning, "Cannot open the cluster file", str(exc), QMessageBox.Ok, self)
                box.setAttribute(Qt.WA_DeleteOnClose)
                box.open()  # not exec(): nothing waits on it
                self.error_box = box
            return False
        self.set_cluster(cluster, path)
        self.profiles.opened(path)
        self._fill_recent()
        self.look_for_runs()
        return True

    def save_profile(self, path) -> None:
        path = Path(path)
        cl.save(self.cluster, path)
        self.path = path
        self.profiles.opened(path)
        self._fill_recent()
        self._set_dirty(False)
        self.statusBar().showMessage(f"Saved {path}")

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for p in self.profiles.recent:
            self.recent_menu.addAction(p, lambda p=p: self.maybe_discard() and self.open_profile(p))
        self.recent_menu.setEnabled(bool(self.profiles.recent))

    def _on_new_triggered(self) -> None:
        if self.maybe_discard():
            self.set_cluster(cl.Cluster([], []), None)

    def _on_open_triggered(self) -> None:
        if not self.maybe_discard():
            return
        path, _ = QFileDialog.getOpenFileName(self, "Open cluster", str(Path.cwd()), "Cluster files (*.toml)")
        if path:
            self.open_profile(path)

    def _on_save_triggered(self) -> None:
        if self.path is None:
            self._on_save_as_triggered()
        else:
            self.save_profile(self.path)

    def _on_save_as_triggered(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save cluster as", str(Path.cwd() / "cluster.toml"),
                                              "Cluster files (*.toml)")
        if path:
            self.save_profile(path)

    def _on_export_csv_triggered(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export metrics", str(Path.cwd() / "metrics.csv"), "CSV (*.csv)")
        if path:
            self.export_csv(path)

    def export_csv(self, path) -> None:
        """Write the metrics on a thread (a long run is hundreds of thousands of rows)."""
        store = self.dashboard.store
        self.statusBar().showMessage(f"Writing {path}…")

        def write():
            try:
                rows = store.write_csv(path)
                self.exported.emit(f"Wrote {rows} rows to {path}")
            except OSError as exc:
                self.exported.emit(f"Could not write {path}: {exc.strerror}; choose another place")

        self.threads.start("export", write)

    def _on_self_exported(self, message: str) -> None:
        self.statusBar().showMessage(message)

    def _on_export_png_triggered(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export plots", str(Path.cwd() / "plots.png"), "PNG (*.png)")
        if path:
            self.dashboard.export_png(path)
            self.statusBar().showMessage(f"Wrote {path}")

    # ================================================================= state

    def _update_actions(self) -> None:
        running = self.session.run is not None and self.session.active
        has_tasks = bool(getattr(self, "cluster", None) and self.cluster.tasks)
        self.act_check.setEnabled(has_tasks and not self.checking)
        self.act_start.setEnabled(has_tasks and not running)
        self.act_stop.setEnabled(running)
        self.act_detach.setEnabled(self.session.run is not None)
        if hasattr(self, "btn_edit"):
            selected = self._selected_host() is not None
            self.btn_edit.setEnabled(selected)
            self.btn_remove.setEnabled(selected)

    def _on_asker_asked(self, host: str, key_type: str, fingerprint: str) -> None:
        dialog = FingerprintDialog(host, key_type, fingerprint, self)
        dialog.finished.connect(lambda result: self.asker.answer(result == FingerprintDialog.Accepted))
        self.fingerprint_dialog = dialog
        dialog.open()

    def closeEvent(self, event):  # noqa: N802 (Qt's name)
        if not self.maybe_discard():
            event.ignore()
            return
        self.asker.answer(False)
        self.dashboard.timer.stop()
        self.session.detach()   # the run goes on; its follow threads end here
        self.threads.join(timeout=10)
        super().closeEvent(event)
