"""A vocabulary is code, not prose: record types and event names are written once (trainer/records.py) and
used by name everywhere else. A literal of one where a record's type or event is read or written fails."""

from __future__ import annotations

import ast
from pathlib import Path

from trainer.records import Event, RecordType

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
