"""Remembered profiles: recent files, the last one opened."""

from __future__ import annotations

import pytest

from console.profiles import MAX_RECENT, MAX_SCREENS, Profiles


def test_recent_files_and_the_last_one(tmp_path):
    p = Profiles(tmp_path / "profiles.json")
    for i in range(MAX_RECENT + 2):
        p.opened(tmp_path / f"c{i}.toml")
    p.opened(tmp_path / "c3.toml")
    again = Profiles(tmp_path / "profiles.json")
    assert again.last == str(tmp_path / "c3.toml")
    assert again.recent[0] == str(tmp_path / "c3.toml") and len(again.recent) == MAX_RECENT
    again.forget(tmp_path / "c3.toml")
    assert Profiles(tmp_path / "profiles.json").last is None


def test_an_unreadable_file_is_ignored_not_fatal(tmp_path):
    (tmp_path / "profiles.json").write_text("{not json")
    p = Profiles(tmp_path / "profiles.json")
    assert p.recent == [] and p.last is None
    p.opened(tmp_path / "a.toml")
    assert Profiles(tmp_path / "profiles.json").recent == [str(tmp_path / "a.toml")]


@pytest.mark.parametrize("text", ["[]", "3", '"x"', '{"recent": "a.toml", "last": 7, "view": []}', "null"])
def test_a_file_of_another_shape_is_ignored_not_fatal(tmp_path, text):
    """profiles.json holding [] once stopped the window from starting."""
    (tmp_path / "profiles.json").write_text(text)
    p = Profiles(tmp_path / "profiles.json")
    assert (p.recent, p.last, p.view) == ([], None, {})
    p.opened(tmp_path / "a.toml")
    assert Profiles(tmp_path / "profiles.json").recent == [str(tmp_path / "a.toml")]


def test_the_window_size_is_remembered_per_screen_size_and_damage_is_ignored(tmp_path):
    p = Profiles(tmp_path / "profiles.json")
    assert p.window_size("1440x900") is None
    p.set_window_size("1440x900", (1300, 820))
    p.set_window_size("1280x720", (1200, 650))
    again = Profiles(tmp_path / "profiles.json")
    assert again.window_size("1440x900") == (1300, 820) and again.window_size("1280x720") == (1200, 650)
    for i in range(MAX_SCREENS + 2):
        again.set_window_size(f"{2000 + i}x1000", (900, 700))
    assert len(Profiles(tmp_path / "profiles.json").windows) == MAX_SCREENS
    (tmp_path / "profiles.json").write_text('{"windows": {"1x1": [1, 2], "2x2": "big", "3x3": [900, 700, 1]}}')
    assert Profiles(tmp_path / "profiles.json").windows == {}
