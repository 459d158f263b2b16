"""TF_CONFIG validation and the trainer's options (no TensorFlow)."""

import json
import subprocess
import sys

import pytest

from trainer.config import parse_options

from trainer.tf_config import ConfigError, TaskId, make_tf_config, parse_tf_config

TWO = {"worker": ["a:1000", "b:1000"]}


def tf_config(cluster, ttype="worker", index=0):
    return json.dumps({"cluster": cluster, "task": {"type": ttype, "index": index}})


def test_no_tf_config_is_one_process():
    cfg = parse_tf_config(None)
    assert not cfg.is_distributed
    assert cfg.num_workers == 1 and cfg.is_chief and cfg.port is None


def test_valid_tf_config_roundtrip():
    cfg = parse_tf_config(make_tf_config({"chief": ["c:1"], "worker": ["w:2", "w:3"]}, "worker", 1))
    assert cfg.task == TaskId("worker", 1)
    assert cfg.num_workers == 3
    assert cfg.chief == TaskId("chief", 0) and not cfg.is_chief
    assert cfg.worker_rank == 2 and cfg.address == "w:3" and cfg.port == 3


def test_worker_zero_is_chief_without_chief_task():
    assert parse_tf_config(tf_config(TWO, "worker", 0)).is_chief
    assert not parse_tf_config(tf_config(TWO, "worker", 1)).is_chief


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"cluster": {"worker": ["a:1"]', "TF_CONFIG is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"task": {"type": "worker", "index": 0}}', 'no "cluster" object'),
        ('{"cluster": {"worker": ["a:1"]}}', 'no "task" object'),
        (tf_config({"master": ["a:1"]}), "unknown role 'master'; roles are chief, worker, ps, evaluator"),
        (tf_config(TWO, "worker", 2), "task worker:2 is out of range: the cluster has 2 worker tasks (index 0 to 1)"),
        (tf_config(TWO, "worker", -1), "task index -1 must be a whole number"),
        (tf_config(TWO, "chief", 0), "the cluster has no 'chief' tasks"),
        (tf_config(TWO, "boss", 0), "task type 'boss' is unknown"),
        (tf_config({"chief": ["a:1", "b:1"], "worker": ["c:1"]}), "names 2 chiefs; a cluster has at most one chief"),
        (tf_config({"worker": ["a:1", "a:1"]}), "gives a:1 to both worker:0 and worker:1"),
        (tf_config({"worker": ["localhost"]}), "address 'localhost' has no port"),
        (tf_config({"worker": ["a:99999"]}), "use a number from 1 to 65535"),
        (tf_config({"worker": []}), "must be a non-empty list"),
        (tf_config({"ps": ["a:1"]}, "ps", 0), "no chief or worker task"),
    ],
)
def test_bad_tf_config_says_what_is_wrong(text, expected):
    with pytest.raises(ConfigError) as err:
        parse_tf_config(text)
    assert expected in str(err.value)


def test_option_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        parse_options(["--model-file", str(tmp_path / "nope.py")])
    with pytest.raises(ConfigError, match="--model-file goes with --workload file"):
        (tmp_path / "m.py").write_text("")
        parse_options(["--workload", "digits", "--model-file", str(tmp_path / "m.py")])
    with pytest.raises(ConfigError, match="'abc' is not a whole number"):
        parse_options(["--epochs", "abc"])
    with pytest.raises(ConfigError, match="not allowed with argument"):
        parse_options(["--per-replica-batch", "8", "--global-batch", "64"])
    assert parse_options(["--global-batch", "64"]).global_batch == 64


def test_importing_trainer_loads_no_tensorflow():
    """tf-keras must be selected before TensorFlow loads, and users' scripts import TF themselves."""
    code = "import sys, trainer, trainer.main, trainer.config, trainer.plan, trainer.workloads, trainer.metrics; " \
           "print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
