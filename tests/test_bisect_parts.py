"""The bisection's parts that run no model: releases from pip's index (a local one), the ends
from a dataset, outcomes, the candidate's script, the report and its row, the package a sweep
bisects, the compiler bisector's answer, and what lookup, failures and the page show of it."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.bisect import aftersweep, compiler, environments, versions
from pytest_neuronsupport.bisect.command import record
from pytest_neuronsupport.bisect.ends import EndsError, find_ends, version_in
from pytest_neuronsupport.bisect.outcomes import Outcome, Signature, judge, signature
from pytest_neuronsupport.bisect.report import Report
from pytest_neuronsupport.bisect.search import Found, Place, Status, Tried
from pytest_neuronsupport.bisect.trial import Trial, candidate_script, needs_of, with_checkpoint
from pytest_neuronsupport.dataset.bisect import BISECT
from pytest_neuronsupport.dataset.table import row_to_json
from pytest_neuronsupport.views.failures import format_groups, pair_failures
from pytest_neuronsupport.views.lookup import lookup
from pytest_neuronsupport.views.page import write_page
from tests.results_for_tests import T0, pair_of, result_row, write_results
from tests.wheels_for_tests import NAME, bisectee_index, offline_index

SITE = "torch._subclasses.fake_tensor:dispatch"


def failed(error: str = "TorchRuntimeError: fake tensor call", **more: object) -> dict[str, Any]:
    return {"result": "FAIL(gen)", "error": error, "error_site": SITE, **more}


# --- releases ------------------------------------------------------------------------------------


def test_releases_between_two_versions_come_oldest_first_ends_included() -> None:
    listed = ["5.25.0", "5.24.0", "5.22.1", "5.22.0", "5.21.0", "5.19.0", "5.26.0rc1", "junk"]
    found = versions.between("transformers", listed, "5.21.0", "5.25.0")
    assert found.versions == ("5.21.0", "5.22.0", "5.22.1", "5.24.0", "5.25.0")
    assert found.between == 3
    with pytest.raises(versions.VersionsError, match="must be older"):
        versions.between("transformers", listed, "5.25.0", "5.24.0")
    with pytest.raises(versions.VersionsError, match="not a version"):
        versions.between("transformers", listed, "five", "5.24.0")


def test_the_releases_are_those_pips_index_offers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_index(monkeypatch, bisectee_index(tmp_path / "index"))
    found = versions.releases(NAME, "1.0", "1.5")
    assert found.versions == ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5")
    with pytest.raises(versions.VersionsError, match="no release"):
        versions.releases("no-such-package-for-tests", "1.0", "2.0")


def test_a_candidate_that_cannot_install_or_import_is_a_skip_made_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_index(monkeypatch, bisectee_index(tmp_path / "index"))
    good = environments.candidate(NAME, "1.2", tmp_path / "cache")
    assert good.skip is None and good.folder is not None and not good.cached
    assert (good.folder / NAME / "__init__.py").is_file()
    broken = environments.candidate(NAME, "1.1", tmp_path / "cache")
    assert broken.skip is not None and broken.skip.startswith("pip cannot install it:")
    unimportable = environments.candidate(NAME, "1.3", tmp_path / "cache")
    assert unimportable.skip == (
        "it does not import here: ImportError: bisectee_for_tests: needs a library this "
        "machine lacks"
    )
    again = environments.candidate(NAME, "1.1", tmp_path / "cache")
    assert again.cached and again.skip == broken.skip  # remembered: pip is not asked again


def test_the_environments_own_version_needs_no_overlay(tmp_path: Path) -> None:
    import transformers

    here = environments.candidate("transformers", transformers.__version__, tmp_path)
    assert here.folder is None and here.skip is None
    assert here.said == "the environment's own"
    assert not (tmp_path / environments.ENVIRONMENTS).exists()  # nothing installed


# --- outcomes ------------------------------------------------------------------------------------


def test_bad_is_the_same_failure_otherwise_is_another() -> None:
    target = signature(failed())
    assert target == Signature("FAIL(gen)", "TorchRuntimeError", f"site {SITE}")
    assert judge({"result": "PASS"}, target) is Outcome.GOOD
    assert judge(failed("TorchRuntimeError: another message, same place"), target) is Outcome.BAD
    assert judge(failed("ValueError: no"), target) is Outcome.OTHERWISE
    assert judge({**failed(), "result": "FAIL(forward)"}, target) is Outcome.OTHERWISE
    assert judge(failed("ValueError: no"), None) is Outcome.BAD  # the bad end decides


def test_a_wrong_output_is_told_apart_by_its_checks_rule() -> None:
    tokens = {"result": "FAIL(output)", "check": json.dumps({"rule": "tokens"}), "cpu_match": "N"}
    english = {**tokens, "check": json.dumps({"rule": "english"})}
    target = signature(tokens)
    assert target is not None and target.where == "rule tokens"
    assert judge(tokens, target) is Outcome.BAD
    assert judge(english, target) is Outcome.OTHERWISE


# --- the ends ------------------------------------------------------------------------------------


def test_the_ends_default_to_the_newest_pass_and_the_oldest_later_failure(tmp_path: Path) -> None:
    rows = [
        result_row("org/m", "PASS", library_version="5.23.0"),
        result_row("org/m", "PASS", library_version="5.24.0", minutes=1),
        result_row("org/m", "FAIL(gen)", library_version="5.25.0", minutes=2),
        result_row("org/m", "FAIL(gen)", library_version="5.26.0", minutes=3),
        result_row("org/m", "PASS", compiler="aot_eager", library_version="5.26.0", minutes=4),
    ]
    write_results(tmp_path, rows)
    ends = find_ends(tmp_path, "org/m", "transformers")
    assert (ends.good, ends.bad) == ("5.24.0", "5.25.0")
    assert ends.pair == pair_of(rows[2])
    assert ends.script == rows[2]["run_py"]
    assert ends.good_row is not None and version_in(ends.good_row, "transformers") == "5.24.0"
    given = find_ends(tmp_path, "org/m", "transformers", good="5.20.0", bad="5.26.0")
    assert (given.good, given.bad, given.good_row) == ("5.20.0", "5.26.0", None)
    assert given.script == rows[3]["run_py"]


def test_no_ends_say_why(tmp_path: Path) -> None:
    write_results(tmp_path, [result_row("org/m", "FAIL(gen)", library_version="5.25.0")])
    with pytest.raises(EndsError, match="give --good and --bad"):
        find_ends(tmp_path, "org/m", "transformers")
    with pytest.raises(EndsError, match="sweep it first"):
        find_ends(tmp_path, "org/other", "transformers")
    ends = find_ends(tmp_path, "org/m", "accelerate", good="1.0.0", bad="1.1.0")
    assert ends.bad_row is None and ends.script  # a package the rows do not record


# --- a candidate's script ------------------------------------------------------------------------

RUN_PY = """#!/usr/bin/env python3
# pytest-neuronsupport run, standalone
# model: "zoo:bert"
# stack: accelerate "1.16.0", python "3.11.7", torch "2.13.0+cpu", transformers "5.25.0"
# pip install "transformers==5.25.0" "accelerate==1.16.0" "sentencepiece"
PARAMS = {
    'model_id': 'zoo:bert',
    'checkpoint': '/gone/zoo/bert',
}
"""


def test_a_candidates_script_says_the_candidate_in_its_header() -> None:
    text = candidate_script(RUN_PY, "transformers", "5.24.0", "transformers")
    assert 'transformers "5.24.0"' in text and 'transformers "5.25.0"' not in text
    assert '# pip install "transformers==5.24.0" "accelerate==1.16.0" "sentencepiece"' in text
    assert '# bisect: "transformers" at "5.24.0", the rest as recorded' in text
    moved = candidate_script(RUN_PY, "tokenizers", "0.22.0", None)
    assert '"tokenizers==0.22.0" "transformers==5.25.0"' in moved
    assert needs_of(RUN_PY) == ("sentencepiece",)
    assert needs_of(moved, "tokenizers") == ("sentencepiece",)


def test_a_zoo_checkpoint_gone_is_the_one_of_this_cache(zoo_cache: Path) -> None:
    script = RUN_PY.replace("zoo:bert", "zoo:bert-mlm")
    here = with_checkpoint(script, "zoo:bert-mlm", zoo_cache)
    assert "'/gone/zoo/bert'" not in here and str(zoo_cache) in here
    assert with_checkpoint(script, "org/hub-model", zoo_cache) == script


# --- the report and its row ----------------------------------------------------------------------


def _place(kind: str, run: int) -> Place:
    return Place(kind, run, 0, 0, 0, 2)


def report(tmp_path: Path) -> Report:
    """A bisection of 5.23.0..5.25.0 that found 5.25.0, as the search leaves it."""
    scripts = {v: tmp_path / v / "run.py" for v in ("5.24.0", "5.25.0")}
    for version, script in scripts.items():
        script.parent.mkdir(parents=True)
        script.write_text(f"# run.py at {version}\n", encoding="utf-8")
    bad = Trial("5.25.0", Outcome.BAD, failed(), signature(failed()), scripts["5.25.0"])
    good = Trial("5.24.0", Outcome.GOOD, {"result": "PASS"}, None, scripts["5.24.0"])
    first = Trial("5.23.0", Outcome.GOOD, {"result": "PASS"}, None, tmp_path / "x")
    trials = [bad, first, good, good, bad]
    kinds = ["bad end", "good end", "step", "confirm", "confirm"]
    indices = {"5.23.0": 0, "5.24.0": 1, "5.25.0": 2}
    found = Found(Status.FOUND, 1, 2)
    found.tried = [
        Tried(indices[t.version], t.outcome, _place(k, n))
        for n, (t, k) in enumerate(zip(trials, kinds, strict=True), 1)
    ]
    return Report(
        "zoo:arch/BertLMHeadModel", "transformers", "5.23.0", "5.25.0",
        ("5.23.0", "5.24.0", "5.25.0"), found, trials, T0,
        context={"architecture": "BertLMHeadModel", "config_flags": {"is_decoder": False}},
    )  # fmt: skip


def test_the_answer_names_both_ends_their_errors_scripts_and_flags(tmp_path: Path) -> None:
    found = report(tmp_path)
    text = "\n".join(found.lines())
    assert text.startswith(
        "zoo:arch/BertLMHeadModel: broke in transformers 5.25.0; last passing transformers 5.24.0"
    )
    assert "first failing 5.25.0: FAIL(gen)  TorchRuntimeError: fake tensor call" in text
    assert "last passing 5.24.0: PASS" in text
    assert str(tmp_path / "5.25.0" / "run.py") in text
    assert "config flags: is_decoder=false" in text
    assert "3 runs (binary search needs the 2 ends and at most 1 step)" in text
    data = found.to_json()
    assert (data["first_bad"], data["last_good"], data["runs"], data["confirm_runs"]) == (
        "5.25.0",
        "5.24.0",
        3,
        2,
    )
    assert [t["place"] for t in data["trials"]][:2] == ["bad end", "good end"]


def test_the_row_fits_the_bisect_table(tmp_path: Path) -> None:
    row = row_to_json(report(tmp_path).row({"torch": "2.13.0"}, {"device": "cpu"}), BISECT)
    assert row["answer"] == "broke in transformers 5.25.0"
    assert (row["result"], row["first_bad"], row["last_good"]) == ("FAIL(gen)", "5.25.0", "5.24.0")
    assert row["run_py"] == "# run.py at 5.25.0\n" and row["run_py_good"] == "# run.py at 5.24.0\n"
    assert row["tried"] == ["5.25.0 bad", "5.23.0 good", "5.24.0 good", "5.24.0 good", "5.25.0 bad"]


# --- what a sweep bisects ------------------------------------------------------------------------


def test_a_sweep_bisects_the_package_that_moved() -> None:
    base, now = "inductor-2.13.0/transformers-5.24.0", "inductor-2.13.0/transformers-5.25.0"
    assert aftersweep.package_and_good(None, base, now) == ("transformers", "5.24.0")
    newer_torch = "inductor-2.14.0/transformers-5.24.0"
    assert aftersweep.package_and_good(None, base, newer_torch) == ("torch", "2.13.0")
    neuron = ("neuronxcc-2.21.0/transformers-5.24.0", "neuronxcc-2.22.1/transformers-5.24.0")
    assert aftersweep.package_and_good(None, *neuron) == ("neuronx-cc", "2.21.0")
    assert aftersweep.package_and_good("accelerate==1.2.0", base, base) == ("accelerate", "1.2.0")
    with pytest.raises(ValueError, match="nothing moved"):
        aftersweep.package_and_good(None, base, base)
    with pytest.raises(ValueError, match="give its good version"):
        aftersweep.package_and_good("accelerate", base, now)


def test_without_a_baseline_the_previous_pair_is_compared(tmp_path: Path) -> None:
    rows = [
        result_row("org/a", "PASS", library_version="5.23.0"),
        result_row("org/a", "PASS", library_version="5.24.0"),
        result_row("org/a", "FAIL(gen)", library_version="5.25.0"),
        result_row("org/b", "PASS", compiler="aot_eager", library_version="5.24.0"),
    ]
    write_results(tmp_path, rows)
    now = pair_of(rows[2])
    assert aftersweep.previous_pair(tmp_path, now) == "inductor-2.13.0/transformers-5.24.0"
    where = aftersweep.against(tmp_path, now, None)
    assert where is not None and where.results == {"org/a": "PASS"}
    assert [r["model_id"] for r in aftersweep.newly_failing([rows[2]], where)] == ["org/a"]


# --- the compiler --------------------------------------------------------------------------------


def test_the_compiler_bisectors_answer_is_read_from_its_output() -> None:
    output = (
        "Disabling post_grad_passes fixed the issue.\n"
        "Bisection complete: BisectionResult(backend='inductor', subsystem='post_grad_passes', "
        "bisect_number=1, debug_info='post_grad_custom_pre_pass')\n"
    )
    assert compiler.parse_result(output) == {
        "backend": "inductor",
        "subsystem": "post_grad_passes",
        "bisect_number": 1,
        "debug_info": "post_grad_custom_pre_pass",
    }
    assert compiler.parse_result("Bisection complete: no issue found\n") is None
    script = compiler.bisected_script('x = 1\nif __name__ == "__main__":\n    main()\n')
    assert script.index("bisect_keep_custom_backend_for_inductor") < script.index("__main__")


# --- what the views show -------------------------------------------------------------------------


def test_lookup_failures_and_the_page_show_which_release_broke_it(tmp_path: Path) -> None:
    rows = [
        result_row("org/a", "FAIL(gen)", library_version="5.25.0", error_site=SITE),
        result_row("org/b", "FAIL(gen)", library_version="5.25.0", error_site=SITE),
    ]
    write_results(tmp_path, rows)
    pair = pair_of(rows[0])
    bisection = {
        "result": "FAIL(gen)", "kind": "release", "package": "transformers", "good": "5.20.0",
        "bad": "5.25.0", "first_bad": "5.25.0", "last_good": "5.24.0", "status": "found",
        "answer": "broke in transformers 5.25.0", "tested_at": T0 + dt.timedelta(hours=1),
    }  # fmt: skip
    older = {**bisection, "good": "5.24.1", "first_bad": None, "last_good": None,
             "status": "the good end fails", "tested_at": T0 + dt.timedelta(hours=2),
             "answer": "transformers 5.24.1 (the good end) fails here too"}  # fmt: skip
    record(tmp_path, pair, [{"model_id": "org/a", **bisection}, {"model_id": "org/a", **older}])
    said = "broke in transformers 5.25.0 (last passing 5.24.0)"
    found = "\n".join(lookup(tmp_path, "org/a"))
    assert f"bisected transformers 5.20.0..5.25.0: {said}" in found
    assert "bisected transformers 5.24.1..5.25.0: transformers 5.24.1 (the good end)" in found
    pair_file, groups = pair_failures(tmp_path)
    text = format_groups(groups, pair_file)
    assert f"org/a  FAIL(gen)  {said}" in text and "org/b  FAIL(gen)\n" in text
    assert "new failures by the release that broke them" in text
    assert "  transformers 5.25.0: org/a\n" in text
    page = write_page(tmp_path, tmp_path / "page").read_text(encoding="utf-8")
    assert page.count(said) >= 2  # the row's details (its data) and the Failures view
    assert "New failures by the release that broke them" in page
