"""Training sweeps: the batch search, the training table, its journal and merge, real sweeps."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.cli import main as cli_main
from pytest_neuronsupport.dataset.files import find_row, read_dataset
from pytest_neuronsupport.dataset.journal import Journal, read_journal
from pytest_neuronsupport.dataset.merge import merge_journals
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.train import TRAIN
from pytest_neuronsupport.modellist import ModelListError, parse
from pytest_neuronsupport.modes.train import TRIAL_ENV, find_batch, precision
from pytest_neuronsupport.pipeline.isolate import (
    Executor,
    ForkServerExecutor,
    RunRequest,
    SubprocessExecutor,
    executor_for,
)
from pytest_neuronsupport.runners.lib.backend import compile_imports
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.runners.lib.train import COMPILE_IMPORTS, Float64Kept, out_of_memory
from pytest_neuronsupport.views.train import train_report, train_tables
from tests.sweeping import Sweep, SweepRunner

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
    assert find_batch(lambda batch: True, max_batch=1).trials == [(1, True)]


def test_find_batch_from_a_guess_gallops_then_bisects() -> None:
    near = find_batch(lambda batch: batch <= 21, max_batch=256, start=21)
    assert (near.batch, near.failed) == (21, 22) and near.trials == [(21, True), (22, False)]
    above = find_batch(lambda batch: batch <= 15, max_batch=256, start=21)
    assert (above.batch, above.failed) == (15, 16)
    assert [b for b, _ in above.trials] == [21, 20, 18, 14, 16, 15]
    below = find_batch(lambda batch: batch <= 30, max_batch=256, start=21)
    assert (below.batch, below.failed) == (30, 31)
    assert [b for b, _ in below.trials] == [21, 22, 24, 28, 36, 32, 30, 31]
    capped = find_batch(lambda batch: True, max_batch=16, start=21)
    assert (capped.batch, capped.capped, capped.trials) == (16, True, [(16, True)])
    none = find_batch(lambda batch: False, max_batch=256, start=5)
    assert (none.batch, none.failed, [b for b, _ in none.trials]) == (0, 1, [5, 4, 2, 1])


@pytest.mark.parametrize("max_batch", [1, 2, 7, 64, 256])
def test_find_batch_finds_the_same_batch_from_any_guess(max_batch: int) -> None:
    """Wherever the search starts, it ends where doubling from 1 ends (for a batch that fits
    up to some size and not beyond): the largest batch that fits, and the one above failed;
    no batch is tried twice."""
    for largest in (0, 1, 2, 3, 5, 21, 63, 64, 65, 300):
        fits = largest.__ge__  # fits(batch): batch <= largest
        plain = find_batch(fits, max_batch)
        assert (plain.batch, plain.capped) == (min(largest, max_batch), largest >= max_batch)
        for start in (1, 2, 3, 4, 7, 20, 21, 22, 64, 100, 256, 400):
            found = find_batch(fits, max_batch, start)
            assert (found.batch, found.failed) == (plain.batch, plain.failed), start
            tried = [batch for batch, _ in found.trials]
            assert len(tried) == len(set(tried)) and max(tried) <= max_batch


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
    # dynamo wraps what it meets while tracing: the MemoryError is the cause
    try:
        try:
            raise MemoryError
        except MemoryError as exc:
            raise RuntimeError("InternalTorchDynamoError") from exc
    except RuntimeError as wrapped:
        assert out_of_memory(wrapped)
    assert out_of_memory(RuntimeError("making fake tensor call: got MemoryError()"))
    assert not out_of_memory(RuntimeError("could not create a primitive"))  # told apart by a rerun
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


def test_the_float64_reference_step_keeps_the_models_casts_to_float32_in_float64() -> None:
    """transformers' losses upcast the logits with ``.float()`` (and norms cast with
    ``.to(torch.float32)``): in float64 that rounds the reference to float32."""
    import torch
    import torch.nn.functional as F

    logits = torch.randn(8, 50, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 50, (8,))
    with Float64Kept():
        casts = [logits.float(), logits.to(torch.float32), logits.to("cpu", torch.float32)]
        casts += [logits.to(dtype=torch.float32), logits.type(torch.float32)]
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()  # type: ignore[no-untyped-call]
        other = torch.ones(3, dtype=torch.float32).to(torch.float64)  # not a cast down: as is
    assert logits.grad is not None
    assert {t.dtype for t in [*casts, loss, logits.grad]} == {torch.float64}
    assert other.dtype == torch.float64
    exact = F.cross_entropy(logits.detach(), labels)
    assert loss.item() == exact.item() != F.cross_entropy(logits.detach().float(), labels).item()
    assert logits.float().dtype == torch.float32  # outside the mode, torch's own behaviour


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
    (entry,) = train_tables(tmp_path)  # what the page shows: the same cells
    assert entry.pair == PAIR.removesuffix(".parquet").replace("/", " / ")
    assert entry.grid.lines() == lines[1:4]
    assert entry.grid.cells[0][-3:] == ("-", "-", "PASS")  # peak memory native, compiled


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


def _rerun(script: Path, executor: Executor) -> dict[str, Any]:
    """A trial's script run again, isolated as the sweep ran it (one pinned CPU): forked from
    another fork server than the sweep's, or ``python3 train.py`` in a fresh interpreter."""
    outcome = executor.run(
        RunRequest(
            script=script,
            cwd=script.parent,
            # the sweep's environment for a one-core CPU run: threads map address space
            env={**TRIAL_ENV, **os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
            verdict_path=script.parent / "rerun.json",
            log_path=script.parent / "rerun.log",
            timeout_s=300,
            cpus=[sorted(os.sched_getaffinity(0))[0]],
        )
    )
    assert outcome.verdict is not None, outcome.log_tail
    return outcome.verdict


CAP_GB = 0.15
#: Tokens a sample: at 512 (the seed's long column) a batch is two to four samples under the
#: cap, so each search is a few cheap trials, and one sample more is a quarter more memory.
SEQ_LEN = 512


SEARCHED = ["zoo:gpt2", "zoo:bert-mlm"]


@pytest.fixture(scope="session")
def searched(sweep_folder: Callable[..., SweepRunner]) -> Sweep:
    """One training sweep of a decoder and an encoder, under the cap."""
    return sweep_folder("train-search").run(
        *({"id": model, "mode": "train", "seq_len": SEQ_LEN} for model in SEARCHED),
        args=["--neuron-core-memory", str(CAP_GB)],
    )


@pytest.mark.slow
@pytest.mark.xdist_group("train-search")
@pytest.mark.parametrize("model", SEARCHED)
def test_training_sweep_finds_the_largest_batch_that_fits(searched: Sweep, model: str) -> None:
    """A decoder, an encoder: each batch found trains under the cap and the next one searched
    runs out of memory, rerun from another fork server (and the decoder's eager ones in a
    fresh interpreter too: the cap counts the same memory wherever the trial runs)."""
    done = searched
    assert done.result.ret == 0, done.result.stdout.str()
    assert done.runner is not None
    results = done.runner.results
    row = _trained(results, "aot_eager", model)
    assert row["result"] == "PASS" and row["memory_cap_gb"] == CAP_GB, row["notes"]
    assert row["param_error"] is not None and row["param_error"] <= row["tolerance"]
    assert "`python3 train.py` prints the verdict" in row["run_py"].splitlines()[1]
    details = json.loads(row["check"])
    assert details["search_compiled"]["start"] == max(1, row["batch_native"])
    [trials] = results.glob(f"runs/*/*/{model.replace(':', '--')}/train-{SEQ_LEN}")
    # a fork server as the sweep makes one for its backend (aot_eager: no inductor preloaded)
    forked, fresh = executor_for("fork", "aot_eager"), SubprocessExecutor()
    for mode in ("native", "compiled"):
        batch, failed = row[f"batch_{mode}"], details[f"search_{mode}"]["failed_at"]
        assert batch >= 1 and not row[f"batch_{mode}_capped"] and failed == batch + 1
        # reruns: the decoder's eager trials forked and fresh, the encoder's forked; the
        # decoder's compiled trials are not rerun (~10 s each for a graph break in
        # transformers' loss): the encoder's compiled reruns show the same property
        decoder = model == SEARCHED[0]
        executors: dict[str, tuple[Executor, ...]] = (
            {"native": (forked, fresh), "compiled": ()}
            if decoder
            else {"native": (forked,), "compiled": (forked,)}
        )
        for executor in executors[mode]:
            fits = _rerun(trials / f"{mode}-{batch}" / "train.py", executor)
            assert fits["fits"] is True, fits
            fails = _rerun(trials / f"{mode}-{failed}" / "train.py", executor)
            assert fails["fits"] is False and fails["out_of_memory"], fails


@pytest.mark.slow
@pytest.mark.xdist_group("train-search")
def test_twice_the_cap_does_not_find_a_smaller_batch(
    searched: Sweep, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An unchanged test is not run again; under twice the cap (a test of its own: the cap is
    in ``train.py``) neither search finds a smaller batch. In a copy of the searches' folder,
    with their cache (so the same scripts); ``--neuron-train-max-batch`` keeps the second
    search to a few trials."""
    assert searched.runner is not None
    sweep = SweepRunner(
        tmp_path_factory.mktemp("train-twice"), searched.runner.cache, own_cache=False
    )
    shutil.copytree(searched.runner.results, sweep.results)
    model = {"id": "zoo:bert-mlm", "mode": "train", "seq_len": SEQ_LEN}
    small, args = CAP_GB, ["--neuron-train-max-batch", "4"]
    once = _trained(sweep.results, "aot_eager", "zoo:bert-mlm")
    assert once["result"] == "PASS" and once["batch_native"] >= 1, once["notes"]

    same = sweep.run(model, args=["--neuron-core-memory", str(small)])
    assert same.result.ret == 0 and "1 unchanged (not run again)" in same.result.stdout.str()

    twice = sweep.run(model, args=["--neuron-core-memory", str(2 * small), *args])
    assert twice.result.ret == 0, twice.result.stdout.str()
    again = _trained(sweep.results, "aot_eager", "zoo:bert-mlm")
    assert again["memory_cap_gb"] == 2 * small
    for mode in ("native", "compiled"):
        assert again[f"batch_{mode}"] >= once[f"batch_{mode}"], (once["check"], again["check"])


def _trained(results: Path, backend: str, model: str = "zoo:gpt2") -> dict[str, Any]:
    """The training row of ``model`` a sweep with ``backend`` wrote."""
    rows = read_dataset(results, table=TRAIN).to_pylist()
    [row] = [r for r in rows if r["backend"] == backend and r["model_id"] == model]
    return dict(row)


#: One sample, at the default sequence length: each backend's test is its check and two trials.
SMALL = ["--neuron-core-memory", str(CAP_GB), "--neuron-train-max-batch", "1"]
GPT2 = {"id": "zoo:gpt2", "mode": "train"}


@pytest.mark.slow
def test_a_backend_that_breaks_backward_fails_train(sweep: SweepRunner) -> None:
    broken = "backends_for_tests:backward_breaking_backend_for_tests"
    assert sweep.run(GPT2, backend=broken, args=SMALL).result.ret == 1
    row = _trained(sweep.results, broken)
    assert row["result"] == "FAIL(train)", row
    assert "backward graph failed" in row["error"] and row["batch_native"] is None


@pytest.mark.slow
def test_a_backend_that_perturbs_gradients_fails_output(sweep: SweepRunner) -> None:
    perturbing = "backends_for_tests:gradient_perturbing_backend_for_tests"
    assert sweep.run(GPT2, backend=perturbing, args=SMALL).result.ret == 1
    row = _trained(sweep.results, perturbing)
    assert row["result"] == "FAIL(output)", row
    assert row["loss"] == pytest.approx(row["loss_ref"])  # forward is right, gradients are not
    # each backward graph scales by 1.01 (gradients through two graphs, twice): far beyond the
    # noise of the eager fp32 step, which is what the tolerance is made of
    details = json.loads(row["check"])
    tolerance = details["tolerances"]["grad_norm"]
    assert tolerance == pytest.approx(3 * details["eager_errors"]["grad_norm"] + 16 * 2.0**-23)
    assert details["errors"]["grad_norm"] > 10 * tolerance
    assert row["grad_norm"] / row["grad_norm_ref"] - 1 > 10 * tolerance
    assert "grad_norm" in row["notes"]
    assert row["batch_native"] == 1 and row["batch_compiled_capped"] is True


@pytest.mark.slow
def test_an_error_under_the_cap_only_is_out_of_memory(sweep: SweepRunner) -> None:
    """An error that does not say "memory", under the cap only: the trial runs the steps again
    without the cap, they pass, so the batch did not fit (not FAIL(train))."""
    capped = "backends_for_tests:failing_under_a_memory_cap_backend_for_tests"
    assert sweep.run(GPT2, backend=capped, args=SMALL).result.ret == 0
    row = _trained(sweep.results, capped)
    assert row["result"] == "PASS" and row["batch_native"] == 1, row
    assert row["batch_compiled"] == 0 and not row["batch_compiled_capped"]
    out_of_memory = json.loads(row["check"])["search_compiled"]["out_of_memory"]
    assert "(under the cap only: the same steps pass without it)" in out_of_memory


def test_compiled_trials_import_before_the_cap_what_the_fork_server_preloads() -> None:
    """A compiled trial in a fresh interpreter imports, before its cap, what a forked one
    inherits (else ``python3 train.py`` counts those imports under the cap and a batch that
    fit in the sweep does not fit in the rerun)."""
    for backend in ("inductor", "aot_eager", "backends_for_tests:one_ulp_backend_for_tests"):
        server = executor_for("fork", backend)
        assert isinstance(server, ForkServerExecutor)
        preloaded = {m for m in server.preload if m.startswith(("torch._", "transformers."))}
        preloaded -= {"torch._dynamo", "transformers.modeling_utils"}  # imported by the script
        preloaded -= {n for n in preloaded if n.startswith("transformers.models.auto")}
        assert preloaded <= {*compile_imports(backend), *COMPILE_IMPORTS}
        assert ("torch._inductor.compile_fx" in preloaded) == (backend != "aot_eager")
