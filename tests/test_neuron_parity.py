"""Every bundled list through the Neuron path, held row by row to the CPU's verdicts.

The stand-in TorchNeuron (tests/torchneuron_standin) runs the runners' Neuron code on a machine
without Trainium: ``--neuron-device neuron``, ``backend="neuron"``, ``fullgraph=True``, bf16.
Whatever the harness adds around a model (sharding, hooks, generation set-up) must compile
there wherever the model does on the CPU, so each model of each bundled list gets the CPU's
result: the tiny list (every runner, one and two cores, expert-parallel included; the CPU's rows
are the README's sweep of it, :func:`~tests.shared_sweeps.tiny_sweep`), the training list
(``--neuron-train``, at LNC=1) and the benchmark of a decoder and an encoder
(``--neuron-perf``). A model whose results differ is named with both errors.

The stand-in is told to run some operators on the CPU (each runner's: a convolution of the
vision tower, the experts' ``histc``, RMSNorm's ``rsqrt``): the verdicts do not change, the rows
say so. Then, in a folder of their own (the scripts are the same: not "unchanged" there), a
wrong compiler is ``FAIL(output)`` on ``neuron``, and a compile the stand-in is told to fail
names its operator whichever runner the model has (the decoder's and the encoder's are
tests/test_standin_sweep.py's). Swept once, in one session fixture: about 230 CPU-seconds
(measured with the CPU's tiny sweep done already; the inference sweeps reuse its references).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.dataset.files import read_dataset
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.dataset.train import TRAIN
from pytest_neuronsupport.modellist import default_lists
from tests.shared_sweeps import PERTURBING
from tests.sweeping import Sweep, SweepRunner
from tests.torchneuron_standin import standin_env

PARITY = pytest.mark.xdist_group("neuron-parity")
#: What the stand-in is told in the parity sweeps: operators that run on the CPU, in every
#: runner's models; the verdicts stay the CPU's.
FALLBACK = {"NEURON_STANDIN_CPU_OPS": "aten::convolution,aten::histc,aten::rsqrt"}
#: The compile the stand-in is told to fail (an operator of every runner's graphs), and a
#: model of each runner that tests/test_standin_sweep.py does not fail already (it fails the
#: decoder's and the encoder's: ``aten::tanh``): expert-parallel on two cores, seq2seq,
#: multimodal.
FAILED_OP = "aten::embedding"
FAILED_RUNNERS = ["zoo:mixtral", "zoo:t5", "zoo:llava"]
#: The benchmarked decoder and encoder, and the fewest rounds that make figures.
BENCHED = ["zoo:llama", "zoo:bert-mlm"]
PERF_ARGS = [
    "--neuron-perf",
    "--neuron-perf-batch=1",
    "--neuron-perf-io=8/4",
    "--neuron-perf-seq-len=16",
    "--neuron-perf-rounds=2",
    "--neuron-perf-min-seconds=0.001",
    "--neuron-perf-max-rounds=2",
    "--neuron-perf-warmup=0",
]
TRAIN_ARGS = ["--neuron-train", "--neuron-train-max-batch", "1"]
NEURON = ["--neuron-device", "neuron", "--neuron-judge", "none"]
#: The inference sweeps in fp32, as the CPU's: each model's CPU reference is the one the CPU's
#: sweep computed (its file is named by the dtype, not the device), and its ``cpu_match`` is
#: held to the CPU's exactly. The training step is bf16 autocast on ``neuron``.
FP32 = ["--neuron-dtype", "float32"]


def bundled(train: bool = False) -> list[dict[str, Any]]:
    """The bundled list's entries, as its file writes them."""
    with default_lists(train)[0].open("rb") as f:
        entries: list[dict[str, Any]] = tomllib.load(f)["model"]
    return entries


@dataclass
class Parity:
    """The sweeps on ``neuron`` and the CPU's rows to hold them to."""

    tiny: Sweep
    tiny_cpu: Mapping[str, dict[str, Any]]
    train: dict[str, dict[str, Any]]
    train_cpu: dict[str, dict[str, Any]]
    perf: dict[str, dict[str, Any]]
    perf_cpu: dict[str, dict[str, Any]]
    wrong: Sweep
    told: Sweep


def _by_model(results: Path, table: Any) -> dict[str, dict[str, Any]]:
    return {row["model_id"]: row for row in read_dataset(results, table=table).to_pylist()}


@pytest.fixture(scope="session")
def parity(sweep_folder: Callable[..., SweepRunner], tiny_sweep: Sweep) -> Parity:
    """The bundled lists on ``neuron`` (the benchmark in the tiny list's folder: its support
    runs unchanged, only benchmarked), on the CPU what no shared sweep has (the training list,
    the benchmark), and the stand-in told to fail a compile, or run under a wrong compiler."""
    neuron, cpu = sweep_folder("neuron-parity"), sweep_folder("neuron-parity-cpu")
    env = {**standin_env(neuron.path / "standin"), **FALLBACK}
    tiny = neuron.run(
        *bundled(), backend="neuron", args=[*NEURON, *FP32], env=env, list_name="tiny.toml"
    )
    benched = [e for e in bundled() if e["id"] in BENCHED]
    benchmark = [*NEURON, *FP32, *PERF_ARGS]
    neuron.run(*benched, backend="neuron", args=benchmark, env=env, list_name="tiny.toml")
    at_lnc1 = {**env, "NEURON_LOGICAL_NC_CONFIG": "1"}  # the training list: LNC=1
    neuron.run(*bundled(train=True), backend="neuron", args=[*NEURON, *TRAIN_ARGS], env=at_lnc1)
    cpu.run(*bundled(train=True), args=TRAIN_ARGS)
    cpu.run(*benched, args=["--neuron-judge", "none", *PERF_ARGS])
    elsewhere = sweep_folder("neuron-told")
    env = standin_env(elsewhere.path / "standin")
    some = [e for e in bundled() if e["id"] in BENCHED]
    wrong = elsewhere.run(*some, backend=PERTURBING, args=[*NEURON, *FP32], env=env)
    env["NEURON_STANDIN_FAIL_COMPILE"] = FAILED_OP
    failing = [e for e in bundled() if e["id"] in FAILED_RUNNERS]
    told = elsewhere.run(*failing, backend="neuron", args=[*NEURON, *FP32], env=env)
    return Parity(
        tiny=tiny,
        tiny_cpu=tiny_sweep.rows,
        train=_by_model(neuron.results, TRAIN),
        train_cpu=_by_model(cpu.results, TRAIN),
        perf=_by_model(neuron.results, PERF),
        perf_cpu=_by_model(cpu.results, PERF),
        wrong=wrong,
        told=told,
    )


def differences(
    neuron: Mapping[str, dict[str, Any]], cpu: Mapping[str, dict[str, Any]], models: list[str]
) -> list[str]:
    """Each model whose result on ``neuron`` is not the CPU's, with both errors."""
    said = []
    for model in models:
        a, b = neuron.get(model, {}), cpu.get(model, {})
        if a.get("result") != b.get("result") or a.get("result") is None:
            said.append(
                f"{model}: neuron {a.get('result')} ({a.get('error') or a.get('notes')}) "
                f"vs cpu {b.get('result')} ({b.get('error') or b.get('notes')})"
            )
    return said


@pytest.mark.slow
@PARITY
def test_the_tiny_list_on_neuron_gets_the_cpus_verdicts(parity: Parity) -> None:
    """Every runner, expert-parallel on two cores with ``fullgraph=True`` included: the CPU's
    result and ``cpu_match``; the operators told to run on the CPU are in the rows."""
    models = [entry["id"] for entry in bundled()]
    rows = parity.tiny.rows
    differ = differences(rows, parity.tiny_cpu, models)
    assert not differ, "\n".join(differ)
    for model in models:
        row, cpu = rows[model], parity.tiny_cpu[model]
        assert row["cpu_match"] == cpu["cpu_match"], (model, row["cpu_match"], cpu["cpu_match"])
        assert (row["device"], row["fullgraph"], row["lnc"]) == ("neuron", True, 2), model
        assert (cpu["device"], cpu["lnc"]) == ("cpu", None)
        assert row["neuron_cores"] == cpu["neuron_cores"] and row["compiled"] is True, model
        assert row["fallback_execution"] is False and isinstance(row["cpu_ops"], list), model
    assert rows["zoo:mixtral"]["runner"] == "run_dense_ep"
    assert rows["zoo:mixtral"]["neuron_cores"] == 2 and rows["zoo:mixtral"]["graph_breaks"] == 0
    assert "aten::histc" in rows["zoo:mixtral"]["cpu_ops"]  # transformers' experts' count
    assert "aten::convolution" in rows["zoo:llava"]["cpu_ops"]  # the vision tower
    assert "aten::rsqrt" in rows["zoo:llama"]["cpu_ops"]  # RMSNorm
    parity.tiny.result.assert_outcomes(passed=len(models))


@pytest.mark.slow
@PARITY
def test_the_training_list_trains_on_neuron_as_on_the_cpu(parity: Parity) -> None:
    """bf16 autocast on ``neuron`` (at LNC=1) against fp32 on the CPU: each model's result is
    the CPU's, and the training table holds what the Neuron run reports."""
    models = [entry["id"] for entry in bundled(train=True)]
    differ = differences(parity.train, parity.train_cpu, models)
    assert not differ, "\n".join(differ)
    for model in models:
        row = parity.train[model]
        assert row["result"] == "PASS" and row["precision"] == "bf16-autocast", model
        assert (row["device"], row["fullgraph"], row["lnc"]) == ("neuron", True, 1), model
        assert isinstance(row["cpu_ops"], list) and row["compiled"] is True, model
        assert row["batch_native"] == row["batch_compiled"] == 1 and row["peak_gb_native"] > 0
        assert parity.train_cpu[model]["cpu_ops"] is None  # the CPU says nothing of them


@pytest.mark.slow
@PARITY
def test_a_decoder_and_an_encoder_are_benchmarked_on_neuron_as_on_the_cpu(
    parity: Parity,
) -> None:
    differ = differences(parity.perf, parity.perf_cpu, BENCHED)
    assert not differ, "\n".join(differ)
    for model in BENCHED:
        row = parity.perf[model]
        assert row["throughput"] > 0 and row["speedup_vs_eager"] > 0, model
        assert row["peak_gb"] is not None and parity.perf_cpu[model]["peak_gb"] is None
        assert row["device"] == "neuron" and row["fullgraph"] is True
        assert isinstance(row["cpu_ops"], list) and row["compiled"] is True
    assert parity.perf["zoo:llama"]["kind"] == "decoder"
    assert parity.perf["zoo:bert-mlm"]["kind"] == "encoder"


@pytest.mark.slow
@PARITY
def test_a_wrong_compiler_on_neuron_fails_the_output_check(parity: Parity) -> None:
    for model in BENCHED:
        row = parity.wrong.rows[model]
        assert row["result"] == "FAIL(output)", (model, row["error"], row["cpu_match"])
        assert row["device"] == "neuron" and row["cpu_match"].startswith("N")


@pytest.mark.slow
@PARITY
def test_a_compile_the_stand_in_fails_names_its_operator_whichever_runner(
    parity: Parity,
) -> None:
    """The generating runners the stand-in sweep of tests/test_standin_sweep.py does not fail
    (two ranks, an encoder-decoder, a vision tower): FAIL(gen) naming the operator."""
    runners = set()
    for model in FAILED_RUNNERS:
        row = parity.told.rows[model]
        runners.add(row["runner"])
        assert row["result"] == "FAIL(gen)", (model, row["error"])
        assert f"no lowering for {FAILED_OP}" in row["error"], (model, row["error"])
        # the row's line names it too, the failing rank's of a several-core run included
        assert f"no lowering for {FAILED_OP}" in row["notes"], (model, row["notes"])
        assert row["error_site"], model  # where the compiler raised it: a bisection's signature
    assert runners == {"run_dense_ep", "run_seq2seq", "run_multimodal"}
