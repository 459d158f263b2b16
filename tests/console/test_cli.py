"""``tfcc``: the embedded default (two local workers on digits), headless."""

import pytest

from console.cli import main

pytestmark = pytest.mark.slow


def test_default_run_trains_two_local_workers(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "2")
    assert main(["--run-root", str(tmp_path), "--", "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    for name in ("worker-0", "worker-1"):
        assert f"{name}: training with multi_worker_mirrored: global batch 64 = 2 workers x 1 replicas x 32" in out
        assert f"{name}: epoch 1 done" in out
        assert f"{name}: finished" in out
    assert (tmp_path / "worker-0" / "model.keras").is_file()


def test_failed_worker_makes_tfcc_fail(tmp_path, capsys):
    assert main(["--run-root", str(tmp_path), "--", "--per-replica-batch", "0"]) == 1
    captured = capsys.readouterr()
    assert "FAILED: --per-replica-batch is 0; it must be at least 1" in captured.out
    assert "exited with 2" in captured.err
