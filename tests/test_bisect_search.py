"""The bisection's search, on candidates whose outcomes a test decides (no runs): the bound on
runs, skips on the boundary, failures of another kind, ends that stop it, flaky re-runs, the
budget."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pytest_neuronsupport.bisect.outcomes import Outcome
from pytest_neuronsupport.bisect.search import Place, Status, most_runs, search

G, B, OTHER, S = Outcome.GOOD, Outcome.BAD, Outcome.OTHERWISE, Outcome.SKIP


class Candidates:
    """Outcomes by index (a list per index: its first run, then its re-runs), and the runs."""

    def __init__(self, outcomes: Sequence[Outcome | Sequence[Outcome]]) -> None:
        self.outcomes = [[o] if isinstance(o, Outcome) else list(o) for o in outcomes]
        self.places: list[tuple[int, Place]] = []

    def __call__(self, index: int, place: Place) -> Outcome:
        runs = sum(1 for i, _ in self.places if i == index)
        self.places.append((index, place))
        said = self.outcomes[index]
        return said[min(runs, len(said) - 1)]


@pytest.mark.parametrize("between", range(0, 12))
def test_every_boundary_is_found_within_the_binary_search_bound(between: int) -> None:
    count = between + 2
    for first_bad in range(1, count):
        run = Candidates([G] * first_bad + [B] * (count - first_bad))
        found = search(count, run)
        assert found.status is Status.FOUND
        assert (found.last_good, found.first_bad) == (first_bad - 1, first_bad)
        assert found.runs <= most_runs(between) + 2
        assert found.confirm_runs == 2
        assert [i for i, p in run.places[:2]] == [count - 1, 0]  # the ends first, bad first


def test_most_runs_is_the_binary_search_bound() -> None:
    assert [most_runs(n) for n in (0, 1, 2, 3, 4, 9, 15, 16)] == [0, 1, 2, 2, 3, 4, 4, 5]


def test_a_bad_end_that_passes_stops_after_one_run() -> None:
    run = Candidates([G, G, G])
    found = search(3, run)
    assert found.status is Status.BAD_END_PASSES
    assert found.runs == 1


def test_a_good_end_that_fails_stops_either_way() -> None:
    for good_end in (B, OTHER):
        found = search(4, Candidates([good_end, G, B, B]))
        assert found.status is Status.GOOD_END_FAILS
        assert found.runs == 2


def test_an_end_that_cannot_be_tried_stops() -> None:
    assert search(3, Candidates([S, G, B])).status is Status.END_SKIPPED
    assert search(3, Candidates([G, G, S])).status is Status.END_SKIPPED


def test_a_skip_in_the_middle_is_stepped_around() -> None:
    run = Candidates([G, G, S, G, B, B])
    found = search(6, run)
    assert (found.status, found.last_good, found.first_bad) == (Status.FOUND, 3, 4)
    assert found.outcome(2) in (S, None)


def test_a_skip_on_the_boundary_gives_a_range() -> None:
    found = search(5, Candidates([G, G, S, B, B]))
    assert (found.status, found.last_good, found.first_bad) == (Status.RANGE, 1, 3)
    assert found.between == [2]


def test_a_failure_of_another_kind_is_set_aside_unless_it_counts_as_bad() -> None:
    found = search(5, Candidates([G, G, OTHER, B, B]))
    assert (found.status, found.last_good, found.first_bad) == (Status.RANGE, 1, 3)
    found = search(5, Candidates([G, G, OTHER, B, B]), otherwise_bad=True)
    assert (found.status, found.last_good, found.first_bad) == (Status.FOUND, 1, 2)


def test_a_boundary_that_does_not_hold_again_is_flaky() -> None:
    found = search(4, Candidates([G, G, [B, G], B]))
    assert found.status is Status.FLAKY
    assert found.flaky == [(2, B, G)]
    assert (found.last_good, found.first_bad) == (1, 2)


def test_the_budget_counts_every_run_and_keeps_the_range_narrowed() -> None:
    outcomes = [G] * 6 + [B] * 6
    found = search(12, Candidates(outcomes), max_runs=3)
    assert found.status is Status.BUDGET
    assert len(found.tried) == 3
    assert found.last_good is not None and found.first_bad is not None
    assert found.last_good < 6 <= found.first_bad
    found = search(12, Candidates(outcomes), max_runs=most_runs(10) + 2)
    assert found.status is Status.FOUND  # the boundary, not run again
    assert found.notes == ["the boundary was not run again: the budget was spent"]


def test_the_progress_says_what_is_left() -> None:
    run = Candidates([G] * 5 + [B] * 5)
    search(10, run)
    kinds = [place.kind for _, place in run.places]
    assert kinds[:2] == ["bad end", "good end"]
    assert set(kinds[2:-2]) == {"step"} and kinds[-2:] == ["confirm", "confirm"]
    steps = [place for _, place in run.places if place.kind == "step"]
    assert steps[0].left == 7 and steps[0].most == 3  # 8 between, this one decided
    assert [p.run for _, p in run.places] == list(range(1, len(run.places) + 1))


def test_skips_run_nothing_and_cost_no_budget() -> None:
    found = search(6, Candidates([G, S, S, S, S, B]), max_runs=4)
    assert found.skips == 4
    assert found.runs == 2  # the two ends
    assert found.status is Status.RANGE and found.between == [1, 2, 3, 4]
