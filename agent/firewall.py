"""A run's task ports open to the cluster's hosts only: nftables rules the agent adds and takes away.

Standard library only. With ``firewall = true`` in a cluster file, each task's start asks for a rule set: one
nftables table per task (``tfcc_`` and a hash of its run and task), whose input chain accepts the task's port
from loopback and from the cluster's hosts (resolved here, on this host) and drops it from everyone else. Its
output chain keeps the other users of this host out: a connection to the task's port on any local address, or to
any task of the run (its ``endpoints``, ``host:port``) on the peers, is dropped unless its socket is the training
user's (``meta skuid``: the agent's user, whose processes the tasks are; refused at once, a TCP reset). Each host's table does the same for its
own users, so a user of a peer host reaches no task either; its forward chain drops what this host routes to the
run's tasks (a container's connection). It only ever takes away: a packet another table drops stays dropped. The table goes when the task's supervisor
records its end, and on the next agent start for a task whose supervisor did not live to do it (killed, a
reboot); ``registry()`` (``<tfcc home>/firewall/``) is what was set and not yet taken away.

nft runs as root, or through ``sudo -n`` where this user may run it without a password; ``how()`` says which,
or why neither can.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

NFT_PATHS = ("/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft")
PRIORITY = -5  # before the usual filter chains (0): the drop is said first; an accept here opens nothing


class FirewallError(Exception):
    """The rules could not be set or taken away; the message says why and what to do."""


def _nft() -> str | None:
    found = shutil.which("nft")
    return found or next((p for p in NFT_PATHS if os.access(p, os.X_OK)), None)


def how() -> tuple[list[str] | None, str]:
    """The command that runs nft here (as root, or ``sudo -n``), and a word of how; (None, why not)."""
    nft = _nft()
    if nft is None:
        return None, "nft (nftables) is not installed"
    if os.geteuid() == 0:
        return [nft], "root"
    sudo = shutil.which("sudo")
    if sudo is None:
        return None, "the agent does not run as root and sudo is not installed"
    try:
        done = subprocess.run([sudo, "-n", nft, "list", "tables"], capture_output=True, timeout=10,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"sudo -n nft failed ({exc})"
    if done.returncode != 0:
        return None, "the agent does not run as root and may not run nft with sudo without a password"
    return [sudo, "-n", nft], "sudo"


def table_name(run_id: str, task: str) -> str:
    """A task's table: a name nft takes whatever the run and task are called."""
    return "tfcc_" + hashlib.sha256(f"{run_id}/{task}".encode()).hexdigest()[:16]


def resolve(peers: list) -> list[str]:
    """The addresses of ``peers`` (names or IPs) here; FirewallError for one that has none."""
    addresses = set()
    for peer in peers:
        if not isinstance(peer, str) or not peer or len(peer) > 253:
            raise FirewallError(f"firewall: {peer!r} is no host address")
        try:
            infos = socket.getaddrinfo(peer.strip("[]"), None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as exc:
            raise FirewallError(f"firewall: {peer!r} does not resolve on this host ({exc}); the rules would shut "
                                "it out: give that host an address this one can resolve") from None
        addresses.update(ipaddress.ip_address(info[4][0].split("%", 1)[0]).compressed for info in infos)
    return sorted(addresses)


def resolve_endpoints(endpoints: list) -> list[tuple[str, int]]:
    """The ``(address, port)`` pairs of the run's tasks (``host:port`` each) as this host resolves them."""
    pairs = set()
    for endpoint in endpoints:
        if not isinstance(endpoint, str) or ":" not in endpoint:
            raise FirewallError(f"firewall: {endpoint!r} is no host:port")
        host, _, port = endpoint.rpartition(":")
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise FirewallError(f"firewall: {endpoint!r} has no TCP port")
        pairs.update((address, int(port)) for address in resolve([host]))
    return sorted(pairs)


def ruleset(table: str, port: int, addresses: list[str], endpoints: list[tuple[str, int]] = (),
            uid: int | None = None) -> str:
    """The nft script that (re)makes ``table``: ``port`` from loopback and ``addresses`` only; with ``uid``, the
    local connections to ``port`` and to the run's ``endpoints`` from that user's sockets only, and nothing this
    host forwards to them."""
    v4 = [a for a in addresses if ":" not in a]
    v6 = [a for a in addresses if ":" in a]
    lines = [f"table inet {table}", f"delete table inet {table}", f"table inet {table} {{", "  chain input {",
             f"    type filter hook input priority {PRIORITY}; policy accept;",
             f"    iifname \"lo\" tcp dport {port} accept"]
    if v4:
        lines.append(f"    ip saddr {{ {', '.join(v4)} }} tcp dport {port} accept")
    if v6:
        lines.append(f"    ip6 saddr {{ {', '.join(v6)} }} tcp dport {port} accept")
    lines += [f"    tcp dport {port} drop", "  }"]
    if uid is not None:
        pairs4 = ", ".join(f"{a} . {p}" for a, p in endpoints if ":" not in a)
        pairs6 = ", ".join(f"{a} . {p}" for a, p in endpoints if ":" in a)
        lines += ["  chain output {", f"    type filter hook output priority {PRIORITY}; policy accept;",
                  f"    fib daddr type local tcp dport {port} meta skuid != {uid} reject with tcp reset"]
        if pairs4:
            lines.append(f"    ip daddr . tcp dport {{ {pairs4} }} meta skuid != {uid} reject with tcp reset")
        if pairs6:
            lines.append(f"    ip6 daddr . tcp dport {{ {pairs6} }} meta skuid != {uid} reject with tcp reset")
        lines.append("  }")
        if pairs4 or pairs6:
            lines += ["  chain forward {", f"    type filter hook forward priority {PRIORITY}; policy accept;"]
            if pairs4:
                lines.append(f"    ip daddr . tcp dport {{ {pairs4} }} drop")
            if pairs6:
                lines.append(f"    ip6 daddr . tcp dport {{ {pairs6} }} drop")
            lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def registry(home: Path) -> Path:
    return home / "firewall"


def _run(command: list[str], script: str) -> None:
    try:
        done = subprocess.run([*command, "-f", "-"], input=script.encode(), capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FirewallError(f"nft failed: {exc}") from None
    if done.returncode != 0:
        words = done.stderr.decode(errors="replace").strip().splitlines()
        raise FirewallError(f"nft refused the rules: {words[0] if words else f'exit code {done.returncode}'}")


def allow_only(home: Path, run_id: str, task: str, port, peers: list, endpoints: list | None = None) -> dict:
    """Set ``task``'s table: its ``port`` from loopback and ``peers`` only, and it and the run's ``endpoints``
    (``host:port``) from this user's sockets only on this host. What was set (kept in the registry until
    ``remove``). FirewallError when it cannot be."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise FirewallError(f"firewall: the port {port!r} is no TCP port")
    command, word = how()
    if command is None:
        raise FirewallError(f"firewall = true, but this host cannot set nftables rules ({word}); log in as root "
                            "there, let this user run nft with sudo without a password, or set firewall = false and "
                            "allow the task ports from the cluster's hosts only yourself")
    addresses = resolve(peers)
    pairs = resolve_endpoints(endpoints or [])
    uid = os.getuid()  # the tasks' user: the agent starts them as itself
    table = table_name(run_id, task)
    entry = {"table": table, "run_id": run_id, "task": task, "port": port, "addresses": addresses, "how": word,
             "endpoints": [f"{a}:{p}" for a, p in pairs], "uid": uid}
    folder = registry(home)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{table}.json").write_text(json.dumps(entry), encoding="utf-8")  # before: a crash leaves a note
    _run(command, ruleset(table, port, addresses, pairs, uid))
    return entry


def remove(home: Path, table: str) -> bool:
    """Take a table away and forget it; whether it was there to take (no error when it was not)."""
    command, _ = how()
    if command is None:
        return False  # kept in the registry: a later sweep (as root again, say) takes it away
    try:
        _run(command, f"table inet {table}\ndelete table inet {table}\n")
    except FirewallError:
        return False
    (registry(home) / f"{table}.json").unlink(missing_ok=True)
    return True


def sweep(home: Path, running, started, settle: float = 60.0) -> list[str]:
    """Take away the tables of tasks that no longer run (``running(run_id, task)`` says): a supervisor that
    did not live to do it. A task not ``started(run_id, task)`` yet whose note is younger than ``settle`` seconds
    is left (another agent may be starting it). The tables taken away."""
    folder = registry(home)
    if not folder.is_dir():
        return []
    gone = []
    for note in sorted(folder.glob("tfcc_*.json")):
        try:
            young = time.time() - note.stat().st_mtime < settle
            entry = json.loads(note.read_text(encoding="utf-8"))
            run_id, task, table = entry["run_id"], entry["task"], entry["table"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a note being written, or not tfcc's: left alone
        if table != note.stem or running(run_id, task) or (young and not started(run_id, task)):
            continue
        if remove(home, table):
            gone.append(table)
    return gone
