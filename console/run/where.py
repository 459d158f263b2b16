"""Where a run's tasks are now: every member's stacks asked at once (the agent's stacks op), read into
``console.hangs``' groups and verdict (Qt-free). The CLI's ``tfcc where``, the window's Where are they? and the stall
watchdog ask here."""

from __future__ import annotations

import threading

from agent.protocol import NO_SUCH_TASK
from console import hangs, text
from console.errors import TfccError
from console.remote.channel import AgentRequestError

WHERE_WAIT = 5.0  # seconds each task has to answer
LOOK_APART = 1.0  # seconds between a person's two looks


def where(run, wait: float = WHERE_WAIT, silent: dict[str, float] | None = None, before: hangs.Report | None = None,
          looks: int = 1) -> hangs.Report:
    """``run``'s members' places, grouped and worded (``silent``: how long each has made no step; ``before``: the
    ask before this one). ``looks``: asks ``LOOK_APART`` s apart, each read against the one before it (a person's
    ask looks twice: one look catches a healthy task in its generator). A task that has ended is said so, without
    asking its host."""
    report = before
    for look in range(looks):
        if look:
            threading.Event().wait(LOOK_APART)
        report = _look(run, wait, silent, report)
    return report


def _look(run, wait: float, silent: dict[str, float] | None, before: hangs.Report | None) -> hangs.Report:
    members = list(run.members)
    asked = [t for t in members if not t.ended]
    answers = dict(zip((t.name for t in asked), run.stacks(wait, asked))) if asked else {}
    said = []
    for task in members:
        answer = answers.get(task.name)
        if task.ended:
            answer = {"state": hangs.GONE, "detail": text.outcome_text(task.phase, task.exit)}
        elif isinstance(answer, AgentRequestError) and answer.code == NO_SUCH_TASK:
            answer = {"state": hangs.GONE, "detail": "its host says it no longer runs"}
        elif isinstance(answer, TfccError):
            answer = RuntimeError(text.printable(str(answer)))
        said.append((task.name, run.placement.machine_of(task) or task.host, answer))
    training = run.cluster.training
    return hangs.read(said, hangs.local_workdir(run.cluster), trainer=not (training.script or training.module),
                      silent=silent, before=before)
