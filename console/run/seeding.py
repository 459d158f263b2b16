"""A resume's backups: before every training task starts again, each has the backup the others resume from.

tfcc's trainer restores the newest backup every training task holds (trainer/backup.py), and refuses, deleting
nothing, when a task has none while others have one (a new host, a wiped or deleted run folder) or when they
have none in common. Before a resume or a group restart starts the tasks, the console copies the newest backup
(of the task that has it) into the backup folder of each training task that lacks it, through the console: from
one host's files to the other's (SFTP; a copy on this machine), a file at a time through a temporary file here,
under partial names renamed when whole. The task's own backups stay; the copy is added to its checkpoint list.

Only tfcc's trainer under MultiWorkerMirrored keeps per-task backups this way (a user's script keeps its own; the
parameter-server coordinator alone backs up).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agent.protocol import BACKUP_DIR, BACKUP_LIST, backup_list, backup_step, parse_task_name
from console.errors import RunError
from console.remote.transport import CopyTooBig
from trainer.tf_config import TRAINING_ROLES

log = logging.getLogger("console.run")

FREE_MARGIN = 1 << 30  # a copy leaves this much of this machine's temporary disk free


@dataclass
class Seeding:
    """What a resume copies: the backup of ``step`` from ``donor`` into each of ``recipients``."""

    step: int
    donor: str
    recipients: list[str]


def _steps(status: dict | None) -> set[int]:
    """A status's backups (an agent's answer: ints only)."""
    said = (status or {}).get("backups")
    if not isinstance(said, list):
        return set()
    return {s for s in said if isinstance(s, int) and not isinstance(s, bool) and s >= 0}


def plan_seeding(statuses: dict[str, dict | None], joining=frozenset()) -> Seeding | None:
    """Which backup goes where, from each training task's status (None: no run folder on its host).

    Nothing when every task already holds one backup in common, or none has any. Else the newest backup of any
    task goes to every training task that lacks it (a task without a folder too). ``joining``: tasks that rejoin
    an elastic run: what they kept from before they left is older than what the others trained since, so they
    get the others' newest backup whatever they hold (and the others keep theirs)."""
    training = {name: _steps(s) for name, s in statuses.items() if parse_task_name(name)[0] in TRAINING_ROLES}
    if len(training) < 2 or not any(training.values()):
        return None
    staying = [steps for name, steps in training.items() if name not in joining and steps]
    if joining and staying:
        newest = max(max(steps) for steps in staying)
    elif set.intersection(*training.values()):
        return None
    else:
        newest = max(max(steps) for steps in training.values() if steps)
    # A task that rejoins gets the others' copy even of a step it holds: its own may be a save the others cut short.
    recipients = sorted(name for name, steps in training.items() if newest not in steps or name in joining)
    if not recipients:
        return None
    donor = min(name for name, steps in training.items() if newest in steps and name not in joining)
    return Seeding(newest, donor, recipients)


def copy_backup(seeding: Seeding, statuses: dict[str, dict | None], folders: dict[str, str], files_of) -> None:
    """Copy the donor's backup into each recipient's backup folder. ``folders``: each task's run folder on its
    host (where its status says, or where the agent makes it); ``files_of(task)``: a ``Files`` of its host
    (closed here)."""
    donor = statuses[seeding.donor]
    names = [n for n in donor.get("backup_files") or [] if isinstance(n, str) and backup_step(n) == seeding.step]
    if not any(n.endswith(".index") for n in names) or not any(".data-" in n for n in names):
        raise RunError(f"{seeding.donor}'s backup of step {seeding.step} is not whole on its host ({len(names)} "
                       "files): there is no backup to copy to the tasks that lack one",
                       "start a new run (tfcc run)")
    names.sort(key=lambda n: n.endswith(".index"))  # the index last: a copy cut short is no backup for anyone
    opened = []

    def files(task: str):
        opened.append(files_of(task))
        return opened[-1]

    try:
        source = files(seeding.donor)
        targets = {name: files(name) for name in seeding.recipients}
        with tempfile.TemporaryDirectory(prefix="tfcc-seed-") as scratch:
            local = Path(scratch) / "file"
            for name in names:
                remote = f"{folders[seeding.donor]}/{BACKUP_DIR}/{name}"
                free = shutil.disk_usage(scratch).free
                try:
                    source.get(remote, local, max(0, free - FREE_MARGIN))
                except CopyTooBig as exc:
                    raise RunError(f"cannot copy {seeding.donor}'s backup through this machine: {exc.cause}, with "
                                   f"{free / 1e9:.1f} GB free in {tempfile.gettempdir()}",
                                   "free some space there (TMPDIR moves it), or copy the backup folder by hand "
                                   "and resume") from None
                for task, target in targets.items():
                    folder = f"{folders[task]}/{BACKUP_DIR}"
                    target.makedirs(folder)
                    target.put(local, f"{folder}/.{name}.seeding")
                    target.rename(f"{folder}/.{name}.seeding", f"{folder}/{name}")
                local.unlink()
            # Last, the checkpoint list: the task's own backups and the copy.
            for task, target in targets.items():
                folder = f"{folders[task]}/{BACKUP_DIR}"
                local.write_text(backup_list(_steps(statuses.get(task)) | {seeding.step}))
                target.put(local, f"{folder}/.{BACKUP_LIST}.seeding")
                target.rename(f"{folder}/.{BACKUP_LIST}.seeding", f"{folder}/{BACKUP_LIST}")
    except OSError as exc:
        raise RunError(f"cannot copy {seeding.donor}'s backup of step {seeding.step} to "
                       f"{', '.join(seeding.recipients)} ({exc.strerror or exc})",
                       "check the hosts' free disk and the connection, then resume again") from None
    finally:
        for each in opened:
            each.close()
    log.info("copied %s's backup of step %d to %s", seeding.donor, seeding.step, ", ".join(seeding.recipients))
