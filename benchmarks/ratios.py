"""The figures and ratios of one run of the benchmarks (``test_overhead.py``), printed at its end
by ``conftest.py``."""

from __future__ import annotations

from typing import Any

#: Each figure measured in this run (seconds, the median of its rounds), by name.
FIGURES: dict[str, float] = {}
#: (name, measured, unit, target) of each ratio, or other figure with a target, of this run.
RATIOS: list[tuple[str, float, str, float]] = []


def figure(benchmark: Any, name: str) -> float | None:
    """Keep the median of the benchmark just run as ``name`` (None when timing is disabled)."""
    stats = getattr(benchmark, "stats", None)
    if stats is None:
        return None
    FIGURES[name] = float(stats.stats.median)
    return FIGURES[name]


def ratio(benchmark: Any, name: str, over: str, target: float) -> float | None:
    """The figure just run over the figure ``over`` measured earlier in this run: recorded
    (``extra_info``) and printed at the end."""
    if name not in FIGURES or over not in FIGURES:
        return None
    return target_met(benchmark, f"{name} / {over}", FIGURES[name] / FIGURES[over], "", target)


def target_met(benchmark: Any, name: str, value: float, unit: str, target: float) -> float:
    """Record a figure that has a target (at most ``target``): ``extra_info``, and the end."""
    RATIOS.append((name, value, unit, target))
    benchmark.extra_info[name] = round(value, 4)
    benchmark.extra_info["target"] = target
    return value
