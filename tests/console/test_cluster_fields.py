"""The cluster file's fields, declared once: the doc's table, the dataclasses, and each field through the file."""

import dataclasses
import re
import tomllib

import pytest

from console import cluster as cl
from console import cluster_fields as cf
from console import export
from console.cluster import ClusterFileError

HOSTS = """
[[hosts]]
name = "a"
address = "10.0.0.1"

[[hosts]]
name = "b"
address = "10.0.0.2"

[[tasks]]
host = "a"

[[tasks]]
host = "a"
"""
SLURM = '[slurm]\nlogin = "login.example"\n'

# Each field's table in the clusters above ("b" runs no task: its fields change nothing else), and a value that
# is not its default, with what else it needs set.
WHERE = {"training": ("training", HOSTS), "hosts": ("hosts[1]", HOSTS), "tasks": ("tasks[0]", HOSTS),
         "slurm": ("slurm", SLURM), "environment": ("environment", HOSTS + "\n[environment]\n")}
SAMPLES = {
    "training.workload": "synthetic", "training.model_file": "model.py", "training.script": "train.py",
    "training.module": "pkg.task", "training.workdir": ("code", {"training.script": "train.py"}),
    "training.keras": "keras3", "training.capture": False, "training.args": ["--seed", "7"],
    "training.env": {"HF_HOME": "/data"}, "training.secret_env": ["WANDB_API_KEY"], "training.epochs": 7,
    "training.per_replica_batch": 8, "training.global_batch": 64, "training.learning_rate": 0.5,
    "training.lr_scaling": "sqrt", "training.strategy": "multi_worker_mirrored", "training.communication": "ring",
    "training.autoshard": "data", "training.max_restarts": 0, "training.backup_seconds": 5.0,
    "training.stop_on_nan": True, "training.firewall": True, "training.elastic": 1,
    "hosts.name": "c", "hosts.address": "10.0.0.9", "hosts.local": True, "hosts.user": "me", "hosts.port": 2222,
    "hosts.key": "~/.ssh/id_ed25519", "hosts.python": "python3.11", "hosts.spare": (True, {"training.elastic": 1}),
    "tasks.host": "b", "tasks.role": "chief", "tasks.port": 12345, "tasks.gpus": [0, 1],
    "slurm.login": "other.example", "slurm.user": "me", "slurm.port": 2222, "slurm.key": "~/.ssh/id_ed25519",
    "slurm.python": "/opt/py/bin/python", "slurm.partition": "gpu", "slurm.nodes": 2, "slurm.tasks_per_node": 2,
    "slurm.gpus_per_task": 1, "slurm.cpus_per_task": 8, "slurm.time": "2:00:00", "slurm.account": "lab",
    "slurm.qos": "high", "slurm.parameter_servers": (1, {"slurm.nodes": 3}),
    "environment.tensorflow": "none", "environment.packages": ["pandas==2.2.3", "tqdm"],
    "environment.requirements": "requirements.txt", "environment.gpu": "never", "environment.index": "",
    "environment.find_links": ["/srv/wheels"],
}
FIELDS = [f for section in cf.SECTIONS for f in section]


def table_of(cluster: cl.Cluster, section: str):
    return {"training": cluster.training, "hosts": cluster.hosts[1] if len(cluster.hosts) > 1 else None,
            "tasks": cluster.tasks[0], "slurm": cluster.slurm, "environment": cluster.environment}[section]


def cluster_with(field: cf.Field, value, also: dict | None = None) -> cl.Cluster:
    """The field's cluster (read from its file) with ``value`` set in place: nothing checked yet."""
    cluster = cl.loads(WHERE[field.section][1])
    for key, other in {**(also or {}), field.key: value}.items():
        section, name = key.split(".")
        setattr(table_of(cluster, section), name, other)
    return cluster


def test_the_docs_table_is_the_declarations():
    """docs/cluster-file.md's table of fields is made from the declaration: after a change, run
    python -m console.cluster_fields --write."""
    text = cf.DOC.read_text(encoding="utf-8")
    assert cf.with_doc_table(text) == text, "the doc's table is stale: run python -m console.cluster_fields --write"
    assert cf.doc_table() in text
    assert all("|" not in f.help and "\n" not in f.help and f.help for f in FIELDS)


def test_the_docs_examples_use_declared_keys_and_choices():
    """Each key of the doc's example files is declared, and a "# a | b | c" comment lists its field's choices."""
    text = cf.DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    sections = {s.name: s for s in cf.SECTIONS}
    for block in blocks:
        data = tomllib.loads(block)
        for name, tables in data.items():
            for table in tables if isinstance(tables, list) else [tables]:
                assert set(table) <= set(sections[name].fields), (name, set(table) - set(sections[name].fields))
        listed = 0
        for section, key, choices in _choice_comments(block):
            assert tuple(choices) == sections[section][key].choices, f"{section}.{key}"
            listed += 1
        assert listed >= (7 if "[training]" in block else 0)


def _choice_comments(block: str):
    section = ""
    for line in block.splitlines():
        header = re.match(r"^\[+(\w+)\]+", line)
        if header:
            section = header[1]
        found = re.match(r"^(\w+) = [^#]*#[^|]*?([\w-]+(?: \| [\w-]+)+)", line)
        if found:
            yield section, found[1], found[2].split(" | ")


@pytest.mark.parametrize("section", cf.SECTIONS, ids=lambda s: s.name)
def test_the_dataclasses_are_the_declarations(section):
    cls = {"training": cl.Training, "hosts": cl.Host, "tasks": cl.Task, "slurm": cl.Slurm,
           "environment": cl.Environment}[section.name]
    assert [f.name for f in dataclasses.fields(cls)] == list(section.fields)
    required = {f.name: "x" for f in section if f.required}
    made, other = cls(**required), cls(**required)
    for f in section:
        if not f.required:
            assert getattr(made, f.name) == f.default, f.key
        if f.type in (list, dict):
            assert getattr(made, f.name) is not getattr(other, f.name), f"{f.key} is shared"


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.key)
def test_each_field_reads_back_and_is_written_only_when_it_says(field):
    sample, also = SAMPLES[field.key] if isinstance(SAMPLES[field.key], tuple) else (SAMPLES[field.key], None)
    assert sample != field.default and not field.problem(sample)
    cluster = cluster_with(field, sample, also)
    back = cl.loads(cl.dumps(cluster))
    assert getattr(table_of(back, field.section), field.name) == sample
    assert cl.loads(cl.dumps(back)) == back
    # At its default: written only where the declaration says (a setting a person looks for, or required).
    plain = cl.loads(WHERE[field.section][1]) if field.required else cluster_with(field, field.initial())
    written = cl.dumps(plain)
    table = tomllib.loads(written)[field.section]
    table = table[1] if field.section == "hosts" else table[0] if field.section == "tasks" else table
    assert (field.name in table) == (field.required or field.always_written), written


def test_a_field_set_instead_of_another_leaves_that_one_out():
    replaced = [f for f in FIELDS if f.instead_of]
    assert [f.key for f in replaced] == ["training.global_batch"]
    for f in replaced:
        cluster = cluster_with(f, SAMPLES[f.key])
        assert f.instead_of not in tomllib.loads(cl.dumps(cluster))[f.section]
        text = cl.dumps(cluster).replace(f"{f.name} = ", f"{f.instead_of} = 8\n{f.name} = ")
        with pytest.raises(ClusterFileError, match=f"sets both {f.instead_of} and {f.name}; keep one of them"):
            cl.loads(text)


def _outside(field: cf.Field) -> list:
    """Values just outside the field's range, or not among its choices."""
    if field.choices:
        return ["nope"]
    if field.type is float:
        return [float(field.low), field.high * 2]
    below = field.low - 1 if field.low - 1 != field.default else field.low - 2
    return [[below], [field.high + 1]] if field.type is list else [below, field.high + 1]


@pytest.mark.parametrize("field", [f for f in FIELDS if f.low is not None or f.choices], ids=lambda f: f.key)
def test_each_fields_range_or_choices_are_enforced(field):
    where = WHERE[field.section][0]
    for value in _outside(field):
        assert field.problem(value) or field.type is list
        with pytest.raises(ClusterFileError, match=re.escape(f"{where}.{field.name} is {value!r}")):
            cl.loads(cl.dumps(cluster_with(field, value)))
    if field.low is not None and field.type is not list:  # both ends are in
        for value in (field.low, field.high) if field.type is int else (field.high,):
            assert not field.problem(value)


def test_the_exports_defaults_are_the_slurm_sections():
    options = export.Options()
    assert (options.time_limit, options.cpus_per_task) == (cf.SLURM["time"].default,
                                                           cf.SLURM["cpus_per_task"].default)
