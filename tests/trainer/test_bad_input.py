"""Issue 9's bad-input battery for ``python -m trainer``: TF_CONFIG and the trainer's options.

Every refusal is exit 2 with one ``tfcc-trainer: error:`` line that says what is wrong and
what to do, no traceback, and, before TensorFlow loads (here it cannot: importing it
fails), nothing on disk but the ``failed`` event in ``<run-dir>/metrics.jsonl`` once the
options were read. Most cases call ``trainer.main.main`` in this process; a few run
``python -m trainer`` to show what the terminal shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainer
from trainer import main as trainer_main
from trainer.tf_config import make_tf_config
from trainer.metrics import read_records

from .conftest import THREADS
from tests.disk import snapshot

ROOT = Path(__file__).resolve().parents[2]
TWO = {"worker": ["localhost:23456", "localhost:23457"]}
RUN_DIR = "run"


def tf(cluster, task_type="worker", index=0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def one(address) -> str:
    return tf({"worker": [address]})


# --------------------------------------------------------------------------- helpers


def check_refusal(tmp_path: Path, before: dict, code: int, out: str, err: str, words, failed_event: bool) -> None:
    assert "Traceback" not in out + err, err
    assert code == 2, (code, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfcc-trainer: error: "), err
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    assert out == ""
    after = snapshot(tmp_path)
    metrics = f"{RUN_DIR}/metrics.jsonl"
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    if failed_event:  # the options were read: the run folder holds the failed event, and only that
        assert changed == [RUN_DIR, metrics]
        records = read_records(tmp_path / metrics)
        assert records[-1]["event"] == "failed" and all(w in records[-1]["error"] for w in words)
        assert [r["event"] for r in records] in (["failed"], ["launched", "failed"])
    else:
        assert changed == []


@pytest.fixture
def in_process(tmp_path, monkeypatch, capsys):
    """``trainer.main.main`` here, with TensorFlow made unimportable: every case must end before it loads."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("TFCC_RUN_DIR", raising=False)  # main() sets it; restored afterwards
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    monkeypatch.setitem(sys.modules, "trainer.train", None)
    monkeypatch.delattr(trainer, "train", raising=False)

    def run(args, tf_config=None):
        if tf_config is not None:
            monkeypatch.setenv("TF_CONFIG", tf_config)
        code = trainer_main.main(["--run-dir", RUN_DIR, *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


# --------------------------------------------------------------------------- TF_CONFIG

TF_CONFIGS = {
    "not-json": ('{"cluster": {"worker": ["localhost:1"]}, "task": ', ("TF_CONFIG is not valid JSON", "it should look like")),
    "a-list": ('["localhost:1"]', ('TF_CONFIG must be a JSON object with "cluster" and "task"',)),
    "no-cluster": (json.dumps({"task": {"type": "worker", "index": 0}}),
                   ('TF_CONFIG has no "cluster" object', 'add one that maps roles to "host:port" lists')),
    "empty-cluster": (tf({}), ('TF_CONFIG has no "cluster" object', "add one")),
    "no-task": (json.dumps({"cluster": TWO}), ('TF_CONFIG has no "task" object', 'add {"type": "worker"')),
    "unknown-task-type": (tf(TWO, "boss"), ("TF_CONFIG task type 'boss' is unknown", "use one of chief, worker")),
    "task-type-not-in-cluster": (tf(TWO, "chief"), ("the cluster has no 'chief' tasks", "fix the task type")),
    "index-out-of-range": (tf(TWO, "worker", 2), ("task worker:2 is out of range", "(index 0 to 1)")),
    "index-negative": (tf(TWO, "worker", -1), ("TF_CONFIG task index -1", "must be a whole number from 0")),
    "index-not-a-number": (tf(TWO, "worker", "first"), ("TF_CONFIG task index 'first'", "whole number from 0")),
    "unknown-role": (tf({"master": ["localhost:1"]}, "master"), ("unknown role 'master'", "roles are chief, worker")),
    "empty-role": (tf({"worker": []}), ("role 'worker' must be a non-empty list of \"host:port\"",)),
    "address-without-port": (one("localhost"), ("address 'localhost' has no port", 'write it as "host:port"')),
    "port-0": (one("localhost:0"), ("has port '0'", "use a number from 1 to 65535")),
    "port-70000": (one("localhost:70000"), ("has port '70000'", "use a number from 1 to 65535")),
    "port-text": (one("localhost:http"), ("has port 'http'", "use a number from 1 to 65535")),
    "address-not-text": (one(23456), ('is 23456; write each task as a "host:port" string',)),
    "address-with-semicolon": (one("10.0.0.1;reboot:2222"),
                               ("has host '10.0.0.1;reboot'", "use a host name or an IP address")),
    "address-with-space": (one("my host:2222"), ("has host 'my host'", "with no spaces")),
    "same-address-twice": (tf({"worker": ["localhost:1", "localhost:1"]}),
                           ("gives localhost:1 to both worker:0 and worker:1", "every task needs its own host:port")),
    "two-chiefs": (tf({"chief": ["localhost:1", "localhost:2"], "worker": ["localhost:3"]}),
                   ("names 2 chiefs", 'make the others "worker" tasks')),
    "only-ps": (tf({"ps": ["localhost:1"]}, "ps"), ("has no chief or worker task", 'add at least one "worker"')),
    "ps-without-chief": (tf({"worker": ["localhost:2"], "ps": ["localhost:3"]}),
                         ("parameter-server training needs exactly one chief task (the coordinator); the cluster "
                          'has 0: make one task role "chief"',)),
    "ps-without-worker": (tf({"chief": ["localhost:1"], "ps": ["localhost:3"]}, "chief"),
                          ("parameter-server training needs at least one worker task; add one",)),
    "evaluator-in-the-cluster": (tf({"worker": ["localhost:1"], "evaluator": ["localhost:2"]}, "evaluator"),
                                 ("TF_CONFIG lists an evaluator in its cluster, which the coordinator would wait for",
                                  'leave it out of "cluster"')),
    "evaluator-without-ps": (tf({"worker": ["localhost:1"]}, "evaluator"),
                             ("an evaluator evaluates the checkpoints of parameter-server training, and "
                              "parameter-server training needs exactly one chief task",)),
    "evaluator-index-1": (tf({"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3"]},
                             "evaluator", 1), ("task evaluator:1: a run has at most one evaluator, index 0",)),
}


@pytest.mark.parametrize("tf_config, words", TF_CONFIGS.values(), ids=TF_CONFIGS.keys())
def test_tf_config(tmp_path, in_process, tf_config, words):
    before = snapshot(tmp_path)
    check_refusal(tmp_path, before, *in_process([], tf_config), words, failed_event=True)


# --------------------------------------------------------------------------- options


def _folder(work: Path) -> None:
    (work / "model.py").mkdir()


def _syntax_error(work: Path) -> None:
    (work / "model.py").write_text("def build_model(:\n    pass\n")


def _not_utf8(work: Path) -> None:
    (work / "model.py").write_bytes(b"def build_model():\n    return '\xff'\n")


def _half(work: Path) -> None:
    (work / "model.py").write_text("def build_model():\n    return None\n")


def _run_dir_is_a_file(work: Path) -> None:
    (work / RUN_DIR).write_text("not a folder\n")


def _model(work: Path) -> None:
    (work / "model.py").write_text("def build_model():\n    pass\n\ndef train_dataset():\n    pass\n")


# id: (setup, args, tf_config, words, failed_event)
OPTIONS = {
    "epochs-0": (None, ["--epochs", "0"], None, ("argument --epochs: 0: it must be from 1 to 100000",), False),
    "epochs-negative": (None, ["--epochs", "-1"], None, ("--epochs", "it must be from 1 to 100000"), False),
    "epochs-10-to-the-12": (None, ["--epochs", str(10**12)], None, ("it must be from 1 to 100000",), False),
    "epochs-text": (None, ["--epochs", "five"], None, ("'five' is not a whole number", "python -m trainer --help"),
                    False),
    "learning-rate-nan": (None, ["--learning-rate", "nan"], None,
                          ("argument --learning-rate: nan: it must be a number above 0 and at most 10",), False),
    "learning-rate-inf": (None, ["--learning-rate", "inf"], None, ("inf: it must be a number above 0",), False),
    "learning-rate-0": (None, ["--learning-rate", "0"], None, ("0: it must be a number above 0",), False),
    "learning-rate-negative": (None, ["--learning-rate=-1"], None, ("-1: it must be a number above 0",), False),
    "learning-rate-100": (None, ["--learning-rate", "100"], None, ("100: it must be a number above 0 and at most 10",),
                          False),
    "backup-seconds-0": (None, ["--backup-seconds", "0"], None,
                         ("argument --backup-seconds: 0: it must be a number of seconds above 0 and at most 86400",),
                         False),
    "backup-seconds-nan": (None, ["--backup-seconds", "nan"], None, ("nan: it must be a number of seconds above 0",),
                           False),
    "backup-seconds-text": (None, ["--backup-seconds", "often"], None, ("'often' is not a number of seconds",), False),
    "per-replica-batch-0": (None, ["--per-replica-batch", "0"], None,
                            ("argument --per-replica-batch: 0: it must be from 1 to 1048576",), False),
    "per-replica-batch-huge": (None, ["--per-replica-batch", str(10**9)], None, ("it must be from 1 to 1048576",),
                               False),
    "global-batch-0": (None, ["--global-batch", "0"], None, ("argument --global-batch: 0: it must be from 1",), False),
    "steps-per-epoch-0": (None, ["--steps-per-epoch", "0"], None, ("argument --steps-per-epoch: 0: it must be from 1",),
                          False),
    "both-batches": (None, ["--per-replica-batch", "8", "--global-batch", "64"], None,
                     ("argument --global-batch: not allowed with argument --per-replica-batch",), False),
    "unknown-strategy": (None, ["--strategy", "ps"], None, ("invalid choice: 'ps'", "choose from 'auto'"), False),
    "unknown-option": (None, ["--frobnicate"], None, ("unrecognized arguments: --frobnicate", "python -m trainer --help"), False),
    "model-file-missing": (None, ["--model-file", "model.py"], None,
                           ("model file 'model.py' does not exist", "check the path"), False),
    "model-file-a-folder": (_folder, ["--model-file", "model.py"], None,
                            ("model file 'model.py' is a folder", "give the path of a .py file"), False),
    "model-file-with-digits": (_model, ["--model-file", "model.py", "--workload", "digits"], None,
                               ("--model-file goes with --workload file, not digits", "drop one of them"), False),
    "model-file-syntax-error": (_syntax_error, ["--model-file", "model.py"], None,
                                ("model file 'model.py' has a syntax error at line 1", "fix the file"), True),
    "model-file-not-utf8": (_not_utf8, ["--model-file", "model.py"], None,
                            ("model file 'model.py' is not UTF-8 text", "save it as UTF-8"), True),
    "model-file-without-train-dataset": (_half, ["--model-file", "model.py"], None,
                                         ("does not define train_dataset()", "it needs build_model()"), True),
    "mirrored-with-a-cluster": (None, ["--strategy", "mirrored"], make_tf_config(TWO, "worker", 0),
                                ("--strategy mirrored trains on one host", "use --strategy multi_worker_mirrored"), True),
    "autoshard-file-on-digits": (None, ["--autoshard", "file"], None,
                                 ("--autoshard file needs a dataset read from files", "use --autoshard auto or data"),
                                 True),
}


@pytest.mark.parametrize("setup, args, tf_config, words, failed_event", OPTIONS.values(), ids=OPTIONS.keys())
def test_option(tmp_path, in_process, setup, args, tf_config, words, failed_event):
    if setup is not None:
        setup(tmp_path)
    before = snapshot(tmp_path)
    check_refusal(tmp_path, before, *in_process(args, tf_config), words, failed_event)


def test_run_dir_that_is_a_file(tmp_path, in_process):
    _run_dir_is_a_file(tmp_path)
    before = snapshot(tmp_path)
    check_refusal(tmp_path, before, *in_process([]), ("cannot write to --run-dir", "(it is a file)",
                                                      "give a folder this user can write to"), failed_event=False)


# --------------------------------------------------------------------------- the real terminal


@pytest.fixture(scope="module")
def no_tensorflow(tmp_path_factory) -> Path:
    """A ``tensorflow`` package that refuses to load: a case that reaches TensorFlow fails at once, loudly."""
    guard = tmp_path_factory.mktemp("no-tensorflow")
    (guard / "tensorflow").mkdir()
    (guard / "tensorflow" / "__init__.py").write_text(
        'raise ImportError("the bad-input battery: this input was not refused before TensorFlow loads")\n')
    return guard


TERMINAL = {
    "tf-config-not-json": ([], "{", ("TF_CONFIG is not valid JSON",), True),
    "tf-config-ps-without-chief": ([], TF_CONFIGS["ps-without-chief"][0], TF_CONFIGS["ps-without-chief"][1], True),
    "address-with-semicolon": ([], TF_CONFIGS["address-with-semicolon"][0], TF_CONFIGS["address-with-semicolon"][1],
                               True),
    "learning-rate-nan": (["--learning-rate", "nan"], None, ("it must be a number above 0",), False),
    "run-dir-is-a-file": ([], None, ("cannot write to --run-dir", "(it is a file)"), False),
}


@pytest.mark.parametrize("args, tf_config, words, failed_event", TERMINAL.values(), ids=TERMINAL.keys())
def test_the_terminal_shows_no_traceback(request, tmp_path, no_tensorflow, args, tf_config, words, failed_event):
    if request.node.callspec.id == "run-dir-is-a-file":
        _run_dir_is_a_file(tmp_path)
    env = {**os.environ, **THREADS, "PYTHONPATH": os.pathsep.join([str(no_tensorflow), str(ROOT)])}
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    before = snapshot(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "trainer", "--run-dir", RUN_DIR, *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    check_refusal(tmp_path, before, proc.returncode, proc.stdout, proc.stderr, words, failed_event)
