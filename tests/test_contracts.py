"""The layers are enforced, not hoped for: pyproject.toml's import-linter contracts hold for the tree, and
break, naming the contract, when an import crosses one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "console", "trainer")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter over the packages in ``root`` with its pyproject.toml (no cache: the tree as it is)."""
    lint = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(lint), "--no-cache", "--no-logo", "pyproject.toml"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def contract_names() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return [c["name"] for c in config["contracts"]]


def test_every_contract_holds_for_the_tree():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in contract_names():
        assert f"{name} KEPT" in done.stdout, name


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of the packages and pyproject.toml to plant imports in."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


PLANTED = {
    # the module an import is added to, the import, the contract that must break
    "the store reaches a host": ("console/store/cache.py", "from console.remote import link",
                                 "The store never reaches a host"),
    "a lower room imports a higher one": ("console/text.py", "from console.run import session",
                                          "The console's rooms are layered"),
    "Qt outside the window": ("console/run/launch.py", "import PySide6", "Qt only in console/gui/"),
    "the trainer's vocabulary imports its training": ("trainer/records.py", "import trainer.train",
                                                       "The trainer's modules are layered"),
    "the trainer reaches the console": ("trainer/plan.py", "from console import text",
                                        "The agent and the trainer never reach the console"),
}


@pytest.mark.parametrize("case", PLANTED)
def test_a_planted_bad_import_breaks_its_contract(tree, case):
    path, line, contract = PLANTED[case]
    module = tree / path
    module.write_text(module.read_text() + f"\n{line}  # noqa: planted by the test\n")
    done = lint_imports(tree)
    assert done.returncode != 0, done.stdout
    assert f"{contract} BROKEN" in done.stdout, done.stdout


def test_a_circle_among_siblings_is_named(tree):
    """Two rooms of one floor that import each other: the circle contract breaks (the layers' may too)."""
    (tree / "console/store/table.py").write_text((tree / "console/store/table.py").read_text()
                                                  + "\nfrom console.store import metric_ids  # noqa\n")
    (tree / "console/store/metric_ids.py").write_text((tree / "console/store/metric_ids.py").read_text()
                                                       + "\nfrom console.store import table  # noqa\n")
    done = lint_imports(tree)
    assert "No import circle among siblings BROKEN" in done.stdout, done.stdout
