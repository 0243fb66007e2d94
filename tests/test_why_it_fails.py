"""Why a model fails, end to end: sweeps whose rows carry dynamo's graphs and breaks, where a
failure was raised, and (``--neuron-minify``) a repro.py that fails alone; the failures grouped.

The backends that fail are test doubles (tests/backends_for_tests.py) standing in for a compiler
that lacks a lowering for one op, or miscompiles one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_neuronsupport.dataset.layout import run_dir
from tests.shared_sweeps import SUPPORT
from tests.sweeping import Sweep, SweepRunner

FAILS_ON_LINEAR = "backends_for_tests:fails_on_linear_backend_for_tests"
CORRUPTS_SILU = "backends_for_tests:corrupts_silu_backend_for_tests"


def run_alone(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python3 repro.py`` from the folder the sweep ran in (where the backend imports)."""
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def pair_dir(sweep: SweepRunner) -> tuple[Path, str]:
    (data,) = (sweep.results / "data").glob("*/*.parquet")
    return sweep.results, str(data.relative_to(sweep.results / "data"))


@pytest.mark.slow
def test_an_op_the_compiler_lacks_gives_one_group_with_a_one_op_repro_that_fails_alone(
    sweep: SweepRunner,
) -> None:
    done = sweep.run("zoo:llama", "zoo:bert", backend=FAILS_ON_LINEAR, args=["--neuron-minify"])
    done.result.assert_outcomes(failed=2)
    results, pair = pair_dir(sweep)
    for model_id, result in (("zoo:llama", "FAIL(gen)"), ("zoo:bert", "FAIL(forward)")):
        row = done.row(model_id)
        assert row["result"] == result
        assert row["notes"] == "NotImplementedError: test backend: no lowering for linear"
        assert row["error"].startswith("BackendCompilerFailed")  # the run's error, whole
        assert row["error_site"] == FAILS_ON_LINEAR  # the first frame inside the "compiler"
        assert row["graph_count"] == 1 and row["graph_breaks"] == 0
        # the minifier shrank the model's graph to the one op the backend refuses
        assert row["repro_ops"] == ["torch._C._nn.linear"] and row["repro_ops_after"] == 1
        assert row["repro_ops_before"] > 50
        assert json.loads(row["check"])["minify"].startswith("graph 1 of 1 minified from")
        script = run_dir(results, pair, model_id) / "repro.py"
        assert script.read_text(encoding="utf-8") == row["repro_py"]
        alone = run_alone(script, sweep.path)
        assert alone.returncode != 0
        assert "NotImplementedError: test backend: no lowering for linear" in alone.stderr

    grouped = subprocess.run(
        [str(Path(sys.executable).with_name("neuronsupport")), "failures", "--results",
         str(results), "--format", "json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    (group,) = json.loads(grouped.stdout)
    assert sorted(m["model_id"] for m in group["models"]) == ["zoo:bert", "zoo:llama"]
    assert (group["exception"], group["where"]) == ("NotImplementedError", "op")
    assert group["place"] == "torch._C._nn.linear" and group["repro"]["ops"] == 1


@pytest.mark.slow
def test_a_miscompiled_op_gives_an_output_failure_whose_repro_shows_the_mismatch(
    sweep: SweepRunner,
) -> None:
    plain = sweep.run("zoo:llama", backend=CORRUPTS_SILU)
    row = plain.row("zoo:llama")
    assert row["result"] == "FAIL(output)" and row["graph_count"] == 2
    results, pair = pair_dir(sweep)
    folder = run_dir(results, pair, "zoo:llama")
    # without --neuron-minify nothing of it runs
    assert row["repro_py"] is None and not (folder / "minify.py").exists()
    assert "minify" not in json.loads(row["check"])

    minified = sweep.run(
        "zoo:llama", backend=CORRUPTS_SILU, args=["--neuron-minify", "--neuron-rerun"]
    )
    row = minified.row("zoo:llama")
    assert row["result"] == "FAIL(output)"  # minifying never changes the verdict
    assert row["repro_ops"] == ["torch.nn.functional.silu"], row["repro_ops"]
    alone = run_alone(folder / "repro.py", sweep.path)
    assert alone.returncode != 0
    assert "AssertionError: output 0: compiled differs from eager by" in alone.stderr


@pytest.mark.slow
@SUPPORT
def test_graph_breaks_are_recorded_and_held_against_the_baseline(tiny_sweep: Sweep) -> None:
    row = tiny_sweep.row("zoo:llava")  # as the tiny list's sweep recorded it
    assert row["result"] == "PASS"
    assert row["graph_breaks"] >= 1 and row["graph_count"] > row["graph_breaks"]
    assert any("Tensor.item()" in reason for reason in row["graph_break_reasons"])
    # the model passes, but a break the baseline does not expect is a regression: held
    # against the row recorded (llava's run.py is unchanged: it does not run again)
    runner = tiny_sweep.runner
    assert runner is not None
    expected = runner.path / "expected.toml"
    expected.write_text(
        'pair = "inductor"\n[expected]\n"zoo:llava" = { result = "PASS", graph_breaks = 0 }\n',
        encoding="utf-8",
    )
    # the tiny list's backend (inductor, the default): llava's run.py is the same
    done = runner.run(
        "zoo:llava",
        backend="inductor",
        args=["--neuron-baseline", str(expected)],
        list_name="llava.toml",
    )
    done.result.assert_outcomes(skipped=1)
    assert done.result.ret == 1
    breaks = f"graph breaks 0 -> {row['graph_breaks']}"
    done.result.stdout.fnmatch_lines(
        [f"regression   zoo:llava: expected PASS, got PASS ({breaks})*"]
    )
