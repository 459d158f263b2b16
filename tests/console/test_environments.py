"""What a run's hosts must have installed (console/environments.py): the spec, GPUs, platforms."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from agent import probe
from console import cluster as cl
from console import environments as envs

SMI = Path(__file__).resolve().parents[1] / "agent" / "data" / "nvidia-smi"
HOSTS = '[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n\n[[tasks]]\nhost = "a"\n'


def cluster_with(environment: str = "", training: str = "") -> cl.Cluster:
    return cl.loads(HOSTS + (f"\n[training]\n{training}\n" if training else "")
                    + (f"\n[environment]\n{environment}\n" if environment else ""))


def test_the_default_is_this_consoles_tensorflow_stack_at_its_versions():
    spec = envs.spec_of(cluster_with())
    assert spec.requirements == tuple(f"{n}=={importlib.metadata.version(n)}" for n in envs.CONSOLE_STACK)
    assert not spec.required and spec.index == "https://pypi.org/simple"
    assert spec.python_env() == {"spec": spec.key, "required": False}
    declared = envs.spec_of(cluster_with('packages = ["tqdm==4.67.1"]'))
    assert declared.required and declared.requirements[-1] == "tqdm==4.67.1" and declared.key != spec.key
    # The key names what is asked for, not where it comes from: another index is the same environment.
    moved = envs.spec_of(cluster_with('packages = ["tqdm==4.67.1"]\nindex = ""\nfind_links = ["/srv"]'))
    assert moved.key == declared.key


def test_a_requirements_file_beside_the_script_is_read_and_its_options_refused(tmp_path):
    (tmp_path / "train.py").write_text("import tensorflow\n")
    (tmp_path / "requirements.txt").write_text("# ours\npandas==2.2.3  # data\n\ntqdm\n")
    training = f'script = "{tmp_path / "train.py"}"'
    spec = envs.spec_of(cluster_with('tensorflow = "none"\nrequirements = "requirements.txt"', training))
    assert spec.requirements == ("pandas==2.2.3", "tqdm")
    (tmp_path / "requirements.txt").write_text("--index-url https://example.org/simple\npandas\n")
    with pytest.raises(envs.SpecError, match="requirements.txt line 1 is an option") as refused:
        envs.spec_of(cluster_with('requirements = "requirements.txt"', training))
    assert "put an index in [environment] index" in refused.value.fix
    with pytest.raises(envs.SpecError, match="cannot be read"):
        envs.spec_of(cluster_with('requirements = "nothere.txt"', training))
    with pytest.raises(envs.SpecError, match="asks for nothing"):
        envs.spec_of(cluster_with('tensorflow = "none"'))


def test_a_gpu_host_gets_tensorflows_cuda_wheels_where_its_driver_can_run_them():
    """The probe of the recorded H100 (driver 580.159.04) gets tensorflow[and-cuda]; a driver older than CUDA 12's
    525.60.13 is refused with what to do; gpu = "never" keeps the CPU build."""
    h100 = {"gpus": probe.parse_nvidia_smi((SMI / "h100" / "one_gpu_idle.csv").read_text())}
    spec = envs.spec_of(cluster_with())
    assert envs.wants_gpu(spec, h100) and not envs.wants_gpu(spec, {"gpus": []})
    version = importlib.metadata.version("tensorflow")
    assert f"tensorflow[and-cuda]=={version}" in spec.for_gpu(True)
    assert f"tensorflow=={version}" in spec.for_gpu(False)
    assert envs.driver_problem(h100) is None
    assert envs.driver_words(h100) == "TensorFlow's CUDA 12 wheels (driver 580.159.04 meets 525.60.13 or newer)"
    old = {"gpus": [{**h100["gpus"][0], "driver": "515.65.01"}]}
    assert envs.driver_problem(old) == ("its NVIDIA driver 515.65.01 is older than the 525.60.13 TensorFlow's CUDA 12 "
                                        "wheels need: update the driver there, or set gpu = \"never\" in "
                                        "[environment]")
    assert not envs.wants_gpu(envs.spec_of(cluster_with('gpu = "never"')), h100)
    assert envs.wants_gpu(envs.spec_of(cluster_with('gpu = "always"')), {"gpus": []})


@pytest.mark.parametrize("facts, platform", [
    ({"system": "linux", "machine": "x86_64", "libc": "glibc", "libc_version": "2.36"}, "x86_64-manylinux_2_36"),
    ({"system": "linux", "machine": "aarch64", "libc": "glibc", "libc_version": "2.27"}, "aarch64-manylinux_2_17"),
    ({"system": "linux", "machine": "x86_64", "libc": "glibc", "libc_version": "2.41"}, "x86_64-manylinux_2_40"),
])
def test_a_hosts_platform_is_the_newest_manylinux_its_glibc_runs(facts, platform):
    assert envs.uv_platform(facts) == platform
    assert envs.platform_key({**facts, "python": "3.11.2", "implementation": "cpython"}, True) \
        == f"cpython3.11-{platform}-cuda"


@pytest.mark.parametrize("facts, words", [
    ({"system": "darwin", "machine": "arm64", "libc": "", "libc_version": ""}, "on Linux on x86_64 or aarch64"),
    ({"system": "linux", "machine": "x86_64", "libc": "", "libc_version": ""}, "not glibc"),
])
def test_a_platform_tfcc_cannot_make_for_says_what_to_do(facts, words):
    with pytest.raises(envs.SpecError, match=words) as refused:
        envs.uv_platform(facts)
    assert refused.value.fix


def test_packages_the_check_offers_are_added_to_the_environment_once():
    cluster = cluster_with()
    assert envs.add_packages(cluster, ["pandas", "tqdm"]) == ["pandas", "tqdm"]
    assert cluster.environment.packages == ["pandas", "tqdm"] and cluster.environment.tensorflow == "console"
    assert envs.spec_of(cluster).required and envs.spec_of(cluster).requirements[-2:] == ("pandas", "tqdm")
    assert envs.add_packages(cluster, ["Pandas", "scikit_learn"]) == ["scikit_learn"]
    assert cl.loads(cl.dumps(cluster)).environment.packages == ["pandas", "tqdm", "scikit_learn"]


def test_an_option_in_packages_is_refused_as_the_requirements_files_are():
    with pytest.raises(cl.ClusterFileError, match=r"environment.packages holds '-r ~/x', an option, not a requirement"):
        cluster_with('packages = ["-r ~/x"]')
