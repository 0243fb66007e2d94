"""How many workers a fleet needs: its phases replayed through the sweep's policy, modelled.

The fleet benchmark (``fleet.py``) measures the real sweep with the workers this machine can
hold (``-n 16``: each worker and its fork server hold ~0.65 GB, and two CPUs start them).
Its makespan is then bound by the workers, each running one model at a time. This module
answers the question the measurement cannot: at which ``-n`` does the sweep's own policy
reach the lower bound on the device? It is a model, not a measurement: no sweep runs.

It replays the fleet's phase model through the sweep's policy. Each of ``workers`` workers
takes the next model in cost order (``--neuron-order cost``: largest first). It then:

1. computes the model's CPU reference in its own path, off the lease (``reference_in_path``),
   after the sweep's own time between two leases (``between_s``: measured by ``fleet.py``);
2. waits for its cores: the allocator's aligned block of a power of two, the lowest that is
   free, taken by whichever waiting worker fits first (no fairness, as the allocator);
3. holds them for its compile and its device run.

Downloads are taken as prefetched, and host memory as never binding (the measured runs'
peak was within the host).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Any, Protocol


class Phased(Protocol):
    """A fleet model's phases (``fleet_model.Model``)."""

    @property
    def cores(self) -> int | None: ...
    @property
    def reference_s(self) -> float: ...
    @property
    def busy_s(self) -> float: ...


def aligned_block(free: list[bool], count: int) -> int | None:
    """The lowest aligned block of ``count`` free cores (the allocator's rule), or None."""
    for start in range(0, len(free) - count + 1, count):
        if all(free[start : start + count]):
            return start
    return None


def makespan(
    models: Sequence[Phased],
    workers: int,
    cores: int,
    reference_in_path: bool = True,
    between_s: float = 0.0,
) -> float:
    """The modelled time from the first start to the last release (see the module)."""
    queue = sorted((m for m in models if m.cores), key=lambda m: -(m.busy_s * (m.cores or 1)))
    free = [True] * cores
    order = itertools.count()
    events: list[tuple[float, int, str, Any]] = []
    for _ in range(min(workers, len(queue))):
        heapq.heappush(events, (0.0, next(order), "next", None))
    waiting: list[Phased] = []
    end = 0.0
    pending = iter(queue)
    while events:
        now, _, kind, model = heapq.heappop(events)
        if kind == "next":
            taken = next(pending, None)
            if taken is not None:
                before = between_s + (taken.reference_s if reference_in_path else 0.0)
                heapq.heappush(events, (now + before, next(order), "want", taken))
        elif kind == "want":
            waiting.append(model)
        else:  # "release": (start, count)
            start, count = model
            free[start : start + count] = [True] * count
            end = max(end, now)
            heapq.heappush(events, (now, next(order), "next", None))
        for wanting in list(waiting):
            count = wanting.cores or 1
            start = aligned_block(free, count)
            if start is not None:
                free[start : start + count] = [False] * count
                waiting.remove(wanting)
                heapq.heappush(
                    events, (now + wanting.busy_s, next(order), "release", (start, count))
                )
    return end


def lower_bound(models: Sequence[Phased], cores: int) -> float:
    """Device work over the cores, or the longest model's device work if larger."""
    run = [m for m in models if m.cores]
    return max(sum(m.busy_s * (m.cores or 1) for m in run) / cores, max(m.busy_s for m in run))


def table(
    models: Sequence[Phased],
    cores: int,
    workers: Sequence[int] = (16, 32, 48, 64, 96),
    between_s: float = 0.0,
) -> list[tuple[int, float, float]]:
    """``(workers, makespan / bound with each reference in its worker's path, without)``."""
    bound = lower_bound(models, cores)
    return [
        (
            n,
            makespan(models, n, cores, True, between_s) / bound,
            makespan(models, n, cores, False, between_s) / bound,
        )
        for n in workers
    ]
