"""Whether a restart can help: killed and lost tasks yes, bugs no; the stall watchdog's patience."""

from __future__ import annotations

import pytest

from console.run.supervisor import Pace
from console.run.supervisor import Failure, HostStreaks, backoff, judge


@pytest.mark.parametrize(
    "failures, retryable, words",
    [
        ([Failure("worker-1", "b", "failed", -9)], True, "worker-1 on b: the task was killed by SIGKILL"),
        ([Failure("worker-1", "b", "failed", 137)], True, "worker-1 on b: the task was killed with SIGKILL, most "
                                                          "likely by the host's out-of-memory killer"),
        ([Failure("worker-1", "b", "lost", None)], True, "its process vanished without an exit status"),
        ([Failure("worker-0", "a", "failed", 1, failed_event="lost contact with another task of the cluster "
                  "(Socket closed); restart every task of the run")], True, "lost contact with another task"),
        ([Failure("worker-0", "a", "failed", 1, failed_event="ValueError: 3 columns")], False,
         "worker-0 on a: error in the training code: ValueError: 3 columns"),
        ([Failure("worker-1", "b", "failed", -9), Failure("worker-0", "a", "failed", 1)], True,
         "killed by SIGKILL"),  # the survivor's error is the consequence of the kill
        ([Failure("worker-0", "a", "failed", 1, "Traceback (most recent call last):\n  File \"t.py\", line 3\n"
                  "ValueError: the data has 3 columns"),
          Failure("worker-1", "b", "failed", 1, "tensorflow.python.framework.errors_impl.UnavailableError: "
                  "Socket closed")], False, "ValueError: the data has 3 columns"),  # the cause wins
        ([Failure("worker-1", "b", "failed", None, stalled="made no step for 40 s")], True,
         "worker-1 on b made no step for 40 s"),
        # tfcc's own kill of a stalled task is no cause: not "killed by SIGKILL (by tfcc's stop, ...)"
        ([Failure("worker-1", "b", "failed", -9, stalled="is stopped (SIGSTOP)")], True,
         "worker-1 on b is stopped (SIGSTOP)"),
        # what its log says counts: a stall in a loop the code cannot leave is not restarted
        ([Failure("worker-1", "b", "failed", -9, "Traceback (most recent call last):\n  File \"t.py\", line 3\n"
                  "ValueError: the data has 3 columns", stalled="made no step for 40 s")], False,
         "worker-1 on b made no step for 40 s; its log says: error in the training code: ValueError"),
    ],
    ids=["sigkill", "exit-137", "lost", "lost-peer", "bug", "kill-and-survivor", "bug-and-survivor", "stalled",
         "stalled-killed-by-tfcc", "stalled-with-a-bug"],
)
def test_judge(failures, retryable, words):
    verdict = judge(failures)
    assert verdict.retryable is retryable
    assert any(words in line for line in verdict.lines), verdict.lines
    assert not any("by tfcc's stop" in line for f, line in zip(failures, verdict.lines) if f.stalled)


def test_backoff_grows_and_is_bounded():
    assert [backoff(n) for n in (1, 2, 3, 10)] == [1.0, 2.0, 4.0, 30.0]


def test_the_stall_watchdog_waits_many_steps_and_longer_after_an_epochs_last_step():
    pace = Pace()
    for i in range(10):
        pace.step({"step": i, "epoch": 0, "step_time": 0.5}, float(i), steps_per_epoch=22)
    assert pace.patience(15.0) == 25.0  # 50 x the median step
    pace.step({"step": 21, "epoch": 0, "step_time": 0.5}, 11.0, steps_per_epoch=22)
    assert pace.patience(15.0) == 250.0  # validation and the backup come now
    pace.epoch_done(12.0)
    assert pace.patience(15.0) == 25.0 and pace.last_at == 12.0
    quick = Pace()
    quick.step({"step": 0, "step_time": 0.01}, 0.0, steps_per_epoch=None)
    assert quick.patience(15.0) == 15.0  # never below the floor


def test_the_host_of_a_task_that_failed_on_its_own_is_the_culprit_not_its_peers():
    verdict = judge([Failure("worker-1", "b", "failed", -9),
                     Failure("worker-0", "a", "failed", 1, failed_event="lost contact with another task of the "
                             "cluster (Socket closed); restart every task of the run")])
    assert verdict.culprits == ["b"]


def test_judging_several_failures_asks_the_codes_facts_for_each():
    """The facts of the user's code reach the diagnosis of every failed task (a loop variable once took their
    name: the second task's diagnosis got an exit code for them, and the supervision died)."""
    class Facts:
        def not_shipped(self, module):
            return None

        def run_as_module(self, missing):
            return None

        def local_file(self, rel):
            return f"/home/me/proj/{rel}"

    tail = ('Traceback (most recent call last):\n  File "/h/runs/r/worker-{}/work/main.py", line 3, in <module>\n'
            "    x = y\nNameError: name 'y' is not defined\n")
    verdict = judge([Failure("worker-0", "a", "failed", 1, stderr_tail=tail.format(0)),
                     Failure("worker-1", "a", "failed", 1, stderr_tail=tail.format(1))], Facts())
    assert not verdict.retryable
    assert all("error in the training code at /home/me/proj/main.py:3 (`x = y`)" in line for line in verdict.lines)


def test_a_host_that_fails_again_and_again_is_named_and_the_count_is_in_a_row():
    streaks = HostStreaks()
    assert streaks.failed(["b"]) == []
    assert streaks.failed(["b"]) == [("b", 2)]
    assert HostStreaks.words("b", 2) == ("host b caused the last 2 failures in a row: check it (memory, disk, GPU, "
                                         "network; tfcc check), or move its tasks to another host")
    assert streaks.failed(["a"]) == []          # another host's failure ends b's streak
    assert streaks.failed(["b"]) == []


def test_a_port_tfcc_chose_taken_before_tensorflow_bound_it_is_retried_a_fixed_one_is_not():
    """Between choosing an auto port and TensorFlow binding it another program took it (a busy machine): no cause
    of the person's, a restart with the ports checked again works. A fixed port taken is the person's to fix."""
    from types import SimpleNamespace

    from console import cluster as cl
    from tests.console.test_diagnosis import PORT_IN_USE

    def run(port):
        return SimpleNamespace(cluster=cl.Cluster([cl.Host(name="here", local=True)],
                                                  [cl.Task(host="here", port=port), cl.Task(host="here", port=port)]))

    failed = [Failure("worker-1", "here", "failed", 1, stderr_tail=PORT_IN_USE)]
    auto = judge(failed, run("auto"))
    assert auto.retryable and "the restart checks the ports again and gives every task new ones" in auto.lines[0]
    fixed = judge(failed, run(23456))
    assert not fixed.retryable and 'port = "auto" in the cluster file' in fixed.lines[0]
