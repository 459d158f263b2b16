"""Port checks run by the agent on its host: free or held (and by whom), listen, connect.

Standard library only. Listeners exist only while a reachability check runs:
the console asks every host to listen on its task ports, asks every other host
to connect to them, then releases them.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time


def _listening_inodes(port: int) -> set:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def holder(port: int):
    """The process listening on ``port`` on this host, when /proc lets us see it."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in targets:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        command = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
                    return {"pid": int(entry), "command": command}
            except OSError:
                continue
    return {"pid": None, "command": None}  # held, but by a process we may not look at


def check_free(port: int) -> dict:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as exc:
            return {"port": port, "free": False, "error": exc.strerror, "holder": holder(port)}
    return {"port": port, "free": True}


class Listeners:
    """Temporary listeners that accept and close connections, until released or expired."""

    def __init__(self):
        self._socks = {}
        self._lock = threading.Lock()

    def listen(self, ports, seconds: float) -> dict:
        opened, failed = [], {}
        for port in ports:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
                s.listen(64)
            except OSError as exc:
                s.close()
                failed[str(port)] = exc.strerror
                continue
            with self._lock:
                self._socks[port] = s
            threading.Thread(target=self._accept, args=(s,), daemon=True).start()
            opened.append(port)
        timer = threading.Timer(seconds, self.release, args=(opened,))
        timer.daemon = True
        timer.start()
        return {"listening": opened, "failed": failed}

    @staticmethod
    def _accept(s) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            # Let the connecting side close first: TIME_WAIT then stays on its
            # ephemeral port, not on the training port TensorFlow binds next.
            conn.settimeout(2.0)
            try:
                conn.recv(1)
            except OSError:
                pass
            conn.close()

    def release(self, ports=None) -> list:
        with self._lock:
            chosen = list(self._socks) if ports is None else [p for p in ports if p in self._socks]
            socks = [self._socks.pop(p) for p in chosen]
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        return chosen


def connect(host: str, port: int, timeout: float) -> dict:
    t0 = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except socket.timeout:
        return {"host": host, "port": port, "ok": False, "error": "timed out"}
    except OSError as exc:
        reason = {errno.ECONNREFUSED: "refused", errno.EHOSTUNREACH: "no route to host",
                  errno.ENETUNREACH: "network unreachable"}.get(exc.errno, exc.strerror or str(exc))
        return {"host": host, "port": port, "ok": False, "error": reason}
    return {"host": host, "port": port, "ok": True, "ms": (time.monotonic() - t0) * 1000}


def connect_all(targets, timeout: float) -> list:
    """Connect to every (host, port) at once; results in the same order."""
    results = [None] * len(targets)

    def one(i, host, port):
        results[i] = connect(host, port, timeout)

    threads = [threading.Thread(target=one, args=(i, t["host"], int(t["port"])), daemon=True)
               for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    return [r or {"host": t["host"], "port": t["port"], "ok": False, "error": "timed out"}
            for r, t in zip(results, targets)]
