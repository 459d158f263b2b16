"""The tfcc console: cluster model, checks and front ends (CLI and GUI)."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # agent/, trainer/ and resources/ beside console/
