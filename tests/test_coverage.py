"""``neuronsupport coverage``: the support matrix by architecture, on rows written through a
journal and a merge (tests/results_for_tests.py), read back from a folder and from a Hub
dataset repo; and the rows of the tiny list's sweep, which name their architecture."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import cli, zoo
from pytest_neuronsupport.minihub import MiniHub
from pytest_neuronsupport.views.coverage import HEAD, NONE, TAIL, coverage, coverage_report
from pytest_neuronsupport.views.failures import group_failures
from pytest_neuronsupport.views.lookup import latest_rows
from tests.results_for_tests import pair_of, result_row, write_results
from tests.shared_sweeps import SUPPORT, TINY_IDS
from tests.sweeping import Sweep

pytest_plugins = ["pytest_neuronsupport.minihub"]

NEW = "inductor-2.13.0 / transformers-5.24.0"
OLD = "inductor-2.9.1 / transformers-5.23.0"
EAGER = "aot_eager-2.13.0 / transformers-5.24.0"
OLD_PAIR: dict[str, Any] = {"compiler_version": "2.9.1", "library_version": "5.23.0"}
LLAMA: dict[str, Any] = {"architecture": "LlamaForCausalLM", "model_type": "llama"}
BERT_MLM: dict[str, Any] = {"architecture": "BertForMaskedLM", "model_type": "bert"}
BERT_QA: dict[str, Any] = {"architecture": "BertForQuestionAnswering", "model_type": "bert"}
T5: dict[str, Any] = {"architecture": "T5ForConditionalGeneration", "model_type": "t5"}
CAUSE = (
    "NotImplementedError in torch._inductor.lowering:linear "
    "(through BackendCompilerFailed backend='inductor')"
)
LINEAR = "BackendCompilerFailed: backend='inductor' raised:\nNotImplementedError: no linear"


def rows() -> list[dict[str, Any]]:
    """Three pairs: the zoo's tiny models and Hub models of the same architectures."""
    return [
        # llama: the zoo's and two Hub models in the newest pair; one of them in the old pair
        result_row("zoo:llama", **LLAMA, graph_breaks=0),
        result_row("meta/Llama-3-8B", **LLAMA, neuron_cores=2, graph_breaks=0),
        result_row("org/tiny-llama", **LLAMA, checked_by="none", graph_breaks=0),
        result_row(
            "meta/Llama-3-8B",
            "FAIL(gen)",
            **LLAMA,
            **OLD_PAIR,
            neuron_cores=2,
            error=LINEAR,
            error_site="torch._inductor.lowering:linear",
            graph_breaks=1,
        ),
        # two heads of one model type are two lines
        result_row("zoo:bert-mlm", **BERT_MLM, runner="encoder", task="fill-mask"),
        result_row(
            "zoo:bert-qa",
            "FAIL(output)",
            **BERT_QA,
            runner="encoder",
            cpu_match="N 3/4",
            error=None,
        ),
        result_row("zoo:t5", **T5, runner="seq2seq", compiler="aot_eager"),
        # excluded from its config, which names the class: still on the matrix
        result_row(
            "org/remote-llama",
            "EXCLUDED",
            **LLAMA,
            exclusion="trust-remote-code",
            runner=None,
            neuron_cores=None,
            **OLD_PAIR,
        ),
        # a config without architectures: its model type alone
        result_row("org/bare-gpt2", model_type="gpt2", runner="dense"),
        # recorded before the columns (or its config never read): on no line
        result_row("org/before", "FAIL(load)"),
    ]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_results(tmp_path_factory.mktemp("results"), rows())


def by_line(
    header: tuple[str, ...], cells: tuple[tuple[str, ...], ...]
) -> dict[str, dict[str, str]]:
    """``model type / head class`` → its cells by column name."""
    return {f"{c[0]} / {c[1]}": dict(zip(header, c, strict=True)) for c in cells}


def test_one_line_per_model_type_and_head_class_pairs_in_version_order(results: Path) -> None:
    matrix = coverage(results)
    assert matrix.pairs == (EAGER, OLD, NEW)  # compiler by compiler, oldest version first
    assert matrix.grid.header == (*HEAD, EAGER, OLD, NEW, *TAIL)
    lines = [(c[0], c[1]) for c in matrix.grid.cells]
    assert lines == [
        ("bert", "BertForMaskedLM"),
        ("bert", "BertForQuestionAnswering"),
        ("gpt2", NONE),
        ("llama", "LlamaForCausalLM"),
        ("t5", "T5ForConditionalGeneration"),
    ]
    shown = by_line(matrix.grid.header, matrix.grid.cells)
    llama = shown["llama / LlamaForCausalLM"]
    # several models in a pair: how many came to each result, an unchecked PASS apart
    assert llama[NEW] == "2 PASS, 1 PASS unchecked"
    assert llama[OLD] == "1 FAIL(gen), 1 EXCLUDED"
    assert llama[EAGER] == NONE  # no model of the line in that pair
    assert (llama["runner"], llama["cores"], llama["graph breaks"]) == ("dense", "1, 2", "0, 1")
    assert llama["models"] == "meta/Llama-3-8B, org/remote-llama, org/tiny-llama, zoo:llama"
    qa = shown["bert / BertForQuestionAnswering"]
    assert (qa[NEW], qa["runner"], qa["graph breaks"]) == ("FAIL(output)", "encoder", NONE)
    t5 = shown["t5 / T5ForConditionalGeneration"]
    assert (t5[EAGER], t5[NEW], t5["failure"], t5["models"]) == ("PASS", NONE, NONE, "zoo:t5")
    assert shown["gpt2 / -"]["models"] == "org/bare-gpt2"
    assert matrix.unplaced == ("org/before",)
    assert matrix.note is not None and matrix.note.endswith(": org/before")


def test_the_failure_is_the_group_failures_puts_it_in(results: Path) -> None:
    grid = coverage(results).grid
    shown = by_line(grid.header, grid.cells)
    expected = {}
    for row in rows():
        pair = pair_of(row)
        for group in group_failures(latest_rows(results, pair).values(), results, pair):
            expected.update({m.model_id: group.cause.text for m in group.models})
    llama = shown["llama / LlamaForCausalLM"]["failure"]
    assert llama == expected["meta/Llama-3-8B"]
    assert llama == CAUSE
    assert shown["bert / BertForQuestionAnswering"]["failure"] == expected["zoo:bert-qa"]
    assert expected["zoo:bert-qa"].startswith("wrong output")
    assert shown["bert / BertForMaskedLM"]["failure"] == NONE


def test_pairs_named_are_the_only_columns(results: Path) -> None:
    matrix = coverage(
        results, ["data/inductor-2.9.1/transformers-5.23.0.parquet", OLD.replace(" / ", "/")]
    )
    assert matrix.pairs == (OLD,)  # named twice, shown once
    assert [(c[0], c[1], c[2]) for c in matrix.grid.cells] == [
        ("llama", "LlamaForCausalLM", "1 FAIL(gen), 1 EXCLUDED")
    ]
    assert matrix.unplaced == ()
    both = coverage(results, [NEW.replace(" / ", "/"), EAGER.replace(" / ", "/")])
    assert both.pairs == (EAGER, NEW)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


def test_the_command_prints_the_matrix(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run("coverage", "--results", str(results))
    assert code == 0
    assert out.splitlines() == coverage_report(results)
    header, *lines = out.splitlines()
    assert header.split("  ")[0] == "model type" and header.rstrip().endswith("models")
    assert lines[-1].startswith("1 model on no line:") and "org/before" in lines[-1]
    code, out = run(
        "coverage", "--results", str(results), "--pair", "inductor-2.9.1/transformers-5.23.0"
    )
    header, line = out.splitlines()
    assert header.split() == [
        *"model type head class".split(),
        OLD.split()[0],
        "/",
        OLD.split()[2],
        "runner",
        "cores",
        "graph",
        "breaks",
        "failure",
        "models",
    ]
    assert re.split(r"  +", line) == [
        "llama",
        "LlamaForCausalLM",
        "1 FAIL(gen), 1 EXCLUDED",
        "dense",
        "2",
        "1",
        f"{CAUSE}",
        "meta/Llama-3-8B, org/remote-llama",
    ]
    assert run("coverage", "--results", str(results), "--pair", "inductor-9.9") == (2, "")
    assert "no pair 'inductor-9.9'" in capsys.readouterr().err
    assert run("coverage", "--results", str(results.parent / "nowhere"))[0] == 2


def test_rows_without_an_architecture_make_an_empty_matrix(tmp_path: Path) -> None:
    results = write_results(tmp_path, [result_row("org/a"), result_row("org/b", "FAIL(gen)")])
    code, out = run("coverage", "--results", str(results))
    assert code == 1
    first, note = out.splitlines()
    assert first == f"no row names its architecture in {results / 'data'} ({NEW})"
    assert note.startswith("2 models on no line: their rows") and note.endswith("org/a, org/b")


def test_a_hub_dataset_reads_as_a_folder(
    minihub: MiniHub, monkeypatch: pytest.MonkeyPatch, results: Path
) -> None:
    minihub.add_user("alice", "hf_alice", orgs=("team",))
    monkeypatch.setenv("HF_TOKEN", "hf_alice")
    code, out = run("push", "--repo", "team/support", "--results", str(results))
    assert code == 0, out
    code, out = run("coverage", "--results", "hf://datasets/team/support")
    assert code == 0 and out.splitlines() == coverage_report(results)


@pytest.mark.slow
@SUPPORT
def test_the_tiny_sweeps_rows_name_their_architecture(tiny_sweep: Sweep, zoo_cache: Path) -> None:
    """A real sweep: every row names its checkpoint's class and model type, and each of the
    matrix's lines covers the zoo models of that class."""
    assert tiny_sweep.runner is not None
    expected = {}
    for model_id in TINY_IDS:
        folder = zoo.ensure_built(str(model_id).removeprefix("zoo:"), zoo_cache)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        expected[model_id] = (config["model_type"], config["architectures"][0])
    shown = {m: (r["model_type"], r["architecture"]) for m, r in tiny_sweep.rows.items()}
    assert shown == expected
    matrix = coverage(tiny_sweep.runner.results)
    assert matrix.unplaced == ()
    (pair,) = matrix.pairs
    covered = {}
    for cells in matrix.grid.cells:
        line = dict(zip(matrix.grid.header, cells, strict=True))
        assert line[pair].endswith("PASS") and line["failure"] == NONE, line
        for model_id in line["models"].split(", "):
            covered[model_id] = (line["model type"], line["head class"])
    assert covered == expected
    assert len(matrix.grid.cells) == len(set(expected.values()))
