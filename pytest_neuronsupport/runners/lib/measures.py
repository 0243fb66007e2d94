"""Performance figures from raw per-round timings: spreads, throughput, cost, roofline.

Standard library only: ``perf.py`` (the run side) and the plugin (which turns a benchmark's
verdict into a performance row) share these definitions. Definitions follow vLLM's and LLMPerf's:

* a *round* is one timed ``generate`` (or one forward pass for an encoder) over a whole batch;
* TTFT is the time from the start of the round to the first generated token;
* TPOT is ``(latency - TTFT) / (output tokens - 1)`` of the round;
* every figure is summarized over the rounds as P50, P90, P99 (linear interpolation between
  the closest ranks, numpy's default), mean and sample standard deviation;
* throughput is what one replica produced per second over its timed rounds (``batch`` times the
  tokens, or the inferences, of every round, over the sum of their latencies); the total of
  several data-parallel replicas, which run at the same time, is the sum of theirs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

#: A configuration whose P99 exceeds this many times its P50 is flagged ``noisy``.
NOISY_RATIO = 2.0
#: The percentiles every figure is summarized by.
PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (linear interpolation between closest ranks)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(values: Sequence[float]) -> dict[str, float]:
    """P50, P90, P99, mean and standard deviation (0 for a single value) of ``values``."""
    summary = {f"p{q}": percentile(values, q) for q in PERCENTILES}
    summary["mean"] = statistics.fmean(values)
    summary["stdev"] = statistics.stdev(values) if len(values) > 1 else 0.0
    return summary


def figures(
    kind: str, replicas: Sequence[Sequence[dict[str, Any]]], batch: int, input_len: int
) -> dict[str, Any]:
    """A configuration's figures from each replica's timed rounds (seconds), in milliseconds
    and per second: the columns of a performance row.

    ``kind`` is ``encoder`` (a round is ``{"latency_s"}``), ``decoder`` or
    ``encoder-decoder`` (``{"latency_s", "ttft_s", "tokens"}``, ``tokens`` generated per
    sequence).
    """
    rounds = [r for replica in replicas for r in replica]
    out: dict[str, Any] = {"rounds": len(rounds) // max(1, len(replicas))}
    out.update(_columns("latency_ms", [1e3 * r["latency_s"] for r in rounds]))
    per_replica = [_throughput(kind, replica, batch, input_len) for replica in replicas]
    out["throughput"] = sum(per_replica)
    out["throughput_per_replica"] = statistics.fmean(per_replica)
    per_round = [_throughput(kind, [r], batch, input_len) for r in rounds]
    out["throughput_round_stdev"] = statistics.stdev(per_round) if len(per_round) > 1 else 0.0
    if kind != "encoder":
        tokens = [int(r["tokens"]) for r in rounds]
        out["output_tokens"] = min(tokens)
        out.update(_columns("ttft_ms", [1e3 * r["ttft_s"] for r in rounds]))
        tpot = [1e3 * (r["latency_s"] - r["ttft_s"]) / max(1, r["tokens"] - 1) for r in rounds]
        out.update(_columns("tpot_ms", tpot))
    if kind == "encoder-decoder":
        per_token = [1e3 * r["latency_s"] / (input_len + r["tokens"]) for r in rounds]
        out.update(_columns("token_latency_ms", per_token))
    out["noisy"] = noisy(out)
    return out


def _columns(prefix: str, values: Sequence[float]) -> dict[str, float]:
    return {f"{prefix}_{name}": value for name, value in spread(values).items()}


def _throughput(kind: str, rounds: Sequence[dict[str, Any]], batch: int, input_len: int) -> float:
    """Per second over ``rounds``: inferences (encoder), generated tokens (decoder), input and
    generated tokens (encoder-decoder)."""
    if kind == "encoder":
        made = batch * len(rounds)
    elif kind == "decoder":
        made = batch * sum(int(r["tokens"]) for r in rounds)
    else:
        made = batch * sum(input_len + int(r["tokens"]) for r in rounds)
    return float(made / max(sum(r["latency_s"] for r in rounds), 1e-12))


def noisy(row: dict[str, Any]) -> bool:
    """Whether one of the row's timed figures has a P99 over :data:`NOISY_RATIO` times its P50."""
    for prefix in ("latency_ms", "ttft_ms", "tpot_ms", "token_latency_ms"):
        p50, p99 = row.get(f"{prefix}_p50"), row.get(f"{prefix}_p99")
        if p50 is not None and p99 is not None and p99 > NOISY_RATIO * p50:
            return True
    return False


def cost_per_million(price_per_hour: float, throughput: float) -> float:
    """Dollars per 1M inferences (or tokens) at ``throughput`` per second and an hourly price:
    ``price / 3600 / throughput * 1e6`` (the seed's tables: 3098.91 inferences/s on a
    trn1.2xlarge at $1.34/h cost $0.120 per 1M)."""
    return price_per_hour / 3600 / throughput * 1e6


def roofline(
    kind: str, row: dict[str, Any], model: dict[str, Any], peaks: dict[str, Any] | None
) -> dict[str, Any]:
    """How close a configuration comes to the machine, per replica.

    Decoders: the bytes one decode step reads (every weight, plus the KV cache of the batch at
    the mean context, ``input + output / 2`` tokens) over the mean TPOT, as a fraction of the
    memory bandwidth. Encoders: FLOPs per inference (``2 * non-embedding parameters * seq`` +
    ``4 * layers * seq^2 * hidden`` for attention) times the replica's throughput, as a fraction
    of peak FLOP/s. Encoder-decoders: not computed (the decode step reads the cross-attention
    cache too, which this model of bytes leaves out).
    """
    out: dict[str, Any] = {}
    if peaks is None:
        return out
    if kind == "decoder" and row.get("tpot_ms_mean") and model.get("kv_bytes_per_token"):
        context = row["input_len"] + row["output_len"] / 2
        moved = model["weight_bytes"] + model["kv_bytes_per_token"] * row["batch"] * context
        achieved = moved / (row["tpot_ms_mean"] / 1e3) / 1e9
        out.update(
            bytes_per_step=float(moved),
            roofline_bound="memory",
            peak=float(peaks["bandwidth_gbs"]),
            peak_unit="GB/s",
            roofline_fraction=achieved / peaks["bandwidth_gbs"],
        )
    elif kind == "encoder" and row.get("throughput_per_replica"):
        seq, hidden, layers = row["seq_len"], model["hidden"], model["layers"]
        flops = 2 * model["non_embedding_params"] * seq + 4 * layers * seq * seq * hidden
        achieved = flops * row["throughput_per_replica"] / 1e9
        out.update(
            flops_per_inference=float(flops),
            roofline_bound="compute",
            peak=float(peaks["gflops"]),
            peak_unit="GFLOP/s",
            roofline_fraction=achieved / peaks["gflops"],
        )
    if out:
        out["peak_source"] = str(peaks.get("source"))
    return out
