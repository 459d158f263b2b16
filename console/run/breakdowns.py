"""Why is the run slow: a live run's breakdowns, asked of its training tasks and judged once all answered (Qt-free).

A part of ``console.run.session.RunSession`` (a mixin, on the session's run and listeners); the breakdown's
arithmetic and words are console/speed.py's.
"""

from __future__ import annotations

import logging
import math

from agent.protocol import ENDED, parse_task_name
from console import speed
from console.errors import RunError, TfccError
from console.states import SessionEvent, SessionKind, TaskState
from console.store.cache import CONSOLE_TASK
from trainer.records import GLOBAL_STEP, number
from trainer.tf_config import CHIEF, WORKER

log = logging.getLogger("console.run.session")


class Breakdowns:
    """The session's why-slow asks: ``why_slow`` (any thread but the window's) and the answers its thread reads."""

    def why_slow(self) -> str:
        """Ask every training task where its step time goes (docs/why-slow.md); the ask's name. The verdict comes
        as a ``SessionKind.EXPLAINED`` event within ``speed.ANSWER_SECONDS``; a RunError at once that says why
        when the run cannot be measured now. It waits on the agents: never call it on a window's thread."""
        problem = self.measure_problem()
        if problem is None and self._ended_at_the_agents():  # ended since this session last heard from them
            problem = self._ended_problem(self.run.run_id)
        if problem:
            raise RunError(f"run {self.run.run_id} cannot say why it is slow now: {problem[0]}", problem[1])
        name = speed.new_ask()
        self._ask(name)
        return name

    @staticmethod
    def _ended_problem(run_id: str) -> tuple[str, str]:
        return ("its tasks have ended", f"tfcc resume {run_id} starts them again from their backups")

    def _ended_at_the_agents(self) -> bool:
        """Every member's task has ended, as its agent says now (a session just attached may not have read the
        ends yet: a stop a moment ago)."""
        try:
            statuses = self.run.status() if self.run.members else []
        except TfccError as exc:  # a host that does not answer now: the ask says so itself
            log.info("could not read run %s's tasks before a breakdown: %s", self.run.run_id, exc)
            return False
        return bool(statuses) and all(s.get("phase") in ENDED for s in statuses)

    def measure_problem(self) -> tuple[str, str] | None:
        """Why the run's step time cannot be measured now, and what to do; None when it can."""
        training = self.run.cluster.training
        if self.run.cluster.parameter_server:
            return ("under parameter-server training the coordinator hands each step to whichever worker is free, "
                    "so no step is shared to measure at", "the breakdown measures synchronous training (default, "
                    "Mirrored, MultiWorkerMirrored); the plots show each worker's pace")
        if training.user_code and not training.capture:
            return ("its script runs without tfcc's capture", "set capture = true in [training] (the default)")
        if self.run.members and all(t.ended for t in self.run.members):
            return self._ended_problem(self.run.run_id)
        if self._newest_step < 0 or not self._trainers():
            return ("it is not training yet", "ask again once its first steps are in")
        if training.user_code and not self._fits:
            return ("its script trains in a loop of its own, not in Keras fit",
                    "the breakdown measures a Keras fit (or tfcc's trainer); a loop's step time is in the plots")
        return None

    def _trainers(self) -> list[TaskState]:
        """The tasks that train and run now (chief and workers): those a breakdown asks."""
        out = []
        for task in self.run.members:
            try:
                role = parse_task_name(task.name)[0]
            except ValueError:
                continue
            if role in (CHIEF, WORKER) and not task.ended:
                out.append(task)
        return out

    def _ask(self, name: str) -> None:
        tasks = self._trainers()
        with self._asking:
            self._asks.start(name, [t.name for t in tasks], self._newest_step)
        errors = [e if isinstance(e, TfccError) else None
                  for e in self.run.measure(tasks, name, max(0, self._newest_step))]
        unasked = [(t.name, e) for t, e in zip(tasks, errors) if e is not None]
        if unasked:  # the others would wait for it (their asks lapse on their own after a minute)
            with self._asking:
                self._asks.forget(name)
            raise RunError(f"run {self.run.run_id} could not ask {unasked[0][0]} why it is slow: {unasked[0][1]}",
                           "every training task must be asked at once; is the run still training? (tfcc runs)")

    def _breakdown(self, task: TaskState, record: dict) -> None:
        """A task's ``breakdown`` record: the verdict once every task asked has answered."""
        with self._asking:
            verdict = self._asks.answered(task.name, record)
        if verdict is not None:
            self._explained(verdict)

    def _ask_context(self) -> dict:
        """What a verdict adds to the workers' records: each task's machine (its host, a Slurm job's node) and that
        machine's newest system record."""
        where = {t.name: self.run.placement.machine_of(t) for t in self.run.tasks}
        return {"systems": {name: self._systems[m] for name, m in where.items() if m in self._systems},
                "hosts": where}

    def _look_at_asks(self) -> None:
        with self._asking:
            closed = self._asks.overdue() + self._asks.ended({t.name for t in self.run.tasks if t.ended})
        for verdict in closed:
            self._explained(verdict)

    def _explained(self, verdict: speed.Verdict) -> None:
        self.verdict = verdict
        lines = verdict.lines()
        if verdict.scaling_words():
            try:
                self.run.note_speed(verdict)
            except Exception:  # noqa: BLE001 - the verdict is said all the same
                log.exception("keeping run %s's scaling efficiency", self.run.run_id)
        if self.store is not None:
            self.store.note(CONSOLE_TASK, SessionKind.EXPLAINED, " | ".join(lines))
        self._tell(SessionEvent(SessionKind.EXPLAINED, text="\n".join(lines), message=verdict.as_dict()))

    def _stepped(self, record: dict) -> None:
        """Where training is (the newest global step): a breakdown can be asked for once there is one."""
        step = number(record.get(GLOBAL_STEP))
        if math.isfinite(step) and step > self._newest_step:
            self._newest_step = int(step)
