"""Files the console writes are whole or not written at all."""

from __future__ import annotations

import os
import stat

import pytest

from console.files import write_atomically


def test_a_write_replaces_the_file_whole_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "cluster.toml"
    write_atomically(path, "first\n")
    write_atomically(path, "second\n")
    assert path.read_text() == "second\n"
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.toml"]


def test_a_write_that_fails_keeps_the_old_file(tmp_path):
    path = tmp_path / "cluster.toml"
    write_atomically(path, "good\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(path, "half \ud800 written")  # cannot be encoded: fails in the middle
    assert path.read_text() == "good\n"
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.toml"]


def test_a_link_is_followed_and_stays_a_link(tmp_path):
    """A cluster file kept elsewhere and linked here: saving writes the file the link names."""
    real = tmp_path / "shared" / "cluster.toml"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "cluster.toml"
    link.symlink_to(real)
    write_atomically(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_a_file_keeps_its_permissions_and_a_new_one_gets_what_is_asked(tmp_path):
    private = tmp_path / "private.toml"
    private.write_text("x\n")
    private.chmod(0o600)
    write_atomically(private, "y\n")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600  # not widened to the umask's 0644
    write_atomically(tmp_path / "state.json", "{}", mode=0o600)
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o600
    old = os.umask(0o022)
    try:
        write_atomically(tmp_path / "plain.toml", "z\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "plain.toml").stat().st_mode) == 0o644
