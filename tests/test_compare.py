"""The output checks with constructed logits and hidden states, at and around each threshold."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_neuronsupport.runners.lib.compare import (
    Check,
    compare_hidden,
    compare_predictions,
    compare_scores,
    compare_tokens,
    fixed_margin,
    held_to_noise,
)

BF16_EPS = 2.0**-7


def scores_with(values: dict[int, float], vocab: int = 8, floor: float = -5.0) -> torch.Tensor:
    row = torch.full((vocab,), floor, dtype=torch.float64)
    for index, value in values.items():
        row[index] = value
    return row


# --- near-tie tolerance --------------------------------------------------------------------


def test_tolerance_is_four_eps_of_the_dtype_times_the_largest_score() -> None:
    row = scores_with({0: 10.0, 1: -3.0})
    assert fixed_margin(row, 0, 0, "bfloat16")[1] == pytest.approx(4 * BF16_EPS * 10.0)
    assert fixed_margin(row, 0, 0, "float16")[1] == pytest.approx(4 * 2.0**-10 * 10.0)
    assert fixed_margin(row, 0, 0, "float32")[1] == pytest.approx(4 * 2.0**-23 * 10.0)


def test_tolerance_scale_never_below_one_and_ignores_minus_inf() -> None:
    row = scores_with({0: 0.25, 1: 0.2}, floor=-math.inf)
    assert fixed_margin(row, 0, 0, "bfloat16")[1] == pytest.approx(4 * BF16_EPS)
    negative = scores_with({0: -2.0}, floor=-40.0)
    assert fixed_margin(negative, 0, 0, "bfloat16")[1] == pytest.approx(4 * BF16_EPS * 40.0)


def test_unknown_dtype_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="int8"):
        fixed_margin(scores_with({0: 1.0}), 0, 0, "int8")[1]


# --- decoder tokens ------------------------------------------------------------------------


def tokens_check(ref: list[int], scores: torch.Tensor, dev: list[int], dtype: str) -> Check:
    """The tokens alone, by the fixed rule (no float64 reference, no device scores)."""
    reference = {"tokens": ref, "scores": scores, "fp64_unavailable": "not in this test"}
    return compare_tokens(reference, (dev, None), dtype)


def decoder_case(margin: float, top: float = 10.0) -> tuple[list[int], torch.Tensor, list[int]]:
    """Reference 5,5,3; at step 2 the CPU's top is token 3 and the device chose token 4."""
    steps = torch.stack(
        [
            scores_with({5: top}),
            scores_with({5: top}),
            scores_with({3: top, 4: top - margin}),
        ]
    )
    return [5, 5, 3], steps, [5, 5, 4]


def test_equal_tokens_match() -> None:
    ref, scores, _ = decoder_case(1.0)
    check = tokens_check(ref, scores, list(ref), "bfloat16")
    assert check.passed and check.cpu_match == "Y"
    assert check.first_divergence is None


def test_divergence_exactly_at_tolerance_is_a_near_tie() -> None:
    tolerance = 4 * BF16_EPS * 10.0
    ref, scores, dev = decoder_case(tolerance)
    check = tokens_check(ref, scores, dev, "bfloat16")
    assert check.passed
    assert check.cpu_match.startswith("~ near-tie at token 2")
    assert check.first_divergence == 2
    assert check.divergence_margin == pytest.approx(tolerance)
    assert check.near_tie_tolerance == pytest.approx(tolerance)
    assert check.check["cpu_token"] == 3 and check.check["device_token"] == 4


def test_divergence_just_above_tolerance_fails() -> None:
    tolerance = 4 * BF16_EPS * 10.0
    ref, scores, dev = decoder_case(tolerance * 1.01)
    check = tokens_check(ref, scores, dev, "bfloat16")
    assert not check.passed
    assert check.cpu_match.startswith("N at token 2")
    assert check.divergence_margin == pytest.approx(tolerance * 1.01)


def test_same_margin_is_a_near_tie_in_bf16_but_not_in_fp32() -> None:
    ref, scores, dev = decoder_case(0.1)
    assert tokens_check(ref, scores, dev, "bfloat16").passed
    assert not tokens_check(ref, scores, dev, "float32").passed


def test_only_the_first_divergence_decides() -> None:
    ref, scores, _ = decoder_case(1e-6)
    # the device also differs later (after the first divergence everything may differ)
    check = tokens_check([*ref, 1, 1], torch.cat([scores, scores[:2]]), [5, 5, 4, 7, 7], "float32")
    assert check.passed and check.first_divergence == 2


def test_device_choosing_a_token_the_cpu_ruled_out_is_never_a_near_tie() -> None:
    steps = torch.stack([scores_with({1: 0.0}, floor=-math.inf)])
    check = tokens_check([1], steps, [2], "bfloat16")
    assert not check.passed and math.isinf(check.divergence_margin or 0.0)


def test_device_stopping_early_fails() -> None:
    ref, scores, _ = decoder_case(1.0)
    check = tokens_check(ref, scores, ref[:2], "bfloat16")
    assert not check.passed
    assert "device run stopped early" in check.cpu_match
    assert check.first_divergence == 2


def with_float64(ref: list[int], scores: torch.Tensor, eager: torch.Tensor) -> dict[str, object]:
    """A decoder's reference whose float64 and eager runs took the CPU's tokens: float64's
    scores ``scores``, eager's ``eager``."""
    return {"tokens": ref, "scores": scores, "fp64": (ref, scores), "eager": (ref, eager)}


@pytest.mark.parametrize("device", [[5, 5, 3], [5, 5, 4]])
def test_scores_beyond_tolerance_set_the_first_divergence_to_the_first_such_position(
    device: list[int],
) -> None:
    ref, scores, _ = decoder_case(1.0)
    off = scores.clone()
    off[1, 0] += 0.5  # step 1's scores off, whatever the tokens (the same, or parting at 2)
    check = compare_tokens(with_float64(ref, scores, scores.clone()), (device, off), "float32")
    assert not check.passed and check.cpu_match.startswith("N scores at tokens 0-2")
    assert check.first_divergence == 1


NOT_FINITE = "eager float32 NaN/inf where float64 is finite: no noise measured"


def test_an_eager_run_not_finite_where_float64_is_leaves_the_decision_to_the_fixed_rule() -> None:
    """Its error is NaN: no noise measured, so no tolerance (K x NaN would fail any device)."""
    ref, scores, dev = decoder_case(1e-6)
    eager = scores.clone()
    eager[1, 0] = math.nan
    for tokens in (ref, dev):  # the same tokens; a near-tie at step 2 by the fixed rule
        check = compare_tokens(with_float64(ref, scores, eager), (tokens, scores), "float32")
        assert check.passed and check.check["fp64"].startswith(NOT_FINITE)
    assert check.cpu_match.startswith("~ near-tie at token 2")
    assert check.check["fp64_margin"] == "no float64 scores at token 2"
    exact = scores.clone()
    fixed = Check(True, "Y", {"rule": "token"})
    check = held_to_noise(fixed, exact + 1e-3, {"fp64": exact, "eager": eager}, "float32")
    assert check is fixed and check.check["fp64"].startswith(NOT_FINITE)


# --- encoder predictions -------------------------------------------------------------------


def rows(*values: dict[int, float]) -> torch.Tensor:
    return torch.stack([scores_with(v, vocab=4, floor=0.0) for v in values])


def test_predictions_equal_to_fp32_match() -> None:
    fp32 = rows({1: 5.0}, {2: 5.0})
    check = compare_predictions("token", fp32, fp32, fp32, "bfloat16")
    assert check.passed and check.cpu_match == "Y"


def test_predictions_equal_to_cpu_bf16_match_even_far_from_fp32() -> None:
    fp32 = rows({1: 5.0}, {2: 5.0})
    bf16 = rows({1: 5.0}, {3: 5.0})  # bf16 alone drifts to another label on token 1
    check = compare_predictions("token", fp32, bf16, bf16.clone(), "bfloat16")
    assert check.passed and check.cpu_match == "Y (CPU bf16)"
    assert check.check["matched"] == "cpu_bf16"


def test_prediction_differing_only_at_a_near_tie_passes() -> None:
    tolerance = 4 * BF16_EPS * 5.0
    fp32 = rows({1: 5.0}, {2: 5.0, 3: 5.0 - tolerance})
    device = rows({1: 5.0}, {3: 5.0})
    check = compare_predictions("token", fp32, fp32, device, "bfloat16")
    assert check.passed
    assert check.cpu_match.startswith("~ near-tie at token 1")
    assert check.first_divergence == 1


def test_prediction_differing_beyond_the_tolerance_fails() -> None:
    tolerance = 4 * BF16_EPS * 5.0
    fp32 = rows({1: 5.0}, {2: 5.0, 3: 5.0 - tolerance * 1.05})
    device = rows({1: 5.0}, {3: 5.0})
    check = compare_predictions("token", fp32, fp32, device, "bfloat16")
    assert not check.passed and check.cpu_match.startswith("N at token 1")


def test_one_near_tie_does_not_excuse_another_difference() -> None:
    tolerance = 4 * BF16_EPS * 5.0
    fp32 = rows({1: 5.0, 2: 5.0 - tolerance / 2}, {2: 5.0, 3: 1.0})
    device = rows({2: 5.0}, {3: 5.0})
    check = compare_predictions("token", fp32, fp32, device, "bfloat16")
    assert not check.passed
    assert check.check["differing"] == [0, 1]
    assert "token 1" in check.cpu_match  # the worst one is named


def test_answer_span_rows_are_named() -> None:
    fp32 = rows({1: 5.0}, {2: 5.0})
    device = rows({1: 5.0}, {0: 5.0})
    check = compare_predictions("span", fp32, fp32, device, "bfloat16")
    assert not check.passed and check.cpu_match.startswith("N at span end")


# --- single-output head ----------------------------------------------------------------------


def score(value: float) -> torch.Tensor:
    return torch.tensor([[value]], dtype=torch.float64)


@pytest.mark.parametrize(
    ("device", "bf16", "passed"),
    [
        (1.0, 0.0, True),  # exactly 1.0 from fp32
        (1.0001, 0.0, False),
        (-1.0, 0.1, True),
        (1.6, 0.8, True),  # exactly twice the bf16 run's distance
        (1.61, 0.8, False),
        (-1.6, -0.8, True),
    ],
)
def test_score_within_one_or_twice_the_bf16_drift(device: float, bf16: float, passed: bool) -> None:
    check = compare_scores(score(0.0), score(bf16), score(device))
    assert check.passed is passed
    assert check.check["distance"] == pytest.approx(abs(device))
    assert check.check["limit"] == pytest.approx(max(1.0, 2 * abs(bf16)))
    assert check.cpu_match == "Y" if passed else check.cpu_match.startswith("N score")


# --- no head: hidden states -----------------------------------------------------------------


def at_cosine(c: float) -> torch.Tensor:
    """A 2-d unit vector whose cosine with (1, 0) is ``c``."""
    return torch.tensor([c, math.sqrt(1.0 - c * c)], dtype=torch.float64)


def hidden(*cosines: float) -> torch.Tensor:
    return torch.stack([at_cosine(c) for c in cosines])


@pytest.mark.parametrize(
    ("device_cos", "bf16_cos", "passed"),
    [
        (1.0, 1.0, True),
        (0.99, 1.0, True),  # exactly the cosine floor
        (0.9899, 0.9999, False),
        (0.98, 0.99, True),  # distance 0.02 = twice bf16's 0.01
        (0.98, 0.9901, False),  # twice bf16's distance is 0.0198 < 0.02
        (0.5, 0.7, True),  # bf16 alone drifts far: the device may drift twice as far
        (0.39, 0.7, False),
    ],
)
def test_hidden_cosine_floor_or_twice_the_bf16_distance(
    device_cos: float, bf16_cos: float, passed: bool
) -> None:
    fp32 = hidden(1.0, 1.0)
    check = compare_hidden(fp32, hidden(1.0, bf16_cos), hidden(1.0, device_cos))
    assert check.passed is passed
    assert check.check["min_cosine"] == pytest.approx(device_cos)
    assert check.check["worst_token"] == (0 if device_cos == 1.0 else 1)
    if not passed:
        assert check.cpu_match.startswith("N at token 1")
        assert check.check["failing_tokens"] == [1]


def test_hidden_every_token_is_held_to_its_own_bf16_distance() -> None:
    fp32 = hidden(1.0, 1.0)
    bf16 = hidden(0.9, 1.0)  # bf16 drifts on token 0 only
    device = hidden(1.0, 0.9)  # the device drifts as much, but on token 1
    assert not compare_hidden(fp32, bf16, device).passed
