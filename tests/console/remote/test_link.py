"""The link to a host's agent: it starts, says why it did not, gives up in time, closes for good."""

from __future__ import annotations

import os
import stat
import sys
import threading
import time

import pytest

from console import cluster as cl
from console.remote.link import HostError, HostLink
from console.remote.transport import UnsafeHome
from tests.helpers.waiting import bound


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    return tmp_path


def crashing_python(folder) -> str:
    """An "interpreter" that dies at start with a Python error on stderr, as a broken one would."""
    path = folder / "broken-python"
    path.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                    "echo \"ImportError: cannot import name 'runs' from 'agent'\" >&2\nexit 1\n")
    path.chmod(0o755)
    return str(path)


def test_an_agent_that_dies_at_start_says_its_last_words(homes):
    """The agent's stderr is kept in a file on its host; its last line is the error (once: "channel closed")."""
    python = crashing_python(homes)
    link = HostLink(cl.Host(name="here", local=True, python=python))
    with pytest.raises(HostError) as err:
        link.connect()
    assert str(err.value) == (f"host here: the agent did not start with {python!r} (it said: ImportError: cannot "
                              "import name 'runs' from 'agent'); set python in the host's entry to a working "
                              "Python 3.9+ interpreter")
    assert not list((homes / "host-home").glob("agent-*.err")), "the file is removed once read"


def test_an_agent_that_hangs_at_start_is_given_up_on_within_the_timeout(homes):
    """An interpreter that neither answers nor reads (stuck in an import): the connect gives up after
    its timeout and closing it waits for nothing (it once waited for the process to end)."""
    path = homes / "hanging-python"
    path.write_text("#!/bin/sh\nexec sleep 600\n")
    path.chmod(0o755)
    link = HostLink(cl.Host(name="here", local=True, python=str(path)), timeout=2)
    t0 = time.monotonic()
    with pytest.raises(HostError, match=f"^host here: no answer in 2 s from the agent started with '{path}'; check "):
        link.connect()
    assert time.monotonic() - t0 < 2 + bound(10)  # not the stuck interpreter's 600 s


def test_a_connect_overtaken_by_a_drop_keeps_nothing_open(homes):
    """A detach (or the end of a check) while a host is still connecting: what that connect opens is
    closed, not left delivering a forgotten run's messages."""
    gate = homes / "go"
    slow = homes / "slow-python"  # an interpreter whose start waits until the test is done with it
    slow.write_text(f"#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.05; done\nexec {sys.executable} \"$@\"\n")
    slow.chmod(0o755)
    link = HostLink(cl.Host(name="here", local=True, python=str(slow)))
    outcome = {}

    def connect():
        try:
            outcome["client"] = link.connect()
        except HostError as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=connect)
    thread.start()
    stage = threading.Event()
    while link.stage != "starting the agent":  # the agent's interpreter is starting (until the gate opens)
        assert thread.is_alive() and not stage.wait(0.01)
    link.drop()
    gate.touch()  # the interpreter starts now, after the drop: what it opens must be closed
    thread.join(30)
    assert outcome == {"error": "host here: the connection was closed while it was being opened"}
    assert link.client is None


def test_a_home_that_cannot_be_written_says_so_not_that_python_is_wrong(homes, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", "/etc/passwd/tfcc")  # below a file: nothing can be written there
    link = HostLink(cl.Host(name="here", local=True))
    with pytest.raises(HostError) as err:
        link.connect()
    assert str(err.value) == ("host here: cannot write tfcc's code to /etc/passwd/tfcc/dist (Not a directory); "
                              "check the free disk space and the permissions there (TFCC_HOME moves it)")
    assert link.dist is None  # nothing half deployed is taken for deployed next time


@pytest.mark.parametrize("how", ["writable", "another's"])
@pytest.mark.parametrize("where", ["home", "dist"])
def test_a_home_another_user_owns_or_may_write_in_runs_no_code(homes, how, where):
    """Like OpenSSH's StrictModes: a TFCC_HOME (or its dist/) that another user owns or may write in could hold
    code planted there, which the agent would run: tfcc refuses it with one line that says what to do."""
    home = homes / "host-home"
    folder = home if where == "home" else home / "dist"
    folder.mkdir(parents=True, mode=0o700)
    if how == "writable":
        folder.chmod(0o777)
    elif os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    else:
        os.chown(folder, 65534, 65534)
    link = HostLink(cl.Host(name="here", local=True))
    with pytest.raises(UnsafeHome) as err:
        link.connect()
    said = str(err.value)
    assert said.startswith(f"host this machine: {folder} " + ("is writable by other users" if how == "writable"
                                                              else "belongs to another user"))
    assert "tfcc will not run code from it" in said and f"chmod go-w {folder}" in said and "TFCC_HOME" in said
    assert not (home / "dist").exists() or not any((home / "dist").iterdir())  # nothing deployed there


def test_what_a_run_leaves_on_its_host_and_in_the_console_is_readable_by_its_owner_only(homes):
    from tests.helpers.scripted import finished_run

    old = os.umask(0o022)  # a login's usual umask: the folders and files are private all the same
    try:
        finished_run(homes, "private", epochs=1, steps=3)
    finally:
        os.umask(old)
    for top in (homes / "host-home", homes / "console-home"):
        assert stat.S_IMODE(top.stat().st_mode) == 0o700, top
    host_side = homes / "host-home" / "runs"  # the run's folders and files: the owner's alone
    for path in [host_side, *host_side.rglob("*")]:
        assert stat.S_IMODE(path.lstat().st_mode) & 0o077 == 0, path
    kept = [p for p in (homes / "console-home").rglob("*") if p.is_file()]  # in the console's private folder
    assert kept and all(stat.S_IMODE(p.stat().st_mode) & 0o077 == 0 for p in kept), [
        (p, oct(p.stat().st_mode)) for p in kept if p.stat().st_mode & 0o077]
