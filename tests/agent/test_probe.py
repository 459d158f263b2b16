"""The agent's probe: versions from metadata, resources, and GPUs from nvidia-smi."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent import probe
from console.remote.channel import AgentClient
from console.remote.local import local_agent

ROOT = Path(__file__).resolve().parents[2]

SMI = Path(__file__).parent / "data" / "nvidia-smi"


H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-555bb127-a16e-5c06-74af-0a7da4d2e195",
        "memory_total_mib": 81559, "driver": "580.159.04"}


@pytest.mark.parametrize("recording, used, busy", [("one_gpu_idle.csv", 0, 0), ("one_gpu_load.csv", 20085, 93),
                                                   ("one_gpu_after.csv", 0, 0)])
def test_a_real_h100s_output_is_read(recording, used, busy):
    """nvidia-smi as a real H100 printed it (data/nvidia-smi/h100: idle, under a 20 GB bf16 load, after it)."""
    (gpu,) = probe.parse_nvidia_smi((SMI / "h100" / recording).read_text())
    assert gpu == {**H100, "memory_used_mib": used, "utilization_percent": busy}


def test_a_real_h100_through_the_probe(tmp_path):
    """The probe runs nvidia-smi (here one that prints the H100's recording under load) and says its GPU."""
    result = probe.gpus(fake_nvidia_smi(tmp_path, (SMI / "h100" / "one_gpu_load.csv").read_text(), 0))
    assert result["gpus"] == [{**H100, "memory_used_mib": 20085, "utilization_percent": 93}]


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
    client = AgentClient(local_agent())
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
    paths = [str(first), str(tmp_path / "none"), str(second)]
    assert probe.package_version("tf-keras", paths) == "2.21.0"
    assert probe.package_version("TF.Keras", paths) == "2.21.0"
    assert probe.package_version("legacy-pkg", paths) == "0.3"
    assert probe.package_version("tensorflow", paths) is None


VENV_TF = "2.21.0.post99+tfcc.test"


def _venv_with_tensorflow(folder: Path, *options: str) -> Path:
    """A venv of its own (no pip) whose site-packages holds a dist-info folder for a TensorFlow
    version no real interpreter has (so a base interpreter's own TensorFlow cannot pass for it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *options, str(folder)], check=True)
    (site_packages,) = folder.glob("lib/python*/site-packages")
    meta = site_packages / f"tensorflow-{VENV_TF}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorflow\nVersion: {VENV_TF}\n\n")
    return folder / "bin" / "python"


@pytest.mark.parametrize("flags", [["-S"], []], ids=["no-site", "site"])
def test_probe_sees_a_venvs_packages_as_an_import_there_would(tmp_path, flags):
    """A venv's interpreter started with -S keeps the base's sys.prefix (Python 3.11): the probe
    must still look in the venv's site-packages, whatever the base interpreter has installed."""
    python = _venv_with_tensorflow(tmp_path / "venv")
    code = "from agent import probe; print(probe.package_version('tensorflow'))"
    out = subprocess.run([str(python), *flags, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == VENV_TF


def test_probe_reads_include_system_site_packages(tmp_path, monkeypatch):
    """With include-system-site-packages the base's site-packages come after the venv's; without, never."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(venv / "bin" / "python"))
    base = probe._base_site_packages()
    for setting, expected in (("false", False), ("true", True)):
        (venv / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = {setting}\n")
        paths = probe.search_path()
        own = paths.index(probe._site_packages(str(venv))[0])
        assert all((p in paths) == expected for p in base)
        assert all(paths.index(p) > own for p in base if p in paths)


def test_missing_modules_are_looked_up_without_importing_them(tmp_path):
    """Found on the search path (a package, a module, Python's own) or not; nothing is imported, and a name
    that is no module name is no question."""
    (tmp_path / "pkg_here").mkdir()
    (tmp_path / "pkg_here" / "__init__.py").write_text("raise SystemExit('imported!')\n")
    (tmp_path / "mod_here.py").write_text("raise SystemExit('imported!')\n")
    assert probe.missing_modules(["pkg_here", "mod_here", "json", "sys", "not_here_at_all", "../x", "a.b"],
                                 [str(tmp_path)]) == ["not_here_at_all"]
    assert "pkg_here" not in sys.modules and "mod_here" not in sys.modules


def test_the_probe_op_answers_which_modules_its_python_lacks(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCC_HOME", str(tmp_path / "home"))
    client = AgentClient(local_agent())
    try:
        found = client.call("probe", modules=["json", "tfcc_not_a_module", "numpy"], timeout=60)
        with pytest.raises(Exception, match="modules must be a list of module names"):
            client.call("probe", modules="numpy", timeout=60)
    finally:
        client.close()
    assert found["missing_modules"] == ["tfcc_not_a_module"]
