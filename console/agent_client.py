"""Talk to an agent over any transport's channel (Qt-free).

A channel is a pair of binary streams to a running ``python3 -m agent`` (a
local subprocess, or an SSH exec channel). The client writes requests and a
reader thread dispatches answers by request id: plain calls resolve a Future;
a ``follow`` delivers each streamed message to a callback (on the reader
thread), until its ``end`` message or the channel closes.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Callable

from agent import PROTOCOL_VERSION

log = logging.getLogger("console.agent")

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class AgentRequestError(Exception):
    """The agent refused a request; the message is the agent's (it says what to do)."""


class ChannelClosed(Exception):
    """The channel to the agent closed (the agent exited or the connection dropped)."""


class Channel:
    """What a transport gives: streams to one agent process, and a way to close them."""

    def __init__(self, stdin, stdout, close: Callable[[], None], description: str):
        self.stdin = stdin
        self.stdout = stdout
        self._close = close
        self.description = description

    def close(self) -> None:
        self._close()


class LocalTransport:
    """Runs the agent as a subprocess of this machine (hosts marked ``local``)."""

    def __init__(self, python: str = sys.executable, agent_root: Path = PROJECT_ROOT,
                 env: dict | None = None):
        self.python = python
        self.agent_root = Path(agent_root)
        self.env = env

    def open_channel(self) -> Channel:
        env = dict(os.environ if self.env is None else self.env)
        env.pop("PYTHONPATH", None)  # the agent needs nothing but its own folder (the cwd)
        # -S: the agent needs only the standard library; skipping site saves most of the start-up.
        proc = subprocess.Popen([self.python, "-S", "-m", "agent"], cwd=self.agent_root, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

        def close():
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

        channel = Channel(proc.stdin, proc.stdout, close, f"local agent (pid {proc.pid})")
        channel.process = proc
        return channel


class Follow:
    """One ``follow`` stream; ``done`` is set after its end message or a closed channel."""

    def __init__(self, on_message: Callable[[dict], None]):
        self.on_message = on_message
        self.done = threading.Event()
        self.end: dict | None = None
        self.error: str | None = None


class AgentClient:
    def __init__(self, channel: Channel, timeout: float = 30.0):
        self.channel = channel
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._pending: dict[int, Future] = {}
        self._follows: dict[int, Follow] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self.closed = threading.Event()
        self._reader = threading.Thread(target=self._read, name="tfcc-agent-reader", daemon=True)
        self._reader.start()

    # ----------------------------------------------------------------- plumbing

    def _write(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode("utf-8")
        with self._write_lock:
            try:
                self.channel.stdin.write(data)
                self.channel.stdin.flush()
            except (OSError, ValueError) as exc:
                raise ChannelClosed(f"{self.channel.description}: {exc}") from None

    def _read(self) -> None:
        try:
            for raw in self.channel.stdout:
                try:
                    message = json.loads(raw)
                except ValueError:
                    log.warning("unreadable line from %s: %r", self.channel.description, raw[:200])
                    continue
                self._dispatch(message)
        except (OSError, ValueError) as exc:
            log.info("channel %s closed: %s", self.channel.description, exc)
        finally:
            self.closed.set()
            with self._lock:
                pending, self._pending = self._pending, {}
                follows, self._follows = self._follows, {}
            for future in pending.values():
                if not future.done():
                    future.set_exception(ChannelClosed(f"{self.channel.description} closed"))
            for follow in follows.values():
                follow.error = "channel closed"
                follow.done.set()

    def _dispatch(self, message: dict) -> None:
        rid = message.get("id")
        with self._lock:
            follow = self._follows.get(rid)
            future = self._pending.pop(rid, None) if follow is None else None
        if follow is not None:
            if message.get("ok") is False:
                follow.error = message.get("error")
                self._finish_follow(rid, follow)
                return
            try:
                follow.on_message(message)
            except Exception:
                log.exception("follow callback failed")
            if message.get("type") == "end":
                follow.end = message
                self._finish_follow(rid, follow)
        elif future is not None:
            future.set_result(message)
        else:
            log.warning("answer to unknown request %r from %s", rid, self.channel.description)

    def _finish_follow(self, rid, follow: Follow) -> None:
        with self._lock:
            self._follows.pop(rid, None)
        follow.done.set()

    # ----------------------------------------------------------------- requests

    def call(self, op: str, timeout: float | None = None, **params) -> dict:
        rid = next(self._ids)
        future: Future = Future()
        with self._lock:
            if self.closed.is_set():
                raise ChannelClosed(f"{self.channel.description} closed")
            self._pending[rid] = future
        self._write({"id": rid, "op": op, **params})
        answer = future.result(timeout=timeout or self.timeout)
        if not answer.get("ok"):
            raise AgentRequestError(answer.get("error") or "the agent refused the request")
        return answer

    def hello(self) -> dict:
        return self.call("hello", protocol=PROTOCOL_VERSION)

    def follow(self, run_id: str, task: str, on_message: Callable[[dict], None],
               offsets: dict | None = None, poll: float = 0.2) -> Follow:
        rid = next(self._ids)
        follow = Follow(on_message)
        with self._lock:
            if self.closed.is_set():
                raise ChannelClosed(f"{self.channel.description} closed")
            self._follows[rid] = follow
        self._write({"id": rid, "op": "follow", "run_id": run_id, "task": task,
                     "offsets": offsets or {}, "poll": poll})
        return follow

    def close(self) -> None:
        self.channel.close()
        self._reader.join(timeout=5)
