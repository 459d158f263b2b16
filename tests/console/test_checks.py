"""Pre-flight checks: rules with their messages, and the real thing on SSH test hosts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console import checks
from console import cluster as cl
from console.remote.link import CONNECT_TIMEOUT
from tests.helpers import testhosts
from tests.helpers.waiting import bound

PROBE = {"python": "3.11.7", "python_executable": "/usr/bin/python3", "tensorflow": "2.21.0",
         "tf_keras": "2.21.0", "gpus": [], "time": 0.0}


def two_hosts(**task_gpus) -> cl.Cluster:
    hosts = [cl.Host(name="a", address="10.0.0.1"), cl.Host(name="b", address="10.0.0.2")]
    tasks = [cl.Task(host="a", gpus=task_gpus.get("a", [])), cl.Task(host="b", gpus=task_gpus.get("b", []))]
    return cl.Cluster(hosts, tasks)


def problems(cluster, a=None, b=None) -> list[str]:
    return [str(p) for p in checks.consistency(cluster, {"a": {**PROBE, **(a or {})}, "b": {**PROBE, **(b or {})}})]


def test_consistent_cluster_has_no_problem():
    assert problems(two_hosts()) == []


def script_cluster(tmp_path, source: str, workers: int = 2, keras: str = "auto", files: dict | None = None):
    """A cluster running ``source`` as the user's main.py (and ``files`` beside it) on ``workers`` workers."""
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    (folder / "main.py").write_text(source)
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    hosts = [cl.Host(name="a", address="10.0.0.1")]
    return cl.Cluster(hosts, [cl.Task(host="a") for _ in range(workers)],
                      cl.Training(script=str(folder / "main.py"), keras=keras))


FIT = "model.fit(dataset, epochs=3)\n"


@pytest.mark.parametrize("source, workers, keras, files, expected", [
    ("import keras\n" + FIT, 2, "auto", {},
     "cluster: the script imports Keras 3 (import keras at main.py:1) and calls fit (main.py:2) with 2 training "
     "tasks: Keras 3 cannot run fit under MultiWorkerMirrored or ParameterServer strategies in TensorFlow 2.21; "
     "import tf_keras as keras instead (or use tf.keras, which tfcc makes tf-keras here)"),
    ("import setup\n" + FIT, 2, "auto", {"setup.py": "\nfrom keras import layers\n"},
     "cluster: the script imports Keras 3 (import keras at setup.py:2) and calls fit (main.py:2)"),
    ("import tensorflow as tf\n" + FIT, 2, "keras3", {},
     "cluster: training.keras is \"keras3\", but the script calls fit (main.py:2) with 2 training tasks"),
    ("import tf_keras as keras\n" + FIT, 2, "auto", {}, None),       # tf-keras: fine
    ("import keras\n" + FIT, 1, "auto", {}, None),                    # one task: Keras 3 can run fit
    ("import keras\nfor x in data:\n    step(x)\n", 2, "auto", {}, None),  # a custom loop: fine
], ids=["keras3-fit", "keras3-in-a-module-beside", "keras3-asked", "tf-keras", "single-task", "custom-loop"])
def test_check_reads_the_script_for_a_keras3_fit_where_tf_keras_is_needed(tmp_path, source, workers, keras, files,
                                                                         expected):
    found = [str(p) for p in checks.script_problems(script_cluster(tmp_path, source, workers, keras, files))]
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(expected), found


def test_check_looks_at_the_workload_files_a_start_ships(tmp_path):
    """A script that is not there, or does not compile, is a problem of the check (a start would fail on it a
    second later), with its own row; one that is there is an ok row."""
    missing = script_cluster(tmp_path, "print(1)\n", workers=1)
    missing.training.script = str(tmp_path / "no_such.py")
    rows, problems = checks.workload_files(missing)
    assert rows == [{"what": "script", "path": str(tmp_path / "no_such.py"), "ok": False, "problem": str(problems[0])}]
    assert "does not exist" in str(problems[0]) and "check the path" in str(problems[0])
    broken = script_cluster(tmp_path, "def f(:\n", workers=1)
    rows, problems = checks.workload_files(broken)
    assert [r["ok"] for r in rows] == [False] and "has a syntax error at line 1" in str(problems[0])
    fine = script_cluster(tmp_path, "print(1)\n", workers=1)
    folder = Path(fine.training.script).parent
    (folder / "model.py").write_text("X = 1\n")  # the script's folder ships with it: the check says what goes
    shipped = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    rows, problems = checks.workload_files(fine)
    assert problems == [] and rows[0] == {"what": "script", "path": fine.training.script, "ok": True, "problem": ""}
    assert rows[1]["what"] == "workdir" and rows[1]["ok"]
    assert rows[1]["path"].startswith(f"{folder}: ships {len(shipped)} files, ")
    assert checks.workload_files(cl.default()) == ([], [])  # the embedded trainer ships no file of the person's


@pytest.mark.parametrize("name", [".env", "credentials", "deploy.key"])
def test_a_script_must_be_a_python_file_not_a_token_file_that_compiles(tmp_path, name):
    """``TOKEN = "abc"`` is valid Python: a .env, a credentials file or a key named as the script compiled, and a
    start shipped it (around the workdir's excludes and secret_env). Only a *.py file that is no dotfile runs."""
    cluster = script_cluster(tmp_path, "print(1)\n", workers=1)
    token = Path(cluster.training.script).parent / name
    token.write_text('TOKEN = "abc"\n')
    cluster.training.script = str(token)
    rows, problems = checks.workload_files(cluster)
    assert [r["ok"] for r in rows] == [False]
    assert str(problems[0]) == (f"cluster: training.script {str(token)!r} is not a Python script (a file named *.py, "
                                "not a dotfile); give the path of the .py file that trains")


def test_a_check_of_a_missing_script_is_not_ready(tmp_path):
    cluster = script_cluster(tmp_path, "print(1)\n", workers=1)
    cluster.hosts = [cl.Host(name="here", local=True)]
    cluster.tasks = [cl.Task(host="here")]
    cluster.training.script = str(tmp_path / "gone.py")
    report = checks.check(cluster)
    assert not report.ready and [f["ok"] for f in report.files] == [False]
    assert any("gone.py" in str(p) and "does not exist" in str(p) for p in report.problems)


def test_tf_keras_is_needed_only_where_it_is_used(tmp_path):
    """A single-host script gets the Keras it gets standalone: no tf-keras needed on its host."""
    alone = script_cluster(tmp_path, "import keras\n" + FIT, workers=1)
    assert checks.consistency(alone, {"a": {**PROBE, "tf_keras": None}}) == []
    mine = script_cluster(tmp_path, "import tf_keras as keras\n" + FIT, workers=1)
    assert [p.cause for p in checks.consistency(mine, {"a": {**PROBE, "tf_keras": None}})] == [
        "its Python (/usr/bin/python3) has TensorFlow 2.21.0 but no tf-keras, which the script gets (it imports "
        "tf_keras (main.py:1))"]
    two = script_cluster(tmp_path, "import tensorflow as tf\n" + FIT, workers=2)
    assert [p.cause for p in checks.consistency(two, {"a": {**PROBE, "tf_keras": None}})] == [
        "its Python (/usr/bin/python3) has TensorFlow 2.21.0 but no tf-keras, which the script gets (2 training "
        "tasks: Keras 3 cannot run fit there)"]
    # Code written for Keras 2 (tf.keras) gets tf-keras alone too: the fix names the other way out.
    keras2 = script_cluster(tmp_path, "import tensorflow as tf\nm = tf.keras.Sequential()\n" + FIT, workers=1)
    [problem] = checks.consistency(keras2, {"a": {**PROBE, "tf_keras": None}})
    assert problem.cause.endswith("which the script gets (it uses tf.keras (main.py:2), written for Keras 2)")
    assert problem.fix == ("pip install 'tf-keras==2.21.*' there (or set keras = \"keras3\" in [training] if the "
                           "script runs under Keras 3), or make it ready (tfcc provision)")
    assert problem.remedy == checks.MAKE_READY


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ({}, {"tensorflow": None, "tf_keras": None},
         "b: its Python (/usr/bin/python3) has no TensorFlow; make it ready (tfcc provision: tfcc installs it, "
         "offline too), install it there yourself (pip install 'tensorflow==2.21.*'"),
        ({}, {"tf_keras": None}, "b: its Python (/usr/bin/python3) has TensorFlow 2.21.0 but no tf-keras; "
                                 "pip install 'tf-keras==2.21.*' there"),
        ({}, {"tensorflow": "2.20.1", "tf_keras": "2.20.1"},
         "cluster: TensorFlow differs between hosts: a has 2.21.0, b has 2.20.1; make them ready (tfcc provision: "
         "the same versions everywhere) or install the same version everywhere, e.g. tensorflow==2.21.0"),
        ({}, {"python": "3.10.12"}, "cluster: Python differs between hosts: a has 3.11, b has 3.10"),
    ],
    ids=["no-tensorflow", "no-tf-keras", "tensorflow-differs", "python-differs"],
)
def test_rule_failing_cases(a, b, expected):
    assert any(p.startswith(expected) for p in problems(two_hosts(), a, b)), problems(two_hosts(), a, b)


def test_different_gpu_counts_per_worker():
    gpu = {"index": 0}
    found = problems(two_hosts(), {"gpus": [gpu, gpu]}, {"gpus": [gpu]})
    assert any("workers would use different numbers of GPUs (worker-0 2, worker-1 1)" in p and
               "give every task the same number of GPUs" in p for p in found)
    assert problems(two_hosts(a=[0], b=[1]), {"gpus": [gpu, gpu]}, {"gpus": [gpu, gpu]}) == []


def test_global_batch_must_split_over_the_replicas():
    gpu = {"index": 0}
    uneven = two_hosts()
    uneven.training.global_batch = 100
    assert problems(uneven, {"gpus": [gpu, gpu]}, {"gpus": [gpu, gpu]}) == []  # 4 replicas
    found = problems(uneven, {"gpus": [gpu, gpu, gpu]}, {"gpus": [gpu, gpu, gpu]})
    assert ("cluster: the global batch 100 does not split evenly over the 6 replicas (2 workers); set global_batch "
            "to a multiple of 6 (e.g. 96 or 102) or set per_replica_batch instead") in found
    uneven.training.global_batch, uneven.training.per_replica_batch = 0, 7
    assert problems(uneven, {"gpus": [gpu, gpu, gpu]}, {"gpus": [gpu, gpu, gpu]}) == []


def parameter_server(chief_gpus=(), worker_gpus=((), ())) -> cl.Cluster:
    """Host a: the chief and the ps; host b: the workers."""
    hosts = [cl.Host(name="a", address="10.0.0.1"), cl.Host(name="b", address="10.0.0.2")]
    tasks = [cl.Task(host="a", role="chief", gpus=list(chief_gpus)), cl.Task(host="a", role="ps")] + \
        [cl.Task(host="b", gpus=list(g)) for g in worker_gpus]
    return cl.Cluster(hosts, tasks, cl.Training(strategy="parameter_server"))


def test_parameter_server_gpus_count_only_on_the_workers():
    """The coordinator and the ps hold no model replicas: a CPU-only chief beside GPU workers is fine;
    workers with different GPU counts are not (each step's batch is split over one worker's GPUs)."""
    gpu = {"index": 0}
    assert problems(parameter_server(worker_gpus=([0], [1])), {"gpus": []}, {"gpus": [gpu, gpu]}) == []
    found = problems(parameter_server(worker_gpus=([0, 1], [2])), {"gpus": []}, {"gpus": [gpu, gpu, gpu]})
    assert any("workers would use different numbers of GPUs (worker-0 2, worker-1 1)" in p for p in found), found


def test_parameter_server_global_batch_splits_over_one_workers_replicas():
    gpu = {"index": 0}
    cluster = parameter_server(worker_gpus=([0, 1], [2, 3]))
    cluster.training.global_batch = 30  # one worker's batch: 2 replicas of 15 (not 4 replicas of all workers)
    assert problems(cluster, {"gpus": []}, {"gpus": [gpu] * 4}) == []
    cluster.training.global_batch = 31
    found = problems(cluster, {"gpus": []}, {"gpus": [gpu] * 4})
    assert ("cluster: the global batch 31 does not split evenly over the 2 replicas of one worker (each step is "
            "one worker's batch); set global_batch to a multiple of 2 (e.g. 30 or 32) or set per_replica_batch "
            "instead") in found, found


ALLOW = ("allow 12345/tcp on a from 10.0.0.2 and 10.0.0.3 only (not from everyone: its server runs what it is sent), "
         "e.g. sudo nft add rule inet filter input ip saddr { 10.0.0.2, 10.0.0.3 } tcp dport 12345 accept or "
         "sudo ufw allow from 10.0.0.2 to any port 12345 proto tcp")


@pytest.mark.parametrize(
    "error, fix",
    [
        ("timed out", f"a firewall between them drops this port; {ALLOW}; or choose another port"),
        ("refused", f"a firewall on a rejects this port; {ALLOW}; or choose another port"),
        ("no route to host", "10.0.0.1 is not reachable from b: use an address of a that b can reach"),
    ],
)
def test_reachability_diagnoses(error, fix):
    """A blocked port's advice opens it to the cluster's other hosts only, with the lines that do it."""
    task = {"name": "worker-0", "host": "a", "address": "10.0.0.1:12345"}
    problem = checks.reach_problem("b", task, {"ok": False, "error": error}, ["10.0.0.2", "10.0.0.3"])
    assert str(problem) == f"b -> worker-0: b cannot reach a at 10.0.0.1:12345 ({error}); {fix}"
    assert (problem.hosts, problem.task) == (("b", "a"), "worker-0")  # structured: nothing parses the words
    assert "open 12345" not in str(problem)


# --------------------------------------------------------------------------- on SSH test hosts


def host_cluster(ssh_hosts, pythons=None) -> cl.Cluster:
    pythons = pythons or {}
    hosts = [cl.Host(name=h.name, address=h.address, user="root", key=str(ssh_hosts.client_key),
                     python=pythons.get(h.name, sys.executable)) for h in ssh_hosts.hosts]
    tasks = [cl.Task(host=h.name, port=23456 + h.index) for h in ssh_hosts.hosts]
    return cl.Cluster(hosts, tasks)


@pytest.fixture
def pinned(ssh_hosts, ssh_env):
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    return ssh_hosts


def nft(host, *rule: str) -> None:
    host.exec("nft", "add", "table", "inet", "tfcc")
    host.exec("nft", "add chain inet tfcc input { type filter hook input priority 0; }")
    host.exec("nft", "add", "rule", "inet", "tfcc", "input", *rule)


def flush_nft(host) -> None:
    host.exec("nft", "delete", "table", "inet", "tfcc", check=False)


def test_all_pass_on_healthy_hosts(pinned):
    report = checks.check(host_cluster(pinned))
    assert report.ready, [str(p) for p in report.problems]
    h0, h1 = pinned.hosts
    assert report.matrix[h0.name][f"{h1.address}:23457"]["ok"]
    assert report.matrix[h1.name][f"{h0.address}:23456"]["ok"]


def test_firewall_fails_exactly_that_cell(pinned):
    h0, h1 = pinned.hosts
    if testhosts.tool("nft") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the firewall test: install nftables (scripts/test does)")
        pytest.skip("nft is not installed (apt-get install nftables)")
    nft(h0, "ip", "saddr", h1.address, "tcp", "dport", "23456", "drop")
    try:
        report = checks.check(host_cluster(pinned), connect_timeout=2)
    finally:
        flush_nft(h0)
    failed = [(src, dst) for src, row in report.matrix.items() for dst, r in row.items() if not r["ok"]]
    assert failed == [(h1.name, f"{h0.address}:23456")]
    assert [str(p) for p in report.problems] == [
        f"{h1.name} -> worker-0: {h1.name} cannot reach {h0.name} at {h0.address}:23456 (timed out); "
        f"a firewall between them drops this port; allow 23456/tcp on {h0.name} from {h1.address} only (not from "
        f"everyone: its server runs what it is sent), e.g. sudo nft add rule inet filter input ip saddr "
        f"{{ {h1.address} }} tcp dport 23456 accept or sudo ufw allow from {h1.address} to any port 23456 proto tcp; "
        "or choose another port"]


def test_busy_port_names_its_holder(pinned):
    h1 = pinned.hosts[1]
    code = ("import socket, sys; s = socket.socket(); s.bind(('0.0.0.0', 23457)); s.listen(); "
            "print('up', flush=True); sys.stdin.read()")
    holder = subprocess.Popen(["ip", "netns", "exec", h1.name, sys.executable, "-c", code, "squatter"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        report = checks.check(host_cluster(pinned))
    finally:
        holder.kill()
        holder.wait()
    (problem,) = [str(p) for p in report.problems]
    assert problem.startswith(f"{h1.name}: port 23457 is in use by pid {holder.pid} (")
    assert "squatter" in problem and "give the task another port" in problem


def test_python_without_tensorflow_is_flagged(pinned):
    h1 = pinned.hosts[1]
    if subprocess.run(["/usr/bin/python3", "-c", "import importlib.metadata as m; m.version('tensorflow')"],
                      capture_output=True).returncode == 0:
        pytest.skip("the system Python has TensorFlow")
    report = checks.check(host_cluster(pinned, {h1.name: "/usr/bin/python3"}))
    assert any(str(p).startswith(f"{h1.name}: its Python (/usr/bin/python3) has no TensorFlow; install it there")
               for p in report.problems)


def test_stopped_sshd_is_unreachable_and_others_are_still_checked(pinned):
    h0, h1 = pinned.hosts
    pinned.stop_sshd(h1)
    try:
        report = checks.check(host_cluster(pinned), deadline=8)
    finally:
        pinned.start_sshd(h1)
        pinned.wait_for_ssh(h1)
    by_name = {r.name: r for r in report.hosts}
    assert by_name[h0.name].ok and by_name[h0.name].probe["tensorflow"].startswith("2.21")
    assert not by_name[h1.name].ok and f"cannot connect to {h1.address}" in by_name[h1.name].error
    assert any(str(p).startswith(f"{h1.name}: cannot be checked") for p in report.problems)


# The deadline of the checks below: long enough for the healthy host's whole check on a busy machine.
DEADLINE = 8


def test_hanging_host_says_no_answer_within_the_deadline(pinned):
    h0, h1 = pinned.hosts
    nft(h1, "tcp", "dport", "22", "drop")
    try:
        t0 = time.monotonic()
        report = checks.check(host_cluster(pinned), deadline=DEADLINE)
        took = time.monotonic() - t0
    finally:
        flush_nft(h1)
    by_name = {r.name: r for r in report.hosts}
    assert by_name[h1.name].error == f"no answer in {DEADLINE} s"
    assert by_name[h0.name].ok
    assert took < DEADLINE + bound(10)  # the hanging host holds nothing back beyond its deadline (plus the port checks)


def test_cli_check_with_a_deadline_against_a_blackholed_host_keeps_it(pinned, ssh_env):
    """The whole command keeps the deadline: it once took 10 s with --deadline 5 (its exit waited for the SSH
    connect's own 10 s timeout). Its interpreter's start is measured beside it (``tfcc check --help``) and taken
    off: what is left is the check, which may take the deadline and a little more on a busy machine, not 10 s."""
    h0, h1 = pinned.hosts
    path = ssh_env / "two.toml"
    cl.save(host_cluster(pinned), path)
    tfcc = str(Path(sys.executable).with_name("tfcc"))
    t0 = time.monotonic()
    subprocess.run([tfcc, "check", "--help"], capture_output=True, check=True, timeout=60)
    start = time.monotonic() - t0
    nft(h1, "tcp", "dport", "22", "drop")
    try:
        t0 = time.monotonic()
        done = subprocess.run([tfcc, "check", str(path), "--deadline", "3"], capture_output=True, text=True,
                              timeout=60)
        took = time.monotonic() - t0
    finally:
        flush_nft(h1)
    assert took - start < 3 + bound(4) < CONNECT_TIMEOUT, (took, start, done.stdout, done.stderr)
    assert done.returncode == 1
    assert f"{h1.name}: no answer in 3 s; check that the host is up and its SSH port reachable" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def hanging_python(folder: Path) -> str:
    """An "interpreter" that starts and never says a word nor reads a line, as one stuck in an import
    would; its output stays open and closing its input does not end it."""
    path = folder / "hanging-python"
    path.write_text("#!/bin/sh\nexec sleep 600\n")
    path.chmod(0o755)
    return str(path)


def test_hung_agent_is_no_answer_within_the_deadline(pinned, ssh_env):
    h0, h1 = pinned.hosts
    python = hanging_python(ssh_env)
    t0 = time.monotonic()
    report = checks.check(host_cluster(pinned, {h1.name: python}), deadline=DEADLINE)
    took = time.monotonic() - t0
    by_name = {r.name: r for r in report.hosts}
    assert by_name[h0.name].ok
    assert by_name[h1.name].error == f"no answer in {DEADLINE} s"
    assert [str(p) for p in report.problems if p.where == h1.name] == [
        f"{h1.name}: no answer in {DEADLINE} s; its agent started with {python!r} but did not answer (starting the "
        "agent): check that this Python runs there and that the host is not overloaded"]
    assert took < DEADLINE + bound(5)  # not the hung interpreter's while (it never answers)


def test_run_with_a_hung_agent_is_one_line_within_the_connect_timeout(pinned, ssh_env):
    h0, h1 = pinned.hosts
    python = hanging_python(ssh_env)
    path = ssh_env / "hung.toml"
    cluster = host_cluster(pinned, {h1.name: python})
    cluster.training.epochs = 1
    cl.save(cluster, path)
    tfcc = str(Path(sys.executable).with_name("tfcc"))
    t0 = time.monotonic()
    done = subprocess.run([tfcc, "run", str(path), "--run-id", "hung"], capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"tfcc: error: host {h1.name}: no answer in {CONNECT_TIMEOUT:.0f} s from the agent started with "
        f"{python!r}; check that this interpreter starts on {h1.name} (run it there by hand) and that the host "
        "is not overloaded"]
    assert took < CONNECT_TIMEOUT + bound(20)  # the healthy host's connect and deploy, then the one timeout
    assert not (h0.tfcc_home / "runs" / "hung").exists(), "no task may start when a host cannot"
    assert not (ssh_env / "console-home" / "runs" / "hung.json").exists(), "nor may a manifest be written"


def test_a_declined_host_key_says_what_to_do_about_the_key_not_sshd(ssh_hosts, ssh_env):
    """Per-host problems carry their own fix; the generic SSH advice is for connects that failed."""
    h0, h1 = ssh_hosts.hosts
    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    (ssh_env / "known_hosts").write_text(h0.host_key_line() + "\n")  # h1's key is unknown
    report = checks.check(host_cluster(ssh_hosts), ask_host_key=lambda *a: False)
    (problem,) = [str(p) for p in report.problems if p.where == h1.name]
    assert problem.startswith(f"{h1.name}: cannot be checked: the host key of {h1.address} is not known (ssh-ed25519 ")
    assert problem.endswith(f"accept it when asked, or add it to {ssh_env / 'known_hosts'} after checking the "
                            "fingerprint")
    assert "sshd runs there" not in problem


def test_a_public_task_address_is_a_warning_and_the_firewall_needs_root_or_sudo(pinned, monkeypatch):
    """A task on an address that resolves to a public one: the check warns with the risk and the fix, and the
    cluster is still ready (a cloud's own firewall may close the port). firewall = true asks each host whether
    its agent can set the rules: as root here, it can."""
    from console import exposure
    h0, h1 = pinned.hosts
    monkeypatch.setattr(exposure, "resolve", lambda host: ["35.201.3.4"] if host == h0.address else [host])
    report = checks.check(host_cluster(pinned))
    assert report.ready, [str(p) for p in report.problems]
    assert [str(w) for w in report.warnings] == [
        f"cluster: worker-0 ({h0.address} = 35.201.3.4) serves TensorFlow on a public address: that server runs the "
        "graphs anyone who reaches its port sends it, as the training user; give the hosts private addresses (a "
        "private network or VPN between them), or set firewall = true in [training] (the agents then admit only the "
        "cluster's hosts to the task ports), or allow the ports from the other hosts only yourself (docs/security.md)"]
    assert report.warnings[0].hosts == (h0.name,) and report.as_dict()["warnings"][0]["text"] == str(report.warnings[0])
    walled = host_cluster(pinned)
    walled.training.firewall = True
    report = checks.check(walled)
    assert report.ready and report.warnings == [], [str(p) for p in report.problems]
    assert {r.probe["firewall"] for r in report.hosts} == {"root"}


def test_a_host_that_cannot_set_the_firewall_is_a_problem():
    cluster = cl.Cluster([cl.Host("a", address="10.0.0.1"), cl.Host("b", address="10.0.0.2")],
                         [cl.Task("a"), cl.Task("b")], cl.Training(firewall=True))
    probes = {"a": {"firewall": "sudo"}, "b": {"firewall": None, "firewall_problem": "nft (nftables) is not installed"}}
    assert [str(p) for p in checks.firewall_problems(cluster, probes)] == [
        "b: firewall = true, but tfcc cannot set nftables rules there (nft (nftables) is not installed); log in as "
        "root there (user = \"root\"), let this user run nft with sudo without a password, or set firewall = false in "
        "[training] and allow the task ports from the cluster's hosts only yourself"]
    cluster.training.firewall = False
    assert checks.firewall_problems(cluster, probes) == []


SCRIPTS = Path(__file__).resolve().parents[1] / "data" / "scripts"


def local_cluster(training: cl.Training) -> cl.Cluster:
    return cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")], training)


def test_check_says_to_run_a_package_as_a_module_before_a_launch(tmp_path, monkeypatch):
    """A file of a package run by its path (a relative import), and a script several folders down that imports
    its repository's own package: each is one problem whose fix is the module run; as modules both are ready.
    Nothing is launched: the check starts no task."""
    import shutil
    for shape in ("cloud_package", "repo_root"):
        shutil.copytree(SCRIPTS / shape, tmp_path / shape)
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    package, repo = tmp_path / "cloud_package", tmp_path / "repo_root"

    def refused(training: cl.Training) -> list[str]:
        report = checks.check(local_cluster(training))
        assert not report.ready
        return [str(p) for p in report.problems]

    assert refused(cl.Training(script=str(package / "trainer" / "task.py"))) == [
        "cluster: the script task.py uses a relative import (line 12), which Python allows only in a module of a "
        f'package run with python -m; run it as a module: module = "trainer.task", workdir = "{package}" in '
        "[training] in place of script (python -m from the folder that holds trainer/, as you would run it by "
        "hand); then start the run again"]
    assert refused(cl.Training(script=str(repo / "experiments" / "digits" / "train.py"), workdir=str(repo))) == [
        "cluster: the script experiments/digits/train.py imports myproject (line 9), which is your project's "
        f"(myproject/ in {repo}) but not on the import path of a script run by its path (only its own folder is); "
        'run it as a module: module = "experiments.digits.train" in [training] in place of script (python -m from '
        "the folder that holds experiments/, as you would run it by hand); then start the run again"]
    for training in (cl.Training(module="trainer.task", workdir=str(package)),
                     cl.Training(module="experiments.digits.train", workdir=str(repo))):
        ready = checks.check(local_cluster(training))
        assert ready.ready and ready.problems == [], ready.problems
    assert not (tmp_path / "host-home" / "runs").exists()


def test_check_names_an_import_a_hosts_python_lacks_and_only_that(tmp_path, monkeypatch):
    """The host's Python is asked for the modules the code imports from outside its workdir (followed from the
    script through its own files): one it lacks is a problem naming the host and the package; an optional
    import (in a try that catches ImportError), a module of the workdir and Python's own are none."""
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    project = tmp_path / "project"
    (project / "lib").mkdir(parents=True)
    (project / "main.py").write_text("import json\nimport numpy\nfrom lib import data\n"
                                     "try:\n    import wandb_not_here\nexcept ImportError:\n    wandb_not_here = None\n")
    (project / "lib" / "__init__.py").write_text("")
    (project / "lib" / "data.py").write_text("import os\n\nimport tfcc_missing_pkg.readers\n")
    report = checks.check(local_cluster(cl.Training(script=str(project / "main.py"))))
    assert not report.ready
    assert [str(p) for p in report.problems] == [
        f"here: the code imports tfcc_missing_pkg (lib/data.py:3), which the Python ({sys.executable}) of here lacks "
        "and its workdir does not hold; add \"tfcc_missing_pkg\" to packages in [environment] and make the hosts "
        "ready (tfcc provision), install it there yourself (pip install tfcc_missing_pkg), or drop the import"]
    (project / "lib" / "data.py").write_text("import os\n")
    assert checks.check(local_cluster(cl.Training(script=str(project / "main.py")))).ready


def test_versions_that_differ_on_hosts_whose_python_is_set_are_not_offered_to_make_ready():
    """Make ready makes nothing on a host whose python is set (without an [environment]): not offered there."""
    cluster = two_hosts()
    for host in cluster.hosts:
        host.python = "/opt/py/bin/python3"
    [problem] = [p for p in checks.consistency(cluster, {"a": PROBE, "b": {**PROBE, "tensorflow": "2.20.1"}})
                 if "differs" in p.cause]
    assert problem.remedy == "" and problem.fix.startswith("install the same version everywhere")
