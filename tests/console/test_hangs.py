"""console.hangs: tasks' stacks grouped by where they are, and the verdict (faulthandler's dumps, written here the way
a task's watcher writes them; tests/console/run/test_hangs.py runs the seeded hangs for real)."""

from __future__ import annotations

import pytest

from console import hangs

SITE = "/venv/lib/python3.11/site-packages"
LIB = "/usr/lib/python3.11"
CODE = "/home/u/.tfcc/dist"


def work(task: str) -> str:
    return f"/home/u/.tfcc/runs/r1/{task}/work"


def dump(*threads) -> str:
    """faulthandler's dump: each thread (main: True, a thread Python started: False, one TensorFlow's runtime runs
    Python on: None; frames innermost first as (path, line, func))."""
    out = []
    for i, (main, frames) in enumerate(threads):
        out.append(f"{'Current thread' if i == 0 else 'Thread'} 0x00007f{i:010x} (most recent call first):")
        out += [f'  File "{path}", line {line} in {func}' for path, line, func in frames]
        outer = [(f"{CODE}/trainer/capture.py", 1062, "main"), (f"{CODE}/trainer/capture.py", 1071, "<module>")] \
            if main else [] if main is None else \
            [(f"{LIB}/threading.py", 982, "run"), (f"{LIB}/threading.py", 1045, "_bootstrap_inner"),
             (f"{LIB}/threading.py", 1002, "_bootstrap")]
        out += [f'  File "{path}", line {line} in {func}' for path, line, func in outer]
        out.append("")
    return "\n".join(out)


WATCHER = (False, [(f"{LIB}/threading.py", 331, "wait"), (f"{CODE}/trainer/stacks.py", 41, "_watch")])
FIT = [(f"{SITE}/tensorflow/python/eager/execute.py", 53, "quick_execute"),
       (f"{SITE}/tensorflow/python/eager/polymorphic_function/polymorphic_function.py", 833, "__call__"),
       (f"{SITE}/tensorflow/python/util/traceback_utils.py", 150, "error_handler"),
       (f"{SITE}/tf_keras/src/engine/training.py", 1807, "fit"),
       (f"{SITE}/tf_keras/src/utils/traceback_utils.py", 65, "error_handler")]
EVALUATE = [(f"{SITE}/tensorflow/python/eager/execute.py", 53, "quick_execute"),
            (f"{SITE}/tf_keras/src/engine/training.py", 2200, "evaluate"),
            (f"{SITE}/tf_keras/src/utils/traceback_utils.py", 65, "error_handler")]


def fitting(task: str, line: int = 57) -> tuple:
    return (True, FIT + [(f"{work(task)}/main.py", line, "main"), (f"{work(task)}/main.py", 90, "<module>")])


def answer(task: str, *threads, **more) -> dict:
    return {"state": "answered", "stacks": dump(*threads), "work": work(task), "code": [CODE], **more}


@pytest.fixture
def workdir(tmp_path):
    """The user's workdir on this machine: the lines' text comes from here."""
    (tmp_path / "main.py").write_text("\n" * 56 + "    model.fit(dataset, epochs=args.epochs)\n" + "\n" * 22
                                      + "    model.evaluate(val)  # the chief alone\n")
    (tmp_path / "data.py").write_text("\n" * 41 + "        release.wait()  # never set\n")
    (tmp_path / "uploader.py").write_text("\n" * 13 + "    item = pending.get()\n")
    return tmp_path


def test_a_worker_whose_generator_blocks_is_named_at_its_line_and_the_others_wait_for_it(workdir):
    """A generator TensorFlow runs (from_generator) blocks in the user's data.py: that worker is stuck there, the
    others wait for it in fit's step; tfcc's frames are folded and the path is the one in the user's workdir."""
    generator = (None, [(f"{LIB}/threading.py", 629, "wait"), (f"{work('worker-1')}/data.py", 42, "batches"),
                        (f"{SITE}/tensorflow/python/data/ops/from_generator_op.py", 198, "generator_py_func"),
                        (f"{SITE}/tensorflow/python/ops/script_ops.py", 269, "__call__")])
    report = hangs.read([
        ("worker-0", "h0", answer("worker-0", fitting("worker-0"), WATCHER)),
        ("worker-1", "h1", answer("worker-1", fitting("worker-1"), generator, WATCHER)),
        ("worker-2", "h2", answer("worker-2", fitting("worker-2"), WATCHER)),
    ], workdir, silent={"worker-1": 63.2})
    assert report.stuck == ["worker-1"] and report.places == ("data.py:42",)
    assert report.verdict == ("worker-1 is stuck in data.py:42 (`release.wait()`); worker-0 and worker-2 wait for it in "
                              "fit's step (main.py:57 `model.fit`)")
    assert report.lines == ["worker-1 is stuck in data.py:42 (`release.wait()`)",
                            "worker-0 and worker-2 wait for it in fit's step (main.py:57 `model.fit`)"]
    stack = report.stack_lines("worker-1")
    assert stack[0] == "main thread:" and stack.count("main thread:") == 1 and "  > main.py:57 in main    model.fit(dataset, epochs=args.epochs)" in stack
    assert "  > data.py:42 in batches    release.wait()" in stack
    assert "    (2 frames of tfcc's own)" in stack and "(1 thread of tfcc's own)" in stack
    assert not any("capture.py" in line or "runpy" in line or "stacks.py" in line for line in stack), stack
    assert "    tf_keras/src/engine/training.py:1807 in fit" in stack
    said = report.as_dict()  # what the history keeps and the window shows: each group with whether it is stuck
    assert said["groups"] == [{"tasks": ["worker-1"], "words": report.groups[0].words, "stuck": True},
                              {"tasks": ["worker-0", "worker-2"], "words": report.groups[1].words, "stuck": False}]
    assert [t["stack"] for t in said["tasks"]][1] == stack


def test_a_thread_of_the_users_own_that_waits_on_every_worker_is_no_cause(workdir):
    """An uploader thread that waits on its queue on every worker is where it always is: not a stuck place."""
    uploader = (False, [(f"{LIB}/queue.py", 171, "get"), ("{w}/uploader.py", 14, "run")])

    def mine(task):
        return (False, [(path.replace("{w}", work(task)), line, func) for path, line, func in uploader[1]])

    answers = [(t, "h", answer(t, fitting(t), mine(t))) for t in ("worker-0", "worker-1")]
    report = hangs.read(answers, workdir)
    assert report.stuck == [] and report.lines == ["worker-0 and worker-1 are in fit's step (main.py:57 `model.fit`)"]
    assert report.verdict == ""  # asked of a healthy run: where they are, no more
    stalled = hangs.read(answers, workdir, silent={"worker-0": 40.0})
    assert stalled.verdict == ("every task is in fit's step (main.py:57 `model.fit`): none is elsewhere in Python; the "
                               "wait is inside TensorFlow (a peer's host, the network, a native op, the input)")


def test_two_deadlocked_threads_are_both_named(workdir):
    """A callback (the main thread) and the user's uploader wait on each other's lock on worker-1 alone."""
    callback = (True, [(f"{work('worker-1')}/callbacks.py", 20, "on_train_batch_end"),
                       (f"{SITE}/tf_keras/src/callbacks.py", 300, "on_train_batch_end"),
                       (f"{SITE}/tf_keras/src/engine/training.py", 1810, "fit"),
                       (f"{work('worker-1')}/main.py", 57, "main")])
    uploader = (False, [(f"{work('worker-1')}/uploader.py", 14, "run")])
    report = hangs.read([("worker-0", "h", answer("worker-0", fitting("worker-0"))),
                         ("worker-1", "h", answer("worker-1", callback, uploader))], workdir)
    assert report.stuck == ["worker-1"] and report.places == ("callbacks.py:20", "uploader.py:14")
    assert report.lines == ["worker-1 is stuck in callbacks.py:20; its other thread waits in uploader.py:14 "
                            "(`item = pending.get()`)", "worker-0 waits for it in fit's step (main.py:57 `model.fit`)"]


def test_the_chief_alone_in_evaluate_is_a_mismatch_of_distributed_calls(workdir):
    chief = (True, EVALUATE + [(f"{work('worker-0')}/main.py", 80, "main")])
    report = hangs.read([("worker-0", "h", answer("worker-0", chief)),
                         ("worker-1", "h", answer("worker-1", fitting("worker-1", 72)))], workdir)
    assert report.mismatch and report.stuck == ["worker-0"] and report.places == ("main.py:80",)
    assert report.verdict == ("worker-0 is in evaluate (main.py:80 `model.evaluate`) while worker-1 is in fit's step "
                              "(main.py:72): every worker must make the same distributed calls, in the same order")


def test_a_stopped_task_and_a_host_that_does_not_answer_are_said_as_such(workdir):
    report = hangs.read([("worker-0", "h0", answer("worker-0", fitting("worker-0"))),
                         ("worker-1", "h1", {"state": "stopped", "pid": 4}),
                         ("worker-2", "h2", OSError("h2 does not answer (timed out)"))], workdir)
    assert report.stuck == ["worker-1", "worker-2"] and report.places == ()
    assert report.lines == ["worker-1 is stopped (SIGSTOP: a debugger, Ctrl-Z or a job scheduler froze it) and "
                            "answers no peer",
                            "worker-2 cannot be asked: its host does not answer (h2 does not answer (timed out))",
                            "worker-0 waits for them in fit's step (main.py:57 `model.fit`)"]
    assert report.stack_lines("worker-1") == [hangs.STATE_WORDS["stopped"]]


def test_a_worker_reading_a_pipe_that_gives_nothing_is_named(workdir):
    """TensorFlow's reader blocks in native code: the Python stacks are alike; the agent saw the named pipe."""
    report = hangs.read([("worker-0", "h", answer("worker-0", fitting("worker-0"))),
                         ("worker-1", "h", answer("worker-1", fitting("worker-1"), fifos=[{"path": "/data/stream.fifo", "in": "read"}]))],
                        workdir)
    assert report.stuck == ["worker-1"]
    assert report.lines == ["worker-1 is stuck reading the named pipe /data/stream.fifo, which gives nothing (fit's "
                            "step (main.py:57 `model.fit`))",
                            "worker-0 waits for it in fit's step (main.py:57 `model.fit`)"]


def test_a_coordinator_waiting_for_a_worker_that_ended_names_it():
    coordinator = (True, [(f"{SITE}/tensorflow/python/distribute/coordinator/cluster_coordinator.py", 1500, "join"),
                          (f"{work('chief-0')}/main.py", 61, "main")])
    # (a ps's server.join(), as tfcc's capture stands in for it)
    serving = (True, [(f"{LIB}/threading.py", 331, "wait"), (f"{CODE}/trainer/capture.py", 880, "join"),
                      (f"{work('ps-0')}/main.py", 30, "main")])
    report = hangs.read([("chief-0", "h", answer("chief-0", coordinator)),
                         ("worker-0", "h", {"state": "ended", "detail": "finished (exit code 0)"}),
                         ("ps-0", "h", answer("ps-0", serving))], None)
    assert report.stuck == ["chief-0", "worker-0"]  # the one that waits, and the one it waits for
    assert report.verdict == ("chief-0 waits in the coordinator's join (main.py:61) for worker-0, which has ended: "
                              "parameter-server training needs its workers until the coordinator's end")
    assert report.lines == ["chief-0 is in the coordinator's join (main.py:61)", "ps-0 serves (a server's join "
                            "(main.py:30))", "worker-0 has ended (finished (exit code 0))"]


def test_tfccs_own_trainer_is_the_code_when_it_trains():
    main = (True, [(f"{SITE}/tensorflow/python/eager/execute.py", 53, "quick_execute"),
                   (f"{SITE}/tf_keras/src/engine/training.py", 1807, "fit"),
                   (f"{CODE}/trainer/train.py", 210, "train"), (f"{CODE}/trainer/main.py", 80, "main")])
    answers = [(t, "h", {"state": "answered", "stacks": dump(main), "work": None, "code": [CODE]})
               for t in ("worker-0", "worker-1")]
    report = hangs.read(answers, None, trainer=True)
    assert report.lines == ["worker-0 and worker-1 are in fit's step (trainer/train.py:210)"], report.lines


def test_a_dump_of_garbage_or_nothing_is_read_without_error():
    report = hangs.read([("worker-0", "h", {"state": "answered", "stacks": "\x00 nonsense\nThread x\n", "work": 3,
                                             "code": "no"}),
                         ("worker-1", "h", {"state": "what"})], None)
    assert report.stuck == ["worker-1"]  # an unknown state is a task that gave no answer
    assert report.lines[0].startswith("worker-1 gave no answer")


def test_a_thread_of_the_users_own_waiting_on_one_worker_only_is_no_cause(workdir):
    """worker-0's uploader sleeps between uploads (its own line), the main threads are both in fit: nobody is stuck
    (a user's thread that waits is no hang by itself)."""
    sleeping = (False, [(f"{work('worker-0')}/uploader.py", 14, "run")])
    report = hangs.read([("worker-0", "h", answer("worker-0", fitting("worker-0"), sleeping)),
                         ("worker-1", "h", answer("worker-1", fitting("worker-1")))], workdir, silent={"worker-1": 30})
    assert report.stuck == [] and report.lines == ["worker-0 and worker-1 are in fit's step (main.py:57 `model.fit`)"]


def generating(task: str, line: int) -> tuple:
    """A thread TensorFlow runs the user's generator on, waiting at data.py's ``line``."""
    return (None, [(f"{LIB}/threading.py", 629, "wait"), (f"{work(task)}/data.py", line, "batches"),
                   (f"{SITE}/tensorflow/python/ops/script_ops.py", 269, "__call__")])


def test_of_three_workers_the_one_elsewhere_is_stuck_not_the_two_alike(workdir):
    report = hangs.read([(t, "h", answer(t, fitting(t), generating(t, line)))
                         for t, line in (("worker-0", 40), ("worker-1", 50), ("worker-2", 40))], workdir)
    assert report.stuck == ["worker-1"] and report.places == ("data.py:50",), report.lines


def test_one_look_that_a_second_does_not_confirm_names_nobody(workdir):
    """A person's ask looks twice: a generator caught once at a line (it was reading) is no hang."""
    def ask(line: int):
        return hangs.read([("worker-0", "h", answer("worker-0", fitting("worker-0"))),
                           ("worker-1", "h", answer("worker-1", fitting("worker-1"), generating("worker-1", line)))],
                          workdir)

    first = ask(42)
    assert first.stuck == ["worker-1"]
    moved = hangs.read([("worker-0", "h", answer("worker-0", fitting("worker-0"))),
                        ("worker-1", "h", answer("worker-1", fitting("worker-1"), generating("worker-1", 44)))],
                       workdir, before=first)
    assert moved.stuck == [] and moved.verdict == ""
    again = hangs.read([("worker-0", "h", answer("worker-0", fitting("worker-0"))),
                        ("worker-1", "h", answer("worker-1", fitting("worker-1"), generating("worker-1", 42)))],
                       workdir, before=first)
    assert again.stuck == ["worker-1"] and again.same(first)


def test_an_evaluator_is_a_sidecar_not_a_worker_in_another_call(workdir):
    evaluating = (True, EVALUATE + [(f"{work('evaluator-0')}/main.py", 80, "main")])
    report = hangs.read([("worker-0", "h", answer("worker-0", fitting("worker-0"))),
                         ("worker-1", "h", answer("worker-1", fitting("worker-1"))),
                         ("evaluator-0", "h", answer("evaluator-0", evaluating))], workdir, silent={"worker-0": 30})
    assert not report.mismatch and report.stuck == []
    assert report.lines == ["worker-0 and worker-1 are in fit's step (main.py:57 `model.fit`)",
                            "evaluator-0 is in evaluate (main.py:80 `model.evaluate`)"]
    ended = hangs.read([("worker-0", "h", answer("worker-0", fitting("worker-0"))),
                        ("evaluator-0", "h", {"state": "ended", "detail": "finished (exit code 0)"})], workdir)
    assert ended.stuck == [] and ended.verdict == "", ended.verdict


def test_each_stuck_task_is_its_own_line_and_many_alike_are_worded_as_many(workdir):
    report = hangs.read([("worker-0", "h", {"state": "stopped"}), ("worker-1", "h", {"state": "stopped"}),
                         ("worker-2", "h", answer("worker-2", fitting("worker-2"))),
                         ("worker-3", "h", answer("worker-3", fitting("worker-3")))], workdir)
    assert report.lines == [f"worker-0 {hangs.STATE_WORDS['stopped']}", f"worker-1 {hangs.STATE_WORDS['stopped']}",
                            "worker-2 and worker-3 wait for them in fit's step (main.py:57 `model.fit`)"]


def test_what_a_hostile_host_says_is_read_as_no_answer_and_cannot_make_it_wait(workdir):
    """Answers of the wrong types are tasks that gave no answer; a frame's path cannot make the console read outside
    the user's workdir, nor open a pipe there; a dump's long lines cost nothing."""
    import os
    import time

    outside = workdir.parent / "secret.py"  # beside the user's workdir, not in it
    outside.write_text("password = 'x'\n")
    os.mkfifo(workdir / "pipe.py")
    frames = (True, [(f"{work('worker-0')}/../secret.py", 1, "f"), (f"{work('worker-0')}/{outside}", 1, "f"),
                     (f"{work('worker-0')}/pipe.py", 1, "g"), (f"{work('worker-0')}/main.py", 57, "main")])
    started = time.monotonic()
    report = hangs.read([("worker-0", "h", answer("worker-0", frames)),
                         ("worker-1", "h", ["not", "a", "dict"]), ("worker-2", "h", {"state": ["stopped"]}),
                         ("worker-3", "h", {"state": "answered", "stacks": {"a": 1}}),
                         ("worker-4", "h", {"state": "answered", "stacks": "Thread 0x1 (most recent call first):\n"
                                            + '  File "x", line 1 in ' + " " * 200_000 + "y\n" * 50_000})],
                        workdir)
    assert time.monotonic() - started < 5
    assert "password" not in "\n".join(report.stack_lines("worker-0")), report.stack_lines("worker-0")
    assert [t.state for t in report.tasks] == ["answered", "silent", "silent", "silent", "answered"]


def test_a_pipe_read_at_one_look_only_is_one_that_gives(workdir):
    """A healthy reader of a pipe that is fed waits on it now and then: only a pipe waited on at both looks counts."""
    def ask(fifos, before=None):
        return hangs.read([("worker-0", "h", answer("worker-0", fitting("worker-0"))),
                           ("worker-1", "h", answer("worker-1", fitting("worker-1"), fifos=fifos))], workdir,
                          before=before)

    pipe = [{"path": "/data/stream.fifo", "in": "read"}]
    assert ask(pipe, before=ask([])).stuck == []
    assert ask(pipe, before=ask(pipe)).stuck == ["worker-1"]
