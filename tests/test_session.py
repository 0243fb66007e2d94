"""The sweep session without a sweep: hooks that only hand work on, rows kept per table (never
one table's rows in another's counts), and the summary. What a model's test is in pytest (its
outcome, its report, junit) is tests/test_outcomes.py's."""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import plugin, report, xdist
from pytest_neuronsupport.backends import compile_turned_off
from pytest_neuronsupport.dataset.stores import (
    FolderResults,
    ObjectStoreResults,
    local_copy,
    open_store,
)
from pytest_neuronsupport.display import ProgressDisplay
from pytest_neuronsupport.modes import ModeOutcome
from pytest_neuronsupport.outcomes import JunitSkips
from pytest_neuronsupport.session import SweepSession

#: A hook hands its work to a plain module: at most this many lines below its docstring.
HOOK_LINES = 5


def hooks_of(owner: object) -> list[tuple[str, Any]]:
    members = inspect.getmembers(owner, inspect.isfunction)
    return [(name, function) for name, function in members if name.startswith("pytest_")]


@pytest.mark.parametrize(
    "owner",
    [plugin, SweepSession, ProgressDisplay, xdist.XdistHooks, JunitSkips],
    ids=["plugin", "session", "display", "xdist", "junit"],
)
def test_every_hook_is_a_few_lines_that_hand_the_work_on(owner: object) -> None:
    found = hooks_of(owner)
    assert found
    for name, function in found:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            assert body[0].value.value, f"{name}: empty docstring"
            body = body[1:]
        else:
            pytest.fail(f"{owner}.{name} has no docstring")
        lines = body[-1].end_lineno - body[0].lineno + 1
        assert lines <= HOOK_LINES, f"{name} is {lines} lines"


def configured(pytester: pytest.Pytester, *args: str) -> SweepSession:
    pytester.makefile(".toml", models='[[model]]\nid = "zoo:bert"\n')
    config = pytester.parseconfigure(
        "--neuron-sweep", "--neuron-models", "models.toml", "--neuron-backend", "eager", *args
    )
    found = config.pluginmanager.get_plugin("neuronsupport-session")
    assert isinstance(found, SweepSession)
    return found


def row(model_id: str, result: str = "PASS", **fields: Any) -> dict[str, Any]:
    return {"model_id": model_id, "result": result, "tested_at": None, **fields}


def test_rows_are_kept_per_table_and_counted_apart(pytester: pytest.Pytester) -> None:
    sweep = configured(pytester)
    sweep.record(
        [
            ModeOutcome(
                "support", "a", [row("a", run_py="..."), row("b", "FAIL(gen)", notes="boom")]
            ),
            ModeOutcome("perf", "a", [row("a", configuration="b1")]),
        ]
    )
    sweep.record([ModeOutcome("support", "c", unchanged=True, reason="unchanged since ...")])
    sweep.record([ModeOutcome("train", "d", reason="--neuron-limit 1 reached")])  # ran nothing
    assert [r["model_id"] for r in sweep.rows["support"]] == ["a", "b"]
    assert "run_py" not in sweep.rows["support"][0]  # the journal has it; the session need not
    assert [r["model_id"] for r in sweep.rows["perf"]] == ["a"]
    assert sweep.unchanged == {"support": ["c"]} and "train" not in sweep.rows
    facts = sweep.summary_facts()
    assert [t.name for t in facts.tables] == ["support", "perf"]
    lines = [line for table in facts.tables for line in report.table_lines(table)]
    assert lines[0] == "1 PASS, 1 FAIL(gen); 1 unchanged (not run again)"
    assert lines[1].startswith("FAIL(gen)") and "boom" in lines[1]
    assert lines[2].startswith("dataset: ") and lines[2].endswith(".parquet")
    assert lines[3] == "perf: 1 PASS" and lines[4].startswith("perf: ")


def test_the_results_store_follows_the_uri(tmp_path: Path) -> None:
    folder = open_store(tmp_path / "results", tmp_path / "cache")
    assert isinstance(folder, FolderResults) and folder.folder == tmp_path / "results"
    where, _ = folder.write_once("shards/k.json", "first")
    assert folder.write_once("shards/k.json", "second") == (where, "first")
    assert where == str(tmp_path / "results" / "shards" / "k.json")
    shared = open_store("s3://bucket/prefix", tmp_path / "cache")
    copy = local_copy(tmp_path / "cache", "s3://bucket/prefix")
    assert isinstance(shared, ObjectStoreResults) and shared.folder == copy
    assert copy.parent == tmp_path / "cache" / "shared"
    assert shared.where("shards") == "s3://bucket/prefix/shards"


def test_a_results_location_that_cannot_be_used_is_a_usage_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".toml", models='[[model]]\nid = "zoo:bert"\n')
    (pytester.path / "afile").write_text("not a folder")
    result = pytester.runpytest_subprocess(
        "--neuron-sweep", "--neuron-models", "models.toml", "--neuron-results", "afile"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--neuron-results *afile is not a folder*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


@pytest.mark.parametrize("option", ["--neuron-cache", "--neuron-leases"])
def test_a_cache_or_leases_folder_that_cannot_be_used_is_a_usage_error(
    pytester: pytest.Pytester, option: str
) -> None:
    """Not a row a model, each FAIL(other) or FAIL(load) for the folder the user named."""
    pytester.makefile(".toml", models='[[model]]\nid = "zoo:bert"\n')
    (pytester.path / "afile").write_text("not a folder")
    result = pytester.runpytest("--neuron-sweep", "--neuron-models", "models.toml", option, "afile")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.errlines if line] == [
        f"ERROR: neuronsupport: {option} {(pytester.path / 'afile').resolve()} is not a folder"
    ]
    assert not (pytester.path / "results" / "data").exists()


@pytest.mark.parametrize(
    ("judge", "problem"),
    [
        ("no such/judge@main", "'no such/judge' is not a valid Hub repo id: *"),
        ("zoo:nope", "unknown zoo model 'nope' (known: *"),
    ],
)
def test_a_judge_that_names_no_model_is_a_usage_error(
    pytester: pytest.Pytester, judge: str, problem: str
) -> None:
    pytester.makefile(".toml", models='[[model]]\nid = "zoo:llama"\n')
    result = pytester.runpytest(
        "--neuron-sweep", "--neuron-models", "models.toml", "--neuron-judge", judge
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: neuronsupport: --neuron-judge {judge!r}: {problem}"])


@pytest.mark.parametrize("variable", ["TORCHDYNAMO_DISABLE", "TORCH_COMPILE_DISABLE"])
def test_a_sweep_with_torch_compile_turned_off_is_refused(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """Every model would PASS uncompiled (torch.compile runs the model as it is): refused."""
    pytester.makefile(".toml", models='[[model]]\nid = "zoo:bert"\n')
    monkeypatch.setenv(variable, "1")
    result = pytester.runpytest_subprocess("--neuron-sweep", "--neuron-models", "models.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--neuron-backend: {variable}=1 turns torch.compile off*"])
    assert not (pytester.path / "results").exists()
    monkeypatch.setenv(variable, "0")  # only 1 turns it off, as torch reads it
    assert compile_turned_off(os.environ) is None


def test_an_unchecked_pass_is_counted_apart_with_why(pytester: pytest.Pytester) -> None:
    sweep = configured(pytester, "--neuron-require-check")
    assert sweep.settings.require_check
    judge = "the judge j could not run: OSError('offline')"
    check = f'{{"cpu_comparison": "the run used 2 cores", "judge": "{judge}"}}'
    unchecked = row("b", checked_by="none", check=check)
    sweep.record([ModeOutcome("support", "a", [row("a", checked_by="cpu"), unchecked])])
    sweep.record([ModeOutcome("support", "c", [row("c", "FAIL(gen)")])])
    lines = report.table_lines(sweep.summary_facts().tables[0])
    assert lines[0] == "1 PASS, 1 PASS unchecked: judge unavailable, 1 FAIL(gen)"
    assert lines[2] == "PASS unchecked b  judge unavailable"
    assert [r["model_id"] for r in report.unchecked_rows(sweep.covered())] == ["b"]
    alone = [row("d", checked_by="none"), row("e", checked_by="none", check=check)]
    assert report.counts_line(alone) == "2 PASS unchecked: 1 no output check / 1 judge unavailable"
    assert report.require_check_line(["b"]).endswith("the session fails: b")


def test_a_pass_that_compiled_nothing_is_counted_apart_and_cpu_operators_are_said() -> None:
    """On any device: a PASS whose run compiled no graph is not a compiler PASS (unchecked or
    not); a PASS that ran operators on the CPU says how many, and which."""
    from pytest_neuronsupport.pipeline.classify import result_text

    on_cpu = row("a", checked_by="cpu", compiled=True, cpu_ops=["aten::argmax", "aten::cumsum"])
    rows = [
        on_cpu,
        row("b", checked_by="cpu", compiled=False),
        row("c", checked_by="none", compiled=False),  # and unchecked: counted once, here
        row("d", "FAIL(gen)", compiled=False),
        row("e", checked_by="cpu", compiled=True, cpu_ops=[]),  # none on the CPU: a plain PASS
    ]
    assert report.counts_line(rows) == (
        "2 PASS (1 with operators on the CPU), 2 PASS compiled nothing, 1 FAIL(gen)"
    )
    assert report.unchecked_lines(rows) == [
        "PASS compiled nothing b  no graph was compiled: the model ran as it is",
        "PASS compiled nothing c  no graph was compiled: the model ran as it is",
        "PASS           a  2 operators on the CPU: aten::argmax, aten::cumsum",
    ]
    said = [result_text(r) for r in rows]
    assert said == [
        "PASS, 2 operators on the CPU",
        "PASS compiled nothing",
        "PASS compiled nothing",
        "FAIL(gen)",
        "PASS",
    ]
