"""The console's link to one host's agent, whatever the transport (Qt-free)."""

from __future__ import annotations

import threading

from agent.protocol import MISSING_BLOBS
from console import cluster as cl
from console.errors import TfccError
from console.remote.channel import AgentClient, AgentTimeout, ChannelClosed, last_words
from console.remote.deploy import deploy, make_bundle, upload_blobs
from console.remote.local import LocalTransport
from console.remote.ssh import SSHConnection
from console.remote.transport import Transport

CONNECT_TIMEOUT = 10.0    # each step of reaching a host's agent (an SSH connect, the agent's first answer)


class HostError(TfccError):
    """A host's agent cannot be reached or started; the message says what to do."""


class HostLink:
    """The console's connection to one host's agent, over the host's ``Transport``.

    ``timeout`` bounds each step of connecting (the SSH connect, the agent's first answer),
    so a check's deadline holds.
    """

    def __init__(self, host: cl.Host, ask_host_key=None, timeout: float = CONNECT_TIMEOUT):
        self.host = host
        self.timeout = timeout
        if host.local:
            self.transport: Transport = LocalTransport()
        else:
            self.transport = SSHConnection(host.address, user=host.user, port=host.port, key=host.key,
                                           ask=ask_host_key, timeout=timeout)
        self.home: str | None = None
        self.dist: str | None = None
        self.client: AgentClient | None = None
        self.lock = threading.Lock()     # one connect at a time
        self.stage = "connecting"        # how far the last connect got (a check names it when time runs out)
        self._state = threading.Lock()   # held only for a moment: closing never waits for a connect
        self._generation = 0             # drop() counts up: a connect it overtook closes what it opened

    def connect(self, bundle=None, on_progress=None) -> AgentClient:
        """The agent on this host, started (and the code deployed) if need be.

        ``on_progress(sent, total)`` follows a deploy's upload in bytes.
        """
        with self.lock:
            with self._state:
                client = self.client
                generation = self._generation
            if client is not None and not client.closed.is_set():
                return client
            bundle = bundle or make_bundle()
            self.stage = "connecting"
            self.transport.connect()
            self.stage = "starting the agent"
            python = self.host.interpreter

            def started(how, *args):
                try:
                    return how(*args)
                except OSError as exc:  # this machine could not run the interpreter at all
                    raise HostError(f"host {self.host.name}: the agent did not start with {python!r} "
                                    f"({exc.strerror or exc})",
                                    "set python in the host's entry to a Python 3.9+ interpreter") from None

            if self.dist is not None:
                channel = started(self.transport.open_agent, self.dist, python)
            else:
                # One step finds the home and, when the code is already there, starts the agent.
                home, channel = started(self.transport.start_agent, bundle.name, python)
                self.home = home
                if channel is None:
                    self.stage = "deploying"
                    dist = self._deploy(bundle, on_progress)
                    self.stage = "starting the agent"
                    channel = started(self.transport.open_agent, dist, python)
                    self.dist = dist
                else:
                    self.dist = f"{home}/dist/{bundle.name}"
            client = AgentClient(channel)
            try:
                client.hello(timeout=self.timeout)
            except ChannelClosed:
                words = last_words(channel.stderr_tail())
                client.close()
                raise HostError(f"host {self.host.name}: the agent did not start with {python!r}"
                                + (f" (it said: {words})" if words else " (it exited without a word)"),
                                "set python in the host's entry to a working Python 3.9+ interpreter") from None
            except AgentTimeout:
                channel.abort()  # it hangs: nothing to wait for
                client.close()
                raise HostError(f"host {self.host.name}: no answer in {self.timeout:.0f} s from the agent started "
                                f"with {python!r}",
                                f"check that this interpreter starts on {self.host.name} (run it there by hand) "
                                "and that the host is not overloaded", timed_out=True) from None
            with self._state:
                dropped = generation != self._generation
                if not dropped:
                    self.client = client
            if dropped:  # nobody wants this one any more (a detach, the end of a check)
                client.close()
                raise HostError(f"host {self.host.name}: the connection was closed while it was being opened")
            self.stage = "connected"
            return client

    def _deploy(self, bundle, on_progress) -> str:
        """Upload what ``<home>/dist`` lacks of ``bundle``; the dist folder."""
        try:
            files = self.transport.files()
            try:
                dist, _ = deploy(bundle, files, self.home, on_progress)
            finally:
                files.close()
        except OSError as exc:
            raise HostError(f"host {self.host.name}: cannot write tfcc's code to {self.home}/dist "
                            f"({exc.strerror or exc})",
                            "check the free disk space and the permissions there (TFCC_HOME moves it)") from None
        return dist

    def upload_blobs(self, workdir, on_progress=None) -> int:
        """Upload the files of ``workdir`` (a ``console.workdir.Workdir``) whose blobs this host lacks,
        asking its agent first (connects if need be); the bytes sent. ``on_progress(sent, total)``."""
        blobs = workdir.blobs()
        client = self.connect()
        missing = client.call(MISSING_BLOBS, sha256=list(blobs))["missing"]
        wanted = [(sha, blobs[sha].path, blobs[sha].size) for sha in missing if sha in blobs]
        if not wanted:
            return 0
        try:
            files = self.transport.files()
            try:
                return upload_blobs(wanted, files, self.home, on_progress)
            finally:
                files.close()
        except OSError as exc:
            raise HostError(f"host {self.host.name}: cannot upload the workdir's files to {self.home}/blobs "
                            f"({exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''})",
                            "check the free disk space and the permissions there (TFCC_HOME moves it), and that "
                            "the workdir's files are still here") from None

    def close(self, client: AgentClient | None = None) -> None:
        """Close the channel (only if it is still ``client``, when given)."""
        with self._state:
            current = self.client
            if current is None or (client is not None and client is not current):
                return
            self.client = None
        current.close()

    def drop(self) -> None:
        """Close the whole connection (for a new one later); never waits for a connect in progress,
        which closes what it opens."""
        with self._state:
            self._generation += 1
        self.close()
        self.transport.close()
