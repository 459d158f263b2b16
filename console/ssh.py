"""SSH transport (paramiko): one connection per host, agent channels, SFTP deployment.

Honours ``~/.ssh/config`` (HostName, User, Port, IdentityFile, ProxyJump)
through paramiko's own parser, ssh-agent and key files. Host keys are always
verified against known_hosts (loaded once per process): an unknown key goes to
a callback that sees its fingerprint (the CLI asks, the GUI shows a dialog)
and is remembered when accepted, like OpenSSH's accept-new; a changed key is
refused with both fingerprints. Unknown keys are never added without a yes.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import posixpath
import shlex
import socket
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import paramiko

from console.agent_client import Channel

log = logging.getLogger("console.ssh")

CONNECT_TIMEOUT = 10.0
COMMAND_TIMEOUT = 30.0
# (hostname, key type, "SHA256:...") -> accept?
AskHostKey = Callable[[str, str, str], bool]


class SSHError(Exception):
    """Connecting or authenticating failed; the message says what to do."""


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_path() -> Path:
    return Path(os.environ.get("TFCC_KNOWN_HOSTS") or Path.home() / ".ssh" / "known_hosts")


def ssh_config_path() -> Path:
    return Path(os.environ.get("TFCC_SSH_CONFIG") or Path.home() / ".ssh" / "config")


_known_hosts_cache: dict[Path, paramiko.HostKeys] = {}
_known_hosts_lock = threading.Lock()


def known_hosts(path: Path | None = None) -> paramiko.HostKeys:
    """known_hosts, parsed once per process (a large file is slow to read)."""
    path = path or known_hosts_path()
    with _known_hosts_lock:
        if path not in _known_hosts_cache:
            keys = paramiko.HostKeys()
            if path.exists():
                keys.load(str(path))
            _known_hosts_cache[path] = keys
        return _known_hosts_cache[path]


def _remember(path: Path, hostname: str, key: paramiko.PKey) -> None:
    with _known_hosts_lock:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        _known_hosts_cache.setdefault(path, paramiko.HostKeys()).add(hostname, key.get_name(), key)


class _AskPolicy(paramiko.MissingHostKeyPolicy):
    def __init__(self, ask: AskHostKey | None, path: Path):
        self.ask = ask
        self.path = path

    def missing_host_key(self, client, hostname, key):
        fp = fingerprint(key)
        if self.ask is None or not self.ask(hostname, key.get_name(), fp):
            raise SSHError(
                f"the host key of {hostname} is not known ({key.get_name()} {fp}); "
                f"accept it when asked, or add it to {self.path} after checking the fingerprint"
            )
        _remember(self.path, hostname, key)


@dataclass
class Target:
    """Where and how to connect, after ~/.ssh/config."""

    hostname: str
    port: int
    user: str | None
    key_files: list[str]
    proxy_jump: str | None
    known_as: str  # the name known_hosts uses: host or [host]:port


def resolve(address: str, user: str = "", port: int = 22, key: str = "") -> Target:
    config = paramiko.SSHConfig()
    path = ssh_config_path()
    if path.exists():
        config = paramiko.SSHConfig.from_path(str(path))
    entry = config.lookup(address)
    hostname = entry.get("hostname", address)
    port = int(entry.get("port", port)) if port == 22 else port
    user = user or entry.get("user") or None
    key_files = [os.path.expanduser(key)] if key else [os.path.expanduser(k) for k in entry.get("identityfile", [])]
    known_as = hostname if port == 22 else f"[{hostname}]:{port}"
    return Target(hostname, port, user, key_files, entry.get("proxyjump"), known_as)


class SSHConnection:
    """One SSH connection to a host, reused for every channel."""

    def __init__(self, address: str, *, user: str = "", port: int = 22, key: str = "",
                 ask: AskHostKey | None = None, timeout: float = CONNECT_TIMEOUT):
        self.target = resolve(address, user, port, key)
        self.ask = ask
        self.timeout = timeout
        self.client: paramiko.SSHClient | None = None
        self._jump: SSHConnection | None = None
        self._lock = threading.Lock()

    def connect(self) -> paramiko.SSHClient:
        with self._lock:
            if self.client is not None and self.client.get_transport() and self.client.get_transport().is_active():
                return self.client
            t = self.target
            path = known_hosts_path()
            client = paramiko.SSHClient()
            client.get_host_keys().update(known_hosts(path))
            client.set_missing_host_key_policy(_AskPolicy(self.ask, path))
            sock = None
            if t.proxy_jump:
                self._jump = SSHConnection(t.proxy_jump, ask=self.ask, timeout=self.timeout)
                sock = self._jump.connect().get_transport().open_channel(
                    "direct-tcpip", (t.hostname, t.port), ("127.0.0.1", 0), timeout=self.timeout)
            try:
                client.connect(t.hostname, port=t.port, username=t.user, key_filename=t.key_files or None,
                               timeout=self.timeout, banner_timeout=self.timeout, auth_timeout=self.timeout,
                               channel_timeout=self.timeout, sock=sock)
            except paramiko.BadHostKeyException as exc:
                raise SSHError(
                    f"the host key of {t.known_as} has CHANGED: known_hosts has {fingerprint(exc.expected_key)}, "
                    f"the host sent {fingerprint(exc.key)}. Refusing to connect: this can be an attack. If the "
                    f"host was reinstalled, remove its line from {path} and connect again"
                ) from None
            except paramiko.AuthenticationException as exc:
                raise SSHError(f"{t.known_as}: authentication failed ({exc}); check the user and key "
                               "(or ssh-agent) for this host") from None
            except (OSError, paramiko.SSHException) as exc:
                if isinstance(exc, SSHError):
                    raise
                raise SSHError(f"cannot connect to {t.known_as}: {exc}") from None
            client.get_transport().set_keepalive(5)
            self.client = client
            return client

    def run(self, command: str, timeout: float = COMMAND_TIMEOUT) -> tuple[int, str, str]:
        client = self.connect()
        stdin, out, err = client.exec_command(command, timeout=timeout)
        code = out.channel.recv_exit_status()
        result = code, out.read().decode(errors="replace"), err.read().decode(errors="replace")
        _close_streams(out.channel, stdin, out, err)
        return result

    def start_agent(self, dist_name: str, python: str) -> tuple[str, Channel | None]:
        """In one exec (one run of the user's shell, which can cost 100+ ms with conda or pyenv
        set up in its rc file): find tfcc's home on the host and, when ``dist/<dist_name>`` is
        complete there, start the agent from it.

        Returns (home, the agent's channel), or (home, None) when the code must be deployed first.
        """
        script = (f'h="${{TFCC_HOME:-$HOME/.tfcc}}"; d="$h/dist/{dist_name}"; printf "tfcc-home %s\\n" "$h"; '
                  f'if [ -f "$d/.complete" ]; then echo tfcc-agent; cd "$d" && exec {shlex.quote(python)} -S -m agent; '
                  'fi; echo tfcc-deploy')
        chan, stdin, stdout = self._exec_streams(script)
        chan.settimeout(self.timeout)
        try:
            first, second = stdout.readline(), stdout.readline()
        except (socket.timeout, OSError) as exc:
            _close_streams(chan, stdin, stdout)
            raise SSHError(f"{self.target.known_as}: no answer from the shell ({exc})") from None
        home = first.decode(errors="replace").rstrip("\n").removeprefix("tfcc-home ")
        if not first.startswith(b"tfcc-home ") or not home.startswith("/"):
            _close_streams(chan, stdin, stdout)
            raise SSHError(f"{self.target.known_as}: cannot find the home folder for tfcc (the shell said "
                           f"{first[:200]!r}); check the login shell's start-up files")
        if second.strip() != b"tfcc-agent":
            _close_streams(chan, stdin, stdout)
            return home, None
        chan.settimeout(None)
        return home, Channel(stdin, stdout, lambda: _close_streams(chan, stdin, stdout),
                             f"agent on {self.target.known_as}")

    def open_agent_channel(self, dist: str, python: str) -> Channel:
        # -S: the agent needs only the standard library; skipping site saves most of the start-up.
        chan, stdin, stdout = self._exec_streams(f"cd {shlex.quote(dist)} && exec {shlex.quote(python)} -S -m agent")
        return Channel(stdin, stdout, lambda: _close_streams(chan, stdin, stdout), f"agent on {self.target.known_as}")

    def _exec_streams(self, command: str):
        transport = self.connect().get_transport()
        chan = transport.open_session(timeout=self.timeout)
        chan.exec_command(command)
        return chan, chan.makefile_stdin("wb"), chan.makefile("rb")

    def sftp(self) -> "SFTPFiles":
        return SFTPFiles(self.connect().open_sftp())

    def close(self) -> None:
        with self._lock:
            if self.client is not None:
                self.client.close()
                self.client = None
            if self._jump is not None:
                self._jump.close()


def _close_streams(chan, *streams) -> None:
    """Close a channel's file objects, then the channel, for good.

    paramiko's file objects flush again when garbage-collected; at interpreter exit their
    buffers can already be gone, which printed "Exception ignored ... I/O operation on closed
    file". A closed stream here has nothing left to flush, so its later flushes do nothing.
    """
    for stream in streams:
        try:
            stream.close()
        except (OSError, ValueError, EOFError):
            pass
        stream.flush = _nothing
    try:
        chan.close()
    except Exception:
        pass


def _nothing() -> None:
    pass


class SFTPFiles:
    """deploy()'s file operations over SFTP."""

    def __init__(self, sftp: paramiko.SFTPClient):
        self.sftp = sftp

    def exists(self, path: str) -> bool:
        try:
            self.sftp.stat(path)
            return True
        except FileNotFoundError:
            return False

    def makedirs(self, path: str) -> None:
        parts = []
        while path and path != "/" and not self.exists(path):
            parts.append(path)
            path = posixpath.dirname(path)
        for p in reversed(parts):
            self.sftp.mkdir(p)

    def put(self, local: Path, remote: str) -> None:
        self.sftp.put(str(local), remote)

    def rename(self, src: str, dst: str) -> None:
        self.sftp.posix_rename(src, dst)

    def remove_tree(self, path: str) -> None:
        try:
            entries = self.sftp.listdir_attr(path)
        except FileNotFoundError:
            return
        for entry in entries:
            child = f"{path}/{entry.filename}"
            if stat.S_ISDIR(entry.st_mode):
                self.remove_tree(child)
            else:
                self.sftp.remove(child)
        self.sftp.rmdir(path)

    def close(self) -> None:
        self.sftp.close()
