"""Where a cluster's TensorFlow servers can be reached from: public addresses named, with the risk and the fix."""

from __future__ import annotations

import pytest

from console import cluster as cl
from console import exposure
from console.exposure import LINK_LOCAL, LOOPBACK, PRIVATE, PUBLIC, SHARED, address_kind


@pytest.mark.parametrize("ip, kind", [
    ("127.0.0.1", LOOPBACK), ("::1", LOOPBACK), ("10.1.2.3", PRIVATE), ("172.16.0.9", PRIVATE),
    ("192.168.1.1", PRIVATE), ("fd12::1", PRIVATE), ("169.254.10.10", LINK_LOCAL), ("fe80::1%eth0", LINK_LOCAL),
    ("100.64.0.1", SHARED), ("100.127.255.254", SHARED), ("192.0.2.1", PRIVATE),  # documentation: no one's
    ("1.1.1.1", PUBLIC), ("35.201.3.4", PUBLIC), ("100.128.0.1", PUBLIC), ("2001:4860:4860::8888", PUBLIC),
    ("::ffff:8.8.8.8", PUBLIC), ("::ffff:10.0.0.1", PRIVATE),
])
def test_only_an_address_anyone_can_reach_is_public(ip, kind):
    assert address_kind(ip) == kind


def _cluster(*addresses: str, firewall: bool = False) -> cl.Cluster:
    hosts = [cl.Host(name=f"h{i}", address=a) for i, a in enumerate(addresses)]
    tasks = [cl.Task(host=h.name) for h in hosts]
    return cl.Cluster(hosts, tasks, cl.Training(firewall=firewall))


def test_public_tasks_are_named_with_the_risk_and_the_fix(monkeypatch):
    names = {"gpu.example.org": ["35.201.3.4", "10.0.0.7"], "10.0.0.8": ["10.0.0.8"], "1.1.1.1": ["1.1.1.1"]}
    monkeypatch.setattr(exposure, "resolve", lambda host: names.get(host, []))
    cluster = _cluster("gpu.example.org", "10.0.0.8", "1.1.1.1")
    found = exposure.public_tasks(cluster)
    assert [(e.task, e.ip) for e in found] == [("worker-0", "35.201.3.4"), ("worker-2", "1.1.1.1")]
    cause, fix = exposure.exposure_problem(cluster, found)
    assert cause == ("worker-0 (gpu.example.org = 35.201.3.4), worker-2 (1.1.1.1) serve TensorFlow on a public "
                     "address: that server runs the graphs anyone who reaches its port sends it, as the training user")
    assert "set firewall = true in [training]" in fix and "private network" in fix
    assert exposure.exposure_problem(_cluster("10.0.0.8"), []) is None
    # With the firewall, only the cluster's hosts reach the ports: nothing to warn of.
    assert exposure.exposure_problem(_cluster("1.1.1.1", firewall=True), exposure.public_tasks(_cluster("1.1.1.1"))) \
        is None


def test_a_name_is_resolved_for_real_and_an_unknown_one_is_no_error():
    assert exposure.resolve("localhost") and all(address_kind(ip) == LOOPBACK for ip in exposure.resolve("localhost"))
    assert exposure.resolve("[::1]") == ["::1"]
    assert exposure.resolve("no-such-host.invalid") == []


def test_the_lines_that_open_a_port_name_the_peers_only():
    assert exposure.allow_lines(23456, ["10.0.0.2", "fd00::3"]) == [
        "sudo nft add rule inet filter input ip saddr { 10.0.0.2 } tcp dport 23456 accept",
        "sudo nft add rule inet filter input ip6 saddr { fd00::3 } tcp dport 23456 accept",
        "sudo ufw allow from 10.0.0.2 to any port 23456 proto tcp",
        "sudo ufw allow from fd00::3 to any port 23456 proto tcp"]
    cluster = _cluster("10.0.0.1", "10.0.0.2", "[fd00::3]")
    assert exposure.peers_of(cluster, "h0") == ["10.0.0.2", "fd00::3"]
    assert exposure.cluster_addresses(cluster) == ["10.0.0.1", "10.0.0.2", "fd00::3"]


def test_firewall_is_a_setting_of_the_cluster_file(tmp_path):
    path = tmp_path / "c.toml"
    cl.save(_cluster("10.0.0.1", firewall=True), path)
    assert "firewall = true" in path.read_text() and cl.load(path).training.firewall is True
    cl.save(_cluster("10.0.0.1"), path)
    assert "firewall" not in path.read_text()
    path.write_text(path.read_text().replace("[training]", "[training]\nfirewall = \"yes\""))
    with pytest.raises(cl.ClusterFileError, match="training.firewall is 'yes'; it must be a bool"):
        cl.load(path)
