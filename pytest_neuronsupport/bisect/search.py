"""The search: binary search over candidates ordered oldest first, with skips and re-runs.

The first candidate is the good end, the last the bad end. Both ends run first (the bad end
first: the failure it shows is the one bisected); a bad end that passes, a good end that fails,
or an end that cannot be tried stops the search, saying which. Then, while candidates remain
between the last known good and the first known bad, the one nearest the middle runs: good
moves the low end up, bad moves the high end down. A candidate that is a skip (or fails
otherwise, unless such failures count as bad) is set aside and its nearest neighbour tried
instead, as ``git bisect skip`` does; when only such candidates sit between the two, the first
failing release is given as a range. Without skips a search of ``n`` candidates between the
ends takes at most ``ceil(log2(n + 1))`` runs after the two ends.

Last, the boundary pair runs once more (as transformers' ``check_bad_commit.py`` re-runs to tell
a flaky test from a broken one): a run that disagrees with its first is reported as flaky, and
the answer is not given as found. ``max_runs`` bounds every run, the re-runs included: a search
that reaches it stops with the range it narrowed; a skip runs nothing, and costs none of it.

The search knows nothing of packages or models: ``evaluate(index, place)`` runs a candidate and
says its :class:`~pytest_neuronsupport.bisect.outcomes.Outcome`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from pytest_neuronsupport.bisect.outcomes import Outcome


class Status(StrEnum):
    """How a search ended."""

    FOUND = "found"
    #: Skips (or failures of another kind) sit between the last good and the first bad.
    RANGE = "found within a range"
    BAD_END_PASSES = "the bad end passes"
    GOOD_END_FAILS = "the good end fails"
    END_SKIPPED = "an end cannot be tried"
    BUDGET = "the budget of runs was spent"
    #: The boundary pair, run again, disagreed with its first runs.
    FLAKY = "flaky"


#: The statuses that name a boundary.
ANSWERED = frozenset({Status.FOUND, Status.RANGE, Status.FLAKY})


@dataclass(frozen=True)
class Place:
    """Where a run stands in the search: what its progress line says."""

    #: ``bad end``, ``good end``, ``step`` or ``confirm``.
    kind: str
    #: The attempt's number, from 1 (the bad end), skips and re-runs included.
    run: int
    #: The candidates still to decide between the last good and the first bad (beside this
    #: one), and the most steps binary search needs after this one.
    left: int
    most: int
    #: The indices of the last known good and the first known bad.
    low: int
    high: int


#: Runs a candidate (by index) and says its outcome.
Evaluate = Callable[[int, Place], Outcome]


@dataclass(frozen=True)
class Tried:
    """One run of the search."""

    index: int
    outcome: Outcome
    place: Place


@dataclass
class Found:
    """What a search came to (indices into its candidates)."""

    status: Status
    last_good: int | None = None
    first_bad: int | None = None
    tried: list[Tried] = field(default_factory=list)
    #: The boundary's candidates whose re-run disagreed: (index, first outcome, again).
    flaky: list[tuple[int, Outcome, Outcome]] = field(default_factory=list)
    #: What else the status leaves open (a re-run the budget did not allow...).
    notes: list[str] = field(default_factory=list)

    @property
    def runs(self) -> int:
        """The search's runs of the model: the two ends and the steps (skips, which run
        nothing, and the boundary's re-runs apart)."""
        return sum(t.place.kind != "confirm" and t.outcome is not Outcome.SKIP for t in self.tried)

    @property
    def skips(self) -> int:
        """Candidates that could not be tried."""
        return sum(t.outcome is Outcome.SKIP for t in self.tried)

    @property
    def confirm_runs(self) -> int:
        """The boundary pair's runs again."""
        return sum(t.place.kind == "confirm" for t in self.tried)

    def outcome(self, index: int) -> Outcome | None:
        """A candidate's first outcome (None: not run)."""
        return next((t.outcome for t in self.tried if t.index == index), None)

    @property
    def between(self) -> list[int]:
        """The candidates between the last good and the first bad: where the first failing
        one may be beside the first bad (skipped, failing otherwise, or not run)."""
        if self.last_good is None or self.first_bad is None:
            return []
        return list(range(self.last_good + 1, self.first_bad))


def most_runs(candidates: int) -> int:
    """The runs binary search needs at most to decide ``candidates`` between two ends:
    ``ceil(log2(candidates + 1))``."""
    return max(0, candidates).bit_length()


def _middle(low: int, high: int, aside: set[int]) -> int | None:
    """The candidate between ``low`` and ``high`` nearest their middle, not set aside (ties:
    the older); None when there is none."""
    middle = (low + high) // 2
    inside = [i for i in range(low + 1, high) if i not in aside]
    return min(inside, key=lambda i: (abs(i - middle), i)) if inside else None


class _Search:
    """One search's state (see :func:`search`)."""

    def __init__(self, count: int, evaluate: Evaluate, max_runs: int | None) -> None:
        self.evaluate, self.max_runs = evaluate, max_runs
        self.low, self.high, self.aside = 0, count - 1, set[int]()
        self.found = Found(Status.FOUND)

    def left(self) -> int:
        return sum(1 for i in range(self.low + 1, self.high) if i not in self.aside)

    def run(self, index: int, kind: str) -> Outcome | None:
        """Run one candidate; None: the budget is spent (skips, which run nothing, cost none
        of it)."""
        spent = self.found.runs + self.found.confirm_runs
        if self.max_runs is not None and spent >= self.max_runs:
            return None
        step = kind == "step"  # this run decides one of those left, and halves the others
        left, most = self.left() - step, max(0, most_runs(self.left()) - step)
        place = Place(kind, len(self.found.tried) + 1, left, most, self.low, self.high)
        outcome = self.evaluate(index, place)
        self.found.tried.append(Tried(index, outcome, place))
        return outcome

    def stop(self, status: Status, note: str | None = None) -> Found:
        self.found.status = status
        self.found.notes.extend([note] if note else [])
        return self.found


def search(
    count: int,
    evaluate: Evaluate,
    *,
    otherwise_bad: bool = False,
    max_runs: int | None = None,
    confirm: bool = True,
) -> Found:
    """Search ``count`` candidates (index 0: the good end; ``count - 1``: the bad end) for the
    first that fails the way the bad end does (the module's docstring)."""
    if count < 2:
        raise ValueError("a search needs a good and a bad end")
    s = _Search(count, evaluate, max_runs)
    ends = _ends(s, count)
    if ends is not None:
        return ends
    while (pick := _middle(s.low, s.high, s.aside)) is not None:
        outcome = s.run(pick, "step")
        if outcome is None:
            s.found.last_good, s.found.first_bad = s.low, s.high
            spent = s.found.runs + s.found.confirm_runs
            return s.stop(Status.BUDGET, f"stopped after {spent} runs")
        if outcome is Outcome.GOOD:
            s.low = pick
        elif outcome is Outcome.BAD or (outcome is Outcome.OTHERWISE and otherwise_bad):
            s.high = pick
        else:
            s.aside.add(pick)
    s.found.last_good, s.found.first_bad = s.low, s.high
    status = Status.RANGE if s.high - s.low > 1 else Status.FOUND
    return _confirmed(s, status) if confirm else s.stop(status)


def _ends(s: _Search, count: int) -> Found | None:
    """Run the bad end, then the good end; the search's end when either stops it."""
    for index, kind in ((count - 1, "bad end"), (0, "good end")):
        outcome = s.run(index, kind)
        if outcome is None:
            return s.stop(Status.BUDGET, f"the budget allowed no run of the {kind}")
        if outcome is Outcome.SKIP:
            return s.stop(Status.END_SKIPPED, f"the {kind} cannot be tried")
        if kind == "bad end" and outcome is Outcome.GOOD:
            return s.stop(Status.BAD_END_PASSES)
        if kind == "good end" and outcome is not Outcome.GOOD:
            return s.stop(Status.GOOD_END_FAILS)
    return None


def _confirmed(s: _Search, status: Status) -> Found:
    """The boundary pair once more: flaky where a run disagrees with its first."""
    for index in (s.low, s.high):
        first = s.found.outcome(index)
        again = s.run(index, "confirm")
        if again is None:
            return s.stop(status, "the boundary was not run again: the budget was spent")
        if again is not first and first is not None:
            s.found.flaky.append((index, first, again))
    return s.stop(Status.FLAKY if s.found.flaky else status)
