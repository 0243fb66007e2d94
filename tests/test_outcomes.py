"""What a model's test is in pytest, decided in one module (:mod:`pytest_neuronsupport.outcomes`):
rows made by the real loop (an exclusion, a checkpoint that is not there, a dead worker's row)
in, pytest's outcome, the report's status and junit's properties out; the baseline's expected
failures; the sweep's exit status."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Literal

import pytest

from pytest_neuronsupport import baseline, devices, modes, outcomes, session
from pytest_neuronsupport.baseline import Baseline, Comparison, Expected, Kind
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.modes import ModeOutcome
from pytest_neuronsupport.modes.support import Support
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.settings import Settings
from pytest_neuronsupport.stack import installed_stack


@pytest.fixture
def cpu_sweep(tmp_path: Path) -> Sweep:
    """A sweep on the CPU whose rows are made by the real loop (nothing here runs a model)."""
    settings = Settings(
        lists=(),
        device=devices.resolve("cpu"),
        backend="aot_eager",
        dtype="float32",
        results=tmp_path / "results",
        cache=tmp_path / "cache",
        timeout_s=600,
        workdir=tmp_path,
        leases=tmp_path / "leases",
    )
    return Sweep(settings, Runners.builtin(), installed_stack(), sweep_id="test")


def support_outcome(sweep: Sweep, model_id: str, **fields: Any) -> ModeOutcome:
    """The support mode's outcome of a list entry, through the one loop every mode goes through."""
    spec = ModelSpec(id=model_id, source=Path("models.toml"), line=1, **fields)
    return modes.test(Support(), sweep, spec)


def call_report(
    model_id: str, outcome: Literal["passed", "failed", "skipped"], longrepr: Any = None
) -> pytest.TestReport:
    nodeid = f"models.toml::{model_id}"
    return pytest.TestReport(nodeid, ("models.toml", 0, model_id), {}, outcome, longrepr, "call")


def row(model_id: str, result: str = "PASS", **fields: Any) -> dict[str, Any]:
    return {"model_id": model_id, "result": result, "tested_at": None, **fields}


def test_an_excluded_row_skips_the_test_named_by_its_model(cpu_sweep: Sweep) -> None:
    excluded = support_outcome(cpu_sweep, "org/q", exclusion="quantized", notes="4-bit")
    decided = outcomes.pytest_outcome([excluded])
    assert (decided.outcome, decided.text) == ("skipped", "EXCLUDED (quantized): 4-bit")
    assert decided.properties[:2] == [("model_id", "org/q"), ("result", "EXCLUDED")]
    assert ("exclusion", "quantized") in decided.properties
    rep = call_report("org/q", "skipped", ("/src/collect.py", 33, f"Skipped: {decided.text}"))
    outcomes.attach(rep, [excluded], [])
    named: Any = rep.longrepr
    assert named == ("models.toml::org/q", None, f"Skipped: {decided.text}")  # at no line
    assert outcomes.skip_reason(rep) == decided.text
    assert outcomes.report_status(rep, [excluded], False) == ("skipped", "s", "EXCLUDED")


def test_a_failed_row_fails_the_test_with_its_text_and_properties(cpu_sweep: Sweep) -> None:
    gone = support_outcome(cpu_sweep, "org/gone", path=str(cpu_sweep.settings.workdir / "nowhere"))
    decided = outcomes.pytest_outcome([gone])
    assert decided.outcome == "failed" and decided.text.startswith("FAIL(load) org/gone: ")
    names = [name for name, _ in decided.properties]
    assert names == [n for n in outcomes.JUNIT_FIELDS if n in names]  # in the fields' order
    assert ("result", "FAIL(load)") in decided.properties
    rep = call_report("org/gone", "failed", decided.text)
    assert outcomes.report_status(rep, [gone], False) == ("failed", "F", "FAIL(load)")
    assert outcomes.report_status(rep, [gone], True) == ("failed", "", "FAIL(load)")


def test_a_crashed_workers_row_travels_on_its_report_and_fails_its_test(cpu_sweep: Sweep) -> None:
    why = "the xdist worker running it died (node gw1 crashed)"
    carried = session.died_outcomes("models.toml::org/m", why, cpu_sweep, [Support()], {})
    rep = call_report("org/m", "failed", "worker 'gw1' crashed while running 'org/m'")
    outcomes.carry(rep, carried)
    assert getattr(rep, outcomes.OUTCOMES_ATTRIBUTE) == carried  # plain types, as xdist sends
    (crashed,) = outcomes.outcomes_of(rep) or []
    assert (crashed.table, crashed.model_id, crashed.rows[0]["result"]) == (
        SUPPORT.name,
        "org/m",
        "FAIL(other)",
    )
    assert why in crashed.rows[0]["notes"]
    assert outcomes.report_status(rep, [crashed], False) == ("failed", "F", "FAIL(other)")
    assert outcomes.pytest_outcome([crashed]).outcome == "failed"
    assert outcomes.outcomes_of(call_report("x", "passed")) is None  # not a model's test


def test_a_failure_the_baseline_expects_is_xfailed(cpu_sweep: Sweep) -> None:
    gone = support_outcome(cpu_sweep, "org/gone", path=str(cpu_sweep.settings.workdir / "nowhere"))
    expected = Baseline("p", {"org/gone": Expected("FAIL(load)")})
    properties: list[tuple[str, object]] = []
    rep = call_report("org/gone", "failed", "FAIL(load) org/gone: ...")
    outcomes.attach(rep, [gone], properties, expected)
    assert rep.outcome == "skipped" and rep.wasxfail == (
        "FAIL(load): the baseline expects FAIL(load)"
    )
    assert properties == [("baseline_expected", "FAIL(load)"), ("baseline", "same")]
    assert outcomes.report_status(rep, [gone], False) == ("xfailed", "x", "XFAIL FAIL(load)")
    # a regression fails, its reason before the failure's text
    regressed = call_report("org/gone", "failed", "FAIL(load) org/gone: ...")
    outcomes.attach(regressed, [gone], [], Baseline("p", {"org/gone": Expected("PASS")}))
    assert regressed.outcome == "failed"
    assert str(regressed.longrepr).startswith("regression: FAIL(load), the baseline expects PASS")


def test_the_support_table_is_the_one_held_against_a_baseline() -> None:
    expected = Baseline("p", {"a": Expected("FAIL(gen)")})
    properties: list[tuple[str, object]] = []
    rep = call_report("a", "passed")
    outcomes.attach(rep, [ModeOutcome("train", "a", [row("a", seq_len=128)])], properties, expected)
    assert properties == [] and rep.outcome == "passed"
    outcomes.attach(rep, [ModeOutcome(SUPPORT.name, "a", [row("a")])], properties, expected)
    assert ("baseline_expected", "FAIL(gen)") in properties
    assert str(rep.outcome) == "failed"  # an improvement not yet in the baseline (strict)
    held = outcomes.held_against(Baseline("p", {"a": Expected("PASS")}), row("a"), False)
    assert held == outcomes.Held([("baseline_expected", "PASS"), ("baseline", "same")])
    new = outcomes.held_against(expected, row("b"), False)
    assert new.outcome is None and ("baseline_expected", "-") in new.properties


def test_a_report_carries_one_value_and_the_first_row_decides_the_status() -> None:
    rep = call_report("a", "failed")
    carried = [
        ModeOutcome("support", "a", [row("a", "FAIL(output)")]),
        ModeOutcome("perf", "a", [row("a", configuration="b1")]),
    ]
    outcomes.attach(rep, carried, [])
    assert getattr(rep, outcomes.OUTCOMES_ATTRIBUTE) == [o.to_dict() for o in carried]
    assert outcomes.outcomes_of(rep) == carried
    assert outcomes.report_status(rep, carried, False) == ("failed", "F", "FAIL(output)")
    fault = ModeOutcome("support", "a", fault="the Hub did not answer")
    assert outcomes.report_status(rep, [fault], False) == ("error", "E", "ERROR")
    unchanged = ModeOutcome("support", "a", unchanged=True, reason="unchanged since today")
    skipped = call_report("a", "skipped", ("models.toml::a", None, "Skipped: unchanged"))
    assert outcomes.report_status(skipped, [unchanged], False) is None  # pytest's own
    assert outcomes.report_status(skipped, [unchanged], True) == ("skipped", "", "SKIPPED")


def test_the_first_modes_row_decides_the_models_test() -> None:
    failed = outcomes.pytest_outcome([ModeOutcome("support", "a", [row("a", "FAIL(output)")])])
    assert failed.outcome == "failed" and failed.text.startswith("FAIL(output) a")
    assert ("result", "FAIL(output)") in failed.properties
    passed = outcomes.pytest_outcome(
        [ModeOutcome("support", "a", [row("a", team="compilers")]), ModeOutcome("perf", "a")]
    )
    assert (passed.outcome, passed.text) == ("passed", "")
    assert passed.properties[-1] == ("team", "compilers")  # a hook's column, after the fields
    # nothing ran: skipped with why, unless a later mode ran (a benchmark of an unchanged model)
    unchanged = ModeOutcome("support", "a", unchanged=True, reason="unchanged since today")
    alone = outcomes.pytest_outcome([unchanged])
    assert (alone.outcome, alone.text, alone.properties) == ("skipped", unchanged.reason, [])
    later = outcomes.pytest_outcome([unchanged, ModeOutcome("perf", "a", [row("a")])])
    assert later.outcome == "passed"
    # an environment fault in any mode: failed, naming it, whatever the rows say
    fault = ModeOutcome("perf", "a", fault="the Hub at http://127.0.0.1:9 did not answer")
    faulted = outcomes.pytest_outcome([ModeOutcome("support", "a", [row("a")]), fault])
    assert faulted.outcome == "failed" and "not tested, no row recorded" in faulted.text
    assert faulted.text.endswith("did not answer")


@pytest.mark.parametrize(
    ("expected", "actual", "allow", "outcome"),
    [
        ("FAIL(gen)", "FAIL(gen)", False, "xfailed"),
        ("FAIL(gen)", "PASS", False, "failed"),  # strict: an improvement fails until recorded
        ("FAIL(gen)", "PASS", True, "xpassed"),
        ("PASS", "FAIL(gen)", True, "failed"),
        ("PASS", "EXCLUDED", False, "failed"),
        ("EXCLUDED", "FAIL(gen)", True, "xfailed"),
        ("FAIL(gen)", "EXCLUDED", True, None),
        ("PASS", "PASS", False, None),
    ],
)
def test_the_baselines_outcome_of_each_model(
    expected: str, actual: str, allow: bool, outcome: str | None
) -> None:
    held = outcomes.baseline_outcome(Expected(expected), actual, allow)
    assert (held[1] if held else None) == outcome
    if held:
        assert f"expects {expected}" in held[2] and actual in held[2]
    assert outcomes.baseline_outcome(None, actual, allow) is None  # a new model: as it is


def test_the_sweep_fails_for_lost_rows_unchecked_passes_and_the_baseline() -> None:
    ok, failed = pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED
    assert outcomes.exit_status(ok) == ok
    assert outcomes.exit_status(ok, rows_lost=True) == failed
    assert outcomes.exit_status(ok, unchecked_failing=["b"]) == failed
    expected = Baseline("p", {"a": Expected("PASS")})
    assert outcomes.exit_status(ok, comparison=Comparison(expected, ())) == ok  # none failing
    broke = baseline.compare(expected, [row("a", "FAIL(gen)")])
    assert broke.failing[0].kind is Kind.REGRESSION
    assert outcomes.exit_status(ok, comparison=broke) == failed
    interrupted = pytest.ExitCode.INTERRUPTED
    assert outcomes.exit_status(interrupted, rows_lost=True) == interrupted  # stays as it is


@pytest.mark.parametrize(
    "entry",
    [
        '[[model]]\nid = "acme/q"\nexclusion = "quantized"\nnotes = "4-bit"\n',
        'model = [{id = "acme/q", exclusion = "quantized", notes = "4-bit"}]\n',  # no line
    ],
    ids=["table", "inline"],
)
def test_a_skipped_models_junit_text_names_it_and_no_line(
    entry: str, pytester: pytest.Pytester
) -> None:
    """A skip is named by its model's test (junit's ``path:line`` would say ``:None``), of an
    entry with a line or without; an exclusion decided ahead runs nothing: no model, no run."""
    pytester.makefile(".toml", models=entry)
    result = pytester.runpytest(
        *("--neuron-sweep", "--neuron-models", "models.toml", "--neuron-backend", "eager"),
        *("--neuron-cache", "cache", "--neuron-leases", "leases", "--junitxml", "junit.xml"),
        *("-p", "no:cacheprovider", "-rs"),
    )
    result.assert_outcomes(skipped=1)
    summary = "EXCLUDED [[]1[]] models.toml::acme/q: EXCLUDED (quantized): 4-bit"
    result.stdout.fnmatch_lines([summary])  # the terminal's line, as it was
    skipped = ET.parse(pytester.path / "junit.xml").getroot().find("./testsuite/testcase/skipped")
    assert skipped is not None
    assert skipped.get("message") == "EXCLUDED (quantized): 4-bit"
    assert skipped.text == "models.toml::acme/q: EXCLUDED (quantized): 4-bit"
