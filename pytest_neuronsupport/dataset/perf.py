"""The performance table: how fast each model runs each configuration, like the seed's tables.

``<results>/perf/<compiler>-<version>/<library>-<version>.parquet``, one row per model and
configuration (its key), written through the same journal and merge as the support dataset
(:data:`~pytest_neuronsupport.dataset.support.SUPPORT`). Definitions of the figures:
:mod:`pytest_neuronsupport.runners.lib.measures`.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from pytest_neuronsupport.dataset.layout import PERF_DATA
from pytest_neuronsupport.dataset.support import DEVICE_DOCS
from pytest_neuronsupport.dataset.table import DEVICE_FIELDS, RUN_FIELDS, STACK_DOCS, Table

__all__ = ["INTERVALS", "PERF", "PERF_COLUMN_DOCS", "PERF_SCHEMA", "SPREAD"]

#: The summary of every timed figure over the rounds.
SPREAD: Final = ("p50", "p90", "p99", "mean", "stdev")
_TIMED: Final = {
    "latency_ms": "End-to-end latency of a round (one batch: a forward pass, or a `generate`)",
    "ttft_ms": "Time to the first generated token (generation)",
    "tpot_ms": "Time per output token after the first, `(latency - TTFT) / (tokens - 1)`",
    "token_latency_ms": (
        "Latency per token counting input and output, `latency / (input + output)` "
        "(encoder-decoders)"
    ),
}


#: The figures given a 95% bootstrap confidence interval (``<figure>_ci_low``/``_ci_high``).
INTERVALS: Final = {
    "latency_ms": "`latency_ms_mean`",
    "ttft_ms": "`ttft_ms_mean` (generation)",
    "tpot_ms": "`tpot_ms_mean` (decoders)",
    "token_latency_ms": "`token_latency_ms_mean` (encoder-decoders)",
    "throughput": "`throughput`",
    "eager_latency_ms": "`eager_latency_ms_mean`",
    "speedup_vs_eager": "`speedup_vs_eager` (compiled and eager rounds resampled apart)",
}


def _interval_fields() -> list[pa.Field]:
    return [pa.field(f"{n}_ci_{e}", pa.float64()) for n in INTERVALS for e in ("low", "high")]


def _spread_fields() -> list[pa.Field]:
    return [pa.field(f"{name}_{s}", pa.float64()) for name in _TIMED for s in SPREAD]


PERF_SCHEMA: Final[pa.Schema] = pa.schema(
    [
        # identity
        pa.field("model_id", pa.string()),
        pa.field("configuration", pa.string()),
        pa.field("library", pa.string()),
        pa.field("task", pa.string()),
        pa.field("revision", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("runner", pa.string()),
        pa.field("run_mode", pa.string()),
        pa.field("neuron_cores", pa.int32()),
        pa.field("dp_degree", pa.int32()),
        pa.field("batch", pa.int32()),
        pa.field("seq_len", pa.int32()),
        pa.field("input_len", pa.int32()),
        pa.field("output_len", pa.int32()),
        pa.field("dtype", pa.string()),
        # verdict
        pa.field("result", pa.string()),
        pa.field("notes", pa.string()),
        pa.field("error", pa.string()),
        # the rounds
        pa.field("rounds", pa.int32()),
        pa.field("warmup_rounds", pa.int32()),
        pa.field("compile_s", pa.float64()),
        pa.field("warmup_s", pa.float64()),
        pa.field("output_tokens", pa.int32()),
        # throughput and its spread
        pa.field("throughput", pa.float64()),
        pa.field("throughput_unit", pa.string()),
        pa.field("throughput_per_replica", pa.float64()),
        pa.field("throughput_round_stdev", pa.float64()),
        *_spread_fields(),
        pa.field("noisy", pa.bool_()),
        # against eager
        pa.field("eager_latency_ms_p50", pa.float64()),
        pa.field("eager_latency_ms_mean", pa.float64()),
        pa.field("eager_latency_ms_stdev", pa.float64()),
        pa.field("eager_throughput", pa.float64()),
        pa.field("speedup_vs_eager", pa.float64()),
        pa.field("eager_rounds", pa.int32()),
        # how far to trust them
        *_interval_fields(),
        pa.field("wide_interval", pa.bool_()),
        # memory
        pa.field("peak_gb", pa.float64()),
        pa.field("eager_peak_gb", pa.float64()),
        # cost
        pa.field("instance_type", pa.string()),
        pa.field("price_per_hour", pa.float64()),
        pa.field("price_source", pa.string()),
        pa.field("cost_per_million", pa.float64()),
        pa.field("cost_unit", pa.string()),
        # against the machine
        pa.field("params", pa.int64()),
        pa.field("weight_bytes", pa.int64()),
        pa.field("bytes_per_step", pa.float64()),
        pa.field("flops_per_inference", pa.float64()),
        pa.field("roofline_bound", pa.string()),
        pa.field("roofline_fraction", pa.float64()),
        pa.field("peak", pa.float64()),
        pa.field("peak_unit", pa.string()),
        pa.field("peak_source", pa.string()),
        pa.field("wall_s", pa.float64()),
        *RUN_FIELDS,
        pa.field("run_py_sha256", pa.string()),
        pa.field("timings", pa.string()),
        pa.field("check", pa.string()),
        # what the device and its runtime say of the compiled rounds (appended: older files load
        # them null)
        *DEVICE_FIELDS,
    ],
    metadata={"neuronsupport_schema": "perf-1"},
)
"""The schema of every performance parquet file (all columns nullable)."""

PERF_COLUMN_DOCS: Final[dict[str, str]] = {
    "model_id": "The model benchmarked (a Hub repo id, or `zoo:<name>`).",
    "configuration": (
        "The configuration's key: `b<batch>-s<seq>-dp<n>` (encoders) or "
        "`b<batch>-i<input>-o<output>-dp<n>` (generation); `-` for a model not benchmarked."
    ),
    "library": "The library the model was loaded with (`transformers`).",
    "task": "The task given by the model list entry, if any.",
    "revision": "The Hub revision given by the model list entry; null: the default branch.",
    "kind": "`encoder`, `decoder` or `encoder-decoder`: which table of the seed it belongs to.",
    "runner": "The support run's runner (`run_dense`, `run_encoder`, `run_seq2seq`).",
    "run_mode": "`Data Parallel` (replicas of a one-core model), as the seed's `Run Mode`.",
    "neuron_cores": "Cores one replica runs on (the seed's TP degree).",
    "dp_degree": "Replicas run at the same time, one per leased core (the seed's DP degree).",
    "batch": "Sequences per round.",
    "seq_len": "Tokens per sequence: an encoder's input; input + output for generation.",
    "input_len": "Prompt tokens per sequence (generation).",
    "output_len": "New tokens asked per sequence (generation; forced: min = max new tokens).",
    "dtype": "The dtype the model ran in (the seed's model data type).",
    "result": (
        "`PASS`, or why there are no figures: `FAIL(load)`, `FAIL(gen)` / `FAIL(forward)` "
        "(the benchmark raised), `FAIL(other)` (crash, timeout), `EXCLUDED` (not benchmarked)."
    ),
    "notes": "One line on what happened.",
    "error": "The error that decided a failure, with its traceback; null on PASS.",
    "rounds": (
        "Timed rounds per replica (compiled): at least `--neuron-perf-rounds` and "
        "`--neuron-perf-min-seconds` of them, at most `--neuron-perf-max-rounds`."
    ),
    "warmup_rounds": "Untimed rounds after the first (compiling) one.",
    "compile_s": "Seconds of the first round, compilation included (not in the timed rounds).",
    "warmup_s": "Seconds of the warm-up rounds (not in the timed rounds).",
    "output_tokens": "Tokens each sequence generated (the fewest over the rounds).",
    "throughput": (
        "Total over the replicas: inferences/s (encoders), output tokens/s (decoders), "
        "input and output tokens/s (encoder-decoders); see `throughput_unit`."
    ),
    "throughput_unit": "`inferences/s`, `output tokens/s` or `tokens/s`.",
    "throughput_per_replica": "Mean throughput of one replica over its timed rounds.",
    "throughput_round_stdev": "Standard deviation of the per-round throughput of one replica.",
    **{
        f"{name}_{s}": f"{doc}: {s} over the timed rounds (ms)."
        for name, doc in _TIMED.items()
        for s in SPREAD
    },
    "noisy": "A timed figure's P99 is over twice its P50: read the figures with care.",
    "eager_latency_ms_p50": "The eager model's round latency, P50 (ms), same device and rounds.",
    "eager_latency_ms_mean": "The eager model's mean round latency (ms).",
    "eager_latency_ms_stdev": "Standard deviation of the eager model's round latency (ms).",
    "eager_throughput": "The eager model's throughput per replica (same unit).",
    "speedup_vs_eager": "`eager_latency_ms_mean / latency_ms_mean`: above 1, compiled is faster.",
    "eager_rounds": "Timed rounds of the eager model (per replica: the first replica's).",
    **{
        f"{name}_ci_{end}": f"The {end} end of the 95% bootstrap confidence interval of {doc}."
        for name, doc in INTERVALS.items()
        for end in ("low", "high")
    },
    "wide_interval": (
        "A figure's confidence interval is wider than `WIDE_FRACTION` (0.1) of the figure: "
        "too few rounds, or a noisy machine, to trust it."
    ),
    "peak_gb": "The device's peak memory over the compiled timed rounds (GB); null on the CPU.",
    "eager_peak_gb": "The device's peak memory over the eager timed rounds (GB); null on the CPU.",
    "instance_type": "The instance type whose price is used (`--neuron-instance`), if named.",
    "price_per_hour": "On-demand dollars per hour used for the cost.",
    "price_source": "Where the price comes from (`--neuron-price-per-hour`, or the table's).",
    "cost_per_million": "`price_per_hour / 3600 / throughput * 1e6` dollars.",
    "cost_unit": "`per 1M inferences` (encoders) or `per 1M tokens` (generation).",
    "params": "Parameters of the model.",
    "weight_bytes": "Bytes of the model's parameters in its dtype.",
    "bytes_per_step": "Decoders: weights + KV cache at the mean context, read per decode step.",
    "flops_per_inference": "Encoders: `2 * non-embedding params * seq + 4 * layers * seq^2 * d`.",
    "roofline_bound": "`memory` (decoders) or `compute` (encoders).",
    "roofline_fraction": (
        "Decoders: `bytes_per_step / TPOT` over the memory bandwidth; encoders: "
        "`flops_per_inference * throughput_per_replica` over peak FLOP/s."
    ),
    "peak": "The peak the fraction is taken of (GB/s or GFLOP/s, see `peak_unit`), per core.",
    "peak_unit": "`GB/s` or `GFLOP/s`.",
    "peak_source": "How the peak was obtained (a measurement on this machine, and when).",
    "wall_s": "Seconds of the whole benchmark run.",
    **{name: f"{doc}; null where absent." for name, doc in STACK_DOCS.items()},
    "tested_at": "When the benchmark started (UTC).",
    "run_py": "`perf.py`: the standalone benchmark of this configuration.",
    "device": "The device: `neuron`, `cuda` or `cpu`.",
    "backend": "The `torch.compile` backend.",
    "compiler": "The pair's compiler (`neuronxcc` on Neuron, else the backend).",
    "compiler_version": "The compiler's version.",
    "run_py_sha256": "SHA-256 of `run_py`.",
    "timings": (
        "JSON: the raw per-round timings in seconds, compiled (`replicas`: one list per "
        "replica) and `eager`."
    ),
    "check": (
        "JSON: the model's facts used by the roofline, the peaks measured, and the CPU "
        "threads (`torch.get_num_threads()`) and CPUs the timed rounds ran with."
    ),
    **DEVICE_DOCS,
}
"""One sentence per column of :data:`PERF_SCHEMA`."""

PERF: Final = Table("perf", PERF_DATA, PERF_SCHEMA, ("model_id", "configuration"), PERF_COLUMN_DOCS)
"""Performance rows: ``<results>/perf``, one row per model and configuration."""
