"""The output checks: a device's output against the CPU reference.

Definitions (also in docs/runners.md, "The output check"):

* **Measured noise** (PyTorch's accuracy checker, ``torch._dynamo.utils.same``): the CPU also
  computes the output in float64 (the exact reference) and eagerly in the device's own dtype (a
  half dtype rounded at each operation as the dtype defines it, the same on every host:
  ``rounding.py``); the device passes when its error against float64 is at most
  ``ACCURACY_MULTIPLE x`` the eager run's error against float64 plus a floor, ``EPS[dtype] *
  max(1, ACCURACY_FLOOR_EPS / sqrt(n))`` over the ``n`` numbers compared (:func:`held`; the
  training step's check is held by it too). The errors are ``|y - y64| / max(1, |y64|)`` (norms
  over the entries finite in float64: relative, and absolute for an output near zero). The
  ``check`` JSON's ``fp64`` holds the three numbers (``error_device``, ``error_eager``,
  ``tolerance``), or says why float64 could not decide (a host too small for the model in
  float64, a pass that raised, an eager run not finite where float64 is: ``eager NaN/inf``): the
  fixed rules below then decide, as before.
* **Decoder scores, with float64**: the device's scores against float64's at every position
  the device, float64 and eager runs reached by the same tokens (``positions`` of them: up to
  and including the first where one parts). Beyond the tolerance: ``N scores ...``, whatever
  the tokens (logits 1% off whose greedy tokens agree are caught here only);
  ``first_divergence`` is then the first position whose own scores are beyond it.
* **Near-tie, with float64.** At the first position ``i`` where the tokens differ, ``x`` is the
  float64 run's scores (its tokens before ``i`` being the CPU fp32 run's, so ``x`` is what a
  teacher-forced pass gives), ``c`` its best candidate (among those the CPU did not rule out)
  and ``b`` the device's choice. The device's error is the margin ``x[c] - x[b]`` by which its
  choice falls short of the best in exact arithmetic; the eager run's error is the largest
  ``|(e[c] - e[j]) - (x[c] - x[j])|`` over the :data:`CANDIDATES` best candidates ``j`` in
  float64 (``e``: its scores there), the choices a device could plausibly make.
  A near-tie (PASS) when ``margin <= ACCURACY_MULTIPLE * error_eager + fixed`` (``fixed``: the
  fixed rule's tolerance below, the dtype's noise at the scores' scale, as the floor;
  ``check.fp64_margin``). Why the largest margin error and not that of the pair ``(c, b)``
  alone: one pair's error is a single sample of the noise, near zero by luck often enough
  that K times it would call a flip rounding explains wrong; the largest over the plausible
  candidates is a stable figure of what the dtype does at that position (at most twice the
  largest error of one score), and, unlike the scores' own error, ignores a shift of them all,
  which changes no choice. Over every candidate instead, the vocabulary's tail, never a
  plausible choice, set the allowance, which grew with the vocabulary.
* **Near-tie, fixed rule** (without float64). Let ``z`` be the CPU fp32 scores at one position,
  ``a`` the CPU's choice and ``b`` the device's; the margin is ``z[a] - z[b]`` and the
  tolerance ``NEAR_TIE_FACTOR * eps(dtype) * max(1, max(|z|))`` (``eps``: bf16 2**-7, fp16
  2**-10, fp32 2**-23; factor 4). A near-tie when ``margin <= tolerance``; a candidate the CPU
  ruled out (score ``-inf``) never is one.
* **Decoder tokens.** Equal to the CPU fp32 tokens → ``Y``. Otherwise the first position where
  they differ decides: a near-tie there → ``~ near-tie ...`` (PASS), else ``N ...``.
* **Encoders, with float64**: the device passes when the relative error ``|y - y64| / |y64|``
  (norms over the head's whole output, every position, padding included) is at most
  ``ACCURACY_MULTIPLE x`` the eager run's plus the floor (:func:`held_to_noise`); its
  ``cpu_match`` is the fixed rule's when that passed too, else ``~ near-tie ...`` (passed) or
  ``N ...``. Without float64, the fixed rules decide:
* Encoder predictions (masked word, each token's label, the class, the answer span's start
  and end): equal to the CPU fp32 predictions → ``Y``; equal to the CPU bf16 predictions →
  ``Y (CPU bf16)``; differing from fp32 only at near-ties → ``~ near-tie ...``; else ``N``.
* Single-output head (a reranker's score): ``|device - fp32| <= max(1.0, 2 * |bf16 - fp32|)``.
* No head (hidden states): each token passes when its cosine similarity with fp32 is at least
  0.99, or its cosine distance ``1 - cos`` is at most twice the CPU bf16 run's distance for that
  token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pytest_neuronsupport.runners.lib.models import torch_dtype
from pytest_neuronsupport.runners.lib.protocol import DTYPES

NEAR_TIE_FACTOR = 4.0
#: How many candidates, the best in float64 first, the eager run's margin error is the largest
#: over at a decoder's divergence: the choices a device could plausibly make, never the
#: vocabulary's tail (whose largest error grows with the vocabulary and with how the host rounds:
#: SmolLM2's 49,152 candidates gave 0.26 to 0.43, its best 32 gave 0.10 to 0.21).
CANDIDATES = 32
#: A device's error against float64 may be ``ACCURACY_MULTIPLE`` x eager's plus a floor,
#: ``EPS[dtype] * max(1, ACCURACY_FLOOR_EPS / sqrt(n))`` over ``n`` numbers (:func:`held`, the
#: rule once, for every check that has a tolerance). 3 is PyTorch's multiplier for mixed
#: precision and small tensors (2 for large fp32 ones). The floor is for an eager run exact by
#: luck: one number's error is a single sample of the noise, ten times under its typical size
#: one time in 12, so one number gets 16 eps of its dtype (four numbers 8); many cannot all be
#: lucky, so 256 or more get one eps (an output eager computes exactly: zeros).
ACCURACY_MULTIPLE = 3.0
ACCURACY_FLOOR_EPS = 16.0
#: The largest error of an eager run against float64 that rounding in its dtype explains
#: (relative, as :func:`held` measures it); beyond it, float64 computes something else than the
#: model in that dtype (masks whose sum depends on the dtype's range...) and is no reference.
#: 16 eps for the half types, whose matmuls accumulate in fp32 (eager's error measured at most
#: 1.9 eps in bf16, 2.7 in fp16, on the zoo and real checkpoints), 1024 for fp32, whose own
#: accumulations add up with width and depth (8.4 eps measured on SmolLM2-135M).
ROUNDING = {"bfloat16": 2.0**-3, "float16": 2.0**-6, "float32": 2.0**-13}
EPS = {name: float(torch.finfo(getattr(torch, name)).eps) for name in DTYPES}
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


def fixed_margin(scores: Tensor, choice: int, other: int, dtype: str) -> tuple[float, float]:
    """The fixed rule at one position: the margin ``scores[choice] - scores[other]`` in float64
    (inf if the latter is -inf), and the noise level under which the two count as tied."""
    z, eps = scores.double(), float(torch.finfo(torch_dtype(dtype)).eps)  # bf16 2^-7, fp32 2^-23
    margin = float(z[choice] - z[other]) if z[other] > -torch.inf else torch.inf
    return margin, NEAR_TIE_FACTOR * eps * max(1.0, float(z.nan_to_num(0, 0, 0).abs().max()))


def near_tie(where: str, margin: float, tol: float, dtype: str, **check: Any) -> Check:
    """The check of a difference at ``where``: passed when it is a near-tie and ``off`` (why it
    fails all the same, which the message then says: an earlier failure) is empty."""
    ok, off = margin <= tol, check.pop("off", "")
    words = f"at {where}: margin {margin:.4g} {'<=' if ok else '>'} tolerance {tol:.4g}"
    text = off or f"{'~ near-tie' if ok else 'N'} {words} ({dtype})"
    return Check(ok and not off, text, **check, divergence_margin=margin, near_tie_tolerance=tol)


def compare_tokens(ref: dict[str, Any], dev: Any, dtype: str) -> Check:
    """Decoder rule (see the module): the device's tokens and scores (``dev``) against the CPU
    fp32 run's ``tokens`` and ``scores``, and its ``fp64`` and ``eager`` runs, if any.

    Each run is ``(tokens, scores)``, scores ``[steps, vocab]`` (the device's may be None);
    without float64, ``fp64_unavailable`` says why."""
    (want, got), runs = (ref["tokens"], dev[0]), [dev, ref.get("fp64"), ref.get("eager")]
    details: dict[str, Any] = dict(rule="tokens", dtype=dtype, reference_tokens=want)
    shorter, off, details["fp64"] = min(len(want), len(got)), "", ref.get("fp64_unavailable")
    i = at = next((k for k, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), shorter)
    if None not in runs and dev[1] is not None:  # the scores where all runs had the same tokens
        n = min(len(s) for _, s in runs)
        n = next((k + 1 for k in range(n) if len({t[k] for t, _ in runs}) > 1), n)
        (ok, details["fp64"]), details["positions"] = held(dtype, *(s[:n] for _, s in runs)), n
        off = "" if ok is not False else f"N scores at tokens 0-{n - 1}: "  # whatever tokens
        off += beyond(details["fp64"], dtype) if off else ""
        at = next((k for k in range(n) if off and not held(dtype, *(s[k] for _, s in runs))[0]), i)
    if list(got) == list(want):  # at: the first position beyond on its own (else i or the last)
        return Check(not off, off or "Y", details, min(at, n - 1) if off else None)
    if i >= min(shorter, len(ref["scores"])):
        stopped = details["stopped_early"] = "device" if len(got) < len(want) else "CPU"
        return Check(False, f"N at token {i}: the {stopped} run stopped early", details, i)
    margin, tol = fixed_margin(ref["scores"][i], want[i], got[i], dtype)
    details.update(cpu_token=want[i], device_token=got[i], margin_fp32=margin)
    details.update(tolerance_fp32=tol, fp64_margin=f"no float64 scores at token {i}")
    if margin < float("inf") and isinstance(details["fp64"], dict) and details["positions"] > i:
        x, d = runs[1][1][i], runs[2][1][i] - runs[1][1][i]  # d: the eager run's error
        allowed = torch.where(torch.isfinite(ref["scores"][i]), x, -torch.inf)
        best, plausible = int(allowed.argmax()), allowed.topk(min(CANDIDATES, len(x))).indices
        eager = float((d - d[best])[plausible].nan_to_num(0.0, 0.0, 0.0).abs().max())
        bound = 2 * ROUNDING[dtype] * max(1.0, float(x.nan_to_num(0, 0, 0).abs().max()))
        if eager > bound:  # float64 computes otherwise there: the fixed rule decides
            details["fp64_margin"] = f"eager's margin error {eager:.4g} > rounding {bound:.4g}"
        else:
            margin, tol = float(x[best] - x[got[i]]), ACCURACY_MULTIPLE * eager + tol  # floor
            details["fp64_margin"] = dict(error_device=margin, error_eager=eager, tolerance=tol)
    details.update(margin=margin, tolerance=tol)
    return near_tie(f"token {i}", margin, tol, dtype, check=details, first_divergence=at, off=off)


def compare_predictions(what: str, fp32: Tensor, bf16: Tensor, dev: Tensor, dtype: str) -> Check:
    """Encoder rule for predictions: each row of ``[N, C]`` scores predicts its argmax.

    ``what`` names the rows in messages (``"mask"``, ``"token"``, ``"class"``, ``"span"``...),
    with their index (a span's two rows: ``start`` and ``end``).
    """
    p32, p16, pdev = (t.argmax(dim=-1).tolist() for t in (fp32, bf16, dev))
    details: dict[str, Any] = {"rule": "predictions", "what": what, "dtype": dtype}
    details.update(fp32=p32, cpu_bf16=p16, device=pdev)
    if pdev == p32:
        return Check(True, "Y", details)
    if pdev == p16:
        return Check(True, "Y (CPU bf16)", {**details, "matched": "cpu_bf16"})
    differing = [r for r, (a, b) in enumerate(zip(p32, pdev, strict=True)) if a != b]
    found = [(*fixed_margin(fp32[r], p32[r], pdev[r], dtype), r) for r in differing]
    margin, tolerance, row = max(found, key=lambda m: m[0] / m[1])  # the farthest from a tie
    name = f"{what} {('start', 'end')[row] if what == 'span' else row}"
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


def held(
    dtype: str, device: Tensor, exact: Tensor, eager: Tensor, bounded: bool = True
) -> tuple[bool | None, Any]:
    """The rule, once: is the device's error at most K x the eager run's + the floor? and why.

    Errors ``|y - y64| / max(1, |y64|)``, norms over the ``n`` entries finite in float64 (a NaN
    or inf of the device's there fails). Where eager's is not finite, no noise was measured;
    where it is beyond :data:`ROUNDING` (``bounded``), float64 computed something else than the
    model in ``dtype`` does: None, and why (the fixed rule decides, whose tolerance does not
    grow with that difference)."""
    keep, scale = torch.isfinite(exact), exact.nan_to_num(0, 0, 0).norm().clamp(min=1.0)
    error, noise = (float((t - exact)[keep].norm() / scale) for t in (device, eager))
    floor = EPS[dtype] * max(1.0, ACCURACY_FLOOR_EPS / max(1, int(keep.sum())) ** 0.5)
    found = dict(error_device=error, error_eager=noise, tolerance=ACCURACY_MULTIPLE * noise + floor)
    if not noise < torch.inf:
        return None, f"eager {dtype} NaN/inf where float64 is finite: no noise measured"
    if bounded and noise > ROUNDING[dtype]:
        return None, f"eager {dtype} {noise:.4g} from float64, beyond rounding ({ROUNDING[dtype]})"
    return error <= found["tolerance"], found


def beyond(found: dict[str, float], dtype: str) -> str:
    """How far an error is, in the rule's own terms: ``error to fp64 E, R x eager's N;
    3x + floor = T allowed``."""
    e, n, t = found["error_device"], found["error_eager"], found["tolerance"]
    times = f"{e / n:.3g}x" if n > 0 else "eager exact:"
    return f"error to fp64 {e:.4g}, {times} eager {dtype}'s {n:.4g}; allowed {t:.4g}"


def held_to_noise(check: Check, device: Tensor, ref: dict[str, Any], dtype: str) -> Check:
    """An encoder's outputs against float64 (:func:`held`), or ``check``, the fixed rule's.

    Where float64 cannot decide, ``fp64`` says why."""
    why, fp64 = (None, f"{ref.get('fp64_unavailable')}: the fixed rule decided"), ref.get("fp64")
    ok, check.check["fp64"] = held(dtype, device, fp64, ref["eager"]) if fp64 is not None else why
    if ok is None:
        return check
    error, _, tolerance = check.check["fp64"].values()
    words = beyond(check.check["fp64"], dtype)
    text = (check.cpu_match if check.passed else f"~ near-tie: {words}") if ok else f"N {words}"
    return Check(ok, text, check.check, check.first_divergence, error, tolerance)
