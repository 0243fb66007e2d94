"""Expected results: the baseline file, each kind of change, `baseline update` and `check`.

The sweep itself held against a baseline is in ``test_sweep.py`` (it runs sweeps).
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_neuronsupport import baseline, outcomes
from pytest_neuronsupport.baseline import Baseline, BaselineError, Expected, Kind
from tests.results_for_tests import result_row, write_results
from tests.sweeping import SweepRunner

EXE = Path(sys.executable).parent / "neuronsupport"
PAIR = "inductor-2.13.0/transformers-5.24.0"


def neuronsupport(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EXE), *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


@pytest.mark.parametrize(
    ("expected", "actual", "kind"),
    [
        ("PASS", "PASS", Kind.SAME),
        ("FAIL(gen)", "FAIL(gen)", Kind.SAME),
        ("PASS", "FAIL(gen)", Kind.REGRESSION),
        ("PASS", "EXCLUDED", Kind.REGRESSION),
        ("FAIL(load)", "FAIL(gen)", Kind.REGRESSION),  # fails in another phase
        ("FAIL(gen)", "PASS", Kind.IMPROVEMENT),
        ("EXCLUDED", "PASS", Kind.IMPROVEMENT),
        ("EXCLUDED", "FAIL(load)", Kind.CHANGED),
        ("FAIL(output)", "EXCLUDED", Kind.CHANGED),
        ("PASS", None, Kind.NOT_RUN),
        (None, "FAIL(gen)", Kind.NEW),
    ],
)
def test_each_change_has_its_kind(expected: str | None, actual: str | None, kind: Kind) -> None:
    assert baseline.decide(Expected(expected) if expected else None, actual) is kind


def test_a_flaky_model_differs_without_failing_the_check() -> None:
    expected = Baseline(PAIR, {"m": Expected("PASS", flaky=True), "n": Expected("PASS")})
    rows = [result_row("m", "FAIL(gen)"), result_row("n", "PASS")]
    comparison = baseline.compare(expected, rows)
    assert [(e.model_id, e.kind) for e in comparison.entries] == [
        ("m", Kind.FLAKY),
        ("n", Kind.SAME),
    ]
    assert comparison.ok
    assert outcomes.baseline_outcome(expected.expected["m"], "FAIL(gen)", False) == (
        Kind.FLAKY,
        "xfailed",
        "FAIL(gen): the baseline expects PASS, flaky",
    )


def test_regressions_always_fail_improvements_unless_allowed() -> None:
    expected = Baseline(
        PAIR,
        {
            "broke": Expected("PASS"),
            "mended": Expected("FAIL(gen)"),
            "same-fail": Expected("FAIL(load)"),
            "gone": Expected("PASS"),
        },
    )
    rows = [
        result_row("broke", "FAIL(forward)"),
        result_row("mended", "PASS"),
        result_row("same-fail", "FAIL(load)"),
        result_row("fresh", "PASS"),
    ]
    strict = baseline.compare(expected, rows, run_py={"broke": Path("runs/broke/run.py")})
    kinds = {e.model_id: e.kind for e in strict.entries}
    assert kinds == {
        "broke": Kind.REGRESSION,
        "mended": Kind.IMPROVEMENT,
        "same-fail": Kind.SAME,
        "gone": Kind.NOT_RUN,
        "fresh": Kind.NEW,
    }
    assert [e.model_id for e in strict.failing] == ["broke", "mended"]
    lenient = baseline.compare(expected, rows, allow_improvements=True)
    assert [e.model_id for e in lenient.failing] == ["broke"]
    text = "\n".join(strict.lines())
    assert text.splitlines()[0] == (
        f"baseline {PAIR}: FAILED (1 same, 1 regression, 1 improvement, 1 not run, 1 new)"
    )
    assert "regression   broke: expected PASS, got FAIL(forward)  [fails the check]" in text
    assert "RuntimeError: broke broke" in text and "run.py: runs/broke/run.py" in text
    assert "not run      gone: expected PASS, got not run" in text
    assert "new          fresh: expected -, got PASS" in text


def test_the_file_round_trips_keeps_flaky_marks_and_reads_in_a_diff(tmp_path: Path) -> None:
    odd = 'org/model "quoted" \\ ünï\x7f'
    first = Baseline(PAIR, {"b": Expected("PASS"), odd: Expected("FAIL(gen)", flaky=True)})
    path = tmp_path / "expected.toml"
    baseline.write(path, first)
    assert baseline.read(path) == first
    text = path.read_text(encoding="utf-8")
    assert '"b" = "PASS"\n' in text and "flaky = true}" in text
    # one line per model, in id order, readable as it is
    assert text.index('\n"b"') < text.index('\n"org/model \\"quoted\\" \\\\ ünï\\u007f"')
    refreshed = Baseline.from_results(PAIR, {odd: "FAIL(load)", "c": "PASS"}, previous=first)
    assert refreshed.expected == {
        "c": Expected("PASS"),
        odd: Expected("FAIL(load)", flaky=True),
    }
    assert not list(tmp_path.glob(".*.tmp"))


def test_graph_breaks_are_held_like_dynamos_ci_holds_them(tmp_path: Path) -> None:
    held = Baseline.from_results(
        PAIR, {"llava": "PASS", "t5": "FAIL(gen)", "old": "PASS"}, None, {"llava": 2, "t5": 0}
    )
    path = tmp_path / "expected.toml"
    baseline.write(path, held)
    text = path.read_text(encoding="utf-8")
    assert '"llava" = {result = "PASS", graph_breaks = 2}\n' in text
    assert '"old" = "PASS"\n' in text  # no count recorded: held by its result only
    assert baseline.read(path) == held
    llava = held.expected["llava"]
    assert baseline.decide(llava, "PASS", 2) is Kind.SAME
    assert baseline.decide(llava, "PASS", 3) is Kind.REGRESSION  # a new break
    assert baseline.decide(llava, "PASS", 1) is Kind.IMPROVEMENT  # update the baseline
    assert baseline.decide(llava, "PASS", None) is Kind.SAME  # the row has no count
    assert baseline.decide(held.expected["old"], "PASS", 5) is Kind.SAME
    assert baseline.decide(Expected("PASS", True, 0), "PASS", 1) is Kind.FLAKY
    assert baseline.decide(held.expected["t5"], "FAIL(load)", 0) is Kind.REGRESSION
    rows = [
        {"model_id": "llava", "result": "PASS", "graph_breaks": 3},
        {"model_id": "t5", "result": "FAIL(gen)", "graph_breaks": 0, "error": "E: x"},
        {"model_id": "old", "result": "PASS", "graph_breaks": 1},
    ]
    comparison = baseline.compare(held, rows)
    assert [e.model_id for e in comparison.failing] == ["llava"]
    assert comparison.lines()[1] == (
        "regression   llava: expected PASS, got PASS (graph breaks 2 -> 3)  [fails the check]"
    )
    outcome = outcomes.baseline_outcome(llava, "PASS", False, 3)
    assert outcome == (
        Kind.REGRESSION,
        "failed",
        "regression: PASS, the baseline expects PASS (graph breaks 2 -> 3)",
    )
    fewer = outcomes.baseline_outcome(Expected("FAIL(gen)", graph_breaks=2), "FAIL(gen)", True, 1)
    assert fewer is not None and fewer[:2] == (Kind.IMPROVEMENT, "xfailed")  # still failing


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('pair = "p"\n[expected]\n"m" = { result = "PASS", graph_breaks = -1 }\n', "a count"),
        ('pair = "p"\n[expected]\n"m" = "PASSED"\n', "'m': result must be one of PASS"),
        ('pair = "p"\n[expected]\n"m" = { result = "PASS", flaky = "yes" }\n', "flaky must be"),
        ('pair = "p"\n[expected]\n"m" = { result = "PASS", why = 1 }\n', "unknown key(s) why"),
        ('[expected]\n"m" = "PASS"\n', 'expected `pair = "..."`'),
        ('pair = "p"\n[expected]\n"m" = \n', "expected.toml:3: not a baseline file: "),
    ],
)
def test_a_bad_file_is_named_with_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "expected.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BaselineError) as caught:
        baseline.read(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_update_then_check_from_the_command(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_results(
        results, [result_row("zoo:a"), result_row("zoo:b", "FAIL(gen)"), result_row("zoo:c")]
    )
    update = neuronsupport(
        "baseline", "update", "--results", str(results), "--out", "ci/expected.toml", cwd=tmp_path
    )
    assert update.returncode == 0, update.stderr
    assert f"3 model(s) of {PAIR}" in update.stdout
    ok = neuronsupport(
        "check", "--baseline", "ci/expected.toml", "--results", str(results), cwd=tmp_path
    )
    assert ok.returncode == 0 and f"baseline {PAIR}: ok (3 same)" in ok.stdout
    # the compiler breaks zoo:a and mends zoo:b
    write_results(
        results, [result_row("zoo:a", "FAIL(forward)", minutes=5), result_row("zoo:b", minutes=5)]
    )
    bad = neuronsupport(
        "check", "--baseline", "ci/expected.toml", "--results", str(results), cwd=tmp_path
    )
    assert bad.returncode == 1
    assert "regression   zoo:a: expected PASS, got FAIL(forward)" in bad.stdout
    assert "improvement  zoo:b: expected FAIL(gen), got PASS" in bad.stdout
    lenient = neuronsupport(
        "check",
        "--baseline",
        "ci/expected.toml",
        "--results",
        str(results),
        "--allow-improvements",
        cwd=tmp_path,
    )
    assert lenient.returncode == 1 and "zoo:b: expected FAIL(gen), got PASS\n" in lenient.stdout
    missing = neuronsupport(
        "check", "--baseline", "nope.toml", "--results", str(results), cwd=tmp_path
    )
    assert missing.returncode == 2 and "nope.toml: cannot read the baseline" in missing.stderr


def test_update_needs_a_pair_when_the_dataset_has_several(tmp_path: Path) -> None:
    results = write_results(
        tmp_path / "r", [result_row("m"), result_row("m", compiler_version="2.14.0")]
    )
    args = ["baseline", "update", "--results", str(results), "--out", "b.toml"]
    refused = neuronsupport(*args, cwd=tmp_path)
    assert refused.returncode == 2 and "--pair is needed: the dataset has 2" in refused.stderr
    done = neuronsupport(*args, "--pair", "data/inductor-2.14.0/transformers-5.24.0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert baseline.read(tmp_path / "b.toml").pair == "inductor-2.14.0/transformers-5.24.0"


MISBEHAVING = "backends_for_tests:misbehaving_by_model_backend_for_tests"


@pytest.mark.slow
def test_a_sweep_held_against_its_baseline_names_regressions_and_improvements(
    sweep: SweepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the first compiler refuses bert: that is the baseline
    monkeypatch.setenv("NEURONSUPPORT_TEST_MISBEHAVIOUR", "zoo:bert-mlm=raise")
    first = sweep.run("zoo:gpt2", "zoo:bert-mlm", backend=MISBEHAVING)
    assert first.row("zoo:bert-mlm")["result"] == "FAIL(forward)"
    expected = sweep.path / "expected.toml"
    update = neuronsupport(
        "baseline",
        "update",
        "--results",
        str(sweep.results),
        "--out",
        str(expected),
        cwd=sweep.path,
    )
    assert update.returncode == 0, update.stderr
    held = ["--neuron-baseline", str(expected), "--neuron-rerun"]

    # the same results: bert's failure is expected (xfailed), the session passes
    same = sweep.run("zoo:gpt2", "zoo:bert-mlm", backend=MISBEHAVING, args=held)
    same.result.assert_outcomes(passed=1, xfailed=1)
    assert same.result.ret == 0
    assert same.junit["zoo:bert-mlm"]["baseline"] == "same"
    assert same.junit["zoo:bert-mlm"]["baseline_expected"] == "FAIL(forward)"

    # the next compiler breaks gpt2 and mends bert
    monkeypatch.setenv("NEURONSUPPORT_TEST_MISBEHAVIOUR", "zoo:gpt2=raise")
    changed = sweep.run("zoo:gpt2", "zoo:bert-mlm", backend=MISBEHAVING, args=held)
    assert changed.result.ret == 1
    changed.result.assert_outcomes(failed=2)  # the regression, and the strict improvement
    out = changed.result.stdout
    out.fnmatch_lines(
        [
            "*baseline * FAILED (1 regression, 1 improvement)*",
            "regression   zoo:gpt2: expected PASS, got FAIL(gen)  [[]fails the check[]]",
            "*: test-only backend* (through BackendCompilerFailed backend=*",
            f"*run.py: {sweep.results}/runs/*/zoo--gpt2/run.py",
            "improvement  zoo:bert-mlm: expected FAIL(forward), got PASS  [[]fails the check[]]",
        ]
    )
    out.fnmatch_lines(
        ["*[[]XPASS(strict)[]] improvement: PASS, the baseline expects FAIL(forward)*"]
    )
    assert changed.junit["zoo:gpt2"]["baseline"] == "regression"
    suite = ET.parse(sweep.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    globals_ = {
        p.get("name"): p.get("value")
        for p in suite.iter("property")
        if p.get("name", "").startswith("baseline")
    }
    assert globals_["baseline_ok"] == "false" and globals_["baseline_regression"] == "1"

    # improvements allowed: only the regression fails
    lenient = sweep.run(
        "zoo:gpt2",
        "zoo:bert-mlm",
        backend=MISBEHAVING,
        args=[*held, "--neuron-baseline-allow-improvements"],
    )
    lenient.result.assert_outcomes(failed=1, xpassed=1)
    assert lenient.result.ret == 1

    # nothing runs again (run.py unchanged), but the recorded regression still fails the session
    recorded = sweep.run(
        "zoo:gpt2",
        "zoo:bert-mlm",
        backend=MISBEHAVING,
        args=["--neuron-baseline", str(expected), "--neuron-baseline-allow-improvements"],
    )
    recorded.result.assert_outcomes(skipped=2)
    assert recorded.result.ret == 1
    recorded.result.stdout.fnmatch_lines(["regression   zoo:gpt2: expected PASS, got FAIL(gen)*"])


def test_a_bad_baseline_stops_the_sweep_before_it_starts(pytester: pytest.Pytester) -> None:
    """Every problem of the file, each on its line, as a usage error."""
    (pytester.path / "expected.toml").write_text(
        'pair = "p"\n[expected]\n"m" = "OK"\n"n" = { result = "PASS", why = 1 }\n'
        '\n[expected."zoo:q"]\nresult = "FAIL"\n'
    )
    done = pytester.runpytest("--neuron-sweep", "--neuron-baseline", "expected.toml")
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    done.stderr.fnmatch_lines(
        [
            "ERROR: neuronsupport: */expected.toml:3: [[]expected[]] 'm': result must be one of *",
            "ERROR: neuronsupport: */expected.toml:4: [[]expected[]] 'n': unknown key(s) why",
            "ERROR: neuronsupport: */expected.toml:6: [[]expected[]] 'zoo:q': result must be *",
        ]
    )
    assert "Traceback" not in done.stdout.str() + done.stderr.str()
