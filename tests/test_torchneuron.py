"""TorchNeuron as documented, plugin side: the cores ``neuron-ls -j`` lists, the stack check,
fallback execution refused; the Neuron device built on them. The sweeps through the stand-in
TorchNeuron are in ``test_standin_sweep.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_neuronsupport import torchneuron
from pytest_neuronsupport.backends import compile_turned_off
from pytest_neuronsupport.devices import DEVICES, NeuronDevice
from pytest_neuronsupport.torchneuron import NeuronError, parse_neuron_ls, version_problem
from tests.torchneuron_standin import BIN, standin_env


def chip(n: int, per_chip: int = 4, lnc: int = 2) -> dict[str, object]:
    """One chip as ``neuron-ls -j`` documents it (a Trn2 chip: 96 GiB)."""
    return {
        "neuron_device": n,
        "bdf": f"{n:02x}:00.0",
        "nc_count": per_chip,
        "logical_neuroncore_config": lnc,
        "memory_size": 103079215104,
        "neuroncore_ids": list(range(n * per_chip, (n + 1) * per_chip)),
        "neuron_processes": [],
    }


def test_a_trn2_48xlarge_at_lnc_2_has_64_cores_of_24_gib() -> None:
    cores = parse_neuron_ls(json.dumps([chip(n) for n in range(16)]))
    assert len(cores.ids) == 64 and cores.ids[-1] == 63
    assert cores.lnc == 2
    assert cores.core_memory_gb == pytest.approx(24 * 2**30 / 1e9)
    at_lnc_1 = parse_neuron_ls(json.dumps([chip(n, 8, 1) for n in range(16)]))
    assert len(at_lnc_1.ids) == 128 and at_lnc_1.lnc == 1


def test_the_override_changes_each_chips_count_and_nothing_else() -> None:
    cores = parse_neuron_ls(json.dumps([chip(0), chip(1)]), per_device=2)
    assert cores.ids == (0, 1, 4, 5)  # each chip's ids run on from its first
    assert cores.core_memory_gb == pytest.approx(48 * 2**30 / 1e9)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[]", "lists no Neuron device"),
        ("", "printed no JSON"),
        (json.dumps([{**chip(0), "nc_count": 0, "neuroncore_ids": []}]), "no NeuronCore"),
        (json.dumps([{**chip(0), "neuroncore_ids": [0, 1]}]), "nc_count 4 but neuroncore_ids"),
        (json.dumps([{**chip(0), "memory_size": "96G"}]), "memory_size is '96G'"),
    ],
)
def test_neuron_ls_that_says_nothing_is_an_error_saying_so(text: str, said: str) -> None:
    with pytest.raises(NeuronError, match=said):
        parse_neuron_ls(text)


def test_cores_are_read_from_the_neuron_ls_on_path(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    env.update(NEURON_STANDIN_CHIPS="16", NEURON_LOGICAL_NC_CONFIG="2")
    env.pop(torchneuron.CORES_PER_DEVICE_ENV, None)
    assert len(torchneuron.neuron_cores(env).ids) == 64
    assert len(torchneuron.neuron_cores({**env, "NEURON_LOGICAL_NC_CONFIG": "1"}).ids) == 128
    assert len(torchneuron.neuron_cores({**env, "NEURON_STANDIN_CHIPS": "1"}).ids) == 4
    overridden = {**env, torchneuron.CORES_PER_DEVICE_ENV: "1"}
    assert len(torchneuron.neuron_cores(overridden).ids) == 16
    with pytest.raises(NeuronError, match="lists no Neuron device"):
        torchneuron.neuron_cores({**env, "NEURON_STANDIN_CHIPS": "0"})
    with pytest.raises(NeuronError, match="neuron-ls is not on PATH"):
        torchneuron.neuron_cores({**env, "PATH": str(tmp_path)})
    with pytest.raises(NeuronError, match="not a positive count"):
        torchneuron.neuron_cores({**env, torchneuron.CORES_PER_DEVICE_ENV: "four"})


def test_the_device_folder_is_read_instead_of_dev(tmp_path: Path) -> None:
    env = standin_env(tmp_path / "standin", chips=2)
    assert [Path(p).name for p in torchneuron.device_files(env)] == ["neuron0", "neuron1"]
    assert torchneuron.device_files({torchneuron.DEV_DIR_ENV: str(tmp_path)}) == []


@pytest.mark.parametrize(
    ("neuronx", "torch", "said"),
    [
        ("2.13.3.0", "2.13.0+cpu", None),
        ("2.14.3.1", "2.14.0", None),
        (None, "2.13.0", "TorchNeuron (torch-neuronx) is not installed: pip install"),
        ("2.9.0.2.15.32035", "2.9.0", "is the XLA library"),
        ("2.13.0.1", "2.13.0", "is not a TorchNeuron release"),
        ("2.14.3.0", "2.13.0", "is built for torch 2.14, and torch 2.13.0 is installed"),
    ],
)
def test_only_torchneuron_for_the_installed_torch_passes(
    neuronx: str | None, torch: str, said: str | None
) -> None:
    problem = version_problem(neuronx, torch, xla=False)
    assert problem is None if said is None else said in str(problem)
    if problem is not None:  # what to install, from where
        assert "torch-neuronx==" in problem and torchneuron.NEURON_INDEX in problem


def test_the_xla_library_is_refused_by_its_package_whatever_its_version() -> None:
    problem = version_problem("2.13.3.0", "2.13.0", xla=True)
    assert problem is not None and "XLA library" in problem
    assert "'torch-neuronx==2.13.*'" in problem


def test_fallback_execution_turned_on_refuses_a_neuron_sweep_only() -> None:
    neuron, cpu = DEVICES["neuron"], DEVICES["cpu"]
    on = {torchneuron.FALLBACK_ENV: "0"}
    refused = compile_turned_off(on, neuron)
    assert refused is not None and refused.startswith(f"{torchneuron.FALLBACK_ENV}=0 runs a graph")
    assert compile_turned_off(on, cpu) is None  # no TorchNeuron there
    assert compile_turned_off({torchneuron.FALLBACK_ENV: "1"}, neuron) is None
    assert compile_turned_off({}, neuron) is None  # TorchNeuron's default: off


def test_every_neuron_run_has_fallback_off_and_the_lnc_it_was_counted_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in standin_env(tmp_path / "standin").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(torchneuron.FALLBACK_ENV, "0")  # runs never inherit it
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    env = NeuronDevice().run_env(tmp_path / "cache")
    assert env[torchneuron.FALLBACK_ENV] == "1"
    assert env["NEURON_LOGICAL_NC_CONFIG"] == "2"
    # one folder per compiler, as the public NEFF cache's (TorchNeuron's cache has none)
    folder = "-".join(NeuronDevice().compiler("neuron"))  # neuronxcc-<its version>
    neff = tmp_path / "cache" / "neff" / folder
    assert env["TORCH_NEURONX_NEFF_CACHE_DIR"] == str(neff)
    assert NeuronDevice().shared_cache(tmp_path / "cache", "neuron") == (neff, neff.name)
    assert NeuronDevice().shared_cache(tmp_path / "cache", "aot_eager") is None
