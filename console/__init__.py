"""The tfcc console: cluster model, checks and front ends (CLI and GUI)."""
