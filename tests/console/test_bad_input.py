"""Issue 9's bad-input battery for ``tfcc``: the cluster file, the command line, run ids,
run manifests, users' model files and scripts, and the metrics files a run leaves.

Every refusal is exit 2 with one ``tfcc: error:`` line that says what is wrong and what to
do, no traceback, no error log (that is for bugs) and nothing changed on disk. No case
trains: a cluster that could start a run names a model file that is not there, so a check
that fails to fire ends in that error, not in a run. Most cases call ``console.cli.main``
in this process; a few run the real ``tfcc`` to show what the terminal shows.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

from console import cluster as cl
from tests.disk import snapshot
from tests.helpers.cli import tfcc
from trainer.tf_config import make_tf_config

TFCC = Path(sys.executable).with_name("tfcc")
STATE = "console-home"        # TFCC_CONSOLE_HOME
HOST_HOME = "host-home"       # TFCC_HOME: the local host's runs and deployed code
LOG = f"{STATE}/tfcc.log"     # the error log: written for bugs only

HOST = '[[hosts]]\nname = "local"\nlocal = true\n'
TASK = '[[tasks]]\nhost = "local"\n'
# If a bad input were let through, the run would stop at this missing file, before any deploy.
TRAP = '[training]\nmodel_file = "missing-model.py"\n'
TRAP_WORDS = "training.model_file 'missing-model.py'"
# What following a run on the local host may write: the deployed code and the agent's stderr file.
AGENT_FILES = (HOST_HOME, f"{HOST_HOME}/dist", f"{HOST_HOME}/dist/*", f"{HOST_HOME}/agent-*.err")
# What following run r1 keeps in the console's state folder: its history (console.store.cache), nothing else.
HISTORY_FILES = (f"{STATE}/runs", f"{STATE}/runs/r1", f"{STATE}/runs/r1/*")


def toml(hosts: str = HOST, tasks: str = TASK, training: str = "", trap: bool = True) -> str:
    return f"{hosts}\n{tasks}\n{TRAP if trap else '[training]'}\n{training}"


def manifest(run_id: str, cluster_text: str = HOST + TASK, addresses=("localhost:23456",)) -> str:
    """A run manifest as ``Run.write_manifest`` writes it (one local worker unless told)."""
    workers = list(addresses)
    return json.dumps({"run_id": run_id, "created": 1.0, "cluster": cluster_text,
                       "tasks": [{"name": f"worker-{i}", "host": "local",
                                  "tf_config": make_tf_config({"worker": workers}, "worker", i)}
                                 for i in range(len(workers))]}, indent=1)


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def homes(tmp_path, monkeypatch):
    """Every folder tfcc may touch lies under tmp_path; the cwd is tmp_path/work."""
    for var, name in (("TFCC_CONSOLE_HOME", STATE), ("TFCC_HOME", HOST_HOME), ("HOME", "home"),
                      ("TFCC_KNOWN_HOSTS", "known_hosts"), ("TFCC_SSH_CONFIG", "ssh_config")):
        monkeypatch.setenv(var, str(tmp_path / name))
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


def changes(before: dict, after: dict, allowed=()) -> list[str]:
    return [p for p in sorted(set(before) | set(after))
            if before.get(p) != after.get(p) and not any(fnmatch(p, pattern) for pattern in allowed)]


def assert_refused(code: int, out: str, err: str, words, usage: bool = False) -> str:
    """Exit 2, one ``tfcc: error:`` line holding ``words`` (after argparse's usage for ``usage``), no traceback."""
    assert "Traceback" not in out + err, err
    assert code == 2, (code, out, err)
    lines = err.splitlines()
    if usage:
        assert lines and lines[0].startswith("usage: tfcc"), err
        lines = lines[-1:]
    assert len(lines) == 1, err
    line = lines[0]
    # argparse names the subcommand: "tfcc run: error: ..."
    assert re.match(r"tfcc( [a-z]+)?: error: " if usage else "tfcc: error: ", line), err
    assert "unexpected" not in line, line  # a bug's wording: this input must be an error that says what to do
    for word in words:
        assert word in line, f"{word!r} not in {line!r}"
    assert out == "", out
    return line


def refused_in_process(tmp_path, capsys, argv, words, usage=False) -> str:
    before = snapshot(tmp_path)
    line = assert_refused(*tfcc(argv, capsys), words, usage)
    after = snapshot(tmp_path)
    assert LOG not in after, "a clean user error must not be logged as a bug"
    assert changes(before, after) == []
    return line


# --------------------------------------------------------------------------- the cluster file

CLUSTER_FILES = {
    "toml-syntax-error": ("[[hosts]\nname = 'a'\n", ("is not valid TOML", "line 1", "correct the file")),
    "unknown-section": (toml() + "[extra]\nx = 1\n", ("unknown section 'extra'", "sections are [[hosts]]")),
    "unknown-host-key": (toml(HOST + 'colour = "red"\n'), ("hosts[0] has unknown key 'colour'", "known keys are name")),
    "unknown-training-key": (toml(training="epoch = 3\n"), ("training has unknown key 'epoch'", "known keys are")),
    "epochs-is-text": (toml(training='epochs = "5"\n'), ("training.epochs is '5'", "it must be a")),
    "local-is-text": (toml('[[hosts]]\nname = "local"\nlocal = "yes"\n'), ("hosts[0].local is 'yes'", "it must be a")),
    "tasks-in-single-brackets": (toml(tasks='[tasks]\nhost = "local"\n'),
                                 ("tasks must be a list of [[tasks]] tables", "double brackets")),
    "host-without-name": (toml('[[hosts]]\nlocal = true\n'), ("hosts[0] needs 'name'",)),
    "no-hosts": (toml(hosts=""), ("the cluster has no hosts", "add a [[hosts]] table")),
    "no-tasks": (toml(tasks=""), ("the cluster has no tasks", "add a [[tasks]] table")),
    "duplicate-host-names": (toml(HOST + HOST), ("hosts[1].name 'local' is used twice", "must be unique")),
    "task-on-unknown-host": (toml(tasks='[[tasks]]\nhost = "nowhere"\n'),
                             ("tasks[0].host 'nowhere' is not a host of this cluster", "hosts: local")),
    "task-port-0": (toml(tasks=TASK + "port = 0\n"), ("tasks[0].port is 0", "use a number from 1 to 65535")),
    "task-port-70000": (toml(tasks=TASK + "port = 70000\n"), ("tasks[0].port is 70000", "from 1 to 65535")),
    "task-port-text": (toml(tasks=TASK + 'port = "x"\n'), ("tasks[0].port is 'x'", 'or "auto"')),
    "task-port-used-twice": (toml(tasks=(TASK + "port = 2222\n") * 2),
                             ("both use localhost:2222", "give each task on a host its own port")),
    "ssh-port-0": (toml('[[hosts]]\nname = "h"\naddress = "h1"\nport = 0\n', '[[tasks]]\nhost = "h"\n'),
                   ("hosts[0].port is 0", "use the host's SSH port, 1 to 65535")),
    "address-with-semicolon": (toml('[[hosts]]\nname = "h"\naddress = "10.0.0.1;reboot"\n', '[[tasks]]\nhost = "h"\n'),
                               ("hosts[0].address is '10.0.0.1;reboot'", "it must be a host name", "an IP address")),
    "address-with-space": (toml('[[hosts]]\nname = "h"\naddress = "my host"\n', '[[tasks]]\nhost = "h"\n'),
                           ("hosts[0].address is 'my host'", "with no spaces")),
    "address-with-port": (toml('[[hosts]]\nname = "h"\naddress = "h1:2222"\n', '[[tasks]]\nhost = "h"\n'),
                          ("hosts[0].address is 'h1:2222'", "no spaces, ports")),
    "address-with-control-char": (toml('[[hosts]]\nname = "h"\naddress = "h1\\u0007"\n', '[[tasks]]\nhost = "h"\n'),
                                  ("hosts[0].address", "must not hold control characters")),
    "empty-address": (toml('[[hosts]]\nname = "h"\naddress = ""\n', '[[tasks]]\nhost = "h"\n'),
                      ("hosts[0] (h) has no address", "set address", "or local = true")),
    "loopback-beside-remote": (toml(HOST + '[[hosts]]\nname = "h"\naddress = "10.0.0.2"\n',
                                    TASK + '[[tasks]]\nhost = "h"\n'),
                               ("host 'local' has the loopback address 'localhost'",
                                "give 'local' an address the other hosts can reach")),
    "parameter-server-without-ps": (toml(training="strategy = \"parameter_server\"\n"),
                                    ("parameter-server training needs exactly one chief task",)),
    "backup-seconds-0": (toml(training="backup_seconds = 0\n"),
                         ("training.backup_seconds is 0.0", "it must be a number of seconds above 0")),
    "backup-seconds-inf": (toml(training="backup_seconds = inf\n"), ("training.backup_seconds is inf", "above 0")),
    "backup-seconds-text": (toml(training="backup_seconds = \"often\"\n"), ("training.backup_seconds",)),
    "learning-rate-nan": (toml(training="learning_rate = nan\n"),
                          ("training.learning_rate is nan", "it must be a number above 0 and at most 10")),
    "learning-rate-inf": (toml(training="learning_rate = inf\n"), ("training.learning_rate is inf", "above 0")),
    "learning-rate-0": (toml(training="learning_rate = 0\n"), ("training.learning_rate is 0.0", "above 0")),
    "learning-rate-negative": (toml(training="learning_rate = -1\n"), ("training.learning_rate is -1.0", "above 0")),
    "learning-rate-100": (toml(training="learning_rate = 100\n"), ("training.learning_rate is 100.0", "at most 10")),
    "epochs-0": (toml(training="epochs = 0\n"), ("training.epochs is 0", "it must be from 1 to 100000")),
    "epochs-negative": (toml(training="epochs = -1\n"), ("training.epochs is -1", "from 1 to 100000")),
    "epochs-10-to-the-12": (toml(training="epochs = 1000000000000\n"),
                            ("training.epochs is 1000000000000", "from 1 to 100000")),
    "batch-0": (toml(training="per_replica_batch = 0\n"), ("training.per_replica_batch is 0", "from 1 to 1048576")),
    "batch-huge": (toml(training="per_replica_batch = 1000000000\n"),
                   ("training.per_replica_batch is 1000000000", "from 1 to 1048576")),
    "global-batch-huge": (toml(training="global_batch = 1000000000\n"),
                          ("training.global_batch is 1000000000", "from 1 to 1048576", "use per_replica_batch")),
    "both-batches": (toml(training="per_replica_batch = 8\nglobal_batch = 16\n"),
                     ("sets both per_replica_batch and global_batch", "keep one of them")),
    "unknown-strategy": (toml(training='strategy = "ps"\n'), ("training.strategy is 'ps'", "use one of auto")),
    "unknown-workload": (toml(training='workload = "mnist"\n', trap=False),
                         ("training.workload is 'mnist'", "use one of digits")),
    "model-file-and-script": (toml(training='script = "train.py"\n'),
                              ("sets both model_file and script", "keep one of them")),
    "workload-file-without-model-file": (toml(training='workload = "file"\n', trap=False),
                                         ("model_file is empty", "name your model file")),
    "two-chiefs": (toml(tasks=(TASK + 'role = "chief"\n') * 2), ("are both chief", "at most one chief")),
    "role-master": (toml(tasks=TASK + 'role = "master"\n'),
                    ("tasks[0].role is 'master'", "use one of chief, worker, ps, evaluator")),
    "evaluator-without-ps": (toml(tasks=TASK + TASK + 'role = "evaluator"\n'),
                             ("tasks[1] is an evaluator, which evaluates the checkpoints of parameter-server "
                              "training", "add a ps task and a chief, or remove the evaluator")),
    "two-evaluators": (toml(tasks=TASK + 'role = "chief"\n' + TASK + TASK + 'role = "ps"\n' + (TASK + 'role = "evaluator"\n') * 2),
                       ("tasks[3] and tasks[4] are both evaluators", "at most one evaluator")),
    "evaluator-away-from-the-chief": (
        toml('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n[[hosts]]\nname = "b"\naddress = "10.0.0.2"\n',
             '[[tasks]]\nhost = "a"\nrole = "chief"\n[[tasks]]\nhost = "a"\n[[tasks]]\nhost = "a"\nrole = "ps"\n'
             '[[tasks]]\nhost = "b"\nrole = "evaluator"\n'),
        ("tasks[3] (the evaluator) runs on host 'b', but it reads the checkpoints the chief writes in its run folder "
         "on host 'a'", "put the evaluator on the chief's host")),
    "ps-alone": (toml(tasks=TASK + 'role = "ps"\n'),
                 ("parameter-server training needs exactly one chief task (the coordinator); the cluster has 0: "
                  'make one task role = "chief" in [[tasks]]',)),
    "ps-without-worker": (toml(tasks=TASK + 'role = "ps"\n' + TASK + 'role = "chief"\n'),
                          ("parameter-server training needs at least one worker task; add one",)),
    "ps-with-mirrored": (toml(tasks=TASK + 'role = "ps"\n' + TASK + 'role = "chief"\n' + TASK,
                              training='strategy = "multi_worker_mirrored"\n'),
                         ("the cluster has ps tasks, which training.strategy 'multi_worker_mirrored' has no use for",
                          'set strategy = "parameter_server" (or "auto")')),
    "parameter-server-without-a-ps": (toml(tasks=TASK + 'role = "chief"\n' + TASK,
                                           training='strategy = "parameter_server"\n'),
                                      ("parameter-server training needs at least one ps task (it holds the "
                                       "variables); add one",)),
    "parameter-server-workers-with-different-gpus": (
        toml(tasks=TASK + 'role = "chief"\n' + TASK + "gpus = [0, 1]\n" + TASK + "gpus = [2]\n"
             + TASK + 'role = "ps"\n'),
        ("the workers of parameter-server training list different numbers of GPUs (worker-0 2, worker-1 1)",
         "give every worker task the same number of gpus")),
    "gpus-twice": (toml(tasks=TASK + "gpus = [0, 0]\n"), ("tasks[0].gpus is [0, 0]", "list distinct GPU indices")),
    "args-not-a-list": (toml(training='args = "--seed 7"\n'), ("training.args must be a list of strings",)),
    "keras4": (toml(training='script = "train.py"\nkeras = "keras4"\n', trap=False),
               ("training.keras is 'keras4'", "use one of auto, tf-keras, keras3")),
    "workdir-without-script": (toml(training='workdir = "."\n'),
                               ("training.workdir is set but training.script and training.module are empty",
                                "name the script or module")),
    "module-and-script": (toml(training='script = "train.py"\nmodule = "trainer.task"\n', trap=False),
                          ("training sets both script and module; keep one of them",
                           'module runs a package\'s module as python -m does (module = "trainer.task")')),
    "module-a-path": (toml(training='module = "../x"\n', trap=False),
                      ("training.module is '../x'", 'a module is Python names joined by dots, like "trainer.task"')),
    "module-a-file-name": (toml(training='module = "trainer/task.py"\n', trap=False),
                           ("training.module is 'trainer/task.py'", "not a path")),
    "module-not-in-the-folder-tfcc-runs-in": (
        toml(training='module = "trainer.task"\n', trap=False),
        ("training.module 'trainer.task' is not in the folder tfcc runs in", "neither trainer/task.py nor "
         "trainer/task/__main__.py is there", "set training.workdir to the folder that holds trainer/")),
    "firewall-text": (toml(training='firewall = "yes"\n'), ("training.firewall is 'yes'; it must be a bool",)),
    "firewall-number": (toml(training='firewall = 1\n'), ("training.firewall is 1; it must be a bool",)),
}


@pytest.mark.parametrize("text, words", CLUSTER_FILES.values(), ids=CLUSTER_FILES.keys())
def test_cluster_file_content(homes, capsys, text, words):
    (homes / "work" / "c.toml").write_text(text, encoding="utf-8")
    refused_in_process(homes, capsys, ["run", "c.toml"], words)


def _make_folder(path: Path) -> None:
    path.mkdir()


def _make_non_utf8(path: Path) -> None:
    path.write_bytes(HOST.encode() + b'user = "j\xf6rg"\n' + TASK.encode())


def _make_huge(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(2 << 20)  # sparse: no 2 MiB written


CLUSTER_PATHS = {
    "missing-file": (None, ("cluster file 'c.toml' does not exist", "check the path")),
    "a-folder": (_make_folder, ("cluster file 'c.toml' is a folder", "give the path of a .toml cluster file")),
    "non-utf8-bytes": (_make_non_utf8, ("is not UTF-8 text (byte", "line 4", "save it as UTF-8")),
    "huge-file": (_make_huge, ("is 2097152 bytes, too big for a cluster file", "check that it is the right file")),
}


@pytest.mark.parametrize("make, words", CLUSTER_PATHS.values(), ids=CLUSTER_PATHS.keys())
def test_cluster_file_itself(homes, capsys, make, words):
    if make is not None:
        make(homes / "work" / "c.toml")
    refused_in_process(homes, capsys, ["run", "c.toml"], words)


def test_an_ipv6_address_is_not_bad_input():
    """An IPv6 literal is a valid address; its TF_CONFIG addresses carry brackets."""
    cluster = cl.loads('[[hosts]]\nname = "h"\naddress = "fd00::7"\n[[tasks]]\nhost = "h"\nport = 2222\n')
    assert json.loads(cluster.tf_config(0))["cluster"] == {"worker": ["[fd00::7]:2222"]}


# --------------------------------------------------------------------------- the command line and run ids

RUN_ID_WORDS = ("is not a valid name", "use letters, digits")


def _trap_cluster(homes: Path) -> str:
    (homes / "work" / "c.toml").write_text(toml())
    return "c.toml"


def _decoys(homes: Path) -> None:
    """Valid-looking manifests where ``../decoy`` and ``../../decoy`` would lead from the state folder."""
    (homes / STATE / "runs").mkdir(parents=True)
    for path in (homes / STATE / "decoy.json", homes / "decoy.json"):
        path.write_text(manifest("decoy", HOST + TASK + TRAP))


def _taken(homes: Path) -> None:
    (homes / STATE / "runs").mkdir(parents=True)
    (homes / STATE / "runs" / "taken.json").write_text(manifest("taken", HOST + TASK + TRAP))


COMMAND_LINES = {
    "unknown-command": (None, ["frobnicate"], ("invalid choice: 'frobnicate'", "choose from 'run'"), True),
    "unknown-option": (None, ["run", "--frobnicate"], ("unrecognized arguments: --frobnicate",), True),
    "watchdog-not-a-number": (None, ["run", "--watchdog", "soon"],
                              ("argument --watchdog: 'soon' is not a number of seconds from 1 to 86400",), True),
    "watchdog-nan": (None, ["run", "--watchdog", "nan"],
                     ("argument --watchdog: 'nan' is not a number of seconds from 1 to 86400",), True),
    "deadline-zero": (None, ["check", "--deadline", "0"],
                      ("argument --deadline: '0' is not a number of seconds from 1 to 3600",), True),
    "deadline-huge": (None, ["check", "--deadline", "1e300"],
                      ("argument --deadline: '1e300' is not a number of seconds from 1 to 3600",), True),
    "grace-negative": (None, ["stop", "r1", "--grace", "-1"],
                       ("argument --grace: '-1' is not a number of seconds from 0 to 3600",), True),
    "delete-unknown-run": (None, ["delete", "nosuchrun"],
                           ("no run 'nosuchrun' is known to this console", "tfcc runs lists them"), False),
    "max-gb-negative": (None, ["tensorboard", "r1", "--max-gb", "-1"],
                        ("argument --max-gb: '-1' is not a number of GB from 0.001 to 4096",), True),
    "max-gb-text": (None, ["tensorboard", "r1", "--max-gb", "lots"],
                    ("argument --max-gb: 'lots' is not a number of GB from 0.001 to 4096",), True),
    "tensorboard-unknown-run": (None, ["tensorboard", "nope"],
                                ("no run 'nope' is known to this console", "tfcc runs lists them"), False),
    "bytes-negative": (None, ["logs", "r1", "--bytes", "-5"],
                       ("argument --bytes: '-5' is not a whole number from 1 to 1073741824",), True),
    "run-id-parent": (None, ["run", "{c}", "--run-id", "../x"], ("run id '../x'", *RUN_ID_WORDS), False),
    "run-id-two-levels-up": (None, ["run", "{c}", "--run-id", "../../outside"],
                             ("run id '../../outside'", *RUN_ID_WORDS), False),
    "run-id-absolute": (None, ["run", "{c}", "--run-id", "/abs"], ("run id '/abs'", *RUN_ID_WORDS), False),
    "run-id-empty": (None, ["run", "{c}", "--run-id", ""], ("run id ''", *RUN_ID_WORDS), False),
    "run-id-too-long": (None, ["run", "{c}", "--run-id", "r" * 129], ("at most 128", *RUN_ID_WORDS), False),
    "run-id-with-space": (None, ["run", "{c}", "--run-id", "my run"], ("run id 'my run'", *RUN_ID_WORDS), False),
    "run-id-with-newline": (None, ["run", "{c}", "--run-id", "a\nb"], ("run id 'a\\nb'", *RUN_ID_WORDS), False),
    "run-id-with-control-char": (None, ["run", "{c}", "--run-id", "a\x1bb"], ("run id 'a\\x1bb'", *RUN_ID_WORDS), False),
    "run-id-and-resume": (None, ["run", "{c}", "--run-id", "new", "--resume", "old"],
                          ("--run-id names a new run and --resume an existing one", "give one of them"), False),
    "run-id-that-exists": (_taken, ["run", "{c}", "--run-id", "taken"],
                           ("run taken exists already", "resume it with tfcc resume taken", "choose another --run-id"),
                           False),
    "resume-flag-unknown-run": (None, ["run", "{c}", "--resume", "nope"],
                                ("there is no run nope to resume", "tfcc runs lists"), False),
    **{f"{cmd}-unknown-run": (None, [cmd, "nope"], ("no run 'nope' is known to this console", "tfcc runs lists them"),
                              False)
       for cmd in ("attach", "stop", "logs", "resume")},
    **{f"{cmd}-traversal": (_decoys, [cmd, "../decoy"], ("run id '../decoy'", *RUN_ID_WORDS), False)
       for cmd in ("attach", "stop", "logs", "resume")},
}


@pytest.mark.parametrize("setup, argv, words, usage", COMMAND_LINES.values(), ids=COMMAND_LINES.keys())
def test_command_line(homes, capsys, setup, argv, words, usage):
    if setup is not None:
        setup(homes)
    argv = [_trap_cluster(homes) if a == "{c}" else a for a in argv]
    line = refused_in_process(homes, capsys, argv, words, usage)
    assert TRAP_WORDS not in line


def test_logs_of_an_unknown_task(homes, capsys):
    (homes / STATE / "runs").mkdir(parents=True)
    (homes / STATE / "runs" / "good.json").write_text(manifest("good"))
    refused_in_process(homes, capsys, ["logs", "good", "worker-9"],
                       ("run good has no task 'worker-9'", "its tasks are worker-0"))


# --------------------------------------------------------------------------- run manifests

DAMAGED = ("the manifest of run broken", "is damaged", "stop them there if so", "then delete the file")
MANIFESTS = {
    "truncated": (manifest("broken")[:40].encode(), "attach"),
    "empty": (b"", "stop"),
    "not-an-object": (b"[1, 2, 3]\n", "logs"),
    "missing-keys": (b'{"run_id": "broken"}\n', "resume"),
    "non-utf8": (manifest("broken").encode().replace(b'"local"', b'"l\xf6cal"'), "attach"),
    "cluster-not-toml": (json.dumps({**json.loads(manifest("broken")), "cluster": "[[hosts]\n"}).encode(), "stop"),
    "cluster-not-text": (json.dumps({**json.loads(manifest("broken")), "cluster": 5}).encode(), "attach"),
    "cluster-invalid": (json.dumps({**json.loads(manifest("broken")),
                                    "cluster": HOST + TASK + "[training]\nepochs = 0\n"}).encode(), "resume"),
    "tasks-not-matching-cluster": (manifest("broken", addresses=("localhost:1", "localhost:2")).encode(), "logs"),
    "task-not-an-object": (json.dumps({**json.loads(manifest("broken")), "tasks": ["worker-0"]}).encode(), "resume"),
    "tf-config-not-json": (json.dumps({**json.loads(manifest("broken")),
                                       "tasks": [{"name": "worker-0", "host": "local", "tf_config": "{"}]}).encode(),
                           "stop"),
    "left-not-words": (json.dumps({**json.loads(manifest("broken")),
                                   "tasks": [{**json.loads(manifest("broken"))["tasks"][0], "left": 7}]}).encode(),
                       "attach"),
    "every-task-left": (json.dumps({**json.loads(manifest("broken")),
                                    "tasks": [{**json.loads(manifest("broken"))["tasks"][0], "left": "gone"}]}).encode(),
                        "resume"),
    "resizes-not-a-list": (json.dumps({**json.loads(manifest("broken")), "resizes": "3 → 2"}).encode(), "stop"),
}


@pytest.mark.parametrize("data, command", MANIFESTS.values(), ids=MANIFESTS.keys())
def test_damaged_manifest(homes, capsys, data, command):
    (homes / STATE / "runs").mkdir(parents=True)
    (homes / STATE / "runs" / "broken.json").write_bytes(data)
    refused_in_process(homes, capsys, [command, "broken"], DAMAGED)


def _finished_run(homes: Path, run_id: str, metrics: bytes) -> None:
    """A run of one local worker that has ended (exit 0), made by hand as the agent leaves it."""
    runs = homes / STATE / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    (runs / f"{run_id}.json").write_text(manifest(run_id))
    folder = homes / HOST_HOME / "runs" / run_id / "worker-0"
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps({"run_id": run_id, "task": "worker-0", "argv": ["true"]}))
    (folder / "tf_config.json").write_text(make_tf_config({"worker": ["localhost:23456"]}, "worker", 0))
    (folder / "state.json").write_text(json.dumps({"pid": 1, "pgid": 1, "start_time": -1, "started": 1.0}))
    (folder / "exit.json").write_text(json.dumps({"returncode": 0, "ended": 2.0}))
    (folder / "metrics.jsonl").write_bytes(metrics)


def test_runs_lists_the_good_runs_beside_a_damaged_manifest(homes, capsys):
    _finished_run(homes, "a-good", b"")
    _finished_run(homes, "c-good", b"")
    (homes / STATE / "runs" / "b-broken.json").write_text(manifest("b-broken")[:40])
    before = snapshot(homes)
    code, out, err = tfcc(["runs"], capsys)
    assert "Traceback" not in out + err
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["run", "state", "start", "duration"]
    rows = [line for line in lines[1:] if not line.startswith(" ")]
    assert [r.split()[:2] for r in rows] == [["a-good", "finished"], ["b-broken", "unknown"], ["c-good", "finished"]]
    assert rows[0].endswith("local: worker-0") and rows[2].endswith("local: worker-0")
    note = lines[lines.index(rows[1]) + 1].strip()
    assert note.startswith("note: the manifest of run b-broken") and "is damaged" in note
    after = snapshot(homes)
    assert LOG not in after
    # The good runs ended while no console followed them: their ends are now in this console's history of them
    # (console.catalog.catch_up); nothing else changed, nothing of the damaged one.
    caught_up = tuple(f"{STATE}/runs{tail}" for tail in ("", "/a-good", "/a-good/*", "/c-good", "/c-good/*"))
    assert changes(before, after, AGENT_FILES + caught_up) == []
    assert json.loads((homes / STATE / "runs" / "a-good" / "summary.json").read_text())["state"] == "finished"


# --------------------------------------------------------------------------- users' model files and scripts

USER_FILES = {
    "model-file-missing": ("model_file", None, ("training.model_file 'mine/model.py'", "does not exist",
                                                 "check the path")),
    "model-file-a-folder": ("model_file", "folder", ("training.model_file 'mine/model.py'", "is not a regular file",
                                                      "give the path of a .py file")),
    "model-file-syntax-error": ("model_file", b"def build_model(:\n    pass\n",
                                ("model file 'mine/model.py' has a syntax error at line 1", "fix the file")),
    "model-file-without-train-dataset": ("model_file", b"def build_model():\n    return None\n",
                                         ("model file 'mine/model.py' does not define train_dataset()",
                                          "it needs build_model() returning a tf.keras model")),
    "model-file-not-utf8": ("model_file", b"def build_model():\n    return '\xff'\n",
                            ("model file 'mine/model.py' is not UTF-8 text", "save it as UTF-8")),
    "script-missing": ("script", None, ("training.script 'mine/model.py'", "does not exist", "check the path")),
    "script-a-folder": ("script", "folder", ("training.script 'mine/model.py'", "is not a regular file")),
    "script-syntax-error": ("script", b"print('hi'\n", ("mine/model.py", "has a syntax error at line 1",
                                                       "fix the script")),
}


@pytest.mark.parametrize("key, content, words", USER_FILES.values(), ids=USER_FILES.keys())
def test_user_file(homes, capsys, key, content, words):
    """The message names the user's own file, never the deployed copy under the host's dist/."""
    work = homes / "work"
    (work / "mine").mkdir()
    if content == "folder":
        (work / "mine" / "model.py").mkdir()
    elif content is not None:
        (work / "mine" / "model.py").write_bytes(content)
    (work / "c.toml").write_text(toml(training=f'{key} = "mine/model.py"\n', trap=False))
    line = refused_in_process(homes, capsys, ["run", "c.toml"], words)
    assert "/dist/" not in line and ".tfcc" not in line


# --------------------------------------------------------------------------- metrics files

EPOCH_OK = b'{"type": "epoch", "epoch": 0, "loss": 0.5, "time": 1.0}\n'
METRICS = {
    "garbage-line": (b"this is not json\n" + EPOCH_OK, "worker-0: epoch 1 done  loss 0.5000"),
    "truncated-last-line": (EPOCH_OK + b'{"type": "epoch", "epo', "worker-0: epoch 1 done  loss 0.5000"),
    "non-utf8-line": (b"\xff\xfe\x00garbage\n" + EPOCH_OK, "worker-0: epoch 1 done  loss 0.5000"),
    "loss-null": (b'{"type": "epoch", "epoch": 0, "loss": null, "time": 1.0}\n', "worker-0: epoch 1 done  loss nan"),
    "loss-nan": (b'{"type": "epoch", "epoch": 0, "loss": NaN, "time": 1.0}\n', "worker-0: epoch 1 done  loss nan"),
    "loss-infinity": (b'{"type": "epoch", "epoch": 0, "loss": Infinity, "time": 1.0}\n',
                      "worker-0: epoch 1 done  loss nan"),
    "record-not-an-object": (b"[1, 2]\n" + EPOCH_OK, "worker-0: epoch 1 done  loss 0.5000"),
    "record-without-type": (b'{"loss": 1.0}\n' + EPOCH_OK, "worker-0: epoch 1 done  loss 0.5000"),
    "started-without-its-fields": (b'{"type": "event", "event": "started"}\n' + EPOCH_OK,
                                   "worker-0: epoch 1 done  loss 0.5000"),
    "failed-without-a-reason": (b'{"type": "event", "event": "failed"}\n', "worker-0: FAILED: no reason given"),
    "epoch-index-a-string": (b'{"type": "epoch", "epoch": "0", "loss": 0.5}\n', "worker-0: epoch ? done  loss 0.5000"),
}


@pytest.mark.parametrize("metrics, shown", METRICS.values(), ids=METRICS.keys())
def test_following_a_damaged_metrics_file(homes, capsys, caplog, metrics, shown):
    """``tfcc attach`` on a finished run: every readable record is shown, the end is reported, nothing breaks."""
    _finished_run(homes, "r1", metrics)
    before = snapshot(homes)
    with caplog.at_level(logging.WARNING):
        code, out, err = tfcc(["attach", "r1"], capsys)
    assert "Traceback" not in out + err
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []  # no swallowed exception
    assert (code, err) == (0, "")
    assert shown in out.splitlines()
    assert out.splitlines()[-1] == "worker-0: finished (exit code 0)"
    after = snapshot(homes)
    assert LOG not in after
    assert changes(before, after, AGENT_FILES + HISTORY_FILES) == []


def _strict(constant):
    raise ValueError(f"{constant} is not JSON")


@pytest.mark.parametrize("metrics", [METRICS["loss-null"][0], METRICS["loss-nan"][0], METRICS["garbage-line"][0]],
                         ids=["loss-null", "loss-nan", "garbage-line"])
def test_attach_json_prints_only_json(homes, capsys, caplog, metrics):
    """``--json`` lines parse with a strict JSON parser (no NaN), and the loss stays visible as null."""
    _finished_run(homes, "r1", metrics)
    before = snapshot(homes)
    with caplog.at_level(logging.WARNING):
        code, out, err = tfcc(["attach", "r1", "--json"], capsys)
    assert "Traceback" not in out + err
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert (code, err) == (0, "")
    stream = [json.loads(line, parse_constant=_strict) for line in out.splitlines()]
    assert stream[-1]["type"] == "end" and stream[-1]["phase"] == "finished"
    epochs = [r for r in stream if r.get("type") == "epoch"]
    assert all(r["loss"] is None or math.isfinite(r["loss"]) for r in epochs)
    assert changes(before, snapshot(homes), AGENT_FILES + HISTORY_FILES) == []


# --------------------------------------------------------------------------- the real terminal


def _fifo(homes: Path) -> list[str]:
    os.mkfifo(homes / "work" / "c.toml")  # opening it for reading would wait for a writer forever
    return ["run", "c.toml"]


def _traversal(homes: Path) -> list[str]:
    _decoys(homes)
    return ["attach", "../decoy"]


def _damaged(homes: Path) -> list[str]:
    (homes / STATE / "runs").mkdir(parents=True)
    (homes / STATE / "runs" / "broken.json").write_text(manifest("broken")[:40])
    return ["stop", "broken"]


def _unknown_option(homes: Path) -> list[str]:
    return ["attach", "r1", "--frobnicate"]


def _metrics_not_an_object(homes: Path) -> list[str]:
    _finished_run(homes, "r1", b"[1, 2]\n" + EPOCH_OK)
    return ["attach", "r1"]


TERMINAL = {
    "fifo-cluster-file": (_fifo, 2, ("cluster file 'c.toml' is not a regular file", "give the path of a .toml file")),
    "attach-traversal": (_traversal, 2, ("run id '../decoy'", *RUN_ID_WORDS)),
    "stop-damaged-manifest": (_damaged, 2, DAMAGED),
    "unknown-option": (_unknown_option, 2, ("unrecognized arguments: --frobnicate",)),
    "attach-metrics-record-not-an-object": (_metrics_not_an_object, 0, ()),
}


@pytest.mark.parametrize("setup, expected, words", TERMINAL.values(), ids=TERMINAL.keys())
def test_the_terminal_shows_no_traceback(homes, setup, expected, words):
    argv = setup(homes)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    before = snapshot(homes)
    proc = subprocess.run([str(TFCC), *argv], cwd=homes / "work", env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    after = snapshot(homes)
    assert LOG not in after
    if expected == 0:  # following a finished run
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
        assert (proc.returncode, proc.stderr) == (0, "")
        assert proc.stdout.splitlines()[-2:] == ["worker-0: epoch 1 done  loss 0.5000", "worker-0: finished (exit code 0)"]
        assert changes(before, after, AGENT_FILES + HISTORY_FILES) == []
        return
    assert_refused(proc.returncode, proc.stdout, proc.stderr, words, usage=proc.stderr.startswith("usage:"))
    assert changes(before, after) == []


def test_a_closed_pipe_ends_the_output_quietly(homes):
    """``tfcc attach RUN --json | head -1``: once the reader has gone, no BrokenPipeError on the terminal."""
    _finished_run(homes, "r1", EPOCH_OK * 5000)  # more than a pipe holds
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([str(TFCC), "attach", "r1", "--json"], cwd=homes / "work", env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert json.loads(proc.stdout.readline())["type"] == "epoch"
        proc.stdout.close()  # as head does after its line
        assert proc.wait(timeout=60) == 0
        assert proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
