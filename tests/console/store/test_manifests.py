"""A run's manifest: why a task left an elastic run is kept as its words and its reason."""

from __future__ import annotations

import json

import pytest

from console.states import Leave, Left


@pytest.fixture
def tfcc_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_CONSOLE_HOME", str(tmp_path / "console-home"))
    return tmp_path


def test_why_a_task_left_round_trips_through_a_manifest_and_an_old_manifests_sentence_still_reads(tfcc_home):
    from console import cluster as cl
    from console.store.manifests import Manifest, manifest_path, read_manifest, write_manifest

    cluster = cl.Cluster([cl.Host("here", local=True)], [cl.Task("here") for _ in range(4)], cl.Training())
    names = cluster.task_names()
    left = {names[1]: Left("removed by you", Leave.REMOVED),
            names[2]: Left("its host caused failure after failure (the last 2 in a row)", Leave.FAILING),
            names[3]: Left("it could not be started again (no answer)", Leave.NOT_STARTED)}
    write_manifest(Manifest("left", cluster, [(n, "here") for n in names], ["{}"] * 4, left))
    again = read_manifest("left").left
    assert again == left and {n: w.reason for n, w in again.items()} == {n: w.reason for n, w in left.items()}

    # A manifest of before: its sentences only. Each is read once into its reason; the words stay as they were.
    path = manifest_path("left")
    data = json.loads(path.read_text())
    for task in data["tasks"]:
        task.pop("left_reason", None)
    data["tasks"][3]["left"] = "its host did not answer for 30 s after the failure"
    path.write_text(json.dumps(data))
    old = read_manifest("left").left
    assert {n: (str(w), w.reason) for n, w in old.items()} == {
        names[1]: ("removed by you", Leave.REMOVED),
        names[2]: ("its host caused failure after failure (the last 2 in a row)", Leave.FAILING),
        names[3]: ("its host did not answer for 30 s after the failure", Leave.LOST)}
    with pytest.raises(ValueError):
        Left("gone", "a reason nobody declared")
