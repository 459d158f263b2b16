"""The agent's probe: versions from metadata, resources, and GPUs from nvidia-smi."""

from __future__ import annotations

import os
import site
import stat
import sys
from pathlib import Path

import pytest

from agent import probe
from console.agent_client import AgentClient, LocalTransport

SMI = Path(__file__).parent / "data" / "nvidia-smi"


def test_parse_one_gpu():
    (gpu,) = probe.parse_nvidia_smi((SMI / "one_gpu.csv").read_text())
    assert gpu == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-2f1e3c5a-7b9d-4e6f-8a1b-3c5d7e9f1a2b",
                   "memory_total_mib": 81559, "memory_used_mib": 0, "utilization_percent": 0, "driver": "550.54.15"}


def test_parse_several_gpus():
    gpus = probe.parse_nvidia_smi((SMI / "several_gpus.csv").read_text())
    assert [g["index"] for g in gpus] == [0, 1, 2]
    assert [g["name"] for g in gpus] == ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "Tesla T4"]
    assert gpus[1]["memory_used_mib"] == 39012 and gpus[1]["utilization_percent"] == 100


def test_not_available_fields_are_none():
    gpus = probe.parse_nvidia_smi((SMI / "na_fields.csv").read_text())
    assert gpus[0]["utilization_percent"] is None and gpus[0]["memory_used_mib"] == 731
    assert gpus[1]["memory_used_mib"] is None and gpus[1]["utilization_percent"] is None


def test_unexpected_line_is_an_error():
    with pytest.raises(ValueError, match="has 3 fields, expected 7"):
        probe.parse_nvidia_smi("0, GPU, x\n")


def fake_nvidia_smi(tmp_path, text: str, code: int) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}EOF\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_missing_nvidia_smi_means_no_gpu(tmp_path):
    result = probe.gpus(str(tmp_path / "absent" / "nvidia-smi"))
    assert result["gpus"] == [] and "could not run" in result["note"]
    result = probe.gpus("nvidia-smi-that-does-not-exist")
    assert result == {"gpus": [], "note": "nvidia-smi not found: no NVIDIA driver on this host"}


def test_failing_nvidia_smi_means_no_gpu_with_its_reason(tmp_path):
    result = probe.gpus(fake_nvidia_smi(tmp_path, (SMI / "failure.txt").read_text(), 9))
    assert result["gpus"] == []
    assert result["note"].startswith("nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate")


def test_working_nvidia_smi_is_parsed(tmp_path):
    result = probe.gpus(fake_nvidia_smi(tmp_path, (SMI / "several_gpus.csv").read_text(), 0))
    assert len(result["gpus"]) == 3 and "note" not in result


def test_probe_through_the_agent(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", os.defpath)  # no nvidia-smi here
    client = AgentClient(LocalTransport().open_channel())
    try:
        result = client.call("probe", tensorflow=True, timeout=180)
    finally:
        client.close()
    assert result["python"] == ".".join(map(str, sys.version_info[:3]))
    assert result["tensorflow"].startswith("2.21.") and result["tf_keras"].startswith("2.21.")
    assert result["cpus"] >= 1 and result["memory"]["total_bytes"] > 0 and result["disk_free_bytes"] > 0
    assert result["gpus"] == [] and "no NVIDIA driver" in result["note"]
    assert result["code"] == Path(__file__).resolve().parents[2].name
    assert result["tensorflow_view"]["version"].startswith("2.21.") and result["tensorflow_view"]["gpus"] == []


def test_package_version_reads_dist_info_like_an_import_would(tmp_path, monkeypatch):
    """Names are compared normalized (tf-keras = tf_keras = TF.Keras); the first folder on the path wins."""
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, entry, meta, version in ((first, "tf_keras-2.21.0.dist-info", "METADATA", "2.21.0"),
                                         (second, "tf_keras-2.20.1.dist-info", "METADATA", "2.20.1"),
                                         (second, "Legacy.Pkg.egg-info", "PKG-INFO", "0.3")):
        (folder / entry).mkdir(parents=True)
        (folder / entry / meta).write_text(f"Metadata-Version: 2.1\nName: x\nVersion: {version}\n\nVersion: 9\n")
    monkeypatch.setattr(sys, "path", [str(first)])
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(second)])
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(tmp_path / "none"))
    assert probe.package_version("tf-keras") == "2.21.0"
    assert probe.package_version("TF.Keras") == "2.21.0"
    assert probe.package_version("legacy-pkg") == "0.3"
    assert probe.package_version("tensorflow") is None
