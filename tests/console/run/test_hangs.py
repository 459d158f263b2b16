"""Hangs, for real: where each task is, asked of tasks on the SSH test hosts (and a host gone), and the seeded hangs
of tests/data/scripts/hangs under ``tfcc run``: the console names the stuck task and the user's file:line within 60 s
of the hang, groups the others, keeps the stacks in the run's history, and gives up a hang that repeats."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from console import cluster as cl
from console.run.runner import Run
from tests.helpers.cli import tfcc
from tests.helpers.waiting import wait_until

HUNG = """\
import json, os, threading

answered = threading.Event()


def ask_the_label_service():
    answered.wait()  # tfcc-test: hangs here


if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    ask_the_label_service()
else:
    threading.Event().wait(300)
"""


@pytest.mark.slow
def test_where_over_ssh_names_the_users_line_and_a_host_gone_in_one_line(ssh_hosts, ssh_env, capsys, tmp_path):
    """A user's script on two SSH test hosts, worker-1 waiting in its own function: ``tfcc where`` names its line
    as in the user's folder (not the host's copy); once worker-1's host is gone, that task is one line and
    worker-0 is still said where it is."""
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    a, b = ssh_hosts.hosts[:2]
    project = tmp_path / "labels"
    project.mkdir()
    (project / "main.py").write_text(HUNG)
    hosts = [cl.Host(name=h.name, address=h.address, user="root", key=str(ssh_hosts.client_key),
                     python=sys.executable) for h in (a, b)]
    run = Run(cl.Cluster(hosts, [cl.Task(host=a.name), cl.Task(host=b.name)],
                         cl.Training(script=str(project / "main.py"))), "sshhung")
    run.start()
    try:
        assert wait_until(lambda: all(s["phase"] == "running" for s in run.status()), 60)
        code, out, err = tfcc(["where", "sshhung", "--wait", "10"], capsys)
        assert code == 0, err
        head = out.split("\n==>")[0].strip().splitlines()
        assert head == ["worker-0 is stuck in main.py:13 (`threading.Event().wait(300)`); worker-1 is stuck in "
                        "main.py:7 (`answered.wait()`)",
                        "  worker-0 is stuck in main.py:13 (`threading.Event().wait(300)`)",
                        "  worker-1 is stuck in main.py:7 (`answered.wait()`)"], out
        assert f"==> worker-1 on {b.name} <==" in out and "  > main.py:7 in ask_the_label_service    answered.wait()" \
            in out and "/work/" not in out, out
        ssh_hosts.remove(b)
        code, out, err = tfcc(["where", "sshhung", "--wait", "5"], capsys)
        assert code == 0, err
        lines = out.split("\n==>")[0].strip().splitlines()
        gone = [line for line in lines if line.startswith("  worker-1")]
        assert len(gone) == 1 and gone[0].startswith("  worker-1 cannot be asked: its host does not answer ("), out
        assert any(line.startswith("  worker-0 is stuck in main.py:13 (") for line in lines), out
    finally:
        ssh_hosts.bring_back(b)
        run.stop(grace=1)
        run.detach()
