"""The output checks: a device's output against the CPU reference.

Definitions (also in docs/runners.md, "The output check"):

* **Near-tie.** Let ``z`` be the CPU fp32 reference's scores at one position (the logits the
  greedy search or the prediction compared), ``a`` the CPU's choice there (its argmax) and ``b``
  the device's choice. The *margin* is ``z[a] - z[b]`` (never negative). The *tolerance* is the
  numerical noise of the precision the device ran in::

      tolerance = NEAR_TIE_FACTOR * eps(dtype) * max(1, max(|z|))

  with ``eps`` the machine epsilon of that dtype (bf16 2**-7, fp16 2**-10, fp32 2**-23) and
  ``NEAR_TIE_FACTOR = 4``. The two candidates are a near-tie when ``margin <= tolerance``:
  rounding alone can swap them. A margin of ``inf`` (a candidate the CPU ruled out) is never a
  near-tie.
* **Decoder tokens.** Equal to the CPU fp32 tokens → ``Y``. Otherwise the first position where
  they differ decides: a near-tie there → ``~ near-tie ...`` (PASS), else ``N ...``.
* **Encoder predictions** (masked word, each token's label, the class, the answer span's start
  and end): equal to the CPU fp32 predictions → ``Y``; equal to the CPU bf16 predictions →
  ``Y (CPU bf16)``; differing from fp32 only at near-ties → ``~ near-tie ...``; else ``N``.
* **Single-output head** (a reranker's score): ``|device - fp32| <= max(1.0, 2 * |bf16 - fp32|)``.
* **No head** (hidden states): each token passes when its cosine similarity with fp32 is at least
  0.99, or its cosine distance ``1 - cos`` is at most twice the CPU bf16 run's distance for that
  token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pytest_neuronsupport.runners.lib.models import torch_dtype

NEAR_TIE_FACTOR = 4.0
SCORE_TOLERANCE = 1.0
COSINE_MIN = 0.99
DRIFT_FACTOR = 2.0


@dataclass
class Check:
    """The verdict of one output check and every number that decided it, as the row's fields."""

    passed: bool
    cpu_match: str
    check: dict[str, Any] = field(default_factory=dict)
    first_divergence: int | None = None
    divergence_margin: float | None = None
    near_tie_tolerance: float | None = None


def near_tie_tolerance(scores: Tensor, dtype: str) -> float:
    """The noise level under which two of ``scores`` (one position) count as tied."""
    finite = scores[torch.isfinite(scores)].double()
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    eps = float(torch.finfo(torch_dtype(dtype)).eps)  # bf16 2^-7, fp16 2^-10, fp32 2^-23
    return NEAR_TIE_FACTOR * eps * max(1.0, scale)


def margin_at(scores: Tensor, cpu_choice: int, device_choice: int) -> float:
    """``scores[cpu_choice] - scores[device_choice]`` in float64 (inf if the latter is -inf)."""
    a, b = float(scores[cpu_choice].double()), float(scores[device_choice].double())
    return float("inf") if b == float("-inf") else a - b


def near_tie(where: str, margin: float, tolerance: float, dtype: str, **check: Any) -> Check:
    """The check of a difference at ``where``: passed when it is a near-tie."""
    tied = margin <= tolerance
    words = f"at {where}: margin {margin:.4g} {'<=' if tied else '>'} tolerance {tolerance:.4g}"
    text = f"{'~ near-tie' if tied else 'N'} {words} ({dtype})"
    return Check(tied, text, **check, divergence_margin=margin, near_tie_tolerance=tolerance)


def compare_tokens(ref: list[int], ref_scores: Tensor, dev: list[int], dtype: str) -> Check:
    """Decoder rule: the device's new tokens against the CPU fp32 run's.

    ``ref_scores`` is ``[steps, vocab]``: the scores the CPU's greedy search chose from.
    """
    details: dict[str, Any] = {"rule": "tokens", "dtype": dtype, "reference_tokens": list(ref)}
    details.update(tokens_reference=len(ref), tokens_device=len(dev))
    if list(dev) == list(ref):
        return Check(True, "Y", details)
    shorter = min(len(ref), len(dev))
    i = next((k for k, (a, b) in enumerate(zip(ref, dev, strict=False)) if a != b), shorter)
    details["first_divergence"] = i
    if i >= min(shorter, len(ref_scores)):
        details["stopped_early"] = "device" if len(dev) < len(ref) else "CPU"
        text = f"N at token {i}: the {details['stopped_early']} run stopped early"
        return Check(False, text, details, first_divergence=i)
    scores = ref_scores[i]
    margin, tolerance = margin_at(scores, ref[i], dev[i]), near_tie_tolerance(scores, dtype)
    details.update(cpu_token=ref[i], device_token=dev[i], margin=margin, tolerance=tolerance)
    details["max_abs_score"] = float(scores[torch.isfinite(scores)].abs().max())
    return near_tie(f"token {i}", margin, tolerance, dtype, check=details, first_divergence=i)


def compare_predictions(
    what: str, fp32: Tensor, bf16: Tensor, dev: Tensor, dtype: str, labels: list[str] | None = None
) -> Check:
    """Encoder rule for predictions: each row of ``[N, C]`` scores predicts its argmax.

    ``what`` names the rows in messages (``"mask"``, ``"token"``, ``"class"``, ``"span"``...);
    ``labels`` optionally names each row (the span's ``start`` and ``end``).
    """
    p32, p16, pdev = (t.argmax(dim=-1).tolist() for t in (fp32, bf16, dev))
    details: dict[str, Any] = {"rule": "predictions", "what": what, "dtype": dtype}
    details.update(fp32=p32, cpu_bf16=p16, device=pdev)
    if pdev == p32:
        return Check(True, "Y", details)
    if pdev == p16:
        details["matched"] = "cpu_bf16"
        return Check(True, "Y (CPU bf16)", details)
    differing = [r for r, (a, b) in enumerate(zip(p32, pdev, strict=True)) if a != b]
    found = [
        (margin_at(fp32[r], p32[r], pdev[r]), near_tie_tolerance(fp32[r], dtype), r)
        for r in differing
    ]
    margin, tolerance, row = max(found, key=lambda m: m[0] / m[1] if m[1] > 0 else float("inf"))
    name = f"{what} {labels[row] if labels else row}"
    details.update(differing=differing, worst=name, margin=margin, tolerance=tolerance)
    return near_tie(name, margin, tolerance, dtype, check=details, first_divergence=differing[0])


def compare_scores(fp32: Tensor, bf16: Tensor, device: Tensor) -> Check:
    """Single-output head: each score within max(1.0, 2 x the CPU bf16 run's distance)."""
    f, h, d = (t.double().flatten() for t in (fp32, bf16, device))
    distance, bf16_distance = (d - f).abs(), (h - f).abs()
    limit = torch.clamp(DRIFT_FACTOR * bf16_distance, min=SCORE_TOLERANCE)
    worst = int((distance - limit).argmax())
    details: dict[str, Any] = {"rule": "score", "fp32": f.tolist(), "cpu_bf16": h.tolist()}
    details.update(device=d.tolist(), distance=float(distance[worst]))
    details.update(bf16_distance=float(bf16_distance[worst]), limit=float(limit[worst]))
    margin, tolerance = float(distance[worst]), float(limit[worst])
    if bool((distance <= limit).all()):
        return Check(True, "Y", details, divergence_margin=margin, near_tie_tolerance=tolerance)
    words = f"N score {float(d[worst]):.4g} vs CPU {float(f[worst]):.4g}: distance {margin:.4g}"
    words += f" > max({SCORE_TOLERANCE}, 2 x bf16 {float(bf16_distance[worst]):.4g})"
    return Check(False, words, details, divergence_margin=margin, near_tie_tolerance=tolerance)


def compare_hidden(fp32: Tensor, bf16: Tensor, device: Tensor) -> Check:
    """No head: each token's hidden state against fp32's (``[T, H]``, padding removed)."""
    cosine = torch.nn.functional.cosine_similarity
    cos_dev, cos_bf16 = (cosine(t.double(), fp32.double(), dim=-1) for t in (device, bf16))
    dist_dev, dist_bf16 = 1.0 - cos_dev, 1.0 - cos_bf16
    ok = (cos_dev >= COSINE_MIN) | (dist_dev <= DRIFT_FACTOR * dist_bf16)
    worst = int(cos_dev.argmin())
    details: dict[str, Any] = {"rule": "hidden", "tokens": int(fp32.shape[0])}
    details.update(min_cosine=float(cos_dev.min()), worst_token=worst)
    details.update(bf16_distance_at_worst=float(dist_bf16[worst]))
    details["min_cosine_cpu_bf16"] = float(cos_bf16.min())
    details["failing_tokens"] = [int(i) for i in (~ok).nonzero().flatten().tolist()]
    if bool(ok.all()):
        margin, tolerance = float(dist_dev[worst]), float(DRIFT_FACTOR * dist_bf16[worst])
        return Check(True, "Y", details, divergence_margin=margin, near_tie_tolerance=tolerance)
    bad = int((~ok).nonzero()[0])
    words = f"N at token {bad}: cosine {float(cos_dev[bad]):.6f} < {COSINE_MIN} and distance "
    words += f"{float(dist_dev[bad]):.4g} > 2 x bf16 {float(dist_bf16[bad]):.4g}"
    return Check(
        False, words, details, bad, float(dist_dev[bad]), float(DRIFT_FACTOR * dist_bf16[bad])
    )
