"""SSH against real sshd test hosts: host keys, a 2-host run, a dropped connection."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import paramiko
import pytest

from console import cluster as cl
from console.cli import main
from console.remote.link import HostError, HostLink
from console.run.runner import Run
from console.run.session import RunSession
from console.states import SessionKind
from tests.console.remote.test_link import crashing_python
from tests.helpers.waiting import bound, wait_until
from console.remote import ssh
from console.remote.transport import UnsafeHome
from console.remote.ssh import Jump, SSHConnection, SSHError, fingerprint, parse_proxy_jump
from trainer.metrics import read_records


def host_fp(host) -> str:
    return fingerprint(paramiko.Ed25519Key.from_private_key_file(str(host.host_key)))


def connect(ssh_hosts, host, ask=None) -> SSHConnection:
    conn = SSHConnection(host.address, user="root", key=str(ssh_hosts.client_key), ask=ask)
    conn.connect()
    return conn


def test_unknown_key_is_asked_then_remembered(ssh_hosts, ssh_env):
    host = ssh_hosts.hosts[0]
    asked = []
    conn = connect(ssh_hosts, host, ask=lambda h, kind, fp: asked.append((h, kind, fp)) or True)
    assert conn.run("echo $TFCC_HOME")[1].strip() == str(host.tfcc_home)
    conn.close()
    assert asked == [(host.address, "ssh-ed25519", host_fp(host))]
    assert (ssh_env / "known_hosts").read_text().split()[:2] == [host.address, "ssh-ed25519"]
    again = connect(ssh_hosts, host, ask=lambda *a: pytest.fail("a remembered key must not be asked again"))
    again.close()


def test_declined_key_is_refused(ssh_hosts, ssh_env):
    host = ssh_hosts.hosts[1]
    with pytest.raises(SSHError, match=f"the host key of {host.address} is not known \\(ssh-ed25519 SHA256:"):
        connect(ssh_hosts, host, ask=lambda *a: False)
    assert not (ssh_env / "known_hosts").exists()


def test_changed_key_is_refused_with_both_fingerprints(ssh_hosts, ssh_env):
    host = ssh_hosts.hosts[1]
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    old = host_fp(host)
    ssh_hosts.stop_sshd(host)
    ssh_hosts.new_host_key(host)
    ssh_hosts.start_sshd(host)
    ssh_hosts.wait_for_ssh(host)
    try:
        with pytest.raises(SSHError) as err:
            connect(ssh_hosts, host, ask=lambda *a: pytest.fail("a changed key must never be asked"))
        message = str(err.value)
        assert f"the host key of {host.address} has CHANGED: known_hosts has {old}, the host sent {host_fp(host)}" \
            in message
        assert "remove its line from" in message
    finally:
        ssh_hosts.known_hosts(ssh_env / "known_hosts")  # later tests pin the new key


def key_line(host, name: str | None = None) -> str:
    kind, data = Path(str(host.host_key) + ".pub").read_text().split()[:2]
    return f"{name or host.address} {kind} {data}"


def test_a_key_known_to_the_system_wide_known_hosts_is_trusted(ssh_hosts, ssh_env):
    host = ssh_hosts.hosts[0]
    (ssh_env / "ssh_known_hosts").write_text(key_line(host) + "\n")  # /etc/ssh/ssh_known_hosts for this test
    conn = connect(ssh_hosts, host, ask=lambda *a: pytest.fail("a key the system knows needs no question"))
    conn.close()
    assert not (ssh_env / "known_hosts").exists()


@pytest.mark.parametrize("where", ["known_hosts", "ssh_known_hosts"])
def test_a_revoked_key_is_refused_known_or_not(ssh_hosts, ssh_env, where):
    """OpenSSH's @revoked: the key must never be accepted, whichever file says so and however it is asked."""
    host = ssh_hosts.hosts[1]
    revoked = "@revoked " + key_line(host, "*") + "\n"
    (ssh_env / where).write_text(revoked)
    with pytest.raises(SSHError, match=f"the host key of {host.address} .* is REVOKED in .*{where}"):
        connect(ssh_hosts, host, ask=lambda *a: pytest.fail("a revoked key is never asked about"))
    (ssh_env / where).write_text(key_line(host) + "\n" + revoked)  # known too: refused all the same
    for path in (ssh_env / "known_hosts", ssh_env / "ssh_known_hosts"):
        ssh._known_hosts_cache.pop(path, None)
    with pytest.raises(SSHError, match="is REVOKED"):
        connect(ssh_hosts, host)


def test_hashed_names_are_read_for_known_and_revoked_keys(tmp_path):
    """``ssh-keygen -H`` hashes the names of a known_hosts: a hashed line still knows its host, and a hashed
    @revoked line still revokes."""
    key = paramiko.RSAKey.generate(1024)
    other = paramiko.RSAKey.generate(1024)
    hashed = paramiko.HostKeys.hash_host("10.1.2.3")
    path = tmp_path / "known_hosts"
    path.write_text(f"{hashed} ssh-rsa {key.get_base64()}\n"
                    f"@revoked {paramiko.HostKeys.hash_host('10.1.2.4')} ssh-rsa {other.get_base64()}\n")
    known = ssh._read_known_hosts(path)
    assert known.keys.lookup("10.1.2.3")["ssh-rsa"] == key
    assert known.revokes("10.1.2.4", other) and not known.revokes("10.1.2.5", other)
    assert not known.revokes("10.1.2.4", key)


def test_a_key_accepted_into_a_file_without_its_last_newline_is_kept_and_so_is_the_last_line(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text("10.9.9.9 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC7")  # no newline at its end
    key = paramiko.ECDSAKey.generate()
    ssh._remember(path, "10.0.0.1", key)
    lines = path.read_text().splitlines()
    assert lines == ["10.9.9.9 ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC7", f"10.0.0.1 {key.get_name()} {key.get_base64()}"]


def two_host_cluster(ssh_hosts, epochs: int) -> cl.Cluster:
    hosts = [cl.Host(name=h.name, address=h.address, user="root", key=str(ssh_hosts.client_key),
                     python=sys.executable) for h in ssh_hosts.hosts]
    tasks = [cl.Task(host=h.name) for h in ssh_hosts.hosts]
    return cl.Cluster(hosts, tasks, cl.Training(epochs=epochs, per_replica_batch=16, backup_seconds=2.0))


@pytest.mark.slow
def test_two_host_run_over_ssh(ssh_hosts, ssh_env, capsys):
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    path = ssh_env / "two.toml"
    cl.save(two_host_cluster(ssh_hosts, 1), path)
    assert main(["run", str(path), "--json", "--run-id", "ssh1"]) == 0
    stream = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    addresses = [h.address for h in ssh_hosts.hosts]
    # Each host's agent streams its load, under the cluster's name of the host (docs/metrics.md).
    loads = [r for r in stream if r["type"] == "system"]
    assert {r["host"] for r in loads} == {h.name for h in ssh_hosts.hosts}
    assert all(r["memory_total_bytes"] > 0 and r["cpu_percent"] is not None for r in loads)
    for i, host in enumerate(ssh_hosts.hosts):
        folder = host.tfcc_home / "runs" / "ssh1" / f"worker-{i}"
        config = json.loads((folder / "tf_config.json").read_text())
        assert [a.rsplit(":", 1)[0] for a in config["cluster"]["worker"]] == addresses
        assert config["task"] == {"type": "worker", "index": i}
        steps = [r for r in stream if r.get("task") == f"worker-{i}" and r["type"] == "step"]
        assert len(steps) == 1438 // 32 and steps == [
            {"task": f"worker-{i}", "host": host.name, **r} for r in read_records(folder / "metrics.jsonl")
            if r["type"] == "step"]


@pytest.mark.slow
def test_dropped_connection_loses_and_repeats_nothing(ssh_hosts, ssh_env):
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    run = Run(two_host_cluster(ssh_hosts, 2), "ssh2")
    run.start()
    got: dict[str, list] = {t.name: [] for t in run.tasks}
    cond = threading.Condition()

    def on_event(event):
        with cond:
            if event.kind == "records":
                got[event.task.name] += event.records
            cond.notify_all()

    session = RunSession(run)
    session.subscribe(on_event)
    session.follow()
    try:
        with cond:
            assert cond.wait_for(lambda: sum(r["type"] == "step" for r in got["worker-1"]) >= 5, 180)
        # Cut every SSH session to host 1 (the agent's channel with it); training goes on.
        link = run.links[ssh_hosts.hosts[1].name]
        before = link.client
        ssh_hosts.cut_sessions(ssh_hosts.hosts[1])
        with cond:
            assert cond.wait_for(lambda: before.closed.is_set(), 30)
        assert session.wait(timeout=300)
        assert link.client is not None and link.client is not before  # it reconnected
        for i, h in enumerate(ssh_hosts.hosts):
            in_file = read_records(h.tfcc_home / "runs" / "ssh2" / f"worker-{i}" / "metrics.jsonl")
            assert got[f"worker-{i}"] == in_file
            assert in_file[-1]["event"] == "finished"
        assert [t.phase for t in run.tasks] == ["finished", "finished"]
    finally:
        session.detach()


@pytest.mark.slow
def test_host_refusing_connections_for_8_s_loses_nothing_and_the_run_finishes(ssh_hosts, ssh_env):
    """The console's connection is cut and the host refuses new ones for 8 s (sshd down): the
    console keeps trying, says so once, and then delivers every record exactly once (it once gave
    up for good, lost hundreds of records, and said a finished task "ended training")."""
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    h1 = ssh_hosts.hosts[1]
    path = ssh_env / "two.toml"
    cl.save(two_host_cluster(ssh_hosts, 3), path)  # it may finish during the outage: that is read after it too
    tfcc = str(Path(sys.executable).with_name("tfcc"))
    console = subprocess.Popen([tfcc, "run", str(path), "--json", "--run-id", "refused"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    cond = threading.Condition()

    def read():
        for line in console.stdout:
            with cond:
                lines.append(line)
                cond.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def steps_of(task: str) -> int:
        return sum(1 for line in lines if f'"task": "{task}"' in line and '"type": "step"' in line)

    try:
        with cond:
            assert cond.wait_for(lambda: steps_of("worker-1") >= 5, 180), lines[-5:]
        ssh_hosts.stop_sshd(h1)  # cuts the console's sessions too
        try:
            with cond:
                assert cond.wait_for(lambda: any('"type": "reconnecting"' in line for line in lines), 30)
            threading.Event().wait(8)  # the outage itself: the host refuses connections for 8 s
        finally:
            ssh_hosts.start_sshd(h1)
            ssh_hosts.wait_for_ssh(h1)
        assert console.wait(timeout=300) == 0, console.stderr.read()
        reader.join(10)
    finally:
        if console.poll() is None:
            console.kill()
            console.wait()
    assert "Traceback" not in console.stderr.read()
    stream = [json.loads(line) for line in lines]
    outages = [m for m in stream if m.get("type") in ("reconnecting", "reconnected")]
    assert [(m["task"], m["type"]) for m in outages] == [("worker-1", "reconnecting"), ("worker-1", "reconnected")]
    assert outages[1]["after"] >= 8
    for i, host in enumerate(ssh_hosts.hosts):
        records = [{k: v for k, v in m.items() if k not in ("task", "host")} for m in stream
                   if m.get("task") == f"worker-{i}" and m.get("type") not in ("end", "reconnecting", "reconnected")]
        in_file = read_records(host.tfcc_home / "runs" / "refused" / f"worker-{i}" / "metrics.jsonl")
        assert records == in_file  # every record, once, in order
        assert in_file[-1]["event"] == "finished"
    ends = [(m["task"], m["phase"]) for m in stream if m.get("type") == "end"]
    assert sorted(ends) == [("worker-0", "finished"), ("worker-1", "finished")]


def test_ssh_config_alias_and_proxy_jump(ssh_hosts, ssh_env):
    """HostName, User, IdentityFile and ProxyJump come from the ssh config (paramiko's parser)."""
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    h0, h1 = ssh_hosts.hosts
    (ssh_env / "ssh_config").write_text(
        f"Host box0\n  HostName {h0.address}\n  User root\n  IdentityFile {ssh_hosts.client_key}\n"
        f"Host behind\n  HostName {h1.address}\n  User root\n  IdentityFile {ssh_hosts.client_key}\n"
        "  ProxyJump box0\n"
    )
    direct = SSHConnection("box0", ask=lambda *a: pytest.fail("pinned keys need no question"))
    assert direct.run("echo $TFCC_HOME")[1].strip() == str(h0.tfcc_home)
    direct.close()
    jumped = SSHConnection("behind", ask=lambda *a: pytest.fail("pinned keys need no question"))
    assert jumped.target.proxy_jump == "box0"
    code, out, _ = jumped.run("echo $TFCC_HOME; echo $SSH_CONNECTION")
    assert code == 0
    home, connection = out.split("\n")[:2]
    assert home == str(h1.tfcc_home)
    assert connection.split()[0] == h0.address  # h1 saw the connection come from h0: it went through the jump
    jumped.close()


@pytest.mark.parametrize(
    "value, hops",
    [
        ("root@10.0.0.5", [Jump("10.0.0.5", "root", 22)]),
        ("root@10.0.0.5:2222", [Jump("10.0.0.5", "root", 2222)]),
        ("gate", [Jump("gate", "", 22)]),
        ("a@gate:22,b@inner:2200", [Jump("gate", "a", 22), Jump("inner", "b", 2200)]),
        ("ssh://me@gate:2022", [Jump("gate", "me", 2022)]),
        ("me@[fd00::5]:2022", [Jump("fd00::5", "me", 2022)]),
        ("none", []),
    ],
)
def test_proxy_jump_is_read_like_openssh(value, hops):
    assert parse_proxy_jump(value) == hops


@pytest.mark.parametrize("value, words", [("root@gate:ssh", "has a bad port in 'root@gate:ssh'"),
                                          ("gate:0", "has a bad port"), ("root@:22", "has an empty host")])
def test_a_bad_proxy_jump_says_how_to_write_it(value, words):
    with pytest.raises(SSHError, match="write each hop as \\[user@\\]host\\[:port\\]") as err:
        parse_proxy_jump(value)
    assert words in str(err.value) and not err.value.retry


def test_proxy_jump_with_user_and_port_reaches_the_host_behind(ssh_hosts, ssh_env):
    """``ProxyJump root@ADDRESS:22`` was once taken as a host name ("Name or service not known")."""
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    h0, h1 = ssh_hosts.hosts
    (ssh_env / "ssh_config").write_text(f"Host *\n  IdentityFile {ssh_hosts.client_key}\n")
    jumped = SSHConnection(h1.address, user="root", proxy_jump=f"root@{h0.address}:22",
                           ask=lambda *a: pytest.fail("pinned keys need no question"))
    code, out, _ = jumped.run("echo $SSH_CONNECTION")
    jumped.close()
    assert code == 0 and out.split()[0] == h0.address


def test_a_refused_login_names_the_user_and_what_to_check(ssh_hosts, ssh_env):
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    host = ssh_hosts.hosts[0]
    conn = SSHConnection(host.address, user="nobody", key=str(ssh_hosts.client_key))
    with pytest.raises(SSHError) as err:
        conn.connect()
    assert str(err.value).startswith(f"{host.address}: authentication as user 'nobody' failed (")
    assert "check the user name and the key (or ssh-agent) for this host" in str(err.value)
    assert "sshd runs there" not in str(err.value)  # the connection worked: no generic advice


def test_an_agent_that_dies_at_start_over_ssh_says_its_last_words(ssh_hosts, ssh_env):
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    host = ssh_hosts.hosts[0]
    python = crashing_python(ssh_env)
    link = HostLink(cl.Host(name=host.name, address=host.address, user="root", key=str(ssh_hosts.client_key),
                            python=python))
    try:
        with pytest.raises(HostError) as err:
            link.connect()
    finally:
        link.drop()
    assert f"host {host.name}: the agent did not start with {python!r} (it said: ImportError: cannot import " \
        "name 'runs' from 'agent')" in str(err.value)
    assert not list(host.tfcc_home.glob("agent-*.err")), "the file is removed once read"


@pytest.mark.slow
def test_a_worker_killed_on_its_ssh_host_is_restarted_with_the_group(ssh_hosts, ssh_env):
    """The supervision over SSH: SIGKILL one worker on its namespace host; MultiWorkerMirroredStrategy cannot go
    on, so every task is stopped and started again there from the newest backup both have; the run finishes as
    accurate as ever. (The same supervision runs a local run's restarts: test_session's frozen worker.)"""
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    run = Run(two_host_cluster(ssh_hosts, 2), "sshkill")  # killed in its first
    run.start()
    session = RunSession(run)
    backups, said, when, again = set(), [], {}, {}  # when: first time of each supervision event
    resumed, steps = [], []  # steps: worker-0's (attempt, global step, time)
    cond = threading.Condition()

    def on_event(e):
        with cond:
            if e.kind == "records":
                backups.update((e.task.name, r["global_step"]) for r in e.records if r.get("event") == "backed_up")
                resumed.extend(r for r in e.records if r.get("event") == "resumed")
                if e.task.name == "worker-0":
                    steps.extend((r["attempt"], r["global_step"], r["time"]) for r in e.records
                                 if r.get("type") == "step")
                if any(r.get("type") == "step" and r.get("attempt") == 2 for r in e.records):
                    again.setdefault(e.task.name, time.monotonic())  # training again on that host
            elif e.kind in SessionKind.SUPERVISION:
                said.append((e.kind, e.text))
                when.setdefault(e.kind, time.monotonic())
            cond.notify_all()

    def common() -> set:
        return {g for t, g in backups if t == "worker-0"} & {g for t, g in backups if t == "worker-1"}

    session.subscribe(on_event)
    session.follow()
    h1 = ssh_hosts.hosts[1]
    try:
        with cond:
            assert cond.wait_for(common, bound(180))  # a backup both have
        child = json.loads((h1.tfcc_home / "runs" / "sshkill" / "worker-1" / "child.json").read_text())["pid"]
        h1.exec("kill", "-KILL", str(child))
        killed = time.monotonic()
        with cond:
            assert cond.wait_for(lambda: len(again) == 2, bound(180)), said
        # How fast is bench/restart_recovery.py's figure (about 1 s and 10 s on a quiet machine); here, on a machine
        # that may be busy, only that neither waits on a timeout of its own.
        assert when["failure"] - killed < bound(15), "the failure is said at once"
        assert max(again.values()) - killed < bound(90), "every task training again soon after"
        assert session.wait(300)
    finally:
        session.detach()
        run.stop(grace=0)
    assert [t.phase for t in run.tasks] == ["finished", "finished"], said
    failures = [t for k, t in said if k == "failure"]  # the killed task, or a peer that lost it first
    assert any(f"worker-1 on {h1.name}: the task was killed by SIGKILL" in t or "lost contact with another task" in t
               or "this task lost contact with" in t for t in failures), failures
    assert [k for k, _ in said if k in ("restarting", "restarted", "resumed")] == ["restarting", "restarted", "resumed"]
    # Both tasks took up training at the newest backup they shared, as attempt 2; records say so.
    assert len(resumed) == 2 and {r["attempt"] for r in resumed} == {2}
    assert resumed[0]["global_step"] == resumed[1]["global_step"] > 0
    assert resumed[0]["global_step"] in common()
    assert min(g for a, g, _ in steps if a == 2) == resumed[0]["global_step"] + 1  # nothing skipped
    redone = [t for a, g, t in steps if a == 1 and g > resumed[0]["global_step"]]
    assert not redone or max(redone) - min(redone) <= 30, "at most 30 s of training redone"
    finished = read_records(ssh_hosts.hosts[0].tfcc_home / "runs" / "sshkill" / "worker-0" / "metrics.jsonl")[-1]
    assert finished["event"] == "finished" and finished["metrics"]["val_accuracy"] >= 0.93


@pytest.mark.slow
def test_a_worker_whose_backups_are_gone_gets_a_copy_from_its_peers_host_and_the_run_goes_on(ssh_hosts, ssh_env):
    """A wiped disk: worker-1 killed and its backup folder gone. Before, neither task found a backup in common and
    worker-0 deleted all of its own; now the group restart copies worker-0's newest backup from its host to
    worker-1's (SFTP, through the console) and both resume from it."""
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    run = Run(two_host_cluster(ssh_hosts, 2), "sshseed")
    run.start()
    session = RunSession(run)
    backups, said, resumed = set(), [], {}
    cond = threading.Condition()

    def on_event(e):
        with cond:
            if e.kind == "records":
                for r in e.records:
                    if r.get("event") == "backed_up":
                        backups.add((e.task.name, r["global_step"]))
                    elif r.get("event") == "resumed":
                        resumed[e.task.name] = r
            elif e.kind in SessionKind.SUPERVISION:
                said.append((e.kind, e.text))
            cond.notify_all()

    session.subscribe(on_event)
    session.follow()
    h0, h1 = ssh_hosts.hosts
    folder = h1.tfcc_home / "runs" / "sshseed" / "worker-1"
    try:
        with cond:
            assert cond.wait_for(lambda: len({g for t, g in backups if t == "worker-0"}
                                             & {g for t, g in backups if t == "worker-1"}) >= 2, 180)
        child = json.loads((folder / "child.json").read_text())["pid"]
        h1.exec("kill", "-STOP", str(child))  # no save of its own after the wipe
        shutil.rmtree(folder / "backup")
        h1.exec("kill", "-KILL", str(child))
        with cond:
            assert cond.wait_for(lambda: len(resumed) == 2, 120), said
        assert session.wait(300)
    finally:
        session.detach()
        run.stop(grace=0)
    assert [t.phase for t in run.tasks] == ["finished", "finished"], said
    step = resumed["worker-0"]["global_step"]
    assert resumed["worker-1"]["global_step"] == step and step > 0  # the copy, not a start over
    assert ("seeded", f"run sshseed: copied worker-0's backup of step {step} to worker-1, which lacked it, so that "
                      "every task resumes from it") in said
    finished = read_records(h0.tfcc_home / "runs" / "sshseed" / "worker-0" / "metrics.jsonl")[-1]
    assert finished["event"] == "finished" and finished["metrics"]["val_accuracy"] >= 0.9


@pytest.mark.slow
def test_a_parameter_server_cluster_over_two_ssh_hosts(ssh_hosts, ssh_env, capsys):
    """ps and one worker on one namespace host, chief and one worker on the other: it trains and every task
    ends well (the servers once the chief has finished)."""
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    a, b = ssh_hosts.hosts[:2]
    hosts = [cl.Host(name=h.name, address=h.address, user="root", key=str(ssh_hosts.client_key),
                     python=sys.executable) for h in (a, b)]
    tasks = [cl.Task(host=b.name, role="chief"), cl.Task(host=a.name), cl.Task(host=b.name),
             cl.Task(host=a.name, role="ps")]
    path = ssh_env / "ps.toml"
    cl.save(cl.Cluster(hosts, tasks, cl.Training(epochs=3)), path)
    assert main(["run", str(path), "--json", "--run-id", "sshps"]) == 0
    stream = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ends = {r["task"]: (r["host"], r["phase"]) for r in stream if r.get("type") == "end"}
    assert ends == {"chief-0": (b.name, "finished"), "worker-0": (a.name, "finished"),
                    "worker-1": (b.name, "finished"), "ps-0": (a.name, "finished")}
    config = json.loads((a.tfcc_home / "runs" / "sshps" / "ps-0" / "tf_config.json").read_text())
    assert sorted(config["cluster"]) == ["chief", "ps", "worker"] and config["task"] == {"type": "ps", "index": 0}
    finished = next(r for r in stream if r.get("event") == "finished" and r["task"] == "chief-0")
    assert finished["metrics"]["val_accuracy"] >= 0.90


@pytest.mark.slow
def test_a_users_two_file_script_runs_unchanged_over_two_ssh_hosts(ssh_hosts, ssh_env, capsys, tmp_path):
    """The two-file MultiWorkerMirrored fit script (main.py imports mnist_setup.py beside it and reads
    config.json): its folder is shipped to both hosts and each worker's captured steps come back."""
    import shutil

    folder = tmp_path / "mwms_fit"
    shutil.copytree(Path(__file__).resolve().parents[2] / "data" / "scripts" / "mwms_fit", folder,
                    ignore=shutil.ignore_patterns("saved_model", "__pycache__"))
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    cluster = two_host_cluster(ssh_hosts, 1)
    cluster.training = cl.Training(script=str(folder / "main.py"), args=["--epochs", "1"])
    path = ssh_env / "script.toml"
    cl.save(cluster, path)
    assert main(["run", str(path), "--json", "--run-id", "sshscript"]) == 0
    stream = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["task"]: r["phase"] for r in stream if r.get("type") == "end"} == {
        "worker-0": "finished", "worker-1": "finished"}
    for i, host in enumerate(ssh_hosts.hosts):
        steps = [r for r in stream if r.get("task") == f"worker-{i}" and r["type"] == "step"]
        assert [r["global_step"] for r in steps] == list(range(1, 11))  # config.json: 10 steps an epoch
        assert all(isinstance(r["loss"], float) and r["step_time"] > 0 for r in steps)
        assert (host.tfcc_home / "runs" / "sshscript" / f"worker-{i}" / "work" / "mnist_setup.py").is_file()


def test_over_ssh_a_home_others_may_write_in_runs_no_code(ssh_hosts, ssh_env):
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    host = ssh_hosts.hosts[0]
    host.tfcc_home.mkdir(parents=True, exist_ok=True)
    mode = host.tfcc_home.stat().st_mode
    host.tfcc_home.chmod(0o777)
    try:
        link = HostLink(cl.Host(name=host.name, address=host.address, user="root", key=str(ssh_hosts.client_key),
                                python=sys.executable))
        with pytest.raises(UnsafeHome, match=f"host {host.address}: {host.tfcc_home} is writable by other users: "
                                             "tfcc will not run code from it"):
            link.connect()
    finally:
        host.tfcc_home.chmod(mode & 0o7777)


def _tfcc_tables(host) -> list[str]:
    listed = host.exec("nft", "list", "tables").stdout.split()
    return [name for name in listed if name.startswith("tfcc_")]


def _reaches(address: str, port: int) -> bool:
    """Whether this machine (outside the cluster: the bridge's own address) can open a connection to it."""
    import socket
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False


def _reaches_as_nobody(host, address: str, port: int) -> bool:
    """Whether another user of ``host`` (nobody, in its namespace) can open a connection to ``address:port``."""
    done = host.exec("timeout", "5", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c",
                     f"exec 3<>/dev/tcp/{address}/{port}", check=False)
    return done.returncode == 0


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still alive here (a zombie is not: nothing of it runs)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@pytest.mark.slow
def test_firewall_admits_the_cluster_only_and_goes_with_the_run(ssh_hosts, ssh_env):
    """firewall = true: while two SSH hosts train, this machine (a namespace outside the cluster) cannot reach
    a task's TensorFlow port, nor can another user of the task's host (on loopback or its address) or of the peer
    host, the run trains and finishes, and its rules are gone from both hosts after it; a task killed with its
    supervisor leaves rules that the next agent on that host takes away."""
    from tests.helpers import testhosts
    if testhosts.tool("nft") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the firewall test: install nftables (scripts/test does)")
        pytest.skip("nft is not installed (apt-get install nftables)")
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    cluster = two_host_cluster(ssh_hosts, 3)  # training through the rules, the ports served while they are tried
    cluster.training.firewall = True
    run = Run(cluster, "walled")
    run.start()
    h0, h1 = ssh_hosts.hosts
    port = int(json.loads(run.tf_configs[0])["cluster"]["worker"][0].rsplit(":", 1)[1])
    assert len(_tfcc_tables(h0)) == len(_tfcc_tables(h1)) == 1
    stepped, cond = set(), threading.Condition()

    def on_event(e):
        if e.kind == SessionKind.RECORDS and any(r.get("type") == "step" for r in e.records):
            with cond:
                stepped.add(e.task.name)
                cond.notify_all()

    session = RunSession(run)
    session.subscribe(on_event)
    session.follow()
    try:
        with cond:
            assert cond.wait_for(lambda: len(stepped) == 2, 180), "both workers train through the firewall"
        def served() -> bool:  # the training user of the peer host reaches the port: the task serves it
            return h1.exec("bash", "-c", f"exec 3<>/dev/tcp/{h0.address}/{port}", check=False).returncode == 0

        assert served(), "the training user of the peer host reaches the task"
        assert not _reaches(h0.address, port), "outside the cluster, the task's port cannot be reached"
        for host, address in ((h0, "127.0.0.1"), (h0, h0.address), (h1, h0.address)):
            assert not _reaches_as_nobody(host, address, port), f"another user of {host.name} reaches {address}"
        assert served(), "the port was served all along: the others were refused by the rules, not by its end"
        assert session.wait(300)
    finally:
        session.detach()
        run.stop(grace=0)
    assert [t.phase for t in run.tasks] == ["finished", "finished"]
    assert _tfcc_tables(h0) == _tfcc_tables(h1) == [], "the rules went with the run"
    assert not list((h0.tfcc_home / "firewall").glob("*.json"))

    # A task killed with its supervisor (kill -9 of the group, a reboot) cannot take its rules away ...
    cluster.training.epochs = 50
    run = Run(cluster, "killed")
    run.start()
    folder = h0.tfcc_home / "runs" / "killed" / "worker-0"
    state = json.loads((folder / "state.json").read_text())
    # The test hosts share this machine's PID space. (Not procps-ng 4.0's `kill -KILL -PGID`: it kills every
    # process it may, as `kill -1` would.)
    os.killpg(state["pgid"], signal.SIGKILL)
    # Dead before the stop comes: a stop that still finds the supervisor takes the rules away itself (CI met it).
    assert wait_until(lambda: not _group_alive(state["pgid"]), 30)
    run.stop(grace=0)
    run.detach()
    assert len(_tfcc_tables(h0)) == 1
    # ... the next agent on that host does, at its start.
    link = HostLink(cluster.hosts[0])
    try:
        link.connect()
        assert wait_until(lambda: _tfcc_tables(h0) == [], 30)
    finally:
        link.drop()
    assert _tfcc_tables(h1) == []


def test_the_agent_starts_from_a_home_whose_path_has_spaces_and_glob_characters(tmp_path):
    """``start_agent``'s script in a shell, as sshd runs it: TFCC_HOME with a space and a glob pattern in it (a
    home on a mounted drive, "/mnt/My Drive [1]") is quoted at every use; the agent starts from its dist folder."""
    home = tmp_path / "My Drive [1]" / ".tfcc"
    dist = home / "dist" / "abc123"
    (dist / "agent").mkdir(parents=True)
    (dist / "agent" / "__main__.py").write_text("import os\nprint('agent in', os.getcwd(), flush=True)\n")
    (dist / ".complete").write_text("")
    (tmp_path / "My").mkdir()  # what an unquoted cd would reach for its first word
    done = subprocess.run(["sh", "-c", ssh._start_script("abc123", sys.executable)], capture_output=True, text=True,
                          env={**os.environ, "TFCC_HOME": str(home)}, timeout=60, cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert lines[:2] == [f"tfcc-home {home}", "tfcc-agent"], done.stdout + done.stderr
    assert lines[2].startswith(f"tfcc-stderr {home}/agent-") and lines[3] == f"agent in {dist}", lines
