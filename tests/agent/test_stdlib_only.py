"""agent/ runs on hosts that have only Python's standard library, from Python 3.9 on."""

import ast
import json
import subprocess
import sys
from pathlib import Path

from agent.protocol import PROTOCOL_VERSION

AGENT = Path(__file__).resolve().parents[2] / "agent"


def test_agent_imports_only_the_standard_library():
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for path in AGENT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            bad += [f"{path.name}: {n}" for n in names if n.split(".")[0] not in stdlib | {"agent"}]
    assert not bad


def test_agent_parses_as_python_3_9():
    for path in AGENT.rglob("*.py"):
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))


def test_agent_answers_hello_without_site_packages():
    """-I -S: no site-packages, no PYTHONPATH, no user site: only the standard library and agent/."""
    code = ("import sys, runpy; sys.path.insert(0, %r); sys.argv = ['agent']; "
            "runpy.run_module('agent', run_name='__main__')") % str(AGENT.parent)
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], input='{"id": 1, "op": "hello"}\n',
                          capture_output=True, text=True, timeout=30)
    answer = json.loads(proc.stdout.splitlines()[0])
    assert answer["ok"] and answer["protocol"] == PROTOCOL_VERSION and proc.returncode == 0
