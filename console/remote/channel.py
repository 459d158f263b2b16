"""Talk to an agent over any transport's channel (Qt-free).

A channel is a pair of binary streams to a running ``python3 -m agent`` (a
local subprocess, ``console.remote.local``, or an SSH exec channel, ``console.remote.ssh``). The client writes requests and a
reader thread dispatches answers by request id: plain calls resolve a Future;
a ``follow`` (a task's files) or a ``system`` (the host's load) delivers each
streamed message to a callback (on the reader thread), until its ``end`` message
or the channel closes.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable

from agent.protocol import FOLLOW, MAX_LINE, PAUSE, PROTOCOL_VERSION, SYSTEM
from console.errors import TfccError
from console.threads import give_way

log = logging.getLogger("console.remote")
# The most one agent message may hold: a follow's message carries at most MAX_LINE bytes of a file's lines (each
# character at most six when JSON escapes it), a system sample some KB.
MAX_MESSAGE = 8 * MAX_LINE
_PIECE = 1 << 16  # a message is read in pieces of at most this: linear in its length on either transport



class AgentRequestError(TfccError):
    """The agent refused a request; the message is the agent's (it says what to do), ``code`` one of
    ``agent.protocol.ERROR_CODES`` for a program to act on."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.code = code


class AgentTimeout(TfccError):
    """The agent gave no answer in time (a hung interpreter or host); the message names the agent."""

    timed_out = True


class ChannelClosed(TfccError):
    """The channel to the agent closed (the agent exited or the connection dropped)."""

    def __init__(self, cause: str, fix: str | None = "the host or the connection to it went away; check that the "
                 "host is up and try again (a run goes on there: tfcc runs shows its state)"):
        super().__init__(cause, fix)


def tail(path, limit: int = 4000) -> str:
    """The last ``limit`` bytes of a local file as text ("" if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def last_words(text: str) -> str:
    """The line of an agent's stderr that says why it died (a traceback's last line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


class Channel:
    """What a transport gives: streams to one agent process, and a way to close them."""

    def __init__(self, stdin, stdout, close: Callable[[], None], description: str,
                 stderr_tail: Callable[[], str] | None = None, abort: Callable[[], None] | None = None):
        self.stdin = stdin
        self.stdout = stdout
        self._close = close
        self.description = description
        self._stderr_tail = stderr_tail
        self._abort = abort

    def abort(self) -> None:
        """End an agent that does not answer (it would not end by itself), then close."""
        if self._abort is not None:
            self._abort()
        self.close()

    def stderr_tail(self) -> str:
        """The end of what the agent wrote to stderr (kept in a file on its host), or ""."""
        try:
            return self._stderr_tail() if self._stderr_tail else ""
        except Exception as exc:  # a second failure must not hide the first
            log.info("cannot read the stderr of %s: %s", self.description, exc)
            return ""

    def close(self) -> None:
        self._close()


class Follow:
    """One streamed answer (``follow``, ``system``); ``done`` is set after its end message or a closed channel."""

    def __init__(self, on_message: Callable[[dict], None]):
        self.on_message = on_message
        self.done = threading.Event()
        self.end: dict | None = None
        self.error: str | None = None
        self.code: str | None = None  # the refusal's code (protocol.ERROR_CODES), with ``error``
        self._client: AgentClient | None = None
        self._rid: int | None = None

    @property
    def rid(self) -> int | None:
        """Its request's id (what a cancel of it names)."""
        return self._rid

    def pause(self, paused: bool = True) -> None:
        """Ask the agent to hold this follow (``paused``) or let it go on, waiting for nothing (the channel's
        reader may ask: what the follow sent meanwhile still comes, then nothing until it goes on)."""
        if self._client is not None and not self.done.is_set():
            self._client.notify(PAUSE, follow=self._rid, paused=paused)


class AgentClient:
    def __init__(self, channel: Channel, timeout: float = 30.0):
        self.channel = channel
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._pending: dict[int, Future] = {}
        self._follows: dict[int, Follow] = {}
        self._unawaited: set[int] = set()  # requests whose answers nobody waits for (``notify``)
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
            while True:
                raw = self._message()
                if raw is None:  # no agent of tfcc's sends this much in a message: a broken or hostile one
                    log.warning("a message over %d bytes from %s: the channel is closed", MAX_MESSAGE,
                                self.channel.description)
                    break
                if not raw:
                    break
                give_way()  # decoding a host's message waits while the window's thread handles its events
                try:
                    message = json.loads(raw)
                except (ValueError, RecursionError):  # not JSON, or nested past what a parser takes
                    log.warning("unreadable line from %s: %r", self.channel.description, raw[:200])
                    continue
                if not isinstance(message, dict):
                    log.warning("a message that is no object from %s: %r", self.channel.description, raw[:200])
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

    def _message(self) -> bytes | None:
        """The next line the agent sent (b"" at its end; None for one over ``MAX_MESSAGE``), read in pieces: a
        file's (or paramiko's) ``readline`` scans and copies what it has at every read, quadratic in a long line."""
        parts, size = [], 0
        while size <= MAX_MESSAGE:
            part = self.channel.stdout.readline(min(_PIECE, MAX_MESSAGE + 1 - size))  # a read waits for all it asks
            if not part:
                break
            parts.append(part)
            size += len(part)
            if part.endswith(b"\n"):
                break
        return b"".join(parts) if size <= MAX_MESSAGE else None

    def _dispatch(self, message: dict) -> None:
        rid = message.get("id")
        with self._lock:
            follow = self._follows.get(rid)
            future = self._pending.pop(rid, None) if follow is None else None
        if follow is not None:
            if message.get("ok") is False:
                follow.error, follow.code = message.get("error"), message.get("code")
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
        elif self._unawaited_answer(rid):
            if message.get("ok") is False:
                log.info("%s refused a request nobody waits for: %s", self.channel.description, message.get("error"))
        else:
            log.warning("answer to unknown request %r from %s", rid, self.channel.description)

    def _unawaited_answer(self, rid) -> bool:
        with self._lock:
            if rid in self._unawaited:
                self._unawaited.discard(rid)
                return True
        return False

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
        limit = timeout or self.timeout
        try:
            answer = future.result(timeout=limit)
        except FutureTimeout:
            with self._lock:
                self._pending.pop(rid, None)
            raise AgentTimeout(f"{self.channel.description} gave no answer to {op!r} in {limit:.0f} s",
                               "check that the host and its Python are not overloaded or hung") from None
        if not answer.get("ok"):
            raise AgentRequestError(answer.get("error") or "the agent refused the request", answer.get("code"))
        return answer

    def notify(self, op: str, **params) -> None:
        """A request whose answer nobody waits for: from any thread, the channel's reader too (it waits for
        nothing); a closed channel is no error (what it asked for ended with it)."""
        rid = next(self._ids)
        with self._lock:
            if self.closed.is_set():
                return
            self._unawaited.add(rid)
        try:
            self._write({"id": rid, "op": op, **params})
        except ChannelClosed:
            pass

    def hello(self, timeout: float | None = None) -> dict:
        return self.call("hello", timeout=timeout, protocol=PROTOCOL_VERSION)

    def follow(self, run_id: str, task: str, on_message: Callable[[dict], None],
               offsets: dict | None = None, poll: float = 0.2) -> Follow:
        return self._stream(on_message, op=FOLLOW, run_id=run_id, task=task, offsets=offsets or {}, poll=poll)

    def system(self, run_id: str, on_message: Callable[[dict], None], interval: float = 1.0) -> Follow:
        """The host's load and the run's tasks on it, one ``system`` message about every ``interval`` s,
        until the run's tasks on this host have ended (docs/metrics.md, "system")."""
        return self._stream(on_message, op=SYSTEM, run_id=run_id, interval=interval)

    def stream(self, op: str, on_message: Callable[[dict], None], **params) -> Follow:
        """An op that answers with a stream of messages until its end (an ``env_make``'s progress)."""
        return self._stream(on_message, op=op, **params)

    def _stream(self, on_message: Callable[[dict], None], **request) -> Follow:
        rid = next(self._ids)
        follow = Follow(on_message)
        follow._client, follow._rid = self, rid
        with self._lock:
            if self.closed.is_set():
                raise ChannelClosed(f"{self.channel.description} closed")
            self._follows[rid] = follow
        self._write({"id": rid, **request})
        return follow

    def close(self) -> None:
        self.channel.close()
        self._reader.join(timeout=5)
