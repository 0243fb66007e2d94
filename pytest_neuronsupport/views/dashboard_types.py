"""The dashboard's types: the figures (:data:`METRICS`) and how each is written, one model's
figures in a pair, a pair's column, its comparison with the previous pair of its compiler, and
the worst models. What each figure is: :mod:`.dashboard`; how they are made: :mod:`.dashboard_data`.

Plugin side: this module never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

WORST: Final = 5
"""How many of the worst models each metric names."""
NONE: Final = "-"
"""A figure that cannot be made (no model to make it of)."""
ONLY_HERE: Final = "only in this pair"
"""How the models only this pair tested are named."""
ONLY_PREVIOUS: Final = "only in the previous"
"""How the models only the previous pair tested are named."""
OTHER_HOSTS: Final = "another kind of host than the previous pair's"
"""How a pair whose CPU references came from other kinds of host than its previous pair's
(over the models both tested) is flagged: a change of result there may be the host's."""


@dataclass(frozen=True)
class Metric:
    """A figure of a column: its key, its name, and how it and its change are written."""

    key: str
    name: str
    unit: str = ""
    percent: bool = False

    def text(self, value: float | None) -> str:
        if value is None:
            return NONE
        if self.percent:
            return f"{value * 100:.1f}%"
        if float(value).is_integer() and not self.unit:
            return str(int(value))
        return f"{value:.2f}{self.unit}"

    def change(self, value: float | None) -> str:
        if value is None:
            return ""
        if self.percent:
            return f"{value * 100:+.1f} pp"
        if float(value).is_integer() and not self.unit:
            return f"{int(value):+d}"
        return f"{value:+.2f}{self.unit}"


METRICS: Final = (
    Metric("pass_rate", "pass rate", percent=True),
    Metric("unchecked", "PASS unchecked"),
    Metric("compiled_nothing", "PASS compiled nothing"),
    Metric("speedup", "speedup (geomean)", "x"),
    Metric("compile_mean_s", "compile time (mean)", " s"),
    Metric("compile_p90_s", "compile time (P90)", " s"),
    Metric("cache_hits", "compile cache hits", percent=True),
    Metric("memory_ratio", "peak memory compiled/eager", "x"),
    Metric("graph_breaks", "graph breaks (total)"),
)
"""The figures of a column, each set against the previous pair's, in the order shown."""
BY_KEY: Final = {metric.key: metric for metric in METRICS}
"""Each metric by its key."""
WORST_OF: Final = ("pass_rate", "speedup", "compile_mean_s", "memory_ratio", "graph_breaks")
"""The metrics whose worst models are named (the P90 and the mean share their models)."""


@dataclass(frozen=True)
class ModelFigures:
    """One model's figures in one pair (None: not recorded, or no row to make it of)."""

    model_id: str
    result: str | None = None
    unchecked: bool = False
    #: A PASS whose run compiled no graph: not a compiler PASS (not in the pass rate).
    compiled_nothing: bool = False
    compile_s: float | None = None
    compile_from: str | None = None
    """Where ``compile_s`` comes from: ``support`` (the row's own) or ``perf`` (benchmarks)."""
    speedup: float | None = None
    left_out: int = 0
    """Speedup figures of the model flagged ``wide_interval``, not in :attr:`speedup`."""
    memory_ratio: float | None = None
    graph_breaks: int | None = None
    #: What its compile cache did: graphs found there, and compiled (``graphs_cached``,
    #: ``graphs_compiled`` of its row).
    graphs_cached: int | None = None
    graphs_compiled: int | None = None
    reference_host: str | None = None
    """The kind of host its CPU reference came from (:func:`~.lookup.host_kind`)."""


@dataclass(frozen=True)
class Worst:
    """A model named among the worst of a metric: its id, the value that named it, and whether
    only this pair tested it (so it is in no change against the previous pair)."""

    model_id: str
    text: str
    only_here: bool = False


@dataclass(frozen=True)
class Versus:
    """A pair set against its previous pair like with like: both pairs' figures over the models
    both tested (a latest row other than ``EXCLUDED``, or performance figures, in each), and the
    models tested in only one of the two, listed apart and in no figure here."""

    previous: str
    in_both: int
    """How many models both pairs tested."""
    only_here: list[str]
    """The models this pair tested and the previous one did not."""
    only_previous: list[str]
    """The models the previous pair tested and this one did not."""
    metrics: dict[str, float | None]
    """This pair's figures (:data:`METRICS`) over the models in both."""
    previous_metrics: dict[str, float | None]
    """The previous pair's figures over the same models."""
    counts: dict[str, int]
    """This pair's models per result, over the models in both."""
    previous_counts: dict[str, int]
    models: dict[str, int]
    """Per figure (:data:`METRICS`' keys), the models in both that it is made of: those with
    that figure in both pairs (a result for the pass rate and the counts)."""
    reference_hosts: str = ""
    """Each pair's kinds of host its CPU references came from, over the models in both, where
    they differ (:func:`~.lookup.hosts_apart`: a change of host, not of compiler); else empty."""


@dataclass(frozen=True)
class Column:
    """One pair's figures (:data:`METRICS`) over all its models, their changes against
    :attr:`previous` over the models both tested (:attr:`versus`), the models per result, how
    many models each figure is made of, and the worst models."""

    pair: str
    previous: str | None
    tested: int
    counts: dict[str, int]
    metrics: dict[str, float | None]
    changes: dict[str, float | None]
    """Each figure's change against the previous pair, over the models both tested
    (:attr:`Versus.metrics` less :attr:`Versus.previous_metrics`)."""
    count_changes: dict[str, int | None]
    """The change of the models per result, over the models both tested."""
    models: dict[str, int]
    """Models each figure is made of: ``speedup``, ``compile``, ``memory_ratio``."""
    speedup_spread: dict[str, float | None]
    """``gsd`` (the geometric standard deviation, a factor), ``min`` and ``max``."""
    left_out: int
    """Speedup figures left out: flagged ``wide_interval``."""
    worst: dict[str, list[Worst]] = field(default_factory=dict)
    reference_hosts: dict[str, int] = field(default_factory=dict)
    """The kinds of host its models' CPU references came from, with how many models each."""
    versus: Versus | None = None
    """The comparison with :attr:`previous`; None for a compiler's first pair."""
    fullgraph: bool | None = None
    """The pair's ``fullgraph`` policy, as its rows record it (None: they do not say)."""


@dataclass(frozen=True)
class Dashboard:
    """Every pair's column, in order, and the figures of each model in each pair."""

    columns: tuple[Column, ...]
    figures: dict[str, dict[str, ModelFigures]]
    """Pair label → model id → its figures there."""
    warning: str | None = None
    """Said when the pairs compiled under different ``fullgraph`` policies."""
