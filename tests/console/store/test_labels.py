"""A run's name and notes: the person's text, kept in the console's state folder, whatever the file holds."""

from __future__ import annotations

import stat

import pytest

from console.store import labels


@pytest.fixture
def homes(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console"))
    return tmp_path


def test_a_name_and_notes_are_kept_cleaned_and_private(homes):
    assert labels.label("r1") == {"name": "", "notes": ""} and not labels.labels_path().exists()
    labels.set_label("r1", name="  base\x1bline\n2 ", notes="line one\nline\x00 two")
    labels.set_label("r2", notes="x" * 5000)
    assert labels.label("r1") == {"name": "baseline 2", "notes": "line one\nline two"}
    assert len(labels.label("r2")["notes"]) == labels.MAX_NOTES
    assert stat.S_IMODE(labels.labels_path().stat().st_mode) == 0o600
    labels.set_label("r1", name="")  # the name goes, the notes stay
    assert labels.label("r1") == {"name": "", "notes": "line one\nline two"}
    labels.set_label("r1", notes="")
    assert "r1" not in labels.read_labels(), "nothing left: no entry"
    labels.forget("r2")
    assert labels.read_labels() == {}


def test_a_damaged_labels_file_reads_as_none_and_the_next_label_replaces_it(homes):
    labels.labels_path().parent.mkdir(parents=True, exist_ok=True)
    for damaged in ("{not json", "[1, 2]", '{"r1": "a string", "r2": {"name": 7, "notes": ["x"]}}'):
        labels.labels_path().write_text(damaged)
        assert labels.label("r1") == {"name": "", "notes": ""}
    assert labels.read_labels() == {"r2": {"name": "", "notes": ""}}
    labels.set_label("r3", name="kept")
    assert labels.label("r3")["name"] == "kept"
