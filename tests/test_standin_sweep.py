"""Sweeps with ``--neuron-device neuron`` through the stand-in TorchNeuron
(tests/torchneuron_standin): the cores the fake ``neuron-ls`` lists, pinning, the stack check,
fallback execution refused, the operators on the CPU and their ranking, one- and two-core runs.

A stand-in, not TorchNeuron: these tests hold the plugin's Neuron path to what AWS documents
of TorchNeuron, not to what Trainium does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import devices, torchneuron
from pytest_neuronsupport.cli import main as cli_main
from tests.results_for_tests import result_row, write_results
from tests.shared_sweeps import STANDIN, STANDIN_TOLD
from tests.sweeping import Sweep, SweepRunner
from tests.torchneuron_standin import BIN, PACKAGES, TORCH_NEURONX, standin_env


@pytest.mark.slow
@STANDIN
def test_pass_rows_say_which_operators_ran_on_the_cpu(standin_sweep: Sweep) -> None:
    llama, roberta = standin_sweep.row("zoo:llama"), standin_sweep.row("zoo:roberta-qa")
    assert llama["result"] == "PASS", llama["error"]
    # generate's greedy pick and its positions (eagerly), RMSNorm (in the compiled graph)
    assert llama["cpu_ops"] == ["aten::argmax", "aten::cumsum", "aten::rsqrt"]
    assert roberta["result"] == "PASS" and roberta["cpu_ops"] == ["aten::cumsum"]
    for row in (llama, roberta):
        assert row["device"] == "neuron" and row["backend"] == "neuron"
        assert row["fallback_execution"] is False and row["compiled"] is True
        assert row["graphs_compiled"] >= 1 and row["backend_compile_s"] is not None  # metrics
        assert row["torch_neuronx"] == TORCH_NEURONX  # the stand-in says it is one
        assert (row["compiler"], row["compiler_version"]) == ("neuronxcc", "2.33.0.0+standin")
        assert row["dtype"] == "bfloat16" and row["checked_by"] in ("cpu", "near-tie")
    out = standin_sweep.result.stdout.str()
    ops = "aten::argmax, aten::cumsum, aten::rsqrt"
    assert re.search(rf"PASS +zoo:llama +3 operators on the CPU: {ops}", out), out
    lines = "\n".join(_lookup(standin_sweep, "zoo:llama"))
    assert "PASS, 3 operators on the CPU" in lines and f"on the CPU: {ops}" in lines


@pytest.mark.slow
@STANDIN
def test_a_compile_it_fails_is_a_failure_naming_the_operator(standin_sweep: Sweep) -> None:
    gpt2, bert = standin_sweep.row("zoo:gpt2"), standin_sweep.row("zoo:bert")
    assert gpt2["result"] == "FAIL(gen)" and bert["result"] == "FAIL(forward)"
    for row in (gpt2, bert):
        assert "no lowering for aten::tanh" in row["error"], row["error"]
        assert row["fallback_execution"] is False
    assert standin_sweep.outcome("zoo:gpt2") == "failed"


@pytest.mark.slow
@STANDIN
def test_a_graph_that_fell_back_silently_is_not_a_compiler_pass(standin_sweep: Sweep) -> None:
    """The stand-in told to run a failed graph eagerly whatever the setting (a runtime that
    falls back silently): the model PASSes having compiled nothing, counted apart."""
    row = standin_sweep.row("zoo:distilbert-sst")
    assert row["result"] == "PASS" and row["compiled"] is False
    assert row["graph_count"] == 1 and row["graphs_compiled"] == 0  # dynamo's, TorchNeuron's
    out = standin_sweep.result.stdout.str()
    assert "1 PASS compiled nothing" in out
    assert re.search(r"PASS compiled nothing zoo:distilbert-sst +no graph was compiled", out)
    lines = _lookup(standin_sweep, "distilbert")
    assert any("PASS compiled nothing" in line for line in lines)
    from pytest_neuronsupport.views.dashboard import dashboard_report

    report = dashboard_report(_results(standin_sweep))
    assert re.search(r"PASS compiled nothing +1\b", report), report


@pytest.mark.slow
@STANDIN
def test_cores_come_from_neuron_ls_and_runs_are_pinned_to_their_ids(
    standin_sweep: Sweep,
) -> None:
    """16 chips at LNC=2: 64 cores of 96 GiB / 4; a run sees the cores it leased."""
    huge = standin_sweep.row("zoo:qwen3")
    assert huge["result"] == "EXCLUDED" and huge["exclusion"] == "too-large"
    assert "the device has 64)" in huge["notes"] and "25.77 GB a core" in huge["notes"]
    one, two = standin_sweep.row("zoo:llama"), standin_sweep.row("zoo:llama-2core")
    assert two["result"] == "PASS" and two["neuron_cores"] == 2, two["error"]
    assert (one["hbm_capacity_gb"], two["hbm_capacity_gb"]) == (25.77, 51.54)
    seen = {model: _pinned(standin_sweep, model) for model in ("zoo:llama", "zoo:llama-2core")}
    assert len(seen["zoo:llama"]) == 1 and 0 <= seen["zoo:llama"][0] < 64
    first, second = sorted(seen["zoo:llama-2core"])  # one logical core a rank
    assert second == first + 1 and first % 2 == 0  # an aligned lease


@pytest.mark.slow
@STANDIN
def test_operators_are_ranked_by_the_models_they_block_then_fall_back_on(
    standin_sweep: Sweep, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        cli_main(["operators", "--results", str(_results(standin_sweep)), "--format", "json"]) == 0
    )
    ranked = {op["name"]: op for op in json.loads(capsys.readouterr().out)}
    assert next(iter(ranked)) == "aten::tanh"
    assert ranked["aten::tanh"]["blocks"] == ["zoo:bert", "zoo:gpt2"]
    assert ranked["aten::argmax"]["falls_back"] == ["zoo:llama", "zoo:llama-2core"]
    # a model that failed ran some operators on the CPU before it did (gpt2's generate)
    cumsum = ["zoo:gpt2", "zoo:llama", "zoo:llama-2core", "zoo:roberta-qa"]
    assert ranked["aten::cumsum"]["falls_back"] == cumsum
    assert list(ranked)[1:3] == ["aten::cumsum", "aten::argmax"]  # then by the models on the CPU
    assert "aten::relu" not in ranked  # it fell back silently: no failure names it
    assert cli_main(["operators", "--results", str(_results(standin_sweep))]) == 0
    text = capsys.readouterr().out
    assert re.search(r"aten::tanh +blocks 2, on the CPU in 0", text), text


@pytest.mark.slow
@STANDIN
def test_a_run_py_run_with_fallback_asked_for_still_fails(standin_sweep: Sweep) -> None:
    """The stand-in falls back when asked, as TorchNeuron documents; a model's run.py turns it
    off whatever the environment says: run again with ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION
    =0``, the compile that fails is still FAIL(gen), never PASS."""
    runner = standin_sweep.runner
    assert runner is not None
    env = {**os.environ, **_standin(runner), torchneuron.FALLBACK_ENV: "0"}
    falls_back = subprocess.run(
        [sys.executable, "-c", FALLS_BACK], env=env, capture_output=True, text=True, check=False
    )
    assert falls_back.stdout.split() == ["eager", "0", "raised"], falls_back.stderr[-2000:]
    run_py = next(runner.results.glob("runs/*/*/zoo--gpt2/run.py"))
    verdict = run_py.with_name("again.json")
    done = subprocess.run(
        [sys.executable, str(run_py), "--result", str(verdict)],
        env=env,
        cwd=runner.path,
        capture_output=True,
        text=True,
        check=False,
    )
    said = json.loads(verdict.read_text(encoding="utf-8"))
    assert said["result"] == "FAIL(gen)", done.stderr[-2000:]
    assert "no lowering for aten::tanh" in said["error"] and said["fallback_execution"] is False


#: In the stand-in with fallback execution on: a graph it cannot compile runs eagerly (and no
#: metrics name it); the compile option turning it off wins and it raises.
FALLS_BACK = """
import torch, torch_neuronx
x = torch.ones(3, device="neuron")
f = torch.compile(lambda a: torch.tanh(a) + 1, backend="neuron")
print("eager" if torch.allclose(f(x).cpu(), torch.tanh(torch.ones(3)) + 1) else "wrong")
print(len(torch_neuronx.get_dynamo_metrics()))
torch._dynamo.reset()
g = torch.compile(lambda a: torch.tanh(a) * 2, backend="neuron",
                  options={"fallback_execution": False})
try:
    g(x)
    print("ran")
except Exception:
    print("raised")
"""


def _standin(runner: SweepRunner) -> dict[str, str]:
    """The stand-in's environment of the shared sweep's folder (its files already written)."""
    folder = runner.path / "standin"
    paths = [folder / "metadata", PACKAGES]
    return {
        "PYTHONPATH": os.pathsep.join(map(str, paths)),
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "NEURONSUPPORT_DEV_DIR": str(folder / "dev"),
        "HF_HUB_OFFLINE": "1",
        **STANDIN_TOLD,
    }


def _results(sweep: Sweep) -> Path:
    assert sweep.runner is not None
    return sweep.runner.results


def _lookup(sweep: Sweep, model: str) -> list[str]:
    from pytest_neuronsupport.views.lookup import lookup

    return lookup(_results(sweep), model)


def _pinned(sweep: Sweep, model: str) -> list[int]:
    """The cores the stand-in was given in each process of the model's run (its log)."""
    log = next(_results(sweep).glob(f"runs/*/*/{model.replace(':', '--')}/output.log"))
    text = log.read_text(encoding="utf-8", errors="replace")
    return [int(n) for n in re.findall(r"stand-in\] NEURON_RT_VISIBLE_CORES=(\d+)", text)]


def _refused(runner: SweepRunner, env: dict[str, str], *args: str) -> str:
    """A sweep of zoo:bert on the neuron device, refused before it starts: its stderr."""
    done = runner.run(
        "zoo:bert", backend="neuron", args=["--neuron-device", "neuron", *args], env=env
    )
    assert done.result.ret == pytest.ExitCode.USAGE_ERROR, done.result.stdout.str()
    assert not done.rows
    return done.result.stderr.str()


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("xla", "torch-neuronx 2.9.0.2.15.32035 is the XLA library"),
        ("fallback", f"{torchneuron.FALLBACK_ENV}=0 runs a graph that fails to compile eagerly"),
        ("no chips", "neuron-ls -j lists no Neuron device"),
        ("no neuron-ls", "neuron-ls is not on PATH"),
    ],
)
def test_a_neuron_sweep_that_cannot_be_trusted_is_refused_saying_why(
    how: str, said: str, sweep: SweepRunner, tmp_path: Path
) -> None:
    env = standin_env(tmp_path / "standin", xla=how == "xla", chips=0 if how == "no chips" else 16)
    if how == "fallback":
        env[torchneuron.FALLBACK_ENV] = "0"
    if how == "no neuron-ls":
        env["PATH"] = os.environ["PATH"]
    stderr = _refused(sweep, env)
    assert said in stderr, stderr
    if how == "xla":  # what to install instead
        assert "pip install --extra-index-url https://pip.repos.neuron.amazonaws.com" in stderr


@pytest.mark.slow  # two interpreters import torch
def test_a_torch_neuronx_that_registers_nothing_is_not_torchneuron(tmp_path: Path) -> None:
    """The versions may say TorchNeuron: what importing it registers decides."""
    package = tmp_path / "torch_neuronx"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    problem = torchneuron.registration_problem(env)
    assert problem is not None and "does not register the 'neuron' device" in problem
    assert "the 'neuron' dynamo backend" in problem
    env["PYTHONPATH"] = str(PACKAGES)
    assert torchneuron.registration_problem(env) is None  # the stand-in registers both


def test_a_pair_holds_the_rows_of_one_device(sweep: SweepRunner, tmp_path: Path) -> None:
    """A Neuron sweep under a non-Neuron backend names its pair as the CPU's would
    (``aot_eager-<torch>``): where that pair holds CPU rows, it is refused before anything
    runs, and the CPU's rows stay as they were."""
    torch = devices.public_version(devices.package_version("torch") or "")
    transformers = devices.package_version("transformers") or ""
    pair = {"compiler": "aot_eager", "compiler_version": torch, "library_version": transformers}
    write_results(sweep.results, [result_row("zoo:bert", **pair)])
    env = standin_env(tmp_path / "standin")
    done = sweep.run("zoo:bert", args=["--neuron-device", "neuron"], env=env)
    assert done.result.ret == pytest.ExitCode.USAGE_ERROR, done.result.stdout.str()
    said = done.result.stderr.str()
    assert f"aot_eager-{torch}/transformers-{transformers}.parquet holds rows of device cpu" in said
    assert "this sweep runs on neuron: one pair is one device" in said
    assert done.rows["zoo:bert"]["device"] == "cpu" and len(done.rows) == 1


def test_auto_picks_neuron_where_torchneuron_and_its_devices_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env: dict[str, Any] = standin_env(tmp_path / "standin", chips=2)
    monkeypatch.syspath_prepend(str(PACKAGES))  # found, not imported
    monkeypatch.setenv(torchneuron.DEV_DIR_ENV, env[torchneuron.DEV_DIR_ENV])
    assert devices.resolve("auto").name == "neuron"
    monkeypatch.setenv(torchneuron.DEV_DIR_ENV, str(tmp_path))  # no device files there
    assert devices.resolve("auto").name != "neuron"


@pytest.mark.slow
def test_a_benchmark_on_a_trn2_instance_is_held_to_its_documented_peaks(
    sweep: SweepRunner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--neuron-instance trn2.48xlarge``: the roofline of ``neuronsupport perf`` is a fraction
    of one logical core's share of a Trainium2 chip (no price: none is sourced)."""
    from pytest_neuronsupport.dataset.files import read_dataset
    from pytest_neuronsupport.dataset.perf import PERF

    bench = ["--neuron-perf", "--neuron-perf-batch=1", "--neuron-perf-seq-len=16"]
    bench += ["--neuron-perf-rounds=3", "--neuron-perf-min-seconds=0.001"]
    bench += ["--neuron-perf-max-rounds=3", "--neuron-perf-warmup=1"]
    args = ["--neuron-device", "neuron", "--neuron-instance", "trn2.48xlarge", *bench]
    done = sweep.run("zoo:bert-mlm", backend="neuron", args=args, env=standin_env(tmp_path / "s"))
    assert done.row("zoo:bert-mlm")["result"] == "PASS", done.result.stdout.str()
    (row,) = read_dataset(sweep.results, table=PERF).to_pylist()
    assert row["result"] == "PASS", row["error"]
    assert row["instance_type"] == "trn2.48xlarge" and row["price_per_hour"] is None
    assert row["peak"] == 667e3 / 4 and row["peak_unit"] == "GFLOP/s"
    assert row["peak_source"].startswith("AWS Neuron docs, Trainium2 Architecture")
    assert row["roofline_fraction"] > 0 and row["cost_per_million"] is None
    assert cli_main(["perf", "--results", str(sweep.results)]) == 0
    assert "zoo:bert-mlm" in capsys.readouterr().out
