"""The TOML the project writes (baselines, model lists), written by tomlkit: any id reads back
as it was, and `neuronsupport baseline update` keeps what a user wrote in an existing file."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pytest_neuronsupport import baseline, selection
from pytest_neuronsupport.baseline import Baseline, Expected
from tests.results_for_tests import result_row, write_results

EXE = Path(sys.executable).parent / "neuronsupport"
PAIR = "inductor-2.13.0/transformers-5.24.0"
ODD_IDS = [
    'org/"quoted"',
    "back\\slash\\",
    "ünïcødé/模型 ✓",
    "new\nline\r\n",
    "tab\tdel\x7fnul\x00esc\x1b",
    "'single' = \"both\" # not a comment",
    "[expected]",
]


@pytest.mark.parametrize("model_id", ODD_IDS)
def test_any_id_round_trips_through_the_baseline(tmp_path: Path, model_id: str) -> None:
    path = tmp_path / "expected.toml"
    first = Baseline(model_id, {model_id: Expected("FAIL(gen)", flaky=True), "b": Expected("PASS")})
    baseline.write(path, first)
    assert baseline.read(path) == first
    # and through an update of that file
    second = Baseline(PAIR, {model_id: Expected("PASS", graph_breaks=1), "a": Expected("PASS")})
    baseline.write(path, second)
    assert baseline.read(path) == second


@pytest.mark.parametrize("model_id", ODD_IDS)
def test_any_id_round_trips_through_the_model_list(model_id: str) -> None:
    entries = [
        selection.Entry(model_id, model_id, model_id, 1),
        selection.Entry("org/m", None, "fill-mask", None, model_id, model_id),
    ]
    text = selection.list_text(entries, {"endpoint": model_id, "at": "now"})
    assert tomllib.loads(text)["model"] == [
        {"id": model_id, "revision": model_id, "task": model_id, "selection_rank": 1},
        {"id": "org/m", "task": "fill-mask", "exclusion": model_id, "notes": model_id},
    ]
    assert text.count("[[model]]\n") == 2 and text.startswith("# Written by")


def test_baseline_update_keeps_the_users_comments_and_unchanged_entries(tmp_path: Path) -> None:
    results = write_results(
        tmp_path / "results",
        [
            result_row("zoo:c"),
            result_row("zoo:a"),
            result_row("zoo:b", "FAIL(gen)"),
            result_row("zoo:d"),
            result_row("zoo:z"),
        ],
    )
    out = tmp_path / "expected.toml"
    out.write_text(
        "# Our expectations: ask the compiler team before changing one.\n"
        f'pair = "{PAIR}"  # the release we ship\n'
        "\n"
        "[expected]\n"
        "# encoders\n"
        '"zoo:c" = { result = "PASS", flaky = true }  # flaky on small machines\n'
        '"zoo:a" = "PASS"  # our reference\n'
        "# decoders\n"
        '"zoo:b" = "PASS"  # regressed in 2.13?\n'
        '"zoo:gone" = "PASS"\n'
        "# the end of the list\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [str(EXE), "baseline", "update", "--results", str(results), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8") == (
        "# Our expectations: ask the compiler team before changing one.\n"
        f'pair = "{PAIR}"  # the release we ship\n'
        "\n"
        "[expected]\n"
        "# encoders\n"
        '"zoo:c" = { result = "PASS", flaky = true }  # flaky on small machines\n'
        '"zoo:a" = "PASS"  # our reference\n'
        "# decoders\n"
        '"zoo:b" = "FAIL(gen)"  # regressed in 2.13?\n'  # changed, in place
        '"zoo:d" = "PASS"\n'  # new, before the first id after its own
        '"zoo:z" = "PASS"\n'  # new, after the last entry
        "# the end of the list\n"
    )
    assert baseline.read(out) == Baseline(
        PAIR,
        {
            "zoo:a": Expected("PASS"),
            "zoo:b": Expected("FAIL(gen)"),
            "zoo:c": Expected("PASS", flaky=True),
            "zoo:d": Expected("PASS"),
            "zoo:z": Expected("PASS"),
        },
    )


def test_a_file_that_cannot_be_updated_is_written_afresh(tmp_path: Path) -> None:
    path = tmp_path / "expected.toml"
    wanted = Baseline(PAIR, {"zoo:a": Expected("PASS")})
    for old in ("not toml [", 'other = 1\n[expected]\n"zoo:a" = "PASS"\n'):
        path.write_text(old, encoding="utf-8")
        baseline.write(path, wanted)
        assert baseline.read(path) == wanted
        assert path.read_text(encoding="utf-8") == baseline.text(wanted)
    path.write_text('pair = "p"\n[expected."zoo:a"]\nresult = "PASS"\n', encoding="utf-8")
    baseline.write(path, Baseline(PAIR, {"zoo:a": Expected("FAIL(gen)")}))
    assert baseline.read(path).expected == {"zoo:a": Expected("FAIL(gen)")}
