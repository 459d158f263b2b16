"""The console's log file: private, and bounded however much is logged."""

from __future__ import annotations

import logging
import stat

from console import errors


def test_the_log_is_rotated_and_never_grows_past_its_files(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path))
    monkeypatch.setattr(errors, "LOG_BYTES", 10_000)
    errors.log_to_file()
    noisy = logging.getLogger("console.test")
    for i in range(2_000):  # a host that fills the log: 200 KB of warnings
        noisy.warning("a line a host made me write, number %d %s", i, "x" * 60)
    files = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("tfcc.log"))
    assert files == ["tfcc.log", "tfcc.log.1", "tfcc.log.2"]
    assert all((tmp_path / f).stat().st_size < 10_000 + 200 for f in files)
    assert "number 1999" in (tmp_path / "tfcc.log").read_text()
    assert stat.S_IMODE((tmp_path / "tfcc.log").stat().st_mode) == 0o600


def test_an_error_recorded_names_the_log_it_went_to(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "state"))
    try:
        raise RuntimeError("a bug")
    except RuntimeError as exc:
        path = errors.record(exc)
    assert path == tmp_path / "state" / "tfcc.log" and "RuntimeError: a bug" in path.read_text()
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
