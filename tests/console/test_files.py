"""Files the console writes are whole or not written at all."""

from __future__ import annotations

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
