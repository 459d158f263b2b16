"""The host dialog validates as you type; the import dialog reads ~/.ssh/config; the fingerprint dialog."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QDialogButtonBox

from console import cluster as cl
from console.cluster_fields import SLURM
from console.gui.dialogs import FingerprintDialog, HostDialog, ImportDialog, SlurmDialog


def dialog(qtbot, taken=(), host=None, tasks=None) -> HostDialog:
    d = HostDialog(set(taken), host, tasks)
    qtbot.addWidget(d)
    return d


def ok_enabled(d: HostDialog) -> bool:
    return d.buttons.button(QDialogButtonBox.Ok).isEnabled()


@pytest.mark.parametrize(
    "fill, field, message",
    [
        ({"name": ""}, "name", "Name: a host needs a name."),
        ({"name": "gpu1"}, "name", "Name: 'gpu1' is already a host of this cluster; pick another."),
        ({"name": "my host"}, "name",
         "Name: host name 'my host' is not a valid name: use letters, digits, '.', '_' and '-'"),
        ({"name": "gpu1$(touch x)"}, "name", "Name: host name 'gpu1$(touch x)' is not a valid name"),
        ({"name": "a/../b"}, "name", "Name: host name 'a/../b' is not a valid name"),
        ({"name": "b", "address": ""}, "address", "Address: type the host's name or IP (or tick 'this machine')."),
        ({"name": "b", "address": "10.0.0.2", "key": "/no/such/key"}, "key", "SSH key: /no/such/key does not exist."),
        ({"name": "b", "address": "10.0.0.2", "task_port": "99999"}, "task_port",
         "Task port '99999': type auto or a number from 1 to 65535."),
        ({"name": "b", "address": "10.0.0.2", "gpus": "0,x"}, "gpus", "GPUs '0,x': list GPU indices like 0,1"),
        ({"name": "b", "address": "10.0.0.2", "gpus": "1,1"}, "gpus", "GPUs '1,1': indices must be different"),
        ({"name": "b", "address": "bad host!!"}, "address", "Address: 'bad host!!': it must be a host name"),
        ({"name": "b", "address": "999.1.1.1"}, "address", "Address: '999.1.1.1': it must be a host name"),
        ({"name": "b", "address": "user@bad host"}, "address", "Address: 'user@bad host': it must be a host name"),
    ],
    ids=["no-name", "taken-name", "space", "shell", "path", "no-address", "missing-key", "port", "gpus-word",
         "gpus-twice", "address-words", "address-no-ip", "address-user-bad"],
)
def test_bad_fields_say_what_to_do_at_the_field_and_block_ok(qtbot, fill, field, message):
    d = dialog(qtbot, taken={"gpu1"})
    d.show()
    assert d.shown_errors() == "" and not ok_enabled(d), "nothing said before the person types"
    assert "Name: a host needs a name." in d.buttons.button(QDialogButtonBox.Ok).toolTip()
    for name, text in fill.items():
        qtbot.keyClicks(getattr(d, name), "x")  # an edit, then the text itself
        getattr(d, name).selectAll()
        qtbot.keyClick(getattr(d, name), Qt.Key_Backspace)
        qtbot.keyClicks(getattr(d, name), text)
    label = d.errors[getattr(d, field)]
    assert label.isVisible() and message in label.text(), "said under its own field"
    assert message in d.shown_errors() and not ok_enabled(d)


def test_valid_host_gives_its_tasks(qtbot, tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("not checked here")
    d = dialog(qtbot)
    qtbot.keyClicks(d.name, "gpu2")
    qtbot.keyClicks(d.address, "10.0.0.2")
    qtbot.keyClicks(d.key, str(key))
    d.workers.setValue(2)
    d.task_port.setText("23456")
    d.gpus.setText("0, 1")
    d.chief.setChecked(True)
    assert ok_enabled(d) and d.shown_errors() == ""
    assert d.host() == cl.Host(name="gpu2", address="10.0.0.2", key=str(key))
    assert d.tasks() == [cl.Task(host="gpu2", role="chief", port=23456, gpus=[0, 1]),
                         cl.Task(host="gpu2", role="worker", port=23457, gpus=[0, 1])]


def test_editing_keeps_its_own_name_and_a_local_host_needs_no_address(qtbot):
    host = cl.Host(name="here", local=True)
    d = dialog(qtbot, taken={"here", "there"}, host=host, tasks=[cl.Task(host="here"), cl.Task(host="here")])
    assert ok_enabled(d) and d.workers.value() == 2 and not d.user.isEnabled()
    assert d.host().local and d.tasks()[1].port == "auto"


def test_import_lists_concrete_hosts_of_the_ssh_config(qtbot, tmp_path, monkeypatch):
    config = tmp_path / "ssh_config"
    config.write_text("Host gpu-a\n  HostName 10.1.0.5\n  User ml\n"
                      "Host gpu-b gpu-c\n  Port 2222\nHost *.internal\n  User x\nHost *\n  User everyone\n")
    monkeypatch.setenv("TFCC_SSH_CONFIG", str(config))
    d = ImportDialog({"gpu-c"})
    qtbot.addWidget(d)
    texts = [d.list.item(i).text() for i in range(d.list.count())]
    assert texts[0] == "gpu-a  (ml@10.1.0.5:22)" and len(texts) == 3
    assert texts[1] == "gpu-b  (everyone@gpu-b:2222)" and texts[2].endswith("already in the cluster")
    from PySide6.QtCore import Qt
    d.list.item(0).setCheckState(Qt.Checked)
    assert d.chosen() == [cl.Host(name="gpu-a", address="gpu-a")]



def test_the_import_list_shows_long_addresses_whole(qtbot, tmp_path, monkeypatch):
    config = tmp_path / "ssh_config"
    long_name = "gpu-node-17.training.research-cluster.example.org"
    config.write_text(f"Host gpu-17\n  HostName {long_name}\n  User a-rather-long-user-name\n")
    monkeypatch.setenv("TFCC_SSH_CONFIG", str(config))
    d = ImportDialog(set())
    qtbot.addWidget(d)
    d.show()
    qtbot.waitExposed(d)
    item = d.list.item(0)
    needed = d.list.fontMetrics().horizontalAdvance(item.text())
    assert d.list.viewport().width() >= needed, "the line is not clipped"
    assert item.toolTip() == item.text()


def test_an_alias_that_cannot_name_a_host_is_imported_under_a_safe_name_and_kept_for_ssh(qtbot, tmp_path,
                                                                                          monkeypatch):
    config = tmp_path / "ssh_config"
    config.write_text("Host _gpu\n  HostName 10.1.0.6\nHost .box\n  HostName 10.1.0.7\nHost gpu\n  HostName 10.1.0.8\n"
                      "Host odd+one\n  HostName 10.1.0.9\n")
    monkeypatch.setenv("TFCC_SSH_CONFIG", str(config))
    d = ImportDialog({"gpu"})
    qtbot.addWidget(d)
    items = {d.list.item(i).data(Qt.UserRole): d.list.item(i) for i in range(d.list.count())}
    for alias in ("odd+one", ".box"):
        assert items[alias].text().endswith("its name cannot be an address (use its HostName)")
        assert not items[alias].flags() & Qt.ItemIsEnabled
    for alias in ("_gpu", ".box"):
        items[alias].setCheckState(Qt.Checked)
    chosen = d.chosen()  # not one that cannot be had
    assert chosen == [cl.Host(name="gpu-2", address="_gpu")]
    assert all(cl.host_name_problem(h.name) is None for h in chosen)


def test_fingerprint_dialog_shows_the_key_and_refuses_by_default(qtbot):
    d = FingerprintDialog("10.0.0.9", "ssh-ed25519", "SHA256:abc")
    qtbot.addWidget(d)
    assert d.refuse.isDefault() and d.fingerprint == "SHA256:abc"


def test_a_host_can_hold_parameter_servers_after_its_workers(qtbot):
    d = dialog(qtbot)
    qtbot.keyClicks(d.name, "ps1")
    d.local.setChecked(True)
    d.workers.setValue(1)
    d.ps.setValue(2)
    d.task_port.setText("23456")
    d.gpus.setText("0")
    assert ok_enabled(d)
    assert d.tasks() == [cl.Task(host="ps1", role="worker", port=23456, gpus=[0]),
                         cl.Task(host="ps1", role="ps", port=23457), cl.Task(host="ps1", role="ps", port=23458)]
    again = dialog(qtbot, host=d.host(), tasks=d.tasks())
    assert (again.workers.value(), again.ps.value()) == (1, 2)


def test_a_host_can_hold_the_evaluator_beside_its_chief(qtbot):
    d = dialog(qtbot)
    qtbot.keyClicks(d.name, "main")
    d.local.setChecked(True)
    d.workers.setValue(1)
    d.chief.setChecked(True)
    d.ps.setValue(1)
    qtbot.mouseClick(d.evaluator, Qt.LeftButton)
    assert ok_enabled(d)
    assert [t.role for t in d.tasks()] == ["chief", "ps", "evaluator"]
    again = dialog(qtbot, host=d.host(), tasks=d.tasks())
    assert (again.workers.value(), again.ps.value(), again.evaluator.isChecked()) == (1, 1, True)


def test_a_spare_host_is_kept_and_runs_no_task(qtbot):
    spare = dialog(qtbot, host=cl.Host(name="gpu9", address="10.0.0.19", spare=True), tasks=[])
    assert spare.spare.isChecked() and spare.host().spare and spare.tasks() == []
    assert not spare.workers.isEnabled() and not spare.ps.isEnabled()  # what would say its tasks is greyed
    plain = dialog(qtbot, host=cl.Host(name="gpu1", address="10.0.0.11"))
    assert not plain.host().spare and len(plain.tasks()) == 1
    assert plain.workers.isEnabled()
    plain.spare.setChecked(True)
    assert plain.host().spare and plain.tasks() == [] and not plain.workers.isEnabled()


@pytest.mark.parametrize("typed, user, address, port", [
    ("bob@gpu2:2222", "bob", "gpu2", 2222), ("bob@gpu2", "bob", "gpu2", 22), ("gpu2:2200", "", "gpu2", 2200),
    ("alice@[fe80::1]:23", "alice", "fe80::1", 23)])
def test_user_at_host_colon_port_is_split_into_its_fields(qtbot, typed, user, address, port):
    """As ssh and scp take it: typed or pasted as the address, each part goes to its own field."""
    d = dialog(qtbot)
    d.show()
    qtbot.keyClicks(d.name, "gpu2")
    qtbot.keyClicks(d.address, typed)
    assert d.shown_errors() == "" and ok_enabled(d), "no error while it is being typed"
    d.address.editingFinished.emit()  # the person leaves the field
    assert (d.user.text(), d.address.text(), d.ssh_port.value()) == (user, address, port)
    assert d.host() == cl.Host(name="gpu2", address=address, user=user, port=port)


def test_an_error_line_never_moves_the_fields_below_it(qtbot):
    d = dialog(qtbot)
    d.show()
    qtbot.waitExposed(d)
    below = {field: field.geometry().top() for field in (d.address, d.user, d.python, d.gpus, d.spare)}
    height = d.height()
    qtbot.keyClicks(d.name, "my host")  # an error under Name, then under Address
    qtbot.keyClicks(d.address, "bad host!!")
    assert "Name: host name 'my host' is not a valid name" in d.shown_errors() and "Address:" in d.shown_errors()
    QApplication.processEvents()  # laid out again, if anything changed
    assert {field: field.geometry().top() for field in below} == below and d.height() == height
    long_words = d.errors[d.name]
    assert long_words.shown_text().endswith("…") or long_words.width() >= long_words.sizeHint().width() - 2
    assert "Name: host name 'my host'" in long_words.toolTip()


def test_the_slurm_dialogs_limits_are_the_cluster_files(qtbot):
    dialog = SlurmDialog()
    qtbot.addWidget(dialog)
    for name in ("port", "nodes", "tasks_per_node", "gpus_per_task", "cpus_per_task", "parameter_servers"):
        spin = dialog.ssh_port if name == "port" else getattr(dialog, name)
        assert (spin.minimum(), spin.maximum(), spin.value()) == (SLURM[name].low, SLURM[name].high,
                                                                  SLURM[name].default), name
