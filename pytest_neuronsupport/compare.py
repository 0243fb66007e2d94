"""The output checks: a device's output against the CPU reference.

Standalone: imports only the standard library and torch, because its text is pasted into every
``run.py`` (see :mod:`pytest_neuronsupport.script`). The plugin's tests import it directly.

Definitions (also in README.md, "The output check"):

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

import math
from dataclasses import dataclass, field
from typing import Any

import torch

NEAR_TIE_FACTOR = 4.0
SCORE_TOLERANCE = 1.0
COSINE_MIN = 0.99
DRIFT_FACTOR = 2.0

_DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}


@dataclass
class Check:
    """The verdict of one output check and every number that decided it."""

    passed: bool
    cpu_match: str
    details: dict[str, Any] = field(default_factory=dict)
    first_divergence: int | None = None
    margin: float | None = None
    tolerance: float | None = None


def dtype_eps(dtype: str) -> float:
    """Machine epsilon of a dtype named like ``"bfloat16"``."""
    try:
        return float(torch.finfo(_DTYPES[dtype]).eps)
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r} (known: {', '.join(_DTYPES)})") from None


def near_tie_tolerance(scores: torch.Tensor, dtype: str) -> float:
    """The noise level under which two of ``scores`` (one position) count as tied."""
    finite = scores[torch.isfinite(scores)].double()
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    return NEAR_TIE_FACTOR * dtype_eps(dtype) * max(1.0, scale)


def margin_at(scores: torch.Tensor, cpu_choice: int, device_choice: int) -> float:
    """``scores[cpu_choice] - scores[device_choice]`` in float64 (inf if the latter is -inf)."""
    a = float(scores[cpu_choice].double())
    b = float(scores[device_choice].double())
    if math.isinf(b) and b < 0:
        return math.inf
    return a - b


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def compare_tokens(
    reference_tokens: list[int],
    reference_scores: torch.Tensor,
    device_tokens: list[int],
    dtype: str,
) -> Check:
    """Decoder rule: the device's new tokens against the CPU fp32 run's.

    ``reference_scores`` is ``[steps, vocab]``: the scores the CPU's greedy search chose from.
    """
    details: dict[str, Any] = {
        "rule": "tokens",
        "dtype": dtype,
        "tokens_reference": len(reference_tokens),
        "tokens_device": len(device_tokens),
    }
    if list(device_tokens) == list(reference_tokens):
        return Check(True, "Y", details)
    i = next(
        (
            k
            for k, (a, b) in enumerate(zip(reference_tokens, device_tokens, strict=False))
            if a != b
        ),
        min(len(reference_tokens), len(device_tokens)),
    )
    details["first_divergence"] = i
    if i >= len(reference_tokens) or i >= len(device_tokens) or i >= len(reference_scores):
        shorter = "device" if len(device_tokens) < len(reference_tokens) else "CPU"
        text = f"N at token {i}: the {shorter} run stopped early"
        details["stopped_early"] = shorter
        return Check(False, text, details, first_divergence=i)
    scores = reference_scores[i]
    cpu_tok, dev_tok = int(reference_tokens[i]), int(device_tokens[i])
    margin = margin_at(scores, cpu_tok, dev_tok)
    tolerance = near_tie_tolerance(scores, dtype)
    details.update(
        cpu_token=cpu_tok,
        device_token=dev_tok,
        margin=margin,
        tolerance=tolerance,
        max_abs_score=float(scores[torch.isfinite(scores)].abs().max()),
    )
    words = f"token {i}: margin {_fmt(margin)} {'<=' if margin <= tolerance else '>'} "
    words += f"tolerance {_fmt(tolerance)} ({dtype})"
    if margin <= tolerance:
        return Check(True, f"~ near-tie at {words}", details, i, margin, tolerance)
    return Check(False, f"N at {words}", details, i, margin, tolerance)


def compare_predictions(
    what: str,
    fp32: torch.Tensor,
    bf16: torch.Tensor,
    device: torch.Tensor,
    dtype: str,
    labels: list[str] | None = None,
) -> Check:
    """Encoder rule for predictions: each row of ``[N, C]`` scores predicts its argmax.

    ``what`` names the rows in messages (``"mask"``, ``"token"``, ``"class"``, ``"start"``...);
    ``labels`` optionally names each row (e.g. token positions).
    """
    p32 = fp32.argmax(dim=-1).tolist()
    p16 = bf16.argmax(dim=-1).tolist()
    pdev = device.argmax(dim=-1).tolist()
    details: dict[str, Any] = {
        "rule": "predictions",
        "what": what,
        "dtype": dtype,
        "fp32": p32,
        "cpu_bf16": p16,
        "device": pdev,
    }
    if pdev == p32:
        return Check(True, "Y", details)
    if pdev == p16:
        details["matched"] = "cpu_bf16"
        return Check(True, "Y (CPU bf16)", details)
    worst: tuple[float, int, float, float] | None = None  # (margin/tolerance, row, margin, tol)
    differing = [r for r, (a, b) in enumerate(zip(p32, pdev, strict=True)) if a != b]
    for r in differing:
        margin = margin_at(fp32[r], p32[r], pdev[r])
        tol = near_tie_tolerance(fp32[r], dtype)
        ratio = margin / tol if tol > 0 else math.inf
        if worst is None or ratio > worst[0]:
            worst = (ratio, r, margin, tol)
    assert worst is not None
    _, row, margin, tol = worst
    name = f"{what} {labels[row] if labels else row}"
    details.update(differing=differing, worst=name, margin=margin, tolerance=tol)
    first = differing[0]
    words = f"{name}: margin {_fmt(margin)} {'<=' if margin <= tol else '>'} "
    words += f"tolerance {_fmt(tol)} ({dtype})"
    if margin <= tol:
        return Check(True, f"~ near-tie at {words}", details, first, margin, tol)
    return Check(False, f"N at {words}", details, first, margin, tol)


def compare_scores(fp32: torch.Tensor, bf16: torch.Tensor, device: torch.Tensor) -> Check:
    """Single-output head: each score within max(1.0, 2 x the CPU bf16 run's distance)."""
    f, h, d = (t.double().flatten() for t in (fp32, bf16, device))
    distance = (d - f).abs()
    bf16_distance = (h - f).abs()
    limit = torch.clamp(DRIFT_FACTOR * bf16_distance, min=SCORE_TOLERANCE)
    excess = distance - limit
    worst = int(excess.argmax())
    details: dict[str, Any] = {
        "rule": "score",
        "fp32": f.tolist(),
        "cpu_bf16": h.tolist(),
        "device": d.tolist(),
        "distance": float(distance[worst]),
        "bf16_distance": float(bf16_distance[worst]),
        "limit": float(limit[worst]),
    }
    words = (
        f"score {_fmt(float(d[worst]))} vs CPU {_fmt(float(f[worst]))}: distance "
        f"{_fmt(float(distance[worst]))}"
    )
    limit_words = f"max({SCORE_TOLERANCE}, 2 x bf16 {_fmt(float(bf16_distance[worst]))})"
    if bool((excess <= 0).all()):
        return Check(
            True, "Y", details, margin=float(distance[worst]), tolerance=float(limit[worst])
        )
    return Check(
        False,
        f"N {words} > {limit_words}",
        details,
        margin=float(distance[worst]),
        tolerance=float(limit[worst]),
    )


def cosine_per_token(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of each row of ``[T, H]`` tensors, in float64."""
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)


def compare_hidden(fp32: torch.Tensor, bf16: torch.Tensor, device: torch.Tensor) -> Check:
    """No head: each token's hidden state against fp32's (``[T, H]``, padding removed)."""
    cos_dev = cosine_per_token(device, fp32)
    cos_bf16 = cosine_per_token(bf16, fp32)
    dist_dev = 1.0 - cos_dev
    dist_bf16 = 1.0 - cos_bf16
    ok = (cos_dev >= COSINE_MIN) | (dist_dev <= DRIFT_FACTOR * dist_bf16)
    worst = int(cos_dev.argmin())
    details: dict[str, Any] = {
        "rule": "hidden",
        "tokens": int(fp32.shape[0]),
        "min_cosine": float(cos_dev.min()),
        "worst_token": worst,
        "bf16_distance_at_worst": float(dist_bf16[worst]),
        "min_cosine_cpu_bf16": float(cos_bf16.min()),
        "failing_tokens": [int(i) for i in (~ok).nonzero().flatten().tolist()],
    }
    margin, tolerance = float(dist_dev[worst]), float(DRIFT_FACTOR * dist_bf16[worst])
    if bool(ok.all()):
        return Check(True, "Y", details, margin=margin, tolerance=tolerance)
    bad = int((~ok).nonzero()[0])
    words = (
        f"N at token {bad}: cosine {float(cos_dev[bad]):.6f} < {COSINE_MIN} and distance "
        f"{_fmt(float(dist_dev[bad]))} > 2 x bf16 {_fmt(float(dist_bf16[bad]))}"
    )
    return Check(False, words, details, bad, float(dist_dev[bad]), float(2 * dist_bf16[bad]))
