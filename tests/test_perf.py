"""Performance rows (``--neuron-perf``): the figures' definitions and relations, cost, roofline,
the PERF table's journal and merge, the report, and a real bench sweep."""

from __future__ import annotations

import json
import math
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.cli import main as cli_main
from pytest_neuronsupport.dataset.files import read_dataset
from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.merge import merge_journals
from pytest_neuronsupport.dataset.perf import INTERVALS, PERF
from pytest_neuronsupport.modellist import ModelListError, parse, parse_io, parse_sizes
from pytest_neuronsupport.modes.perf import (
    CI_FIGURES,
    FIGURE_STATISTICS,
    WIDE_FRACTION,
    Configuration,
    bootstrap_intervals,
    intervals,
)
from pytest_neuronsupport.pricing import price
from pytest_neuronsupport.runners.lib.measures import (
    cost_per_million,
    figures,
    percentile,
    roofline,
    spread,
)
from pytest_neuronsupport.views.perf import COLUMNS, perf_report, perf_tables
from tests.results_for_tests import perf_row
from tests.sweeping import SweepRunner

PAIR = "aot_eager-2.13.0/transformers-5.24.0.parquet"
#: Generation rounds of a noisy machine: (latency, TTFT, tokens), seconds.
ROUNDS = [
    {"latency_s": 0.100, "ttft_s": 0.020, "tokens": 9},
    {"latency_s": 0.110, "ttft_s": 0.025, "tokens": 9},
    {"latency_s": 0.090, "ttft_s": 0.018, "tokens": 9},
    {"latency_s": 0.300, "ttft_s": 0.100, "tokens": 9},
]


def check_relations(row: dict[str, Any]) -> None:
    """What must hold inside every performance row with figures, whatever the speed."""
    for name in ("latency_ms", "ttft_ms", "tpot_ms", "token_latency_ms"):
        if row.get(f"{name}_p50") is not None:
            assert row[f"{name}_p50"] <= row[f"{name}_p90"] <= row[f"{name}_p99"], name
            assert row[f"{name}_stdev"] >= 0
    tokens = {"encoder": 1, "decoder": row.get("output_tokens")}.get(row["kind"])
    if row["kind"] == "encoder-decoder":
        tokens = row["input_len"] + row["output_tokens"]
    expected = row["batch"] * tokens / (row["latency_ms_mean"] / 1e3)
    assert math.isclose(row["throughput_per_replica"], expected, rel_tol=1e-9)
    assert math.isclose(row["throughput"], row["dp_degree"] * row["throughput_per_replica"])
    if row["kind"] != "encoder":
        n = row["output_tokens"]
        rebuilt = row["ttft_ms_mean"] + (n - 1) * row["tpot_ms_mean"]
        assert math.isclose(rebuilt, row["latency_ms_mean"], rel_tol=1e-9)
    if row.get("price_per_hour") is not None:
        cost = row["price_per_hour"] / 3600 / row["throughput"] * 1e6
        assert math.isclose(row["cost_per_million"], cost, rel_tol=1e-9)
    assert row["noisy"] == (row["latency_ms_p99"] > 2 * row["latency_ms_p50"]) or row["noisy"]
    assert math.isclose(
        row["speedup_vs_eager"], row["eager_latency_ms_mean"] / row["latency_ms_mean"]
    )


def test_percentiles_interpolate_between_ranks_and_spread_summarizes() -> None:
    values = [4.0, 1.0, 3.0, 2.0, 5.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(4.6)
    assert percentile([7.0], 99) == 7.0
    summary = spread(values)
    assert summary["p50"] <= summary["p90"] <= summary["p99"] <= 5.0
    assert summary["mean"] == 3.0 and summary["stdev"] == pytest.approx(1.5811, abs=1e-4)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_decoder_figures_follow_the_definitions() -> None:
    row: dict[str, Any] = {"kind": "decoder", "batch": 2, "dp_degree": 1, "input_len": 16}
    row.update(figures("decoder", [ROUNDS], batch=2, input_len=16))
    assert row["output_tokens"] == 9 and row["rounds"] == 4
    assert row["tpot_ms_p50"] == pytest.approx(percentile([10.0, 10.625, 9.0, 25.0], 50))
    assert row["throughput"] == pytest.approx(2 * 9 * 4 / 0.6)
    # one slow round in four: its P99 is far above the P50
    assert row["noisy"] and row["latency_ms_p99"] > 2 * row["latency_ms_p50"]
    row.update(eager_latency_ms_mean=2 * row["latency_ms_mean"], speedup_vs_eager=2.0)
    check_relations(row)


def test_data_parallel_throughput_is_the_sum_of_the_replicas() -> None:
    fast = [{"latency_s": 0.010}] * 3
    slow = [{"latency_s": 0.020}] * 3
    row = figures("encoder", [fast, slow], batch=4, input_len=0)
    assert row["throughput"] == pytest.approx(400 + 200)
    assert row["throughput_per_replica"] == pytest.approx(300)
    assert not row["noisy"] and row["latency_ms_p50"] == pytest.approx(15.0)


def test_encoder_decoder_counts_input_and_output_tokens() -> None:
    row = figures("encoder-decoder", [ROUNDS[:3]], batch=1, input_len=16)
    assert row["throughput"] == pytest.approx((16 + 9) * 3 / 0.3)
    assert row["token_latency_ms_p50"] == pytest.approx(100 / 25)


def test_cost_per_million_reproduces_the_seed_tables() -> None:
    # albert-base-v2, trn1.2xlarge: 3098.91 inferences/s, $0.120 per 1M inferences
    assert cost_per_million(1.34, 3098.91) == pytest.approx(0.120, abs=5e-4)
    # Llama-3-8B, trn1.32xlarge at $21.5/h: 933.5 tokens/s, $6.398 per 1M tokens
    assert cost_per_million(21.5, 933.5) == pytest.approx(6.398, abs=5e-4)
    hourly = price(None, "trn1.32xlarge")
    assert hourly is not None and hourly[0] == 21.5 and "Inference Performance" in hourly[1]
    assert price(2.0, "trn1.32xlarge") == (2.0, "--neuron-price-per-hour")
    assert price(None, None) is None


def test_roofline_fractions_of_the_measured_peaks() -> None:
    peaks = {"bandwidth_gbs": 100.0, "gflops": 50.0, "source": "measured"}
    model = {"weight_bytes": 1e9, "kv_bytes_per_token": 1000, "non_embedding_params": 1e6}
    model.update(layers=2, hidden=64)
    row = {"input_len": 100, "output_len": 100, "batch": 2, "tpot_ms_mean": 20.0}
    decode = roofline("decoder", row, model, peaks)
    moved = 1e9 + 1000 * 2 * 150
    assert decode["bytes_per_step"] == moved and decode["peak_source"] == "measured"
    assert decode["roofline_fraction"] == pytest.approx(moved / 0.020 / 1e9 / 100.0)
    encode = roofline("encoder", {"seq_len": 128, "throughput_per_replica": 10.0}, model, peaks)
    flops = 2 * 1e6 * 128 + 4 * 2 * 128 * 128 * 64
    assert encode["roofline_fraction"] == pytest.approx(flops * 10.0 / 1e9 / 50.0)
    assert roofline("decoder", row, model, None) == {}


def test_configurations_and_their_keys(tmp_path: Path) -> None:
    assert parse_sizes("1,16") == (1, 16) and parse_io("128/128, 8/4") == ((128, 128), (8, 4))
    for bad in ("0", "x", "1,-2"):
        with pytest.raises(ValueError):
            parse_sizes(bad)
    for bad in ("128", "128/1", "a/b"):
        with pytest.raises(ValueError):
            parse_io(bad)
    assert Configuration("encoder", 16, seq_len=128).key == "b16-s128-dp1"
    gen = Configuration("decoder", 1, input_len=128, output_len=64, replicas=2)
    assert gen.key == "b1-i128-o64-dp2" and gen.columns()["seq_len"] == 192
    listed = tmp_path / "models.toml"
    listed.write_text(
        '[[model]]\nid = "zoo:llama"\nperf_batch = [1, 4]\nperf_io = ["32/8"]\n',
        encoding="utf-8",
    )
    (spec,) = parse(listed)
    assert spec.perf_batch == (1, 4) and spec.perf_io == ((32, 8),)
    listed.write_text('[[model]]\nid = "zoo:llama"\nperf_io = ["32"]\n', encoding="utf-8")
    with pytest.raises(ModelListError, match=r"perf_io|INPUT/OUTPUT"):
        parse(listed)


def test_timed_rounds_need_both_the_count_and_the_duration_capped_by_the_most() -> None:
    from pytest_neuronsupport.runners.lib.perf import more_rounds

    params = {"rounds": 10, "min_seconds": 2.0, "max_rounds": 1000}
    assert more_rounds(0, 0.0, params)
    assert more_rounds(9, 5.0, params)  # the duration is reached, not the count
    assert more_rounds(10, 1.9, params)  # the count is reached, not the duration
    assert not more_rounds(10, 2.0, params)  # both
    assert not more_rounds(1000, 1.0, params)  # the most rounds, whatever the duration
    assert not more_rounds(3, 0.0, {**params, "rounds": 20, "max_rounds": 3})


def test_bootstrap_intervals_hold_the_figure_are_fixed_by_their_seed_and_flag_wide_ones() -> None:
    config = Configuration("decoder", 2, input_len=16, output_len=9)
    eager = [{**r, "latency_s": 2 * r["latency_s"]} for r in ROUNDS]
    row = figures("decoder", [ROUNDS], batch=2, input_len=16)
    assert set(FIGURE_STATISTICS) == set(INTERVALS) and set(CI_FIGURES["decoder"]) <= set(INTERVALS)
    got = intervals("decoder", [ROUNDS], eager, config)
    assert got == intervals("decoder", [ROUNDS], eager, config)  # the same rounds, the same
    for name, figure in [
        ("latency_ms", row["latency_ms_mean"]),
        ("ttft_ms", row["ttft_ms_mean"]),
        ("tpot_ms", row["tpot_ms_mean"]),
        ("throughput", row["throughput"]),
        ("speedup_vs_eager", 2.0),
    ]:
        assert got[f"{name}_ci_low"] <= figure <= got[f"{name}_ci_high"], name
    # eager is exactly twice every round: resampled apart, the speedup still varies
    assert got["speedup_vs_eager_ci_low"] < 2.0 < got["speedup_vs_eager_ci_high"]
    assert "token_latency_ms_ci_low" not in got  # encoder-decoders only
    # one slow round in four: the interval is far wider than a tenth of the mean
    assert got["wide_interval"]
    width = got["latency_ms_ci_high"] - got["latency_ms_ci_low"]
    assert width > WIDE_FRACTION * row["latency_ms_mean"]
    steady = [{"latency_s": 0.010 + 0.0001 * (i % 3)} for i in range(30)]
    encoder = Configuration("encoder", 1, seq_len=16)
    calm = intervals("encoder", [steady], steady, encoder)
    assert not calm["wide_interval"] and calm["latency_ms_ci_low"] >= 10.0
    assert calm["throughput_ci_high"] <= 100.0 and set(calm) == {
        f"{n}_ci_{e}" for n in CI_FIGURES["encoder"] for e in ("low", "high")
    } | {"wide_interval"}
    # a different seed resamples differently (an interval of the same figure all the same)
    chosen = {"latency_ms": FIGURE_STATISTICS["latency_ms"]}
    other = bootstrap_intervals([steady, steady], chosen, encoder, seed=1)["latency_ms"]
    assert other != (calm["latency_ms_ci_low"], calm["latency_ms_ci_high"])
    assert other[0] <= 1e3 * statistics.fmean(r["latency_s"] for r in steady) <= other[1]


def test_perf_rows_journal_and_merge_by_model_and_configuration(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        for batch in (1, 16):
            row = perf_row_now(
                "zoo:bert", f"b{batch}-s128-dp1", batch=batch, throughput=10.0 * batch
            )
            journal.append(PAIR, row, PERF)
        journal.append(
            PAIR, perf_row_now("zoo:bert", "b1-s128-dp1", batch=1, throughput=12.0), PERF
        )
        failed = perf_row_now("zoo:t5", "b1-i8-o4-dp1", result="FAIL(gen)", notes="it raised")
        journal.append(PAIR, {**failed, "kind": "encoder-decoder"}, PERF)
    report = merge_journals(tmp_path)
    assert report.ok and not report.problems
    table = read_dataset(tmp_path, table=PERF).to_pylist()
    got = {(r["model_id"], r["configuration"]): r for r in table}
    assert set(got) == {
        ("zoo:bert", "b1-s128-dp1"),
        ("zoo:bert", "b16-s128-dp1"),
        ("zoo:t5", "b1-i8-o4-dp1"),
    }
    assert got[("zoo:bert", "b1-s128-dp1")]["throughput"] == 12.0  # the later row replaced it
    lines = perf_report(tmp_path)
    text = "\n".join(lines)
    assert "Encoder Models" in text and "Throughput (inference/sec)" in text
    assert "zoo:t5  b1-i8-o4-dp1  FAIL(gen)  it raised" in text
    assert perf_report(tmp_path / "none")[0].startswith("no performance results")


def test_perf_tables_are_the_reports_header_and_cells(tmp_path: Path) -> None:
    """The page shows :func:`perf_tables`; the text report is made of the same cells."""
    noisy = perf_row_now("zoo:bert", "b1-s128-dp1", batch=1, throughput=123.456, noisy=True)
    with Journal(tmp_path) as journal:
        journal.append(
            PAIR,
            {
                **noisy,
                "throughput_round_stdev": 1.5,
                "speedup_vs_eager": 2.0,
                "speedup_vs_eager_ci_low": 1.9,
                "speedup_vs_eager_ci_high": 2.1,
                "wide_interval": True,
            },
            PERF,
        )
        journal.append(PAIR, perf_row_now("zoo:t5", "-", result="EXCLUDED", notes=None), PERF)
    assert merge_journals(tmp_path).ok
    (entry,) = perf_tables(tmp_path)
    assert entry.pair == PAIR.removesuffix(".parquet").replace("/", " / ")
    (grid,) = entry.tables
    assert grid.title == "Encoder Models"
    assert grid.header == tuple(name for name, _ in COLUMNS["encoder"])
    (cells,) = grid.cells
    assert cells[:3] == ("zoo:bert", "b1-s128-dp1", "123.46 ±1.5!~")
    assert dict(zip(grid.header, cells, strict=True))["vs eager"] == "2.00x [1.90-2.10]"
    assert entry.failed == (("zoo:t5", "-", "EXCLUDED", ""),)
    assert perf_report(tmp_path, width=1000)[2:4] == grid.lines()
    wrapped = grid.lines(100)  # the report's default width: the same cells, in blocks
    assert perf_report(tmp_path)[2 : 2 + len(wrapped)] == wrapped
    assert max(len(line) for line in wrapped) <= 100 < max(len(line) for line in grid.lines())


@pytest.mark.slow
def test_bench_sweep_gives_rows_whose_figures_hold_and_failure_rows(sweep: SweepRunner) -> None:
    """Batch 1 benchmarks; batch 2 crashes in the benchmark only: a failure row, and the sweep
    goes on to the next model."""
    sweeps = sweep
    done = sweeps.run(
        "zoo:llama",
        "zoo:bert-mlm",
        backend="backends_for_tests:raising_on_batches_in_benchmark_backend_for_tests",
        args=[
            "--neuron-perf",
            "--neuron-perf-batch=1,2",
            "--neuron-perf-io=8/4",
            "--neuron-perf-seq-len=16",
            "--neuron-perf-rounds=3",
            "--neuron-perf-min-seconds=0.001",
            "--neuron-perf-max-rounds=5",
            "--neuron-perf-warmup=1",
            "--neuron-instance=trn1.2xlarge",
        ],
    )
    assert {r["result"] for r in done.rows.values()} == {"PASS"}
    rows = read_dataset(sweeps.results, table=PERF).to_pylist()
    got = {(r["model_id"], r["configuration"]): r for r in rows}
    assert set(got) == {
        ("zoo:llama", "b1-i8-o4-dp1"),
        ("zoo:llama", "b2-i8-o4-dp1"),
        ("zoo:bert-mlm", "b1-s16-dp1"),
        ("zoo:bert-mlm", "b2-s16-dp1"),
    }
    for (_, configuration), row in got.items():
        if configuration.startswith("b2"):
            assert row["result"] in ("FAIL(gen)", "FAIL(forward)")
            assert "refused a batched graph" in row["error"]
            assert row["throughput"] is None and row["latency_ms_p50"] is None
            continue
        assert row["result"] == "PASS", row["error"]
        check_relations(row)
        assert row["price_per_hour"] == 1.34 and row["compile_s"] > 0
        assert row["roofline_fraction"] > 0 and row["peak_source"].startswith("measured")
        timings = json.loads(row["timings"])
        assert len(timings["replicas"]) == 1 and 3 <= len(timings["replicas"][0]) <= 5
        assert row["rounds"] == len(timings["replicas"][0])
        assert row["eager_rounds"] == len(timings["eager"]) and 3 <= row["eager_rounds"] <= 5
        for name in CI_FIGURES[row["kind"]]:
            figure = row[name if name in ("throughput", "speedup_vs_eager") else f"{name}_mean"]
            assert row[f"{name}_ci_low"] <= figure <= row[f"{name}_ci_high"], name
        assert isinstance(row["wide_interval"], bool)
        assert row["peak_gb"] is None and row["eager_peak_gb"] is None  # on the CPU
        assert "main_perf(" in row["run_py"] and "PARAMS = {" in row["run_py"]
    assert got[("zoo:llama", "b1-i8-o4-dp1")]["output_tokens"] == 4
    assert cli_main(["perf", "--results", str(sweeps.results)]) == 0


def test_documented_peaks_of_a_known_instance_else_none() -> None:
    from pytest_neuronsupport.peaks import documented

    trn1 = documented("trn1.2xlarge", "bfloat16")
    assert trn1 is not None
    assert trn1["bandwidth_gbs"] == 410.0 and trn1["gflops"] == 95e3
    assert "Trainium" in trn1["source"] and "trn1.2xlarge" in trn1["source"]
    assert documented("trn1.32xlarge", "float32") is not None
    assert documented(None, "bfloat16") is None  # unknown: measured instead
    assert documented("inf2.xlarge", "bfloat16") is None
    # Trainium2: a chip's 667 BF16 TFLOPS and 2.9 TB/s over its 4 logical cores at LNC=2
    trn2 = documented("trn2.48xlarge", "bfloat16")
    assert trn2 is not None and trn2["gflops"] == 667e3 / 4 and trn2["bandwidth_gbs"] == 725.0
    assert "Trainium2 Architecture" in trn2["source"] and "at LNC=2" in trn2["source"]
    at_lnc_1 = documented("trn2u.48xlarge", "float32", lnc=1)
    assert at_lnc_1 is not None and at_lnc_1["gflops"] == 181e3 / 8
    trn3 = documented("trn3.48xlarge", "bfloat16")
    assert trn3 is not None and trn3["gflops"] == 671e3 / 4 and trn3["bandwidth_gbs"] == 1225.0


def test_instances_are_priced_only_where_a_price_is_sourced() -> None:
    from pytest_neuronsupport.pricing import INSTANCES, parse_instance, price

    priced = price(None, "trn1.2xlarge")
    assert priced is not None and priced[0] == 1.34 and "Inference Performance" in priced[1]
    assert price(None, "trn2.48xlarge") is None  # no on-demand price found: none made up
    assert price(3.0, "trn2.48xlarge") == (3.0, "--neuron-price-per-hour")
    assert (INSTANCES["trn2.48xlarge"].chips, INSTANCES["trn2.3xlarge"].chips) == (16, 1)
    assert parse_instance("trn3.48xlarge") == "trn3.48xlarge"  # documented as UltraServers
    with pytest.raises(ValueError, match="not an instance type known here"):
        parse_instance("p5.48xlarge")


def test_a_table_wider_than_the_terminal_wraps_into_blocks_that_fit() -> None:
    from pytest_neuronsupport.views.perf import Grid

    grid = Grid(
        "t", ("Model", "Config", "A" * 30, "B" * 30, "C" * 30), (("m", "b1", "1", "2", "3"),)
    )
    assert grid.lines() == grid.lines(200)  # it fits: one block, as before
    wrapped = grid.lines(80)
    assert max(len(line) for line in wrapped) <= 80
    assert wrapped == [
        f"Model  Config  {'A' * 30}  {'B' * 30}",
        "m      b1      1" + " " * 31 + "2",
        "",
        f"Model  Config  {'C' * 30}",
        "m      b1      3",
    ]


def perf_row_now(model_id: str, configuration: str, **more: Any) -> dict[str, Any]:
    return perf_row(model_id, configuration, tested_at=datetime.now(UTC), **more)
