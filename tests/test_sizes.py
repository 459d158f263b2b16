"""The console's rooms stay small enough to read: no class in console/ over 500 lines, the main window's module at
most 300 (issue 39). A class that grows past it is split along its kinds of work, not squeezed."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_CLASS_LINES = 500
MAX_MAIN_WINDOW_LINES = 300


def class_sizes(folder: Path) -> dict[str, int]:
    """Every class under ``folder``, as ``path:Name``, and its lines (from ``class`` to its last line)."""
    sizes = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                sizes[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - node.lineno + 1
    return sizes


def test_no_class_in_the_console_is_over_500_lines():
    sizes = class_sizes(ROOT / "console")
    assert sizes, "no class found: the wrong folder"
    over = {name: lines for name, lines in sizes.items() if lines > MAX_CLASS_LINES}
    assert not over, f"classes over {MAX_CLASS_LINES} lines: {over}"


def test_the_main_window_module_is_at_most_300_lines():
    lines = len((ROOT / "console" / "gui" / "main_window.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MAIN_WINDOW_LINES, f"console/gui/main_window.py has {lines} lines"
