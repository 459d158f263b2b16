"""The choice of the backup every task restores (the real relaunch: tests/trainer/test_report.py)."""

from __future__ import annotations

import numpy as np

from trainer.backup import newest_common


def test_the_newest_backup_every_task_holds_is_restored():
    # worker-1 was killed during its save of step 30: it still has 20, which worker-0 kept too.
    rows = np.array([[20.0, 30.0], [10.0, 20.0]])
    assert newest_common(rows) == 20


def test_tasks_without_a_common_backup_start_over():
    assert newest_common(np.array([[30.0, 40.0], [10.0, 20.0]])) is None
    assert newest_common(np.array([[20.0, 30.0], [-1.0, -1.0]])) is None  # a task with none (a new host)


def test_every_replica_of_a_task_is_a_row():
    # Two replicas per worker (GPUs): rows of one task repeat; padding (-1) is no backup.
    rows = np.array([[5.0, -1.0], [5.0, -1.0], [5.0, 10.0], [5.0, 10.0]])
    assert newest_common(rows) == 5
