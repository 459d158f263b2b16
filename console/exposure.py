"""Where a cluster's TensorFlow servers can be reached from, in words (Qt-free).

Every task of a run serves TensorFlow's gRPC on its port, bound to every address of its host, for the whole
run. TensorFlow's SECURITY.md: such a server "accepts connections from anywhere, and executes the graphs it is
sent": whoever reaches the port runs code as the training user. ``public_tasks`` resolves each task's address
and names those on a public one (not loopback, private, link-local or shared address space); ``exposure_problem``
says the risk and the fix; ``allow_lines`` are the firewall lines that open a port to the cluster's hosts only.
docs/security.md has the whole picture.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from console import cluster as cl

LOOPBACK, PRIVATE, LINK_LOCAL, SHARED, PUBLIC = "loopback", "private", "link-local", "shared", "public"
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598): no one outside reaches it


def address_kind(ip: str) -> str:
    """Which kind of address ``ip`` is: only ``PUBLIC`` ones can be reached from anywhere."""
    address = ipaddress.ip_address(ip.split("%", 1)[0])
    if getattr(address, "ipv4_mapped", None):
        address = address.ipv4_mapped
    if address.is_loopback:
        return LOOPBACK
    if address.is_link_local:
        return LINK_LOCAL
    if address.version == 4 and address in _SHARED:
        return SHARED
    if address.is_private or not address.is_global:  # RFC 1918, fc00::/7, documentation and reserved ranges
        return PRIVATE
    return PUBLIC


def resolve(host: str) -> list[str]:
    """The addresses ``host`` (a name or an IP, brackets allowed) has here; [] when it has none."""
    host = host.strip("[]")
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})
    except (OSError, UnicodeError):
        return []


@dataclass
class Exposed:
    task: str       # the task's name
    host: str       # its host, by name
    address: str    # the host part of its TensorFlow address (as TF_CONFIG has it)
    ip: str         # the public address it resolves to


def public_tasks(cluster: cl.Cluster) -> list[Exposed]:
    """The tasks whose TensorFlow address is (or resolves to) a public one, each once per address."""
    found, seen = [], {}
    for name, task in zip(cluster.task_names(), cluster.tasks):
        if not task.in_cluster:
            continue  # an evaluator serves nothing
        host = cluster.host(task.host).tf_host
        if host not in seen:
            seen[host] = [ip for ip in resolve(host) if address_kind(ip) == PUBLIC]
        found += [Exposed(name, task.host, host, ip) for ip in seen[host]]
    return found


def exposure_problem(cluster: cl.Cluster, exposed: list[Exposed]) -> tuple[str, str] | None:
    """The cause and the fix for ``exposed`` tasks, or None for none."""
    if not exposed or cluster.training.firewall:
        return None  # with the firewall, the agents admit only the cluster's hosts to the task ports
    named = ", ".join(dict.fromkeys(f"{e.task} ({e.address} = {e.ip})" if e.address.strip("[]") != e.ip
                                    else f"{e.task} ({e.ip})" for e in exposed))
    cause = (f"{named} serve{'s' * (len(exposed) == 1)} TensorFlow on a public address: that server runs the graphs "
             "anyone who reaches its port sends it, as the training user")
    fix = ("give the hosts private addresses (a private network or VPN between them), or set firewall = true in "
           "[training] (the agents then admit only the cluster's hosts to the task ports), or allow the ports from "
           "the other hosts only yourself (docs/security.md)")
    return cause, fix


def cluster_addresses(cluster: cl.Cluster) -> list[str]:
    """The addresses of the cluster's hosts with tasks, as TF_CONFIG names them (no brackets): those the
    agents' firewall admits to the task ports."""
    used = {t.host for t in cluster.tasks}
    return list(dict.fromkeys(h.tf_host.strip("[]") for h in cluster.hosts if h.name in used))


def peers_of(cluster: cl.Cluster, host: str) -> list[str]:
    """The addresses of the cluster's other hosts with tasks, as the cluster file gives them."""
    used = {t.host for t in cluster.tasks}
    return [h.tf_host.strip("[]") for h in cluster.hosts if h.name in used and h.name != host]


def allow_lines(port: int, peers: list[str]) -> list[str]:
    """The nftables and ufw lines that let ``peers`` (and no one else they do not already let) reach ``port``."""
    if not peers:
        return []
    v6 = [p for p in peers if ":" in p]
    v4 = [p for p in peers if ":" not in p]
    lines = []
    for family, group in (("ip", v4), ("ip6", v6)):
        if group:
            lines.append(f"sudo nft add rule inet filter input {family} saddr {{ {', '.join(group)} }} "
                         f"tcp dport {port} accept")
    lines += [f"sudo ufw allow from {peer} to any port {port} proto tcp" for peer in peers]
    return lines
