"""Hangs, for real: where each task is, asked of tasks on the SSH test hosts (and a host gone), and the seeded hangs
of tests/data/scripts/hangs under ``tfcc run``: the console names the stuck task and the user's file:line within 60 s
of the hang, groups the others, keeps the stacks in the run's history, and gives up a hang that repeats."""

from __future__ import annotations

import json
import sys

import pytest

from console import cluster as cl
from console.run.runner import Run
from console.states import SessionKind
from console.store.cache import cache_dir
from tests.helpers import hangs
from tests.helpers.cli import tfcc
from tests.helpers.waiting import wait_until

# From the hang to the console's words, at most, on a loaded CI machine (bench/hangs.py measures them against the
# issue's goal of 60 s: 35-45 s on an idle one).
VERDICT_SECONDS = 120

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


@pytest.fixture
def homes(local_homes):
    return local_homes


def kept_stacks(run_id: str) -> dict:
    """The 'where' the run's history keeps (console.jsonl)."""
    notes = [json.loads(line) for line in (cache_dir(run_id) / "console.jsonl").read_text().splitlines()]
    return next(n["where"] for n in notes if n.get("event") == SessionKind.WHERE)


@pytest.mark.slow
@pytest.mark.parametrize("name", [k["name"] for k in hangs.kinds()])
def test_a_seeded_hang_is_named_at_the_users_line_within_a_minute(name, homes, tmp_path):
    """Each seeded hang under supervision (local tasks): the stall names the stuck task(s) and the user's file:line
    (or the stopped state, or the pipe), the others are grouped apart, soon after the last step; the run's history
    keeps every task's stack."""
    table = hangs.kind(name)
    seen = hangs.run_seeded(table, tmp_path, f"hang-{name.replace('_', '-')}")
    assert not seen.wrong(table), seen.wrong(table)
    assert seen.seconds is not None and seen.seconds <= VERDICT_SECONDS, (seen.seconds, seen.said)
    kept = kept_stacks(seen.run.run_id)
    assert kept["stuck"] == seen.where["stuck"] and all(t["stack"] for t in kept["tasks"]), kept


@pytest.mark.slow
def test_a_hang_at_the_same_line_after_a_restart_is_given_up_not_restarted_again(homes, tmp_path):
    """generator_event with restarts left: the first hang restarts the run (the hang may be chance); the second, at
    the same line of the user's code, gives the run up with where it hangs."""
    table = hangs.kind("generator_event")
    seen = hangs.run_seeded(table, tmp_path, "hang-twice", max_restarts=3, to_the_end=True, timeout=400)
    kinds = [k for _, k, _ in seen.said]
    assert kinds.count(SessionKind.RESTARTED) == 1 and kinds.count(SessionKind.WHERE) == 2, seen.said
    gave_up = [w for _, k, w in seen.said if k == SessionKind.GAVE_UP]
    assert gave_up == [f"run hang-twice hung at {seen.markers[0]} in attempt 1 and again in attempt 2: a restart "
                       "would hang there again; fix the cause above, then start the run again with the fixed code "
                       "(tfcc run with its cluster file, or Deploy & Start)"], seen.said


@pytest.mark.slow
def test_a_seeded_hang_over_the_ssh_test_hosts_is_named(ssh_hosts, ssh_env, tmp_path):
    """sleep_loop with worker-0 and worker-1 on two SSH test hosts: named at the user's line, the other waiting."""
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    hosts = [cl.Host(name=h.name, address=h.address, user="root", key=str(ssh_hosts.client_key),
                     python=sys.executable) for h in ssh_hosts.hosts[:2]]
    table = hangs.kind("sleep_loop")
    seen = hangs.run_seeded(table, tmp_path, "hang-ssh", hosts=hosts)
    assert not seen.wrong(table), seen.wrong(table)
    assert seen.seconds is not None and seen.seconds <= VERDICT_SECONDS, (seen.seconds, seen.said)
    assert seen.stalled().startswith(f"worker-1 on {hosts[1].name} made no step for "), seen.stalled()
