"""The trainer under Slurm: host lists, TF_CONFIG from the SLURM_* variables, ``python -m trainer.slurm``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.config import parse_options

from trainer.tf_config import ConfigError, TaskId, parse_tf_config
from trainer.metrics import read_records
from trainer.slurm import (SlurmError, expand_hostlist, expand_tasks_per_node, parse_jobs, slurm_cluster,
                           tf_config_from_slurm)

from .conftest import THREADS

ROOT = Path(__file__).resolve().parents[2]


def slurm_env(procid: int, nodelist: str, tasks_per_node: str, num_tasks: int, **more: str) -> dict[str, str]:
    return {"SLURM_PROCID": str(procid), "SLURM_STEP_NODELIST": nodelist,
            "SLURM_STEP_TASKS_PER_NODE": tasks_per_node, "SLURM_STEP_NUM_TASKS": str(num_tasks), **more}


def clean_environ(**more: str) -> dict[str, str]:
    """This environment without TF_CONFIG or any Slurm variable of the machine the tests run on."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith(("SLURM_", "SLURMD_"))}
    env.pop("TF_USE_LEGACY_KERAS", None)
    env["PYTHONPATH"] = str(ROOT)
    env.update(THREADS)
    env.update(more)
    return env


def consecutive_free_ports() -> int:
    """A port P such that P and P + 1 are both free now (the two tasks on "localhost" take port base + k)."""
    for _ in range(100):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("0.0.0.0", 0))
            port = first.getsockname()[1]
            if port >= 65535:
                continue
            try:
                second.bind(("0.0.0.0", port + 1))
            except OSError:
                continue
            return port
    pytest.fail("found no two consecutive free ports")


# --------------------------------------------------------------------------- host lists


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("node1", ["node1"]),
        ("a,b,c", ["a", "b", "c"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("node[1,3,5]", ["node1", "node3", "node5"]),
        ("node[01-03,07],gpu-a", ["node01", "node02", "node03", "node07", "gpu-a"]),
        ("node[08-11]", ["node08", "node09", "node10", "node11"]),
        ("node[9-10]", ["node9", "node10"]),
        ("n[001-002]", ["n001", "n002"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("node[1-2]-ib,login", ["node1-ib", "node2-ib", "login"]),
        ("gpu-a,node[2,1]", ["gpu-a", "node2", "node1"]),  # Slurm's order is kept
        ("  localhost \n", ["localhost"]),
    ],
    ids=["one", "comma-list", "range", "bracket-list", "padding-and-names", "padding-across-a-decade",
         "no-padding", "wide-padding", "two-groups", "text-after-a-group", "order-kept", "surrounding-space"],
)
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "the host list is empty"),
        ("node[1-3", "has a bracket that is not closed"),
        ("node1-3]", "closes a bracket it did not open"),
        ("node[[1-2]]", "opens a bracket inside another"),
        ("node[3-1]", "has the reversed range 3-1; write it low-high (1-3)"),
        ("a,,b", "has an empty name"),
        ("a,", "has an empty name"),
        ("node[]", "a bracket holds numbers and ranges like [1-3,7]"),
        ("node[a-c]", "has [a-c]; a bracket holds numbers"),
        ("node[1-2-3]", "has [1-2-3]"),
        ("node[1-2,]", "has [1-2,]"),
        ("node[1-99999999]", "more than 65536 hosts"),
        ("node1 node2", "has a space"),
        ("node[١-٣]", "a bracket holds numbers"),
    ],
    ids=["empty", "unclosed", "unopened", "nested", "reversed", "two-commas", "trailing-comma", "empty-brackets",
         "letters", "two-dashes", "empty-bracket-item", "too-many", "space", "non-ascii-digits"],
)
def test_malformed_hostlist(text, words):
    with pytest.raises(SlurmError) as info:
        expand_hostlist(text)
    assert words in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, ConfigError)


@pytest.mark.parametrize(
    "text, counts",
    [("2", [2]), ("2(x3),1", [2, 2, 2, 1]), ("1(x2),3(x1),4", [1, 1, 3, 4]), ("16(x2)", [16, 16])],
)
def test_expand_tasks_per_node(text, counts):
    assert expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "x", "2(x)", "2(x3", "2x3", "2,,1", "0", "2(x0)", "-1", "2 (x3)", "2\n,1", "٣"])
def test_malformed_tasks_per_node(text):
    with pytest.raises(SlurmError, match="tasks per node"):
        expand_tasks_per_node(text)


# --------------------------------------------------------------------------- jobs


def test_parse_jobs():
    assert parse_jobs("chief:1,ps:1,worker:2") == {"chief": 1, "ps": 1, "worker": 2}
    assert parse_jobs(" worker : 3 ") == {"worker": 3}


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "the jobs are empty"),
        ("worker", "write each as ROLE:COUNT"),
        (":2", "write each as ROLE:COUNT"),
        ("worker:x", "give worker 'x' tasks; give a whole number from 1"),
        ("worker:0", "give worker 0 tasks"),
        ("boss:1", "unknown role 'boss'; roles are chief, ps, worker"),
        ("evaluator:1,worker:2", "name an evaluator"),
        ("chief:2,worker:1", "give the chief 2 tasks; a cluster has one chief"),
        ("worker:1,worker:2", "name worker twice"),
        ("ps:2", "have no chief or worker"),
    ],
)
def test_bad_jobs(text, words):
    with pytest.raises(SlurmError) as info:
        parse_jobs(text)
    assert words in str(info.value)


# --------------------------------------------------------------------------- TF_CONFIG from SLURM_*


def test_ranks_over_jobs_and_nodes():
    """{chief:1, ps:1, worker:2} over node[1-2], two tasks each: ranks in job-name order, port base + k per node."""
    expected_cluster = {"chief": ["node1:8888"], "ps": ["node1:8889"], "worker": ["node2:8888", "node2:8889"]}
    expected_tasks = [("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
    for rank, (role, index) in enumerate(expected_tasks):
        env = slurm_env(rank, "node[1-2]", "2(x2)", 4)
        cluster, got_role, got_index = slurm_cluster(env, {"worker": 2, "ps": 1, "chief": 1})
        assert cluster == expected_cluster and (got_role, got_index) == (role, index)
        cfg = parse_tf_config(tf_config_from_slurm(env, {"worker": 2, "ps": 1, "chief": 1}))
        assert cfg.cluster == expected_cluster and cfg.task == TaskId(role, index)
        assert cfg.address == expected_cluster[role][index]


def test_default_jobs_are_all_workers_and_ports_count_per_node():
    env = slurm_env(4, "node[01-02],gpu-a", "2(x2),1", 5)
    cfg = json.loads(tf_config_from_slurm(env, port_base=2222))
    assert cfg == {"cluster": {"worker": ["node01:2222", "node01:2223", "node02:2222", "node02:2223", "gpu-a:2222"]},
                   "task": {"type": "worker", "index": 4}}


def test_uneven_tasks_per_node():
    cluster, role, index = slurm_cluster(slurm_env(2, "a,b", "1,3", 4), {"chief": 1, "worker": 3})
    assert cluster == {"chief": ["a:8888"], "worker": ["b:8888", "b:8889", "b:8890"]}
    assert (role, index) == ("worker", 1)


def test_nodes_keep_slurms_order():
    """Not sorted as strings (the resolver would put node10 first and give node9's ranks node10's addresses)."""
    cluster, _, _ = slurm_cluster(slurm_env(0, "node[9-10]", "1(x2)", 2))
    assert cluster == {"worker": ["node9:8888", "node10:8888"]}


def test_the_node_slurm_names_is_checked():
    env = slurm_env(1, "node[1-2]", "2(x2)", 4, SLURMD_NODENAME="node1")
    assert slurm_cluster(env)[0]["worker"][1] == "node1:8889"
    env["SLURMD_NODENAME"] = "node2"  # a cyclic distribution puts rank 1 on the second node
    with pytest.raises(SlurmError, match="task rank 1 runs on node2 but Slurm's block distribution over "
                                         r"SLURM_STEP_NODELIST=node\[1-2\] puts it on node1; start the step with "
                                         "srun --distribution=block"):
        slurm_cluster(env)


def test_jobs_that_do_not_add_up():
    env = slurm_env(0, "node[1-2]", "2(x2)", 4)
    with pytest.raises(SlurmError) as info:
        tf_config_from_slurm(env, {"chief": 1, "worker": 2})
    assert str(info.value) == ("the jobs chief:1,worker:2 count 3 tasks but the Slurm step has 4 (SLURM_STEP_NUM_TASKS); "
                               "make the counts add up to 4, or start 3 tasks (srun --ntasks)")


@pytest.mark.parametrize("name", ["SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
                                  "SLURM_STEP_TASKS_PER_NODE"])
def test_missing_variable(name):
    env = slurm_env(0, "node[1-2]", "2(x2)", 4)
    del env[name]
    with pytest.raises(SlurmError) as info:
        tf_config_from_slurm(env)
    assert str(info.value).startswith(f"{name} is not set;") and "run it under srun" in str(info.value)


@pytest.mark.parametrize(
    "env, words",
    [
        (slurm_env(0, "node[1-3]", "2(x2)", 4), "SLURM_STEP_NODELIST names 3 nodes but SLURM_STEP_TASKS_PER_NODE "
                                               "counts tasks for 2"),
        (slurm_env(0, "node[1-2]", "2(x2)", 3), "SLURM_STEP_TASKS_PER_NODE counts 4 tasks but SLURM_STEP_NUM_TASKS is 3"),
        (slurm_env(4, "node[1-2]", "2(x2)", 4), "SLURM_PROCID is 4 but the step has 4 tasks (ranks 0 to 3)"),
        (slurm_env(0, "node[1-2]", "2(x2)", 4, SLURM_PROCID="first"), "SLURM_PROCID is 'first', not a whole number"),
        (slurm_env(0, "node1,node1", "1(x2)", 2), "SLURM_STEP_NODELIST names node1 twice"),
        (slurm_env(0, "node[1-2", "2(x2)", 4), "host list 'node[1-2' has a bracket that is not closed"),
    ],
    ids=["nodes-and-counts", "tasks-and-count", "rank-too-high", "rank-not-a-number", "node-twice", "bad-hostlist"],
)
def test_inconsistent_slurm_variables(env, words):
    with pytest.raises(SlurmError) as info:
        tf_config_from_slurm(env)
    assert words in str(info.value)


def test_port_base_leaves_room_for_every_task_of_a_node():
    env = slurm_env(0, "node1", "3", 3)
    assert slurm_cluster(env, port_base=65533)[0]["worker"][-1] == "node1:65535"
    with pytest.raises(SlurmError, match="port base 65534 with 3 tasks on a node needs port 65536; use a port base "
                                         "of at most 65533"):
        slurm_cluster(env, port_base=65534)


@pytest.mark.slow
def test_same_cluster_as_tensorflows_resolver():
    """Where TensorFlow's SlurmClusterResolver is right (names that sort the same as strings and as Slurm does,
    no zero padding), it gives every rank the same cluster and task; GPUs given so that it needs no nvidia-smi."""
    cases = []
    for nodelist, tasks, num, jobs, port_base in [
        ("node[1-2]", "2(x2)", 4, {"chief": 1, "ps": 1, "worker": 2}, 8888),
        ("gpu-a,node[1-3]", "1,2(x2),3", 8, None, 9000),
        ("a,b", "1,3", 4, {"worker": 3, "chief": 1}, 8888),
    ]:
        cases += [[slurm_env(rank, nodelist, tasks, num), jobs, port_base] for rank in range(num)]
    script = (
        "import json, os, sys\n"
        "import tensorflow as tf\n"
        "out = []\n"
        "for env, jobs, port_base in json.loads(sys.argv[1]):\n"
        "    os.environ.update(env)\n"
        "    r = tf.distribute.cluster_resolver.SlurmClusterResolver(jobs=jobs, port_base=port_base,\n"
        "        gpus_per_node=64, gpus_per_task=1, auto_set_gpu=False)\n"
        "    out.append([r.cluster_spec().as_dict(), r.task_type, r.task_id])\n"
        "print('RESULT ' + json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(cases)], capture_output=True, text=True,
                          timeout=180, env=clean_environ(TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][0]
    theirs = json.loads(line[len("RESULT "):])
    ours = [list(slurm_cluster(env, jobs, port_base)) for env, jobs, port_base in cases]
    assert ours == theirs


# --------------------------------------------------------------------------- the trainer's options and errors


def test_trainer_options():
    opts = parse_options(["--slurm-jobs", "chief:1,worker:3", "--port-base", "9000"])
    assert (opts.slurm_jobs, opts.port_base) == ({"chief": 1, "worker": 3}, 9000)
    opts = parse_options([])
    assert (opts.slurm_jobs, opts.port_base) == (None, 8888)
    with pytest.raises(ConfigError, match="argument --slurm-jobs: jobs 'boss:1' name the unknown role 'boss'"):
        parse_options(["--slurm-jobs", "boss:1"])
    with pytest.raises(ConfigError, match="argument --port-base: 70000: it must be from 1 to 65535"):
        parse_options(["--port-base", "70000"])


def run_trainer(tmp_path: Path, args: list[str], env: dict[str, str], timeout: float = 120):
    tmp_path.mkdir(parents=True, exist_ok=True)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "trainer", "--run-dir", str(run_dir), *args], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    metrics = run_dir / "metrics.jsonl"
    return proc, (read_records(metrics) if metrics.exists() else [])


def test_helper_with_keep_keras_leaves_the_keras_as_the_environment_chose_it(tmp_path):
    """tfcc chose each task's Keras before srun (a script that uses no Keras: the node's own): not tf-keras."""
    env = clean_environ(**slurm_env(0, "node1", "1", 1))
    proc, out, err, seen = run_helper(tmp_path, ["--keep-keras", "--", "show_env.py"], env)
    assert proc.returncode == 0, err
    assert seen["TF_USE_LEGACY_KERAS"] is None and seen["argv"] == ["show_env.py"]


@pytest.mark.parametrize(
    "variables, args, words",
    [
        ({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}, [],
         "SLURM_STEP_NODELIST is not set; Slurm sets it for each task of a job step: run it under srun"),
        (slurm_env(0, "localhost", "2", 2), ["--slurm-jobs", "chief:1,worker:2"],
         "the jobs chief:1,worker:2 count 3 tasks but the Slurm step has 2"),
        (slurm_env(0, "node[2-1]", "1(x2)", 2), [], "host list 'node[2-1]' has the reversed range 2-1"),
    ],
    ids=["step-without-its-nodelist", "jobs-do-not-add-up", "bad-hostlist"],
)
def test_trainer_refuses_a_bad_slurm_environment(tmp_path, variables, args, words):
    """Like a bad TF_CONFIG: exit 2, one error line, a failed event, before TensorFlow loads."""
    proc, records = run_trainer(tmp_path, args, clean_environ(**variables), timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfcc-trainer: error: ") and words in lines[0], proc.stderr
    assert [r["event"] for r in records] == ["failed"] and words in records[0]["error"]


def test_a_tf_config_wins_over_slurm(tmp_path):
    args = ["--slurm-jobs", "chief:1,worker:2"]  # 3 tasks in a step of 2: refused when TF_CONFIG comes from Slurm
    proc, _ = run_trainer(tmp_path / "slurm", args, clean_environ(**slurm_env(0, "localhost", "2", 2)), timeout=60)
    assert proc.returncode == 2 and "the jobs chief:1,worker:2 count 3 tasks" in proc.stderr
    broken = '{"cluster": {"worker": ["localhost:1"]}, "task": '
    env = clean_environ(**slurm_env(0, "localhost", "2", 2), TF_CONFIG=broken)
    proc, _ = run_trainer(tmp_path / "given", args, env, timeout=60)
    assert proc.returncode == 2
    assert "TF_CONFIG is not valid JSON" in proc.stderr and "Slurm" not in proc.stderr


# --------------------------------------------------------------------------- two Slurm tasks train digits


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.slow
def test_two_slurm_tasks_form_the_cluster_and_train_digits(tmp_path):
    port = consecutive_free_ports()
    procs: list[subprocess.Popen] = []
    run_dirs = [tmp_path / f"rank-{rank}" for rank in range(2)]
    try:
        for rank, run_dir in enumerate(run_dirs):
            run_dir.mkdir()
            env = clean_environ(**slurm_env(rank, "localhost", "2", 2))
            with open(run_dir / "stdout.log", "wb") as out, open(run_dir / "stderr.log", "wb") as err:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "trainer", "--run-dir", str(run_dir), "--port-base", str(port),
                     "--epochs", "2", "--backup-seconds", "60"],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=tmp_path, start_new_session=True))
        deadline = time.monotonic() + 240
        for rank, p in enumerate(procs):
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"the Slurm tasks did not finish in 240 s; rank {rank} stderr:\n"
                            + (run_dirs[rank] / "stderr.log").read_text(errors="replace")[-3000:])
    finally:
        _stop(procs)
    cluster = {"worker": [f"localhost:{port}", f"localhost:{port + 1}"]}
    for rank, (p, run_dir) in enumerate(zip(procs, run_dirs)):
        stderr = (run_dir / "stderr.log").read_text(errors="replace")
        assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{stderr[-3000:]}"
        records = read_records(run_dir / "metrics.jsonl")
        events = {r["event"]: r for r in records if r["type"] == "event"}
        assert events["launched"]["cluster"] == cluster
        assert events["launched"]["address"] == cluster["worker"][rank]
        assert events["launched"]["is_chief"] == (rank == 0)
        assert events["started"]["num_workers"] == 2 and events["started"]["num_replicas"] == 2
        assert "finished" in events
        steps = [r for r in records if r["type"] == "step"]
        assert len(steps) == 2 * events["started"]["steps_per_epoch"]
        assert {(r["task_type"], r["task_index"]) for r in steps} == {("worker", rank)}


# --------------------------------------------------------------------------- python -m trainer.slurm

SHOW_ENV = """\
import json, os, sys
with open(os.environ["SHOW_TO"], "w") as f:
    json.dump({"TF_CONFIG": os.environ.get("TF_CONFIG"), "TF_USE_LEGACY_KERAS": os.environ.get("TF_USE_LEGACY_KERAS"),
               "argv": sys.argv, "pid": os.getpid()}, f)
"""


def run_helper(tmp_path: Path, args: list[str], env: dict[str, str]):
    (tmp_path / "show_env.py").write_text(SHOW_ENV)
    shown = tmp_path / "shown.json"
    proc = subprocess.Popen([sys.executable, "-m", "trainer.slurm", *args], env=dict(env, SHOW_TO=str(shown)),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seen = json.loads(shown.read_text()) if shown.exists() else None
    return proc, out, err, seen


def test_helper_sets_tf_config_and_runs_the_script(tmp_path):
    env = clean_environ(**slurm_env(1, "node[1-2]", "1(x2)", 2))
    proc, out, err, seen = run_helper(tmp_path, ["--jobs", "chief:1,worker:1", "--port-base", "7000", "--",
                                                 "show_env.py", "--epochs", "3", "x y"], env)
    assert proc.returncode == 0, err
    assert json.loads(seen["TF_CONFIG"]) == {"cluster": {"chief": ["node1:7000"], "worker": ["node2:7000"]},
                                             "task": {"type": "worker", "index": 0}}
    assert seen["TF_USE_LEGACY_KERAS"] == "1"
    assert seen["argv"] == ["show_env.py", "--epochs", "3", "x y"]
    assert seen["pid"] == proc.pid  # the helper replaced itself: no extra process between srun and the script


def test_helper_runs_a_module_and_keeps_a_tf_config(tmp_path):
    (tmp_path / "show_module.py").write_text(SHOW_ENV)
    given = '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}'
    env = clean_environ(TF_CONFIG=given)  # no Slurm variables needed then
    proc, out, err, seen = run_helper(tmp_path, ["--", "-m", "show_module", "a"], env)
    assert proc.returncode == 0, err
    assert seen["TF_CONFIG"] == given and seen["TF_USE_LEGACY_KERAS"] == "1"
    assert seen["argv"][1:] == ["a"] and seen["argv"][0].endswith("show_module.py")


@pytest.mark.parametrize(
    "variables, args, words",
    [
        ({"SLURM_PROCID": "0"}, ["--", "show_env.py"], "SLURM_STEP_NUM_TASKS is not set; Slurm sets it for each "
                                                       "task of a job step: run it under srun"),
        ({}, ["--", "show_env.py"], "SLURM_PROCID is not set"),
        (slurm_env(0, "node[1-2]", "2(x2)", 4), ["--jobs", "chief:1,worker:1", "--", "show_env.py"],
         "the jobs chief:1,worker:1 count 2 tasks but the Slurm step has 4"),
        (slurm_env(0, "node[1-2]", "2(x2)", 4), ["--jobs", "boss:4", "--", "show_env.py"],
         "argument --jobs: jobs 'boss:4' name the unknown role 'boss'"),
        (slurm_env(0, "node[1-2]", "2(x2)", 4), ["--port-base", "http", "--", "show_env.py"],
         "argument --port-base: 'http' is not a port"),
        (slurm_env(0, "node[1-2]", "2(x2)", 4), ["--", "missing.py"], "script 'missing.py' does not exist"),
        (slurm_env(0, "node[1-2]", "2(x2)", 4), ["--"], "give the script to run after --"),
    ],
    ids=["batch-step-without-srun", "no-slurm", "jobs-do-not-add-up", "unknown-role", "bad-port", "no-such-script",
         "no-script"],
)
def test_helper_errors(tmp_path, variables, args, words):
    proc, out, err, seen = run_helper(tmp_path, args, clean_environ(**variables))
    assert proc.returncode == 2 and seen is None and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfcc-slurm: error: ") and words in lines[0], err


def test_the_helper_imports_only_the_standard_library_and_the_trainers_own_modules():
    """It runs before the user's script chooses tf-keras (TF_USE_LEGACY_KERAS must be set before TensorFlow loads)."""
    code = ("import json, sys; before = set(sys.modules); import trainer.slurm; "
            "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, timeout=60)
    loaded = set(json.loads(out.stdout))
    assert loaded - set(sys.stdlib_module_names) == {"trainer", "agent"}, loaded


def test_a_batch_scripts_own_process_is_no_slurm_task():
    """sbatch runs its script with SLURM_PROCID=0 but no job step: a trainer started there trains alone."""
    from trainer.slurm import under_slurm

    assert not under_slurm({"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"})
    assert under_slurm({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"})
    assert not under_slurm({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1"})  # srun --pty bash: alone
    assert under_slurm({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "x"})  # a damaged one is said, not ignored
    assert not under_slurm({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "TF_CONFIG": '{"cluster": {}}'})


def test_the_roles_take_the_ranks_in_their_names_order_and_the_jobs_say_them_so():
    """The one rule of roles over ranks (trainer.slurm.in_rank_order): the console's jobs, the export's run folders
    and TF_CONFIG all follow it."""
    from trainer.slurm import JOB_ROLES, format_jobs, rank_ranges, rank_roles

    assert list(JOB_ROLES) == sorted(JOB_ROLES)  # the resolver's order is the names'
    jobs = {"worker": 2, "ps": 2, "chief": 1}
    assert rank_ranges(jobs) == [("chief", 0, 1), ("ps", 1, 2), ("worker", 3, 2)]
    assert rank_roles(jobs) == ["chief", "ps", "ps", "worker", "worker"]
    assert format_jobs(jobs) == "chief:1,ps:2,worker:2" and parse_jobs(format_jobs(jobs)) == jobs
    assert rank_roles({"worker": 3}) == ["worker"] * 3 and rank_ranges({"worker": 0}) == []
    cluster, role, index = slurm_cluster(slurm_env(4, "n[1-5]", "1(x5)", 5), jobs)
    assert (role, index) == ("worker", 1) and cluster["ps"] == ["n2:8888", "n3:8888"]


@pytest.mark.parametrize("gpus, per_node, want", [
    (0, 4, ([], [])),
    (2, 1, (["--gres=gpu:2"], [])),
    (2, 2, (["--gres=gpu:4"], ["--gpu-bind=mask_gpu:0x3,0xc"])),
    (1, 3, (["--gres=gpu:3"], ["--gpu-bind=mask_gpu:0x1,0x2,0x4"])),
])
def test_each_task_of_a_node_is_bound_to_its_own_gpus(gpus, per_node, want):
    from trainer.slurm import gpu_options

    assert gpu_options(gpus, per_node) == want
