"""The agent makes a Python environment offline from pushed wheels (agent/envs.py), through its protocol too."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from agent import envs, protocol
from agent.runs import AgentError
from console.provision import uv_binary
from tests.helpers.wheels import make_wheel

SPEC, HASH = "5" * 16, "a" * 16
BASE = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # a Python without the tests'


def blob(home, path) -> str:
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    (home / protocol.BLOBS_DIR).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, home / protocol.BLOBS_DIR / sha)
    return sha


@pytest.fixture
def request_for(tfcc_home, tmp_path):
    """A make's request for wheels ``tfcctiny`` 1.0 (which needs ``tfccdep``) and ``tfccdep`` 2.0, pushed as blobs
    with the installer, as the console sends it."""
    def made(*extra, payload: int = 0) -> dict:
        wheels = [make_wheel(tmp_path / "wheels", "tfcctiny", "1.0", ["tfccdep==2.0"], payload=payload),
                  make_wheel(tmp_path / "wheels", "tfccdep", "2.0"), *extra]
        return {"spec": SPEC, "hash": HASH, "wheels": [[w.name, blob(tfcc_home, w)] for w in wheels],
                "uv": blob(tfcc_home, uv_binary()), "need_bytes": 1000, "python": BASE}
    return made


def test_a_make_installs_exactly_the_wheels_and_a_second_does_nothing(tfcc_home, request_for):
    said = []
    env = envs.make(tfcc_home, request_for(), lambda stage, **more: said.append((stage, more)), lambda: False)
    assert said == [(s, {"packages": 2}) for s in protocol.ENV_STAGES[1:]]  # nothing to download: all pushed
    assert env["made"] is True and env["packages"] == {"tfcctiny": "1.0", "tfccdep": "2.0"}
    assert env["path"] == str(tfcc_home / "envs" / HASH) and env["spec"] == SPEC and env["hash"] == HASH
    ran = subprocess.run([env["python"], "-c", "import tfcctiny, tfccdep, sys; print(tfcctiny.__version__, "
                          "sys.prefix)"], capture_output=True, text=True, check=True)
    assert ran.stdout.split() == ["1.0", str(tfcc_home / "envs" / HASH)]
    # Nothing else in it (no pip, no setuptools), and nothing of the make left beside it.
    assert envs.packages_in(tfcc_home / "envs" / HASH) == {"tfcctiny": "1.0", "tfccdep": "2.0"}
    assert sorted(p.name for p in (tfcc_home / "envs").iterdir()) == [f".{HASH}.lock", HASH,
                                                                       envs._pointer(tfcc_home, SPEC).name]
    assert envs.find(tfcc_home, SPEC)["python"] == env["python"]
    again = envs.make(tfcc_home, request_for(), lambda *a, **k: pytest.fail("a second make did something"),
                      lambda: False)
    assert again["made"] is False and again["packages"] == env["packages"]


def test_a_start_runs_in_the_environment_where_it_is_made(tfcc_home, request_for):
    assert envs.python_for(tfcc_home, {"spec": SPEC, "required": False}) is None  # not made: the host's own
    with pytest.raises(AgentError, match="not made on this host yet; make it ready") as refused:
        envs.python_for(tfcc_home, {"spec": SPEC, "required": True})
    assert refused.value.code == protocol.NO_ENVIRONMENT
    env = envs.make(tfcc_home, request_for(), lambda *a, **k: None, lambda: False)
    assert envs.python_for(tfcc_home, {"spec": SPEC, "required": True}) == env["python"]


def test_a_make_that_does_not_fit_is_refused_before_anything_is_written(tfcc_home, request_for):
    asked = request_for()
    asked["need_bytes"] = shutil.disk_usage(tfcc_home).free * 2
    with pytest.raises(AgentError, match=r"free in .*envs, the environment needs .*: free space there") as refused:
        envs.make(tfcc_home, asked, lambda *a, **k: None, lambda: False)
    assert refused.value.code == protocol.NO_SPACE
    assert list((tfcc_home / "envs").iterdir()) == []


def test_a_cancelled_make_leaves_nothing_and_the_next_one_makes_it(tfcc_home, request_for):
    asked = request_for(payload=30 << 20)
    installing = threading.Event()

    def said(stage, **more):
        if stage == protocol.ENV_INSTALLING:
            installing.set()

    with pytest.raises(envs.Cancelled):
        envs.make(tfcc_home, asked, said, installing.is_set)
    assert installing.is_set()
    assert envs.find(tfcc_home, SPEC) is None
    assert sorted(p.name for p in (tfcc_home / "envs").iterdir()) == [f".{HASH}.lock"]
    assert envs.make(tfcc_home, asked, lambda *a, **k: None, lambda: False)["made"] is True


def test_what_a_killed_make_left_is_removed_by_the_next(tfcc_home, request_for):
    folder = tfcc_home / "envs"
    folder.mkdir(parents=True)
    left = folder / f".{HASH}.0123456789ab.tmp"
    (left / "bin").mkdir(parents=True)
    (left / "bin" / "python").symlink_to(BASE)  # a venv half made: no marker, never found
    envs._pointer(tfcc_home, SPEC).write_text(HASH + "\n")
    assert envs.find(tfcc_home, SPEC) is None
    envs.make(tfcc_home, request_for(), lambda *a, **k: None, lambda: False)
    assert not left.exists() and envs.find(tfcc_home, SPEC) is not None


def test_the_installer_reads_none_of_this_hosts_pip_or_uv_settings(monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://example.invalid/simple")
    monkeypatch.setenv("UV_FIND_LINKS", "/elsewhere")
    monkeypatch.setenv("VIRTUAL_ENV", "/some/venv")
    monkeypatch.setenv("PYTHONPATH", "/some/path")
    env = envs._installer_env()
    assert not {"PIP_INDEX_URL", "UV_FIND_LINKS", "VIRTUAL_ENV", "PYTHONPATH"} & set(env)
    assert env["PATH"] == os.environ["PATH"]


@pytest.mark.parametrize("wheels, words", [
    ([["../../etc/passwd.whl", "0" * 64]], "not a wheel's file name"),
    ([["a-1.0-py3-none-any.whl", "0" * 64], ["A-2.0-py3-none-any.whl", "1" * 64]], "two wheels of a"),
    ([["a-1.0-py3-none-any.whl", "XYZ"]], "not a sha256"),
    ("a.whl", "a list of 1 to"),
])
def test_hostile_wheel_lists_are_refused(tfcc_home, wheels, words):
    with pytest.raises(AgentError, match=words):
        envs.make(tfcc_home, {"spec": SPEC, "hash": HASH, "wheels": wheels, "uv": "0" * 64},
                  lambda *a, **k: None, lambda: False)


def test_the_platform_says_what_decides_the_wheels():
    facts = envs.platform_facts()
    assert facts["system"] == "linux" and facts["machine"] == os.uname().machine.lower()
    assert facts["libc"] == "glibc" and facts["libc_version"].split(".")[0] == "2"
    assert facts["python"] == ".".join(map(str, sys.version_info[:3])) and facts["implementation"] == "cpython"


def test_the_protocol_streams_a_make_and_a_probe_reads_the_environments_versions(client, tfcc_home, request_for):
    messages, done = [], threading.Event()

    def on_message(message):
        messages.append(message)
        if message.get("type") == protocol.END:
            done.set()

    status = client.call(protocol.ENV_STATUS, spec=SPEC)
    assert status["env"] is None and status["disk_free_bytes"] > 0 and status["platform"]["libc"] == "glibc"
    follow = client.stream(protocol.ENV_MAKE, on_message, **request_for())
    assert done.wait(60) and follow.error is None
    assert [m["stage"] for m in messages[:-1]] == list(protocol.ENV_STAGES[1:])
    assert messages[-1]["env"]["packages"] == {"tfcctiny": "1.0", "tfccdep": "2.0"}
    probe = client.call(protocol.PROBE, python_env={"spec": SPEC, "required": True},
                        modules=["tfcctiny", "json", "nothere", "yaml"])
    assert probe["python_executable"] == messages[-1]["env"]["python"] and probe["env"]["hash"] == HASH
    # The environment's own packages and Python's: not what the agent's interpreter has beside (PyYAML, here).
    assert probe["missing_modules"] == ["nothere", "yaml"]
    assert json.loads((tfcc_home / "envs" / HASH / protocol.ENV_MARKER).read_text())["packages"]["tfccdep"] == "2.0"
    assert client.call(protocol.ENV_STATUS, spec=SPEC)["env"]["hash"] == HASH


def test_a_refused_make_through_the_protocol_says_why_with_its_code(client, tfcc_home, request_for):
    asked = {**request_for(), "need_bytes": 1 << 62}
    follow = client.stream(protocol.ENV_MAKE, lambda m: None, **asked)
    assert follow.done.wait(30)
    assert follow.code == protocol.NO_SPACE and "free space there" in follow.error


def test_a_make_removes_what_killed_makes_of_other_environments_left_unless_one_is_building(tfcc_home, request_for):
    folder = tfcc_home / "envs"
    folder.mkdir(parents=True)
    other, building = "b" * 16, "c" * 16
    left = [folder / f".{other}.0123456789ab.tmp", folder / f".{other}.0123456789ab.wheels"]
    busy = folder / f".{building}.0123456789ab.tmp"
    for path in [*left, busy]:
        path.mkdir()
    import fcntl

    held = os.open(folder / f".{building}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # a make of that one is under way
    try:
        envs.make(tfcc_home, request_for(), lambda *a, **k: None, lambda: False)
    finally:
        os.close(held)
    assert not any(p.exists() for p in left) and busy.exists()


def test_a_home_has_one_name_whichever_host_asks(tfcc_home):
    first = envs.home_id(tfcc_home)
    assert len(first) == 32 and envs.home_id(tfcc_home) == first
    assert envs.status(tfcc_home, None)["home_id"] == first


def test_an_environment_whose_python_is_gone_is_made_anew(tfcc_home, request_for, tmp_path):
    base = tmp_path / "python3"
    base.symlink_to(os.path.realpath(BASE))  # a Python the host will lose (an upgrade removed it)
    asked = {**request_for(), "python": str(base)}
    envs.make(tfcc_home, asked, lambda *a, **k: None, lambda: False)
    base.unlink()
    assert envs.find(tfcc_home, SPEC) is None  # its bin/python points nowhere: not found, never used
    base.symlink_to(os.path.realpath(BASE))
    os.unlink(tfcc_home / "envs" / HASH / "bin" / "python")
    again = envs.make(tfcc_home, asked, lambda *a, **k: None, lambda: False)
    assert again["made"] is True and envs.find(tfcc_home, SPEC)["python"] == again["python"]


def test_hosts_that_share_a_home_each_find_the_environment_made_for_their_own_python(tfcc_home, request_for,
                                                                                     monkeypatch):
    env = envs.make(tfcc_home, request_for(), lambda *a, **k: None, lambda: False)
    assert envs.find(tfcc_home, SPEC)["python"] == env["python"]
    monkeypatch.setattr(sys, "executable", "/opt/another/bin/python3")  # another host's Python, the same home
    assert envs.find(tfcc_home, SPEC) is None
    assert envs.python_for(tfcc_home, {"spec": SPEC, "required": False}) is None
