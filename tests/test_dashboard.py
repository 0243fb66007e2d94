"""``neuronsupport dashboard``: each pair's figures against the previous pair's, from rows written
with the dataset writer (no sweep), and the command."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.cli import main as cli_main
from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.merge import merge_journals
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.views.dashboard import (
    Dashboard,
    dashboard,
    dashboard_report,
    grid,
    history,
    page_dashboard,
)
from tests.results_for_tests import perf_row, result_row, write_results

OLD = "inductor-2.9.1 / transformers-5.24.0"
NEW = "inductor-2.13.0 / transformers-5.24.0"
EAGER = "aot_eager-2.13.0 / transformers-5.24.0"
_OLD: dict[str, Any] = {"compiler_version": "2.9.1"}


def _support_rows() -> list[dict[str, Any]]:
    return [
        # the older inductor: a, c PASS (c unchecked), b failed, d excluded
        result_row("org/a", compile_s=10.0, graphs_cached=0, graphs_compiled=2, **_OLD),
        result_row(
            "org/b", "FAIL(gen)", graph_breaks=2, graphs_cached=1, graphs_compiled=1, **_OLD
        ),
        result_row("org/c", checked_by="none", **_OLD),
        result_row("org/d", "EXCLUDED", exclusion="remote code", **_OLD),
        # the newer one: a (an older row of it replaced by a later one) and b pass, c fails
        result_row("org/a", "FAIL(other)", compile_s=99.0),
        result_row("org/a", compile_s=5.0, minutes=5, graphs_cached=2, graphs_compiled=0),
        result_row("org/b", graph_breaks=1, graphs_cached=0, graphs_compiled=1),
        result_row("org/c", "FAIL(load)"),
        result_row("org/d", "EXCLUDED", exclusion="remote code"),
        # another compiler: one PASS, no compile_s column at all
        result_row("org/a", compiler="aot_eager"),
    ]


def _perf_rows() -> dict[str, list[dict[str, Any]]]:
    new = "inductor-2.13.0/transformers-5.24.0.parquet"
    old = "inductor-2.9.1/transformers-5.24.0.parquet"
    return {
        new: [
            # org/a: two configurations, 2x and 8x: 4x for the model
            perf_row(
                "org/a",
                "b1-s128-dp1",
                speedup_vs_eager=2.0,
                compile_s=50.0,
                wide_interval=False,
                peak_gb=2.0,
                eager_peak_gb=1.0,
            ),
            perf_row(
                "org/a",
                "b8-s128-dp1",
                speedup_vs_eager=8.0,
                wide_interval=False,
                peak_gb=3.0,
                eager_peak_gb=1.5,
            ),
            perf_row(
                "org/b",
                "b1-s128-dp1",
                speedup_vs_eager=1.0,
                compile_s=7.0,
                wide_interval=False,
                peak_gb=1.0,
                eager_peak_gb=2.0,
            ),
            # a figure whose interval is too wide: left out of the geomean
            perf_row("org/c", "b1-s128-dp1", speedup_vs_eager=100.0, wide_interval=True),
            perf_row("org/e", "b1-s128-dp1", result="FAIL(gen)", speedup_vs_eager=None),
        ],
        # an older file: no wide_interval, no peak columns
        old: [perf_row("org/a", "b1-s128-dp1", speedup_vs_eager=1.5, compile_s=12.0)],
    }


def _write(results: Path) -> Path:
    write_results(results, _support_rows())
    with Journal(results) as journal:
        for pair, rows in _perf_rows().items():
            for row in rows:
                journal.append(pair, row, PERF)
        path = journal.path
    assert merge_journals(results, include=[path]).ok
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture(scope="module")
def board(results: Path) -> Dashboard:
    return dashboard(results)


def _columns(board: Dashboard) -> dict[str, Any]:
    return {column.pair: column for column in board.columns}


def test_one_column_per_pair_in_version_order_against_the_same_compilers_previous(
    board: Dashboard,
) -> None:
    assert [c.pair for c in board.columns] == [EAGER, OLD, NEW]  # 2.9.1 before 2.13.0
    assert [c.previous for c in board.columns] == [None, None, OLD]


def test_pass_rate_is_pass_over_tested_with_unchecked_passes_counted_apart(
    board: Dashboard,
) -> None:
    old, new = _columns(board)[OLD], _columns(board)[NEW]
    assert old.tested == 3 and new.tested == 3  # EXCLUDED is not tested
    assert old.metrics["pass_rate"] == pytest.approx(2 / 3)
    assert old.metrics["unchecked"] == 1 and new.metrics["unchecked"] == 0
    assert old.counts["PASS"] == 2 and old.counts["EXCLUDED"] == 1
    assert new.counts == {**dict.fromkeys(new.counts, 0), "PASS": 2, "FAIL(load)": 1, "EXCLUDED": 1}


def test_the_latest_row_of_a_model_counts(board: Dashboard) -> None:
    new = _columns(board)[NEW]
    assert new.counts["FAIL(other)"] == 0
    assert board.figures[NEW]["org/a"].result == "PASS"
    assert board.figures[NEW]["org/a"].compile_s == 5.0  # not the replaced row's 99 s


def test_speedup_is_the_geomean_over_models_of_each_models_geomean(board: Dashboard) -> None:
    new = _columns(board)[NEW]
    assert board.figures[NEW]["org/a"].speedup == pytest.approx(4.0)  # sqrt(2 * 8)
    assert new.metrics["speedup"] == pytest.approx(2.0)  # sqrt(4 * 1): org/a and org/b
    assert new.models["speedup"] == 2
    gsd = math.exp(math.sqrt(((math.log(4) - math.log(2)) ** 2 + (0 - math.log(2)) ** 2) / 1))
    assert new.speedup_spread == {"gsd": pytest.approx(gsd), "min": 1.0, "max": 4.0}


def test_figures_with_a_too_wide_interval_are_left_out_and_counted(board: Dashboard) -> None:
    new = _columns(board)[NEW]
    assert new.left_out == 1
    assert board.figures[NEW]["org/c"].speedup is None
    assert board.figures[NEW]["org/c"].left_out == 1
    assert "[2 models, 1 left out]" in dict(_lines(board))["speedup (geomean)"][2]


def test_a_failed_benchmark_gives_no_figure(board: Dashboard) -> None:
    assert "org/e" not in board.figures[NEW]  # no support row, and a failed benchmark
    assert _columns(board)[NEW].models == {"speedup": 2, "compile": 2, "memory_ratio": 2}


def test_compile_time_of_the_support_row_else_of_its_benchmarks(board: Dashboard) -> None:
    new, old = _columns(board)[NEW], _columns(board)[OLD]
    a, b = board.figures[NEW]["org/a"], board.figures[NEW]["org/b"]
    assert (a.compile_s, a.compile_from) == (5.0, "support")  # not its benchmark's 50 s
    assert (b.compile_s, b.compile_from) == (7.0, "perf")
    assert new.metrics["compile_mean_s"] == pytest.approx(6.0)
    assert new.metrics["compile_p90_s"] == pytest.approx(5 + 0.9 * 2)
    assert old.metrics["compile_mean_s"] == 10.0 and old.models["compile"] == 1
    # the change is over org/a alone, the one model with a compile time in both: 10 s -> 5 s
    assert new.changes["compile_mean_s"] == pytest.approx(-5.0)
    assert new.versus is not None and new.versus.models["compile_mean_s"] == 1


def test_memory_ratio_where_both_peaks_are_recorded_else_none(board: Dashboard) -> None:
    new, old = _columns(board)[NEW], _columns(board)[OLD]
    # org/a: 2/1 and 3/1.5 (2x); org/b: 1/2 (0.5x); over the models: sqrt(2 * 0.5)
    assert new.metrics["memory_ratio"] == pytest.approx(1.0)
    assert old.metrics["memory_ratio"] is None  # an older file without the peak columns
    assert new.changes["memory_ratio"] is None


def test_graph_breaks_are_totalled_and_a_pair_without_any_has_none(board: Dashboard) -> None:
    columns = _columns(board)
    assert columns[OLD].metrics["graph_breaks"] == 2
    assert columns[NEW].metrics["graph_breaks"] == 1
    assert columns[NEW].changes["graph_breaks"] == -1
    assert columns[EAGER].metrics["graph_breaks"] is None


def test_compile_cache_hits_are_the_graphs_it_served_over_those_the_runs_needed(
    board: Dashboard,
) -> None:
    """Inductor's FX graph cache here; on Neuron, TorchNeuron's (test_compile_cache.py)."""
    columns = _columns(board)
    assert columns[OLD].metrics["cache_hits"] == pytest.approx(1 / 4)  # (0 + 1) / (2 + 2)
    assert columns[NEW].metrics["cache_hits"] == pytest.approx(2 / 3)  # (2 + 0) / (2 + 1)
    assert columns[NEW].changes["cache_hits"] == pytest.approx(2 / 3 - 1 / 4)
    assert columns[EAGER].metrics["cache_hits"] is None  # no row records them
    assert dict(_lines(board))["compile cache hits"] == (
        "-",
        "25.0%",
        "66.7% (+41.7 pp over 2 in both: 25.0% -> 66.7%)",
    )


def test_changes_are_signed_against_the_previous_pair(board: Dashboard) -> None:
    columns = _columns(board)
    new = columns[NEW]
    assert new.changes["pass_rate"] == pytest.approx(0.0)
    assert new.changes["speedup"] == pytest.approx(2.5)  # org/a, benchmarked in both: 1.5x -> 4x
    assert new.changes["unchecked"] == -1
    assert new.count_changes["FAIL(gen)"] == -1 and new.count_changes["FAIL(load)"] == 1
    assert all(value is None for value in columns[EAGER].changes.values())
    assert all(value is None for value in columns[OLD].count_changes.values())


def test_the_worst_models_of_each_metric(board: Dashboard) -> None:
    worst = _columns(board)[NEW].worst
    assert [(w.model_id, w.text) for w in worst["pass_rate"]] == [("org/c", "FAIL(load)")]
    assert [w.model_id for w in worst["speedup"]] == ["org/b", "org/a"]  # slowest first
    assert [w.model_id for w in worst["compile_mean_s"]] == ["org/b", "org/a"]  # longest first
    assert next((w.model_id, w.text) for w in worst["memory_ratio"]) == ("org/a", "2.00x")
    assert [(w.model_id, w.text) for w in worst["graph_breaks"]] == [("org/b", "1")]


def _lines(board: Dashboard) -> list[tuple[str, tuple[str, ...]]]:
    return [(line[0], line[1:]) for line in grid(board).cells]


def test_the_table_writes_each_figure_and_its_change(board: Dashboard) -> None:
    table = grid(board)
    assert table.header == ("", EAGER, OLD, NEW)
    lines = dict(_lines(board))
    assert lines["vs"] == ("-", "-", OLD)
    assert lines["tested in both"] == ("-", "-", "3")
    assert (
        lines["tested only in this pair"] == lines["tested only in the previous"] == ("-", "-", "0")
    )
    assert lines["pass rate"] == (
        "100.0%",
        "66.7%",
        "66.7% (+0.0 pp over 3 in both: 66.7% -> 66.7%)",
    )
    assert lines["PASS unchecked"][1:] == ("1", "0 (-1 over 3 in both: 1 -> 0)")
    assert lines["FAIL(load)"] == ("0", "0", "1 (+1 over 3 in both)")
    assert lines["compile time (mean)"] == (
        "-",
        "10.00 s",
        "6.00 s (-5.00 s over 1 in both: 10.00 s -> 5.00 s)",
    )
    assert lines["speedup (geomean)"][1] == "1.50x [1 model]"
    assert lines["speedup (geomean)"][2].endswith("(+2.50x over 1 in both: 1.50x -> 4.00x)")
    # the new pair has a figure, but no model has one in both: no change, and it says why
    assert lines["peak memory compiled/eager"] == ("-", "-", "1.00x (over 0 in both)")


def test_a_pair_with_only_performance_rows_has_a_column(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.append(
            "neuron-2.1.0/transformers-5.24.0.parquet",
            perf_row("org/a", "b1-s128-dp1", speedup_vs_eager=3.0),
            PERF,
        )
    assert merge_journals(tmp_path).ok
    (column,) = dashboard(tmp_path).columns
    assert column.pair == "neuron-2.1.0 / transformers-5.24.0"
    assert column.tested == 0 and column.metrics["pass_rate"] is None
    assert column.metrics["speedup"] == pytest.approx(3.0)


def test_figures_that_are_not_numbers_make_no_figure(tmp_path: Path) -> None:
    pair = "inductor-2.13.0/transformers-5.24.0.parquet"
    with Journal(tmp_path) as journal:
        for row in (
            perf_row("org/a", "b1-s128-dp1", speedup_vs_eager=float("nan"), compile_s=None),
            perf_row("org/b", "b1-s128-dp1", speedup_vs_eager=0.0, peak_gb=1.0, eager_peak_gb=0.0),
        ):
            journal.append(pair, row, PERF)
    assert merge_journals(tmp_path).ok
    (column,) = dashboard(tmp_path).columns
    assert column.models == {"speedup": 0, "compile": 0, "memory_ratio": 0}
    assert column.metrics["speedup"] is None and column.metrics["memory_ratio"] is None
    assert column.speedup_spread == {"gsd": None, "min": None, "max": None}


def test_no_dataset_gives_no_column_and_says_so(tmp_path: Path) -> None:
    assert dashboard(tmp_path).columns == ()
    assert dashboard_report(tmp_path).startswith("no results under")
    assert json.loads(dashboard_report(tmp_path, "json")) == []


def test_history_of_a_model_across_pairs_in_order(board: Dashboard) -> None:
    got = history(board)["org/a"]
    assert [(h["pair"], h["result"], h["compile_s"]) for h in got] == [
        (EAGER, "PASS", None),
        (OLD, "PASS", 10.0),
        (NEW, "PASS", 5.0),
    ]
    assert [h["speedup"] for h in got][1:] == [pytest.approx(1.5), pytest.approx(4.0)]
    assert [h["unchecked"] for h in history(board)["org/c"]] == [True, False]


def test_the_pages_tab_links_the_worst_models_and_plots_each_metric(board: Dashboard) -> None:
    shown = page_dashboard(board, {(NEW, "org/c"): 7})
    assert shown["header"] == grid(board).header
    pass_rate = next(line for line in shown["lines"] if line["cells"][0] == "pass rate")
    points = pass_rate["plot"]["points"]
    assert [p["title"] for p in points] == [f"{EAGER}: 100.0%", f"{OLD}: 66.7%", f"{NEW}: 66.7%"]
    assert points[0]["y"] < points[1]["y"] == points[2]["y"]  # higher is up
    memory = next(line for line in shown["lines"] if line["cells"][0].startswith("peak memory"))
    assert len(memory["plot"]["points"]) == 1  # pairs without a figure have no point
    new = next(entry for entry in shown["worst"] if entry["pair"] == NEW)
    failed = new["metrics"][0]
    assert failed["name"] == "pass rate"
    assert failed["models"] == [
        {"model_id": "org/c", "text": "FAIL(load)", "only_here": False, "index": 7}
    ]
    assert new["metrics"][1]["models"][0]["index"] is None  # no such row on the page


def test_the_json_is_every_column(results: Path, board: Dashboard) -> None:
    columns = json.loads(dashboard_report(results, "json"))
    assert [c["pair"] for c in columns] == [EAGER, OLD, NEW]
    assert columns[2]["metrics"]["speedup"] == pytest.approx(2.0)
    assert columns[2]["left_out"] == 1
    assert columns[2]["worst"]["pass_rate"] == [
        {"model_id": "org/c", "text": "FAIL(load)", "only_here": False}
    ]
    assert columns[2]["versus"]["in_both"] == 3 and columns[0]["versus"] is None


def test_the_command_prints_the_table_and_the_worst_models(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["dashboard", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert out == dashboard_report(results)
    assert out.splitlines()[0].split() == [
        "aot_eager-2.13.0",
        "/",
        "transformers-5.24.0",
        "inductor-2.9.1",
        "/",
        "transformers-5.24.0",
        "inductor-2.13.0",
        "/",
        "transformers-5.24.0",
    ]
    assert f"{NEW}\n  pass rate: org/c FAIL(load)\n" in out
    assert cli_main(["dashboard", "--results", str(results), "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3


def test_the_command_without_a_dataset_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["dashboard", "--results", str(tmp_path / "none")]) == 2
    assert "no results dataset at" in capsys.readouterr().err


def _shifted(results: Path) -> Path:
    """Two pairs of one compiler that tested different models: two models in both (one mended),
    two dropped after the older pair (a failure and a slow one), three added in the newer (a
    failure, a fast one, and one the older pair excluded)."""
    rows = [
        result_row("m/common-pass", compile_s=10.0, graph_breaks=1, **_OLD),
        result_row("m/common-mended", "FAIL(gen)", compile_s=6.0, **_OLD),
        result_row("m/gone-fail", "FAIL(load)", **_OLD),
        result_row("m/gone-slow", compile_s=100.0, graph_breaks=9, **_OLD),
        result_row("m/was-excluded", "EXCLUDED", exclusion="remote code", **_OLD),
        result_row("m/common-pass", compile_s=8.0, graph_breaks=0),
        result_row("m/common-mended", compile_s=4.0),
        result_row("m/came-fail", "FAIL(forward)"),
        result_row("m/came-fast", compile_s=1.0),
        result_row("m/was-excluded"),
    ]
    write_results(results, rows)
    perf = {
        "inductor-2.9.1/transformers-5.24.0.parquet": [
            perf_row("m/common-pass", "b1-s128-dp1", speedup_vs_eager=2.0),
            perf_row("m/gone-slow", "b1-s128-dp1", speedup_vs_eager=0.5),
        ],
        "inductor-2.13.0/transformers-5.24.0.parquet": [
            perf_row("m/common-pass", "b1-s128-dp1", speedup_vs_eager=2.5),
            # benchmarked in the newer pair only: in its own geomean, in no change
            perf_row("m/common-mended", "b1-s128-dp1", speedup_vs_eager=3.0),
            perf_row("m/came-fast", "b1-s128-dp1", speedup_vs_eager=10.0),
        ],
    }
    with Journal(results) as journal:
        for pair, perf_rows in perf.items():
            for row in perf_rows:
                journal.append(pair, row, PERF)
    assert merge_journals(results).ok
    return results


@pytest.fixture(scope="module")
def shifted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _shifted(tmp_path_factory.mktemp("shifted"))


def test_changes_are_over_the_models_both_pairs_tested(shifted: Path) -> None:
    old, new = _columns(dashboard(shifted))[OLD], _columns(dashboard(shifted))[NEW]
    # each pair's own figures stay over all its models...
    assert old.metrics["pass_rate"] == pytest.approx(2 / 4)
    assert new.metrics["pass_rate"] == pytest.approx(4 / 5)
    assert new.metrics["speedup"] == pytest.approx((2.5 * 3.0 * 10.0) ** (1 / 3))
    # ...but each change is over common-pass and common-mended, tested in both
    versus = new.versus
    assert versus is not None and versus.previous == OLD and versus.in_both == 2
    assert (versus.previous_metrics["pass_rate"], versus.metrics["pass_rate"]) == (0.5, 1.0)
    assert new.changes["pass_rate"] == pytest.approx(0.5)  # not the +30 pp of 50% -> 80%
    assert versus.models["pass_rate"] == 2
    # speedup: common-pass alone was benchmarked in both (2x -> 2.5x)
    assert versus.models["speedup"] == 1
    assert new.changes["speedup"] == pytest.approx(0.5)
    # compile time: (10 + 6) / 2 -> (8 + 4) / 2; gone-slow's 100 s and came-fast's 1 s are out
    assert (versus.previous_metrics["compile_mean_s"], versus.metrics["compile_mean_s"]) == (
        8.0,
        6.0,
    )
    assert new.changes["compile_mean_s"] == pytest.approx(-2.0)
    # graph breaks: common-pass records them in both (1 -> 0); gone-slow's 9 are not a change
    assert new.changes["graph_breaks"] == -1 and versus.models["graph_breaks"] == 1
    # the counts: over the models in both as well (the failures that came and went are apart)
    assert new.count_changes["PASS"] == 1 and new.count_changes["FAIL(gen)"] == -1
    assert new.count_changes["FAIL(load)"] == 0 and new.count_changes["FAIL(forward)"] == 0


def test_models_tested_in_only_one_pair_are_listed_apart(shifted: Path) -> None:
    new = _columns(dashboard(shifted))[NEW]
    assert new.versus is not None
    # EXCLUDED is not tested: a model excluded before and tested now is new to the comparison
    assert new.versus.only_here == ["m/came-fail", "m/came-fast", "m/was-excluded"]
    assert new.versus.only_previous == ["m/gone-fail", "m/gone-slow"]
    lines = dict(_lines(dashboard(shifted)))
    assert lines["models tested"] == ("4", "5")
    assert lines["tested in both"] == ("-", "2")
    assert lines["tested only in this pair"] == ("-", "3")
    assert lines["tested only in the previous"] == ("-", "2")
    assert lines["pass rate"][1] == "80.0% (+50.0 pp over 2 in both: 50.0% -> 100.0%)"
    assert lines["FAIL(forward)"][1] == "1"  # a failure only this pair has is no change


def test_the_worst_models_say_which_only_this_pair_tested(shifted: Path) -> None:
    worst = _columns(dashboard(shifted))[NEW].worst
    assert [(w.model_id, w.only_here) for w in worst["pass_rate"]] == [("m/came-fail", True)]
    assert [(w.model_id, w.only_here) for w in worst["speedup"]] == [
        ("m/common-pass", False),
        ("m/common-mended", False),
        ("m/came-fast", True),
    ]
    report = dashboard_report(shifted)
    assert f"{NEW}\n  pass rate: m/came-fail FAIL(forward) (only in this pair)\n" in report


def test_the_report_names_the_models_apart_and_the_json_holds_them(shifted: Path) -> None:
    report = dashboard_report(shifted).splitlines()
    start = report.index("tested in only one of the two pairs (in no change)")
    assert report[start + 1 :] == [
        f"{NEW} vs {OLD}",
        "  only in this pair (3): m/came-fail, m/came-fast, m/was-excluded",
        "  only in the previous (2): m/gone-fail, m/gone-slow",
    ]
    new = json.loads(dashboard_report(shifted, "json"))[1]
    assert new["versus"]["only_here"] == ["m/came-fail", "m/came-fast", "m/was-excluded"]
    assert new["versus"]["only_previous"] == ["m/gone-fail", "m/gone-slow"]
    assert new["versus"]["metrics"]["pass_rate"] == 1.0
    assert new["versus"]["previous_metrics"]["pass_rate"] == 0.5
    assert new["changes"]["pass_rate"] == pytest.approx(0.5)


def test_the_pages_tab_lists_the_models_apart_with_their_rows(shifted: Path) -> None:
    shown = page_dashboard(dashboard(shifted), {(NEW, "m/came-fail"): 3, (OLD, "m/gone-fail"): 1})
    assert shown["compared"] is True
    (apart,) = shown["apart"]
    assert (apart["pair"], apart["previous"], apart["in_both"]) == (NEW, OLD, 2)
    here, previous = apart["sides"]
    assert here["name"] == "only in this pair"
    assert here["models"][0] == {"model_id": "m/came-fail", "index": 3}
    assert previous["name"] == "only in the previous"
    assert previous["models"] == [
        {"model_id": "m/gone-fail", "index": 1},  # its row in the previous pair
        {"model_id": "m/gone-slow", "index": None},
    ]


def test_pairs_that_tested_the_same_models_list_nothing_apart(
    results: Path, board: Dashboard
) -> None:
    shown = page_dashboard(board, {})
    assert shown["apart"] == [] and shown["compared"] is True
    assert "tested in only one" not in dashboard_report(results)


def test_pairs_of_different_fullgraph_policies_are_warned_of(tmp_path: Path) -> None:
    """A Neuron pair (fullgraph=True) beside a CPU one: the report, the JSON's columns and the
    page's tab say so; the module fixture's pairs, which do not record it, say nothing."""
    neuron: dict[str, Any] = {"compiler": "neuronxcc", "compiler_version": "2.33.0"}
    rows = [
        result_row("org/a", fullgraph=False),
        result_row("org/a", "FAIL(gen)", fullgraph=True, **neuron),
    ]
    results = write_results(tmp_path / "results", rows)
    board = dashboard(results)
    assert [c.fullgraph for c in board.columns] == [False, True]
    assert board.warning is not None and "fullgraph=True: neuronxcc-2.33.0 / " in board.warning
    assert f"\n\n{board.warning}\n" in dashboard_report(results)
    assert [c["fullgraph"] for c in json.loads(dashboard_report(results, "json"))] == [False, True]
    assert page_dashboard(board, {})["warning"] == board.warning


def test_pairs_that_do_not_record_their_policy_are_not_warned_of(board: Dashboard) -> None:
    assert board.warning is None and page_dashboard(board, {})["warning"] is None


def test_a_pair_whose_references_came_from_another_kind_of_host_is_flagged(
    tmp_path: Path,
) -> None:
    """Over the models both pairs tested, the older pair's CPU references came from one kind of
    host and the newer's from another: its column says from what, flagged, and so do the
    report (after the table), its JSON and the page's tab (the table's line)."""
    epyc = dict(reference_cpu="AMD EPYC", reference_isa="Intel AVX2")
    xeon = dict(reference_cpu="Intel Xeon", reference_isa="Intel AVX10.1 and Intel AMX")
    rows = [
        result_row("m/a", **epyc, **_OLD),
        result_row("m/b", **epyc, **_OLD),
        result_row("m/a", "FAIL(output)", **xeon),
        result_row("m/b", **epyc),
        result_row("m/new", **xeon),
    ]
    write_results(tmp_path, rows)
    board = dashboard(tmp_path)
    new = _columns(board)[NEW]
    assert new.reference_hosts == {
        "AMD EPYC, Intel AVX2": 1,
        "Intel Xeon, Intel AVX10.1 and Intel AMX": 2,
    }
    assert new.versus is not None and new.versus.reference_hosts == (
        "a: AMD EPYC, Intel AVX2 (2). b: AMD EPYC, Intel AVX2 (1); "
        "Intel Xeon, Intel AVX10.1 and Intel AMX (1)"
    )
    line = dict(_lines(board))["CPU references from"]
    assert line[0] == "AMD EPYC, Intel AVX2 (2)"
    assert line[1].endswith("(another kind of host than the previous pair's)")
    report = dashboard_report(tmp_path).splitlines()
    start = report.index("CPU references from different kinds of host than the previous pair's")
    assert report[start + 1] == f"{NEW} vs {OLD}: {new.versus.reference_hosts}"
    assert json.loads(dashboard_report(tmp_path, "json"))[1]["versus"]["reference_hosts"]
    shown = page_dashboard(board, {})
    assert ("CPU references from", *line) in [tuple(x["cells"]) for x in shown["lines"]]
    assert [h["reference_host"] for h in history(board)["m/a"]] == [
        "AMD EPYC, Intel AVX2",
        "Intel Xeon, Intel AVX10.1 and Intel AMX",
    ]
    alike = [result_row("m/a", **epyc, **_OLD), result_row("m/a", **epyc)]
    write_results(tmp_path / "alike", alike)
    assert "kinds of host" not in dashboard_report(tmp_path / "alike")
