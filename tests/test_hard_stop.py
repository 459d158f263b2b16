"""The suite's last resort: a test that hangs while holding the GIL still ends the run, with stacks."""

from __future__ import annotations

import shutil
from pathlib import Path

pytest_plugins = ["pytester"]

HUNG = '''
import ctypes
import pytest

@pytest.mark.timeout(1)
def test_holds_the_gil():
    ctypes.PyDLL(None).sleep(60)  # a C call made with the GIL held: pytest-timeout's thread cannot run
'''


def test_a_hang_that_holds_the_gil_ends_the_run_with_every_stack(pytester, monkeypatch):
    monkeypatch.setenv("TFCC_TEST_HARD_STOP_MARGIN", "1")
    shutil.copy(Path(__file__).with_name("conftest.py"), pytester.path / "conftest.py")
    pytester.makepyfile(test_hung=HUNG)
    pytester.makeini("[pytest]\ntimeout_method = thread\n")
    result = pytester.runpytest_subprocess("-p", "timeout", timeout=40)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*Timeout*", "*in test_holds_the_gil*"])
