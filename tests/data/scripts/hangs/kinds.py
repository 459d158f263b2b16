"""The seeded-hang scripts of this folder, one dict per kind, for tests and the bench to iterate over (README.md).

Each kind is a user's workdir, ``HERE / kind["name"]``, shipped whole: run ``script`` (a file in it) or ``module``
(``python -m``, from it) with ``args`` on tasks of the roles in ``tasks`` (tfcc names them ``worker-0``,
``worker-1``, ``chief-0``, ``ps-0``). After a few steps the task(s) in ``stuck`` stop making progress, and an ask
for stacks finds them in ``state`` ("answered": the stacks; "stopped": SIGSTOPped, no stacks).

``markers`` names the files whose ``# tfcc-test: hangs here`` line (``MARKER``) is where the stuck thread waits
(the innermost line of the user's own files in its stack); ``marker_lines(kind)`` finds their line numbers, so
nothing here hard-codes one. ``thread`` says which of the stuck task's threads is at the marker: "main", "other"
(a thread running the script's Python for TensorFlow or for the script: a generator, a py_function), "main+other"
(the deadlock: one marker each), or "none" (the wait is in TensorFlow's C++ and no Python frame of the script is
where it waits: the marker is on the line that made the dataset).

``others`` is what the other tasks' main threads do meanwhile; ``others_marker`` (chief_evaluate only) the file
whose ``# tfcc-test: others wait here`` line they are at. ``seconds`` is about how long after the run's start the
hang comes on an idle 2-core machine, TensorFlow's start included (a busy one took up to twice as long);
``others_fail_after``, where set, how many seconds after the hang the waiting tasks fail on their own (else they
wait for ever).

Standard library only: no TensorFlow, no tfcc.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
MARKER = "# tfcc-test: hangs here"
OTHERS_MARKER = "# tfcc-test: others wait here"

TWO_WORKERS = ["worker", "worker"]
PARAMETER_SERVERS = ["chief", "worker", "ps"]
IN_FIT_STEP = "fit: in the train step's all-reduce (the compiled train_function)"
IN_LOOP_STEP = "the custom loop: in train_step's all-reduce (main.py's train_step call)"

KINDS = [
    dict(name="generator_event", script="main.py", module=None, args=[], tasks=TWO_WORKERS, stuck=["worker-1"],
         state="answered", markers=["data.py"], thread="other", others=IN_FIT_STEP, seconds=4),
    dict(name="sleep_loop", script="main.py", module=None, args=[], tasks=TWO_WORKERS, stuck=["worker-1"],
         state="answered", markers=["main.py"], thread="main", others=IN_LOOP_STEP, seconds=3),
    dict(name="py_function", script="main.py", module=None, args=[], tasks=TWO_WORKERS, stuck=["worker-1"],
         state="answered", markers=["preprocess.py"], thread="other", others=IN_FIT_STEP, seconds=4),
    dict(name="socket", script="main.py", module=None, args=[], tasks=TWO_WORKERS, stuck=["worker-1"],
         state="answered", markers=["label_service.py"], thread="main", others=IN_LOOP_STEP, seconds=3),
    dict(name="chief_evaluate", script="main.py", module=None, args=[], tasks=TWO_WORKERS, stuck=["worker-0"],
         state="answered", markers=["main.py"], thread="main",
         others="the second fit, before its first step: reset_metrics' all-reduce", others_marker="main.py",
         seconds=4),
    dict(name="deadlock", script="main.py", module=None, args=[], tasks=TWO_WORKERS, stuck=["worker-1"],
         state="answered", markers=["uploader.py", "uploader.py"], thread="main+other", others=IN_FIT_STEP,
         seconds=3),
    dict(name="sigstop", script="main.py", module=None, args=[], tasks=TWO_WORKERS, stuck=["worker-1"],
         state="stopped", markers=["main.py"], thread="main", others=IN_FIT_STEP, seconds=4,
         others_fail_after=10),
    dict(name="ps_dead_worker", script="main.py", module=None, args=[], tasks=PARAMETER_SERVERS,
         stuck=["chief-0"], state="answered", markers=["main.py"], thread="main",
         others="worker-0 has exited 0 (its budget spent); ps-0 serves (server.join)", seconds=19),
    dict(name="fifo", script="main.py", module=None, args=[], tasks=TWO_WORKERS, stuck=["worker-1"],
         state="answered", markers=["main.py"], thread="none", others=IN_FIT_STEP, seconds=5),
    dict(name="workdir_module", script=None, module="trainer.task", args=[], tasks=TWO_WORKERS, stuck=["worker-1"],
         state="answered", markers=["trainer/hooks/sync.py"], thread="main", others=IN_FIT_STEP, seconds=4),
]

# The literal shape the issue asked for that fails instead of hanging (README.md, chief_evaluate).
FAILS_INSTEAD = [
    dict(name="chief_evaluate", script="mismatched.py", module=None, args=[], tasks=TWO_WORKERS,
         failed=["worker-0", "worker-1"], error="Collective instance", seconds=5),
]


def marker_lines(kind: dict, marker: str = MARKER) -> list[tuple[str, int]]:
    """Where ``marker`` is in ``kind``'s files: (path relative to its folder, 1-based line), in the files' order."""
    folder = HERE / kind["name"]
    found = []
    for rel in dict.fromkeys(kind["markers"] if marker == MARKER else [kind["others_marker"]]):
        for number, line in enumerate((folder / rel).read_text(encoding="utf-8").splitlines(), 1):
            if line.rstrip().endswith(marker):
                found.append((rel, number))
    return found
