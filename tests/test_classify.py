"""``checked_by``: what a support row's output was held against, decided in classify.py from
the verdict's ``cpu_match``, ``english`` and ``check``, over the shapes the runners write."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_neuronsupport.dataset.support import COLUMN_DOCS, COLUMNS, SUPPORT
from pytest_neuronsupport.dataset.table import validate_row
from pytest_neuronsupport.pipeline import classify
from pytest_neuronsupport.runners.lib.protocol import Result

TWO_CORES = {"rule": "english", "cpu_comparison": "the run used 2 cores"}
JUDGE_FAILED = "the judge HuggingFaceTB/SmolLM2-135M-Instruct could not run: OSError('offline')"


def fields_of(verdict: dict[str, Any]) -> dict[str, Any]:
    """The row fields classify makes of a run's verdict, ``checked_by`` included."""
    return classify.with_checked_by(classify.verdict_fields(verdict))


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        ({"result": "PASS", "cpu_match": "Y", "check": {"rule": "tokens"}}, "cpu"),
        ({"result": "PASS", "cpu_match": "Y (CPU bf16)"}, "cpu"),
        ({"result": "PASS", "cpu_match": "~ near-tie at token 3: margin 1e-6 <= 2e-6"}, "near-tie"),
        ({"result": "FAIL(output)", "cpu_match": "N at token 3: margin 2 > 1e-6"}, "cpu"),
        (
            {"result": "PASS", "english": "Y", "check": {**TWO_CORES, "judge": {"english": "Y"}}},
            "judge",
        ),
        ({"result": "FAIL(output)", "english": "N", "check": TWO_CORES}, "judge"),
    ],
)
def test_a_compared_output_names_what_it_was_compared_with(
    verdict: dict[str, Any], expected: str
) -> None:
    fields = fields_of({"notes": "Hello", **verdict})
    assert fields["checked_by"] == expected
    assert fields["notes"] == "Hello"


@pytest.mark.parametrize(
    ("check", "kind", "said"),
    [
        ({**TWO_CORES, "judge": JUDGE_FAILED}, "judge unavailable", "the run used 2 cores"),
        (
            {**TWO_CORES, "judge": "none configured: the output check could not run"},
            "no judge",
            "no CPU comparison (the run used 2 cores), no judge",
        ),
        (
            {
                "rule": "english",
                "cpu_comparison": "the CPU run failed: RuntimeError('x')",
                "judge": JUDGE_FAILED,
            },
            "judge unavailable",
            "the CPU run failed",
        ),
        (
            {"rule": "mask", "skipped": "CPU run failed: RuntimeError('x')"},
            "CPU reference failed",
            "CPU run failed: RuntimeError('x')",
        ),
        (
            {"rule": "mask", "skipped": "CPU reference not reproducible"},
            "CPU reference unusable",
            "CPU reference not reproducible",
        ),
        (None, "no output check", "the run compared no output"),
    ],
)
def test_a_pass_that_compared_nothing_is_none_and_says_why(
    check: dict[str, Any] | None, kind: str, said: str
) -> None:
    fields = fields_of({"result": "PASS", "notes": "Hello world", "check": check})
    assert fields["checked_by"] == "none"
    assert fields["notes"].startswith("Hello world | unchecked: ")
    assert said in fields["notes"]
    if check is not None and check.get("judge") == JUDGE_FAILED:
        assert JUDGE_FAILED in fields["notes"]
    row = validate_row({"model_id": "zoo:m", **fields}, SUPPORT)
    assert classify.unchecked_kind(row) == kind


@pytest.mark.parametrize("result", [r for r in Result if r not in classify.CHECKED_RESULTS])
def test_other_results_have_no_checked_by(result: Result) -> None:
    fields = fields_of({"result": result, "notes": "boom", "error": "boom"})
    assert fields["checked_by"] is None
    assert fields["notes"] == "boom"
    assert classify.unchecked_kind(fields) is None


def test_an_unchecked_pass_without_notes_gets_the_reason_alone() -> None:
    fields = fields_of({"result": "PASS", "check": {**TWO_CORES, "judge": JUDGE_FAILED}})
    assert fields["notes"].startswith("unchecked: no CPU comparison (the run used 2 cores), ")


def test_a_hook_that_replaces_the_result_moves_checked_by_with_it() -> None:
    row = fields_of({"result": "FAIL(gen)", "notes": "boom", "error": "boom"})
    classify.overridden(row, "PASS", "a hook")
    assert row["checked_by"] == "none"
    assert json.loads(row["check"])["overridden"] == {"result": "FAIL(gen)", "by": "a hook"}
    assert row["notes"] == "boom | unchecked: the run compared no output"
    classify.overridden(row, "FAIL(other)", "a hook")
    assert row["checked_by"] is None


def test_the_column_is_appended_and_documented() -> None:
    at = COLUMNS.index("checked_by")  # appended, in turn (then the phase times)
    assert COLUMNS[at : at + 3] == ("checked_by", "architecture", "model_type")
    assert "checked_by" in COLUMN_DOCS


def test_the_backends_own_error_comes_first_where_dynamo_wrapped_it() -> None:
    """A real failure of a backend under torch.compile: its row keeps the whole text, which
    starts with dynamo's wrapper; what people read (pytest's text, lookup, diff, the page)
    starts with the backend's own exception."""
    import torch

    from pytest_neuronsupport.report import failure_text
    from pytest_neuronsupport.runners.lib.graphs import GraphCount
    from pytest_neuronsupport.runners.lib.models import RunFailure, step
    from tests.backends_for_tests import fails_on_linear_backend_for_tests

    linear = torch.nn.Linear(2, 2)
    with pytest.raises(RunFailure) as raised, step("gen", Result.FAIL_GEN):
        torch.compile(linear, backend=GraphCount(fails_on_linear_backend_for_tests))(torch.ones(2))
    error = raised.value.error
    assert error.startswith("BackendCompilerFailed: backend='fails_on_linear_backend_for_tests'")
    own = classify.own_error(error)
    assert own is not None and own.endswith("\n" + error)  # the whole text after it
    assert own.split("\n")[0] == (
        "NotImplementedError: test backend: no lowering for linear (through "
        "BackendCompilerFailed backend='fails_on_linear_backend_for_tests')"
    )
    row = {"model_id": "m", "result": Result.FAIL_GEN, "error": error}
    assert failure_text(row, None).startswith("FAIL(gen) m: NotImplementedError: test backend")
    ranked = classify.own_error(f"rank 1 of 2: {error}")  # a several-core run's rank said it
    assert ranked is not None and ranked.split("\n")[0] == f"rank 1 of 2: {own.split(chr(10))[0]}"
    assert classify.own_error("ValueError: plain") == "ValueError: plain"  # nothing wrapped
    assert classify.own_error(None) is None
