"""A resume's backups: the one the tasks resume from is copied to each training task that lacks it (real runs
over SSH: tests/console/remote/test_ssh.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.errors import RunError
from console.remote.local import LocalFiles
from console.remote.transport import CopyTooBig
from console.run.seeding import Seeding, copy_backup, plan_seeding


def status(*steps, folder: str = "/x", files=()) -> dict:
    return {"backups": list(steps), "run_dir": folder, "backup_files": list(files)}


def test_nothing_is_copied_when_the_tasks_hold_a_backup_in_common_or_none_has_one():
    assert plan_seeding({"worker-0": status(20, 30), "worker-1": status(10, 20)}) is None  # 20 in common
    assert plan_seeding({"worker-0": status(), "worker-1": status()}) is None  # a start over: nothing to lose
    assert plan_seeding({"worker-0": status(20)}) is None  # one task: nothing to agree with


def test_a_task_without_a_backup_or_a_folder_gets_the_newest():
    assert plan_seeding({"chief-0": status(20, 30), "worker-0": status(), "worker-1": None}) == \
        Seeding(30, "chief-0", ["worker-0", "worker-1"])
    # None in common: the newest goes to every task that lacks it (the task keeps its own).
    assert plan_seeding({"worker-0": status(30, 40), "worker-1": status(10, 20)}) == Seeding(40, "worker-0", ["worker-1"])


def test_only_training_tasks_count_and_a_hosts_odd_answer_is_no_backup():
    assert plan_seeding({"worker-0": status(20), "worker-1": status(20), "evaluator-0": status()}) is None
    assert plan_seeding({"worker-0": status(20), "worker-1": {"backups": ["20", True, -5, None]}}) == \
        Seeding(20, "worker-0", ["worker-1"])


def _donor(tmp_path: Path) -> Path:
    folder = tmp_path / "w0"
    (folder / "backup").mkdir(parents=True)
    for name, data in (("backup-30.index", b"i30"), ("backup-30.data-00000-of-00001", b"d30" * 1000),
                       ("backup-30.plan.json", b"{}"), ("backup-20.index", b"i20")):
        (folder / "backup" / name).write_bytes(data)
    return folder


def test_the_copy_adds_the_backup_and_keeps_the_tasks_own(tmp_path):
    donor = _donor(tmp_path)
    own = tmp_path / "w1" / "backup"
    own.mkdir(parents=True)
    (own / "backup-10.index").write_bytes(b"mine")
    files = ["backup-30.data-00000-of-00001", "backup-30.index", "backup-30.plan.json", "../../etc/passwd",
             "backup-20.index"]
    statuses = {"worker-0": status(20, 30, files=files), "worker-1": status(10), "worker-2": None}
    folders = {"worker-0": str(donor), "worker-1": str(tmp_path / "w1"), "worker-2": str(tmp_path / "w2")}
    seeding = plan_seeding(statuses)
    assert seeding == Seeding(30, "worker-0", ["worker-1", "worker-2"])
    copy_backup(seeding, statuses, folders, lambda task: LocalFiles())
    for task, own_steps in (("w1", [10]), ("w2", [])):
        got = tmp_path / task / "backup"
        assert (got / "backup-30.data-00000-of-00001").read_bytes() == b"d30" * 1000
        assert (got / "backup-30.index").read_bytes() == b"i30" and (got / "backup-30.plan.json").exists()
        assert not (got / "backup-20.index").exists()  # only the backup resumed from
        names = [f"backup-{s}" for s in [*own_steps, 30]]
        assert (got / "checkpoint").read_text() == 'model_checkpoint_path: "backup-30"\n' + "".join(
            f'all_model_checkpoint_paths: "{n}"\n' for n in names)
        assert not [p for p in got.iterdir() if p.name.endswith(".seeding")]
    assert (own / "backup-10.index").read_bytes() == b"mine"
    assert sorted(p.name for p in (donor / "backup").iterdir()) == sorted(
        ["backup-30.index", "backup-30.data-00000-of-00001", "backup-30.plan.json", "backup-20.index"])  # untouched
    assert not (tmp_path / "etc").exists()


def test_a_donor_whose_backup_is_not_whole_is_said_and_nothing_copied(tmp_path):
    donor = _donor(tmp_path)
    statuses = {"worker-0": status(30, files=["backup-30.index"]), "worker-1": status()}
    with pytest.raises(RunError, match="worker-0's backup of step 30 is not whole on its host"):
        copy_backup(plan_seeding(statuses), statuses, {"worker-0": str(donor), "worker-1": str(tmp_path / "w1")},
                    lambda task: LocalFiles())
    assert not (tmp_path / "w1").exists()


def test_a_donor_host_that_links_a_backup_file_elsewhere_or_sends_too_much_copies_nothing(tmp_path):
    """A hostile donor: a backup file that is a link to a file outside its folder, or larger than this machine
    may hold: refused, and no recipient gets anything."""
    donor = _donor(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("not a backup")
    data = donor / "backup" / "backup-30.data-00000-of-00001"
    data.unlink()
    data.symlink_to(secret)
    files = ["backup-30.data-00000-of-00001", "backup-30.index"]
    statuses = {"worker-0": status(30, files=files), "worker-1": status()}
    folders = {"worker-0": str(donor), "worker-1": str(tmp_path / "w1")}
    with pytest.raises(RunError, match="cannot copy worker-0's backup of step 30 to worker-1"):
        copy_backup(plan_seeding(statuses), statuses, folders, lambda task: LocalFiles())
    assert not (tmp_path / "w1").exists()
    with pytest.raises(CopyTooBig, match="holds 2.9 KB, more than the 1000 B tfcc may copy here"):
        data.unlink()
        data.write_bytes(b"d" * 3000)
        LocalFiles().get(str(data), tmp_path / "here", 1000)
