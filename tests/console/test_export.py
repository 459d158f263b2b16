"""``tfcc export``: launch scripts that train by hand, an sbatch script under a stand-in ``srun``, TFJob
manifests that the Training Operator's CRD schema accepts, and refused input that changes nothing."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent.runs import free_ports
from console import cluster as cl
from console import export
from tests.disk import snapshot
from tests.helpers.cli import tfcc
from tests.helpers.waiting import wait_until
from tests.trainer.conftest import THREADS
from trainer.metrics import read_records
from trainer.tf_config import TaskId, parse_tf_config

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "tests" / "data" / "kubeflow.org_tfjobs.v1.9.4.yaml"
MODEL_FILE = ROOT / "tests" / "trainer" / "data" / "idmodel.py"
RUN_TIMEOUT = 300  # seconds a launch script may take to train (a quiet machine needs ~15)


def cluster_of(text: str) -> cl.Cluster:
    return cl.loads(text)


@pytest.fixture
def homes(tmp_path, monkeypatch):
    """The console's folders under tmp_path (an unexpected error would write its log there)."""
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    return tmp_path


def run_script(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = RUN_TIMEOUT
               ) -> subprocess.CompletedProcess:
    """Run an exported script in its own session; on timeout kill it and every task it started."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{argv} did not end in {timeout} s:\n{out[-2000:]}\n{err[-2000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything it left behind
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def task_env(**extra: str) -> dict[str, str]:
    """The environment a person's shell would have: the project's trainer on PYTHONPATH, small thread pools."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFCC_", "TF_CONFIG", "SLURM_"))
           and k != "TF_USE_LEGACY_KERAS"}
    env.update(THREADS, PYTHONPATH=str(ROOT), **extra)
    return env


def events(folder: Path) -> list[str]:
    return [r["event"] for r in read_records(folder / "metrics.jsonl") if r["type"] == "event"]


# --------------------------------------------------------------------------- scripts: by hand, they train

TWO_LOCAL_WORKERS = """
[training]
workload = "digits"
epochs = {epochs}
per_replica_batch = 16

[[hosts]]
name = "here"
local = true

[[tasks]]
host = "here"
port = {p0}

[[tasks]]
host = "here"
port = {p1}
"""


@pytest.mark.slow
def test_exported_launch_scripts_run_by_hand_train_digits(homes, capsys):
    """The issue's acceptance: ``tfcc export scripts`` of a 2-worker local cluster, then ``bash launch-here.sh``
    (which starts the two processes) trains digits to the end."""
    p0, p1 = free_ports(2)
    path = homes / "two.toml"
    path.write_text(TWO_LOCAL_WORKERS.format(epochs=2, p0=p0, p1=p1))
    out = homes / "export"
    code, stdout, err = tfcc(["export", "scripts", str(path), "-o", str(out)], capsys)
    assert code == 0, err
    assert f"wrote {out / 'launch-here.sh'}" in stdout and f"wrote {out / 'README.md'}" in stdout
    assert os.access(out / "launch-here.sh", os.X_OK)

    done = run_script(["bash", "launch-here.sh"], out, task_env())
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n" + "\n".join(
        (out / "runs" / t / "stderr.log").read_text()[-2000:] for t in ("worker-0", "worker-1"))
    assert "worker-0 finished" in done.stdout and "worker-1 finished" in done.stdout
    for index, task in enumerate(("worker-0", "worker-1")):
        records = read_records(out / "runs" / task / "metrics.jsonl")
        started = next(r for r in records if r.get("event") == "started")
        assert started["num_workers"] == 2 and started["epochs"] == 2
        steps = [r for r in records if r["type"] == "step"]
        assert len(steps) == 2 * started["steps_per_epoch"] > 0
        assert records[-1]["event"] == "finished"
        assert all(r["task_index"] == index for r in records)


PS_ON_ONE_HOST = """
[training]
workload = "digits"
epochs = 1
per_replica_batch = 16
strategy = "parameter_server"

[[hosts]]
name = "here"
local = true

[[tasks]]
host = "here"
role = "chief"
port = {p0}

[[tasks]]
host = "here"
port = {p1}

[[tasks]]
host = "here"
role = "ps"
port = {p2}

[[tasks]]
host = "here"
role = "evaluator"
"""


@pytest.mark.slow
def test_parameter_server_launch_script_ends_its_servers_when_the_chief_finishes(homes):
    """Under parameter servers the workers and ps serve until stopped: the chief's host's script ends them
    once the chief finished (as tfcc does), and the evaluator evaluates the chief's last checkpoint."""
    cluster = cluster_of(PS_ON_ONE_HOST.format(**dict(zip(("p0", "p1", "p2"), free_ports(3)))))
    out = homes / "export"
    export.write(export.render("scripts", cluster), out)
    done = run_script(["bash", "launch-here.sh"], out, task_env())
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "the chief finished; ending the servers here" in done.stdout
    runs = out / "runs"
    assert events(runs / "chief-0")[-1] == "finished"
    for server in ("worker-0", "ps-0"):
        assert events(runs / server)[-2:] == ["serving", "finished"]  # SIGTERM ended it cleanly
    assert "evaluated" in events(runs / "evaluator-0") and events(runs / "evaluator-0")[-1] == "finished"


# --------------------------------------------------------------------------- scripts: what each task gets

RECORDER = """#!{python}
import glob, json, os, sys, time
if sys.argv[1:2] == ["-c"]:
    sys.exit(0)  # the launch script's check that tfcc's trainer can be imported
keys = ("TF_CONFIG", "TFCC_RUN_DIR", "TFCC_TASK", "CUDA_VISIBLE_DEVICES", "TF_USE_LEGACY_KERAS",
        "TFCC_MODEL_FILE_ORIGIN")
with open("recorded.json.tmp", "w") as f:
    json.dump({{"argv": sys.argv[1:], "cwd": os.getcwd(),
               "env": {{k: os.environ[k] for k in keys if k in os.environ}}}}, f)
os.replace("recorded.json.tmp", "recorded.json")
# A parameter-server chief that ends makes the script end its servers: not before they have recorded.
deadline = time.monotonic() + 120
while os.environ["TFCC_TASK"].startswith("chief") and time.monotonic() < deadline and \\
        len(glob.glob("../*/recorded.json")) < int(os.environ.get("RECORDER_TASKS", "1")):
    time.sleep(0.05)
"""

TWO_HOSTS_PS = """
[training]
epochs = 3
per_replica_batch = 8
strategy = "parameter_server"
args = ["--seed", "7"]

[[hosts]]
name = "a"
address = "10.0.0.1"

[[hosts]]
name = "b"
address = "10.0.0.2"

[[tasks]]
host = "a"
role = "chief"
port = 5000
gpus = [0]

[[tasks]]
host = "a"
role = "ps"

[[tasks]]
host = "b"
gpus = [0, 1]

[[tasks]]
host = "b"
port = 2222
gpus = [2, 3]
"""


def recorder(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "python-recorder"
    path.parent.mkdir(parents=True)
    path.write_text(RECORDER.format(python=sys.executable))
    path.chmod(0o755)
    return path


def recorded(runs: Path, task: str) -> dict:
    """What the recorder saw, in the folder it ran in: the task's run folder, or its copy of the user's code."""
    code = runs / task / "work" / "recorded.json"
    return json.loads((code if code.exists() else runs / task / "recorded.json").read_text())


def test_launch_scripts_give_each_task_the_argv_and_environment_tfcc_gives_it(tmp_path):
    """Every host's script, run with an interpreter that records what it was given: each task's TF_CONFIG
    (``auto`` ports 2222 upward per host, past the fixed ones), run folder, GPUs (none for the ps), tf-keras
    and the trainer's options are what ``tfcc run`` gives it."""
    cluster = cluster_of(TWO_HOSTS_PS)
    exported = export.render("scripts", cluster)
    assert set(exported.files) == {"launch-a.sh", "launch-b.sh", "README.md"}
    assert exported.executable == {"launch-a.sh", "launch-b.sh"}
    assert any("(a: 2222; b: 2223)" in n and "must be free" in n for n in exported.notes)
    out = tmp_path / "export"
    export.write(exported, out)
    for name in ("launch-a.sh", "launch-b.sh"):
        assert subprocess.run(["bash", "-n", str(out / name)]).returncode == 0
        assert stat.S_IMODE((out / name).stat().st_mode) & 0o100
    env = task_env(PYTHON=str(recorder(tmp_path)), RECORDER_TASKS="2")  # launch-a.sh: the chief and the ps
    for host in ("a", "b"):
        done = run_script(["bash", f"launch-{host}.sh"], out, env, timeout=60)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    ports = [5000, 2222, 2223, 2222]  # chief fixed, ps auto on a; worker-0 auto on b past worker-1's fixed 2222
    gpus = {"chief-0": "0", "ps-0": "", "worker-0": "0,1", "worker-1": "2,3"}
    runs = out / "runs"
    for i, name in enumerate(cluster.task_names()):
        got = recorded(runs, name)
        assert got["argv"] == ["-m", "trainer", "--run-dir", str(runs / name), *cluster.training.trainer_args()]
        assert got["argv"][-2:] == ["--seed", "7"]
        assert got["cwd"] == str(runs / name)
        assert got["env"] == {"TF_CONFIG": cluster.tf_config(i, ports), "TFCC_RUN_DIR": str(runs / name),
                              "TFCC_TASK": name, "CUDA_VISIBLE_DEVICES": gpus[name], "TF_USE_LEGACY_KERAS": "1"}
    readme = exported.files["README.md"]
    assert "| a | `launch-a.sh` | chief-0 (10.0.0.1:5000), ps-0 (10.0.0.1:2222) |" in readme
    assert "TFCC_ROOT" in readme and "bash launch-b.sh   # on b" in readme


def test_a_users_script_and_its_args_reach_it_word_for_word(tmp_path):
    """The user's script is exported beside the launch scripts and started with its args as given: quotes,
    spaces and shell syntax are quoted, never run."""
    script = tmp_path / "my train.py"
    script.write_text("print('hello')\n")
    args = ["it's", "$(touch pwned)", "a b", '"q"', "*", "`id`", "--flag=x;y"]
    cluster = cluster_of(f"""
[training]
script = {json.dumps(str(script))}
args = {json.dumps(args)}

[[hosts]]
name = "here"
local = true

[[tasks]]
host = "here"
port = 7001
""")
    out = tmp_path / "export"
    exported = export.render("scripts", cluster, export.Options(into=out))
    assert exported.copies["user/my train.py"] == script
    export.write(exported, out)
    done = run_script(["bash", "launch-here.sh"], out, task_env(PYTHON=str(recorder(tmp_path / "tools"))), timeout=60)
    assert done.returncode == 0, done.stderr
    got = recorded(out / "runs", "worker-0")
    assert got["argv"] == ["my train.py", *args] and got["cwd"] == str(out / "runs" / "worker-0" / "work")
    assert (out / "runs" / "worker-0" / "work" / "my train.py").read_text() == "print('hello')\n"
    assert not list(out.rglob("pwned"))


@pytest.mark.parametrize("into", ["project", "."])
def test_an_export_into_the_codes_own_folder_or_one_above_it_is_refused(tmp_path, into):
    """Its files would all be the export's own: said so, with what to do, not that the script is missing."""
    project = package_project(tmp_path)
    cluster = cluster_of(f'[training]\nmodule = "trainer.task"\nworkdir = {json.dumps(str(project))}\n'
                         '[[hosts]]\nname = "here"\nlocal = true\n[[tasks]]\nhost = "here"\nport = 7001\n')
    with pytest.raises(export.ExportError) as refused:
        export.render("scripts", cluster, export.Options(into=tmp_path / into))
    assert str(refused.value) == (f"the folder {str((tmp_path / into).resolve())!r} holds the code's own folder "
                                  f"{str(project)!r}; choose a folder outside {str(project)!r}")


WAITS_FOR_TERM = """import signal, sys, time
def on_term(*_):
    open("terminated", "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open("started", "w").close()
time.sleep(120)
"""

# cp as it fails part-way (a file that vanished, a full disk): it copies, then says it failed; worker-1's copy
# fails once worker-0 runs
FAILING_CP = """#!/bin/bash
case "$*" in
  *worker-1*)
    for _ in $(seq 400); do [ -e "$RUNS_AT/worker-0/work/started" ] && break; sleep 0.05; done
    /bin/cp "$@"
    exit 1;;
esac
exec /bin/cp "$@"
"""


def test_a_task_that_cannot_start_stops_the_ones_started_and_leaves_no_half_copy(tmp_path):
    """A launch script whose second task's copy of the code fails: no work/ left half-made (run again, it would be
    kept), the first task is stopped (its peers would wait for the second), and the script exits 2 saying why."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(WAITS_FOR_TERM)
    (project / "data.txt").write_text("x\n")
    cluster = cluster_of(f'[training]\nscript = {json.dumps(str(project / "train.py"))}\n'
                         '[[hosts]]\nname = "here"\nlocal = true\n'
                         '[[tasks]]\nhost = "here"\nport = 7001\n[[tasks]]\nhost = "here"\nport = 7002\n')
    out = tmp_path / "out"
    export.write(export.render("scripts", cluster, export.Options(into=out)), out)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "cp").write_text(FAILING_CP)
    (tools / "cp").chmod(0o755)
    runs = out / "runs"
    env = task_env(PYTHON=sys.executable, RUNS_AT=str(runs), PATH=f"{tools}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.Popen(["bash", "launch-here.sh"], cwd=out, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, err
        assert (f"launch-here.sh: cannot copy the code into {runs}/worker-1/work; stopping this host's tasks "
                "started so far") in err
        assert wait_until(lambda: (runs / "worker-0" / "work" / "terminated").exists(), 30), err
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    assert not (runs / "worker-1" / "work").exists() and list((runs / "worker-1").iterdir()) == []
    assert sorted(p.name for p in (runs / "worker-0" / "work").iterdir()) == [
        "data.txt", "started", "terminated", "train.py"]


PACKAGE_TASK = """import json, os, sys
from . import model
with open("ran.json", "w") as f:
    json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(), "model": model.NAME,
               "task": json.loads(os.environ["TF_CONFIG"])["task"], "keras": os.environ.get("TF_USE_LEGACY_KERAS")}, f)
"""


def package_project(tmp_path: Path) -> Path:
    """A project whose package is named trainer, as cloud samples name theirs (tfcc's own is trainer too)."""
    project = tmp_path / "project"
    (project / "trainer").mkdir(parents=True)
    (project / "trainer" / "__init__.py").write_text("")
    (project / "trainer" / "model.py").write_text("NAME = 'cnn'\n")
    (project / "trainer" / "task.py").write_text(PACKAGE_TASK)
    return project


@pytest.mark.parametrize("fmt", export.FORMATS)
def test_a_module_is_exported_with_its_package_and_runs_as_python_m_runs_it(tmp_path, fmt):
    """``module = "trainer.task"``: the package's folder goes with the export, and each task runs ``python -m
    trainer.task`` in a copy of its own (its relative import works, its package named like tfcc's own is the one
    it gets, the Keras of its host); an image holds the code where the manifest runs it."""
    project = package_project(tmp_path)
    args = ["--job-dir", "a b"]
    cluster = cluster_of(f'[training]\nmodule = "trainer.task"\nworkdir = {json.dumps(str(project))}\n'
                         f'args = {json.dumps(args)}\n[[hosts]]\nname = "here"\nlocal = true\n'
                         '[[tasks]]\nhost = "here"\nport = 7001\n')
    out = tmp_path / "out"
    exported = export.render(fmt, cluster, export.Options(into=out))
    if fmt in ("tfjob", "trainjob"):
        assert any("each container runs python -m trainer.task there" in n for n in exported.notes), exported.notes
        import yaml

        manifest = list(yaml.safe_load_all(next(iter(exported.files.values()))))
        containers = [c for doc in manifest for c in _containers(doc)]
        assert containers and all(c["workingDir"] == "/opt/tfcc/user" and
                                  c["command"][-4:] == ["-m", "trainer.task", *args] for c in containers)
        return
    assert set(exported.copies) == {"user/trainer/__init__.py", "user/trainer/model.py", "user/trainer/task.py"}
    export.write(exported, out)
    if fmt == "scripts":
        done = run_script(["bash", "launch-here.sh"], out, task_env(PYTHON=sys.executable), timeout=60)
        runs = out / "runs"
    else:
        bin_dir = tmp_path / "srun-bin"
        bin_dir.mkdir()
        (bin_dir / "srun").write_text(FAKE_SRUN)
        (bin_dir / "srun").chmod(0o755)
        done = run_script(["bash", "tfcc.sbatch"], out, {**task_env(PYTHON=sys.executable, TFCC_ROOT=str(ROOT)),
                                                         "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                                                         "SLURM_NTASKS": "1", "SLURM_JOB_ID": "8",
                                                         "SLURM_SUBMIT_DIR": str(out)}, timeout=60)
        runs = out / "runs" / "8"
    assert done.returncode == 0, done.stdout + done.stderr + "".join(
        p.read_text() for p in runs.rglob("stderr.log"))
    ran = json.loads((runs / "worker-0" / "work" / "ran.json").read_text())
    assert ran == {"argv": args, "cwd": str(runs / "worker-0" / "work"), "model": "cnn",
                   "task": {"type": "worker", "index": 0}, "keras": None}  # it uses no Keras: the machine's own


def _containers(doc) -> list[dict]:
    """Every container spec in a manifest document, wherever it is nested."""
    if isinstance(doc, dict):
        found = [doc] if "command" in doc and "image" in doc else []
        return found + [c for v in doc.values() for c in _containers(v)]
    if isinstance(doc, list):
        return [c for v in doc for c in _containers(v)]
    return []


def test_a_model_file_is_exported_and_named_where_it_lies(tmp_path):
    cluster = cluster_of(f"""
[training]
model_file = {json.dumps(str(MODEL_FILE))}

[[hosts]]
name = "here"
local = true

[[tasks]]
host = "here"
port = 7002
""")
    exported = export.render("scripts", cluster)
    assert exported.files["user/idmodel.py"] == MODEL_FILE.read_text()
    out = tmp_path / "export"
    export.write(exported, out)
    done = run_script(["bash", "launch-here.sh"], out, task_env(PYTHON=str(recorder(tmp_path))), timeout=60)
    assert done.returncode == 0, done.stderr
    got = recorded(out / "runs", "worker-0")
    argv = got["argv"]
    assert argv[argv.index("--model-file") + 1] == str(out / "user" / "idmodel.py")
    assert got["env"]["TFCC_MODEL_FILE_ORIGIN"] == str(MODEL_FILE)


# --------------------------------------------------------------------------- slurm

def sbatch_lines(text: str) -> dict[str, str]:
    options = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line[len("#SBATCH "):].partition("=")
            options[key] = value
    return options


def srun_line(text: str) -> str:
    """The srun command (started in a session of its own), its continuation lines joined."""
    start = text.index("  setsid srun ") + len("  setsid ")
    end = text.index(" &\n  srun_pid=$!", start)
    return " ".join(part.strip() for part in text[start:end].replace("\\\n", "\n").splitlines())


def hosts_and_tasks(per_host: list[int], gpus: list[int] | None = None, roles: dict[int, str] | None = None,
                    training: str = "") -> cl.Cluster:
    """A cluster of len(per_host) hosts with that many tasks each (task k's gpus and role when given)."""
    text = f"[training]\n{training}\n"
    k = 0
    for h, n in enumerate(per_host):
        text += f'[[hosts]]\nname = "n{h}"\naddress = "10.0.0.{h + 1}"\n'
        for _ in range(n):
            gpu = list(range(gpus[k])) if gpus else []
            text += f'[[tasks]]\nhost = "n{h}"\nrole = "{(roles or {}).get(k, "worker")}"\ngpus = {gpu}\n'
            k += 1
    return cluster_of(text)


def test_sbatch_for_cpu_nodes_asks_for_what_the_cluster_has_and_no_gpus(tmp_path):
    cluster = hosts_and_tasks([2, 2], training="max_restarts = 5")
    exported = export.render("slurm", cluster, export.Options(time_limit="2:30:00", name="digits-run"))
    assert list(exported.files) == ["digits-run.sbatch"] and exported.executable == {"digits-run.sbatch"}
    text = exported.files["digits-run.sbatch"]
    assert text.startswith("#!/bin/bash\n#SBATCH ")
    path = tmp_path / "digits-run.sbatch"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    assert sbatch_lines(text) == {"--job-name": "digits-run", "--nodes": "2", "--ntasks": "4",
                                  "--ntasks-per-node": "2", "--cpus-per-task": "4", "--signal": "B:TERM@120",
                                  "--time": "2:30:00", "--output": "digits-run-%j.out"}
    srun = srun_line(text)
    assert "--gpu" not in srun and "--wait" not in srun
    assert '"$PYTHON" -m trainer --slurm-jobs worker:4 --port-base 8888 --epochs 5' in srun
    assert "max_restarts=5" in text and "export TF_USE_LEGACY_KERAS=1" in text


def test_sbatch_for_gpu_tasks_asks_for_the_gpus_of_a_node_and_binds_each_tasks_own():
    cluster = hosts_and_tasks([2, 2, 2], gpus=[2] * 6)
    text = export.render("slurm", cluster, export.Options(port_base=9000)).files["tfcc.sbatch"]
    options = sbatch_lines(text)
    assert (options["--nodes"], options["--ntasks"], options["--ntasks-per-node"]) == ("3", "6", "2")
    assert options["--gres"] == "gpu:4"  # 2 tasks x 2 GPUs on each node
    srun = srun_line(text)
    assert "--gpu-bind=mask_gpu:0x3,0xc" in srun and "--slurm-jobs worker:6 --port-base 9000" in srun


def test_sbatch_of_uneven_hosts_and_parameter_servers():
    """Hosts with different numbers of tasks: at most the most a node (no node gets more tasks, or GPU masks,
    than the busiest host), and a note; parameter servers: the roles
    as the trainer's Slurm mode takes them, and srun ends the servers after the chief."""
    cluster = hosts_and_tasks([3, 1], roles={0: "chief", 1: "ps"}, training='strategy = "parameter_server"')
    exported = export.render("slurm", cluster)
    text = exported.files["tfcc.sbatch"]
    options = sbatch_lines(text)
    assert (options["--nodes"], options["--ntasks"], options["--ntasks-per-node"]) == ("2", "4", "3")
    assert "--gres" not in options
    assert any("different numbers of tasks (n0 3, n1 1)" in n for n in exported.notes)
    srun = srun_line(text)
    assert "--slurm-jobs chief:1,ps:1,worker:2" in srun and f"--wait={export.SLURM_SERVER_WAIT}" in srun
    # the wrapper names each rank's run folder as tfcc names the task
    assert ('if [ "$r" -lt 1 ]; then task=chief-$r; elif [ "$r" -lt 2 ]; then task=ps-$((r - 1)); '
            'else task=worker-$((r - 2)); fi') in text


def test_sbatch_runs_a_users_script_through_the_slurm_helper(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    cluster = cluster_of(f'[training]\nscript = "{script}"\nargs = ["--lr", "0.1"]\n'
                         '[[hosts]]\nname = "x"\naddress = "10.0.0.9"\n[[tasks]]\nhost = "x"\n[[tasks]]\nhost = "x"\n')
    exported = export.render("slurm", cluster)
    assert exported.copies["user/train.py"] == script
    srun = srun_line(exported.files["tfcc.sbatch"])
    assert ('"$PYTHON" "$TFCC_ROOT/trainer/slurm.py" --jobs worker:2 --port-base 8888 --keep-keras -- '
            'train.py --lr 0.1') in srun  # its Keras as the sbatch chose it, not the helper's
    # each task runs it in its own copy of the code, in its run folder, made whole or not at all
    assert ('if [ ! -d "$d/work" ]; then\n  t=$(mktemp -d "$d/.work.XXXXXX") || exit 2\n'
            '  cp -R "$TFCC_CODE/." "$t" && mv "$t" "$d/work" || { rm -rf "$t"; exit 2; }\nfi\ncd "$d/work" || exit 2'
            ) in exported.files["tfcc.sbatch"]


HOSTILE = 'it\'s $(touch pwned) `touch pwned2` "x" ;touch pwned3.py'  # a file name: all of it is the name


def test_a_hostile_script_name_and_args_stay_data_in_every_export(tmp_path):
    """A script whose file name holds quotes and shell syntax, with such args: the launch script and the Slurm
    batch script, run as a person runs them (bash, with a stand-in srun), start it by its name and give it its
    args word for word; nothing in them runs. The TFJob's command escapes Kubernetes' $( too."""
    script = tmp_path / HOSTILE
    script.write_text("print('hello')\n")
    args = ["$(touch pwned4)", "`touch pwned5`", "it's", "a b"]
    text = f"""
[training]
script = {json.dumps(str(script))}
args = {json.dumps(args)}

[[hosts]]
name = "here"
local = true

[[tasks]]
host = "here"
port = 7001
"""
    env = task_env(PYTHON=str(recorder(tmp_path)))
    out = tmp_path / "scripts"
    export.write(export.render("scripts", cluster_of(text)), out)
    done = run_script(["bash", "launch-here.sh"], out, env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert recorded(out / "runs", "worker-0")["argv"] == [HOSTILE, *args]

    slurm = tmp_path / "slurm"
    export.write(export.render("slurm", cluster_of(text)), slurm)
    bin_dir = tmp_path / "srun-bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    done = run_script(["bash", "tfcc.sbatch"], slurm, {**env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                                                      "SLURM_NTASKS": "1", "SLURM_JOB_ID": "7",
                                                      "SLURM_SUBMIT_DIR": str(slurm)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert recorded(slurm / "runs" / "7", "worker-0")["argv"][-5:] == [HOSTILE, *args]

    manifest = manifest_of(export.render("tfjob", cluster_of(text)))
    command = container_of(manifest["spec"]["tfReplicaSpecs"]["Worker"])["command"]
    assert command == ["python3", f"{export.TFJOB_ROOT}/user/{HOSTILE}".replace("$(", "$$("), "$$(touch pwned4)",
                       "`touch pwned5`", "it's", "a b"]
    assert not list(tmp_path.rglob("pwned*")) and not list(Path.cwd().glob("pwned*"))


def test_exports_write_inside_their_folder_only(tmp_path):
    outside = export.Export({"../escaped.sh": "echo no\n", "ok.sh": "echo yes\n"}, [])
    with pytest.raises(export.ExportError, match="outside its folder"):
        export.write(outside, tmp_path / "out")
    assert not (tmp_path / "escaped.sh").exists() and not (tmp_path / "out" / "ok.sh").exists()


FAKE_SRUN = """#!/usr/bin/env bash
# srun for a test: every rank of a one-node step on this machine, with Slurm's variables.
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((rank = 0; rank < SLURM_NTASKS; rank++)); do
  SLURM_PROCID=$rank SLURM_STEP_NUM_TASKS=$SLURM_NTASKS SLURM_STEP_NODELIST=localhost \\
    SLURM_STEP_TASKS_PER_NODE=$SLURM_NTASKS "$@" &
  pids+=("$!")
done
code=0
for pid in "${pids[@]}"; do wait "$pid" || code=$?; done
exit "$code"
"""


# --------------------------------------------------------------------------- tfjob

@pytest.fixture(scope="module")
def tfjob_schema() -> dict:
    import yaml

    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def unknown_fields(schema: dict, doc, where: str = "") -> list[str]:
    """Fields of ``doc`` that the structural schema does not declare (the API server would drop them,
    or refuse them with strict field validation; jsonschema alone lets them through)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found = []
    if isinstance(doc, dict) and "properties" in schema:
        for key, value in doc.items():
            if key in schema["properties"]:
                found += unknown_fields(schema["properties"][key], value, f"{where}.{key}")
            else:
                found.append(f"{where}.{key}")
    elif isinstance(doc, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, value in doc.items():
            found += unknown_fields(schema["additionalProperties"], value, f"{where}.{key}")
    elif isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, value in enumerate(doc):
            found += unknown_fields(schema["items"], value, f"{where}[{i}]")
    return found


def manifest_of(exported: export.Export) -> dict:
    import yaml

    (name,) = exported.files
    return yaml.safe_load(exported.files[name])


def validate(manifest: dict, schema: dict) -> None:
    import jsonschema

    jsonschema.validate(manifest, schema)
    assert unknown_fields(schema, manifest) == []


MWMS_THREE = """
[training]
epochs = 4
max_restarts = 7

[[hosts]]
name = "g"
address = "10.0.0.1"

[[tasks]]
host = "g"
gpus = [0, 1]

[[tasks]]
host = "g"

[[tasks]]
host = "g"
"""

PS_FULL = """
[training]
strategy = "parameter_server"
max_restarts = 0

[[hosts]]
name = "a"
address = "10.0.0.1"

[[hosts]]
name = "b"
address = "10.0.0.2"

[[tasks]]
host = "a"
role = "chief"

[[tasks]]
host = "b"
gpus = [0]

[[tasks]]
host = "b"
gpus = [1]

[[tasks]]
host = "a"
role = "ps"

[[tasks]]
host = "a"
role = "evaluator"
"""


def container_of(spec: dict) -> dict:
    (container,) = spec["template"]["spec"]["containers"]
    return container


def test_tfjob_of_a_multi_worker_mirrored_cluster_validates_and_asks_for_its_gpus(tfjob_schema):
    exported = export.render("tfjob", cluster_of(MWMS_THREE), export.Options(image="reg.example/tfcc:2.21",
                                                                             name="digits"))
    assert list(exported.files) == ["digits.yaml"]
    manifest = manifest_of(exported)
    validate(manifest, tfjob_schema)
    assert (manifest["apiVersion"], manifest["kind"], manifest["metadata"]["name"]) == ("kubeflow.org/v1", "TFJob",
                                                                                        "digits")
    assert manifest["spec"]["runPolicy"] == {"backoffLimit": 7}  # the operator's default cleanPodPolicy
    specs = manifest["spec"]["tfReplicaSpecs"]
    assert list(specs) == ["Worker"]
    worker = specs["Worker"]
    assert (worker["replicas"], worker["restartPolicy"]) == (3, "OnFailure")
    container = container_of(worker)
    assert container["name"] == "tensorflow" and container["image"] == "reg.example/tfcc:2.21"
    assert container["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert any("different numbers of GPUs (worker-0 2, worker-1 0, worker-2 0)" in n for n in exported.notes)
    env = {e["name"]: e for e in container["env"]}
    assert env["TF_USE_LEGACY_KERAS"]["value"] == "1" and "TF_CONFIG" not in env  # the operator sets it
    assert container["command"][:5] == ["python3", "-m", "trainer", "--run-dir", "/tfcc-runs/$(TFCC_TASK)"]
    assert container["command"][5:] == cluster_of(MWMS_THREE).training.trainer_args()
    assert not any(export.IMAGE_PLACEHOLDER in n for n in exported.notes)


def test_tfjob_of_a_parameter_server_cluster_has_a_replica_spec_per_role(tfjob_schema):
    cluster = cluster_of(PS_FULL)
    exported = export.render("tfjob", cluster)
    assert "&id" not in exported.files["tfcc.yaml"]  # each replica spec written out in full, no YAML aliases
    manifest = manifest_of(exported)
    validate(manifest, tfjob_schema)
    specs = manifest["spec"]["tfReplicaSpecs"]
    assert {role: spec["replicas"] for role, spec in specs.items()} == {"Chief": 1, "PS": 1, "Worker": 2,
                                                                        "Evaluator": 1}
    # the evaluator outlives the chief: the operator must not delete running pods when the chief succeeds
    assert manifest["spec"]["runPolicy"] == {"backoffLimit": 0, "cleanPodPolicy": "None"}
    for role, spec in specs.items():
        container = container_of(spec)
        assert spec["restartPolicy"] == "OnFailure"
        assert container["name"] == "tensorflow" and container["image"] == export.IMAGE_PLACEHOLDER
        assert container["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
        assert ("resources" in container) == (role == "Worker")
        # the operator lists the evaluator in TF_CONFIG's cluster: each container drops it first
        assert container["command"][:2] == ["python3", "-c"]
        assert container["command"][3:6] == ["python3", "-m", "trainer"]
        assert container["command"][-2:] == ["--eval-checkpoints", cl.EVAL_CHECKPOINTS]
        task = {e["name"]: e.get("value") for e in container["env"]}["TFCC_TASK"]
        assert task == f"{role.lower()}-$(TFCC_REPLICA_INDEX)"
        volume = spec["template"]["spec"]["volumes"][0]
        assert volume == {"name": "tfcc-runs", "persistentVolumeClaim": {"claimName": "tfcc-runs"}}
    assert container_of(specs["Worker"])["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert {"name": "CUDA_VISIBLE_DEVICES", "value": ""} in container_of(specs["PS"])["env"]
    assert any(export.IMAGE_PLACEHOLDER in n and "--image" in n for n in exported.notes)
    assert any("ReadWriteMany" in n for n in exported.notes)


def test_the_tfjob_command_drops_the_evaluator_from_the_operators_tf_config(tmp_path):
    """What the operator sets (the evaluator in the cluster) becomes what tfcc's trainer takes."""
    container = container_of(manifest_of(export.render("tfjob", cluster_of(PS_FULL)))["spec"]["tfReplicaSpecs"]["PS"])
    code = container["command"][2]
    operators = {"cluster": {"chief": ["tfcc-chief-0.ns.svc:2222"], "ps": ["tfcc-ps-0.ns.svc:2222"],
                             "worker": ["tfcc-worker-0.ns.svc:2222"], "evaluator": ["tfcc-evaluator-0.ns.svc:2222"]},
                 "task": {"type": "ps", "index": 0}, "environment": "cloud"}
    done = subprocess.run([sys.executable, "-c", code, sys.executable, "-c",
                           "import os; print(os.environ['TF_CONFIG'])"],
                          env={**os.environ, "TF_CONFIG": json.dumps(operators)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert "evaluator" not in got["cluster"] and got["task"] == {"type": "ps", "index": 0}


def test_tfjob_names_must_suit_kubernetes():
    for name in ("Digits", "9lives", "a_b", "x" * 60):
        with pytest.raises(export.ExportError, match="cannot name a TFJob"):
            export.render("tfjob", cluster_of(MWMS_THREE), export.Options(name=name))


# --------------------------------------------------------------------------- trainjob

TRAINJOB_CRD = ROOT / "tests" / "data" / "trainer.kubeflow.org_trainjobs.v2.3.0.yaml"
RUNTIME_CRD = ROOT / "tests" / "data" / "trainer.kubeflow.org_trainingruntimes.v2.3.0.yaml"
# What JobSet (v0.12, which Trainer v2.3 pins) and the Job controller give each pod, written here from their
# sources rather than taken from console.export: JobSet labels every pod with its JobSet's name (the TrainJob's);
# an Indexed Job annotates each pod with its completion index and names its host <job name>-<index>, where JobSet
# names the Job <jobset>-<replicated job>-<job index> and makes the pods' subdomain a headless service named as
# the JobSet (placement.GenJobName, GetSubdomain).
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def crd_schema(path: Path) -> dict:
    import yaml

    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1"
    return version["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def trainer_schemas() -> dict:
    return {"TrainJob": crd_schema(TRAINJOB_CRD), "TrainingRuntime": crd_schema(RUNTIME_CRD)}


def test_the_runtime_crd_leaves_no_field_of_its_jobset_template_unchecked(trainer_schemas):
    """The runtime's template is a JobSet spec: its CRD declares every field of it (Trainer inlines JobSet's
    schema), so ``unknown_fields`` checks the JobSet part of an exported runtime too."""
    assert "x-kubernetes-preserve-unknown-fields" not in RUNTIME_CRD.read_text()
    template = trainer_schemas["TrainingRuntime"]["properties"]["spec"]["properties"]["template"]
    jobset = template["properties"]["spec"]["properties"]
    assert {"replicatedJobs", "failurePolicy", "successPolicy", "network"} <= set(jobset)


def trainjob_of(exported: export.Export) -> tuple[dict, dict]:
    """The runtime and the TrainJob of an export, in the order the file has them."""
    import yaml

    (name,) = exported.files
    runtime, trainjob = yaml.safe_load_all(exported.files[name])
    return runtime, trainjob


def validate_trainjob(exported: export.Export, schemas: dict) -> tuple[dict, dict]:
    """Both manifests validated against their CRD, the TrainJob's name against the CRD's CEL rules too."""
    runtime, trainjob = trainjob_of(exported)
    assert (runtime["apiVersion"], runtime["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime")
    assert (trainjob["apiVersion"], trainjob["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    validate(runtime, schemas["TrainingRuntime"])
    validate(trainjob, schemas["TrainJob"])
    name, checked = trainjob["metadata"]["name"], 0
    for rule in (v["rule"] for v in schemas["TrainJob"]["x-kubernetes-validations"]):
        if pattern := re.fullmatch(r"self\.metadata\.name\.matches\('(.+)'\)", rule):
            assert re.fullmatch(pattern[1], name), (rule, name)
            checked += 1
        elif most := re.fullmatch(r"size\(self\.metadata\.name\) <= (\d+)", rule):
            assert len(name) <= int(most[1]), (rule, name)
            checked += 1
    assert checked == 2
    # The TrainJob runs on the runtime written beside it.
    assert trainjob["spec"] == {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                               "name": runtime["metadata"]["name"]}}
    return runtime, trainjob


def replicated_jobs(runtime: dict) -> dict[str, dict]:
    return {job["name"]: job for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]}


def pod_container(job: dict) -> dict:
    (container,) = job["template"]["spec"]["template"]["spec"]["containers"]
    return container


def k8s_expand(text: str, defined: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of env values and commands (third_party/forked/golang/expansion): $(NAME) of a
    variable defined before becomes its value, any other stays as written, $$ becomes $."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            if text[i + 1] == "(" and (end := text.find(")", i + 2)) != -1:
                name = text[i + 2:end]
                out.append(defined.get(name, f"$({name})"))
                i = end + 1
            else:
                out.append("$" if text[i + 1] == "$" else text[i:i + 2])
                i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@pytest.mark.parametrize("text, expanded", [
    ("$(A)", "a"), ("x-$(A)-$(B).y", "x-a-b.y"), ("$(NOPE)", "$(NOPE)"), ("$$(A)", "$(A)"), ("$$$(A)", "$a"),
    ("$$$$", "$$"), ("$A $", "$A $"), ("$(A", "$(A"), ("$(C)", "$(C)")])
def test_the_stand_in_expands_as_kubernetes_does(text, expanded):
    """The rules of Kubernetes' expansion: a variable defined before, one that is not, $$, a lone or open $."""
    assert k8s_expand(text, {"A": "a", "B": "b"}) == expanded


def pod_environment(container: dict, labels: dict, annotations: dict, secrets: dict | None = None) -> dict:
    """The environment the kubelet gives ``container`` in a pod with these labels and annotations: each value
    expanded against the variables above it, each field reference read from the pod, each secret's key."""
    env: dict[str, str] = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = k8s_expand(var["value"], env)
        elif "fieldRef" in var["valueFrom"]:
            where, key = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]",
                                      var["valueFrom"]["fieldRef"]["fieldPath"]).groups()
            env[var["name"]] = (labels if where == "labels" else annotations)[key]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = (secrets or {})[ref["name"]][ref["key"]]
    return env


def pods_of(runtime: dict, trainjob: str, secrets: dict | None = None):
    """(replicated job, pod index, its host name under the subdomain, its environment, its command) for every pod
    JobSet makes of the runtime for a TrainJob named ``trainjob``."""
    for name, job in replicated_jobs(runtime).items():
        assert job["replicas"] == 1  # one Indexed Job per role: its pods are the role's tasks
        spec = job["template"]["spec"]
        assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
        for index in range(spec["parallelism"]):
            host = f"{trainjob}-{name}-0-{index}.{trainjob}"
            env = pod_environment(pod_container(job), {JOBSET_NAME: trainjob}, {COMPLETION_INDEX: str(index)},
                                  secrets)
            command = [k8s_expand(word, env) for word in pod_container(job)["command"]]
            yield name, index, host, env, command


MWMS_CHIEF = """
[training]
epochs = 2
max_restarts = 4

[[hosts]]
name = "g1"
address = "10.0.0.1"

[[hosts]]
name = "g2"
address = "10.0.0.2"

[[tasks]]
host = "g1"
role = "chief"
gpus = [0, 1]

[[tasks]]
host = "g1"
gpus = [2, 3]

[[tasks]]
host = "g2"
gpus = [0, 1]

[[tasks]]
host = "g2"
gpus = [2, 3]
"""


@pytest.mark.parametrize("text", [MWMS_THREE, MWMS_CHIEF, PS_FULL], ids=["mwms-workers", "mwms-chief", "ps"])
def test_each_pod_of_a_trainjob_builds_the_tf_config_of_its_task(text, trainer_schemas):
    """Every pod, with what JobSet and the Job controller give it, gets a TF_CONFIG that tfcc's trainer takes:
    its own task, and every task of the cluster at the stable host name and port its pod has."""
    cluster = cluster_of(text)
    exported = export.render("trainjob", cluster, export.Options(name="digits"))
    runtime, _ = validate_trainjob(exported, trainer_schemas)
    names = cluster.task_names()
    ports = list(range(2222, 2222 + len(names)))  # what tfcc would give each task (only the tasks matter here)
    expected = {name: parse_tf_config(cluster.tf_config(i, ports)) for i, name in enumerate(names)}
    for trainjob in ("digits", "digits-again"):  # a second TrainJob on the same runtime gets its own addresses
        pods = list(pods_of(runtime, trainjob))
        assert sorted(f"{role}-{index}" for role, index, *_ in pods) == sorted(names)
        served = {}  # every task's address: its pod's host and its container's port
        for role, index, host, env, _ in pods:
            if role != "evaluator":
                (port,) = pod_container(replicated_jobs(runtime)[role])["ports"]
                served.setdefault(role, []).append(f"{host}:{port['containerPort']}")
        for role, index, host, env, command in pods:
            got = parse_tf_config(env["TF_CONFIG"])
            task = f"{role}-{index}"
            assert got.task == TaskId(role, index) == expected[task].task
            assert got.cluster == served, task  # every task where its pod is, in index order
            assert {r: len(a) for r, a in got.cluster.items()} == {r: len(a) for r, a in expected[task].cluster.items()}
            assert got.address == (None if role == "evaluator" else f"{host}:2222")  # this pod's own
            assert env["TFCC_TASK"] == task and env["TFCC_RUN_DIR"] == f"/tfcc-runs/{task}"
            assert env["TF_USE_LEGACY_KERAS"] == "1" and env["PYTHONPATH"] == "/opt/tfcc"
            assert command[command.index("--run-dir") + 1] == f"/tfcc-runs/{task}"
            assert command[:3] == ["python3", "-m", "trainer"]
            assert command[5:] == [*cluster.training.trainer_args(),
                                   *(["--eval-checkpoints", cl.EVAL_CHECKPOINTS] if cluster.evaluated else [])]


def test_trainjob_pods_ask_for_their_gpus_and_the_ps_for_none(trainer_schemas):
    exported = export.render("trainjob", cluster_of(PS_FULL), export.Options(image="reg.example/tfcc:2.21"))
    runtime, _ = validate_trainjob(exported, trainer_schemas)
    jobs = replicated_jobs(runtime)
    assert list(jobs) == ["chief", "ps", "worker", "evaluator"]
    assert {role: job["template"]["spec"]["parallelism"] for role, job in jobs.items()} == {
        "chief": 1, "ps": 1, "worker": 2, "evaluator": 1}
    containers = {role: pod_container(job) for role, job in jobs.items()}
    assert containers["worker"]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert [role for role, c in containers.items() if "resources" in c] == ["worker"]
    assert {"name": "CUDA_VISIBLE_DEVICES", "value": ""} in containers["ps"]["env"]
    assert [role for role, c in containers.items() if "CUDA_VISIBLE_DEVICES" in str(c["env"])] == ["ps"]
    assert all(c["image"] == "reg.example/tfcc:2.21" for c in containers.values())
    assert not any(export.IMAGE_PLACEHOLDER in n for n in exported.notes)

    exported = export.render("trainjob", cluster_of(MWMS_THREE))
    (container,) = map(pod_container, replicated_jobs(validate_trainjob(exported, trainer_schemas)[0]).values())
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert any("different numbers of GPUs (worker-0 2, worker-1 0, worker-2 0)" in n for n in exported.notes)
    assert container["image"] == export.IMAGE_PLACEHOLDER and any("--image" in n for n in exported.notes)


def test_trainjob_restarts_every_pod_up_to_max_restarts_and_ends_with_the_chief(trainer_schemas):
    """max_restarts is JobSet's failurePolicy: a failed pod fails its Job, JobSet recreates every pod; a task
    that refused its input (exit code 2) fails the whole. Under parameter servers the run ends with the chief
    and the evaluator (the servers never end by themselves); else when every task finished."""
    runtime, _ = validate_trainjob(export.render("trainjob", cluster_of(PS_FULL)), trainer_schemas)
    spec = runtime["spec"]["template"]["spec"]
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief", "evaluator"]}
    policy = spec["failurePolicy"]
    assert (policy["maxRestarts"], policy["restartStrategy"]) == (0, "Recreate")
    (rule,) = policy["rules"]
    assert (rule["action"], rule["onJobFailureReasons"]) == ("FailJobSet", ["PodFailurePolicy"])
    rule_name = trainer_schemas["TrainingRuntime"]["properties"]["spec"]["properties"]["template"]["properties"][
        "spec"]["properties"]["failurePolicy"]["properties"]["rules"]["items"]["properties"]["name"]["description"]
    assert re.fullmatch(re.search(r'regular expression "(.+?)"', rule_name)[1], rule["name"])
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    for job in replicated_jobs(runtime).values():
        job_spec = job["template"]["spec"]
        assert job_spec["backoffLimit"] == 0 and job_spec["template"]["spec"]["restartPolicy"] == "Never"
        assert job_spec["podFailurePolicy"] == {"rules": [{"action": "FailJob", "onExitCodes": {
            "containerName": pod_container(job)["name"], "operator": "In", "values": [2]}}]}

    exported = export.render("trainjob", cluster_of(MWMS_CHIEF))
    spec = validate_trainjob(exported, trainer_schemas)[0]["spec"]["template"]["spec"]
    assert "successPolicy" not in spec and spec["failurePolicy"]["maxRestarts"] == 4  # JobSet's default: all
    assert any("max_restarts (4)" in n and "failurePolicy.maxRestarts" in n for n in exported.notes)


def test_a_trainjob_with_an_evaluator_shares_a_claim_and_leaves_it_out_of_the_cluster(trainer_schemas):
    exported = export.render("trainjob", cluster_of(PS_FULL), export.Options(name="exp1"))
    runtime, _ = validate_trainjob(exported, trainer_schemas)
    for job in replicated_jobs(runtime).values():
        assert job["template"]["spec"]["template"]["spec"]["volumes"] == [
            {"name": "tfcc-runs", "persistentVolumeClaim": {"claimName": "exp1-runs"}}]
        assert pod_container(job)["volumeMounts"] == [{"name": "tfcc-runs", "mountPath": "/tfcc-runs"}]
    assert "ports" not in pod_container(replicated_jobs(runtime)["evaluator"])  # it serves nothing
    assert any("ReadWriteMany" in n and "exp1-runs" in n for n in exported.notes)
    (evaluator,) = [env for role, _, _, env, _ in pods_of(runtime, "exp1") if role == "evaluator"]
    assert "evaluator" not in json.loads(evaluator["TF_CONFIG"])["cluster"]

    runtime, _ = validate_trainjob(export.render("trainjob", cluster_of(MWMS_CHIEF)), trainer_schemas)
    for job in replicated_jobs(runtime).values():
        assert job["template"]["spec"]["template"]["spec"]["volumes"] == [{"name": "tfcc-runs", "emptyDir": {}}]


def test_a_trainjob_carries_env_secrets_and_a_users_script_word_for_word(homes, capsys, monkeypatch,
                                                                        trainer_schemas):
    """Through ``tfcc export trainjob``: the user's env and script args reach the pod as written (Kubernetes
    expands $(...) in both: the export escapes them); a secret comes from a Kubernetes secret, never the file."""
    token = "s3cr3t-" + os.urandom(8).hex()
    monkeypatch.setenv("MY_TOKEN", token)
    script = homes / "train.py"
    script.write_text("print('hello')\n")
    args = ["it's", "$(touch pwned)", "a b", "$$x", "$HOME"]
    path = homes / "c.toml"
    path.write_text(f"""
[training]
script = {json.dumps(str(script))}
args = {json.dumps(args)}
env = {{ PLAIN = "x $(y) $$z" }}
secret_env = ["MY_TOKEN"]

[[hosts]]
name = "a"
address = "10.0.0.1"

[[tasks]]
host = "a"

[[tasks]]
host = "a"
""")
    out = homes / "k8s"
    code, stdout, err = tfcc(["export", "trainjob", str(path), "-o", str(out), "--name", "mine",
                              "--image", "reg.example/t:1"], capsys)
    assert code == 0, err
    assert stdout.splitlines()[0] == f"wrote {out / 'mine.yaml'}" and [p.name for p in out.iterdir()] == ["mine.yaml"]
    text = (out / "mine.yaml").read_text()
    assert token not in text
    assert text.startswith("# mine.yaml: a tfcc cluster as a Kubeflow Trainer v2 TrainJob")
    assert "note: the tasks' secrets (MY_TOKEN) come from a Kubernetes secret named mine-secrets" in stdout
    assert f"note: the image must hold the code's folder ({path.parent}) as /opt/tfcc/user/: each container runs " \
           "python train.py there" in stdout
    exported = export.Export({"mine.yaml": text}, [])
    runtime, trainjob = validate_trainjob(exported, trainer_schemas)
    assert trainjob["metadata"]["name"] == "mine" and runtime["metadata"]["name"] == "mine"
    for _, _, _, env, command in pods_of(runtime, "mine", {"mine-secrets": {"MY_TOKEN": token}}):
        assert env["PLAIN"] == "x $(y) $$z" and env["MY_TOKEN"] == token
        assert command == ["python3", "/opt/tfcc/user/train.py", *args]


def test_trainjob_names_must_suit_kubernetes_and_jobsets_pod_names():
    """A DNS label, and short enough that JobSet's longest pod name, <name>-<job>-0-<index>-<5 characters>, has
    at most 63: with PS_FULL's evaluator-0-0 that leaves 43 characters."""
    cluster = cluster_of(PS_FULL)
    assert export.render("trainjob", cluster, export.Options(name="x" * 43)).files
    for name in ("Digits", "9lives", "a_b", "x" * 44, ""):
        with pytest.raises(export.ExportError, match="cannot name a TrainJob") as refused:
            export.render("trainjob", cluster, export.Options(name=name))
        assert "-<role>-0-<index>-<5 random characters>) have at most 63 characters" in str(refused.value)


def test_a_bad_trainjob_name_is_one_line_and_writes_nothing(homes, capsys):
    path = cluster_file(homes, PS_FULL)
    before = snapshot(homes)
    assert_refused(*tfcc(["export", "trainjob", path, "-o", str(homes / "out"), "--name", "My_Job"], capsys),
                   ("the name 'My_Job' cannot name a TrainJob", "use lowercase letters, digits and '-'"))
    assert snapshot(homes) == before


def test_a_users_missing_script_stops_a_trainjob_export():
    cluster = cluster_of('[training]\nscript = "/nowhere/train.py"\n[[hosts]]\nname = "h"\nlocal = true\n'
                         '[[tasks]]\nhost = "h"\n')
    with pytest.raises(export.ExportError, match=re.escape("training.script '/nowhere/train.py' does not exist")):
        export.render("trainjob", cluster)


# --------------------------------------------------------------------------- bad input, through tfcc export

def assert_refused(code, out, err, words) -> None:
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfcc: error: "), err
    assert "unexpected" not in lines[0]
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"


def cluster_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return str(path)


BAD_INPUT = {
    "unknown-format": (["export", "kubernetes", "{c}", "-o", "{out}"],
                       ("unknown export format 'kubernetes'", "use one of scripts, slurm, tfjob, trainjob")),
    "evaluator-in-slurm": (["export", "slurm", "{ps}", "-o", "{out}"],
                           ("a Slurm export cannot carry the evaluator", "remove the evaluator")),
    "cluster-file-missing": (["export", "scripts", "{missing}", "-o", "{out}"], ("does not exist", "check the path")),
    "cluster-file-bad": (["export", "tfjob", "{bad}", "-o", "{out}"], ("is not valid TOML",)),
    "slurm-time": (["export", "slurm", "{c}", "-o", "{out}", "--time", "soon"],
                   ("time limit 'soon'", "write it like 1:00:00")),
    "slurm-name": (["export", "slurm", "{c}", "-o", "{out}", "--name", "../x"], ("the name '../x'",)),
    "output-is-a-file": (["export", "scripts", "{c}", "-o", "{c}"], ("is a file, not a folder",)),
    "hostile-host-name": (["export", "scripts", "{hostile}", "-o", "{out}"],
                          ("hosts[0].name: host name 'gpu1$(touch PWNED)' is not a valid name",
                           "use letters, digits, '.', '_' and '-'")),
    "host-name-with-a-path": (["export", "scripts", "{path}", "-o", "{out}"],
                              ("hosts[0].name: host name 'a/../../x' is not a valid name",)),
}


@pytest.mark.parametrize("argv, words", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_is_one_line_exit_2_and_writes_nothing(homes, capsys, argv, words):
    good = cluster_file(homes, TWO_LOCAL_WORKERS.format(epochs=1, p0=7101, p1=7102))
    (homes / "ps.toml").write_text(PS_FULL)
    (homes / "bad.toml").write_text("[[hosts]\n")
    for name, host in (("hostile", "gpu1$(touch PWNED)"), ("path", "a/../../x")):
        (homes / f"{name}.toml").write_text(f'[[hosts]]\nname = {json.dumps(host)}\nlocal = true\n'
                                            f'[[tasks]]\nhost = {json.dumps(host)}\n')
    names = {"c": good, "ps": str(homes / "ps.toml"), "bad": str(homes / "bad.toml"),
             "missing": str(homes / "nope.toml"), "out": str(homes / "out"), "hostile": str(homes / "hostile.toml"),
             "path": str(homes / "path.toml")}
    before = snapshot(homes)
    assert_refused(*tfcc([a.format(**names) for a in argv], capsys), words)
    assert snapshot(homes) == before


def test_a_folder_that_is_not_empty_is_refused_without_force_and_replaced_with_it(homes, capsys):
    good = cluster_file(homes, TWO_LOCAL_WORKERS.format(epochs=1, p0=7101, p1=7102))
    out = homes / "out"
    out.mkdir()
    (out / "launch-here.sh").write_text("old script\n")
    (out / "mine.txt").write_text("keep me\n")
    before = snapshot(homes)
    assert_refused(*tfcc(["export", "scripts", good, "-o", str(out)], capsys),
                   (f"folder '{out}' is not empty (it holds launch-here.sh, mine.txt)", "--force"))
    assert snapshot(homes) == before  # the old files untouched

    code, stdout, err = tfcc(["export", "scripts", good, "-o", str(out), "--force"], capsys)
    assert code == 0, err
    assert stdout.splitlines()[:2] == [f"wrote {out / 'launch-here.sh'}", f"wrote {out / 'README.md'}"]
    assert any(line.startswith("note: ") for line in stdout.splitlines())
    assert (out / "launch-here.sh").read_text().startswith("#!/usr/bin/env bash")
    assert (out / "mine.txt").read_text() == "keep me\n"  # --force replaces the export's files, nothing else
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_the_embedded_default_exports_without_a_cluster_file(homes, capsys):
    for fmt, name in (("scripts", "launch-local.sh"), ("slurm", "tfcc.sbatch"), ("tfjob", "tfcc.yaml"),
                      ("trainjob", "tfcc.yaml")):
        out = homes / fmt
        code, stdout, err = tfcc(["export", fmt, "-o", str(out)], capsys)
        assert code == 0, err
        assert (out / name).is_file() and f"wrote {out / name}" in stdout
    assert "--slurm-jobs worker:2" in (homes / "slurm" / "tfcc.sbatch").read_text()


def test_write_refuses_a_folder_where_a_file_goes_and_writes_nothing(tmp_path):
    exported = export.render("scripts", cl.default())
    out = tmp_path / "out"
    (out / "README.md").mkdir(parents=True)
    with pytest.raises(export.ExportError, match="is a folder, where the export writes a file"):
        export.write(exported, out, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["README.md"]


def test_a_users_missing_script_is_named(tmp_path):
    cluster = cluster_of('[training]\nscript = "/nowhere/train.py"\n[[hosts]]\nname = "h"\nlocal = true\n'
                         '[[tasks]]\nhost = "h"\n')
    for fmt in ("scripts", "slurm", "tfjob"):  # tfjob once accepted it
        with pytest.raises(export.ExportError, match=re.escape("training.script '/nowhere/train.py' does not exist")):
            export.render(fmt, cluster)


def test_an_export_into_a_pipe_that_closes_early_is_no_error(homes):
    """`tfcc export … | head`: the reader had enough; no error, nothing in the log."""
    tfcc = Path(sys.executable).with_name("tfcc")
    done = subprocess.run(f"{shlex.quote(str(tfcc))} export scripts -o {shlex.quote(str(homes / 'out'))} | true",
                          shell=True, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TFCC_CONSOLE_HOME": str(homes / "console")})
    assert done.stderr == ""
    log = homes / "console" / "tfcc.log"
    assert not log.exists() or "Traceback" not in log.read_text()


@pytest.mark.parametrize("breaker", ["\u2028", "\u2029", "\x85", "\n", "\r"])
def test_a_file_name_that_breaks_a_line_stays_in_its_header_comment(tmp_path, breaker):
    """A script's file name is in each export's header comment. A line break in it (U+2028, which YAML reads as
    one; a newline, which the shell does) must not end the comment: the rest would be YAML (another Kubernetes
    object on kubectl apply) or shell commands. The comment carries the name with such characters as '?'."""
    import yaml

    proj = tmp_path / "proj"
    proj.mkdir()
    injected = f"train{breaker}---{breaker}kind: Secret{breaker}touch pwned #.py"
    (proj / injected).write_text("print('hi')\n")
    cluster = cluster_of(MWMS_THREE)
    cluster.training.script = str(proj / injected)
    for fmt, kinds in (("tfjob", ["TFJob"]), ("trainjob", ["TrainingRuntime", "TrainJob"])):
        (text,) = [t for n, t in export.render(fmt, cluster, export.Options(image="reg.example/tfcc:2.21")).files.items()
                   if n.endswith(".yaml")]
        assert sorted(doc["kind"] for doc in yaml.safe_load_all(text) if doc) == sorted(kinds)
        assert "running the script train?---?kind: Secret?touch pwned #.py" in text
    for name, text in export.render("scripts", cluster).files.items():
        if name.endswith(".sh"):  # its commands quote the name (shlex.quote); its header comment holds it whole
            header = text.split("\nset -u")[0].splitlines()[1:]
            assert all(line.startswith("#") for line in header), header
            assert any("running the script train?---?kind: Secret?touch pwned #.py" in line for line in header)
            assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_a_tfjob_reads_its_secrets_from_a_kubernetes_secret_never_the_file(monkeypatch, tmp_path):
    """docs/security.md: a TFJob's secret_env comes from the Kubernetes secret <name>-secrets in every container;
    the value the console's environment holds is in no file."""
    token = "s3cr3t-" + os.urandom(8).hex()
    monkeypatch.setenv("MY_TOKEN", token)
    cluster = cluster_of(MWMS_THREE)
    cluster.training.secret_env = ["MY_TOKEN"]
    exported = export.render("tfjob", cluster, export.Options(image="reg.example/tfcc:2.21", name="mine"))
    assert not any(token in text for text in exported.files.values())
    for spec in manifest_of(exported)["spec"]["tfReplicaSpecs"].values():
        env = {e["name"]: e for e in container_of(spec)["env"]}
        assert env["MY_TOKEN"] == {"name": "MY_TOKEN",
                                   "valueFrom": {"secretKeyRef": {"name": "mine-secrets", "key": "MY_TOKEN"}}}


def test_an_exported_launch_script_names_its_secrets_and_starts_nothing_without_them(tmp_path):
    """docs/security.md: an exported script says ${NAME} for a secret, never its value, and checks that the
    environment it runs in has it before it starts anything."""
    cluster = cluster_of(MWMS_THREE)
    cluster.training.secret_env = ["MY_TOKEN"]
    written = export.write(export.render("scripts", cluster), tmp_path / "out")
    (launch,) = [p for p in written if p.name.startswith("launch-")]
    assert "export MY_TOKEN\n" in launch.read_text()
    env = {k: v for k, v in os.environ.items() if k != "MY_TOKEN"}
    done = subprocess.run(["bash", str(launch)], capture_output=True, text=True, env=env, timeout=60,
                          cwd=tmp_path / "out")
    assert done.returncode == 2
    assert done.stderr.strip().endswith("MY_TOKEN is not set: export it, then run this again")
    assert not (tmp_path / "out" / "runs").exists(), "nothing started"
