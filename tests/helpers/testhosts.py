"""Test hosts: network namespaces on a bridge, each with its own OpenSSH sshd.

Each host ``tfcch<i>`` gets the address 10.213.0.<10+i> on the bridge
``tfccbr0`` (this machine is 10.213.0.1), a generated host key, and an sshd that
lets root in with the suite's own client key. The namespaces share this
machine's file system; each host's sshd sets its own ``TFCC_HOME`` so their run
folders stay apart. Needs root, iproute2 and openssh-server.

That is test network 0. A pytest-xdist worker ``gw<n>`` uses network n of its own: hosts ``tfcc<n>h<i>`` at
10.<213+n>.0.<10+i> on the bridge ``tfccbr<n>`` (``NETWORK``), so the workers' tests never meet.

By hand:  python -m tests.helpers.testhosts up 2 /tmp/tfcc-hosts   (prints the hosts)
          python -m tests.helpers.testhosts down 2
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path



def _network() -> int:
    """This process's test network: its pytest-xdist worker's number (gw1: 1), else 0."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


NETWORK = _network()
BRIDGE = f"tfccbr{NETWORK}"
SUBNET = f"10.{213 + NETWORK}.0"
HOST_NAME = "tfcch" if NETWORK == 0 else f"tfcc{NETWORK}h"  # a host's name (its namespace's) ends with its index
VETH = "tfccv" if NETWORK == 0 else f"tfcc{NETWORK}v"       # a host's link: VETH<i> here, VETH<i>p in the host
SSHD = "/usr/sbin/sshd"
# Root's tools (ip, nft) live in the sbin folders, which a plain user's PATH (and CI's) may lack.
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/local/sbin", "/usr/sbin", "/sbin"])


def tool(name: str) -> str | None:
    """Where root's tool ``name`` is, the sbin folders included; None if it is not installed."""
    return shutil.which(name, path=SBIN_PATH)


def run_tool(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``argv`` with the sbin folders on its PATH (``ip netns exec`` looks its command up there)."""
    return subprocess.run(argv, env={**os.environ, "PATH": SBIN_PATH}, **kwargs)


def missing_requirements() -> str | None:
    if os.geteuid() != 0:
        return "test hosts need root (ip netns)"
    for name in ("ip", "ssh-keygen"):
        if tool(name) is None:
            return f"test hosts need {name} (apt-get install iproute2 openssh-server)"
    if not os.path.exists(SSHD):
        return "test hosts need sshd (apt-get install openssh-server)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_tool(["ip", *args], capture_output=True, text=True, check=check)


@dataclass
class TestHost:
    index: int
    folder: Path
    sshd: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.name = f"{HOST_NAME}{self.index}"  # also its network namespace
        self.address = f"{SUBNET}.{10 + self.index}"
        self.veth = f"{VETH}{self.index}"  # this machine's end of its link; the host's is veth + "p"
        self.host_key = self.folder / "host_key"
        self.tfcc_home = self.folder / "tfcc-home"

    def host_key_line(self) -> str:
        kind, data = Path(str(self.host_key) + ".pub").read_text().split()[:2]
        return f"{self.address} {kind} {data}"

    def exec(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return run_tool(["ip", "netns", "exec", self.name, *argv], capture_output=True, text=True, check=check)


class TestHosts:
    def __init__(self, count: int, workdir: Path, env: dict[str, str] | None = None, plain_shell: bool = False):
        """``plain_shell``: logins skip this machine's own ~/.bashrc (here it runs ``pyenv init``,
        about 0.15 CPU-seconds per SSH command), as on a freshly installed host."""
        self.workdir = Path(workdir)
        self.plain_shell = plain_shell
        self.hosts = [TestHost(i, self.workdir / f"h{i}") for i in range(count)]
        self.client_key = self.workdir / "client_key"
        self.env = env or {}

    def up(self) -> "TestHosts":
        self.down()  # what an interrupted run left
        self.workdir.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        if not self.client_key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key)], check=True)
        authorized = self.workdir / "authorized_keys"
        authorized.write_text(Path(str(self.client_key) + ".pub").read_text())
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for host in self.hosts:
            self._make(host, authorized)
        for host in self.hosts:
            self.wait_for_ssh(host)
        return self

    def _make(self, host: TestHost, authorized: Path, new_key: bool = True) -> None:
        host.folder.mkdir(parents=True, exist_ok=True)
        host.tfcc_home.mkdir(exist_ok=True)
        _ip("netns", "add", host.name)
        veth = host.veth
        _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
        _ip("link", "set", f"{veth}p", "netns", host.name)
        _ip("link", "set", veth, "master", BRIDGE, "up")
        _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", f"{veth}p")
        _ip("-n", host.name, "link", "set", f"{veth}p", "up")
        _ip("-n", host.name, "link", "set", "lo", "up")
        if new_key:
            self.new_host_key(host)
        self.start_sshd(host, authorized)

    def new_host_key(self, host: TestHost) -> None:
        for path in (host.host_key, Path(str(host.host_key) + ".pub")):
            path.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host.host_key)], check=True)

    def start_sshd(self, host: TestHost, authorized: Path | None = None) -> None:
        authorized = authorized or self.workdir / "authorized_keys"
        env = " ".join(f"{k}={v}" for k, v in {"TFCC_HOME": str(host.tfcc_home), **self.env}.items())
        config = host.folder / "sshd_config"
        config.write_text(
            f"Port 22\nListenAddress {host.address}\nHostKey {host.host_key}\nPidFile none\n"
            f"AuthorizedKeysFile {authorized}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nSubsystem sftp internal-sftp\n"
            f"SetEnv {env}\nLogLevel ERROR\n"
        )
        argv = [SSHD, "-D", "-e", "-f", str(config)]
        bashrc = Path.home() / ".bashrc"
        if self.plain_shell and bashrc.exists():
            # `ip netns exec` gives the command its own mount namespace: the bind mount stays in there.
            empty = self.workdir / "plain_bashrc"
            empty.touch()
            argv = ["sh", "-c", f'mount --bind "{empty}" "{bashrc}" && exec "$@"', "sh", *argv]
        host.sshd = subprocess.Popen(["ip", "netns", "exec", host.name, *argv],
                                     env={**os.environ, "PATH": SBIN_PATH},
                                     stdout=subprocess.DEVNULL, stderr=open(host.folder / "sshd.log", "ab"))

    def cut_sessions(self, host: TestHost) -> None:
        """End every SSH session of this host (the namespaces share one PID space: only its sshd's children)."""
        if host.sshd is not None:
            subprocess.run(["pkill", "-KILL", "-P", str(host.sshd.pid)], check=False)

    def stop_sshd(self, host: TestHost) -> None:
        """Stop the host's sshd and every SSH session it started."""
        self.cut_sessions(host)
        if host.sshd is not None:
            host.sshd.terminate()
            host.sshd.wait(timeout=10)
            host.sshd = None

    def wait_for_ssh(self, host: TestHost, timeout: float = 20.0) -> None:
        """Wait until the host's sshd accepts connections (polled, with a deadline)."""
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        while True:
            try:
                with socket.create_connection((host.address, 22), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd on {host.address} did not start: "
                                       f"{(host.folder / 'sshd.log').read_text(errors='replace')[-2000:]}")
                if host.sshd is not None and host.sshd.poll() is not None:
                    raise RuntimeError(f"sshd on {host.address} exited: "
                                       f"{(host.folder / 'sshd.log').read_text(errors='replace')[-2000:]}")
                pause.wait(0.05)

    def remove(self, host: TestHost) -> None:
        """The host gone for good, as a machine that died: its sshd, its tasks and agents killed, its namespace
        and link deleted (its address answers nothing). Its folder stays (``bring_back`` uses it)."""
        if host.sshd is not None:
            host.sshd.kill()
            host.sshd.wait()
            host.sshd = None
        for pid in _ip("netns", "pids", host.name, check=False).stdout.split():
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, ValueError):
                pass
        _ip("netns", "del", host.name, check=False)
        _ip("link", "del", host.veth, check=False)

    def bring_back(self, host: TestHost) -> None:
        """A removed host up again, at its address, with its host key and its folders (a rebooted machine). A host
        whose network did not come up (seen rarely on a busy machine, right after a removal) is made once more."""
        for tries_left in (1, 0):
            self._make(host, self.workdir / "authorized_keys", new_key=False)  # a console that knew its key trusts it
            try:
                self.wait_for_ssh(host)
                return
            except RuntimeError:
                if not tries_left:
                    raise
                self.remove(host)

    def known_hosts(self, path: Path) -> Path:
        path.write_text("".join(h.host_key_line() + "\n" for h in self.hosts))
        return path

    def down(self) -> None:
        for host in self.hosts:
            self.remove(host)  # whatever still runs in the namespace (tasks, agents) goes with it
        _ip("link", "del", BRIDGE, check=False)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("up", "down"):
        print(__doc__)
        return 2
    count = int(argv[2])
    hosts = TestHosts(count, Path(argv[3] if len(argv) > 3 else "/tmp/tfcc-hosts"))
    if argv[1] == "down":
        hosts.down()
        return 0
    problem = missing_requirements()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    hosts.up()
    for h in hosts.hosts:
        h.sshd = None  # leave them running for the developer
        print(f"{h.name}: ssh -i {hosts.client_key} root@{h.address}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
