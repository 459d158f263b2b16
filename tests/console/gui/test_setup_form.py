"""The setup form's Training box: a script's own rows, the trainer's hidden with a script, the keys kept."""

from __future__ import annotations

import pytest

from console import cluster as cl
from console.cluster import KERAS_FLAVOURS
from console.cluster_fields import TRAINING
from console.gui.setup_form import SetupForm


@pytest.fixture
def form(qtbot) -> SetupForm:
    f = SetupForm()
    qtbot.addWidget(f)
    f.resize(470, 820)
    f.set_cluster(cl.default())
    f.show()
    return f


def shown(form: SetupForm, field) -> bool:
    """Whether ``field`` is shown, with its row's label (a widget inside a row's layout has none of its own)."""
    label = form.form.labelForField(field)
    return field.isVisibleTo(form) and (label is None or label.isVisibleTo(form))


def trainer_fields(form: SetupForm) -> list:
    return [form.epochs, form.batch, form.lr, form.lr_rule, form.strategy, form.communication, form.autoshard,
            form.batch_label]


def script_fields(form: SetupForm) -> list:
    return [form.workdir, form.script_args, form.keras, form.capture]


def test_the_trainers_workloads_look_as_before(form):
    assert all(shown(form, f) for f in (form.epochs, form.lr, form.strategy, form.batch_label))
    assert form.form.isRowVisible(form.trainer_rows[1])  # the batch row (a layout)
    assert not any(form.form.isRowVisible(f) for f in form.script_rows)
    assert form.file_label.text() == "Model file / script" and form.backup_seconds.isVisibleTo(form)


def test_a_script_shows_its_own_rows_and_hides_those_it_never_sees(form, qtbot):
    form.workload.setCurrentText("script")
    assert all(form.form.isRowVisible(f) for f in form.script_rows)
    assert not any(form.form.isRowVisible(f) for f in form.trainer_rows)
    for field in trainer_fields(form):
        label = form.form.labelForField(field)
        assert not field.isVisibleTo(form) and (label is None or not label.isVisibleTo(form)), field
    assert all(shown(form, f) for f in script_fields(form))
    assert form.file_label.text() == "Script" and form.workdir.placeholderText() == "the script's folder"
    assert form.capture.text() == "Capture metrics (fit, tf.summary, printed values)"
    assert form.capture.isChecked() and form.keras.currentData() == "auto"
    assert [form.keras.itemData(i) for i in range(form.keras.count())] == list(KERAS_FLAVOURS)
    assert form.keras.itemText(0) == "auto (tf-keras: 2 training tasks)"
    assert not form.backup_seconds.isVisibleTo(form) and form.max_restarts.isVisibleTo(form)
    # The hidden rows give their room back: the restarts row follows the capture row at once.
    qtbot.waitUntil(lambda: form.max_restarts.geometry().top() - form.capture.geometry().bottom()
                    < 3 * max(form.form.verticalSpacing(), 6), timeout=30_000)
    form.workload.setCurrentText("digits")
    assert all(shown(form, f) for f in trainer_fields(form)) and not form.workdir.isVisibleTo(form)


def test_the_keras_hint_says_what_auto_gives_these_tasks(form):
    form.workload.setCurrentText("script")
    form.set_cluster(cl.Cluster([cl.Host(name="here", local=True)], [cl.Task(host="here")],
                                cl.Training(script="main.py")))
    assert form.keras.itemText(0) == "auto (by its imports: tf.keras → tf-keras, keras → Keras 3)"
    form.set_cluster(cl.Cluster([cl.Host(name="here", local=True)],
                                [cl.Task(host="here", role="chief"), cl.Task(host="here"),
                                 cl.Task(host="here", role="ps")], cl.Training(script="main.py")))
    assert form.keras.itemText(0) == "auto (tf-keras: parameter-server training)"


def test_a_scripts_keys_round_trip_through_the_form_and_the_file(form, qtbot, tmp_path, dialogs):
    form.workload.setCurrentText("script")
    form.user_file.setText(str(tmp_path / "job" / "main.py"))
    dialogs.answer("QFileDialog.getExistingDirectory", str(tmp_path / "job"))
    form.btn_workdir.click()
    assert dialogs.asked[-1][1][-1] == str(tmp_path / "job")  # it opens at the script's folder
    form.script_args.setText("--epochs 2 --name 'two words'")
    form.keras.setCurrentIndex(form.keras.findData("tf-keras"))
    form.capture.setChecked(False)
    t = form.cluster.training
    assert (t.script, t.workdir, t.args, t.keras, t.capture) == (
        str(tmp_path / "job" / "main.py"), str(tmp_path / "job"), ["--epochs", "2", "--name", "two words"],
        "tf-keras", False)
    form.script_args.setText("--epochs 2 --name 'two")  # a quote still open: the last whole arguments stay
    assert t.args == ["--epochs", "2", "--name", "two words"] and "close the quote" in form.script_args.toolTip()
    form.script_args.setText("--epochs 2 --name 'two words'")

    path = tmp_path / "script.toml"
    cl.save(form.cluster, path)
    loaded = cl.load(path)
    assert loaded.training == t
    again = SetupForm()
    qtbot.addWidget(again)
    again.set_cluster(loaded)
    assert again.workload.currentText() == "script" and again.user_file.text() == t.script
    assert again.workdir.text() == t.workdir and again.script_args.text() == "--epochs 2 --name 'two words'"
    assert again.keras.currentData() == "tf-keras" and not again.capture.isChecked()
    assert again.cluster.training == t  # showing it changed nothing

    # Back to the trainer: no workdir without a script (the file would be refused), the rest as it was.
    form.workload.setCurrentText("digits")
    assert (t.script, t.workdir) == ("", "") and t.keras == "tf-keras"
    cl.validate(form.cluster)


def test_a_module_is_picked_from_its_file_and_round_trips(form, qtbot, tmp_path, dialogs):
    """Module: the script's rows, the label and hints of a module; the browse button turns a package's file
    into its dotted name and the workdir into the folder above the top package (python -m runs from there)."""
    for rel in ("trainer/__init__.py", "trainer/task.py", "trainer/sub/__init__.py", "trainer/sub/run.py"):
        (tmp_path / "proj" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "proj" / rel).write_text("")
    form.workload.setCurrentText("module")
    assert all(shown(form, f) for f in script_fields(form)) and not any(shown(form, f) for f in trainer_fields(form))
    assert form.file_label.text() == "Module" and form.workdir.placeholderText() == "the folder tfcc runs in"
    assert "python -m" in form.user_file.placeholderText()
    dialogs.answer("QFileDialog.getOpenFileName", (str(tmp_path / "proj" / "trainer" / "sub" / "run.py"), ""))
    form.btn_user_file.click()
    t = form.cluster.training
    assert (t.module, t.workdir, t.script) == ("trainer.sub.run", str(tmp_path / "proj"), "")
    dialogs.answer("QFileDialog.getOpenFileName", (str(tmp_path / "proj" / "trainer" / "task.py"), ""))
    form.btn_user_file.click()  # within the workdir set: named from it
    assert (t.module, t.workdir) == ("trainer.task", str(tmp_path / "proj"))
    cl.validate(form.cluster)
    path = tmp_path / "module.toml"
    cl.save(form.cluster, path)
    assert 'module = "trainer.task"' in path.read_text() and "script" not in path.read_text()
    again = SetupForm()
    qtbot.addWidget(again)
    again.set_cluster(cl.load(path))
    assert again.workload.currentText() == "module" and again.user_file.text() == "trainer.task"
    assert again.cluster.training == t


def test_elastic_is_edited_in_the_form_and_kept(form, qtbot):
    assert form.elastic.value() == 0 and form.elastic.text() == "elastic: off"
    with qtbot.waitSignal(form.cluster_changed):
        form.elastic.setValue(1)
    assert form.cluster.training.elastic == 1 and form.elastic.text() == "elastic: 1"
    elastic = cl.default()
    elastic.training.elastic = 2
    form.set_cluster(elastic)
    assert form.elastic.value() == 2


def test_a_tasks_gpus_say_what_it_gets():
    from console.gui.setup_form import gpus_text

    assert gpus_text([0, 1], None) == "0,1" and gpus_text([], None) == "all the host's"
    assert gpus_text([], 0) == "none (CPU)" and gpus_text([], 8) == "all 8"


def test_the_forms_limits_and_choices_are_the_cluster_files(form):
    """Each spin box's range and each list's choices come from the declared fields (console.cluster_fields)."""
    for spin, name in ((form.epochs, "epochs"), (form.batch, "per_replica_batch"), (form.max_restarts, "max_restarts"),
                       (form.elastic, "elastic")):
        assert (spin.minimum(), spin.maximum()) == (TRAINING[name].low, TRAINING[name].high), name
    for spin, name in ((form.lr, "learning_rate"), (form.backup_seconds, "backup_seconds")):
        assert TRAINING[name].low < spin.minimum() and not TRAINING[name].problem(spin.minimum()), name
        assert spin.maximum() == TRAINING[name].high, name
    for combo, name in ((form.lr_rule, "lr_scaling"), (form.strategy, "strategy"),
                        (form.communication, "communication"), (form.autoshard, "autoshard")):
        assert tuple(combo.itemText(i) for i in range(combo.count())) == TRAINING[name].choices, name
    assert form.max_restarts.toolTip().lower() == TRAINING["max_restarts"].help
