"""A script's workdir on a host: blobs by content, ``missing_blobs``, and each task's own ``work/``."""

from __future__ import annotations

import hashlib
import os
import sys

import pytest

from agent import protocol, runs, workdir
from console.remote.channel import AgentRequestError
from tests.helpers.waiting import wait_until

# Writes what it found in its folder to out.txt (a relative path), appends to a file it was shipped with.
TASK = """import os, sys
here = os.getcwd()
with open("out.txt", "a") as f:
    f.write(open("data/in.txt").read().upper() + " in " + here + "\\n")
with open("notes.txt", "a") as f:
    f.write("attempt " + os.environ["TFCC_ATTEMPT"] + "\\n")
print("argv1", sys.argv[1])
"""


def put_blob(home, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    folder = home / protocol.BLOBS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / sha).write_bytes(data)
    return sha


@pytest.fixture
def started(tfcc_home):
    """(run, task) of each start a test makes: each is stopped at the end."""
    made = []
    yield made
    for run_id, task in made:
        runs.stop(run_id, task, grace=0.5)


def shipped(home) -> list:
    """A small workdir as a start names it: the script, its data file, an executable helper."""
    return [["main.py", put_blob(home, TASK.encode()), False],
            ["data/in.txt", put_blob(home, b"hello"), False],
            ["bin/tool.sh", put_blob(home, b"#!/bin/sh\necho tool\n"), True],
            ["notes.txt", put_blob(home, b"shipped\n"), False]]


def start(client, started, entries, run_id="r1", task="worker-0", **extra):
    started.append((run_id, task))
    return client.call("start", run_id=run_id, task=task, workdir=entries,
                       argv=[sys.executable, "{work_dir}/main.py", "{work_dir}"], **extra)


def ended(run_id, task):
    """Whether the task ended within 30 s, its supervisor too (a relaunch waits for that)."""
    def gone() -> bool:
        state = runs.read_json(runs.task_dir(run_id, task) / "state.json") or {}
        return (runs.status(run_id, task)["phase"] != protocol.RUNNING
                and not runs.is_same_process(state.get("pid"), state.get("start_time")))

    return wait_until(gone, 30)


def test_missing_blobs_names_what_the_host_lacks_and_refuses_what_is_no_sha256(client, tfcc_home):
    have = put_blob(tfcc_home, b"here already")
    lacking = hashlib.sha256(b"not here").hexdigest()
    answer = client.call("missing_blobs", sha256=[have, lacking, lacking])
    assert answer["missing"] == [lacking] and answer["blobs"] == str(tfcc_home / "blobs")
    for bad in (have.upper(), have[:63], have + "0", have[:63] + "g", "../" + have[3:], 7, None,
                have + "\n"):
        with pytest.raises(AgentRequestError) as err:
            client.call("missing_blobs", sha256=[have, bad])
        assert err.value.code == protocol.BAD_ARGUMENT
        assert f"missing_blobs: {bad!r}"[:40] in str(err.value) and "is not a sha256 (64 lowercase" in str(err.value)
    with pytest.raises(AgentRequestError, match="missing_blobs needs a list of sha256 hex strings"):
        client.call("missing_blobs", sha256=have)


def test_a_first_start_copies_the_blobs_into_work_which_is_the_tasks_cwd(client, started, tfcc_home):
    entries = shipped(tfcc_home)
    start(client, started, entries)
    folder = runs.task_dir("r1", "worker-0")
    work = folder / "work"
    assert ended("r1", "worker-0")
    assert runs.status("r1", "worker-0")["phase"] == protocol.FINISHED, (folder / "stderr.log").read_text()
    assert (work / "out.txt").read_text() == f"HELLO in {work}\n"  # its cwd, a relative data path
    assert (folder / "stdout.log").read_text() == f"argv1 {work}\n"  # {work_dir} in argv
    for rel, sha, executable in entries:  # copies, not links: the task's writes leave the blobs alone
        copy, blob = work / rel, tfcc_home / "blobs" / sha
        assert not copy.is_symlink() and copy.stat().st_ino != blob.stat().st_ino and copy.stat().st_nlink == 1
        assert bool(copy.stat().st_mode & 0o100) == executable
    assert (work / "notes.txt").read_text() == "shipped\nattempt 1\n"
    assert (tfcc_home / "blobs" / entries[3][1]).read_text() == "shipped\n"
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_a_relaunch_keeps_work_and_what_the_task_wrote_there(client, started, tfcc_home):
    entries = shipped(tfcc_home)
    start(client, started, entries, fresh=True)
    assert ended("r1", "worker-0")
    work = runs.task_dir("r1", "worker-0") / "work"
    (work / "checkpoint").write_text("step 100")  # what a script writes by relative path
    os.unlink(tfcc_home / "blobs" / entries[0][1])  # a relaunch needs no blob: work/ is there
    start(client, started, entries)
    assert ended("r1", "worker-0")
    assert runs.status("r1", "worker-0")["phase"] == protocol.FINISHED
    assert (work / "checkpoint").read_text() == "step 100"
    assert (work / "notes.txt").read_text() == "shipped\nattempt 1\nattempt 2\n"
    assert (work / "out.txt").read_text().count("HELLO") == 2


def test_a_resume_with_the_code_as_it_is_now_updates_the_shipped_files_and_nothing_else(client, started, tfcc_home,
                                                                                       tmp_path):
    """``refresh_work``: each shipped file that differs or is missing is copied anew; what the script wrote stays,
    a file that left the workdir too; a folder of the script's own that is a link is never written through."""
    entries = shipped(tfcc_home)
    start(client, started, entries, fresh=True)
    assert ended("r1", "worker-0")
    work = runs.task_dir("r1", "worker-0") / "work"
    (work / "checkpoint").write_text("step 100")
    os.unlink(work / "data" / "in.txt")  # the script removed it: shipped again
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.rename(work / "bin", tmp_path / "bin-was")
    os.symlink(outside, work / "bin")  # the script's own link where a shipped folder was
    fixed = TASK.replace("argv1", "fixed argv1")
    now = [["main.py", put_blob(tfcc_home, fixed.encode()), False], entries[1], entries[2],
           ["extra/new.py", put_blob(tfcc_home, b"# new\n"), False]]  # notes.txt left the workdir
    reply = start(client, started, now, refresh_work=True)
    assert reply["work_refreshed"] == {"changed": ["main.py", "data/in.txt", "extra/new.py"], "count": 3,
                                       "kept": ["bin/tool.sh"]}
    assert ended("r1", "worker-0")
    assert (runs.task_dir("r1", "worker-0") / "stdout.log").read_text().endswith(f"fixed argv1 {work}\n")
    assert (work / "checkpoint").read_text() == "step 100" and (work / "extra" / "new.py").read_text() == "# new\n"
    assert (work / "notes.txt").read_text() == "shipped\nattempt 1\nattempt 2\n"  # not the workdir's now: kept
    assert list(outside.iterdir()) == []  # nothing written through the link
    assert not [p for p in work.rglob("*.tmp")]
    again = start(client, started, now, refresh_work=True)  # the same code: nothing to change
    assert again["work_refreshed"] == {"changed": [], "count": 0, "kept": ["bin/tool.sh"]}
    assert ended("r1", "worker-0")
    plain = start(client, started, now)  # a restart (no person's resume): work/ as the task left it
    assert "work_refreshed" not in plain


@pytest.mark.parametrize("entry, words", [
    (["/etc/passwd", None, False], "'/etc/passwd' is absolute"),
    (["../escape.py", None, False], "'../escape.py' has an empty, '.' or '..' part"),
    (["a/../../escape.py", None, False], "has an empty, '.' or '..' part"),
    (["a//b.py", None, False], "has an empty, '.' or '..' part"),
    (["a/./b.py", None, False], "has an empty, '.' or '..' part"),
    (["a/", None, False], "has an empty, '.' or '..' part"),
    (["", None, False], "is not a relative path"),
    (["a\0b.py", None, False], "has a NUL character"),
    ([7, None, False], "is not a relative path"),
    (["x" * 256, None, False], "is too long"),
    (["ok.py", "F" * 64, False], "is not a sha256"),
    (["ok.py", None, "yes"], "executable is true or false"),
    (["ok.py", None], "is a list of [relative path, sha256, executable] entries"),
    ("ok.py", "is a list of [relative path, sha256, executable] entries"),
])
def test_a_hostile_workdir_entry_is_refused_and_nothing_is_written(client, tfcc_home, entry, words):
    sha = put_blob(tfcc_home, b"x")
    if isinstance(entry, list):
        entry = [sha if part is None else part for part in entry]
    with pytest.raises(AgentRequestError) as err:
        client.call("start", run_id="r1", task="worker-0", argv=["true"], workdir=[["main.py", sha, False], entry])
    assert err.value.code == protocol.BAD_ARGUMENT and words in str(err.value), str(err.value)
    assert not (tfcc_home / "runs").exists()
    assert sorted(p.relative_to(tfcc_home).as_posix() for p in tfcc_home.rglob("*")) == ["blobs", f"blobs/{sha}"]


def test_a_path_named_twice_or_as_file_and_folder_is_refused(client, tfcc_home):
    sha = put_blob(tfcc_home, b"x")
    for entries in ([["a.py", sha, False], ["a.py", sha, False]],
                    [["a", sha, False], ["a/b.py", sha, False]],
                    [["a/b.py", sha, False], ["a", sha, False]]):
        with pytest.raises(AgentRequestError, match="is named twice, or both as a file and as a folder"):
            client.call("start", run_id="r1", task="worker-0", argv=["true"], workdir=entries)
    assert not (tfcc_home / "runs").exists()


def test_a_missing_blob_is_refused_before_anything_is_written(client, tfcc_home):
    have = put_blob(tfcc_home, b"x")
    lacking = hashlib.sha256(b"never uploaded").hexdigest()
    with pytest.raises(AgentRequestError) as err:
        client.call("start", run_id="r1", task="worker-0", argv=["true"],
                    workdir=[["main.py", have, False], ["lib/helper.py", lacking, False]])
    assert err.value.code == protocol.MISSING_BLOB
    assert "1 file(s) of the workdir are not on this host (the first: 'lib/helper.py'" in str(err.value)
    assert not (tfcc_home / "runs").exists()


def test_a_blob_whose_content_is_not_its_name_is_refused_and_removed(client, tfcc_home):
    sha = put_blob(tfcc_home, b"the real content")
    (tfcc_home / "blobs" / sha).write_bytes(b"changed while it was uploaded")
    with pytest.raises(AgentRequestError) as err:
        client.call("start", run_id="r1", task="worker-0", argv=["true"], workdir=[["main.py", sha, False]])
    assert err.value.code == protocol.MISSING_BLOB and "does not hold what its name says" in str(err.value)
    assert not (tfcc_home / "blobs" / sha).exists()
    folder = runs.task_dir("r1", "worker-0")
    assert not (folder / "work").exists() and not list(folder.glob(".work.*"))
    assert client.call("missing_blobs", sha256=[sha])["missing"] == [sha]  # the next upload sends it anew


def test_a_link_in_a_task_folder_named_work_is_never_written_through(tfcc_home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tfcc_home / "runs" / "r1" / "worker-0"
    folder.mkdir(parents=True)
    (folder / "work").symlink_to(outside)
    sha = put_blob(tfcc_home, b"x")
    with pytest.raises(workdir.WorkdirError, match="is not a folder; remove it"):
        workdir.materialise(tfcc_home, folder, workdir.check_entries([["main.py", sha, False]]))
    assert list(outside.iterdir()) == []
