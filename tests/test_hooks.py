"""The hooks users extend the sweep with, each through a conftest.py as docs/extending.md
shows: a column added to every row, a verdict turned, a runner of one's own (by hook and by
entry point)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from tests.sweeping import SweepRunner

#: Real sweeps of real (tiny) models in subprocesses: seconds to minutes each.
pytestmark = pytest.mark.slow

ADD_A_COLUMN = """
    def pytest_neuronsupport_row(row, spec, config):
        row["team"] = "compilers"
        row["params_per_core"] = 1.5 if row["neuron_cores"] else None
        row["notes"] = f"[{spec.task}] {row['notes']}"
"""


def test_a_hook_adds_columns_to_the_parquet_file_and_the_junit(sweep: SweepRunner) -> None:
    sweep.makeconftest(textwrap.dedent(ADD_A_COLUMN))
    done = sweep.run({"id": "zoo:llama", "task": "text-generation"}, "zoo:bert")
    done.result.assert_outcomes(passed=2)
    llama = done.row("zoo:llama")
    assert llama["team"] == "compilers" and llama["params_per_core"] == 1.5
    assert llama["notes"].startswith("[text-generation] ")
    assert done.junit["zoo:bert"]["team"] == "compilers"
    frame = pd.read_parquet(sweep.results / "data")
    assert set(frame.team) == {"compilers"}  # the dataset card's query sees the new column


def test_a_hook_that_breaks_the_row_costs_the_model_nothing_but_its_verdict(
    sweep: SweepRunner,
) -> None:
    sweep.makeconftest(
        "def pytest_neuronsupport_row(row, spec, config):\n    row['bad column!'] = [1, 2]\n"
    )
    done = sweep.run("zoo:bert")
    done.result.assert_outcomes(failed=1)
    row = done.row("zoo:bert")
    assert row["result"] == "FAIL(other)"
    assert "its row could not be recorded" in row["error"] and "bad column!" in row["error"]
    assert row["run_py"]  # what ran is kept


TURN_A_VERDICT = """
    def pytest_neuronsupport_verdict(row, spec, config):
        if spec.id == "zoo:bert" and row["result"] == "FAIL(output)":
            return "PASS"  # a known miscompile we accept, for now
        if spec.id == "zoo:gpt2":
            return "EXCLUDED"
"""


def test_a_hook_turns_verdicts_and_the_test_follows(sweep: SweepRunner) -> None:
    sweep.makeconftest(textwrap.dedent(TURN_A_VERDICT))
    done = sweep.run(
        "zoo:bert",
        "zoo:gpt2",
        "zoo:bert-mlm",
        backend="backends_for_tests:perturbing_backend_for_tests",
    )
    done.result.assert_outcomes(passed=1, skipped=1, failed=1)
    bert = done.row("zoo:bert")
    assert bert["result"] == "PASS" and bert["cpu_match"].startswith("N ")
    assert json.loads(bert["check"])["overridden"]["result"] == "FAIL(output)"
    assert done.row("zoo:gpt2")["result"] == "EXCLUDED"
    assert done.row("zoo:bert-mlm")["result"] == "FAIL(output)"  # not turned
    assert done.junit["zoo:bert"]["result"] == "PASS"


RUNNER_MODULE = '''
"""``run_next_token``: one compiled forward pass of a causal LM on ``"The future of AI is"``;
its best next token is held to the CPU fp32 pass's."""

import torch
import transformers

from pytest_neuronsupport.runners.lib.models import (
    compile_forward,
    load_pretrained,
    load_tokenizer,
    step,
)
from pytest_neuronsupport.runners.lib.protocol import Result


def run(params, ops):
    causal_lm = transformers.AutoModelForCausalLM
    with step("load", Result.FAIL_LOAD):
        tokenizer = load_tokenizer(params)
        model = load_pretrained(causal_lm, params, params["dtype"], params["device"])
    with step("forward", Result.FAIL_FORWARD):
        compile_forward(params, model)
        device_token = next_token(model, tokenizer, params["device"])
    cpu_token = next_token(load_pretrained(causal_lm, params, "float32", "cpu"), tokenizer, "cpu")
    same = device_token == cpu_token
    return {
        "result": Result.PASS if same else Result.FAIL_OUTPUT,
        "cpu_match": "Y" if same else f"N {device_token} != {cpu_token}",
        "notes": f"next token {tokenizer.decode([device_token])!r}",
    }


def next_token(model, tokenizer, device):
    inputs = tokenizer("The future of AI is", return_tensors="pt").to(device)
    with torch.no_grad():
        return int(model(**inputs).logits[0, -1].argmax())
'''

ADD_A_RUNNER = """
    from pytest_neuronsupport.runners import Runner

    def pytest_neuronsupport_runners(config):
        return [
            Runner(
                name="next_token",
                module="next_token_runner",
                load_class="AutoModelForCausalLM",
                generates=False,
                architectures=("LlamaForCausalLM",),
            )
        ]
"""


def test_a_hook_adds_a_runner_whose_run_py_stands_alone(sweep: SweepRunner, tmp_path: Path) -> None:
    (sweep.path / "next_token_runner.py").write_text(RUNNER_MODULE)
    sweep.makeconftest(textwrap.dedent(ADD_A_RUNNER))
    done = sweep.run(
        "zoo:llama",  # inferred: its architecture is the new runner's, the longest suffix
        {"id": "zoo:qwen3", "runner": "next_token"},  # named
        "zoo:gpt2",  # still the built-in dense runner's
    )
    done.result.assert_outcomes(passed=3)
    assert {m: r["runner"] for m, r in done.rows.items()} == {
        "zoo:llama": "run_next_token",
        "zoo:qwen3": "run_next_token",
        "zoo:gpt2": "run_dense",
    }
    llama = done.row("zoo:llama")
    assert llama["cpu_match"] == "Y" and llama["notes"].startswith("next token ")
    run_py = llama["run_py"]
    assert "pytest_neuronsupport" not in run_py.replace("pytest-neuronsupport", "")
    assert "def next_token(" in run_py and "def generate" not in run_py
    (tmp_path / "run.py").write_text(run_py)
    proc = subprocess.run(
        [sys.executable, "run.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("RESULT: PASS  Y")


def test_an_unknown_runner_name_in_a_list_names_the_known_ones(sweep: SweepRunner) -> None:
    sweep.makeconftest(textwrap.dedent(ADD_A_RUNNER))
    (sweep.path / "next_token_runner.py").write_text(RUNNER_MODULE)
    done = sweep.run({"id": "zoo:llama", "runner": "nope"})
    assert done.result.ret == pytest.ExitCode.USAGE_ERROR
    done.result.stderr.fnmatch_lines(["*unknown runner 'nope' (known: *next_token)*"])


def test_a_runner_named_by_an_entry_point_is_used(
    sweep: SweepRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Test double for an installed package: its dist-info names the runner in the entry-point
    group, and its module is on the path."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "next_token_runner.py").write_text(RUNNER_MODULE)
    (site / "acme_runners.py").write_text(
        textwrap.dedent(ADD_A_RUNNER) + "\nRUNNER = pytest_neuronsupport_runners(None)[0]\n"
    )
    info = site / "acme_runners-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-runners\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[pytest_neuronsupport.runners]\nnext_token = acme_runners:RUNNER\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    done = sweep.run({"id": "zoo:qwen3", "runner": "run_next_token"})
    done.result.assert_outcomes(passed=1)
    assert done.row("zoo:qwen3")["runner"] == "run_next_token"
