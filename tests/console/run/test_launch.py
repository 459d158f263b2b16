"""What a task is started with: the cluster's env, and its secrets, which reach the task's environment alone."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

import pytest

from console import cluster as cl
from console import export
from console.run.launch import secret_values
from console.run.runner import Run
from console.run.session import RunSession
from tests.helpers.cli import tfcc
from tests.helpers.scripted import follow_to_end
from tests.helpers.waiting import wait_until

TASK = """import hashlib, os, pathlib, sys, time
token = os.environ.get("MY_API_TOKEN", "")
print("secret ok" if hashlib.sha256(token.encode()).hexdigest() == sys.argv[1] else "secret WRONG", flush=True)
print("plain", os.environ.get("PLAIN_SETTING"), flush=True)
deadline = time.time() + 60
while not pathlib.Path(sys.argv[2]).exists() and time.time() < deadline:
    time.sleep(0.05)
"""


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    return tmp_path


def secret_cluster(homes: Path, token_hash: str) -> cl.Cluster:
    script = homes / "project" / "task.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(TASK)
    training = cl.Training(script=str(script), args=[token_hash, str(homes / "go")], capture=False,
                           env={"PLAIN_SETTING": "visible"}, secret_env=["MY_API_TOKEN"])
    return cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here"), cl.Task(host="here")], training)


def every_file(root: Path):
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            yield path


def test_a_secret_reaches_the_tasks_environment_and_no_file_no_command_line_no_export(homes, monkeypatch, capsys):
    token = "tok-" + secrets.token_hex(16)
    monkeypatch.setenv("MY_API_TOKEN", token)
    cluster = secret_cluster(homes, hashlib.sha256(token.encode()).hexdigest())
    path = homes / "secret.toml"
    cl.save(cluster, path)
    run = Run(cl.load(path), "secret-run")
    run.start()
    outputs = [homes / "host-home" / "runs" / "secret-run" / t / "stdout.log" for t in ("worker-0", "worker-1")]
    assert wait_until(lambda: all(p.exists() and "plain visible" in p.read_text() for p in outputs), 30)
    assert all("secret ok" in p.read_text() for p in outputs)
    commands = [p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline") if p.exists()]
    assert not [c for c in commands if token.encode() in c]  # never on a command line (ps)
    (homes / "go").touch()
    follow_to_end(RunSession(run), 60)
    assert [t.phase for t in run.tasks] == ["finished", "finished"]
    assert tfcc(["runs", "--json"], capsys)[0] == 0
    for fmt in export.FORMATS:
        export.write(export.render(fmt, cl.load(path)), homes / "exports" / fmt)
    written = list(every_file(homes))
    assert len(written) > 20 and any(p.name == "spec.json" for p in written)
    assert not [p for p in written if token.encode() in p.read_bytes()], "a file holds the secret"
    spec = json.loads((homes / "host-home" / "runs" / "secret-run" / "worker-0" / "spec.json").read_text())
    assert spec["secret_env"] == ["MY_API_TOKEN"] and spec["env"]["PLAIN_SETTING"] == "visible"
    launch = (homes / "exports" / "scripts" / "launch-here.sh").read_text()
    assert "export PLAIN_SETTING=visible" in launch and "export MY_API_TOKEN" in launch
    assert 'MY_API_TOKEN' in (homes / "exports" / "slurm" / "tfcc.sbatch").read_text()


def test_a_secret_the_console_lacks_is_one_line_and_nothing_starts(homes, monkeypatch, capsys):
    monkeypatch.delenv("MY_API_TOKEN", raising=False)
    path = homes / "secret.toml"
    cl.save(secret_cluster(homes, "0" * 64), path)
    code, out, err = tfcc(["run", str(path), "--run-id", "no-secret"], capsys)
    assert code == 2 and err.strip() == (
        "tfcc: error: training.secret_env names MY_API_TOKEN, which this console's environment does not set; "
        "set MY_API_TOKEN in the environment tfcc starts in (export MY_API_TOKEN=...), then start again; tfcc "
        "passes its value to the tasks and never writes it down")
    assert not (homes / "host-home" / "runs" / "no-secret").exists()


def test_secret_values_come_from_the_environment_given():
    cluster = cl.Cluster([cl.Host(name="h", local=True)], [cl.Task(host="h")],
                         cl.Training(secret_env=["A_KEY", "B_KEY"]))
    assert secret_values(cluster, {"A_KEY": "1", "B_KEY": "", "OTHER": "x"}) == {"A_KEY": "1", "B_KEY": ""}


@pytest.mark.parametrize("text, words", [
    ('env = { "TF_CONFIG" = "x" }', "training.env names TF_CONFIG, which tfcc sets itself"),
    ('env = { "TFCC_HOME" = "x" }', "training.env names TFCC_HOME, which tfcc sets itself"),
    ('env = { "1BAD" = "x" }', "training.env names '1BAD'; an environment variable's name is letters"),
    ('env = { A = 1 }', "training.env must be a table of strings"),
    ('secret_env = "KEY"', "training.secret_env must be a list of names"),
    ('secret_env = ["KEY", "KEY"]', "training.secret_env names a variable twice"),
    ('env = { KEY = "x" }\nsecret_env = ["KEY"]', "training.env and training.secret_env both name KEY"),
])
def test_bad_env_settings_say_what_to_do(text, words):
    with pytest.raises(cl.ClusterFileError, match=words.replace("(", r"\(").replace(")", r"\)")):
        cl.loads(f"[training]\n{text}\n[[hosts]]\nname = \"h\"\nlocal = true\n[[tasks]]\nhost = \"h\"\n")


def test_a_module_runs_as_python_m_from_the_tasks_copy_of_its_workdir():
    """The task's cwd is its copy of the workdir (agent/runs.py): ``-m`` finds the package there."""
    from console.run.launch import task_command
    cluster = cl.Cluster([cl.Host(name="h", local=True)], [cl.Task(host="h")],
                         cl.Training(module="trainer.task", args=["--num-epochs", "2"]))
    argv, _ = task_command(cluster, cluster.tasks[0], "python3", "/d", "trainer/task.py")
    assert argv == ["python3", "/d/trainer/capture.py", "-m", "trainer.task", "--num-epochs", "2"]
    cluster.training.capture = False
    argv, _ = task_command(cluster, cluster.tasks[0], "python3", "/d", "trainer/task.py")
    assert argv == ["python3", "-m", "trainer.task", "--num-epochs", "2"]


@pytest.mark.parametrize("files, flavour, why", [
    ({"main.py": "import tensorflow as tf\nmodel = tf.keras.Sequential()\n"}, "tf-keras",
     "it uses tf.keras (main.py:2), written for Keras 2"),
    ({"main.py": "from tensorflow import keras\n"}, "tf-keras", "it uses tf.keras (main.py:1), written for Keras 2"),
    ({"main.py": "import model\n", "model.py": "from tensorflow.keras import layers\n"}, "tf-keras",
     "it uses tf.keras (model.py:1), written for Keras 2"),
    ({"main.py": "import keras\nimport tensorflow as tf\nx = tf.keras.layers\n"}, "keras3",
     "it imports keras (main.py:1), Keras 3"),
    ({"main.py": "import tf_keras as keras\n"}, "tf-keras", "it imports tf_keras (main.py:1)"),
    ({"main.py": "import tensorflow as tf\nprint(tf.constant(1))\n"}, "", "it uses no Keras"),
], ids=["tf.keras", "from-tensorflow-import-keras", "tf.keras-in-a-module-beside", "keras3", "tf_keras", "none"])
def test_auto_gives_one_task_the_keras_its_code_was_written_for(tmp_path, files, flavour, why):
    from console.run.launch import keras_choice, keras_environment
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    cluster = cl.Cluster([cl.Host(name="h", local=True)], [cl.Task(host="h")],
                         cl.Training(script=str(tmp_path / "main.py")))
    assert keras_choice(cluster) == (flavour, why)
    env = keras_environment(cluster)
    assert env.get("TF_USE_LEGACY_KERAS") == {"tf-keras": "1", "keras3": "0", "": None}[flavour]
    assert env["TFCC_KERAS_REASON"] == f"{flavour or 'its own Keras'}: {why}"


def test_auto_gives_tf_keras_where_keras3_cannot_run_fit_and_a_setting_wins(tmp_path):
    from console.run.launch import keras_choice
    (tmp_path / "main.py").write_text("import keras\n")
    two = cl.Cluster([cl.Host(name="h", local=True)], [cl.Task(host="h"), cl.Task(host="h")],
                     cl.Training(script=str(tmp_path / "main.py")))
    assert keras_choice(two) == ("tf-keras", "2 training tasks: Keras 3 cannot run fit there")
    two.training.keras = "keras3"
    assert keras_choice(two) == ("keras3", 'training.keras = "keras3"')
    assert keras_choice(cl.default()) == ("tf-keras", "tfcc's trainer")


def test_a_resume_reads_the_secret_again_from_the_consoles_environment(homes, monkeypatch, capsys):
    """docs/security.md: secret_env's values are read from the console's environment at each start and resume (a
    token rotated between them reaches the resumed tasks; none is kept anywhere to reuse)."""
    script = homes / "project" / "show.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text("import hashlib, os, sys\n"
                      "print('token', hashlib.sha256(os.environ['MY_API_TOKEN'].encode()).hexdigest(), flush=True)\n"
                      "sys.exit(1)  # ended badly: the run can be resumed\n")
    cluster = cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")],
                         cl.Training(script=str(script), capture=False, secret_env=["MY_API_TOKEN"], max_restarts=0))
    path = homes / "rotated.toml"
    cl.save(cluster, path)
    first, second = "tok-" + secrets.token_hex(16), "tok-" + secrets.token_hex(16)
    monkeypatch.setenv("MY_API_TOKEN", first)
    assert tfcc(["run", str(path), "--run-id", "rotated"], capsys)[0] != 0
    monkeypatch.setenv("MY_API_TOKEN", second)
    tfcc(["resume", "rotated"], capsys)
    shown = (homes / "host-home" / "runs" / "rotated" / "worker-0" / "stdout.log").read_text().split()
    assert [shown[i + 1] for i, word in enumerate(shown) if word == "token"] == [
        hashlib.sha256(first.encode()).hexdigest(), hashlib.sha256(second.encode()).hexdigest()]


def test_under_slurm_a_task_keeps_only_a_ps_mask_of_its_gpus():
    """Slurm gives each task its GPUs (--gres, --gpu-bind): a worker's list is Slurm's to set, a ps sees none."""
    from console.run.launch import GPUS, gpu_environment, slurm_environment

    worker, ps = cl.Task("n", role="worker", gpus=[0, 1]), cl.Task("n", role="ps")
    env = {"PLAIN": "1"}
    assert slurm_environment(worker, {**env, **gpu_environment(worker)}) == env
    assert slurm_environment(ps, {**env, **gpu_environment(ps)}) == {**env, GPUS: ""}
