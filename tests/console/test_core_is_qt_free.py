"""The console's core imports no Qt: the CLI and the window are two front ends on one core."""

from __future__ import annotations

import subprocess
import sys

CORE = ["console.cluster", "console.checks", "console.runner", "console.agent_client", "console.ssh",
        "console.deploy", "console.metrics_store", "console.picture", "console.profiles", "console.synthetic",
        "console.cli"]


def test_core_modules_import_no_qt():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in CORE)
            + "print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
