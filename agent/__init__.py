"""The tfcc agent: runs on every training host.

This package must depend on nothing outside Python's standard library and must
run on Python 3.9+: it is copied onto hosts that may have nothing else
(tests/agent/test_stdlib_only.py enforces both). It opens no listening socket:
the console runs ``python3 -m agent`` through an SSH exec channel or as a
local subprocess, and the two speak JSON lines over stdin/stdout.
"""


__version__ = "0.1.0"
