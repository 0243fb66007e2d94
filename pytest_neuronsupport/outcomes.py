"""A model's test in pytest's words, decided in one place: rows in, pytest's outcome out.

Everything that turns what a model's modes recorded (their rows, in
:class:`~pytest_neuronsupport.modes.ModeOutcome`) into what pytest and its reports say lives
here, as plain functions; the item (:class:`~pytest_neuronsupport.collect.ModelItem`), the
session and the progress display only ask:

- :func:`pytest_outcome`: passed, failed or skipped, the text that says why, and the row's junit
  properties (:func:`junit_properties`); the first mode's row decides, by its result
  (:data:`~pytest_neuronsupport.pipeline.classify.PYTEST_OUTCOMES`), an environment fault fails.
- :func:`baseline_outcome` and :func:`held_against`: what the baseline (``--neuron-baseline``)
  makes of a support row: an expected failure is *xfailed*, an improvement *xpassed* or
  failed (strict), a regression failed; :func:`hold` puts it on the test's report.
- :func:`attach`: the outcomes on a model's call report (:data:`OUTCOMES_ATTRIBUTE`, plain types
  that xdist carries to the controller; :func:`carry`, also for a dead worker's row), a skip
  named by its model, the baseline held; :func:`outcomes_of` reads them back.
- :func:`report_status`: the word and letter of a model's test in the terminal.
- junit: the baseline's verdict as the suite's properties (:func:`junit_global_properties`),
  and a model's skip text mended once junitxml wrote it (:class:`JunitSkips`).
- :func:`exit_status`: whether the sweep fails although its tests did not.

The texts themselves (a failure's, a skip's, a fault's) are written by :mod:`report`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_neuronsupport.baseline import (
    Baseline,
    Comparison,
    Expected,
    Kind,
    breaks_change,
    decide,
)
from pytest_neuronsupport.dataset.support import COLUMNS, SUPPORT
from pytest_neuronsupport.pipeline.classify import PYTEST_OUTCOMES
from pytest_neuronsupport.records import ModeOutcome
from pytest_neuronsupport.report import failure_text, fault_text, skip_text
from pytest_neuronsupport.runners.lib.protocol import Result, first_line

#: The report attribute that carries a model's outcomes, one per mode (plain types).
OUTCOMES_ATTRIBUTE = "neuronsupport_outcomes"

#: pytest's short letters of each outcome.
LETTERS = {"passed": ".", "failed": "F", "skipped": "s"}

#: Row fields carried by each test as junit properties (``--junitxml``), in this order; then
#: every extra column a ``pytest_neuronsupport_row`` hook added.
JUNIT_FIELDS = (
    "model_id",
    "result",
    "runner",
    "neuron_cores",
    "cpu_match",
    "english",
    "checked_by",
    "exclusion",
    "wall_s",
    "device",
    "backend",
    "compiler",
    "compiler_version",
    "library",
    "library_version",
    "run_py_sha256",
)


def junit_properties(row: Mapping[str, Any]) -> list[tuple[str, object]]:
    """The junit properties of a model's test: the row's :data:`JUNIT_FIELDS` that are set,
    then its columns beyond the schema (a user's hook added them), by name."""
    extras = sorted(name for name in row if name not in COLUMNS)
    names = [*JUNIT_FIELDS, *extras]
    return [(name, row[name]) for name in names if row.get(name) is not None]


# --- the model's test ------------------------------------------------------------------------


@dataclass(frozen=True)
class PytestOutcome:
    """What a model's test is in pytest: ``passed``, ``failed`` or ``skipped``, the text that
    says why, and the junit properties of the row that decided it."""

    outcome: str
    text: str = ""
    properties: list[tuple[str, object]] = field(default_factory=list)


def pytest_outcome(outcomes: Sequence[ModeOutcome]) -> PytestOutcome:
    """A model's test from its modes' outcomes: the first mode's row decides; an environment
    fault fails it, naming the fault (no row); a first mode that ran nothing (unchanged, the
    limit reached) skips it, unless a later mode ran (a benchmark of an unchanged model)."""
    faulted = next((o for o in outcomes if o.fault is not None), None)
    if faulted is not None:
        return PytestOutcome("failed", fault_text(faulted.model_id, str(faulted.fault)))
    first = outcomes[0] if outcomes else None
    if first is None or not first.rows:
        ran_later = any(outcome.rows for outcome in outcomes[1:])
        if first is not None and first.reason is not None and not ran_later:
            return PytestOutcome("skipped", first.reason)
        return PytestOutcome("passed")
    row = first.rows[0]
    outcome = PYTEST_OUTCOMES[Result(row["result"])]
    text = {"failed": failure_text(row, first.run_py), "skipped": skip_text(row)}.get(outcome)
    return PytestOutcome(outcome, text or "", junit_properties(row))


# --- the baseline ----------------------------------------------------------------------------


def baseline_outcome(
    expected: Expected | None,
    actual: str,
    allow_improvements: bool,
    graph_breaks: int | None = None,
) -> tuple[Kind, str, str] | None:
    """How the baseline changes a model's pytest outcome: ``(kind, outcome, reason)``, or None.

    The outcome is in pytest's own words for expectations: a failure the baseline expects is
    ``"xfailed"``; an improvement is ``"xpassed"`` when improvements are allowed, else
    ``"failed"`` (pytest's strict xfail); a regression is ``"failed"``, even for a model now
    EXCLUDED. None: the outcome is the one without a baseline (PASS as expected, a new model).
    """
    kind = decide(expected, actual, graph_breaks)
    if expected is None or kind is Kind.NEW:
        return None
    breaks = breaks_change(expected, graph_breaks)
    was = f"the baseline expects {expected.result}" + (f" ({breaks})" if breaks else "")
    failed = actual.startswith("FAIL")
    if kind in (Kind.SAME, Kind.FLAKY) and failed:
        flaky = ", flaky" if kind is Kind.FLAKY else ""
        return kind, "xfailed", f"{actual}: {was}{flaky}"
    if kind is Kind.IMPROVEMENT:
        if allow_improvements:  # fewer graph breaks in a model that still fails: xfailed
            return kind, "xfailed" if failed else "xpassed", f"improvement: {actual}, {was}"
        return kind, "failed", f"[XPASS(strict)] improvement: {actual}, {was}; update it"
    if kind is Kind.REGRESSION:
        return kind, "failed", f"regression: {actual}, {was}"
    if kind is Kind.CHANGED:
        if allow_improvements:
            return (kind, "xfailed", f"changed: {actual}, {was}") if failed else None
        return kind, "failed", f"changed: {actual}, {was}; update it"
    return None


@dataclass(frozen=True)
class Held:
    """A support row held against the baseline: the test's junit properties of it, and the
    outcome it gives (``xfailed``, ``xpassed``, ``failed``; None: as without a baseline)."""

    properties: list[tuple[str, object]]
    outcome: str | None = None
    reason: str = ""


def held_against(baseline: Baseline, row: Mapping[str, Any], allow_improvements: bool) -> Held:
    """What the baseline makes of a model's support row (:func:`baseline_outcome`), and the
    properties that say what it expected and how the row stands (``baseline_expected``,
    ``baseline``: a :class:`~pytest_neuronsupport.baseline.Kind`)."""
    expected = baseline.expected.get(row["model_id"])
    result, breaks = str(row["result"]), row.get("graph_breaks")
    changed = baseline_outcome(expected, result, allow_improvements, breaks)
    kind = changed[0] if changed else decide(expected, result, breaks)
    properties: list[tuple[str, object]] = [
        ("baseline_expected", expected.result if expected else "-"),
        ("baseline", kind.value),
    ]
    if changed is None:
        return Held(properties)
    return Held(properties, changed[1], changed[2])


def hold(rep: pytest.TestReport, held: Held) -> None:
    """Put the baseline's outcome on a model's report: failed with the reason before the
    failure's text, or pytest's xfailed (a skip with ``wasxfail``) or xpassed."""
    if held.outcome is None:
        return
    if held.outcome == "failed":
        rep.outcome = "failed"
        rep.longrepr = f"{held.reason}\n{rep.longrepr}" if rep.longrepr else held.reason
    else:
        rep.outcome = "skipped" if held.outcome == "xfailed" else "passed"
        rep.wasxfail = held.reason


# --- the report ------------------------------------------------------------------------------


def carry(rep: pytest.TestReport, outcomes: list[dict[str, Any]]) -> None:
    """Put a model's outcomes (:meth:`ModeOutcome.to_dict`) on its report: xdist carries them."""
    setattr(rep, OUTCOMES_ATTRIBUTE, outcomes)


def outcomes_of(rep: pytest.TestReport) -> list[ModeOutcome] | None:
    """The outcomes a model's test report carries (None: not a model's test, or it did not
    get as far as its call)."""
    data = getattr(rep, OUTCOMES_ATTRIBUTE, None)
    return None if data is None else [ModeOutcome.from_dict(d) for d in data]


def attach(
    rep: pytest.TestReport,
    outcomes: Sequence[ModeOutcome],
    properties: list[tuple[str, object]],
    baseline: Baseline | None = None,
    allow_improvements: bool = False,
) -> None:
    """Put a model's outcomes on its call report (a skipped one's reason names the model, at
    no line), and hold its support row against the baseline, if any: its test's junit
    ``properties`` get the expectation."""
    carry(rep, [outcome.to_dict() for outcome in outcomes])
    if rep.skipped and isinstance(rep.longrepr, tuple):  # named by its model, not a line
        rep.longrepr = (rep.nodeid, None, rep.longrepr[2])  # type: ignore[assignment]
    if baseline is None:
        return
    for outcome in outcomes:
        if outcome.table == SUPPORT.name and outcome.rows:
            held = held_against(baseline, outcome.rows[0], allow_improvements)
            properties.extend(held.properties)
            hold(rep, held)


def skip_reason(rep: Any) -> str:
    """The reason of a skipped test's report (pytest keeps it as ``(path, line, reason)``)."""
    longrepr = rep.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return first_line(str(longrepr or rep.outcome), 200)


def report_status(
    rep: pytest.TestReport, outcomes: Sequence[ModeOutcome], lines_per_model: bool
) -> tuple[str, str, str] | None:
    """A model's test status: its first row's result as the word (``XPASS PASS`` when the
    baseline decided), and no letter when each model gets a line of its own; an environment
    fault is an error."""
    first = outcomes[0] if outcomes else None
    if any(outcome.fault is not None for outcome in outcomes):  # the environment's: an error
        return "error", "" if lines_per_model else "E", "ERROR"
    if first is None or not first.rows:
        return (rep.outcome, "", rep.outcome.upper()) if lines_per_model else None
    word = str(first.rows[0]["result"])
    if hasattr(rep, "wasxfail"):
        category, letter = ("xpassed", "X") if rep.passed else ("xfailed", "x")
        word = f"{category.upper()[:5]} {word}"
    else:
        category = rep.outcome
        letter = LETTERS[category]
    return category, "" if lines_per_model else letter, word


# --- junit -----------------------------------------------------------------------------------


def junit_global_properties(config: pytest.Config, comparison: Comparison) -> None:
    """The baseline's verdict as properties of the junit test suite (``--junitxml``): the
    counts of each kind, and the models that fail it."""
    from _pytest.junitxml import xml_key  # pytest's own store of its junit writer

    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    xml.add_global_property("baseline", comparison.baseline.pair)
    xml.add_global_property("baseline_ok", str(comparison.ok).lower())
    for kind, count in comparison.counts().items():
        xml.add_global_property(f"baseline_{kind.replace(' ', '_')}", count)
    for entry in comparison.failing:
        change = f"{entry.model_id}: {entry.expected} -> {entry.actual}"
        xml.add_global_property(f"baseline_failing_{entry.kind}", change)


def junit_in_order(config: pytest.Config, rank: Callable[[str], int]) -> None:
    """junit's test cases (``--junitxml``) ordered by ``rank`` of their names (the models):
    pytest's own list of them, in the order they ended, each finalized (only its element is
    left, named by the model). Call it before junitxml writes its file."""
    from _pytest.junitxml import xml_key  # pytest's own store of its junit writer

    xml = config.stash.get(xml_key, None)
    if xml is not None:
        xml.node_reporters_ordered.sort(key=lambda rep: rank(str(rep.to_xml().get("name"))))


def mend_junit_skip(config: pytest.Config, report: pytest.TestReport) -> None:
    """The text of junit's ``<skipped>`` of a model's skip named by its test at no line
    (:func:`attach`): ``models.toml::zoo:x: reason``, where pytest's junitxml (which takes
    every skip to have a line) wrote ``models.toml::zoo:x:None: reason``. Call it after
    junitxml's report hook."""
    longrepr = report.longrepr
    if (
        not report.skipped
        or hasattr(report, "wasxfail")  # an expected failure: junit says so without a text
        or not isinstance(longrepr, tuple)
        or longrepr[1] is not None
    ):
        return
    from _pytest.junitxml import bin_xml_escape, xml_key

    xml = config.stash.get(xml_key, None)
    if xml is None:  # no --junitxml
        return
    where, _, reason = longrepr
    text = bin_xml_escape(f"{where}: {reason.removeprefix('Skipped: ')}")
    for element in xml.node_reporter(report).nodes:
        if element.tag == "skipped":
            element.text = text


class JunitSkips:
    """junit's text of a skipped model's test (:func:`mend_junit_skip`), once junitxml has
    written it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(trylast=True)  # after junitxml's: its element is there to mend
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A model's skip, at no line, reads ``models.toml::zoo:x: reason`` in junit."""
        if getattr(report, OUTCOMES_ATTRIBUTE, None) is not None:
            mend_junit_skip(self.config, report)


# --- the sweep -------------------------------------------------------------------------------


def exit_status(
    status: int | pytest.ExitCode,
    *,
    rows_lost: bool = False,
    unchecked_failing: Sequence[str] = (),
    comparison: Comparison | None = None,
) -> int | pytest.ExitCode:
    """The sweep's exit status once its tests are done: a sweep whose tests passed fails when
    rows did not reach the dataset, when ``--neuron-require-check`` found unchecked PASS models
    (their tests stay PASS), or when the baseline's check fails; any other status stays."""
    if status != pytest.ExitCode.OK:
        return status
    failing = comparison is not None and not comparison.ok
    if rows_lost or unchecked_failing or failing:
        return pytest.ExitCode.TESTS_FAILED
    return status
