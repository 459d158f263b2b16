"""Slurm's facts are written once: the port base (agent/protocol.py), the roles over the ranks and a node's GPU
binding (trainer/slurm.py), the batch script's attempts (agent/slurm.py, for the agent's job and the export's)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for package in ("agent", "console", "trainer") for p in (ROOT / package).rglob("*.py"))


def constants(path: Path) -> list:
    """Every literal of the module: numbers, strings, the fixed parts of f-strings."""
    return [node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)]


def written_in(found) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in SOURCES if any(found(c) for c in constants(p))}


def test_the_port_base_is_a_number_in_one_place():
    assert written_in(lambda c: c == 8888 and not isinstance(c, bool)) == {"agent/protocol.py"}


def test_one_function_writes_the_srun_of_every_batch_script():
    assert written_in(lambda c: isinstance(c, str) and "--kill-on-bad-exit" in c) == {"agent/slurm.py"}
    assert written_in(lambda c: isinstance(c, str) and "no restarts left" in c) == {"agent/slurm.py"}


def test_a_nodes_gpu_masks_are_worked_out_in_one_place():
    assert written_in(lambda c: isinstance(c, str) and "mask_gpu" in c) == {"trainer/slurm.py"}
