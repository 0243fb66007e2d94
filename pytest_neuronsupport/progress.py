"""A sweep's progress: one line per finished model, and a status with an estimate of the time left.

Plain state and text, no terminal: :class:`~pytest_neuronsupport.session.SweepSession` writes
the lines through pytest's terminal reporter (on a terminal the status stays on one line; in a
log it is a plain line now and then).

The time left is estimated from costs: a model's cost is its recorded ``wall_s`` for this pair
when the dataset has one, else the mean of the costs known (recorded, or measured in this
sweep). The elapsed time per unit of cost so far (which folds in parallel workers, process
start-up and compile caches) times the cost of the models left is the estimate.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_neuronsupport.runners.lib.protocol import Result

#: What a model that was not run again (its run.py unchanged) counts as.
UNCHANGED = "unchanged"


def duration(seconds: float) -> str:
    """``"42s"``, ``"3m05s"``, ``"2h07m"``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def model_line(row: Mapping[str, Any], more: Iterable[str] = ()) -> str:
    """A finished model: result, id, cores and wall time (and ``more`` facts of its table)."""
    cores = row.get("neuron_cores")
    facts = [f"{cores} core{'s' if cores != 1 else ''}" if cores else None]
    if row.get("wall_s") is not None:
        facts.append(f"{row['wall_s']:.1f}s")
    facts.extend(more)
    details = ", ".join(fact for fact in facts if fact)
    return f"{row['result']:<13} {row['model_id']}" + (f"  ({details})" if details else "")


@dataclass
class Progress:
    """Which models are done, how they ended, and how long the rest should take."""

    #: The models of the sweep (collected, after deselection), in order.
    models: list[str]
    #: Recorded ``wall_s`` of models of this pair (models without one are absent).
    recorded: dict[str, float] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    started: float = 0.0
    #: model → its result, or :data:`UNCHANGED`.
    done: dict[str, str] = field(default_factory=dict)
    #: Wall times measured in this sweep.
    measured: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started = self.started or self.clock()

    def finished(self, model_id: str, result: str, wall_s: float | None = None) -> None:
        """A model ended with ``result`` (or :data:`UNCHANGED`: not run again)."""
        self.done[model_id] = result
        if wall_s is not None:
            self.measured[model_id] = wall_s

    def _cost(self, model_id: str, mean: float) -> float:
        if self.done.get(model_id) == UNCHANGED:
            return 0.0  # not run again: no time spent
        return self.measured.get(model_id, self.recorded.get(model_id, mean))

    def seconds_left(self) -> float | None:
        """The estimate of the time left (None until something ran)."""
        known = list({**self.recorded, **self.measured}.values())
        if not known:
            return None
        mean = sum(known) / len(known)
        spent = sum(self._cost(m, mean) for m in self.done)
        if spent <= 0:
            return None
        left = sum(self._cost(m, mean) for m in self.models if m not in self.done)
        return (self.clock() - self.started) * left / spent

    def counts(self) -> str:
        """``"3 PASS, 1 FAIL(gen), 2 unchanged"`` in the order of :class:`Result`."""
        counts = Counter(self.done.values())
        order = [*(r.value for r in Result), UNCHANGED]
        order += sorted(set(counts) - set(order))
        return ", ".join(f"{counts[r]} {r}" for r in order if counts[r])

    def status_line(self) -> str:
        """``"[4/14] 3 PASS, 1 FAIL(gen) | 1m02s elapsed | ~3m10s left"``."""
        total = max(len(self.models), len(self.done))
        parts = [f"[{len(self.done)}/{total}] {self.counts() or 'starting'}"]
        parts.append(f"{duration(self.clock() - self.started)} elapsed")
        left = self.seconds_left()
        if left is not None and len(self.done) < total:
            parts.append(f"~{duration(left)} left")
        return " | ".join(parts)

    def milestone(self) -> bool:
        """Whether the last model finished crossed a tenth of the sweep (or ended it)."""
        total, done = max(len(self.models), 1), len(self.done)
        return done * 10 // total != (done - 1) * 10 // total or done == total


def recorded_costs(models: Iterable[str], find: Callable[[str], Any]) -> dict[str, float]:
    """The recorded ``wall_s`` of each model that has one (``find`` gives its row or None)."""
    costs: dict[str, float] = {}
    for model_id in models:
        row = find(model_id)
        if row is not None and row.get("wall_s") is not None and row["result"] != Result.EXCLUDED:
            costs[model_id] = float(row["wall_s"])
    return costs
