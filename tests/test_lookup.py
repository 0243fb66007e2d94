"""``neuronsupport lookup`` and ``diff`` on a dataset of several pairs, run as a user runs them."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_neuronsupport.dataset.layout import run_dir
from pytest_neuronsupport.views.lookup import (
    PairError,
    diff,
    format_changes,
    lookup,
    resolve_pair,
    split_models,
)
from tests.results_for_tests import result_row, write_results

EXE = Path(sys.executable).parent / "neuronsupport"
OLD, NEW = "inductor-2.9.0/transformers-5.24.0", "inductor-2.13.0/transformers-5.24.0"


def neuronsupport(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two compilers (2.9.0 older than 2.13.0, in version order, not text order) and a
    neuronxcc pair; the newer inductor breaks llama and mends t5."""
    rows = [
        result_row("zoo:llama", compiler_version="2.9.0", wall_s=3.0),
        result_row("zoo:llama", "FAIL(gen)", compiler_version="2.13.0", neuron_cores=2),
        result_row("zoo:t5", "FAIL(load)", compiler_version="2.9.0"),
        result_row("zoo:t5", compiler_version="2.13.0"),
        result_row("zoo:bert", compiler_version="2.9.0"),
        result_row("zoo:bert", compiler_version="2.13.0"),
        result_row("zoo:only-new", "EXCLUDED", compiler_version="2.13.0", notes="too large"),
        result_row("Org/Llama-3", compiler="neuronxcc", compiler_version="2.21.1", device="neuron"),
    ]
    path = write_results(tmp_path / "results", rows)
    script = run_dir(path, NEW + ".parquet", "zoo:llama") / "run.py"
    script.parent.mkdir(parents=True)
    script.write_text("print('run')\n", encoding="utf-8")
    return path


def test_lookup_lists_each_pair_newest_compiler_first(results: Path) -> None:
    done = neuronsupport("lookup", "LLAMA", "--results", str(results))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Org/Llama-3"  # part of a name, any case
    llama = lines.index("zoo:llama")
    assert lines[llama + 1].split()[:2] == [NEW, "FAIL(gen)"]
    assert "cores=2" in lines[llama + 1] and "RuntimeError: zoo:llama broke" in lines[llama + 1]
    assert (
        lines[llama + 2].strip()
        == f"run.py: {run_dir(results, NEW + '.parquet', 'zoo:llama')}/run.py"
    )
    assert lines[llama + 3].split()[:2] == [OLD, "PASS"]
    assert "wall=3s" in lines[llama + 3] and "mem=0.25/16 GB" in lines[llama + 3]
    assert lines[llama + 4].strip() == "run.py: (not here)"
    missing = neuronsupport("lookup", "gpt-j", "--results", str(results))
    assert missing.returncode == 1 and "no model matching 'gpt-j'" in missing.stdout


def test_diff_names_the_models_that_changed_in_each_format(results: Path) -> None:
    text = neuronsupport("diff", OLD, "data/" + NEW + ".parquet", "--results", str(results))
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == [
        f"2 model(s) differ between {OLD} (a) and data/{NEW}.parquet (b),"
        " over the 3 model(s) in both",
        "zoo:llama: PASS -> FAIL(gen)",
        "  b: RuntimeError: zoo:llama broke",
        "zoo:t5: FAIL(load) -> PASS",
        "  a: RuntimeError: zoo:t5 broke",
        "1 model(s) only in b, not compared:",
        "  zoo:only-new: EXCLUDED",
    ]
    as_csv = neuronsupport("diff", OLD, NEW, "--results", str(results), "--format", "csv")
    table = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(r["model_id"], r["result_a"], r["result_b"], r["only_in"]) for r in table] == [
        ("zoo:llama", "PASS", "FAIL(gen)", ""),
        ("zoo:t5", "FAIL(load)", "PASS", ""),
        ("zoo:only-new", "", "EXCLUDED", "b"),  # apart: after the changes
    ]
    assert {r["in_both"] for r in table} == {"3"}
    as_json = neuronsupport("diff", OLD, NEW, "--results", str(results), "--format", "json")
    records = json.loads(as_json.stdout)
    assert records[0] == {
        "model_id": "zoo:llama",
        "result_a": "PASS",
        "result_b": "FAIL(gen)",
        "error_a": "",
        "error_b": "RuntimeError: zoo:llama broke",
        "only_in": None,
        "moved": "",
        "reference_hosts": "",
        "in_both": 3,
        "pair_reference_hosts": "",
    }
    assert [(r["model_id"], r["only_in"]) for r in records[1:]] == [
        ("zoo:t5", None),
        ("zoo:only-new", "b"),
    ]
    same = diff(results, NEW, NEW)
    assert (same.changes, same.only_a, same.only_b, same.in_both) == ([], [], [], 4)


def test_diff_sets_apart_the_models_of_one_pair_only_on_either_side(tmp_path: Path) -> None:
    """Two pairs that tested different models: the changes are over the models in both alone;
    a model with a row on one side only is listed apart, whichever side, never as a change."""
    rows = [
        result_row("zoo:both-same", compiler_version="2.9.0"),
        result_row("zoo:both-same"),
        result_row("zoo:both-broke", compiler_version="2.9.0"),
        result_row("zoo:both-broke", "FAIL(forward)"),
        result_row("zoo:gone", "FAIL(load)", compiler_version="2.9.0"),
        result_row("zoo:came", "FAIL(gen)"),
        result_row("zoo:came-too"),
    ]
    results = write_results(tmp_path / "results", rows)
    found = diff(results, OLD, NEW)
    assert found.in_both == 2
    assert [(c.model_id, c.result_a, c.result_b) for c in found.changes] == [
        ("zoo:both-broke", "PASS", "FAIL(forward)")
    ]
    assert [(c.model_id, c.result_a, c.only_in) for c in found.only_a] == [
        ("zoo:gone", "FAIL(load)", "a")
    ]
    assert [(c.model_id, c.result_b, c.only_in) for c in found.only_b] == [
        ("zoo:came", "FAIL(gen)", "b"),
        ("zoo:came-too", "PASS", "b"),
    ]
    text = format_changes(found, OLD, NEW, "text").splitlines()
    assert text[0].endswith("(b), over the 2 model(s) in both")
    assert text[3:] == [
        "1 model(s) only in a, not compared:",
        "  zoo:gone: FAIL(load)",
        "2 model(s) only in b, not compared:",
        "  zoo:came: FAIL(gen)",
        "  zoo:came-too: PASS",
    ]
    swapped = diff(results, NEW, OLD)  # the sides follow the arguments
    assert [c.model_id for c in swapped.only_a] == ["zoo:came", "zoo:came-too"]
    assert [c.model_id for c in swapped.only_b] == ["zoo:gone"]


def test_split_models_sorts_each_side_as_the_page_does() -> None:
    split = split_models(["m10", "m2", "both"], ["both", "m3"])
    assert (split.both, split.only_a, split.only_b) == (["both"], ["m2", "m10"], ["m3"])


def test_an_unknown_pair_is_refused_naming_the_pairs_there_are(results: Path) -> None:
    with pytest.raises(PairError, match=r"pairs there: inductor-2\.13\.0/transformers-5\.24\.0, "):
        resolve_pair(results, "inductor-9.9/transformers-5.24.0")
    with pytest.raises(PairError):
        resolve_pair(results, "../../etc/passwd")
    done = neuronsupport("diff", OLD, "nope", "--results", str(results))
    assert done.returncode == 2 and "no pair 'nope'" in done.stderr
    empty = neuronsupport("lookup", "x", "--results", str(results / "elsewhere"))
    assert empty.returncode == 2 and "no results dataset at" in empty.stderr


def test_lookup_counts_an_unchecked_pass_apart_with_why(tmp_path: Path) -> None:
    check = json.dumps(
        {"cpu_comparison": "the run used 2 cores", "judge": "the judge j could not run"}
    )
    rows = [
        result_row("zoo:llama", checked_by="cpu"),
        result_row("zoo:llama-2core", checked_by="none", check=check, notes="Hi | unchecked: ..."),
    ]
    found = lookup(write_results(tmp_path / "results", rows), "llama")
    checked, unchecked = found[1], found[4]
    assert checked.split()[1] == "PASS" and "unchecked" not in checked
    assert unchecked.split()[1:3] == ["PASS", "unchecked"]
    assert "(judge unavailable) Hi | unchecked" in unchecked


def test_diff_says_which_side_of_the_float64_check_moved_for_a_new_output_failure(
    tmp_path: Path,
) -> None:
    """A model that newly fails its output check: its row says how far off it is, and the
    diff which side moved, the device's error or the reference's noise (a new dtype or
    library): by more than 1.5x either way; one whose numbers stayed says nothing."""
    said = "N scores at tokens 0-31: error to fp64 0.02, 9.1x eager bfloat16's 0.0022"
    numbers = dict(fp64_error_device=0.004, fp64_error_eager=0.0022, fp64_tolerance=0.0074)
    worse = dict(numbers, fp64_error_device=0.02, fp64_tolerance=0.0074)
    tighter = dict(numbers, fp64_error_eager=1e-7, fp64_tolerance=1.2e-6)
    rows = [
        result_row("zoo:device-moved", compiler_version="2.9.0", **numbers),
        result_row("zoo:device-moved", "FAIL(output)", cpu_match=said, error=None, **worse),
        result_row("zoo:reference-moved", compiler_version="2.9.0", **numbers),
        result_row("zoo:reference-moved", "FAIL(output)", cpu_match="N ...", **tighter),
        result_row("zoo:still", compiler_version="2.9.0", **numbers),
        result_row("zoo:still", "FAIL(gen)", **numbers),
    ]
    found = {c.model_id: c for c in diff(write_results(tmp_path / "r", rows), OLD, NEW).changes}
    assert found["zoo:device-moved"].moved == "the device's error to fp64 grew, 0.004 -> 0.02"
    assert found["zoo:device-moved"].error_b == said  # the check's words: how far off
    assert found["zoo:reference-moved"].moved == (
        "the reference's error to fp64 shrank, 0.0022 -> 1e-07"
    )
    assert found["zoo:still"].moved == ""
    text = format_changes(diff(tmp_path / "r", OLD, NEW), OLD, NEW, "text")
    assert "  moved: the device's error to fp64 grew, 0.004 -> 0.02" in text.splitlines()


def test_diff_warns_when_the_pairs_compiled_under_different_fullgraph_policies(
    tmp_path: Path,
) -> None:
    """A Neuron pair (fullgraph=True) against a CPU one: a model whose graph breaks fails on
    one and passes on the other, so the diff says the policies differ, in every format (on
    stderr beside a table); pairs of one policy, or that do not record it, get no warning."""
    neuron = "neuronxcc-2.33.0/transformers-5.24.0"
    rows = [
        result_row("zoo:breaks", fullgraph=False),
        result_row("zoo:same", fullgraph=False),
        result_row("zoo:breaks", "FAIL(gen)", compiler="neuronxcc", compiler_version="2.33.0"),
        result_row("zoo:same", compiler="neuronxcc", compiler_version="2.33.0", fullgraph=True),
        result_row("zoo:same", compiler_version="2.9.0"),  # a file without the column
    ]
    results = write_results(tmp_path / "results", rows)
    found = diff(results, NEW, neuron)
    assert found.warning is not None
    assert f"fullgraph=True: {neuron}; fullgraph=False: {NEW}" in found.warning
    text = format_changes(found, NEW, neuron, "text").splitlines()
    assert text[1] == found.warning and text[2] == "zoo:breaks: PASS -> FAIL(gen)"
    done = neuronsupport("diff", NEW, neuron, "--results", str(results), "--format", "json")
    assert done.returncode == 0 and json.loads(done.stdout)[0]["model_id"] == "zoo:breaks"
    assert done.stderr.strip() == found.warning
    assert diff(results, OLD, NEW).warning is None  # the older pair does not say
    assert diff(results, NEW, NEW).warning is None


#: Two kinds of host a reference may come from: this machine's, and a Sapphire Rapids'.
EPYC = dict(reference_cpu="AMD EPYC", reference_isa="Intel AVX2", reference_threads=2)
XEON = dict(
    reference_cpu="Intel(R) Xeon(R) Platinum 8488C",
    reference_isa="Intel AVX10.1 and Intel AMX with bfloat16 and 8-bit integer support",
    reference_threads=8,
)


def test_diff_says_when_two_pairs_references_came_from_different_kinds_of_host(
    tmp_path: Path,
) -> None:
    """A "regression" between two pairs can be a change of host: the diff says so for the pair
    (each side's kinds of host, with their rows) and for each change; the threads alone, or a
    row without a recorded host (an older file), are no other kind."""
    rows = [
        result_row("zoo:llama", compiler_version="2.9.0", **EPYC),
        result_row("zoo:llama", "FAIL(output)", cpu_match="N at token 0", **XEON),
        result_row("zoo:t5", compiler_version="2.9.0", **EPYC),
        result_row("zoo:t5", **XEON),
        result_row("zoo:old", compiler_version="2.9.0"),
        result_row("zoo:old", "FAIL(gen)"),
    ]
    found = diff(write_results(tmp_path / "r", rows), OLD, NEW)
    epyc, xeon = "AMD EPYC, Intel AVX2", f"{XEON['reference_cpu']}, {XEON['reference_isa']}"
    assert found.reference_hosts == f"a: {epyc} (2). b: {xeon} (2)"
    changed = {c.model_id: c.reference_hosts for c in found.changes}
    assert changed == {"zoo:llama": f"a: {epyc} (1). b: {xeon} (1)", "zoo:old": ""}
    text = format_changes(found, OLD, NEW, "text").splitlines()
    assert text[1] == f"their CPU references came from different kinds of host: a: {epyc} (2)." + (
        f" b: {xeon} (2)"
    )
    assert f"  reference hosts: a: {epyc} (1). b: {xeon} (1)" in text
    same = [result_row("zoo:x", compiler_version="2.9.0", **EPYC), result_row("zoo:x", **EPYC)]
    same[1]["reference_threads"] = 64
    alike = diff(write_results(tmp_path / "same", same), OLD, NEW)
    assert alike.reference_hosts == "" and "kinds of host" not in format_changes(
        alike, OLD, NEW, "text"
    )
