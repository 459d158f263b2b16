"""Fixtures for the console: SSH test hosts in network namespaces."""

from __future__ import annotations

import os

import pytest

from tests.helpers.testhosts import TestHosts, missing_requirements


def _test_hosts(count: int, tmp_path_factory, plain_shell: bool = False):
    problem = missing_requirements()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the SSH tests: {problem}")
        pytest.skip(problem)
    hosts = TestHosts(count, tmp_path_factory.mktemp("hosts"), plain_shell=plain_shell,
                      env={"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}).up()
    yield hosts
    hosts.down()


@pytest.fixture(scope="module")
def ssh_hosts(tmp_path_factory):
    """Two test hosts, each a network namespace with its own sshd (root only)."""
    yield from _test_hosts(2, tmp_path_factory)


@pytest.fixture(scope="module")
def bare_ssh_hosts(tmp_path_factory):
    """Two test hosts as a fresh machine has them: the system's Python alone (no TensorFlow), no route out."""
    yield from _test_hosts(2, tmp_path_factory, plain_shell=True)


@pytest.fixture(scope="module")
def three_ssh_hosts(tmp_path_factory):
    """Three test hosts (an elastic run loses one and takes it back)."""
    yield from _test_hosts(3, tmp_path_factory)


@pytest.fixture
def ssh_env(tmp_path, monkeypatch):
    """No test reads the developer's ~/.ssh: known_hosts and ssh config are the test's own."""
    monkeypatch.setenv("TFCC_KNOWN_HOSTS", str(tmp_path / "known_hosts"))
    monkeypatch.setenv("TFCC_SSH_CONFIG", str(tmp_path / "ssh_config"))
    monkeypatch.setenv("TFCC_SYSTEM_KNOWN_HOSTS", str(tmp_path / "ssh_known_hosts"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "local-home"))
    return tmp_path


@pytest.fixture
def local_homes(tmp_path, monkeypatch):
    """Runs on this machine, in the test's own folders: the agent's home, the console's, and small TensorFlow
    thread pools (two cores)."""
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "2")
    return tmp_path
