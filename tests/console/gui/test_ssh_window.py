"""The window against the SSH test hosts (network namespaces with real sshd): host keys asked
in the fingerprint dialog, Check, and a run on two hosts."""

from __future__ import annotations

import sys

import paramiko
import pytest
from PySide6.QtCore import Qt

from console.gui.main_window import MainWindow
from console.profiles import Profiles
from console.remote.ssh import fingerprint
from tests.console.gui.conftest import save_shot
from tests.console.gui.test_main_window import add_host, curve_points

pytestmark = pytest.mark.slow


def test_fingerprint_dialog_check_and_run_on_two_ssh_hosts(qtbot, ssh_hosts, gui_homes, shots):
    window = MainWindow(profiles=Profiles(gui_homes / "profiles.json"))
    qtbot.addWidget(window)
    window.show()
    window.files.act_new.trigger()
    for h in ssh_hosts.hosts:
        add_host(qtbot, window, h.name, local=False, address=h.address, user="root",
                 key=str(ssh_hosts.client_key), python=sys.executable)
    window.setup.epochs.setValue(2)
    window.setup.batch.setValue(16)
    expected = {h.address: fingerprint(paramiko.Ed25519Key.from_private_key_file(str(h.host_key)))
                for h in ssh_hosts.hosts}

    checked = qtbot.waitSignal(window.checker.finished, timeout=90_000)  # listening from now on
    window.act_check.trigger()
    asked = []
    for _ in ssh_hosts.hosts:  # one question per unknown host, one at a time
        qtbot.waitUntil(lambda: window.fingerprint_dialog is not None and window.fingerprint_dialog.isVisible()
                        and window.fingerprint_dialog.host not in asked, timeout=30_000)
        dialog = window.fingerprint_dialog
        assert dialog.fingerprint == expected[dialog.host]
        if not asked:
            save_shot(dialog, shots, "fingerprint-dialog")
        asked.append(dialog.host)
        qtbot.mouseClick(dialog.trust, Qt.LeftButton)
    checked.wait()
    report = checked.args[0]
    assert report.ready, [str(p) for p in report.problems]
    assert sorted(asked) == sorted(expected)
    known = (gui_homes / "known_hosts").read_text()
    assert all(address in known for address in expected), "trusted keys are remembered"
    assert len(report.matrix) == 2 and all(r["ok"] for row in report.matrix.values() for r in row.values())
    save_shot(window, shots, "window-ssh-checked")

    with qtbot.waitSignal(window.session.ended, timeout=240_000):
        window.act_start.trigger()
    assert [t.phase for t in window.session.run.tasks] == ["finished", "finished"]
    assert curve_points(window, "worker-0", "loss") > 0  # the global batch's loss: once, for the cluster
    assert all(curve_points(window, w, "step_time") > 0 for w in ("worker-0", "worker-1"))
    assert all(curve_points(window, w, "sys:memory_gb") > 0 for w in ("worker-0", "worker-1"))  # the system lane
    assert [h.address for h in window.diagram.hosts] == [h.address for h in ssh_hosts.hosts]
    assert window.diagram.chief == "worker-0" and window.diagram.split.from_run
    save_shot(window, shots, "dashboard-ssh-finished")
    window.files.save(gui_homes / "ssh.toml")
    window.close()
    assert not window.threads.busy()
