"""Tolerances from measured noise: the device's error against a float64 CPU reference held to
``ACCURACY_MULTIPLE`` times the CPU eager run's (in the device's dtype) plus a floor
(``EPS[dtype] * max(1, ACCURACY_FLOOR_EPS / sqrt(n))`` over ``n`` numbers).

Constructed tensors in, decision out (as ``test_compare.py``); then the float64 reference of a
zoo model, cached in its file and reused."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_neuronsupport import zoo
from pytest_neuronsupport.pipeline import classify
from pytest_neuronsupport.runners.lib.compare import (
    ACCURACY_FLOOR_EPS,
    ACCURACY_MULTIPLE,
    EPS,
    Check,
    compare_tokens,
    held_to_noise,
)
from pytest_neuronsupport.runners.lib.device_ops import CpuOps
from pytest_neuronsupport.runners.lib.protocol import REFERENCE_ENV, Result
from tests.sweeping import SweepRunner

K, FP32_EPS = ACCURACY_MULTIPLE, 2.0**-23
#: The fixed near-tie rule's tolerance at step 2 of :func:`decoder` in fp32 (its largest score
#: 10): the floor of the float64 margin rule.
FIXED = 4 * FP32_EPS * 10.0


def floor(dtype: str, n: int) -> float:
    """The tolerance of ``n`` numbers whose eager run is exact, as the module states it."""
    return EPS[dtype] * max(1.0, ACCURACY_FLOOR_EPS / math.sqrt(n))


def row(values: dict[int, float], vocab: int = 8) -> torch.Tensor:
    scores = torch.full((vocab,), -5.0, dtype=torch.float64)
    for index, value in values.items():
        scores[index] = value
    return scores


def decoder(margin: float, noise: float) -> tuple[list[int], torch.Tensor, dict[str, Any]]:
    """The CPU's tokens 5, 5, 3; at step 2 float64 prefers 3 over 4 by ``margin``; the eager
    run's scores there are float64's with candidate 7 off by ``noise`` (its margin error)."""
    exact = torch.stack([row({5: 10.0}), row({5: 10.0}), row({3: 10.0, 4: 10.0 - margin})])
    eager = exact.clone()
    eager[2, 7] += noise
    runs = {"fp64": ([5, 5, 3], exact), "eager": ([5, 5, 3], eager)}
    return [5, 5, 3], exact.float().double(), runs


def dev(runs: dict[str, Any]) -> tuple[list[int], torch.Tensor]:
    """The device took 4 at step 2, its scores those of the eager run (within its noise)."""
    return [5, 5, 4], runs["eager"][1].clone()


@pytest.mark.parametrize(("margin", "passed"), [(3.0e-4, True), (3.1e-4, False)])
def test_a_decoder_near_tie_is_held_to_k_times_eager_noise_plus_the_floor(
    margin: float, passed: bool
) -> None:
    ref, scores, runs = decoder(margin, noise=1e-4)
    check = compare_tokens({"tokens": ref, "scores": scores, **runs}, dev(runs), "float32")
    assert check.passed is passed
    tolerance = K * 1e-4 + FIXED  # 3.048e-4: the fixed rule alone would be 4.8e-6
    assert check.near_tie_tolerance == pytest.approx(tolerance)
    assert check.divergence_margin == pytest.approx(margin)
    numbers = check.check["fp64_margin"]
    assert numbers["error_device"] == pytest.approx(margin)
    assert numbers["error_eager"] == pytest.approx(1e-4)
    assert numbers["tolerance"] == pytest.approx(tolerance)
    assert check.cpu_match.startswith("~ near-tie at token 2" if passed else "N at token 2")


def test_eager_noise_ignores_a_shift_of_every_score() -> None:
    ref, scores, runs = decoder(1e-4, noise=0.0)
    runs["eager"][1][2] += 1e-4  # every score of step 2 moved alike: no choice changes
    check = compare_tokens({"tokens": ref, "scores": scores, **runs}, dev(runs), "float32")
    assert check.check["fp64_margin"]["error_eager"] == pytest.approx(0.0, abs=1e-12)
    assert check.near_tie_tolerance == pytest.approx(FIXED)
    assert not check.passed  # 1e-4 > the floor: exact agreement leaves no room but the floor


def test_eager_noise_is_taken_over_the_plausible_candidates_not_the_vocabularys_tail() -> None:
    """At the divergence, eager's margin error is the largest over the best CANDIDATES in
    float64: a candidate far down the vocabulary, however far off, widens nothing."""
    from pytest_neuronsupport.runners.lib.compare import CANDIDATES

    vocab = 4 * CANDIDATES
    exact = torch.linspace(8.0, -9.0, vocab, dtype=torch.float64).repeat(3, 1)
    exact[:, 5], exact[2, 3], exact[2, 4] = 10.0, 10.0, 10.0 - 0.05
    exact[:2, 3] = -9.5  # steps 0 and 1 chose 5
    eager = exact.clone()
    eager[2, 1] += 1e-4  # among the best
    eager[2, vocab - 1] += 0.01  # the tail: 100 times as far off
    runs = {"fp64": ([5, 5, 3], exact), "eager": ([5, 5, 3], eager)}
    reference = {"tokens": [5, 5, 3], "scores": exact.float().double(), **runs}
    check = compare_tokens(reference, ([5, 5, 4], eager.clone()), "float32")
    assert check.check["fp64_margin"]["error_eager"] == pytest.approx(1e-4)
    assert check.near_tie_tolerance == pytest.approx(K * 1e-4 + FIXED)
    assert not check.passed  # 0.05: with the tail's error, 3 x 0.01 + FIXED would pass it


def test_the_margin_is_float64s_so_a_device_choosing_its_best_passes() -> None:
    """The CPU fp32 run took 3; in float64 token 4 is better: the device's 4 has no error."""
    ref, scores, runs = decoder(-0.5, noise=0.0)
    check = compare_tokens({"tokens": ref, "scores": scores, **runs}, dev(runs), "float32")
    assert check.passed and check.divergence_margin == 0.0
    assert check.check["margin_fp32"] == pytest.approx(-0.5)


def test_without_float64_the_fixed_rule_decides_and_says_why() -> None:
    ref, scores, runs = decoder(0.03, noise=0.01)
    unavailable = {"fp64_unavailable": "the host's memory cannot hold the model in float64"}
    check = compare_tokens({"tokens": ref, "scores": scores, **unavailable}, dev(runs), "float32")
    assert not check.passed  # 0.03 > 4 * 2**-23 * 10
    assert check.near_tie_tolerance == pytest.approx(4 * 2.0**-23 * 10.0)
    assert check.check["fp64"] == unavailable["fp64_unavailable"]


def test_a_float64_run_whose_tokens_parted_earlier_leaves_the_fixed_rule() -> None:
    ref, scores, runs = decoder(0.03, noise=0.01)
    runs["fp64"] = ([5, 6, 3], runs["fp64"][1])  # float64 took 6 at step 1
    check = compare_tokens({"tokens": ref, "scores": scores, **runs}, dev(runs), "bfloat16")
    assert check.near_tie_tolerance == pytest.approx(4 * 2.0**-7 * 10.0)
    assert check.check["fp64_margin"] == "no float64 scores at token 2"


def logits(device_error: float, eager_error: float) -> tuple[dict[str, Any], torch.Tensor]:
    """A reference whose runs all took 5, 5, 3 (scores of norm 20: two of 10 a step), and the
    device's scores: eager's and the device's off float64 by the given relative errors, at one
    score of step 1."""
    ref, scores, runs = decoder(1.0, noise=0.0)
    exact = runs["fp64"][1]
    runs["fp64"] = ([5, 5, 3], exact)
    off = torch.zeros_like(exact)
    off[1, 0] = float(exact.norm())
    runs["eager"] = ([5, 5, 3], exact + eager_error * off)
    return {"tokens": ref, "scores": scores, **runs}, exact + device_error * off


@pytest.mark.parametrize(("device_error", "passed"), [(3.0e-5, True), (3.06e-5, False)])
def test_a_decoders_scores_are_held_to_k_times_eager_error_at_equal_tokens(
    device_error: float, passed: bool
) -> None:
    reference, scores = logits(device_error, eager_error=1e-5)
    check = compare_tokens(reference, ([5, 5, 3], scores), "float32")
    assert check.passed is passed
    numbers = check.check["fp64"]
    assert numbers["error_device"] == pytest.approx(device_error)
    assert numbers["error_eager"] == pytest.approx(1e-5)
    assert numbers["tolerance"] == pytest.approx(K * 1e-5 + floor("float32", 3 * 8))
    assert check.check["positions"] == 3
    assert (
        check.cpu_match == "Y" if passed else check.cpu_match.startswith("N scores at tokens 0-2")
    )


def test_a_decoders_scores_are_compared_where_every_run_saw_the_same_tokens() -> None:
    """float64 took 6 at step 1: its step-1 scores still follow the same tokens, step 2 not."""
    reference, scores = logits(0.0, eager_error=0.0)
    reference["fp64"] = ([5, 6, 3], reference["fp64"][1])
    scores[2] += 100.0  # a step after the runs parted: not compared
    check = compare_tokens(reference, ([5, 5, 3], scores), "float32")
    assert check.passed and check.check["positions"] == 2


def test_a_decoders_non_finite_score_fails_but_a_score_float64_rules_out_is_left_out() -> None:
    reference, scores = logits(0.0, eager_error=0.0)
    for run in (reference["fp64"][1], reference["eager"][1], scores):
        run[0, 7] = -torch.inf  # ruled out in every run (a logits processor): left out
    assert compare_tokens(reference, ([5, 5, 3], scores), "float32").passed
    scores[0, 6] = torch.nan
    check = compare_tokens(reference, ([5, 5, 3], scores), "float32")
    assert not check.passed and check.cpu_match.startswith("N scores")


def test_a_near_tie_whose_scores_are_off_fails_on_its_scores() -> None:
    reference, scores = logits(1e-4, eager_error=1e-5)
    reference["tokens"] = [5, 5, 4]  # the CPU fp32 run took 4 at step 2: float64 prefers 3
    assert compare_tokens(reference, ([5, 5, 3], reference["eager"][1]), "float32").passed
    check = compare_tokens(reference, ([5, 5, 3], scores), "float32")
    assert not check.passed and check.cpu_match.startswith("N scores at tokens 0-2")


def encoder(device_error: float, eager_error: float) -> tuple[torch.Tensor, dict[str, Any]]:
    """Outputs of norm 10, the eager run and the device off float64 by the given relative
    errors."""
    exact = torch.zeros(4, 25, dtype=torch.float64)
    exact[0, 0] = 10.0
    off = torch.zeros_like(exact)
    off[1, 1] = 10.0
    return exact + device_error * off, {"fp64": exact, "eager": exact + eager_error * off}


@pytest.mark.parametrize(("device_error", "passed"), [(3.0e-5, True), (3.02e-5, False)])
def test_an_encoder_is_held_to_k_times_eager_error_plus_the_floor(
    device_error: float, passed: bool
) -> None:
    device, ref = encoder(device_error, eager_error=1e-5)
    fixed = Check(True, "Y", {"rule": "hidden", "min_cosine": 0.9999})
    check = held_to_noise(fixed, device, ref, "float32")
    assert check.passed is passed
    assert check.near_tie_tolerance == pytest.approx(K * 1e-5 + floor("float32", 100))
    assert check.divergence_margin == pytest.approx(device_error)
    assert check.check["fp64"]["error_eager"] == pytest.approx(1e-5)
    assert check.check["min_cosine"] == 0.9999  # the fixed rule's numbers stay
    assert check.cpu_match == "Y" if passed else check.cpu_match.startswith("N error to fp64")


def test_an_encoder_within_noise_passes_where_the_fixed_rule_failed() -> None:
    device, ref = encoder(2e-3, eager_error=1e-3)
    check = held_to_noise(Check(False, "N mask 0: margin ..."), device, ref, "bfloat16")
    assert check.passed and check.cpu_match.startswith("~ near-tie: error to fp64")


def test_the_floor_is_16_eps_of_the_dtype_for_one_number_and_one_eps_for_many() -> None:
    """One number's error is one sample of the noise, small by luck often enough; many are
    not all small by luck, and one eps is left for an output eager computes exactly."""
    assert ACCURACY_FLOOR_EPS == 16 and EPS == {
        "bfloat16": 2**-7,
        "float16": 2**-10,
        "float32": FP32_EPS,
    }
    assert floor("float32", 1) == 16 * FP32_EPS
    assert floor("float32", 4) == 8 * FP32_EPS
    assert floor("float32", 256) == floor("float32", 10**6) == FP32_EPS
    assert floor("bfloat16", 1) == 16 * 2.0**-7
    device, ref = encoder(1.5 * FP32_EPS, eager_error=0.0)  # 100 numbers: a floor of 1.6 eps
    assert held_to_noise(Check(True, "Y"), device, ref, "float32").passed
    device, ref = encoder(1.7 * FP32_EPS, eager_error=0.0)
    assert not held_to_noise(Check(True, "Y"), device, ref, "float32").passed


def test_exact_zeros_are_held_to_the_floor_in_absolute_terms() -> None:
    """Errors are relative to ``max(1, |y64|)``: an output that is zero in float64 and in eager
    leaves a device off by 1e-8 everywhere within one eps, not infinitely far."""
    zeros = torch.zeros(4, 25, dtype=torch.float64)
    ref = {"fp64": zeros, "eager": zeros}
    assert held_to_noise(Check(True, "Y"), zeros + 1e-8, ref, "float32").passed
    assert not held_to_noise(Check(True, "Y"), zeros + 1e-7, ref, "float32").passed
    ruled_out = torch.full((4, 25), -torch.inf, dtype=torch.float64)  # no number to compare
    ref = {"fp64": ruled_out, "eager": ruled_out}
    assert held_to_noise(Check(True, "Y"), ruled_out, ref, "float32").passed


def test_an_encoder_without_float64_keeps_the_fixed_rule_and_says_why() -> None:
    device, _ = encoder(0.5, eager_error=0.0)
    fixed = Check(True, "Y (CPU bf16)", {"rule": "predictions"})
    check = held_to_noise(fixed, device, {"fp64_unavailable": "a pass failed"}, "bfloat16")
    assert check is fixed and check.passed
    assert check.check["fp64"] == "a pass failed: the fixed rule decided"


# --- the float64 reference of a run: computed once, kept in its file, reused --------------------


@pytest.mark.parametrize(
    ("model", "runner", "entry"),
    [("distilbert-sst", "encoder", "run_sequence_classification"), ("gpt2", "dense", "run")],
)
def test_the_float64_reference_is_cached_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, runner: str, entry: str
) -> None:
    import importlib

    run = getattr(importlib.import_module(f"pytest_neuronsupport.runners.{runner}"), entry)
    params: dict[str, Any] = {"checkpoint": str(zoo.ensure_built(model, tmp_path))}
    params.update(dtype="float32", device="cpu", backend="eager", fullgraph=False)
    params.update(prefill_chunk=None)
    reference = tmp_path / "reference.pt"
    monkeypatch.setenv(REFERENCE_ENV, str(reference))
    first = run(params, CpuOps())
    kept = torch.load(reference, weights_only=True)
    assert "fp64" in kept and "eager" in kept, kept.get("fp64_unavailable")
    again = run(params, CpuOps())
    assert (first["reference_cached"], again["reference_cached"]) == (False, True)
    assert first["result"] == again["result"] == Result.PASS
    check = json.loads(classify.verdict_fields(again)["check"])
    if runner == "encoder":  # eager on the "device": its error is the eager fp32 run's
        numbers = check["fp64"]
        assert numbers["error_device"] == pytest.approx(numbers["error_eager"])
        assert 0 < numbers["error_eager"] < 1e-5
        above = numbers["tolerance"] - K * numbers["error_eager"]  # the floor
        assert FP32_EPS <= above * (1 + 1e-9) and above <= floor("float32", 1)
    else:
        assert check["rule"] == "tokens" and first["cpu_match"] == "Y"
        numbers = check["fp64"]  # eager on the "device": its scores are the reference's own
        assert numbers["error_device"] == pytest.approx(numbers["error_eager"])
        assert 0 < numbers["error_eager"] < 1e-5 and check["positions"] >= 1
        tokens, scores = kept["fp64"]
        assert tokens == kept["tokens"] and scores.dtype == torch.float64
    params["fp64_reference"] = False  # a host too small: the reference file is another's
    monkeypatch.setenv(REFERENCE_ENV, str(tmp_path / "small-host.pt"))
    small = run(params, CpuOps())
    assert "fp64" not in torch.load(tmp_path / "small-host.pt", weights_only=True)
    if runner == "encoder":
        assert (
            "cannot hold the model in float64"
            in json.loads(classify.verdict_fields(small)["check"])["fp64"]
        )


def test_a_float64_reference_runs_where_the_host_holds_the_model_in_fp32_and_fp64() -> None:
    from pytest_neuronsupport.pipeline.sizing import (
        HOST_SHARE,
        host_holds_fp64,
        total_memory_bytes,
    )

    fits = int(HOST_SHARE * total_memory_bytes() / 6 * 0.9)  # bf16 bytes: x2 fp32, x4 fp64
    assert host_holds_fp64(fits) and not host_holds_fp64(fits * 2)
    assert host_holds_fp64(None)


def test_an_encoder_is_held_to_float64_at_every_position_and_the_fixed_rule_at_its_rows() -> None:
    """A token classifier padded to 4 tokens, 2 of them text: the two best labels of the last
    (padding) token traded places. The fixed rule reads the text's rows and sees nothing; held
    to float64, every position is compared and the swap fails."""
    from pytest_neuronsupport.runners.encoder import TOKEN_CLASSIFICATION as head

    exact = torch.tensor([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0], [1.0, 0.0, 2.0], [2.0, 1.5, 0.0]])
    swapped = exact.clone()
    swapped[3, :2] = swapped[3, :2].flip(0)
    encoded = {"attention_mask": torch.tensor([[1, 1, 0, 0]])}
    rows = [head.rows(t, encoded, None) for t in (exact, exact, swapped)]
    fixed = head.check(rows[0], rows[1], rows[2], "float32")
    assert fixed.passed and fixed.cpu_match == "Y"
    check = held_to_noise(fixed, swapped, {"fp64": exact.double(), "eager": exact}, "float32")
    assert not check.passed and check.cpu_match.startswith("N error to fp64")


def test_a_reference_file_made_for_another_dtype_is_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference holds an eager run in the run's dtype: a bf16 run handed the file of an
    fp32 one (the same name, as a cache keyed without the dtype gave it) computes its own, and
    the fp32 run after it computes its own again; none is judged by another's noise."""
    from pytest_neuronsupport.runners.dense import run

    params: dict[str, Any] = {"checkpoint": str(zoo.ensure_built("gpt2", tmp_path))}
    params.update(device="cpu", backend="eager", fullgraph=False, prefill_chunk=None)
    monkeypatch.setenv(REFERENCE_ENV, str(tmp_path / "reference.pt"))
    kept = {}
    for dtype in ("float32", "bfloat16", "float32"):
        verdict = run({**params, "dtype": dtype}, CpuOps())
        assert verdict["reference_cached"] is False, dtype
        kept[dtype] = torch.load(tmp_path / "reference.pt", weights_only=True)
        assert kept[dtype]["key"]["dtype"] == dtype
        numbers = json.loads(classify.verdict_fields(verdict)["check"])["fp64"]
        if dtype == "float32":  # the device ran eager: its scores are the reference's own
            assert numbers["error_device"] == pytest.approx(numbers["error_eager"])
        else:  # the host's bf16 kernels against bf16 rounded at each operation: alike
            assert 0.5 < numbers["error_device"] / numbers["error_eager"] < 2
    assert run({**params, "dtype": "float32"}, CpuOps())["reference_cached"] is True
    bf16, fp32 = kept["bfloat16"]["eager"][1], kept["float32"]["eager"][1]
    assert not torch.equal(bf16, fp32)


def test_a_reference_is_named_by_every_parameter_but_those_of_the_device(tmp_path: Path) -> None:
    """The plugin's name for a reference file changes with the dtype, the prefill chunk, the
    float64 side, the runner's entry and the packages; not with the backend, the device, the
    cores or the judge, which change nothing of the CPU's runs."""
    from dataclasses import replace

    from pytest_neuronsupport.modellist import ModelSpec
    from pytest_neuronsupport.pipeline.plan import Plan
    from pytest_neuronsupport.pipeline.reference import reference_file
    from pytest_neuronsupport.pipeline.render import RunParams, ScriptPlan
    from pytest_neuronsupport.runners import builtin_runners

    checkpoint = zoo.ensure_built("gpt2", tmp_path)
    runner = next(r for r in builtin_runners() if r.name == "dense")
    spec = ModelSpec(id="zoo:gpt2", source=tmp_path / "models.toml", line=1)
    planned = Plan(spec, checkpoint=str(checkpoint), runner=runner)
    params = RunParams("zoo:gpt2", str(checkpoint), "dense", "cpu", "inductor", "float32", False)
    code = ScriptPlan(runner.module, "run", "main", "CpuOps", runner.column)
    stack = {"torch": "2.13.0", "transformers": "5.25.0"}

    def name(p: RunParams = params, c: ScriptPlan = code) -> Path | None:
        return reference_file(tmp_path, planned, stack, p, c)

    same = [
        replace(params, backend="aot_eager"),
        replace(params, device="neuron", fullgraph=True),
        replace(params, cores=2, judge="zoo:judge", model_id="other"),
    ]
    assert {name(p) for p in same} == {name()}
    other = [
        name(replace(params, dtype="bfloat16")),
        name(replace(params, dtype="float16")),
        name(replace(params, prefill_chunk=8)),
        name(replace(params, fp64_reference=False)),
        name(replace(params, revision="abc")),
        name(c=replace(code, runner_entry="run_ranks")),
        name(c=replace(code, packages=("einops",))),
    ]
    assert len({name(), *other}) == len(other) + 1


@pytest.mark.slow
def test_one_cache_swept_in_fp32_then_bf16_then_fp32_gives_fresh_caches_verdicts(
    sweep: SweepRunner,
) -> None:
    """deberta-v2-ner's bf16 error against float64 is above one bf16 eps (about 0.009): held to
    an fp32 reference's eager noise (about 2e-7), as when a reference's name did not hold the
    dtype, its bf16 sweep after an fp32 one failed. With one cache, fp32, bf16, then fp32 again:
    the bf16 run computes its own reference (its eager run in bf16), and the last fp32 run reads
    the first's, whose numbers it repeats exactly."""
    model = "zoo:deberta-v2-ner"
    runs = [sweep.run(model), sweep.run(model, args=["--neuron-dtype", "bfloat16"])]
    runs.append(sweep.run(model))
    rows = [done.row(model) for done in runs]
    assert [row["result"] for row in rows] == ["PASS"] * 3, [r["cpu_match"] for r in rows]
    assert [row["dtype"] for row in rows] == ["float32", "bfloat16", "float32"]
    cached = [json.loads(row["check"])["reference_cached"] for row in rows]
    assert cached[1:] == [False, True]
    fp32, bf16, again = ((r["fp64_error_eager"], r["fp64_tolerance"]) for r in rows)
    assert again == fp32 and fp32[0] < 1e-5
    assert bf16[0] > 1e-3 and rows[1]["fp64_error_device"] <= bf16[1]


def test_an_eager_run_beyond_rounding_from_float64_leaves_the_decision_to_the_fixed_rule() -> None:
    """Where float64 computes something else than the model in its dtype (a GPT-Neo whose
    masked rows depend on the dtype's range), eager's error is not rounding: held to K times
    it, a swapped top two would pass as a near-tie. The fixed rule decides, and says why."""
    ref, scores, runs = decoder(0.05, noise=0.0)
    exact = runs["fp64"][1]
    runs["eager"] = ([5, 5, 3], exact * 1.12)  # 12% from float64 everywhere, as GPT-Neo's
    swapped = dev(runs)
    check = compare_tokens({"tokens": ref, "scores": scores, **runs}, swapped, "float32")
    assert not check.passed and check.cpu_match.startswith("N at token 2")
    assert check.check["fp64"].startswith("eager float32 0.12 from float64, beyond rounding")
    assert check.near_tie_tolerance == pytest.approx(FIXED)  # not K x 12%
    within = decoder(0.05, noise=0.0)[2]  # the same swap, eager within rounding (exact)
    check = compare_tokens({"tokens": ref, "scores": scores, **within}, dev(within), "float32")
    assert not check.passed and isinstance(check.check["fp64"], dict)
    device, encoded = encoder(0.1, eager_error=0.05)  # an encoder 5% off float64 in fp32
    fixed = Check(True, "Y", {"rule": "hidden"})
    check = held_to_noise(fixed, device, encoded, "float32")
    assert check is fixed and "beyond rounding" in check.check["fp64"]
    assert held_to_noise(fixed, device, encoded, "bfloat16").check["fp64"]["error_eager"] == 0.05


def test_a_divergence_where_eagers_margin_error_is_beyond_rounding_takes_the_fixed_rule() -> None:
    """The scores agree with float64 overall, but at the divergence eager's margin error is
    larger than rounding explains: float64's margin decides nothing there."""
    ref, scores, runs = decoder(0.05, noise=0.0)
    runs["eager"][1][2, 3] -= 0.003  # 1e-4 of the steps' scores: within fp32's rounding bound
    check = compare_tokens({"tokens": ref, "scores": scores, **runs}, dev(runs), "float32")
    assert isinstance(check.check["fp64"], dict)
    # at step 2, 3e-4 of its largest score (10): beyond 2 x the bound (2.4e-4)
    assert check.check["fp64_margin"].startswith("eager's margin error 0.003 > rounding")
    assert not check.passed and check.near_tie_tolerance == pytest.approx(FIXED)
