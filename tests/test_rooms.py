"""The rooms hold: where tasks run is asked in one place, the run's supervision state is set through one door
alone (docs/architecture.md; tests/test_sizes.py keeps each room's size)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSOLE = ROOT / "console"

# Who may ask a cluster whether it is a Slurm one: the placement (console/run/placement/), the cluster file and the
# setup form (and its Slurm dialog). The diagram asks the placement where each task is planned.
READS_SLURM = {"console/cluster.py", "console/gui/setup_form.py", "console/gui/dialogs.py"}
PLACEMENT = "console/run/placement/"

# The supervisor's rooms: the run-level state is theirs, and changes through the door only.
SUPERVISION = {"console/run/supervisor.py": "Supervisor", "console/run/elastic.py": "Elastic",
               "console/run/watchdogs.py": "Watchdogs", "console/run/judging.py": "Judging"}
DOOR = {"__init__", "change"}


def console_files():
    for path in sorted(CONSOLE.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def test_only_the_placement_the_cluster_file_and_the_setup_form_read_cluster_slurm():
    found = [f"{rel}:{node.lineno}" for rel, tree in console_files()
             if not rel.startswith(PLACEMENT) and rel not in READS_SLURM
             for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "slurm"]
    assert found == [], "ask the run's placement (console.run.placement) instead: " + ", ".join(found)


def test_a_planted_read_of_cluster_slurm_is_found():
    tree = ast.parse("def f(cluster):\n    return cluster.slurm is not None\n")
    assert [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "slurm"]


def _self_assignments(tree: ast.Module, cls: str):
    """(method, attribute, value node) of every ``self.X = ...`` (and ``self.X += ...``) in class ``cls``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for method in node.body:
                if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for sub in ast.walk(method):
                    targets = sub.targets if isinstance(sub, ast.Assign) else \
                        [sub.target] if isinstance(sub, (ast.AugAssign, ast.AnnAssign)) else []
                    for t in targets:  # (a task's own pace, self._pace[name].saving, is the task's)
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            yield method.name, t.attr, getattr(sub, "value", None)


def test_no_run_level_flag_is_assigned_outside_the_state_machines_door():
    """What the run is doing is one state: no boolean flag beside it, and the state itself set by ``change``
    alone (``__init__`` sets the first)."""
    flags, state = [], []
    for rel, cls in SUPERVISION.items():
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        for method, attr, value in _self_assignments(tree, cls):
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                flags.append(f"{rel}: {cls}.{method} sets self.{attr} = {value.value}")
            if attr == "_state" and method not in DOOR:
                state.append(f"{rel}: {cls}.{method} sets the state")
    assert flags == [] and state == [], flags + state
