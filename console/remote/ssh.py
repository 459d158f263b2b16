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
import fnmatch
import getpass
import binascii
import hashlib
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

from console.errors import TfccError
from console.remote.channel import Channel
from console.remote.transport import (UNSAFE_OWNER, UNSAFE_WRITABLE, CopyBudget, UnsafeHome, copy_first, refuse_past,
                                      same_file, unsafe_home_problem)


CONNECT_TIMEOUT = 10.0
COMMAND_TIMEOUT = 30.0
SFTP_TIMEOUT = 60.0  # seconds an SFTP copy waits for its host's answer before it fails (a host gone mid-copy)
# (hostname, key type, "SHA256:...") -> accept?
AskHostKey = Callable[[str, str, str], bool]


class SSHError(TfccError):
    """Connecting or authenticating failed; the message says what to do.

    ``retry``: whether trying again later can help (a dropped or refused connection can
    come back; a refused host key never does by itself).
    """

    def __init__(self, cause: str, fix: str | None = None, retry: bool = True, timed_out: bool = False):
        super().__init__(cause, fix, timed_out)
        self.retry = retry


@dataclass(frozen=True)
class Jump:
    """One hop of a ProxyJump value: ``[user@]host[:port]`` (``[v6]:port`` for IPv6)."""

    host: str
    user: str = ""
    port: int = 22


def parse_proxy_jump(value: str) -> list[Jump]:
    """ProxyJump as OpenSSH reads it: comma-separated ``[user@]host[:port]`` hops, or ``none``.

    ``ssh://[user@]host[:port]`` URIs are accepted too.
    """
    value = value.strip()
    if not value or value.lower() == "none":
        return []
    hops = []
    for part in value.split(","):
        part = part.strip().removeprefix("ssh://")
        user, _, rest = part.rpartition("@")
        port = 22
        if rest.startswith("["):  # [v6 literal]:port
            host, _, after = rest[1:].partition("]")
            if after.startswith(":"):
                port = after[1:]
        elif rest.count(":") == 1:
            host, port = rest.split(":")
        else:
            host = rest
        try:
            port = int(port)
            if not 1 <= port <= 65535:
                raise ValueError
        except ValueError:
            raise SSHError(f"ProxyJump {value!r} has a bad port in {part!r}",
                           "write each hop as [user@]host[:port], separated by commas", retry=False) from None
        if not host:
            raise SSHError(f"ProxyJump {value!r} has an empty host in {part!r}",
                           "write each hop as [user@]host[:port], separated by commas", retry=False)
        hops.append(Jump(host, user, port))
    return hops


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_path() -> Path:
    return Path(os.environ.get("TFCC_KNOWN_HOSTS") or Path.home() / ".ssh" / "known_hosts")


def ssh_config_path() -> Path:
    return Path(os.environ.get("TFCC_SSH_CONFIG") or Path.home() / ".ssh" / "config")


def system_known_hosts_paths() -> list[Path]:
    """The system-wide known_hosts files OpenSSH reads beside the user's (``TFCC_SYSTEM_KNOWN_HOSTS``: others)."""
    given = os.environ.get("TFCC_SYSTEM_KNOWN_HOSTS")
    if given is not None:
        return [Path(p) for p in given.split(os.pathsep) if p]
    return [Path("/etc/ssh/ssh_known_hosts"), Path("/etc/ssh/ssh_known_hosts2")]


@dataclass
class KnownHosts:
    """One known_hosts file: its keys, and the keys it revokes (``@revoked`` lines: never to be accepted)."""

    keys: paramiko.HostKeys
    revoked: list[tuple[list[str], str]]  # (host patterns, the key's base64)

    def revokes(self, hostname: str, key: paramiko.PKey) -> bool:
        names = {hostname, hostname.rsplit("]:", 1)[0].lstrip("[")}
        return any(blob == key.get_base64() and any(_host_matches(n, pattern) for pattern in patterns
                                                     if not pattern.startswith("!") for n in names)
                   for patterns, blob in self.revoked)


def _host_matches(name: str, pattern: str) -> bool:
    """Whether a known_hosts host pattern names ``name``: a wildcard pattern, or a hashed name (``|1|salt|hash``)."""
    if pattern.startswith("|1|"):
        try:
            return paramiko.HostKeys.hash_host(name, pattern) == pattern
        except (ValueError, TypeError, binascii.Error):
            return False
    return fnmatch.fnmatchcase(name, pattern)


_known_hosts_cache: dict[Path, KnownHosts] = {}
_known_hosts_lock = threading.Lock()


def _read_known_hosts(path: Path) -> KnownHosts:
    """A known_hosts file as OpenSSH reads it; a line it cannot read is skipped (as OpenSSH does)."""
    known = KnownHosts(paramiko.HostKeys(), [])
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return known
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):  # a marker: @revoked keys are kept apart; @cert-authority is not supported
            fields = line.split()
            if fields[0] == "@revoked" and len(fields) >= 4:
                known.revoked.append((fields[1].split(","), fields[3]))
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
        except paramiko.SSHException:
            continue
        if entry is not None:
            for name in entry.hostnames:
                known.keys.add(name, entry.key.get_name(), entry.key)
    return known


def known_hosts(path: Path | None = None) -> KnownHosts:
    """A known_hosts file, parsed once per process (a large file is slow to read)."""
    path = path or known_hosts_path()
    with _known_hosts_lock:
        if path not in _known_hosts_cache:
            _known_hosts_cache[path] = _read_known_hosts(path)
        return _known_hosts_cache[path]


def _remember(path: Path, hostname: str, key: paramiko.PKey) -> None:
    with _known_hosts_lock:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell():
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":  # a last line without its newline would swallow this one
                    f.write(b"\n")
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n".encode())
        _known_hosts_cache.setdefault(path, KnownHosts(paramiko.HostKeys(), [])).keys.add(
            hostname, key.get_name(), key)


class _AskPolicy(paramiko.MissingHostKeyPolicy):
    def __init__(self, ask: AskHostKey | None, path: Path):
        self.ask = ask
        self.path = path

    def missing_host_key(self, client, hostname, key):
        fp = fingerprint(key)
        revoked(self.path, hostname, key)  # a revoked key is refused, never asked about
        if self.ask is None or not self.ask(hostname, key.get_name(), fp):
            raise SSHError(
                f"the host key of {hostname} is not known ({key.get_name()} {fp})",
                f"accept it when asked, or add it to {self.path} after checking the fingerprint", retry=False)
        _remember(self.path, hostname, key)


def revoked(path: Path, hostname: str, key: paramiko.PKey) -> None:
    """Refuse ``key`` of ``hostname`` if the user's or the system's known_hosts revokes it (``@revoked``)."""
    for each in [path, *system_known_hosts_paths()]:
        if known_hosts(each).revokes(hostname, key):
            raise SSHError(f"the host key of {hostname} ({key.get_name()} {fingerprint(key)}) is REVOKED in {each}: "
                           "refusing to connect", f"if the host has a new key, ask its administrator and update "
                           f"{each}", retry=False)


@dataclass
class Target:
    """Where and how to connect, after ~/.ssh/config."""

    hostname: str
    port: int
    user: str | None
    key_files: list[str]
    proxy_jump: str | None
    known_as: str  # the name known_hosts uses: host or [host]:port


def resolve(address: str, user: str = "", port: int = 22, key: str = "", proxy_jump: str | None = None) -> Target:
    """Where to connect for ``address``, after ~/.ssh/config; ``proxy_jump`` overrides the config's."""
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
    return Target(hostname, port, user, key_files, entry.get("proxyjump") if proxy_jump is None else proxy_jump,
                  known_as)


class SSHConnection:
    """One SSH connection to a host, reused for every channel."""

    def __init__(self, address: str, *, user: str = "", port: int = 22, key: str = "",
                 ask: AskHostKey | None = None, timeout: float = CONNECT_TIMEOUT, proxy_jump: str | None = None):
        self.target = resolve(address, user, port, key, proxy_jump)
        self.description = f"the agent on {self.target.known_as}"
        self.ask = ask
        self.timeout = timeout
        self.client: paramiko.SSHClient | None = None
        self._jump: SSHConnection | None = None
        self._lock = threading.Lock()        # one connect at a time
        self._state = threading.Lock()       # held only for a moment: close() never waits for a connect
        self._generation = 0                 # close() counts up: a connect it overtook discards its client

    @property
    def user(self) -> str:
        return self.target.user or getpass.getuser()

    def _jump_sock(self, generation: int):
        """A channel to the target through the ProxyJump hops, or None without them."""
        hops = parse_proxy_jump(self.target.proxy_jump or "")
        if not hops:
            return None
        *before, last = hops  # the last hop talks to the target; it is reached through the others
        chain = ",".join(f"{h.user + '@' if h.user else ''}[{h.host}]:{h.port}" for h in before)
        jump = SSHConnection(last.host, user=last.user, port=last.port, ask=self.ask, timeout=self.timeout,
                             proxy_jump=chain if before else None)
        with self._state:
            if generation != self._generation:
                raise SSHError(f"the connection to {self.target.known_as} was closed while it was being opened")
            old, self._jump = self._jump, jump
        if old is not None:
            old.close()
        try:
            return jump.connect().get_transport().open_channel(
                "direct-tcpip", (self.target.hostname, self.target.port), ("127.0.0.1", 0), timeout=self.timeout)
        except (OSError, paramiko.SSHException) as exc:
            raise SSHError(f"cannot reach {self.target.known_as} through the jump host {last.host} ({exc})",
                           "check the ProxyJump hops and that the jump host can reach this host") from None

    def connect(self) -> paramiko.SSHClient:
        with self._lock:
            with self._state:
                client = self.client
                generation = self._generation
            if client is not None and client.get_transport() and client.get_transport().is_active():
                return client
            t = self.target
            path = known_hosts_path()
            client = paramiko.SSHClient()
            for system in reversed(system_known_hosts_paths()):  # the user's own keys win, as in OpenSSH
                client.get_host_keys().update(known_hosts(system).keys)
            client.get_host_keys().update(known_hosts(path).keys)
            client.set_missing_host_key_policy(_AskPolicy(self.ask, path))
            sock = self._jump_sock(generation)
            try:
                client.connect(t.hostname, port=t.port, username=self.user, key_filename=t.key_files or None,
                               timeout=self.timeout, banner_timeout=self.timeout, auth_timeout=self.timeout,
                               channel_timeout=self.timeout, sock=sock)
            except paramiko.BadHostKeyException as exc:
                client.close()
                raise SSHError(
                    f"the host key of {t.known_as} has CHANGED: known_hosts has {fingerprint(exc.expected_key)}, "
                    f"the host sent {fingerprint(exc.key)}. Refusing to connect: this can be an attack",
                    f"if the host was reinstalled, remove its line from {path} and connect again", retry=False,
                ) from None
            except paramiko.AuthenticationException as exc:
                client.close()
                raise SSHError(f"{t.known_as}: authentication as user {self.user!r} failed ({exc})",
                               f"check the user name and the key (or ssh-agent) for this host; {t.known_as} "
                               f"must accept that key for {self.user!r}") from None
            except (OSError, paramiko.SSHException) as exc:
                client.close()
                if isinstance(exc, SSHError):
                    raise
                # A dropped SYN times out in connect; a host that accepts but never speaks, in the banner.
                timed_out = isinstance(exc, (socket.timeout, TimeoutError)) or "banner" in str(exc)
                reason = "timed out" if timed_out else str(exc) or type(exc).__name__
                raise SSHError(f"cannot connect to {t.known_as} ({reason})",
                               "check that the host is up, that sshd runs there and that its address and "
                               "SSH port are right", timed_out=timed_out) from None
            try:  # a known key that a known_hosts revokes: refused like a changed one
                revoked(path, t.known_as, client.get_transport().get_remote_server_key())
            except SSHError:
                client.close()
                raise
            client.get_transport().set_keepalive(5)
            with self._state:
                if generation != self._generation:  # closed meanwhile: nobody wants this one
                    client.close()
                    raise SSHError(f"the connection to {t.known_as} was closed while it was being opened")
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
        chan, stdin, stdout = self._exec_streams(_start_script(dist_name, python))
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
        if second.startswith(b"tfcc-unsafe "):
            _close_streams(chan, stdin, stdout)
            _, why, folder = (second.decode(errors="replace").rstrip("\n").split(" ", 2) + ["", ""])[:3]
            raise UnsafeHome(*unsafe_home_problem(self.target.known_as, folder or home, why))
        if second.strip() != b"tfcc-agent":
            _close_streams(chan, stdin, stdout)
            return home, None
        return home, self._agent_channel(chan, stdin, stdout)

    def open_agent(self, dist: str, python: str) -> Channel:
        chan, stdin, stdout = self._exec_streams(_agent_command(shlex.quote(dist), python))
        chan.settimeout(self.timeout)
        return self._agent_channel(chan, stdin, stdout)

    def _agent_channel(self, chan, stdin, stdout) -> Channel:
        """The agent's channel, after the line that says where its stderr goes."""
        try:
            line = stdout.readline().decode(errors="replace").rstrip("\n")
        except (socket.timeout, OSError) as exc:
            _close_streams(chan, stdin, stdout)
            raise SSHError(f"{self.target.known_as}: no answer from the shell ({exc})",
                           "check that the host is not overloaded and its login shell starts") from None
        stderr_path = line.removeprefix("tfcc-stderr ") if line.startswith("tfcc-stderr /") else None
        chan.settimeout(None)
        return Channel(stdin, stdout, lambda: _close_streams(chan, stdin, stdout), f"the agent on {self.target.known_as}",
                       (lambda: self._take_tail(stderr_path)) if stderr_path else None)

    def _take_tail(self, path: str) -> str:
        """The end of a file on the host, removed after reading (an agent's stderr)."""
        quoted = shlex.quote(path)
        try:
            code, out, _ = self.run(f"tail -c 4000 {quoted} 2>/dev/null; rm -f {quoted}", timeout=self.timeout)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._dropped(exc) from None
        return out

    def _exec_streams(self, command: str):
        transport = self.connect().get_transport()
        try:
            chan = transport.open_session(timeout=self.timeout)
            chan.exec_command(command)
        except (OSError, EOFError, paramiko.SSHException) as exc:  # the connection dropped meanwhile
            raise self._dropped(exc) from None
        return chan, chan.makefile_stdin("wb"), chan.makefile("rb")

    def files(self) -> "SFTPFiles":
        client = self.connect()
        try:
            sftp = client.open_sftp()
            sftp.get_channel().settimeout(SFTP_TIMEOUT)  # a host gone mid-copy fails the copy, never hangs it
            return SFTPFiles(sftp)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._dropped(exc) from None

    def _dropped(self, exc: BaseException) -> SSHError:
        reason = str(exc) or type(exc).__name__
        return SSHError(f"the SSH connection to {self.target.known_as} failed ({reason})",
                        "check that the host is up and reachable, then try again",
                        timed_out="timeout" in reason.lower())

    def close(self) -> None:
        """Close the connection now; a connect in progress gives up what it opens (nothing waits for it)."""
        with self._state:
            self._generation += 1
            client, self.client = self.client, None
            jump, self._jump = self._jump, None
        if client is not None:
            client.close()
        if jump is not None:
            jump.close()


def _start_script(dist_name: str, python: str) -> str:
    """The shell script of ``start_agent``: tfcc's home on the host, whether it is safe, and the agent started from
    ``dist/<dist_name>`` when that is complete (a home's path may hold spaces or glob characters: every use of it is
    quoted)."""
    start = _agent_command('"$d"', python)
    return (f'h="${{TFCC_HOME:-$HOME/.tfcc}}"; d="$h/dist/{dist_name}"; printf "tfcc-home %s\\n" "$h"; '
            # A home (or dist/) that another user owns or may write in: its code is not run.
            'for x in "$h" "$h/dist"; do [ -e "$x" ] || continue; '
            f'if [ ! -O "$x" ]; then echo "tfcc-unsafe {UNSAFE_OWNER} $x"; exit 0; fi; '
            'if [ -n "$(find "$x" -prune \\( -perm -020 -o -perm -002 \\) 2>/dev/null)" ]; then '
            f'echo "tfcc-unsafe {UNSAFE_WRITABLE} $x"; exit 0; fi; done; '
            f'if [ -f "$d/.complete" ]; then echo tfcc-agent; {start}; '
            'fi; echo tfcc-deploy')


def _agent_command(dist: str, python: str) -> str:
    """Shell words that start the agent in ``dist`` (already quoted: ``shlex.quote``'d, or a double-quoted
    $variable), its stderr kept in a file.

    -S: the agent needs only the standard library; skipping site saves most of the start-up.
    The file is removed by the agent when it ends cleanly, and read by the console when it does not.
    """
    return (f'umask 077 && cd {dist} && e="$(cd ../.. && pwd)/agent-$$.err" && echo "tfcc-stderr $e" && '
            f'TFCC_AGENT_STDERR="$e" exec {shlex.quote(python)} -S -m agent 2>"$e"')


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
            try:
                self.sftp.mkdir(p, mode=0o700)
            except OSError:
                if not self.exists(p):  # not another upload (a host sharing this home) that made it meanwhile
                    raise

    def put(self, local: Path, remote: str, progress=None) -> None:
        """Copy ``local`` to ``remote``; ``progress(bytes so far)`` as it goes (it may raise to end the copy)."""
        self.sftp.put(str(local), remote, callback=(lambda done, _total: progress(done)) if progress else None)

    def get(self, remote: str, local: Path, limit: int) -> int:
        size = self.size(remote)  # a regular file, not a link: its size as listed, and no more, is read
        refuse_past(remote, size, limit)
        return self._get(remote, local, size)

    def size(self, path: str) -> int:
        info = self.sftp.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            raise FileNotFoundError(f"{path} is not a regular file")
        return info.st_size

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

    def get_tree(self, remote: str, local: Path, budget: CopyBudget | None = None) -> int:
        """Copy the folder ``remote`` of the host into ``local``: folders and regular files only (a link
        is not followed), a file that is here already with the same size and time not sent again, each file
        counted in ``budget`` (CopyTooBig past it) and read up to its listed size only.
        How many files were copied; FileNotFoundError when ``remote`` is not there."""
        entries = self.sftp.listdir_attr(remote)
        local.mkdir(parents=True, exist_ok=True)
        copied = 0
        for entry in entries:
            name = entry.filename
            if not name or "/" in name or name in (".", ".."):  # only names inside this folder
                continue
            source, target = f"{remote}/{name}", local / name
            if stat.S_ISDIR(entry.st_mode or 0):
                copied += self.get_tree(source, target, budget)
            elif stat.S_ISREG(entry.st_mode or 0):
                if budget is not None:
                    budget.take(entry.st_size, remote)
                if same_file(target, entry.st_size, entry.st_mtime):
                    continue
                self._get(source, target, entry.st_size or 0)
                os.utime(target, (entry.st_atime or entry.st_mtime, entry.st_mtime))
                copied += 1
        return copied

    def _get(self, source: str, target: Path, size: int) -> int:
        """The first ``size`` bytes of the host's ``source`` into ``target``; the bytes copied."""
        with self.sftp.open(source, "rb") as src, open(target, "wb") as dst:
            src.prefetch(size)
            return copy_first(src, dst, size)

    def close(self) -> None:
        self.sftp.close()
