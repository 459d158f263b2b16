"""The tfcc agent: runs on every training host.

This package must depend on nothing outside Python's standard library and must
run on Python 3.9+: it is copied onto hosts that may have nothing else.
"""
