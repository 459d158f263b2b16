"""A vocabulary is code, not prose: record types, event names, roles, strategies, the agent's file names and the
record fields that cross a process are written once and used by name everywhere else. A literal of a record type
or event where a record's type or event is read or written fails, and so does any literal of the other words."""

from __future__ import annotations

import ast
from pathlib import Path

from agent import protocol
from trainer.records import GLOBAL_STEP, LOSS_AVG, Event, RecordType
from trainer.strategies import Strategy

ROOT = Path(__file__).resolve().parents[1]
# Where the words are defined: the metrics file's (records), the protocol's, the run states', the roles'.
VOCABULARY = {"trainer/records.py", "agent/protocol.py", "console/states.py", "trainer/tf_config.py"}
WORDS = {"type": set(RecordType.ALL), "event": set(Event.ALL)}
WRITERS = ("event", "event_once", "said")  # a metrics writer's calls that take an event's name first


def reads(field: str, node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` reads a record's ``field``: ``r.get(field)``, ``r[field]``, or a name bound to one."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == field:
        return True
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == field:
        return True
    return isinstance(node, ast.Name) and node.id in names


def literals(node: ast.AST):
    """The string literals ``node`` stands for: itself, the items of a tuple, list or set, both arms of an if."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for item in node.elts:
            yield from literals(item)
    elif isinstance(node, ast.IfExp):
        yield from literals(node.body)
        yield from literals(node.orelse)


def vocabulary_literals(source: str) -> list[tuple[int, str]]:
    """(line, word) of every record type or event name written as a literal where a record's ``type`` or
    ``event`` is compared, set (a dict's key, a keyword) or written (a writer's event call)."""
    tree = ast.parse(source)
    bound = {field: set() for field in WORDS}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for field in WORDS:
                if reads(field, node.value, set()):
                    bound[field].update(t.id for t in node.targets if isinstance(t, ast.Name))
    found = set()

    def take(node, field):
        found.update((lit.lineno, lit.value) for lit in literals(node) if lit.value in WORDS[field])

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for field in WORDS:
                if any(reads(field, side, bound[field]) for side in sides):
                    for side in sides:
                        take(side, field)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value in WORDS:
                    take(value, key.value)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr in WRITERS and node.args:
                take(node.args[0], "event")
            for keyword in node.keywords:
                if keyword.arg in WORDS:
                    take(keyword.value, keyword.arg)
    return sorted(found)


def test_no_record_type_or_event_name_is_written_as_a_literal_outside_the_vocabulary():
    found = []
    for package in ("agent", "console", "trainer"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel not in VOCABULARY:
                found += [f"{rel}:{line}: {word!r}" for line, word in vocabulary_literals(path.read_text())]
    assert found == [], "use trainer.records' RecordType and Event"


def test_each_way_of_writing_a_word_is_found():
    """The check above cannot pass by finding nothing."""
    source = '''
kind = r.get("type")
name = r["event"]
if kind == "epoch" or name in ("started", "resumed"):
    pass
if r.get("type") != "step":
    pass
writer.event("launched", pid=1)
writer.event_once("cluster_formed" if x else "serving")
record = {"type": "alive", "event": "finished"}
store.note(task, event="failed")
words = "the run started and finished"   # prose is no vocabulary
r.get("epoch")                            # a field, not a type
'''
    assert vocabulary_literals(source) == [
        (4, "epoch"), (4, "resumed"), (4, "started"), (6, "step"), (8, "launched"), (9, "cluster_formed"),
        (9, "serving"), (10, "alive"), (10, "finished"), (11, "failed")]


# --------------------------------------------------------------------------- words said only by name

# Each module that declares words, and the words no other module may write as a literal, whatever the literal
# stands for (a dict's key, a comparison, an argument). Left out: "auto", "default" and "local", which other
# vocabularies and plain settings say too, and "loss", which is also Keras's metric and a plot's name.
HOMES = {
    "agent/protocol.py": {*protocol.ROLES, protocol.SPEC_FILE, protocol.STATE_FILE, protocol.EXIT_FILE,
                          protocol.CHILD_FILE, protocol.TF_CONFIG_FILE, protocol.SUPERVISOR_LOG, protocol.METRICS,
                          protocol.STDOUT, protocol.STDERR, protocol.MEASURE_FILE, protocol.SLURM_JOB_FILE,
                          protocol.STOP_MARKER},
    "trainer/strategies.py": {Strategy.MIRRORED, Strategy.MULTI_WORKER_MIRRORED, Strategy.PARAMETER_SERVER},
    "trainer/records.py": {GLOBAL_STEP, LOSS_AVG},
}
ALLOWED = {
    # slurm.json's flag, named after the strategy: the agent imports nothing of the trainer's
    ("agent/slurm.py", Strategy.PARAMETER_SERVER),
}
def word_literals(source: str, words: set[str]) -> list[tuple[int, str]]:
    """(line, word) of every string literal in ``source`` that is one of ``words``; docstrings and the text of
    f-strings are prose (an f-string's expressions are not)."""
    tree = ast.parse(source)
    prose = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            prose.add(id(node.body[0].value))
        elif isinstance(node, ast.JoinedStr):
            prose.update(id(part) for part in node.values if isinstance(part, ast.Constant))
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words
                  and id(node) not in prose)


def test_no_role_strategy_file_name_or_crossing_field_is_written_as_a_literal_outside_its_module():
    found = []
    for package in ("agent", "console", "trainer"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            words = set().union(*(words for home, words in HOMES.items() if home != rel))
            found += [f"{rel}:{line}: {word!r}" for line, word in word_literals(path.read_text(), words)
                      if (rel, word) not in ALLOWED]
    assert found == [], "import the word from its module: " + ", ".join(HOMES)


def test_each_word_is_declared_once_in_its_module():
    for home, words in HOMES.items():
        said = [word for _line, word in word_literals((ROOT / home).read_text(), words)]
        assert sorted(said) == sorted(words), home


def test_each_way_of_writing_a_word_literally_is_found():
    """The check above cannot pass by finding nothing, nor by finding prose."""
    source = '''
"""A module about the worker and parameter_server training."""
def f(cluster, record):
    """worker"""
    if role in ("worker", "ps"):
        pass
    n = len(cluster["chief"])
    write(folder / "exit.json", {"global_step": 1, "loss_avg": 2.0})
    say(f"the worker {name} trains with parameter_server")    # prose
    say(f"step {record.get('global_step')} of the run")
    strategy = "parameter_server" if x else "mirrored"
    # "evaluator" in a comment
'''
    words = set().union(*HOMES.values())
    assert word_literals(source, words) == [
        (5, "ps"), (5, "worker"), (7, "chief"), (8, "exit.json"), (8, "global_step"), (8, "loss_avg"),
        (10, "global_step"), (11, "mirrored"), (11, "parameter_server")]
