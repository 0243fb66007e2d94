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
from pytest_neuronsupport.views.lookup import PairError, diff, lookup, resolve_pair
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
        f"3 model(s) differ between {OLD} (a) and data/{NEW}.parquet (b)",
        "zoo:llama: PASS -> FAIL(gen)",
        "  b: RuntimeError: zoo:llama broke",
        "zoo:only-new: no row -> EXCLUDED",
        "zoo:t5: FAIL(load) -> PASS",
        "  a: RuntimeError: zoo:t5 broke",
    ]
    as_csv = neuronsupport("diff", OLD, NEW, "--results", str(results), "--format", "csv")
    table = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(r["model_id"], r["result_a"], r["result_b"]) for r in table] == [
        ("zoo:llama", "PASS", "FAIL(gen)"),
        ("zoo:only-new", "", "EXCLUDED"),
        ("zoo:t5", "FAIL(load)", "PASS"),
    ]
    as_json = neuronsupport("diff", OLD, NEW, "--results", str(results), "--format", "json")
    assert json.loads(as_json.stdout)[0] == {
        "model_id": "zoo:llama",
        "result_a": "PASS",
        "result_b": "FAIL(gen)",
        "error_a": "",
        "error_b": "RuntimeError: zoo:llama broke",
    }
    same = diff(results, NEW, NEW)
    assert same == []


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
