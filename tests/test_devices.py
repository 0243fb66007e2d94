"""The device interface, plugin side, and the stack columns read from package metadata."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pytest_neuronsupport import devices
from pytest_neuronsupport.devices import CpuDevice, NeuronDevice, core_ranges
from pytest_neuronsupport.runners.lib.processes import COMPILE_THREADS_ENV
from pytest_neuronsupport.stack import installed_stack


def test_auto_is_the_cpu_on_a_machine_without_accelerators() -> None:
    if Path("/dev/neuron0").exists() or Path("/proc/driver/nvidia").exists():
        pytest.skip("this machine has an accelerator")
    device = devices.resolve("auto")
    assert device.name == "cpu"
    assert (device.default_backend, device.default_dtype) == ("inductor", "float32")


def test_unknown_device_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"'tpu'.*auto, neuron, cuda, cpu"):
        devices.resolve("tpu")


@pytest.mark.parametrize(
    ("cores", "text"), [([0], "0"), ([0, 1, 2, 3], "0-3"), ([4, 5], "4-5"), ([1, 3], "1,3")]
)
def test_core_ranges_use_neuron_runtime_syntax(cores: list[int], text: str) -> None:
    assert core_ranges(cores) == text


@pytest.fixture
def neuron_ls_for_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in's fake ``neuron-ls`` on ``PATH``: a trn2.48xlarge (16 chips) at LNC=2."""
    from tests.torchneuron_standin import BIN

    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NEURON_STANDIN_CHIPS", "16")
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    monkeypatch.delenv("NEURONSUPPORT_CORES_PER_DEVICE", raising=False)


def test_pinning_environment_per_device(neuron_ls_for_tests: None) -> None:
    assert NeuronDevice().pin_env([4, 5, 6, 7]) == {"NEURON_RT_VISIBLE_CORES": "4-7"}
    assert devices.DEVICES["cuda"].pin_env([1, 0]) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert CpuDevice().pin_env([0, 1]) == {
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
        "TORCHINDUCTOR_COMPILE_THREADS": "2",  # inductor's compile workers: its cores too
    }


@pytest.fixture
def trn2_host_for_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trn2.48xlarge's host as this process sees it: 192 CPUs (this machine has two), and
    no thread count set in the sweep's environment."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(192)))
    for name in devices.THREADS_ENV:
        monkeypatch.delenv(name, raising=False)


def test_the_hosts_cpus_are_shared_among_the_workers_processes(
    neuron_ls_for_tests: None, trn2_host_for_tests: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 workers' references get 3 threads each (not 192 each); one worker's, every CPU; a
    leased run's share is split among its ranks; the CPU device keeps its own rule (a run's
    threads are its cores); a thread count the user set is left to stand."""
    neuron, cuda, cpu = NeuronDevice(), devices.DEVICES["cuda"], CpuDevice()
    threads = dict.fromkeys(devices.THREADS_ENV, "3")
    assert neuron.reference_env(1, workers=64) == threads
    assert neuron.reference_env(16, workers=1) == dict.fromkeys(devices.THREADS_ENV, "192")
    assert cuda.reference_env(1, workers=64) == {**threads, "CUDA_VISIBLE_DEVICES": ""}
    assert neuron.lease_env([0, 1, 2, 3], workers=16) == {
        **threads,
        "NEURON_RT_VISIBLE_CORES": "0-3",
    }
    assert neuron.lease_env([0], workers=1000) == {
        **dict.fromkeys(devices.THREADS_ENV, "1"),
        "NEURON_RT_VISIBLE_CORES": "0",
    }
    assert cpu.reference_env(2, workers=64) == cpu.lease_env([5, 6], workers=64)
    assert cpu.lease_env([5, 6], workers=64) == dict.fromkeys(
        (*devices.THREADS_ENV, COMPILE_THREADS_ENV), "2"
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert neuron.reference_env(1, workers=64) == {}
    assert neuron.lease_env([0], workers=64) == {"NEURON_RT_VISIBLE_CORES": "0"}
    monkeypatch.setenv(COMPILE_THREADS_ENV, "4")  # the user's compile workers stand too
    assert cpu.lease_env([5, 6]) == dict.fromkeys(devices.THREADS_ENV, "2")


def test_compiler_names_the_dataset_folder() -> None:
    torch_version = devices.public_version(devices.package_version("torch") or "")
    assert CpuDevice().compiler("inductor") == ("inductor", torch_version)
    assert CpuDevice().compiler("my.pkg:backend") == ("my.pkg.backend", torch_version)
    # a custom backend on Neuron is filed under its own name, not neuronxcc
    assert NeuronDevice().compiler("aot_eager")[0] == "aot_eager"


@pytest.fixture
def fake_neuron_sdk_distributions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Test double for an installed Neuron SDK: dist-info metadata only, no code."""
    for name, version in (("neuronx_cc", "2.21.33363.0"), ("torch_neuronx", "2.9.0.2.13")):
        info = tmp_path / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_neuron_compiler_and_stack_come_from_installed_metadata(
    fake_neuron_sdk_distributions: Path,
) -> None:
    assert NeuronDevice().compiler("neuron") == ("neuronxcc", "2.21.33363.0")
    stack = installed_stack()
    assert stack["neuronx_cc"] == "2.21.33363.0"
    assert stack["torch_neuronx"] == "2.9.0.2.13"
    assert stack["library_version"] == stack["transformers"]
    assert stack["python"] == ".".join(map(str, sys.version_info[:3]))
    assert stack["nki"] is None  # absent packages are null, not guessed


def test_core_capacity_and_cpu_pinning(neuron_ls_for_tests: None) -> None:
    assert NeuronDevice().core_capacity_gb() == 25.77  # trn2 at LNC=2: 96 GiB over 4 cores
    cpu = CpuDevice()
    total = cpu.core_capacity_gb() * cpu.core_count()
    assert 0.5 < total < 10_000  # the machine's memory, shared among its cores
    allowed = sorted(os.sched_getaffinity(0))
    assert cpu.cpus([0]) == allowed[:1]
    assert cpu.cpus(list(range(len(allowed)))) == allowed
    assert NeuronDevice().cpus([0, 1]) is None


def test_run_side_device_ops_split_a_lease_among_ranks(
    monkeypatch: pytest.MonkeyPatch, neuron_ls_for_tests: None
) -> None:
    """The run side (in run.py): each rank of a several-core Neuron run sees one logical core
    of the run's lease; CPU and CUDA ranks need no environment of their own."""
    from pytest_neuronsupport.runners.lib import device_ops
    from pytest_neuronsupport.runners.lib.device_ops import expand_ranges

    assert expand_ranges("4-7") == [4, 5, 6, 7]
    assert expand_ranges("1,3") == [1, 3]
    assert expand_ranges("0-1,6") == [0, 1, 6]
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "4-5")
    neuron = device_ops.NeuronRankOps  # not made: that would import torch_neuronx
    assert [neuron.rank_env(r, 2) for r in (0, 1)] == [
        {"NEURON_RT_VISIBLE_CORES": "4"},
        {"NEURON_RT_VISIBLE_CORES": "5"},
    ]
    assert device_ops.CpuRankOps.rank_env(1, 2) == {}
    cuda = object.__new__(device_ops.CudaRankOps)  # not set up: no GPU here
    assert cuda.rank_device(1) == "cuda:1"
    # the plugin side pins the run to the same cores it leased
    assert devices.DEVICES["neuron"].pin_env([4, 5]) == {"NEURON_RT_VISIBLE_CORES": "4-5"}


def test_every_device_names_run_side_classes_that_exist() -> None:
    from pytest_neuronsupport.runners.lib import device_ops

    for device in devices.DEVICES.values():
        ops, rank_ops = getattr(device_ops, device.ops), getattr(device_ops, device.rank_ops)
        assert issubclass(rank_ops, ops), device.name
        for method in ("reset_peak", "synchronize", "peak_gb"):
            assert callable(getattr(ops, method)), (device.name, method)
        for method in ("rank_env", "setup_rank", "rank_device"):
            assert callable(getattr(rank_ops, method)), (device.name, method)
