"""Hosts made ready (console/provision.py) on SSH test hosts with no route to any package index and a Python
without TensorFlow: the Check says what is missing, ``tfcc provision`` makes them ready, the Check is then ready
with the same versions everywhere, a second provision does nothing; a failure on one host says why in one line
and leaves the others ready. Small wheels of the tests' own show the mechanics; one slow test installs the real
TensorFlow and trains on it."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from console import checks, cli, provision
from console import cluster as cl
from console import environments as envs
from tests.helpers.testhosts import SUBNET
from tests.helpers.wheels import Index, console_stack_stand_ins, make_wheel

BASE = "/usr/bin/python3"  # the hosts' own Python (plain_shell): no TensorFlow


@pytest.fixture
def hosts(bare_ssh_hosts, ssh_env, monkeypatch):
    bare_ssh_hosts.known_hosts(ssh_env / "known_hosts")
    monkeypatch.setenv(provision.CACHE_VARIABLE, str(ssh_env / "cache"))
    return bare_ssh_hosts


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """The console's stack as tiny stand-ins at its own versions, and a package the code needs."""
    folder = tmp_path_factory.mktemp("wheels")
    console_stack_stand_ins(folder)
    make_wheel(folder, "tfccdep", "2.0")
    return folder


def cluster_file(folder: Path, hosts, environment: str | None, pythons: dict | None = None) -> Path:
    lines = ["[training]", 'workload = "digits"', "epochs = 1", ""]
    if environment is not None:
        lines += ["[environment]", environment, ""]
    for h in hosts.hosts:
        lines += ["[[hosts]]", f'name = "{h.name}"', f'address = "{h.address}"', 'user = "root"',
                  f'key = "{hosts.client_key}"']
        if (pythons or {}).get(h.name):
            lines.append(f'python = "{pythons[h.name]}"')
        lines.append("")
    for h in hosts.hosts:
        lines += ["[[tasks]]", f'host = "{h.name}"', ""]
    path = folder / "cluster.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def offline(wheels: Path, packages: str = '["tfccdep==2.0"]', tensorflow: str = "console") -> str:
    return f'tensorflow = "{tensorflow}"\npackages = {packages}\nindex = ""\nfind_links = ["{wheels}"]'


def test_no_host_reaches_an_index(hosts):
    for h in hosts.hosts:
        tried = h.exec(BASE, "-c", "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/', "
                       "timeout=3)", check=False)
        assert tried.returncode != 0 and ("unreachable" in tried.stderr or "URLError" in tried.stderr), tried.stderr


def test_check_says_what_is_missing_then_provision_makes_every_host_ready(hosts, wheels, tmp_path, capsys):
    path = cluster_file(tmp_path, hosts, offline(wheels))
    names = [h.name for h in hosts.hosts]
    before = checks.check(cl.load(path))
    [missing] = [p for p in before.problems if p.remedy == checks.MAKE_READY]
    assert str(missing) == (f"hosts: the cluster file's [environment] is not made on {', '.join(names)} yet; make "
                            "the hosts ready (tfcc provision, or Make ready in the window)")
    assert missing.hosts == tuple(names)

    assert cli.main(["provision", str(path)]) == 0
    out = capsys.readouterr().out
    for name in names:
        for stage in (provision.RESOLVING, provision.FETCHING, provision.PUSHING, provision.INSTALLING):
            assert f"{name}: {stage}" in out
        assert f"{name}: made: 6 packages, Python 3.11" in out
    assert "0 B fetched" in out and "ready: every host has the same versions" in out

    after = checks.check(cl.load(path))
    assert after.ready, [str(p) for p in after.problems]
    spec = envs.spec_of(cl.load(path))
    for report, h in zip(after.hosts, hosts.hosts):
        assert (report.probe["tensorflow"], report.probe["tf_keras"]) == ("2.21.0", "2.21.0")
        env_python = report.probe["python_executable"]
        assert env_python.startswith(f"{h.tfcc_home}/envs/") and report.probe["env"]["spec"] == spec.key
        ran = h.exec(env_python, "-c", "import tfccdep, tensorflow; print(tfccdep.__version__)")
        assert ran.stdout.strip() == "2.0"

    # A second provision finds every host ready: nothing resolved, fetched or pushed.
    started = time.monotonic()
    again = provision.provision(cl.load(path))
    assert time.monotonic() - started < 2
    assert [h.stage for h in again.hosts] == [provision.READY] * 2 and again.pushed == 0 and again.fetched == 0
    assert again.ok and again.differs == []


def test_a_start_runs_its_task_in_the_environment(hosts, wheels, tmp_path, capsys):
    """The task of a user's script runs with the environment's Python (where its packages are), the
    environment's bin first on its PATH."""
    script = tmp_path / "code" / "show.py"
    script.parent.mkdir()
    script.write_text("import os, sys, tfccdep\nprint('python', sys.executable, tfccdep.__version__)\n"
                      "print('path', os.environ['PATH'].split(':')[0])\n")
    path = cluster_file(tmp_path, hosts, offline(wheels))
    text = path.read_text().replace('workload = "digits"', f'script = "{script}"\ncapture = false')
    path.write_text(text)
    assert cli.main(["provision", str(path)]) == 0
    assert cli.main(["run", str(path), "--run-id", "in-env"]) == 0
    capsys.readouterr()
    assert cli.main(["logs", "in-env"]) == 0
    out = capsys.readouterr().out
    for h in hosts.hosts:
        assert f"python {h.tfcc_home}/envs/" in out and "/bin/python 2.0" in out
        assert f"path {h.tfcc_home}/envs/" in out


def test_a_host_that_reaches_the_index_downloads_itself_and_one_that_does_not_gets_them_pushed(hosts, wheels,
                                                                                               tmp_path):
    """Each host is asked whether it reaches the index (not assumed): this machine's agent reaches one served on
    127.0.0.1 and downloads the wheels itself; a test host (its own 127.0.0.1, no route out) gets them pushed."""
    h0 = hosts.hosts[0]
    folder = tmp_path / "indexed"
    shutil.copytree(wheels, folder)
    make_wheel(folder, "tfccindexed", "1.0")
    with Index(folder) as index:
        path = cluster_file(tmp_path, hosts, f'packages = ["tfccindexed==1.0"]\nindex = "{index.url}"')
        text = path.read_text().replace(  # this machine, at its address on the test hosts' bridge
            "[[hosts]]", f'[[hosts]]\nname = "here"\nlocal = true\naddress = "{SUBNET}.1"\n\n[[hosts]]', 1)
        text = text.replace(f'[[tasks]]\nhost = "{hosts.hosts[1].name}"', '[[tasks]]\nhost = "here"')
        path.write_text(text)
        report = provision.provision(cl.load(path))
    here, there = report.hosts  # (the other test host runs no task here)
    assert [r.stage for r in report.hosts] == [provision.MADE, provision.MADE], [r.line for r in report.hosts]
    assert there.name == h0.name
    size = sum(w.stat().st_size for w in folder.glob("*.whl") if w.name.split("-")[0] in
               ("tensorflow", "tf_keras", "numpy", "tensorboard", "scikit_learn", "tfccindexed"))
    assert here.downloaded == size and "downloaded by the host itself" in here.line
    assert here.pushed == provision.uv_binary().stat().st_size  # the installer alone: the index has no uv
    assert there.downloaded == 0 and "downloaded" not in there.line
    assert here.packages == there.packages and report.differs == []
    assert any(hit.startswith("/files/") for hit in index.hits)


def test_a_host_whose_disk_is_too_small_says_so_and_the_other_is_made(hosts, wheels, tmp_path):
    h0, h1 = hosts.hosts
    big = tmp_path / "big"
    shutil.copytree(wheels, big)
    make_wheel(big, "tfccbig", "1.0", payload=6 << 20)
    path = cluster_file(tmp_path, hosts, offline(big, '["tfccbig==1.0"]'))
    # h1's home is a small disk (its agent and blobs go there too), mounted where its sshd's sessions see it.
    inside = ["nsenter", "-t", str(h1.sshd.pid), "-m"]
    subprocess.run([*inside, "mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(h1.tfcc_home)], check=True)
    try:
        report = provision.provision(cl.load(path))
    finally:
        subprocess.run([*inside, "umount", "--lazy", str(h1.tfcc_home)], check=True)  # its agent may still close
    first, second = report.hosts
    assert first.stage == provision.MADE and first.packages["tfccbig"] == "1.0"
    assert second.stage == provision.FAILED
    assert " free in " in second.line and "the environment needs" in second.line
    assert second.line.endswith("free space there (or set TFCC_HOME on that host to a larger disk), then make it "
                                "ready again")
    assert second.pushed == 0 and not report.ok


H100 = Path(__file__).resolve().parents[1] / "agent" / "data" / "nvidia-smi" / "h100" / "one_gpu_idle.csv"


def test_a_gpu_host_gets_the_cuda_build_and_says_so_or_one_line_when_its_wheels_are_missing(hosts, tmp_path):
    """h1 has an NVIDIA H100 (its nvidia-smi answers as the recorded one did, driver 580.159.04), h0 none: h1's
    lock asks for TensorFlow's CUDA wheels. With a find_links folder of CPU wheels only, h1 says in one line which
    wheel its platform lacks and what to do, and h0 is made; with the CUDA wheel added, h1 is made with the GPU
    build, its line says which and what its driver meets, and the versions do not differ (CUDA's among GPU hosts)."""
    h0, h1 = hosts.hosts
    folder = tmp_path / "cpu-only"
    console_stack_stand_ins(folder)
    version = importlib.metadata.version("tensorflow")
    make_wheel(folder, "tensorflow", version, ['nvidia-cudnn-cu12==9.3.0.75; extra == "and-cuda"'],
               extras=["and-cuda"])  # as TensorFlow's own wheel says its CUDA extra
    gpu_bin = tmp_path / "gpu-bin"
    gpu_bin.mkdir()
    smi = gpu_bin / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{H100.read_text()}EOF\n")
    smi.chmod(0o755)
    make_wheel(folder, "tfccgpu", "1.0")
    path = cluster_file(tmp_path, hosts, offline(folder, '["tfccgpu==1.0"]'))
    inside = ["nsenter", "-t", str(h1.sshd.pid), "-m"]  # first on its sessions' PATH, in h1 alone
    subprocess.run([*inside, "mount", "--bind", str(gpu_bin), "/usr/local/sbin"], check=True)
    try:
        first = provision.provision(cl.load(path))
        make_wheel(folder, "nvidia-cudnn-cu12", "9.3.0.75")  # the folder changed: its lock is resolved anew
        second = provision.provision(cl.load(path))
    finally:
        subprocess.run([*inside, "umount", "--lazy", "/usr/local/sbin"], check=True)
    cpu, gpu = first.hosts
    assert cpu.stage == provision.MADE and not cpu.gpu
    assert gpu.stage == provision.FAILED and gpu.gpu and gpu.platform.endswith("-cuda")
    assert gpu.line.startswith("no set of wheels for its platform (3.11, x86_64-manylinux_2_"), gpu.line
    assert "nvidia-cudnn-cu12" in gpu.line
    assert gpu.line.endswith("add wheels for that platform to find_links, change the versions in [environment], "
                             "or set python for that host to another Python")
    cpu, gpu = second.hosts
    assert cpu.stage == provision.READY and gpu.stage == provision.MADE, [r.line for r in second.hosts]
    assert gpu.packages["nvidia-cudnn-cu12"] == "9.3.0.75" and "nvidia-cudnn-cu12" not in cpu.packages
    assert "TensorFlow's CUDA 12 wheels (driver 580.159.04 meets 525.60.13 or newer)" in gpu.line
    assert gpu.packages["tensorflow"] == cpu.packages["tensorflow"] == version and second.differs == []


def test_a_host_killed_mid_install_says_so_leaves_nothing_in_use_and_is_made_later(hosts, wheels, tmp_path):
    folder = tmp_path / "many"
    shutil.copytree(wheels, folder)
    make_wheel(folder, "tfccmany", "1.0", files=20000)  # an install that takes its time, as TensorFlow's
    h0, h1 = hosts.hosts
    path = cluster_file(tmp_path, hosts, offline(folder, '["tfccmany==1.0"]'))
    installing = threading.Event()

    def progress(result):
        if result.name == h1.name and result.stage == provision.INSTALLING:
            installing.set()

    job = provision.Provision(cl.load(path), on_progress=progress)
    job.silence = 15  # a host gone without a word (its network too) is given up sooner than a minute
    done: list = []
    worker = threading.Thread(target=lambda: done.append(job.run()))
    worker.start()
    try:
        assert installing.wait(120), "h1 never began to install"
        hosts.remove(h1)  # the machine dies: its sshd, its agent and the installer with it
        worker.join(120)
        assert done, "the provision did not end"
    finally:
        if h1.sshd is None:
            hosts.bring_back(h1)
    first, second = done[0].hosts
    assert first.stage == provision.MADE
    assert second.stage == provision.FAILED
    assert second.line in (f"the connection to {h1.name} was lost while installing; the half-made environment is not "
                           "used: make it ready again when the host answers",  # its sshd's end reached us
                           f"{h1.name} said nothing for 15 s while installing; the half-made environment is not "
                           "used: make it ready again when the host answers")  # its network went first
    spec = envs.spec_of(cl.load(path))
    assert not list((h1.tfcc_home / "envs").glob(f"spec-{spec.key}-*"))  # nothing for a start to find
    again = provision.provision(cl.load(path))
    assert [h.stage for h in again.hosts] == [provision.READY, provision.MADE]
    assert again.hosts[1].packages["tfccmany"] == "1.0"
    assert not [p for p in (h1.tfcc_home / "envs").iterdir() if p.name.endswith((".tmp", ".wheels"))]


def test_a_cancelled_provision_ends_every_hosts_step_and_leaves_nothing_in_use(hosts, wheels, tmp_path):
    folder = tmp_path / "many"
    shutil.copytree(wheels, folder)
    make_wheel(folder, "tfccslow", "1.0", files=20000)
    path = cluster_file(tmp_path, hosts, offline(folder, '["tfccslow==1.0"]'))
    before = {h.name: _made_files(h) for h in hosts.hosts}
    installing = threading.Event()
    job = provision.Provision(cl.load(path), on_progress=lambda r: r.stage == provision.INSTALLING
                              and installing.set())
    done: list = []
    worker = threading.Thread(target=lambda: done.append(job.run()))
    worker.start()
    assert installing.wait(120), "no host began to install"
    job.cancel()
    worker.join(60)
    assert done, "the provision did not end"
    assert {r.stage for r in done[0].hosts} == {provision.CANCELLED}
    assert {r.line for r in done[0].hosts} == {"cancelled: nothing half made is used; make it ready again"}
    spec = envs.spec_of(cl.load(path))
    for h in hosts.hosts:
        assert not list((h.tfcc_home / "envs").glob(f"spec-{spec.key}-*"))
        assert _made_files(h) <= before[h.name], _made_files(h)  # the agent removed what the installer had made


def _made_files(host) -> set:
    folder = host.tfcc_home / "envs"
    return {p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".wheels"))} if folder.exists() else set()


def test_hosts_that_share_a_home_push_each_wheel_once(hosts, wheels, tmp_path):
    """Two hosts whose home is one folder (a shared file system), made ready together: the wheels go once."""
    h0, h1 = hosts.hosts
    folder = tmp_path / "shared"
    shutil.copytree(wheels, folder)
    big = make_wheel(folder, "tfccshared", "1.0", payload=2 << 20)
    path = cluster_file(tmp_path, hosts, offline(folder, '["tfccshared==1.0"]'))
    inside = ["nsenter", "-t", str(h1.sshd.pid), "-m"]
    subprocess.run([*inside, "mount", "--bind", str(h0.tfcc_home), str(h1.tfcc_home)], check=True)
    try:
        report = provision.provision(cl.load(path))
    finally:
        subprocess.run([*inside, "umount", "--lazy", str(h1.tfcc_home)], check=True)  # its agent may still close
    assert [r.stage for r in report.hosts] == [provision.MADE, provision.MADE], [r.line for r in report.hosts]
    assert sorted(r.pushed for r in report.hosts) == [0, big.stat().st_size]


@pytest.mark.slow
def test_the_real_tensorflow_made_ready_air_gapped_then_tfcc_run_trains_digits(hosts, tmp_path, capsys):
    """No [environment]: tfcc's default, this console's TensorFlow stack, fetched once here from PyPI (the hosts
    reach no index), pushed, installed; the Check is then ready with the same versions; digits trains there."""
    path = cluster_file(tmp_path, hosts, None)
    before = checks.check(cl.load(path))
    assert {p.where for p in before.problems if p.remedy == checks.MAKE_READY} == {h.name for h in hosts.hosts}
    assert cli.main(["provision", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ready: every host has the same versions" in out
    after = checks.check(cl.load(path))
    assert after.ready, [str(p) for p in after.problems]
    versions = {(r.probe["tensorflow"], r.probe["tf_keras"]) for r in after.hosts}
    assert len(versions) == 1 and versions.pop()[0].startswith("2.21")
    assert cli.main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "worker-0: finished (exit code 0)" in out and "worker-1: finished (exit code 0)" in out
