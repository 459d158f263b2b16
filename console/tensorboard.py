"""TensorBoard on demand for a run (Qt-free): copy the chief's log folder here, serve it on 127.0.0.1.

The trainer's chief (``chief-0``, else ``worker-0``) writes TensorBoard logs to
``<its run folder>/tensorboard/`` (epoch summaries; no profile). ``fetch_logs`` copies that
folder from its host (SFTP through the host's SSH link; a copy for this machine) into
``<state>/runs/<run>/tensorboard/`` (files already here unchanged are not copied again);
``TensorBoard`` runs ``python -m tensorboard.main`` of tfcc's own Python on that folder, bound
to 127.0.0.1 on a free port, and waits until it answers. Everything here blocks: the window
calls it off its UI thread. ``Servers`` keeps one per run and stops them all when the window quits.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from agent.protocol import STATUS
from console.errors import TfccError, make_state_dir
from console.files import open_private
from console.remote.transport import CopyBudget, CopyTooBig
from console.run.runner import Run
from console.store.cache import cache_dir
from console.text import size_text
from trainer.tf_config import chief_name

log = logging.getLogger("console.tensorboard")

LOG_FOLDER = "tensorboard"   # in the chief's run folder (trainer/train.py) and in the run's cache here
MAX_COPY_BYTES = 2 << 30     # the most of a chief's logs copied here (a host's months of logs, or a hostile one's)
START_SECONDS = 90.0         # TensorBoard imports TensorFlow when it is there: it can take a while


class TensorBoardError(TfccError):
    """TensorBoard cannot be shown for a run; the message says what to do."""


def chief_of(task_names: list[str]) -> str:
    """The task that writes the run's TensorBoard logs: ``chief-0``, else ``worker-0``."""
    name = chief_name(task_names)
    if name is not None:
        return name
    raise TensorBoardError(f"the run has no chief-0 or worker-0 (its tasks: {', '.join(task_names)}), so no "
                           "TensorBoard logs", "TensorBoard logs come from a run of tfcc's trainer")


def fetch_logs(run_id: str, ask_host_key=None, max_bytes: int = MAX_COPY_BYTES) -> Path:
    """Copy the chief's TensorBoard folder of ``run_id`` here (``max_bytes`` at most); the local folder
    (blocking)."""
    run = Run.load(run_id, ask_host_key)
    try:
        chief = chief_of([t.name for t in run.tasks])
        task = next(t for t in run.tasks if t.name == chief)
        link = run.links[task.host]
        target = cache_dir(run_id) / LOG_FOLDER
        try:
            run_dir = link.connect().call(STATUS, run_id=run_id, task=chief)["run_dir"]
            remote = f"{run_dir}/{LOG_FOLDER}"
            files = link.transport.files()
            try:
                make_state_dir(target)
                files.get_tree(remote, target, CopyBudget(max_bytes))
            finally:
                files.close()
        except FileNotFoundError:
            raise TensorBoardError(
                f"run {run_id} has no TensorBoard logs yet: {chief} on {task.host} has no {remote}",
                "the trainer's chief writes them at the end of its first epoch (a script of your own, or "
                "parameter-server training, writes none)") from None
        except CopyTooBig:
            raise TensorBoardError(
                f"the TensorBoard logs of run {run_id} ({chief}'s {remote} on {task.host}) hold more than the "
                f"{size_text(max_bytes)} that tfcc copies here",
                f"run TensorBoard on {task.host} (tensorboard --logdir {remote} --host 127.0.0.1) and reach it "
                "through an SSH tunnel (ssh -L), or copy more: tfcc tensorboard --max-gb N") from None
        except TfccError as exc:
            raise TensorBoardError(f"cannot copy the TensorBoard logs of run {run_id} from host {task.host}: "
                                   f"{exc.cause}", exc.fix or "check that the host is up and reachable") from None
        except OSError as exc:
            raise TensorBoardError(f"cannot copy the TensorBoard logs of run {run_id} from host {task.host} to "
                                   f"{target} ({exc.strerror or exc})",
                                   "check the free disk space and the permissions of tfcc's state folder") from None
    finally:
        run.detach()
    if not any(p.is_file() for p in target.rglob("*")):
        raise TensorBoardError(f"run {run_id} has no TensorBoard logs yet ({chief}'s {LOG_FOLDER} folder on "
                               f"{task.host} is empty)", "they are written at the end of the chief's first epoch")
    return target


def check_installed() -> None:
    if importlib.util.find_spec("tensorboard") is None:
        raise TensorBoardError(f"TensorBoard is not installed for tfcc's Python ({sys.executable})",
                               f"install it: {sys.executable} -m pip install tensorboard")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str, timeout: float = 1.0) -> bool:
    """Whether an HTTP server answers at ``url`` (any status)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            reply.read(1)
        return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def serves(url: str, logdir: Path, timeout: float = 1.0) -> bool | None:
    """Whether the server at ``url`` is the TensorBoard of ``logdir`` (its ``/data/environment`` names that logdir);
    None: nothing answers there (yet). Another server on the port (another user's, or one that took the port between
    its choice and TensorBoard's bind) is False: never opened as this run's."""
    try:
        with urllib.request.urlopen(url + "data/environment", timeout=timeout) as reply:
            environment = json.loads(reply.read(1 << 16))
    except urllib.error.HTTPError:
        return False  # a server, not TensorBoard's answer
    except (OSError, ValueError):
        return None if not answers(url, timeout) else False
    return isinstance(environment, dict) and environment.get("data_location") == str(logdir)


class TensorBoard:
    """One TensorBoard process on ``logdir``, bound to 127.0.0.1."""

    def __init__(self, logdir: Path, port: int | None = None):
        self.logdir = Path(logdir)
        self.port = port
        self.process: subprocess.Popen | None = None
        self.log_path = self.logdir.parent / "tensorboard.log"
        self._stopped = threading.Event()  # stop() came: one still starting ends too

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = START_SECONDS) -> str:
        """Start it and wait until it answers (at most ``timeout`` s); its URL."""
        check_installed()
        self.port = self.port or free_port()
        argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(self.logdir), "--host", "127.0.0.1",
                "--port", str(self.port)]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        with open_private(self.log_path, "ab") as out:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            env=env)
        process = self.process
        log.info("TensorBoard (pid %s) on %s for %s", process.pid, self.url, self.logdir)
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        while True:
            if self._stopped.is_set():  # stopped while it started (the window quits): it goes too
                self.process = process
                self.stop()
                raise TensorBoardError("TensorBoard was stopped while it started")
            found = serves(self.url, self.logdir)
            if found:
                break
            code = process.poll()
            if found is False and (code is not None or time.monotonic() > deadline):
                self.stop()
                raise TensorBoardError(f"another server answers on {self.url}, not this run's TensorBoard (it holds "
                                       f"port {self.port})", "give TensorBoard another port (tfcc tensorboard --port), "
                                       "or none for a free one")
            if code is not None:
                raise TensorBoardError(f"TensorBoard ended at once (exit code {code}): {self._last_words()}",
                                       f"its output is in {self.log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise TensorBoardError(f"TensorBoard gave no answer on {self.url} within {timeout:.0f} s",
                                       f"its output is in {self.log_path}; the machine may be overloaded")
            pause.wait(0.2)
        return self.url

    def _last_words(self) -> str:
        try:
            lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return "no output"
        return lines[-1][:300] if lines else "no output"

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` s (TensorBoard takes a few seconds to end)."""
        self._stopped.set()
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Servers:
    """The TensorBoards of a console, one per run; thread-safe. ``open`` copies a run's logs again
    (new epochs) and starts its server, or reuses the one that runs; ``stop_all`` at quit."""

    def __init__(self):
        self._lock = threading.Lock()
        self._servers: dict[str, TensorBoard] = {}
        self._closed = False

    def open(self, run_id: str, ask_host_key=None, timeout: float = START_SECONDS) -> str:
        check_installed()
        logdir = fetch_logs(run_id, ask_host_key)
        with self._lock:
            if self._closed:
                raise TensorBoardError("TensorBoard is not started: the window is closing")
            server = self._servers.get(run_id)
            if server is not None and server.running and answers(server.url):
                return server.url
            server = self._servers[run_id] = TensorBoard(logdir)
        return server.start(timeout)

    def stop_all(self) -> None:
        """Stop every server, those still starting too; no more are started after."""
        with self._lock:
            self._closed = True
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.stop()

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for s in self._servers.values() if s.running)
