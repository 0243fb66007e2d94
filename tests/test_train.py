"""Training sweeps: the batch search, the training table, its journal and merge, real sweeps."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.cli import main as cli_main
from pytest_neuronsupport.dataset.journal import Journal, read_journal
from pytest_neuronsupport.dataset.merge import merge_journals
from pytest_neuronsupport.dataset.schema import SUPPORT
from pytest_neuronsupport.dataset.store import find_row, read_dataset
from pytest_neuronsupport.dataset.training import TRAIN
from pytest_neuronsupport.modellist import ModelListError, parse
from pytest_neuronsupport.pipeline.isolate import ForkServerExecutor, RunRequest
from pytest_neuronsupport.pipeline.training import find_batch, precision
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.runners.lib.training import out_of_memory
from pytest_neuronsupport.views.training import train_report
from tests.sweeping import SweepRunner

PAIR = "aot_eager-2.13.0/transformers-5.24.0.parquet"


def test_find_batch_doubles_then_bisects_to_the_first_failure() -> None:
    found = find_batch(lambda batch: batch <= 21, max_batch=256)
    assert (found.batch, found.failed, found.capped) == (21, 22, False)
    assert [b for b, _ in found.trials] == [1, 2, 4, 8, 16, 32, 24, 20, 22, 21]
    capped = find_batch(lambda batch: True, max_batch=12)
    assert (capped.batch, capped.failed, capped.capped) == (12, None, True)
    assert [b for b, _ in capped.trials] == [1, 2, 4, 8, 12]
    none = find_batch(lambda batch: False, max_batch=8)
    assert (none.batch, none.failed, none.capped) == (0, 1, False)


def test_find_batch_stops_at_an_error_that_is_not_memory() -> None:
    def fits(batch: int) -> bool:
        if batch == 4:
            raise RuntimeError("a real error")
        return True

    with pytest.raises(RuntimeError, match="a real error"):
        find_batch(fits, max_batch=64)


def test_out_of_memory_is_told_apart_from_other_errors() -> None:
    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate")
    assert out_of_memory(cpu) and out_of_memory(MemoryError())
    assert out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not out_of_memory(RuntimeError("the backward graph failed"))
    assert not out_of_memory(ValueError("shapes do not match"))
    assert precision("float32") == "fp32" and precision("bfloat16") == "bf16-autocast"


def _train_row(model_id: str, seq_len: int, batch: int, **more: Any) -> dict[str, Any]:
    return {
        "model_id": model_id,
        "seq_len": seq_len,
        "result": Result.PASS,
        "batch_native": batch,
        "batch_compiled": 2 * batch,
        "batch_compiled_capped": True,
        "objective": "causal-lm",
        "precision": "fp32",
        "tested_at": datetime.now(UTC).isoformat(),
        **more,
    }


def test_training_rows_go_through_the_journal_and_merge_of_their_table(tmp_path: Path) -> None:
    support = {"model_id": "zoo:gpt2", "result": "PASS", "tested_at": datetime.now(UTC)}
    with Journal(tmp_path) as journal:
        journal.append(PAIR, support)
        journal.append(PAIR, _train_row("zoo:gpt2", 128, 4), TRAIN)
        journal.append(PAIR, _train_row("zoo:gpt2", 512, 1), TRAIN)
        journal.append(PAIR, _train_row("zoo:gpt2", 128, 8), TRAIN)  # replaces the first
        lines = [json.loads(line) for line in journal.path.read_text().splitlines()]
    assert "table" not in lines[0] and lines[1]["table"] == "train"  # support lines unchanged
    assert [pair for pair, _ in read_journal(journal.path)] == [PAIR] * 4

    report = merge_journals(tmp_path)
    assert report.ok and report.journals_merged == [journal.path]
    assert sorted(report.written) == [tmp_path / "data" / PAIR, tmp_path / "train" / PAIR]
    trained = read_dataset(tmp_path, table=TRAIN).to_pylist()
    assert [(r["seq_len"], r["batch_native"]) for r in trained] == [(128, 8), (512, 1)]
    assert read_dataset(tmp_path).column_names == SUPPORT.schema.names  # support: as it was
    assert read_dataset(tmp_path).column("model_id").to_pylist() == ["zoo:gpt2"]
    found = find_row(tmp_path, PAIR, ("zoo:gpt2", 512), TRAIN)
    assert found is not None and found["batch_compiled"] == 2

    lines = train_report(tmp_path)
    assert lines[1].split()[:2] == ["model", "objective"]
    assert lines[2].split()[:6] == ["zoo:gpt2", "causal-lm", "fp32", "128", "8", "16*"]


def test_model_lists_say_mode_and_seq_len(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[[model]]\nid = "zoo:gpt2"\nmode = "train"\nseq_len = 64\n')
    [spec] = parse(path)
    assert (spec.mode, spec.seq_len) == ("train", 64)
    path.write_text('[[model]]\nid = "zoo:gpt2"\nmode = "fit"\n')
    with pytest.raises(ModelListError, match="'mode' must be one of"):
        parse(path)
    path.write_text('[[model]]\nid = "zoo:gpt2"\nseq_len = 0\n')
    with pytest.raises(ModelListError, match="'seq_len' must be a positive integer"):
        parse(path)


def test_train_report_command_without_results(tmp_path: Path, capsys: Any) -> None:
    assert cli_main(["train-report", "--results", str(tmp_path)]) == 1
    assert "no training results" in capsys.readouterr().out


def _rerun(script: Path, executor: ForkServerExecutor) -> dict[str, Any]:
    """A trial's script run again, isolated as the sweep ran it (one pinned CPU)."""
    outcome = executor.run(
        RunRequest(
            script=script,
            cwd=script.parent,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            verdict_path=script.parent / "rerun.json",
            log_path=script.parent / "rerun.log",
            timeout_s=300,
            cpus=[sorted(os.sched_getaffinity(0))[0]],
        )
    )
    assert outcome.verdict is not None, outcome.log_tail
    return outcome.verdict


CAP_GB = 0.15


@pytest.mark.slow
def test_training_sweep_finds_the_largest_batch_that_fits(sweep: SweepRunner) -> None:
    """A decoder and an encoder: each batch found trains under the cap, the next one searched
    runs out of memory (both rerun), and twice the cap does not find a smaller batch."""
    models = [{"id": "zoo:gpt2", "mode": "train"}, {"id": "zoo:bert-mlm", "mode": "train"}]
    args = ["--neuron-core-memory", str(CAP_GB)]
    done = sweep.run(*models, args=args)
    assert done.result.ret == 0, done.result.stdout.str()
    rows = {r["model_id"]: r for r in read_dataset(sweep.results, table=TRAIN).to_pylist()}
    assert sorted(rows) == ["zoo:bert-mlm", "zoo:gpt2"]
    executor = ForkServerExecutor()
    for model, row in rows.items():
        assert row["result"] == "PASS" and row["memory_cap_gb"] == CAP_GB
        assert row["param_error"] is not None and row["param_error"] <= row["tolerance"]
        details = json.loads(row["check"])
        for mode in ("native", "compiled"):
            batch, failed = row[f"batch_{mode}"], details[f"search_{mode}"]["failed_at"]
            assert batch >= 1 and not row[f"batch_{mode}_capped"] and failed == batch + 1
            [trials] = sweep.results.glob(f"runs/*/*/{model.replace(':', '--')}/train-128")
            fits = _rerun(trials / f"{mode}-{batch}" / "train.py", executor)
            assert fits["fits"] is True, fits
            fails = _rerun(trials / f"{mode}-{failed}" / "train.py", executor)
            assert fails["fits"] is False and "allocate memory" in fails["out_of_memory"]

    twice = sweep.run(
        {"id": "zoo:bert-mlm", "mode": "train"},
        args=["--neuron-core-memory", str(2 * CAP_GB), "--neuron-rerun"],
    )
    assert twice.result.ret == 0, twice.result.stdout.str()
    again = _trained(sweep.results, "aot_eager", "zoo:bert-mlm")
    assert again["memory_cap_gb"] == 2 * CAP_GB
    for mode in ("native", "compiled"):
        assert again[f"batch_{mode}"] >= rows["zoo:bert-mlm"][f"batch_{mode}"]


def _trained(results: Path, backend: str, model: str = "zoo:gpt2") -> dict[str, Any]:
    """The training row of ``model`` a sweep with ``backend`` wrote."""
    rows = read_dataset(results, table=TRAIN).to_pylist()
    [row] = [r for r in rows if r["backend"] == backend and r["model_id"] == model]
    return dict(row)


@pytest.mark.slow
def test_broken_backward_fails_train_and_perturbed_gradients_fail_output(
    sweep: SweepRunner,
) -> None:
    args = ["--neuron-core-memory", str(CAP_GB), "--neuron-train-max-batch", "1"]
    model = {"id": "zoo:gpt2", "mode": "train"}
    broken = "backends_for_tests:backward_breaking_backend_for_tests"
    assert sweep.run(model, backend=broken, args=args).result.ret == 1
    row = _trained(sweep.results, broken)
    assert row["result"] == "FAIL(train)", row
    assert "backward graph failed" in row["error"] and row["batch_native"] is None

    perturbing = "backends_for_tests:gradient_perturbing_backend_for_tests"
    assert sweep.run(model, backend=perturbing, args=args).result.ret == 1
    row = _trained(sweep.results, perturbing)
    assert row["result"] == "FAIL(output)", row
    assert row["loss"] == pytest.approx(row["loss_ref"])  # forward is right, gradients are not
    # each backward graph scales by 1.01 (gradients through two graphs, twice): beyond tol
    assert row["grad_norm"] / row["grad_norm_ref"] - 1 > 10 * row["tolerance"]
    assert row["batch_native"] == 1 and row["batch_compiled_capped"] is True
