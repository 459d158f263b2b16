"""The setup form: the hosts and their tasks, and the training settings.

The settings come with the global batch line; a script's own rows stand instead when a script runs."""

from __future__ import annotations

import html
import shlex
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QGroupBox,
                               QHBoxLayout, QHeaderView, QLabel, QLineEdit, QMessageBox, QPushButton, QSpinBox, QStyle,
                               QTableWidget, QVBoxLayout, QWidget)

from console import cluster as cl
from console import environments
from console.checks import Report
from console.cluster_fields import TRAINING, Field
from console.gui.cells import cell
from console.gui.check_view import host_marks
from console.gui.dialogs import HostDialog, ImportDialog, SlurmDialog
from console.run.placement import placement_for
from console.diagram_model import picture
from trainer.strategies import Strategy
from trainer.tf_config import CHIEF, WORKER, chief_name

SCRIPT = "script"  # the workload that runs a user's own script: the trainer's settings do not reach it
MODULE = "module"  # a user's package module, run as python -m from its workdir (a script's rows too)
USER_CODE = (SCRIPT, MODULE)
WORKLOADS = (*TRAINING["workload"].choices, SCRIPT, MODULE)
CAPTURE_TEXT = "Capture metrics (fit, tf.summary, printed values)"
ARGS_TIP = "Split as a shell splits them: quote an argument that holds spaces"


def gpus_text(chosen: list[int], found: int | None) -> str:
    """A task's GPUs in the tasks table: those chosen, else what it gets: every GPU its host has (``found``, once a
    check saw them: "none (CPU)" for a host with none), "all the host's" before a check."""
    if chosen:
        return ",".join(map(str, chosen))
    if found is None:
        return "all the host's"
    return "none (CPU)" if found == 0 else f"all {found}"


class SetupForm(QWidget):
    """Edits a cluster in place: its hosts and tasks (marked by the last check) and its training settings."""

    cluster_changed = Signal()  # the person edited the cluster: hosts, tasks or training

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.cluster = cl.Cluster([], [])
        self.report: Report | None = None  # the last check of these hosts
        self._loading = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self._build_hosts(), 3)
        layout.addWidget(self._build_training(), 2)

    def _build_hosts(self) -> QGroupBox:
        self.hosts_table = QTableWidget(0, 6)
        self.hosts_table.setHorizontalHeaderLabels(["", "Host", "Address", "User", "Python", "Tasks"])
        self.hosts_table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.hosts_table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.hosts_table.verticalHeader().hide()
        header = self.hosts_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setStretchLastSection(True)
        header.setMaximumSectionSize(170)
        self.hosts_table.setTextElideMode(Qt.ElideMiddle)
        self.hosts_table.doubleClicked.connect(self._on_edit_host_clicked)
        self.hosts_table.itemSelectionChanged.connect(self._on_hosts_selection_changed)
        self.btn_add = QPushButton("Add…")
        self.btn_add.clicked.connect(self._on_add_host_clicked)
        self.btn_slurm = QPushButton("Slurm cluster…")
        self.btn_slurm.setToolTip("A Slurm cluster instead of hosts: its login host, partition, nodes and time limit")
        self.btn_slurm.clicked.connect(self._on_slurm_clicked)
        self.btn_import = QPushButton("Import from ~/.ssh/config…")
        self.btn_import.clicked.connect(self._on_import_clicked)
        self.btn_edit = QPushButton("Edit…")
        self.btn_edit.clicked.connect(self._on_edit_host_clicked)
        self.btn_remove = QPushButton("Remove")
        self.btn_remove.clicked.connect(self._on_remove_host_clicked)
        # Two rows: one would make the side panel scroll sideways at its width.
        hosts_buttons, other_buttons = _row(self.btn_add, self.btn_edit, self.btn_remove), _row(self.btn_import,
                                                                                              self.btn_slurm)
        for row in (hosts_buttons, other_buttons):
            row.addStretch(1)
        self.tasks_table = QTableWidget(0, 5)
        self.tasks_table.setHorizontalHeaderLabels(["Task", "Host", "Role", "Port", "GPUs"])
        self.tasks_table.verticalHeader().hide()
        self.tasks_table.setSelectionMode(QAbstractItemView.NoSelection)
        self.tasks_table.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
        box = QGroupBox("Hosts")
        layout = QVBoxLayout(box)
        layout.addWidget(self.hosts_table)
        layout.addLayout(hosts_buttons)
        layout.addLayout(other_buttons)
        layout.addWidget(QLabel("Tasks (edit a host to change its tasks)"))
        layout.addWidget(self.tasks_table)
        return box

    def _build_training(self) -> QGroupBox:
        self.workload = QComboBox()
        self.workload.addItems(WORKLOADS)
        self.user_file = QLineEdit()
        self.user_file.setPlaceholderText("your model file (build_model, train_dataset) or script")
        self.btn_user_file = browse = QPushButton("…")
        browse.clicked.connect(self._on_browse_user_file_clicked)
        # A script's own rows: the folder shipped with it, its arguments, its Keras, the capture.
        self.workdir = QLineEdit()
        self.workdir.setPlaceholderText("the script's folder")
        self.workdir.setToolTip("The folder shipped to every host with the script (each task runs in its own copy); "
                                "empty: the script's folder")
        self.btn_workdir = QPushButton("…")
        self.btn_workdir.clicked.connect(self._on_browse_workdir_clicked)
        self.script_args = QLineEdit()
        self.script_args.setPlaceholderText("the script's arguments, as in a shell: --epochs 2")
        self.script_args.setToolTip(ARGS_TIP)
        self.keras = QComboBox()
        for flavour in TRAINING["keras"].choices:
            self.keras.addItem(flavour, flavour)
        self.keras.setToolTip("The Keras the script gets; multi-worker fit needs tf-keras (Keras 3 fails there)")
        self.capture = QCheckBox(CAPTURE_TEXT)
        self.capture.setToolTip("What tfcc captures from the script from the outside: its fit, its tf.summary scalars, "
                                "the values it prints. Off: the dashboard shows only what the script reports itself "
                                "(MetricsReporter)")
        # Each number's range and each list's choices are the cluster file's (console.cluster_fields).
        self.epochs = spin_box(TRAINING["epochs"])
        self.batch_mode = QComboBox()
        self.batch_mode.addItems(["per replica", "global"])
        self.batch = spin_box(TRAINING["per_replica_batch"])  # a global batch has the same range
        self.lr = spin_box(TRAINING["learning_rate"], decimals=6)
        self.lr.setSingleStep(0.0005)
        self.lr_rule = combo_box(TRAINING["lr_scaling"])
        self.strategy = combo_box(TRAINING["strategy"])
        self.communication = combo_box(TRAINING["communication"])
        self.autoshard = combo_box(TRAINING["autoshard"])
        self.max_restarts = spin_box(TRAINING["max_restarts"], with_tip=True)
        self.backup_seconds = spin_box(TRAINING["backup_seconds"], decimals=1, with_tip=True)
        self.backup_seconds.setSuffix(" s")
        self.elastic = spin_box(TRAINING["elastic"])
        self.elastic.setPrefix("elastic: ")
        self.elastic.setSpecialValueText("elastic: off")
        self.elastic.setToolTip("The fewest training tasks the run goes on with (off: a restart needs every host). "
                                "A host lost for good, or failing again and again, leaves the run (its tasks move "
                                "to a spare host when one is listed), which restarts on the others with the same "
                                "global batch; it rejoins at a backup once it answers again")
        self.stop_on_nan = QCheckBox("stop at NaN")
        self.stop_on_nan.setToolTip(tip(TRAINING["stop_on_nan"]))
        self.backup_label = QLabel("backup every")  # tfcc's trainer backs up; a script keeps its own
        self.batch_label = QLabel()
        self.batch_label.setWordWrap(True)
        self.batch_label.setStyleSheet("font-weight: bold")
        self.form = form = QFormLayout()
        file_row = _row(self.user_file, browse)
        batch_row = _row(self.batch, self.batch_mode)
        # The rows of a script and those it never sees (the trainer's): each kind shown only when it applies.
        self.script_rows = (_row(self.workdir, self.btn_workdir), self.script_args, self.keras, self.capture)
        self.trainer_rows = (self.epochs, batch_row, self.lr, self.lr_rule, self.strategy, self.communication,
                             self.autoshard, self.batch_label)
        rows = (("Workload", self.workload), ("Model file / script", file_row),
                ("Workdir", self.script_rows[0]), ("Arguments", self.script_args), ("Keras", self.keras),
                ("", self.capture),
                ("Epochs", self.epochs), ("Batch", batch_row), ("Learning rate", self.lr),
                ("LR scaling", self.lr_rule), ("Strategy", self.strategy), ("Communication", self.communication),
                ("Autoshard", self.autoshard),
                ("Restarts", _row(self.max_restarts, self.backup_label, self.backup_seconds, stretch=True)),
                ("", _row(self.elastic, self.stop_on_nan, stretch=True)),
                ("", self.batch_label))
        for label, field in rows:
            if field is self.capture:
                form.addRow(field)  # the whole row's width: beside the labels it would be wider than the panel
            else:
                form.addRow(label, field)
        self.file_label = form.labelForField(file_row)
        for combo in (self.workload, self.batch_mode, self.lr_rule, self.strategy, self.communication, self.autoshard,
                      self.keras):
            combo.currentIndexChanged.connect(self._on_training_edited)
        for spin in (self.epochs, self.batch, self.lr, self.max_restarts, self.backup_seconds, self.elastic):
            spin.valueChanged.connect(self._on_training_edited)
        for check in (self.stop_on_nan, self.capture):
            check.toggled.connect(self._on_training_edited)
        for line in (self.user_file, self.workdir, self.script_args):
            line.textChanged.connect(self._on_training_edited)
        box = QGroupBox("Training")
        box.setLayout(form)
        self._show_workload_rows()
        return box

    # ------------------------------------------------------------ the model

    def set_cluster(self, cluster: cl.Cluster) -> None:
        """Show ``cluster`` and edit it in place from now on; no check has looked at its hosts yet."""
        self.cluster = cluster
        self.report = None
        self._loading = True
        try:
            t = cluster.training
            self.workload.setCurrentText(SCRIPT if t.script else MODULE if t.module else
                                         ("file" if t.model_file else t.workload))
            self.user_file.setText(t.script or t.module or t.model_file)
            self.workdir.setText(t.workdir)
            self.script_args.setText(shlex.join(t.args))
            self._script_args()  # unmarked: a file's arguments are whole
            self.keras.setCurrentIndex(max(0, self.keras.findData(t.keras)))
            self.capture.setChecked(t.capture)
            self.epochs.setValue(t.epochs)
            self.batch_mode.setCurrentIndex(1 if t.global_batch else 0)
            self.batch.setValue(t.global_batch or t.per_replica_batch)
            self.lr.setValue(t.learning_rate)
            self.lr_rule.setCurrentText(t.lr_scaling)
            self.strategy.setCurrentText(t.strategy)
            self.communication.setCurrentText(t.communication)
            self.autoshard.setCurrentText(t.autoshard)
            self.max_restarts.setValue(t.max_restarts)
            self.backup_seconds.setValue(t.backup_seconds)
            self.elastic.setValue(t.elastic)
            self.stop_on_nan.setChecked(t.stop_on_nan)
        finally:
            self._loading = False
        self._show_workload_rows()
        self._refresh_tables()
        self._refresh_batch_line()

    def add_packages(self, packages: list[str]) -> None:
        """Packages the person asked Make ready to add, in the cluster's [environment] (edited: unsaved)."""
        if environments.add_packages(self.cluster, packages):
            self.cluster_changed.emit()

    def set_report(self, report: Report) -> None:
        """A check of these hosts: its marks on them, and the GPUs it found in the batch line."""
        self.report = report
        self._refresh_tables()
        self._refresh_batch_line()

    def code_chosen(self) -> bool:
        """A script or a module is the workload chosen (its path may not be set yet)."""
        return self.workload.currentText() in USER_CODE

    def gpus_by_host(self) -> dict[str, int]:
        """The GPUs the last check found on each host it reached ({} before a check)."""
        if self.report is None:
            return {}
        return {r.name: len((r.probe or {}).get("gpus") or []) for r in self.report.hosts if r.probe}

    def _on_training_edited(self, *_) -> None:
        if self._loading:
            return
        t = self.cluster.training
        workload = self.workload.currentText()
        path = self.user_file.text().strip()
        t.workload = workload if workload in TRAINING["workload"].choices else TRAINING["workload"].default
        t.model_file = path if workload == "file" else ""
        t.script = path if workload == SCRIPT else ""
        t.module = path if workload == MODULE else ""
        t.workdir = self.workdir.text().strip() if workload in USER_CODE else ""  # shipped with the code: only then
        if workload in USER_CODE:
            args = self._script_args()
            if args is not None:  # else the person is still typing a quote: keep the last whole arguments
                t.args = args
            t.keras = self.keras.currentData()
            t.capture = self.capture.isChecked()
        t.epochs = self.epochs.value()
        if self.batch_mode.currentIndex() == 1:
            t.global_batch, t.per_replica_batch = self.batch.value(), TRAINING["per_replica_batch"].default
        else:
            t.global_batch, t.per_replica_batch = 0, self.batch.value()
        t.learning_rate = self.lr.value()
        t.lr_scaling = self.lr_rule.currentText()
        t.strategy = self.strategy.currentText()
        t.communication = self.communication.currentText()
        t.autoshard = self.autoshard.currentText()
        t.max_restarts = self.max_restarts.value()
        t.backup_seconds = self.backup_seconds.value()
        t.elastic = self.elastic.value()
        t.stop_on_nan = self.stop_on_nan.isChecked()
        self._show_workload_rows()
        self._refresh_batch_line()
        self.cluster_changed.emit()

    def _script_args(self) -> list[str] | None:
        """The arguments line split as a shell splits it; None (and the line marked) while a quote is open."""
        try:
            args = shlex.split(self.script_args.text())
        except ValueError as exc:  # "No closing quotation", "No escaped character"
            self.script_args.setStyleSheet("color: #b00020")
            self.script_args.setToolTip(f"{exc}: close the quote. {ARGS_TIP}")
            return None
        self.script_args.setStyleSheet("")
        self.script_args.setToolTip(ARGS_TIP)
        return args

    def _on_hosts_edited(self, keep_report: bool = False) -> None:
        if not keep_report:
            self.report = None  # it spoke of other hosts
        self._refresh_keras_hint()
        self._refresh_tables()
        self._refresh_batch_line()
        self.cluster_changed.emit()

    # ------------------------------------------------------------ showing it

    def _show_workload_rows(self) -> None:
        """A script gets its own rows; the trainer's (epochs, batch, learning rate, strategy, …) are hidden
        then, their room given back: the script never sees them."""
        workload = self.workload.currentText()
        script = workload in USER_CODE
        for field in self.script_rows:
            self.form.setRowVisible(field, script)
        for field in self.trainer_rows:
            self.form.setRowVisible(field, not script)
        for widget in (self.backup_label, self.backup_seconds):
            widget.setVisible(not script)
        self.file_label.setText({SCRIPT: "Script", MODULE: "Module"}.get(workload, "Model file / script"))
        self.user_file.setPlaceholderText(
            "pkg.module, run as python -m pkg.module in the workdir" if workload == MODULE else
            "your training script: path/to/train.py, run as python train.py" if workload == SCRIPT else
            "your model file (build_model, train_dataset)")
        self.workdir.setPlaceholderText("the folder tfcc runs in" if workload == MODULE else "the script's folder")
        self._refresh_keras_hint()

    def _refresh_keras_hint(self) -> None:
        """What ``auto`` gives a script on these tasks, beside it: e.g. "auto (tf-keras: 2 training tasks)"."""
        c = self.cluster
        auto = TRAINING["keras"].default  # resolved at the start (console.run.launch.keras_choice); the Check says it
        text = (f"{auto} ({cl.TF_KERAS}: {c.training_kind})" if c.needs_tf_keras else
                f"{auto} (by its imports: tf.keras → {cl.TF_KERAS}, keras → Keras 3)")
        self.keras.setItemText(self.keras.findData(auto), text)

    def _refresh_batch_line(self) -> None:
        self.user_file.setEnabled(self.workload.currentText() in ("file", *USER_CODE))
        if not self.cluster.tasks:
            self.batch_label.setText("Add a host with a worker to see the global batch.")
            return
        _, split = picture(self.cluster, self.gpus_by_host())
        text = split.label + (f"  ({split.per_worker} per worker)" if split.replicas_per_worker > 1 else "")
        self.batch_label.setText(f"<span style='color:#b00020'>{html.escape(split.problem)}</span>"
                                 if split.problem else text)

    def _refresh_tables(self) -> None:
        c = self.cluster
        marks = host_marks(self.report) if self.report is not None else {}
        self.hosts_table.setRowCount(1 if c.slurm is not None else len(c.hosts))
        if c.slurm is not None:  # one row: the login host; Slurm picks the nodes
            s = c.slurm
            where = f"partition {s.partition}" if s.partition else "the default partition"
            row_cells = (cell(""), cell("Slurm"), cell(s.login), cell(s.user), cell(s.python or "python3"),
                         cell(f"{s.nodes} node(s) × {s.tasks_per_node} task(s), {where}, {s.time}"))
            for column, item in enumerate(row_cells):
                self.hosts_table.setItem(0, column, item)
        for row, host in enumerate([] if c.slurm is not None else c.hosts):
            tasks = [n for n, t in zip(c.task_names(), c.tasks) if t.host == host.name]
            status = cell("")
            if host.name in marks:
                bad = marks[host.name]
                icon = QStyle.SP_MessageBoxCritical if bad else QStyle.SP_DialogApplyButton
                status.setIcon(self.style().standardIcon(icon))
                status.setToolTip("\n".join(bad) if bad else "every check passed")
                status.setData(Qt.UserRole, "failed" if bad else "ok")
            python = host.python or ("this console's Python" if host.local else "python3")
            row_cells = (status, cell(host.name), cell("this machine" if host.local else host.address),
                         cell("" if host.local else host.user), cell(python, host.interpreter),
                         cell(", ".join(tasks) or ("spare (an elastic run's)" if host.spare else "none")))
            for column, item in enumerate(row_cells):
                self.hosts_table.setItem(row, column, item)
        names = c.task_names()
        self.tasks_table.setRowCount(len(c.tasks))
        chief = chief_name(names)
        found = self.gpus_by_host() if self.report is not None else {}  # what the check saw on each host
        # Where each task is planned: its host, or the node a Slurm job will have (Slurm names it)
        where = {i: machine for machine, tasks in placement_for(c).machines().items() for i in tasks}
        for row, (name, task) in enumerate(zip(names, c.tasks)):
            row_cells = (cell(("\u265b " if name == chief else "") + name), cell(where.get(row, task.host)),
                         cell(task.role),
                         cell(str(task.port)), cell(gpus_text(task.gpus, found.get(task.host))))
            for column, item in enumerate(row_cells):
                self.tasks_table.setItem(row, column, item)
        self._on_hosts_selection_changed()

    # ------------------------------------------------------------ hosts

    def _selected_host(self) -> cl.Host | None:
        rows = self.hosts_table.selectionModel().selectedRows()
        return self.cluster.hosts[rows[0].row()] if rows and self.cluster.slurm is None else None

    def _on_hosts_selection_changed(self) -> None:
        slurm = self.cluster.slurm is not None
        selected = self._selected_host() is not None or (slurm and self.hosts_table.selectionModel().hasSelection())
        self.btn_edit.setEnabled(selected)
        self.btn_remove.setEnabled(selected)
        for button in (self.btn_add, self.btn_import):  # a Slurm cluster has no hosts of its own
            button.setEnabled(not slurm)

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
        if any(t.role == CHIEF for t in tasks):  # at most one chief
            for t in self.cluster.tasks:
                if t.role == CHIEF and t not in tasks:
                    t.role = WORKER
        self._on_hosts_edited()

    def _on_add_host_clicked(self) -> None:
        self.open_host_dialog()

    def _on_slurm_clicked(self) -> None:
        self.open_slurm_dialog()

    def open_slurm_dialog(self) -> SlurmDialog:
        """The Slurm cluster's dialog (its settings when the cluster is one), opened; applied on accept: the
        cluster's hosts and tasks become the Slurm job's."""
        dialog = SlurmDialog(self.cluster.slurm, self)
        dialog.accepted.connect(lambda: self._apply_slurm_dialog(dialog))
        dialog.open()
        self.slurm_dialog = dialog
        return dialog

    def _apply_slurm_dialog(self, dialog: SlurmDialog) -> None:
        slurm = dialog.slurm()
        self.cluster.slurm = slurm
        self.cluster.hosts, self.cluster.tasks = [], cl.slurm_tasks(slurm)
        if slurm.parameter_servers and self.cluster.training.strategy == Strategy.AUTO:
            self.cluster.training.strategy = Strategy.PARAMETER_SERVER
        self._on_hosts_edited()

    def _on_edit_host_clicked(self, *_) -> None:
        if self.cluster.slurm is not None:
            self.open_slurm_dialog()
            return
        host = self._selected_host()
        if host is not None:
            self.open_host_dialog(host)

    def _on_remove_host_clicked(self) -> None:
        """Asks first (a dialog that waits for nothing): the host and its tasks, or the Slurm cluster, go on a yes."""
        host = self._selected_host() if self.cluster.slurm is None else None
        if self.cluster.slurm is None and host is None:
            return
        if host is None:
            what = "the Slurm cluster (back to hosts of your own: none yet)"
        else:
            count = sum(t.host == host.name for t in self.cluster.tasks)
            what = f"host {host.name} and its {count} task{'s' * (count != 1)}"
        box = self.remove_box = QMessageBox(QMessageBox.Question, "Remove?",
                                            f"Remove {what} from this cluster? Nothing on the host is touched; the "
                                            "cluster file changes when you save it.",
                                            QMessageBox.Yes | QMessageBox.No, self)
        box.setDefaultButton(QMessageBox.No)
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.finished.connect(lambda _: self._remove(host) if box.clickedButton() is box.button(QMessageBox.Yes)
                             else None)
        box.open()

    def _remove(self, host: cl.Host | None) -> None:
        """``host`` and its tasks go (None: the Slurm cluster)."""
        if host is None:
            self.cluster.slurm, self.cluster.hosts, self.cluster.tasks = None, [], []
        elif host in self.cluster.hosts:
            self.cluster.hosts.remove(host)
            self.cluster.tasks = [t for t in self.cluster.tasks if t.host != host.name]
        self._on_hosts_edited()

    def _on_import_clicked(self) -> None:
        dialog = ImportDialog({h.name for h in self.cluster.hosts}, self)
        self.import_dialog = dialog

        def apply():
            for host in dialog.chosen():
                self.cluster.hosts.append(host)
                self.cluster.tasks.append(cl.Task(host=host.name))
            self._on_hosts_edited(keep_report=True)  # it still speaks of the hosts that were there

        dialog.accepted.connect(apply)
        dialog.open()

    def _on_browse_user_file_clicked(self) -> None:
        workload = self.workload.currentText()
        title = {SCRIPT: "Script", MODULE: "The module's file (in its package)"}.get(workload, "Model file or script")
        start = self.workdir.text().strip() if workload == MODULE else ""
        path, _ = QFileDialog.getOpenFileName(self, title, start or str(Path.cwd()), "Python (*.py)")
        if not path:
            return
        if workload != MODULE:
            self.user_file.setText(path)
            return
        workdir, module = module_of(Path(path), Path(self.workdir.text().strip()) if start else None)
        if not self.workdir.text().strip() or Path(self.workdir.text().strip()).resolve() != workdir:
            self.workdir.setText(str(workdir))
        self.user_file.setText(module)

    def _on_browse_workdir_clicked(self) -> None:
        script = self.user_file.text().strip()
        start = self.workdir.text().strip() or (str(Path(script).parent) if script else str(Path.cwd()))
        path = QFileDialog.getExistingDirectory(self, "The script's workdir (shipped with it)", start)
        if path:
            self.workdir.setText(path)


def module_of(file: Path, workdir: Path | None = None) -> tuple[Path, str]:
    """The workdir and module name that run ``file`` as ``python -m``: from ``workdir`` when it holds the file,
    else from the folder above its top package (the highest folder of ``__init__.py`` files above it)."""
    file = file.resolve()
    parts = [file.stem] if file.name != "__main__.py" else []
    if workdir is not None and file.is_relative_to(workdir.resolve()):
        rel = file.relative_to(workdir.resolve()).with_suffix("")
        names = list(rel.parts)
        return workdir.resolve(), ".".join(names[:-1] if names[-1] == "__main__" else names)
    folder = file.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    if not parts:  # a lone __main__.py: its folder is the package
        parts, folder = [folder.name], folder.parent
    return folder, ".".join(parts)


def tip(field: Field) -> str:
    """A field's help as a tooltip: a sentence."""
    return field.help[:1].upper() + field.help[1:]


def spin_box(field: Field, decimals: int = 0, with_tip: bool = False) -> QSpinBox | QDoubleSpinBox:
    """A spin box over ``field``'s range (a float's lowest is the least it shows above its bound), its help as the
    tooltip if ``with_tip``."""
    if field.type is float:
        spin = QDoubleSpinBox()
        spin.setDecimals(decimals)
        spin.setRange(field.low + 10 ** -decimals, field.high)
    else:
        spin = QSpinBox()
        spin.setRange(field.low, field.high)
    if with_tip:
        spin.setToolTip(tip(field))
    return spin


def combo_box(field: Field) -> QComboBox:
    """A list of ``field``'s choices."""
    combo = QComboBox()
    combo.addItems(field.choices)
    return combo


def _row(*widgets: QWidget, stretch: bool = False) -> QHBoxLayout:
    """``widgets`` side by side (``stretch``: at their own widths, the room left after them)."""
    row = QHBoxLayout()
    for widget in widgets:
        row.addWidget(widget)
    if stretch:
        row.addStretch(1)
    return row
