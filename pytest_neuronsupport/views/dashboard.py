"""``neuronsupport dashboard``: how each pair compares with the one before it.

One column per pair, in the page's order (:func:`~.lookup.natural_key`: compiler by compiler,
oldest version first), made of each model's latest row in the pair's support file and its
performance rows (``perf/``):

- **pass rate**: PASS over the models tested (every model whose latest row is not
  ``EXCLUDED``); a PASS that compared nothing (``checked_by`` ``none``) counts as a PASS and
  is counted apart (``unchecked``); a PASS whose run compiled no graph (``compiled`` false)
  is not a compiler PASS: counted apart (``compiled_nothing``), not in the pass rate; then
  the models per result;
- **speedup**: the geometric mean over the models benchmarked of each model's compiled/eager
  speedup (``speedup_vs_eager`` of its PASS configurations, a geometric mean when it has
  several), its spread (the geometric standard deviation, a factor, and the lowest and highest);
  a figure flagged ``wide_interval`` (its confidence interval too wide) is left out, and the
  column says how many were;
- **compile time**: the mean and P90 over the models of each model's compile time, the support
  row's ``compile_s`` (its compiled calls' first-call cost), or, for a row without it, the mean
  ``compile_s`` of the model's PASS performance rows (the first, compiling round);
- **memory ratio**: the geometric mean over the models of compiled/eager peak memory
  (``peak_gb / eager_peak_gb`` of its PASS performance rows; none on CPU);
- **graph breaks**: their total over the pair's latest rows.

A column's figures are over all its models. Every figure is set against the previous pair of
the same compiler (the column before it in that order: the compiler's previous release, or the
same release with the library's previous one) like with like (:class:`Versus`): both pairs'
figures over the models both tested (a latest row other than ``EXCLUDED``, or performance
figures, in each), each over those of them that have it in both, and the signed change between
the two; the first pair of a compiler has none. The models tested in only one of the two are
counted and named apart, in no change. The worst models of each metric come with each column:
the failed ones, the slowest against eager, the longest to compile, the hungriest, those with
the most graph breaks; a model that only this pair tested says so.

Columns written by later versions (``compile_s`` of a support row, ``peak_gb``,
``eager_peak_gb``, ``wide_interval`` of a performance row) are read where a file has them: an
older file lacks them, and the figures they make are then ``-``.

Plugin side: this module never imports torch.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.dataset.layout import DATA, data_files
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.dataset.schema import SUPPORT, Table
from pytest_neuronsupport.dataset.store import latest_positions, read_table
from pytest_neuronsupport.pipeline.classify import compiled_nothing, unchecked_kind
from pytest_neuronsupport.runners.lib.measures import percentile
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.lookup import natural_key, split_models
from pytest_neuronsupport.views.perf import Grid

__all__ = [
    "METRICS",
    "Column",
    "Dashboard",
    "ModelFigures",
    "Versus",
    "Worst",
    "dashboard",
    "dashboard_report",
    "history",
    "page_dashboard",
]

WORST: Final = 5
"""How many of the worst models each metric names."""
NONE: Final = "-"
"""A figure that cannot be made (no model to make it of)."""
_ONLY_HERE: Final = "only in this pair"
_ONLY_PREVIOUS: Final = "only in the previous"


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
    Metric("memory_ratio", "peak memory compiled/eager", "x"),
    Metric("graph_breaks", "graph breaks (total)"),
)
"""The figures of a column, each set against the previous pair's, in the order shown."""
_BY_KEY: Final = {metric.key: metric for metric in METRICS}
_WORST_OF: Final = ("pass_rate", "speedup", "compile_mean_s", "memory_ratio", "graph_breaks")
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
    versus: Versus | None = None
    """The comparison with :attr:`previous`; None for a compiler's first pair."""


@dataclass(frozen=True)
class Dashboard:
    """Every pair's column, in order, and the figures of each model in each pair."""

    columns: tuple[Column, ...]
    figures: dict[str, dict[str, ModelFigures]]
    """Pair label → model id → its figures there."""


def _label(relpath: str) -> str:
    """``inductor-2.13.0/transformers-5.24.0.parquet`` → the page's label,
    ``inductor-2.13.0 / transformers-5.24.0``."""
    return relpath.removesuffix(".parquet").replace("/", " / ")


def _compiler(label: str) -> str:
    """The compiler of a pair label: ``inductor`` of ``inductor-2.13.0 / transformers-5.24.0``."""
    return label.split(" / ")[0].rsplit("-", 1)[0]


def _number(value: object) -> float | None:
    """A finite number, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _geomean(values: Sequence[float]) -> float | None:
    positive = [v for v in values if v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in positive)) if positive else None


def _latest(path: Path, table: Table = SUPPORT) -> list[dict[str, Any]]:
    """The latest row of each key of a pair file, with the columns it has beyond the schema."""
    read = read_table(path, keep_extra=True, table=table)
    rows = read.to_pylist()
    return [rows[i] for i in sorted(latest_positions(read, table.key).values())]


def _perf_figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """model id → its speedup, figures left out, memory ratio and compile time from its PASS
    performance rows."""
    found: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if row.get("result") != Result.PASS:
            continue
        lists = found.setdefault(str(row["model_id"]), {"speedup": [], "wide": [], "mem": []})
        lists.setdefault("compile", [])
        speedup = _number(row.get("speedup_vs_eager"))
        if speedup is not None and speedup > 0:
            lists["wide" if row.get("wide_interval") is True else "speedup"].append(speedup)
        peak, eager = _number(row.get("peak_gb")), _number(row.get("eager_peak_gb"))
        if peak is not None and eager:
            lists["mem"].append(peak / eager)
        if (compile_s := _number(row.get("compile_s"))) is not None:
            lists["compile"].append(compile_s)
    return {
        model: {
            "speedup": _geomean(lists["speedup"]),
            "left_out": len(lists["wide"]),
            "memory_ratio": _geomean(lists["mem"]),
            "compile_s": statistics.fmean(lists["compile"]) if lists["compile"] else None,
        }
        for model, lists in found.items()
    }


def _pair_figures(
    support: Sequence[Mapping[str, Any]], perf: Sequence[Mapping[str, Any]]
) -> dict[str, ModelFigures]:
    by_perf = _perf_figures(perf)
    by_model = {str(row["model_id"]): row for row in support}
    figures: dict[str, ModelFigures] = {}
    for model_id in sorted(set(by_model) | set(by_perf), key=natural_key):
        row = by_model.get(model_id)
        bench = by_perf.get(model_id, {})
        own = None if row is None else _number(row.get("compile_s"))
        compile_s = own if own is not None else bench.get("compile_s")
        result = None if row is None else str(row["result"])
        breaks = None if row is None else row.get("graph_breaks")
        figures[model_id] = ModelFigures(
            model_id=model_id,
            result=result,
            unchecked=row is not None
            and result == Result.PASS
            and unchecked_kind(row) is not None
            and not compiled_nothing(row),
            compiled_nothing=row is not None and compiled_nothing(row),
            compile_s=compile_s,
            compile_from=None if compile_s is None else ("support" if own is not None else "perf"),
            speedup=bench.get("speedup"),
            left_out=bench.get("left_out", 0),
            memory_ratio=bench.get("memory_ratio"),
            graph_breaks=breaks if isinstance(breaks, int) else None,
        )
    return figures


def _worst(figures: Sequence[ModelFigures], only_here: Set[str]) -> dict[str, list[Worst]]:
    failed = [f for f in figures if f.result not in (None, Result.PASS, Result.EXCLUDED)]
    sped = sorted((f for f in figures if f.speedup is not None), key=lambda f: f.speedup or 0)
    slow = sorted(
        (f for f in figures if f.compile_s is not None), key=lambda f: -(f.compile_s or 0)
    )
    hungry = sorted(
        (f for f in figures if f.memory_ratio is not None), key=lambda f: -(f.memory_ratio or 0)
    )
    broken = sorted((f for f in figures if f.graph_breaks), key=lambda f: -(f.graph_breaks or 0))

    def named(found: Sequence[ModelFigures], text: Callable[[ModelFigures], str]) -> list[Worst]:
        return [Worst(f.model_id, text(f), f.model_id in only_here) for f in found[:WORST]]

    return {
        "pass_rate": named(failed, lambda f: str(f.result)),
        "speedup": named(sped, lambda f: f"{f.speedup:.2f}x"),
        "compile_mean_s": named(slow, lambda f: f"{f.compile_s:.2f} s"),
        "memory_ratio": named(hungry, lambda f: f"{f.memory_ratio:.2f}x"),
        "graph_breaks": named(broken, lambda f: str(f.graph_breaks)),
    }


@dataclass(frozen=True)
class _Summary:
    """Figures (:data:`METRICS`) over some models of a pair, the models per result, the models
    each figure is made of (by metric key), and the speedups the geomean is made of."""

    metrics: dict[str, float | None]
    counts: dict[str, int]
    models: dict[str, int]
    speedups: list[float]


def _summary(figures: Sequence[ModelFigures]) -> _Summary:
    rows = [f for f in figures if f.result is not None]
    counts = Counter(str(f.result) for f in rows)
    tested = sum(f.result != Result.EXCLUDED for f in rows)
    speedups = [f.speedup for f in figures if f.speedup is not None]
    compiles = [f.compile_s for f in figures if f.compile_s is not None]
    memory = [f.memory_ratio for f in figures if f.memory_ratio is not None]
    breaks = [f.graph_breaks for f in rows if f.graph_breaks is not None]
    nothing = sum(f.compiled_nothing for f in rows)
    metrics: dict[str, float | None] = {
        "pass_rate": (counts[Result.PASS] - nothing) / tested if tested else None,
        "unchecked": float(sum(f.unchecked for f in rows)),
        "compiled_nothing": float(nothing),
        "speedup": _geomean(speedups),
        "compile_mean_s": statistics.fmean(compiles) if compiles else None,
        "compile_p90_s": percentile(compiles, 90) if compiles else None,
        "memory_ratio": _geomean(memory),
        "graph_breaks": float(sum(breaks)) if breaks else None,
    }
    made_of = (tested, tested, tested, len(speedups), len(compiles), len(compiles), len(memory))
    models = dict(zip((m.key for m in METRICS), (*made_of, len(breaks)), strict=True))
    return _Summary(metrics, {r.value: counts[r.value] for r in Result}, models, speedups)


def _tested(figures: Mapping[str, ModelFigures]) -> list[str]:
    """The models a pair tested: a latest row other than ``EXCLUDED``, or only performance
    figures."""
    return [model for model, f in figures.items() if f.result != Result.EXCLUDED]


_ALIKE: Final = ("result", "compile_s", "speedup", "memory_ratio", "graph_breaks")
"""The figures of a model that a comparison keeps only where both pairs have them."""


def _alike(here: ModelFigures, before: ModelFigures) -> tuple[ModelFigures, ModelFigures]:
    """One model's figures in two pairs, each figure kept only where both pairs have it."""
    blank: dict[str, Any] = {
        name: None
        for name in _ALIKE
        if getattr(here, name) is None or getattr(before, name) is None
    }
    if "result" in blank:
        blank["unchecked"] = False
    return replace(here, **blank), replace(before, **blank)


def _versus(
    here: Mapping[str, ModelFigures], previous: str, before: Mapping[str, ModelFigures]
) -> Versus:
    """A pair against its previous one over the models both tested (:class:`Versus`)."""
    split = split_models(_tested(before), _tested(here))
    alike = [_alike(here[model], before[model]) for model in split.both]
    now, then = _summary([a for a, _ in alike]), _summary([b for _, b in alike])
    for key, made_of in now.models.items():  # a figure of no model in both is no figure
        if not made_of:
            now.metrics[key] = then.metrics[key] = None
    return Versus(
        previous=previous,
        in_both=len(split.both),
        only_here=split.only_b,
        only_previous=split.only_a,
        metrics=now.metrics,
        previous_metrics=then.metrics,
        counts=now.counts,
        previous_counts=then.counts,
        models=now.models,
    )


def _changes(versus: Versus | None) -> tuple[dict[str, float | None], dict[str, int | None]]:
    """Each figure's change, and each result's count's, over the models both pairs tested."""
    changes: dict[str, float | None] = {metric.key: None for metric in METRICS}
    count_changes: dict[str, int | None] = {r.value: None for r in Result}
    if versus is None:
        return changes, count_changes
    for key in changes:
        now, then = versus.metrics[key], versus.previous_metrics[key]
        changes[key] = None if now is None or then is None else now - then
    if versus.models["pass_rate"]:
        count_changes = {r: n - versus.previous_counts[r] for r, n in versus.counts.items()}
    return changes, count_changes


def _column(
    pair: str,
    figures: Mapping[str, ModelFigures],
    previous: tuple[str, Mapping[str, ModelFigures]] | None,
) -> Column:
    """A pair's column: its figures over all its models, and (``previous``: the previous pair's
    label and figures) their changes over the models both tested."""
    own = _summary(list(figures.values()))
    versus = None if previous is None else _versus(figures, *previous)
    changes, count_changes = _changes(versus)
    speedups = own.speedups
    gsd = None
    if own.metrics["speedup"] is not None and len(speedups) > 1:
        gsd = math.exp(statistics.stdev(math.log(s) for s in speedups))
    return Column(
        pair=pair,
        previous=None if previous is None else previous[0],
        tested=own.models["pass_rate"],
        counts=own.counts,
        metrics=own.metrics,
        changes=changes,
        count_changes=count_changes,
        models={
            "speedup": own.models["speedup"],
            "compile": own.models["compile_mean_s"],
            "memory_ratio": own.models["memory_ratio"],
        },
        speedup_spread={
            "gsd": gsd,
            "min": min(speedups) if speedups else None,
            "max": max(speedups) if speedups else None,
        },
        left_out=sum(f.left_out for f in figures.values()),
        worst=_worst(list(figures.values()), set(() if versus is None else versus.only_here)),
        versus=versus,
    )


def dashboard(results: Path) -> Dashboard:
    """Every pair's column under ``results`` (support and performance files alike); see the
    module's documentation.

    Raises:
        UnreadableResultsError: a parquet file of the dataset could not be read.
    """
    results = Path(results)
    support = {p.relative_to(results / DATA).as_posix(): p for p in data_files(results)}
    perf_dir = results / PERF.folder
    perf = {p.relative_to(perf_dir).as_posix(): p for p in data_files(results, PERF.folder)}
    ordered = sorted(set(support) | set(perf), key=lambda pair: natural_key(_label(pair)))
    columns: list[Column] = []
    figures: dict[str, dict[str, ModelFigures]] = {}
    last: dict[str, str] = {}  # compiler -> the label of its latest pair so far
    for relpath in ordered:
        label = _label(relpath)
        rows = _latest(support[relpath]) if relpath in support else []
        bench = _latest(perf[relpath], PERF) if relpath in perf else []
        figures[label] = _pair_figures(rows, bench)
        before = last.get(_compiler(label))
        previous = None if before is None else (before, figures[before])
        columns.append(_column(label, figures[label], previous))
        last[_compiler(label)] = label
    return Dashboard(tuple(columns), figures)


def _in_both(n: int) -> str:
    return f"over {n} in both"


def _change(column: Column, metric: Metric) -> str:
    """`` (+50.0 pp over 2 in both: 50.0% -> 100.0%)``: a figure's change against the previous
    pair, over how many models both tested, and the two figures over those models; empty for a
    compiler's first pair or a figure that no model in both has."""
    versus, change = column.versus, column.changes[metric.key]
    if versus is None:
        return ""
    if change is None:
        known = column.metrics[metric.key] is not None and not versus.models[metric.key]
        return f" ({_in_both(0)})" if known else ""
    then, now = versus.previous_metrics[metric.key], versus.metrics[metric.key]
    return (
        f" ({metric.change(change)} {_in_both(versus.models[metric.key])}: "
        f"{metric.text(then)} -> {metric.text(now)})"
    )


def _cell(column: Column, metric: Metric) -> str:
    value = column.metrics[metric.key]
    text = metric.text(value)
    if metric.key == "speedup" and value is not None:
        gsd = column.speedup_spread["gsd"]
        low, high = column.speedup_spread["min"], column.speedup_spread["max"]
        text += f" gsd {gsd:.2f}, {low:.2f}..{high:.2f}" if gsd is not None else ""
        text += f" [{column.models['speedup']} model{'s' if column.models['speedup'] != 1 else ''}"
        text += f", {column.left_out} left out]" if column.left_out else "]"
    elif metric.key == "speedup" and column.left_out:
        text += f" [{column.left_out} left out]"
    return text + _change(column, metric)


def _count_cell(column: Column, result: Result) -> str:
    count, change = str(column.counts[result.value]), column.count_changes[result.value]
    if not change or column.versus is None:
        return count
    return f"{count} ({change:+d} {_in_both(column.versus.models['pass_rate'])})"


def grid(board: Dashboard) -> Grid:
    """The dashboard as a table: a line per metric and result, a column per pair; the models
    both pairs tested and those tested by one only, counted."""
    columns = board.columns

    def versus(count: Callable[[Versus], int]) -> tuple[str, ...]:
        return tuple(NONE if c.versus is None else str(count(c.versus)) for c in columns)

    lines: list[tuple[str, ...]] = [
        ("vs", *(column.previous or NONE for column in columns)),
        ("models tested", *(str(column.tested) for column in columns)),
        ("tested in both", *versus(lambda v: v.in_both)),
        ("tested only in this pair", *versus(lambda v: len(v.only_here))),
        ("tested only in the previous", *versus(lambda v: len(v.only_previous))),
    ]
    for metric in METRICS:
        lines.append((metric.name, *(_cell(column, metric) for column in columns)))
        if metric.key == "compiled_nothing":
            for result in Result:
                lines.append((result.value, *(_count_cell(column, result) for column in columns)))
    return Grid("", ("", *(column.pair for column in columns)), tuple(lines))


def _worst_text(worst: Sequence[Worst]) -> str:
    return ", ".join(
        f"{w.model_id} {w.text}" + (f" ({_ONLY_HERE})" if w.only_here else "") for w in worst
    )


def _apart_lines(board: Dashboard) -> list[str]:
    """The models tested in only one of each pair and its previous one: in no change."""
    lines: list[str] = []
    for column in board.columns:
        versus = column.versus
        if versus is None or not (versus.only_here or versus.only_previous):
            continue
        lines.append(f"{column.pair} vs {versus.previous}")
        for name, models in (
            (_ONLY_HERE, versus.only_here),
            (_ONLY_PREVIOUS, versus.only_previous),
        ):
            if models:
                lines.append(f"  {name} ({len(models)}): {', '.join(models)}")
    if lines:
        lines[:0] = ["", "tested in only one of the two pairs (in no change)"]
    return lines


def dashboard_report(results: Path, fmt: str = "text") -> str:
    """What ``neuronsupport dashboard`` prints: ``text`` (the table, the worst models of each
    pair, then the models tested in only one of each two pairs compared) or ``json`` (a list of
    the columns)."""
    board = dashboard(results)
    if fmt == "json":
        return json.dumps([asdict(column) for column in board.columns], indent=2) + "\n"
    if not board.columns:
        return f"no results under {Path(results) / DATA} or {Path(results) / PERF.folder}\n"
    lines = grid(board).lines()
    lines += ["", "worst models (lookup MODEL shows a model's rows)"]
    for column in board.columns:
        named = [(key, column.worst[key]) for key in _WORST_OF if column.worst[key]]
        if named:
            lines.append(column.pair)
        for key, worst in named:
            lines.append(f"  {_BY_KEY[key].name}: {_worst_text(worst)}")
    lines += _apart_lines(board)
    return "\n".join(lines) + "\n"


def history(board: Dashboard) -> dict[str, list[dict[str, Any]]]:
    """model id → its result, compile time and speedup in each pair it has figures in, in the
    columns' order (for the page's detail view)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for column in board.columns:
        for model_id, f in board.figures[column.pair].items():
            found.setdefault(model_id, []).append(
                {
                    "pair": column.pair,
                    "result": f.result,
                    "unchecked": f.unchecked,
                    "compiled_nothing": f.compiled_nothing,
                    "compile_s": f.compile_s,
                    "speedup": f.speedup,
                }
            )
    return found


_PLOT_WIDTH: Final = 150
_PLOT_HEIGHT: Final = 36
_PLOT_PAD: Final = 4


def _plot(metric: Metric, board: Dashboard) -> dict[str, Any]:
    """A metric across the pairs as a small line plot, in SVG units: a point per pair with a
    value, and the line through them."""
    values = [(c.pair, c.metrics[metric.key]) for c in board.columns]
    known = [v for _, v in values if v is not None]
    low, high = (min(known), max(known)) if known else (0.0, 0.0)
    step = (_PLOT_WIDTH - 2 * _PLOT_PAD) / max(len(values) - 1, 1)
    points = []
    for n, (pair, value) in enumerate(values):
        if value is None:
            continue
        share = 0.5 if high == low else (value - low) / (high - low)
        y = _PLOT_HEIGHT - _PLOT_PAD - share * (_PLOT_HEIGHT - 2 * _PLOT_PAD)
        x = _PLOT_PAD + n * step if len(values) > 1 else _PLOT_WIDTH / 2
        points.append(
            {"x": round(x, 2), "y": round(y, 2), "title": f"{pair}: {metric.text(value)}"}
        )
    return {
        "width": _PLOT_WIDTH,
        "height": _PLOT_HEIGHT,
        "points": points,
        "line": " ".join(f"{p['x']},{p['y']}" for p in points),
    }


def _page_worst(column: Column, index_of: Mapping[tuple[str, str], int]) -> dict[str, Any]:
    return {
        "pair": column.pair,
        "metrics": [
            {
                "name": _BY_KEY[key].name,
                "models": [
                    {
                        "model_id": w.model_id,
                        "text": w.text,
                        "only_here": w.only_here,
                        "index": index_of.get((column.pair, w.model_id)),
                    }
                    for w in column.worst[key]
                ],
            }
            for key in _WORST_OF
            if column.worst[key]
        ],
    }


def _page_apart(
    versus: Versus, pair: str, index_of: Mapping[tuple[str, str], int]
) -> dict[str, Any]:
    """A pair's models tested in it only and in its previous pair only, each with the index of
    its row on the page in the pair that tested it."""
    sides = (
        (_ONLY_HERE, pair, versus.only_here),
        (_ONLY_PREVIOUS, versus.previous, versus.only_previous),
    )
    return {
        "pair": pair,
        "previous": versus.previous,
        "in_both": versus.in_both,
        "sides": [
            {
                "name": name,
                "models": [{"model_id": m, "index": index_of.get((where, m))} for m in models],
            }
            for name, where, models in sides
            if models
        ],
    }


def page_dashboard(board: Dashboard, index_of: Mapping[tuple[str, str], int]) -> dict[str, Any]:
    """The Dashboard tab as the page's template shows it: the table's lines (each metric with
    its plot across pairs), each pair's worst models, and the models tested in only one of each
    two pairs compared; each model with the index of its row on the page (``index_of``: (pair
    label, model id) → index; None: the page has no such row)."""
    table = grid(board)
    plotted = {metric.name: _plot(metric, board) for metric in METRICS}
    return {
        "header": table.header,
        "lines": [
            {"cells": line, "plot": plotted.get(line[0]) if len(board.columns) > 1 else None}
            for line in table.cells
        ],
        "worst": [_page_worst(column, index_of) for column in board.columns],
        "compared": any(column.versus is not None for column in board.columns),
        "apart": [
            _page_apart(column.versus, column.pair, index_of)
            for column in board.columns
            if column.versus is not None
            and (column.versus.only_here or column.versus.only_previous)
        ],
    }
