"""An elastic run's supervision: go on without a lost or failing host, move its tasks to a spare, take it back
(Qt-free).

A part of ``console.run.supervisor.Supervisor`` (a mixin): it acts on the supervisor's run and state, and
changes that state only through its door (``change``, ``give_up``).
"""

from __future__ import annotations

import logging
import threading
import time

from console.errors import TfccError
from console.states import Leave, Left, Mark, SessionKind, Supervision, TaskState
from console import text
from trainer.tf_config import TRAINING_ROLES
from agent.protocol import parse_task_name

log = logging.getLogger("console.run.supervisor")

LOST_AFTER = 30.0  # an elastic run goes on without a host that has not answered for this long after a failure
PROBE_SECONDS = 10.0  # how often an elastic run asks whether a host it went on without answers again
REMOVE_HOST, TAKE_BACK = "remove", "take back"  # what a person may ask of an elastic run's host
REMOVED_BY_YOU = "removed by you"  # the words for a task whose host a person removed (not asked again till taken back)
FAILING = "its host caused failure after failure"  # the words for a host that answers but keeps failing


class Due:
    """Automatic work a report made due, done by the supervisor's next ``transition``."""

    STOP_AT_NAN = "stop at a non-finite loss"  # the run's own stop_on_nan
    END_SERVERS = "end the servers"            # a parameter-server run's coordinator is done
    GROW = "grow"                              # a backup every training task shares: take back who answers


def _reason(left) -> str | None:
    """Why a task left, as code acts on it (a Left's reason), or None."""
    return getattr(left, "reason", None)


class Elastic:
    """The elastic part of a run's supervision (training.elastic): shrink, move to a spare, grow."""


    @property
    def elastic(self) -> int:
        """The fewest training tasks the run may go on with (training.elastic; 0: it never changes size)."""
        return self.run.cluster.training.elastic

    def _training_members(self, without: str = "") -> list[TaskState]:
        return [t for t in self.run.members if parse_task_name(t.name)[0] in TRAINING_ROLES and t.host != without]

    def _can_leave(self, host: str) -> bool:
        """Whether the run keeps at least its ``elastic`` training tasks without ``host``'s (parameter-server
        training moves a lost host's tasks, never goes on without them: its coordinator or a ps is needed)."""
        return not self.run.cluster.parameter_server and len(self._training_members(without=host)) >= self.elastic

    def _shrink_hint(self, hosts: list[str]) -> str:
        if not self.elastic:
            return ""
        if self.run.cluster.parameter_server:
            return f"; no spare host was left to move {', '.join(sorted(set(hosts)))}'s tasks to"
        return (f"; the run could not go on without {', '.join(sorted(set(hosts)))}: fewer than its elastic "
                f"{self.elastic} training tasks would be left, and no spare host")

    def _lost(self, unstopped: list[str]) -> list[str] | None:
        """The hosts in ``unstopped`` that still do not answer a stop after ``lost_after`` s (asked again
        meanwhile): lost for good (None: a detach or a stop came meanwhile)."""
        deadline = time.monotonic() + self.lost_after
        hosts = set(unstopped)
        while hosts and time.monotonic() < deadline:
            if self.wake.wait(min(2.0, max(0.0, deadline - time.monotonic()))) or self.stop_requested:
                return None  # detached or stopped meanwhile: nothing is decided
            tasks = [t for t in self.run.members if t.host in hosts]
            hosts = set(self.run.stop_each(grace=2, only=tasks))
        return sorted(hosts)

    def _replace_lost(self, hosts: list[str]) -> tuple[list[str], list[TaskState]]:
        """Each host lost for good: its tasks move to a spare host when one is listed, else the run goes on
        without them when it keeps its ``elastic`` training tasks. The hosts neither could help (their tasks may
        still run there: no restart beside them), and the tasks that left."""
        kept, left = [], []
        why = f"its host did not answer for {self.lost_after:.0f} s after the failure"
        for host in hosts:
            tasks = [t for t in self.run.members if t.host == host]
            spares = self.run.spares()
            if spares:
                self._move(host, spares[0], f"{host} did not answer for {self.lost_after:.0f} s after the failure")
            elif self._can_leave(host):
                self._leave(tasks, Left(why, Leave.LOST))
                left += tasks
            else:
                kept.append(host)
        return kept, left

    def _move(self, host: str, spare: str, why: str) -> None:
        """Every task of the lost ``host`` runs on ``spare`` from the next attempt (said, and shown on each)."""
        moved = self.run.move(host, spare, why)
        names = ", ".join(t.name for t in moved)
        coordinator = any(self._coordinates(t) for t in moved)
        starts_over = (f"; {names} start{'s' if len(moved) == 1 else ''} there afresh"
                       + (" (the coordinator's backups were on that host: training starts over)" if coordinator
                          else ""))
        for task in moved:
            self._mark(task, Mark.RESTARTING, f"moved to the spare host {spare} ({why})")
        self._say(SessionKind.RESIZED, f"run {self.run.run_id}: {names} moved from {host} to the spare host {spare} "
                                       f"({why}){starts_over}")

    def _leave(self, tasks: list[TaskState], why: Left, again: str = "") -> None:
        """The run goes on without ``tasks`` (said, and shown on each); they rejoin at a backup once their host
        answers again (``again``: when else)."""
        hosts = sorted({t.host for t in tasks})
        self.run.leave(tasks, why)
        self._back -= set(hosts)
        for task in tasks:
            self._mark(task, Mark.LEFT, why)
        self._say(SessionKind.RESIZED, f"run {self.run.run_id} goes on with {len(self._training_members())} "
                                       f"training tasks: {', '.join(f'{t.name} on {t.host}' for t in tasks)} left "
                                       f"the run ({why}); the same global batch is split over the tasks left; "
                                       f"{'they rejoin' if len(tasks) > 1 else 'it rejoins'} at the next backup "
                                       + (again or f"once {', '.join(hosts)} answers again"))

    # ------------------------------------------------------------ a person's remove and take back

    def removal_problem(self, host: str) -> str | None:
        """Why the run cannot go on without ``host`` now (one line that says what to do), or None."""
        if not self.elastic:
            return ("the run is not elastic: set training.elastic in its cluster file (the fewest training tasks "
                    "it goes on with) for a new run")
        if not any(t.host == host for t in self.run.members):
            return (f"no task of the run runs on {host} (it runs on "
                    f"{', '.join(sorted({t.host for t in self.run.members}))})")
        if self.run.cluster.parameter_server:
            return ("parameter-server training does not go on without a host's tasks: stop the run, move them in "
                    "its cluster file and start a new run (a lost ps or chief host moves to a spare by itself)")
        if not self._can_leave(host):
            return (f"without {host} the run would have fewer than its elastic {self.elastic} training tasks; "
                    "take out another host, or lower elastic in the cluster file of a new run")
        if self.state in Supervision.OVER or all(t.ended for t in self.run.members):
            return "the run has ended or is stopping: start a new run without it"
        return None

    def ask(self, what: str, host: str) -> None:
        """A person asks (any thread): ``REMOVE_HOST`` (the run goes on without it, now) or ``TAKE_BACK`` (one it
        goes on without, at the next backup once it answers); done on the session's thread at its next tick."""
        self._asked.append((what, host))

    def _on_asks(self) -> None:
        while self._asked:
            what, host = self._asked.pop(0)
            if what == TAKE_BACK:
                for task in self.run.tasks:
                    if task.host == host and _reason(self.run.left.get(task.name)) in Leave.NOT_ASKED_AGAIN:
                        self.run.mark_left(task.name, Left("taken back by you: it rejoins at the next backup",
                                                           Leave.TAKEN_BACK))
                self._probed = 0.0  # ask it now
                continue
            problem = self.removal_problem(host)
            if problem or self.state in Supervision.BUSY:
                self._say(SessionKind.ALERT, f"run {self.run.run_id}: cannot go on without {host}: "
                                             f"{problem or 'a restart is under way; ask again once it is done'}")
                continue
            if not self.change(Supervision.RESIZING, only_from=Supervision.WATCHING):  # WATCHING -> RESIZING
                continue  # a stop asked for meanwhile (another thread): the run ends, with every host
            try:
                unstopped = self._stop_for_resize()
                leaving = [t for t in self.run.members if t.host == host]
                if [h for h in unstopped if h != host]:
                    self.give_up()  # RESIZING -> GIVEN_UP
                    self._say(SessionKind.GAVE_UP, f"run {self.run.run_id}: its tasks on {', '.join(unstopped)} "
                                                   f"could not be stopped to go on without {host}; once they answer: "
                                                   f"tfcc stop {self.run.run_id}, then tfcc resume {self.run.run_id}")
                    return
                self._leave(leaving, Left(REMOVED_BY_YOU, Leave.REMOVED), again="once you take it back")
                self._next_attempt(f"going on without {host}: restarting on {len(self._training_members())} "
                                   "training tasks",
                                   f"attempt {{attempt}} started on {len(self._training_members())} training tasks, "
                                   f"without {host}")
            finally:
                self.change(Supervision.WATCHING, only_from=Supervision.RESIZING)  # RESIZING -> WATCHING

    def _stop_for_resize(self) -> list[str]:
        """Stop every member before the run restarts with other members: their ends say ``stopped`` (no failure to
        judge); the hosts that did not answer."""
        with self._stopping(text.STOPPED_FOR_RESIZE):
            unstopped = self.run.stop_each(grace=10)
            self.run.wait(60)
            self._drain()
        self._failed = []
        return unstopped

    def _probe_the_left(self) -> None:
        """Ask, now and then, each host the run went on without whether it answers again (on a thread of its own:
        a host that does not answer holds nobody up)."""
        if (not self.run.left or self.state != Supervision.WATCHING
                or time.monotonic() - self._probed < self.probe_seconds):
            return
        self._probed = time.monotonic()
        hosts = {t.host for t in self.run.tasks if t.name in self.run.left
                 and _reason(self.run.left[t.name]) not in Leave.NOT_ASKED_AGAIN} - self._back
        for host in sorted(hosts):
            if host in self._probing and self._probing[host].is_alive():
                continue
            thread = threading.Thread(target=self._probe, args=(host,), name=f"tfcc-probe-{host}", daemon=True)
            self._probing[host] = thread
            thread.start()

    def _probe(self, host: str) -> None:
        try:
            self.run.links[host].connect()
        except Exception as exc:  # any failure: it does not answer yet
            log.info("run %s: host %s does not answer yet (%s)", self.run.run_id, host, exc)
            self.run.links[host].drop()
            return
        log.info("run %s: host %s answers again", self.run.run_id, host)
        self._back.add(host)

    def _grow(self) -> None:
        """A backup was just made and hosts the run went on without answer again: the run restarts with their
        tasks too, from that backup (copied to them first)."""
        if Due.GROW not in self._due:
            return
        self._due.discard(Due.GROW)
        if self.state != Supervision.WATCHING or self._failed:
            return
        joining = [t for t in self.run.tasks if t.name in self.run.left and t.host in self._back]
        if not joining:
            return
        if any(not t.cluster_formed or t.ended for t in self.run.members):
            return  # an attempt still forming, or ending: the next backup
        hosts = sorted({t.host for t in joining})
        if not self.change(Supervision.RESIZING, only_from=Supervision.WATCHING):  # WATCHING -> RESIZING
            return  # a stop asked for meanwhile (another thread)
        try:
            # What ran there before it was lost may still run (a network cut off, not a host down): stopped first.
            if self.run.stop_each(grace=2, only=joining):
                self._back -= set(hosts)
                log.info("run %s: %s answered, then not: not taken back yet", self.run.run_id, ", ".join(hosts))
                return
            words = f"{', '.join(hosts)} answers again"
            self._say(SessionKind.RESIZED, f"run {self.run.run_id}: {words}: restarting with "
                                           f"{', '.join(t.name for t in joining)} again from the backup just made")
            unstopped = self._stop_for_resize()
            if unstopped:
                self.give_up()  # RESIZING -> GIVEN_UP
                self._say(SessionKind.GAVE_UP, f"run {self.run.run_id}: its tasks on {', '.join(unstopped)} could "
                                               f"not be stopped to take {', '.join(hosts)} back; once they answer: "
                                               f"tfcc stop {self.run.run_id}, then tfcc resume {self.run.run_id}")
                return
            self._back -= set(hosts)
            self.run.rejoin(joining, words)

            def without_them(exc: TfccError) -> bool:
                """They answered, then could not start: the run goes on without them again (asked anew later)."""
                self._leave(joining, Left(f"it could not be started again ({exc.cause})", Leave.NOT_STARTED))
                return True

            self._next_attempt(f"{words}: restarting on {len(self._training_members())} training tasks",
                               f"attempt {{attempt}} started on {len(self._training_members())} training tasks, "
                               "from the backup just made", fallback=without_them)
        finally:
            self.change(Supervision.WATCHING, only_from=Supervision.RESIZING)  # RESIZING -> WATCHING
