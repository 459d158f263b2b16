"""Judging a failure: restart or not, and the words for each failed task (Qt-free).

A failure is *retryable* when the process was killed or lost (a signal, an exit code of 128 or more as
Kubeflow's TFJob counts them, a vanished supervisor) or when the diagnosis of its log says so (a lost peer,
a heartbeat); it is *permanent* when the diagnosis finds an error that a restart would only repeat (a bug in
the training code, a bad configuration).
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass, replace

from agent.protocol import LOGS, LOST, STATUS, STDERR
from console.diagnosis import CONSEQUENCES, PORT_IN_USE, diagnose
from console.errors import TfccError
from console.states import Mark, SessionKind, TaskState
from console.run.placement import placement_for
from trainer.records import LOST_PEER

log = logging.getLogger("console.run.supervisor")


@dataclass
class Failure:
    """One task that ended badly, as the session saw it before anything was stopped."""

    task: str
    host: str
    phase: str
    returncode: int | None
    stderr_tail: str = ""
    failed_event: str | None = None  # the trainer's own words (its ``failed`` event)
    stalled: str | None = None       # how it stalled, when the stall watchdog stopped it


@dataclass
class Verdict:
    retryable: bool
    lines: list[str]  # one per failed task: what happened and what to do
    culprits: list[str]  # the hosts of the tasks that failed on their own (not by losing a peer)


def signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


AUTO_PORT_FIX = ("the port was one tfcc chose (port = \"auto\"), taken by another program just before TensorFlow "
                 "bound it; the restart checks the ports again and gives every task new ones where one is taken")


def _auto_port(run, task: str) -> bool:
    """Whether ``task``'s port is one tfcc chooses (``auto``) in ``run``'s cluster (no run known: no)."""
    cluster = getattr(run, "cluster", None)
    if cluster is None or not (getattr(run, "placement", None) or placement_for(cluster)).picks_ports:
        return False  # (a Slurm job's ports are its job id's, the same each attempt)
    names = cluster.task_names()
    return task in names and cluster.tasks[names.index(task)].port == "auto"


def judge(failures: list[Failure], facts=None) -> Verdict:
    """Restart or not, and the words for each failed task.

    A task killed or lost makes the group retryable (the others' errors are its consequence:
    they lost a peer); an error a restart would repeat (a diagnosis says permanent, or a plain
    exit code while nothing was killed) does not. ``facts``: what the diagnosis knows of the user's code
    (``diagnosis.CodeFacts``: the ``Run``).
    """
    lines, culprits = [], []
    killed = retryable_cause = permanent_cause = plain_error = False
    for f in failures:
        # A stalled task was killed by tfcc's own stop: its log may say more than the stall, the kill does not
        # (judged as a plain error exit: a traceback counts, the signal not).
        found = diagnose(f.stderr_tail, 1 if f.stalled else f.returncode, f.failed_event, facts)
        if found is not None and found.name == PORT_IN_USE and _auto_port(facts, f.task):
            # A port tfcc chose, taken in the moment before TensorFlow bound it: no cause of the person's. The
            # restart checks the ports again, and gives every task new ones where one is taken (Run.start).
            found = replace(found, fix=AUTO_PORT_FIX, retryable=True)
        code = f.returncode
        lost_a_peer = (found is not None and found.name in CONSEQUENCES) or (
            found is None and f.failed_event is not None and LOST_PEER in f.failed_event)
        if not lost_a_peer and f.host not in culprits:
            culprits.append(f.host)
        if f.phase == LOST or code is None or code < 0 or code >= 128 or f.stalled:
            killed = True
        if f.stalled:
            lines.append(f"{f.task} on {f.host} {f.stalled}"
                         + (f"; its log says: {found.cause}; {found.fix}" if found else ""))
            if found is not None and found.name not in CONSEQUENCES:
                retryable_cause |= found.retryable
                permanent_cause |= not found.retryable
        elif found is not None:
            lines.append(f"{f.task} on {f.host}: {found.cause}; {found.fix}")
            retryable_cause |= found.retryable
            permanent_cause |= not found.retryable
        elif f.phase == LOST or code is None:
            lines.append(f"{f.task} on {f.host}: its process vanished without an exit status (killed with its "
                         "supervisor, or the host went down)")
        elif code < 0 or code >= 128:
            how = f"killed by {signal_name(code)}" if code < 0 else f"exit code {code} (killed by a signal)"
            lines.append(f"{f.task} on {f.host}: {how}")
        elif f.failed_event and LOST_PEER in f.failed_event:  # the trainer's own word: a peer went away
            retryable_cause = True
            lines.append(f"{f.task} on {f.host}: {f.failed_event}")
        else:
            plain_error = True
            lines.append(f"{f.task} on {f.host}: exit code {code}"
                         + (f": {f.failed_event}" if f.failed_event else "") + "; see tfcc logs for its output")
    retryable = (killed or retryable_cause) and not permanent_cause and not (plain_error and not killed)
    return Verdict(retryable, lines, culprits)


class HostStreaks:
    """How many failures in a row each host has caused: Horovod leaves such a host out; tfcc names it."""

    SAY_AFTER = 2

    def __init__(self):
        self.streak: dict[str, int] = {}

    def failed(self, culprits: list[str]) -> list[tuple[str, int]]:
        """Count a failure caused on ``culprits``; each host now at ``SAY_AFTER`` or more, with its count."""
        self.streak = {host: self.streak.get(host, 0) + 1 for host in culprits}
        return [(host, n) for host, n in self.streak.items() if n >= self.SAY_AFTER]

    @staticmethod
    def words(host: str, n: int) -> str:
        return (f"host {host} caused the last {n} failures in a row: check it (memory, disk, GPU, network; "
                "tfcc check), or move its tasks to another host")


def backoff(restart: int) -> float:
    """Seconds before the ``restart``-th restart (1, 2, …): quick first, then slower."""
    return min(2.0 ** (restart - 1), 30.0)


class Judging:
    """The supervisor's judging of its failed tasks (a mixin of ``console.run.supervisor.Supervisor``): each one's
    log since its attempt began, the verdict, and what is said and shown of each."""

    def _judge(self, failed: list[TaskState]) -> Verdict:
        """The verdict on ``failed``, its line for each task said (and shown on the task)."""
        verdict = judge([self._failure(t) for t in failed], self.run)
        for task, line in zip(failed, verdict.lines):
            self._mark(task, Mark.FAILED, line)  # first: a listener of the event finds the state said
            self._say(SessionKind.FAILURE, line)
        return verdict

    def stderr_tail(self, task: TaskState) -> str:
        """The end of this attempt's part of ``task``'s stderr: an earlier attempt's errors are no cause now."""
        try:
            client = self.run.links[task.host].connect()
            status = client.call(STATUS, run_id=self.run.run_id, task=task.name)
            size = status["sizes"].get(STDERR, 0)
            begun = max(self._stderr_from.get(task.name, 0), status.get("stderr_from") or 0)
            fresh = size - begun
            if fresh > 0:
                return client.call(LOGS, run_id=self.run.run_id, task=task.name,
                                   max_bytes=min(8000, fresh))["logs"].get(STDERR, "")
        except TfccError as exc:
            log.info("no log of %s: %s", task.name, exc)
        return ""

    def _failure(self, task: TaskState) -> Failure:
        return Failure(task.name, task.host, task.phase, (task.exit or {}).get("returncode"),
                       self.stderr_tail(task), self._failed_event.pop(task.name, None),
                       self._stalled.pop(task.name, None))

    def look_at_a_finished(self, task: TaskState) -> None:
        """A task that exited 0 can still have gone wrong in a way worth saying (its data ran out, it
        could not use its GPUs): the diagnosis's signatures for a clean exit, as an alert."""
        found = diagnose(self.stderr_tail(task), 0)
        if found is not None:
            self._say(SessionKind.ALERT, f"{task.name} on {task.host} finished, but {found.cause}; {found.fix}")
