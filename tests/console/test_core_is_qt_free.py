"""The console's core imports no Qt: every module under console/ outside console/gui/, found by walking the folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QT = ("PySide6", "pyqtgraph", "shiboken6")

# Imports each module given on the command line in turn, and names the Qt modules present after each.
PROBE = f"""
import importlib, json, sys
found = {{}}
for name in sys.argv[1:]:
    importlib.import_module(name)
    found[name] = sorted({{m.split(".")[0] for m in sys.modules}} & {{*{QT!r}}})
print(json.dumps(found))
"""


def core_modules(package: Path = ROOT / "console") -> list[str]:
    """Dotted names of every module and package under ``package``, except ``gui/`` and ``__main__``."""
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[1:2] == ("gui",) or parts[-1] == "__main__" or "__pycache__" in parts:
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def qt_importers(modules: list[str]) -> dict[str, list[str]]:
    """For each module, imported in this order in one fresh interpreter, the Qt packages loaded by then."""
    out = subprocess.run([sys.executable, "-c", PROBE, *modules], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, f"importing the console's core failed:\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.splitlines()[-1])


def test_the_walk_finds_the_core_and_leaves_out_the_window():
    modules = core_modules()
    assert {"console", "console.cli", "console.run.runner", "console.store.metrics", "console.cluster"} <= set(modules)
    assert not [m for m in modules if m.startswith("console.gui")]


def test_core_modules_import_no_qt():
    found = qt_importers(core_modules())
    first = next((name for name, qt in found.items() if qt), None)
    assert first is None, f"{first} imports Qt ({', '.join(found[first])}); only console/gui/ may"
