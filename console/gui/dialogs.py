"""Dialogs: add or edit a host (validated as you type), import hosts from ~/.ssh/config, trust a host key."""

from __future__ import annotations

import os
import re

import paramiko
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QListWidget, QListWidgetItem, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from console import cluster as cl
from console.cluster_fields import HOSTS, SLURM, TASKS, Field
from console.gui.elided import ElidedLabel
from console.remote.ssh import ssh_config_path
from trainer.tf_config import CHIEF, EVALUATOR, PS, WORKER


def form_of(*rows: tuple) -> QFormLayout:
    """A form of (label, field) rows; a field is a widget or a layout."""
    form = QFormLayout()
    for label, field in rows:
        form.addRow(label, field)
    return form


def parse_port(text: str):
    """``auto`` or a port number, or raise ValueError with what to type."""
    text, port = text.strip().lower(), TASKS["port"]
    if text in ("", port.default):
        return port.default
    if not text.isdigit() or port.problem(int(text)):
        raise ValueError(f"port {text!r}: type auto or a number from {port.low} to {port.high}")
    return int(text)


def parse_gpus(text: str) -> list[int]:
    text = text.strip()
    if not text:
        return []
    try:
        gpus = [int(p) for p in text.replace(" ", "").split(",") if p]
    except ValueError:
        raise ValueError(f"GPUs {text!r}: list GPU indices like 0,1 (or leave empty for all)") from None
    low, high = TASKS["gpus"].low, TASKS["gpus"].high
    if any(not low <= g <= high for g in gpus) or len(set(gpus)) != len(gpus):
        raise ValueError(f"GPUs {text!r}: indices must be different, from {low} to {high}")
    return gpus


# A field with a problem is framed red; one without keeps a frame of the same size (the fields never move).
FIELD_OK_STYLE = "QLineEdit { border: 1px solid #a0a0a0; border-radius: 2px; padding: 2px }"
FIELD_ERROR_STYLE = "QLineEdit { border: 1px solid #b00020; border-radius: 2px; padding: 2px }"


def _error_label() -> ElidedLabel:
    """A field's problem under it: a line whose room is kept (the fields below never move as one comes or goes),
    cut to the dialog's width with the whole in its tooltip."""
    label = ElidedLabel()
    label.setStyleSheet("color: #b00020")
    return label


_USER_HOST_PORT = re.compile(r"^(?:(?P<user>[^@\s:]+)@)?(?P<host>[^@\s:]+|\[[0-9A-Fa-f:.]+\])(?::(?P<port>\d{1,5}))?$")


def split_address(text: str) -> tuple[str, str, int | None] | None:
    """``user@host:port`` (as ssh and scp take it; any part but the host optional) as (user, host, port); None
    when ``text`` is no such thing, or is a plain address (nothing to split)."""
    found = _USER_HOST_PORT.match(text.strip())
    if found is None or (found["user"] is None and found["port"] is None):
        return None
    port = int(found["port"]) if found["port"] is not None else None
    if port is not None and HOSTS["port"].problem(port):
        return None
    return found["user"] or "", found["host"].strip("[]"), port


class HostDialog(QDialog):
    """Add or edit a host and the worker tasks it runs. OK is enabled only when everything is valid."""

    def __init__(self, taken_names: set[str], host: cl.Host | None = None, tasks: list[cl.Task] | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Edit host" if host else "Add host")
        self.taken = set(taken_names) - ({host.name} if host else set())
        host = host or cl.Host(name="")
        tasks = tasks or [cl.Task(host=host.name)]
        self.name = QLineEdit(host.name)
        self.name.setPlaceholderText("a short name, e.g. gpu1")
        self.local = QCheckBox("this machine (no SSH)")
        self.local.setChecked(host.local)
        self.address = QLineEdit(host.address)
        self.address.setPlaceholderText("host name, IP or ~/.ssh/config alias")
        self.user = QLineEdit(host.user)
        self.user.setPlaceholderText("from ~/.ssh/config, else your user")
        self.ssh_port = _spin(HOSTS["port"], host.port)
        self.key = QLineEdit(host.key)
        self.key.setPlaceholderText("from ~/.ssh/config or ssh-agent")
        browse = QPushButton("…")
        browse.clicked.connect(self._on_browse_clicked)
        key_row = QHBoxLayout()
        key_row.addWidget(self.key)
        key_row.addWidget(browse)
        self.python = QLineEdit(host.python)
        self.python.setPlaceholderText("python3 (this console's Python on this machine)")
        self.workers = QSpinBox()
        self.workers.setRange(0, 64)
        self.workers.setValue(sum(t.role not in (PS, EVALUATOR) for t in tasks))
        self.ps = QSpinBox()
        self.ps.setRange(0, 16)
        self.ps.setValue(sum(t.role == PS for t in tasks))
        self.ps.setToolTip("Parameter servers hold the variables of parameter-server training (with a chief "
                           "and workers); 0 for synchronous training")
        self.evaluator = QCheckBox("an evaluator here (parameter-server training; on the chief's host)")
        self.evaluator.setChecked(any(t.role == cl.EVALUATOR for t in tasks))
        self.evaluator.setToolTip("Evaluates each checkpoint the chief writes on the validation data, apart "
                                  "from training; it reads the chief's run folder, so it runs on the chief's host")
        self.task_port = QLineEdit(str(tasks[0].port) if tasks else "auto")
        self.gpus = QLineEdit(",".join(map(str, tasks[0].gpus)) if tasks else "")
        self.gpus.setPlaceholderText("all it has (or e.g. 0,1)")
        self.spare = QCheckBox("a spare: runs no task until an elastic run loses a host, whose tasks move here")
        self.spare.setChecked(host.spare)
        self.chief = QCheckBox("its first task is the chief (else worker 0 is)")
        self.chief.setChecked(bool(tasks) and tasks[0].role == CHIEF)
        # Each field's problem under it, once the person edited that field (a new dialog shows none; OK's
        # tooltip says what is missing).
        self.errors = {field: _error_label() for field in (self.name, self.address, self.user, self.key,
                                                           self.python, self.task_port, self.gpus)}
        self._edited: set = set()
        e = self.errors
        form = form_of(("Name", self.name), ("", e[self.name]), ("", self.local), ("Address", self.address),
                       ("", e[self.address]), ("SSH user", self.user), ("", e[self.user]), ("SSH port", self.ssh_port),
                       ("SSH key", key_row), ("", e[self.key]), ("Python", self.python), ("", e[self.python]),
                       ("Workers on this host", self.workers), ("Parameter servers", self.ps),
                       ("Task port", self.task_port), ("", e[self.task_port]), ("GPUs per task", self.gpus),
                       ("", e[self.gpus]), ("", self.chief), ("", self.evaluator), ("", self.spare))
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.buttons)
        for edit in (self.name, self.address, self.user, self.key, self.python, self.task_port, self.gpus):
            edit.textEdited.connect(lambda _text, edit=edit: self._on_field_edited(edit))  # the person's, not ours
            edit.textChanged.connect(self._on_field_changed)
        self.address.editingFinished.connect(self._on_address_editing_finished)
        for box in (self.local, self.chief, self.evaluator, self.spare):
            box.toggled.connect(self._on_field_changed)
        self.spare.toggled.connect(self._on_spare_toggled)
        self._on_spare_toggled(self.spare.isChecked())
        for spin in (self.ssh_port, self.workers, self.ps):
            spin.valueChanged.connect(self._on_field_changed)
        self._on_field_changed()

    def problems(self) -> list[str]:
        """What keeps OK disabled, in words that say what to do."""
        return [words for _, words in self.field_problems()]

    def field_problems(self) -> list[tuple[QLineEdit, str]]:
        """Each problem with its field (the same rules as a cluster file's: console.cluster)."""
        out = []
        name = self.name.text().strip()
        problem = cl.host_name_problem(name)
        if problem:
            out.append((self.name, f"Name: {problem}."))
        elif name in self.taken:
            out.append((self.name, f"Name: {name!r} is already a host of this cluster; pick another."))
        local = self.local.isChecked()
        address = self.address.text().strip()
        if not local and not address:
            out.append((self.address, "Address: type the host's name or IP (or tick 'this machine')."))
        elif not local and split_address(address) is not None:  # user@host:port: its parts go to their fields
            user, host, _ = split_address(address)                 # when the person leaves the field (or at OK)
            if cl.address_problem(host) or cl.user_problem(user):
                out.append((self.address, f"Address: {address!r}: "
                                          f"{cl.address_problem(host) or 'its user: ' + cl.user_problem(user)}."))
        elif not local and cl.address_problem(address):
            out.append((self.address, f"Address: {address!r}: {cl.address_problem(address)}."))
        user = self.user.text().strip()
        if not local and cl.user_problem(user):
            out.append((self.user, f"SSH user: {user!r}: {cl.user_problem(user)}."))
        key = self.key.text().strip()
        if key and not os.path.isfile(os.path.expanduser(key)):
            out.append((self.key, f"SSH key: {key} does not exist."))
        python = self.python.text().strip()
        if python and local and os.sep in python and not os.access(os.path.expanduser(python), os.X_OK):
            out.append((self.python, f"Python: {python} is not an executable on this machine."))
        try:
            parse_port(self.task_port.text())
        except ValueError as exc:
            out.append((self.task_port, f"Task {exc}."))
        try:
            parse_gpus(self.gpus.text())
        except ValueError as exc:
            out.append((self.gpus, f"{exc}."))
        return out

    def shown_errors(self) -> str:
        """The problems shown at their fields now."""
        return "\n".join(label.text() for label in self.errors.values() if label.text())

    def _on_field_edited(self, field: QLineEdit) -> None:
        self._edited.add(field)
        self._on_field_changed()

    def _on_field_changed(self, *_):
        self.address.setEnabled(True)
        for widget in (self.user, self.ssh_port, self.key):
            widget.setEnabled(not self.local.isChecked())
        problems = self.field_problems()
        by_field = {}
        for field, words in problems:
            by_field.setdefault(field, words)
        for field, label in self.errors.items():
            words = by_field.get(field, "") if field in self._edited else ""
            label.setText(words)
            field.setStyleSheet(FIELD_ERROR_STYLE if words else FIELD_OK_STYLE)
        ok = self.buttons.button(QDialogButtonBox.Ok)
        ok.setEnabled(not problems)
        ok.setToolTip("\n".join(words for _, words in problems))

    def _on_address_editing_finished(self) -> None:
        """``user@host:port`` typed (or pasted) as the address: each part to its own field."""
        parts = split_address(self.address.text())
        if parts is None:
            return
        user, address, port = parts
        if user:
            self.user.setText(user)
        if port is not None:
            self.ssh_port.setValue(port)
        self.address.setText(address)

    def _on_spare_toggled(self, spare: bool) -> None:
        """A spare runs no task: what would say its tasks is greyed."""
        for field in (self.workers, self.ps, self.task_port, self.gpus, self.chief, self.evaluator):
            field.setEnabled(not spare)

    def _on_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "SSH private key", os.path.expanduser("~/.ssh"))
        if path:
            self.key.setText(path)

    def host(self) -> cl.Host:
        self._on_address_editing_finished()  # OK pressed with the address field still in focus
        local = self.local.isChecked()
        return cl.Host(name=self.name.text().strip(), address=self.address.text().strip(), local=local,
                       user="" if local else self.user.text().strip(), port=self.ssh_port.value(),
                       key="" if local else self.key.text().strip(), python=self.python.text().strip(),
                       spare=self.spare.isChecked())

    def tasks(self) -> list[cl.Task]:
        name = self.name.text().strip()
        port = parse_port(self.task_port.text())
        gpus = parse_gpus(self.gpus.text())
        out = []
        if self.spare.isChecked():
            return out  # a spare runs nothing until a host is lost
        for i in range(self.workers.value()):
            task_port = port if port == "auto" else port + i
            out.append(cl.Task(host=name, role=CHIEF if i == 0 and self.chief.isChecked() else WORKER,
                               port=task_port, gpus=list(gpus)))
        for j in range(self.ps.value()):  # a ps holds variables: no GPUs of its own
            out.append(cl.Task(host=name, role=PS, port=port if port == "auto" else port + self.workers.value() + j))
        if self.evaluator.isChecked():  # serves nothing: its port is never used
            out.append(cl.Task(host=name, role=cl.EVALUATOR))
        return out


def ssh_config_hosts() -> list[dict]:
    """Concrete hosts of ~/.ssh/config (no wildcards), with what SSH would use for each."""
    path = ssh_config_path()
    if not path.exists():
        return []
    config = paramiko.SSHConfig.from_path(str(path))
    hosts = []
    for alias in sorted(config.get_hostnames()):
        if any(c in alias for c in "*?!") or alias == "*":
            continue
        entry = config.lookup(alias)
        hosts.append({"alias": alias, "hostname": entry.get("hostname", alias), "user": entry.get("user", ""),
                      "port": int(entry.get("port", 22))})
    return hosts


IMPORT_MAX_WIDTH = 1000  # the import list's widest (longer lines: their tooltip has them whole)


class ImportDialog(QDialog):
    """Pick hosts from ~/.ssh/config; each becomes a host (its alias as address) with one worker."""

    def __init__(self, taken_names: set[str], parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Import hosts from ~/.ssh/config")
        self.taken = set(taken_names)
        self.list = QListWidget()
        entries = ssh_config_hosts()
        for entry in entries:
            text = f"{entry['alias']}  ({entry['user'] + '@' if entry['user'] else ''}{entry['hostname']}:{entry['port']})"
            item = QListWidgetItem(text)
            item.setData(Qt.UserRole, entry["alias"])
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            taken = entry["alias"] in taken_names
            item.setCheckState(Qt.Unchecked)
            why = ("already in the cluster" if taken else
                   "its name cannot be an address (use its HostName)" if cl.address_problem(entry["alias"]) else "")
            if why:
                item.setFlags(item.flags() & ~Qt.ItemIsEnabled)
                item.setText(f"{text}  — {why}")
            item.setToolTip(item.text())
            self.list.addItem(item)
        # As wide as its longest line (up to most of a screen): an address is read whole, not clipped.
        widest = self.list.sizeHintForColumn(0) if entries else 0
        self.list.setMinimumWidth(min(IMPORT_MAX_WIDTH, max(320, widest + 2 * self.list.frameWidth() + 24)))
        note = QLabel(f"Hosts in {ssh_config_path()}:" if entries
                      else f"No hosts found in {ssh_config_path()}. Add hosts by hand instead.")
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addWidget(self.list)
        layout.addWidget(buttons)

    def chosen(self) -> list[cl.Host]:
        """The hosts picked: each under its alias, or a name made safe from it (the alias stays its address, so
        SSH applies what ~/.ssh/config says of it)."""
        out = []
        taken = set(self.taken)
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.checkState() == Qt.Checked and item.flags() & Qt.ItemIsEnabled:
                alias = item.data(Qt.UserRole)
                name = alias if not cl.host_name_problem(alias) and alias not in taken else \
                    cl.safe_host_name(alias, taken)
                taken.add(name)
                out.append(cl.Host(name=name, address=alias))
        return out


class FingerprintDialog(QDialog):
    """An unknown host key: show its fingerprint and ask whether to trust and remember it."""

    def __init__(self, host: str, key_type: str, fingerprint: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Unknown host key")
        self.host, self.fingerprint = host, fingerprint
        text = QLabel(f"<p>The authenticity of host <b>{host}</b> can't be established.</p>"
                      f"<p>{key_type} key fingerprint:<br><tt>{fingerprint}</tt></p>"
                      "<p>Compare it with the host's own (<tt>ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub</tt> "
                      "there). Trust this key and remember it in known_hosts?</p>")
        text.setWordWrap(True)
        text.setTextInteractionFlags(Qt.TextSelectableByMouse)
        buttons = QDialogButtonBox()
        self.trust = buttons.addButton("Trust and remember", QDialogButtonBox.AcceptRole)
        self.refuse = buttons.addButton("Refuse", QDialogButtonBox.RejectRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(text)
        layout.addWidget(buttons)
        self.refuse.setDefault(True)


class SlurmDialog(QDialog):
    """A Slurm cluster instead of hosts: its login host and the job tfcc submits there (the cluster file's
    [slurm]). OK is enabled only when the settings are valid; whether Slurm would take the job, the check says."""

    def __init__(self, slurm: cl.Slurm | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Edit the Slurm cluster" if slurm else "Add a Slurm cluster")
        slurm = slurm or cl.Slurm(login="")
        self.login = QLineEdit(slurm.login)
        self.login.setPlaceholderText("the host you submit jobs from: name, IP or ~/.ssh/config alias")
        self.user = QLineEdit(slurm.user)
        self.user.setPlaceholderText("from ~/.ssh/config, else your user")
        self.ssh_port = _spin(SLURM["port"], slurm.port)
        self.key = QLineEdit(slurm.key)
        self.key.setPlaceholderText("from ~/.ssh/config or ssh-agent")
        self.python = QLineEdit(slurm.python)
        self.python.setPlaceholderText("python3 (the nodes' interpreter, with TensorFlow)")
        self.partition = QLineEdit(slurm.partition)
        self.partition.setPlaceholderText("the cluster's default")
        self.nodes = _spin(SLURM["nodes"], slurm.nodes)
        self.tasks_per_node = _spin(SLURM["tasks_per_node"], slurm.tasks_per_node)
        self.gpus_per_task = _spin(SLURM["gpus_per_task"], slurm.gpus_per_task)
        self.cpus_per_task = _spin(SLURM["cpus_per_task"], slurm.cpus_per_task)
        self.time = QLineEdit(slurm.time)
        self.time.setPlaceholderText("1:00:00 (hours:minutes:seconds), 90 (minutes), 2-00:00:00")
        self.account = QLineEdit(slurm.account)
        self.account.setPlaceholderText("your default account")
        self.qos = QLineEdit(slurm.qos)
        self.qos.setPlaceholderText("the default QOS")
        self.parameter_servers = _spin(SLURM["parameter_servers"], slurm.parameter_servers)
        self.parameter_servers.setToolTip("Parameter-server training: this many tasks are ps (the first task is the "
                                          "chief); 0 for synchronous training (MultiWorkerMirrored)")
        # Each field's problem under it once the person edited it (as Add host's), in the form's own words.
        self.errors = {field: _error_label() for field in (self.login, self.user, self.key, self.partition,
                                                           self.time, self.account, self.qos,
                                                           self.parameter_servers)}
        self._edited: set = set()
        self.python.setStyleSheet(FIELD_OK_STYLE)  # framed as the fields that can show a problem
        e = self.errors
        form = form_of(("Login host", self.login), ("", e[self.login]), ("SSH user", self.user), ("", e[self.user]),
                       ("SSH port", self.ssh_port), ("SSH key", self.key), ("", e[self.key]), ("Python", self.python),
                       ("Partition", self.partition), ("", e[self.partition]), ("Nodes", self.nodes),
                       ("Tasks per node", self.tasks_per_node), ("GPUs per task", self.gpus_per_task),
                       ("CPUs per task", self.cpus_per_task), ("Time limit", self.time), ("", e[self.time]),
                       ("Account", self.account), ("", e[self.account]), ("QOS", self.qos), ("", e[self.qos]),
                       ("Parameter servers", self.parameter_servers), ("", e[self.parameter_servers]))
        form.setVerticalSpacing(2)
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Slurm picks the nodes; tfcc submits one job from the login host and follows every "
                                "task through it (the nodes share its files)."))
        layout.addLayout(form)
        layout.addWidget(self.buttons)
        for edit in (self.login, self.user, self.key, self.python, self.partition, self.time, self.account, self.qos):
            edit.textEdited.connect(lambda _text, edit=edit: self._on_field_edited(edit))  # the person's, not ours
            edit.textChanged.connect(self._on_field_changed)
        for spin in (self.ssh_port, self.nodes, self.tasks_per_node, self.gpus_per_task, self.cpus_per_task,
                     self.parameter_servers):
            spin.valueChanged.connect(lambda _value: self._on_field_edited(self.parameter_servers))
        self._on_field_changed()

    def slurm(self) -> cl.Slurm:
        return cl.Slurm(login=self.login.text().strip(), user=self.user.text().strip(), port=self.ssh_port.value(),
                        key=self.key.text().strip(), python=self.python.text().strip(),
                        partition=self.partition.text().strip(), nodes=self.nodes.value(),
                        tasks_per_node=self.tasks_per_node.value(), gpus_per_task=self.gpus_per_task.value(),
                        cpus_per_task=self.cpus_per_task.value(), time=self.time.text().strip(),
                        account=self.account.text().strip(), qos=self.qos.text().strip(),
                        parameter_servers=self.parameter_servers.value())

    def field_problems(self) -> list[tuple[QWidget, str]]:
        """Each problem with its field, in the form's words (the cluster file's rules: console.cluster)."""
        out = []
        login = self.login.text().strip()
        if not login:
            out.append((self.login, "Login host: type the host you submit Slurm jobs from."))
        elif cl.address_problem(login):
            out.append((self.login, f"Login host: {login!r}: {cl.address_problem(login)}."))
        user = self.user.text().strip()
        if cl.user_problem(user):
            out.append((self.user, f"SSH user: {user!r}: {cl.user_problem(user)}."))
        key = self.key.text().strip()
        if key and not os.path.isfile(os.path.expanduser(key)):
            out.append((self.key, f"SSH key: {key} does not exist."))
        for field, words in ((self.partition, "Partition"), (self.account, "Account"), (self.qos, "QOS")):
            value = field.text().strip()
            if value and not cl.slurm_name_ok(value):
                out.append((field, f"{words}: {value!r}: a Slurm name is letters, digits, '.', '_' and '-' (sinfo "
                                   "and sacctmgr list them); leave it empty for the default."))
        time = self.time.text().strip()
        if not cl.SLURM_TIME.match(time):
            out.append((self.time, f"Time limit: {time!r} is no time sbatch reads; write it like 1:00:00 "
                                   "(hours:minutes:seconds), 90 (minutes) or 2-00:00:00 (days-hours:minutes:seconds)."))
        slurm = self.slurm()
        if slurm.parameter_servers and slurm.task_count < slurm.parameter_servers + 2:
            out.append((self.parameter_servers, f"Parameter servers: {slurm.task_count} tasks leave no worker beside "
                                                f"the chief and {slurm.parameter_servers} ps; raise Nodes or Tasks per "
                                                "node."))
        if not out and cl.slurm_problem(slurm):  # a rule no field above says (kept in step with the file's)
            out.append((self.login, cl.slurm_problem(slurm)))
        return out

    def problem(self) -> str | None:
        """What keeps OK disabled, in words that say what to do (the first of ``field_problems``), or None."""
        problems = self.field_problems()
        return problems[0][1] if problems else None

    def shown_errors(self) -> str:
        """The problems shown at their fields now."""
        return "\n".join(label.text() for label in self.errors.values() if label.text())

    def _on_field_edited(self, field: QWidget) -> None:
        self._edited.add(field)
        self._on_field_changed()

    def _on_field_changed(self, *_) -> None:
        problems = self.field_problems()
        by_field: dict = {}
        for field, words in problems:
            by_field.setdefault(field, words)
        for field, label in self.errors.items():
            words = by_field.get(field, "") if field in self._edited else ""
            label.setText(words)
            if isinstance(field, QLineEdit):
                field.setStyleSheet(FIELD_ERROR_STYLE if words else FIELD_OK_STYLE)
        ok = self.buttons.button(QDialogButtonBox.Ok)
        ok.setEnabled(not problems)
        ok.setToolTip("\n".join(words for _, words in problems))


def _spin(field: Field, value: int) -> QSpinBox:
    """A spin box over ``field``'s range (the cluster file's), at ``value``."""
    spin = QSpinBox()
    spin.setRange(field.low, field.high)
    spin.setValue(value)
    return spin
