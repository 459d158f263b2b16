"""A script's workdir: what is shipped, what is refused, uploads that send nothing twice, runs that use it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from agent import runs
from console import cluster as cl
from console.remote.link import HostLink
from console.run.runner import Run
from console.errors import RunError
from console.workdir import collect, excluded_module
from tests.helpers.cli import tfcc
from tests.helpers.waiting import wait_until


@pytest.fixture
def homes(tmp_path, monkeypatch):
    """The agent's and the console's folders for one test, and a project folder beside them."""
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "host-home"))
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    (tmp_path / "proj").mkdir()
    return tmp_path


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def shipped(training: cl.Training) -> list[str]:
    return [f.rel for f in collect(training).files]


# --------------------------------------------------------------------------- what is shipped


def test_ignore_files_at_two_levels_with_negation_and_the_defaults(homes):
    proj = homes / "proj"
    write(proj, {
        "main.py": "import helper\n", "helper.py": "", "notes.log": "", "keep.log": "",
        ".gitignore": "*.log\n!keep.log\n/out/\nsecret.txt\n",
        "out/model.h5": "", "src/out/kept.txt": "",                 # /out/ is anchored to its folder
        "src/secret.txt": "", "src/lib.py": "", "src/cache.bin": "", "src/debug.log": "",
        "src/.gitignore": "*.bin\n!debug.log\n",                      # a deeper file re-includes
        "src/.tfccignore": "lib.py\n",                                # .tfccignore beside it
        ".git/HEAD": "", "__pycache__/helper.cpython-311.pyc": "", "old.pyc": "", ".venv/bin/python": "",
        "venv/lib.py": "", "node_modules/x/index.js": "", "pkg.egg-info/PKG-INFO": "", ".tox/x": "",
        ".mypy_cache/x": "", ".pytest_cache/x": "", ".ipynb_checkpoints/x": "", ".tfcc/x": "",
        "env3/pyvenv.cfg": "home = /usr/bin\n", "env3/lib/site.py": "",  # any folder with pyvenv.cfg
        "data/in.txt": "hello",
    })
    assert shipped(cl.Training(script=str(proj / "main.py"))) == [
        ".gitignore", "data/in.txt", "helper.py", "keep.log", "main.py", "src/.gitignore", "src/.tfccignore",
        "src/debug.log", "src/out/kept.txt"]


def test_a_default_can_be_re_included_but_a_virtual_environment_never(homes):
    proj = homes / "proj"
    write(proj, {"main.py": "", ".tfccignore": "!venv/\n!env/\n", "venv/code.py": "",
                 "env/pyvenv.cfg": "", "env/x.py": ""})
    assert shipped(cl.Training(script=str(proj / "main.py"))) == [".tfccignore", "main.py", "venv/code.py"]


def test_tfccs_own_folders_inside_the_workdir_are_never_shipped(homes):
    write(homes, {"main.py": "", "host-home/dist/x/agent.py": "", "console-home/runs/r.json": "",
                  "proj/.keep": ""})
    assert shipped(cl.Training(script=str(homes / "main.py"))) == ["main.py", "proj/.keep"]


def test_links_outside_are_skipped_inside_shipped_as_their_files_content(homes, tmp_path):
    proj = homes / "proj"
    write(proj, {"main.py": "", "real.py": "x = 1\n", "sub/a.txt": "a", "ignored.txt": "",
                 ".tfccignore": "ignored.txt\n"})
    secret = tmp_path / "ssh" / "id_ed25519"
    write(tmp_path, {"ssh/id_ed25519": "PRIVATE"})
    (proj / "key").symlink_to(secret)               # a file outside: never
    (proj / "ssh").symlink_to(secret.parent)        # a folder outside: never
    (proj / "alias.py").symlink_to("real.py")       # a file inside: its content
    (proj / "subdir").symlink_to("sub")             # a folder inside: not followed
    (proj / "dangling").symlink_to("nowhere")
    (proj / "back.txt").symlink_to("ignored.txt")   # a file inside that is excluded: not through a link
    workdir = collect(cl.Training(script=str(proj / "main.py")))
    assert [f.rel for f in workdir.files] == [".tfccignore", "alias.py", "main.py", "real.py", "sub/a.txt"]
    alias = next(f for f in workdir.files if f.rel == "alias.py")
    assert alias.path == proj / "real.py" and alias.size == 6
    skipped = {s.rel: s.why for s in workdir.skipped}
    assert skipped["key"] == f"a link to {secret}, outside the workdir: not followed"
    assert skipped["ssh"] == f"a link to {secret.parent}, outside the workdir: not followed"
    assert skipped["subdir"] == "a link to a folder: not followed"
    assert skipped["dangling"] == "a broken link"
    assert "excluded by 'ignored.txt' in .tfccignore (line 1)" in skipped["back.txt"]
    assert not any(b"PRIVATE" in f.path.read_bytes() for f in workdir.files)


def test_special_files_and_names_that_are_no_utf8_are_skipped(homes):
    proj = homes / "proj"
    write(proj, {"main.py": ""})
    os.mkfifo(proj / "pipe")  # reading it would wait forever
    with open(os.path.join(os.fsencode(proj), b"bad\xff.txt"), "w"):
        pass
    workdir = collect(cl.Training(script=str(proj / "main.py")))
    assert [f.rel for f in workdir.files] == ["main.py"]
    assert {s.rel: s.why for s in workdir.skipped} == {
        "pipe": "not a regular file (a pipe, socket or device)",
        "bad?.txt": "its name is not valid UTF-8"}


def test_the_workdir_setting_relative_paths_and_the_files_fields(homes, monkeypatch):
    write(homes / "proj", {"src/main.py": "print(1)\n", "conf/run.yaml": "a: 1\n", "tool.sh": "#!/bin/sh\n"})
    os.chmod(homes / "proj" / "tool.sh", 0o755)
    monkeypatch.chdir(homes)  # a relative path starts at the folder tfcc runs in
    workdir = collect(cl.Training(script="proj/src/main.py", workdir="proj"))
    assert workdir.root == homes / "proj" and workdir.script == "src/main.py"
    files = {f.rel: f for f in workdir.files}
    assert sorted(files) == ["conf/run.yaml", "src/main.py", "tool.sh"]
    assert files["tool.sh"].executable and not files["src/main.py"].executable
    assert files["src/main.py"].size == 9
    assert files["src/main.py"].sha256 == hashlib.sha256(b"print(1)\n").hexdigest()
    assert workdir.entries()[0] == ["conf/run.yaml", files["conf/run.yaml"].sha256, False]


def test_a_module_ships_the_folder_that_holds_its_package(homes, monkeypatch):
    """``module``: the workdir is the folder python -m runs from (default: the one tfcc runs in), the file
    that runs is the module's, or its package's ``__main__.py``."""
    write(homes / "proj", {"trainer/__init__.py": "", "trainer/task.py": "from . import model\n",
                           "trainer/model.py": "", "tool/__main__.py": "", "setup.py": ""})
    monkeypatch.chdir(homes / "proj")
    workdir = collect(cl.Training(module="trainer.task"))
    assert workdir.root == homes / "proj" and workdir.script == "trainer/task.py"
    assert sorted(f.rel for f in workdir.files) == [
        "setup.py", "tool/__main__.py", "trainer/__init__.py", "trainer/model.py", "trainer/task.py"]
    monkeypatch.chdir(homes)
    assert collect(cl.Training(module="tool", workdir="proj")).script == "tool/__main__.py"


def test_a_module_that_is_not_in_its_workdir_or_leaves_it(homes, monkeypatch):
    write(homes, {"proj/trainer/__init__.py": "", "outside.py": ""})
    (homes / "proj" / "trainer" / "task.py").symlink_to(homes / "outside.py")
    monkeypatch.chdir(homes / "proj")
    assert refused(homes, cl.Training(module="trainer.tusk")) == (
        f"training.module 'trainer.tusk' is not in the folder tfcc runs in ({homes / 'proj'}): neither "
        "trainer/tusk.py nor trainer/tusk/__main__.py is there; check the module's name")
    assert refused(homes, cl.Training(module="trainer.task")) == (
        f"training.module 'trainer.task' is trainer/task.py, a link out of its workdir {homes / 'proj'}; put the "
        "module's files inside the workdir")
    monkeypatch.chdir(homes)
    assert refused(homes, cl.Training(module="trainer.task")) == (
        f"training.module 'trainer.task' is not in the folder tfcc runs in ({homes}): neither trainer/task.py nor "
        "trainer/task/__main__.py is there; set training.workdir to the folder that holds trainer/ (where you "
        "would run python -m trainer.task)")


def test_a_module_run_from_the_home_folder_is_refused(homes, monkeypatch):
    monkeypatch.setenv("HOME", str(homes / "proj"))
    write(homes / "proj", {"trainer/task.py": "", ".ssh/id_ed25519": "PRIVATE"})
    monkeypatch.chdir(homes / "proj")
    with pytest.raises(RunError, match="the folder tfcc runs in, .* is your home folder: tfcc would ship all of it "
                                       "to every host; put the module's package and the files it needs in a "
                                       "folder of their own"):
        collect(cl.Training(module="trainer.task"))


# --------------------------------------------------------------------------- what is refused


def local_run(homes, training: cl.Training, run_id: str = "r") -> Run:
    return Run(cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")], training), run_id)


def refused(homes, training: cl.Training) -> str:
    """The one-line error of starting a run with ``training``; nothing may have reached the host."""
    run = local_run(homes, training)
    try:
        with pytest.raises(RunError) as err:
            run.start()
    finally:
        run.detach()
    words = str(err.value)
    assert "\n" not in words
    assert not (homes / "host-home").exists()  # no code, no blobs, no run folder: no host was reached
    return words


def test_a_workdir_that_does_not_exist_or_is_a_file(homes, monkeypatch):
    write(homes / "proj", {"main.py": "", "notes.txt": ""})
    monkeypatch.chdir(homes)
    words = refused(homes, cl.Training(script="proj/main.py", workdir="nope"))
    assert words == (f"training.workdir 'nope' ({homes / 'nope'}) does not exist; check the path (a relative one "
                     "starts at the folder tfcc runs in), or remove workdir to ship the script's own folder")
    words = refused(homes, cl.Training(script="proj/main.py", workdir=str(homes / "proj" / "notes.txt")))
    assert words.startswith(f"training.workdir {str(homes / 'proj' / 'notes.txt')!r} is a file, not a folder; ")


def test_a_script_outside_its_workdir(homes):
    write(homes, {"main.py": "", "proj/x.py": ""})
    words = refused(homes, cl.Training(script=str(homes / "main.py"), workdir=str(homes / "proj")))
    assert words == (f"training.script {str(homes / 'main.py')!r} ({homes / 'main.py'}) is outside its workdir "
                     f"{homes / 'proj'}; put the script inside the workdir, or set training.workdir to a folder "
                     "that holds it")


def test_a_script_that_an_ignore_file_excludes(homes):
    write(homes / "proj", {"scratch/main.py": "", ".gitignore": "scratch/\n"})
    words = refused(homes, cl.Training(script=str(homes / "proj" / "scratch" / "main.py"),
                                       workdir=str(homes / "proj")))
    assert "is not shipped with its workdir" in words
    assert words.endswith("scratch/ is excluded by 'scratch/' in .gitignore (line 1); remove that exclusion")


def test_a_workdir_over_the_size_cap_names_its_biggest_files(homes, monkeypatch):
    proj = homes / "proj"
    write(proj, {"main.py": "", "data/train.bin": b"\0" * (3 << 20), "data/val.bin": b"\0" * (2 << 20),
                 "model.h5": b"\0" * 1500})
    monkeypatch.setattr("console.workdir.MAX_BYTES", 4 << 20)
    words = refused(homes, cl.Training(script=str(proj / "main.py")))
    assert words == (f"the script's folder {proj} (its workdir) holds 5.0 MiB in 4 files, more than the cap of "
                     "4.0 MiB; the biggest: data/train.bin (3.0 MiB), data/val.bin (2.0 MiB), model.h5 (1.5 KiB), "
                     f"main.py (0 bytes); exclude them in {proj / '.tfccignore'} (a line per file or folder) or "
                     "move data out of the folder (the script can read it from its own path on each host)")


def test_a_workdir_over_the_file_cap_names_where_they_are(homes, monkeypatch):
    proj = homes / "proj"
    write(proj, {"main.py": "", **{f"images/{i}.png": "" for i in range(30)}, **{f"x/{i}": "" for i in range(5)}})
    monkeypatch.setattr("console.workdir.MAX_FILES", 20)
    assert refused(homes, cl.Training(script=str(proj / "main.py"))) == (
        f"the script's folder {proj} (its workdir) holds 36 files, more than the cap of 20; the most are in images/ "
        f"(30 files), x/ (5 files), its top folder (1 files); exclude them in {proj / '.tfccignore'} or move data "
        "out of the folder")


def test_the_home_folder_is_no_workdir(monkeypatch, homes):
    monkeypatch.setenv("HOME", str(homes / "proj"))
    write(homes / "proj", {"main.py": "", ".ssh/id_ed25519": "PRIVATE"})
    with pytest.raises(RunError, match="is your home folder: tfcc would ship all of it to every host; put the "
                                       "script and the files it needs in a folder of their own"):
        collect(cl.Training(script=str(homes / "proj" / "main.py")))


def test_what_holds_home_and_its_settings_folders_are_no_workdir_and_keys_are_never_shipped(monkeypatch, homes):
    """A shared cluster file must not carry a host's keys away: a workdir that holds the home folder
    (/home), or one of its settings folders (~/.config), is refused; keys inside a workdir stay here."""
    home = homes / "users" / "me"
    monkeypatch.setenv("HOME", str(home))
    write(home, {".config/tool/run.py": "", "proj/main.py": "", "proj/.ssh/id_ed25519": "PRIVATE",
                 "proj/certs/server.pem": "PRIVATE", "proj/id_rsa": "PRIVATE", "proj/.aws/credentials": "PRIVATE"})
    with pytest.raises(RunError, match="is a folder that holds your home folder: tfcc would ship all of it"):
        collect(cl.Training(script=str(home / "proj" / "main.py"), workdir=str(homes / "users")))
    with pytest.raises(RunError, match="is .config, a settings folder in your home folder"):
        collect(cl.Training(script=str(home / ".config" / "tool" / "run.py"), workdir=str(home / ".config")))
    assert [f.rel for f in collect(cl.Training(script=str(home / "proj" / "main.py"))).files] == ["main.py"]


TOKEN_FILES = (".env", ".env.production", ".git-credentials", ".pypirc", ".netrc", ".kube/config", ".gnupg/pubring.kbx",
               ".docker/config.json", "credentials.json", "credentials-gcp.json", "tls/server.key", "certs/me.p12",
               "certs/me.pfx", "keys/deploy.pem")


def test_token_files_stay_home_unless_a_bang_line_takes_one_and_check_names_every_dotfile_shipped(homes):
    """A project folder as people have it: a .env beside the code, a kube config, a registry login, cloud
    credentials. None reaches a host by default (that would go around secret_env); a "!" line in .tfccignore
    ships one, and the check lists every dotfile that will ship, so it is seen before it goes."""
    from console import checks

    proj = homes / "proj"
    write(proj, {"main.py": "print(1)\n", "model/net.py": "X = 1\n", **{name: "TOKEN" for name in TOKEN_FILES}})
    training = cl.Training(script=str(proj / "main.py"))
    assert sorted(f.rel for f in collect(training).files) == ["main.py", "model/net.py"]
    (proj / ".tfccignore").write_text("!.env.production\n!.kube/\n")
    shipped = collect(training)
    assert sorted(f.rel for f in shipped.files) == [".env.production", ".kube/config", ".tfccignore", "main.py",
                                                    "model/net.py"]
    cluster = cl.default()
    cluster.training = training
    rows, problems = checks.workload_files(cluster)
    assert problems == [] and rows[1]["dotfiles"] == [".env.production", ".kube/config", ".tfccignore"]
    assert rows[1]["path"].endswith("; key and token files shipped (a ! line took them back): .env.production, "
                                    ".kube/config; dotfiles shipped: .env.production, .kube/config, .tfccignore")
    # Each of them, taken back, is named (those without a dot too); a folder's file comes back with its folder.
    (proj / ".tfccignore").write_text("".join(f"!{name.split('/')[0]}/\n" if name.startswith((".kube", ".docker",
                                                                                           ".gnupg")) else f"!{name}\n"
                                              for name in TOKEN_FILES))
    rows, _ = checks.workload_files(cluster)
    assert sorted(rows[1]["secrets"]) == sorted(TOKEN_FILES)


# --------------------------------------------------------------------------- upload


def test_an_upload_sends_only_what_the_host_lacks(homes):
    proj = homes / "proj"
    write(proj, {"main.py": "import helper\n", "helper.py": "x = 1\n", "copy.py": "x = 1\n", "data.bin": b"1" * 5000})
    training = cl.Training(script=str(proj / "main.py"))
    link = HostLink(cl.Host(name="here", local=True))
    progress = []
    try:
        first = collect(training)
        assert link.upload_blobs(first, lambda sent, total: progress.append((sent, total))) == 14 + 6 + 5000
        assert progress[-1] == (5020, 5020)  # helper.py and copy.py: one blob
        blobs = homes / "host-home" / "blobs"
        assert sorted(p.name for p in blobs.iterdir()) == sorted({f.sha256 for f in first.files})
        assert link.upload_blobs(collect(training)) == 0
        (proj / "helper.py").write_text("x = 2  # changed\n")
        assert link.upload_blobs(collect(training)) == len("x = 2  # changed\n")
        assert not [p for p in blobs.iterdir() if p.name.startswith(".")]  # no upload folder left behind
    finally:
        link.drop()


# --------------------------------------------------------------------------- runs


def test_a_resume_keeps_the_tasks_work_folder_and_needs_no_new_look(homes):
    proj = homes / "proj"
    write(proj, {"main.py": "import os, sys\nopen('attempts.txt', 'a').write(os.environ['TFCC_ATTEMPT'] + '\\n')\n"
                            "sys.exit(1)\n"})
    run = local_run(homes, cl.Training(script=str(proj / "main.py")), "again")
    work = homes / "host-home" / "runs" / "again" / "worker-0" / "work"

    def failed() -> bool:  # and its supervisor gone: a relaunch waits for that
        state = runs.read_json(runs.task_dir("again", "worker-0") / "state.json") or {}
        return (run.status()[0]["phase"] == "failed"
                and not runs.is_same_process(state.get("pid"), state.get("start_time")))

    try:
        run.start()
        collected = run.workdir
        assert wait_until(failed, 30)
        (proj / "main.py").write_text("raise SystemExit('not the code the run started with')\n")
        run.start(resume=True)
        assert wait_until(lambda: failed() and (work / "attempts.txt").read_text() == "1\n2\n", 30)
        assert run.workdir is collected
        assert (work / "main.py").read_text().startswith("import os, sys")
    finally:
        run.stop(grace=0)
        run.detach()


def two_file_project(proj: Path, tfccignore: str = "") -> Path:
    write(proj, {
        "main.py": "import os\nimport helper\n"
                   "text = open('data/in.txt').read()\n"
                   "open('out.txt', 'w').write(helper.shout(text) + ' from ' + os.environ['TFCC_TASK'])\n"
                   "print('wrote out.txt')\n",
        "helper.py": "def shout(text):\n    return text.upper()\n",
        "data/in.txt": "hello",
        ".tfccignore": tfccignore,
    })
    cluster = proj.parent / "cluster.toml"
    cluster.write_text(f'[training]\nscript = {str(proj / "main.py")!r}\nmax_restarts = 1\n\n'
                       '[[hosts]]\nname = "local"\nlocal = true\n\n'
                       '[[tasks]]\nhost = "local"\n\n[[tasks]]\nhost = "local"\n')
    return cluster


def test_a_two_file_script_runs_from_its_own_folder_on_every_task(homes, capsys):
    cluster = two_file_project(homes / "proj")
    code, out, err = tfcc(["run", str(cluster), "--run-id", "two"], capsys)
    assert code == 0, out + err
    for task in ("worker-0", "worker-1"):
        work = homes / "host-home" / "runs" / "two" / task / "work"
        assert (work / "out.txt").read_text() == f"HELLO from {task}"
        assert sorted(p.name for p in work.iterdir() if p.name != "__pycache__") == [  # Python's own, if it writes it
            ".tfccignore", "data", "helper.py", "main.py", "out.txt"]
    assert not (homes / "proj" / "out.txt").exists()


def test_a_module_the_workdir_excludes_is_named_with_its_exclusion(homes, capsys):
    cluster = two_file_project(homes / "proj", tfccignore="# no helpers\nhelper.py\n")
    code, out, err = tfcc(["run", str(cluster), "--run-id", "excl"], capsys)
    assert code == 1
    said = out + err
    assert ("the training code imports the module 'helper', which is in your workdir on this machine but was not "
            "shipped to the hosts: helper.py is excluded by 'helper.py' in .tfccignore (line 2); remove that "
            "exclusion") in said, said
    assert "pip install helper" not in said and "restarting" not in said


def test_the_diagnosis_asks_the_workdir_only_for_a_module_that_is_there(homes):
    proj = homes / "proj"
    write(proj, {"main.py": "", "helper.py": "", "pkg/__init__.py": "", "kept.py": "",
                 ".gitignore": "pkg/\n", ".tfccignore": "helper.py\n"})
    training = cl.Training(script=str(proj / "main.py"))
    assert str(excluded_module(training, "helper")) == "helper.py is excluded by 'helper.py' in .tfccignore (line 1)"
    assert str(excluded_module(training, "pkg.sub")) == "pkg/ is excluded by 'pkg/' in .gitignore (line 1)"
    assert excluded_module(training, "kept") is None       # shipped: something else is wrong
    assert excluded_module(training, "numpy") is None      # not here: today's advice
    assert excluded_module(cl.Training(), "helper") is None


def test_over_ssh_an_upload_sends_only_what_the_host_lacks(ssh_hosts, ssh_env):
    import sys

    ssh_hosts.known_hosts(ssh_env / "known_hosts")
    proj = ssh_env / "proj"
    write(proj, {"main.py": "import helper\n", "helper.py": "x = 1\n", "data/big.bin": b"\1" * 300_000})
    training = cl.Training(script=str(proj / "main.py"))
    test_host = ssh_hosts.hosts[0]
    link = HostLink(cl.Host(name=test_host.name, address=test_host.address, user="root",
                            key=str(ssh_hosts.client_key), python=sys.executable))
    blobs = test_host.tfcc_home / "blobs"
    try:
        for blob in blobs.glob("*"):  # the hosts live for the module: start from no blob
            blob.unlink()
        first = collect(training)
        assert link.upload_blobs(first) == first.size
        assert sorted(p.name for p in blobs.iterdir()) == sorted(f.sha256 for f in first.files)
        assert link.upload_blobs(collect(training)) == 0
        (proj / "helper.py").write_text("x = 2\n")
        assert link.upload_blobs(collect(training)) == 6
    finally:
        link.drop()
