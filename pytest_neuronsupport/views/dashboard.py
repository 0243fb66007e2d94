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

Every figure is set against the previous pair of the same compiler (the column before it in
that order: the compiler's previous release, or the same release with the library's previous
one) as a signed change; the first pair of a compiler has none. The worst models of each metric
come with each column: the failed ones, the slowest against eager, the longest to compile, the
hungriest, those with the most graph breaks.

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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.dataset.layout import DATA, data_files
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.dataset.schema import SUPPORT, Table
from pytest_neuronsupport.dataset.store import latest_positions, read_table
from pytest_neuronsupport.pipeline.classify import compiled_nothing, unchecked_kind
from pytest_neuronsupport.runners.lib.measures import percentile
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.lookup import natural_key
from pytest_neuronsupport.views.perf import Grid

__all__ = [
    "METRICS",
    "Column",
    "Dashboard",
    "ModelFigures",
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
    """A model named among the worst of a metric: its id, and the value that named it."""

    model_id: str
    text: str


@dataclass(frozen=True)
class Column:
    """One pair's figures (:data:`METRICS`), their changes against :attr:`previous`, the
    models per result, how many models each figure is made of, and the worst models."""

    pair: str
    previous: str | None
    tested: int
    counts: dict[str, int]
    metrics: dict[str, float | None]
    changes: dict[str, float | None]
    count_changes: dict[str, int | None]
    models: dict[str, int]
    """Models each figure is made of: ``speedup``, ``compile``, ``memory_ratio``."""
    speedup_spread: dict[str, float | None]
    """``gsd`` (the geometric standard deviation, a factor), ``min`` and ``max``."""
    left_out: int
    """Speedup figures left out: flagged ``wide_interval``."""
    worst: dict[str, list[Worst]] = field(default_factory=dict)


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


def _worst(figures: Sequence[ModelFigures]) -> dict[str, list[Worst]]:
    failed = [f for f in figures if f.result not in (None, Result.PASS, Result.EXCLUDED)]
    sped = sorted((f for f in figures if f.speedup is not None), key=lambda f: f.speedup or 0)
    slow = sorted(
        (f for f in figures if f.compile_s is not None), key=lambda f: -(f.compile_s or 0)
    )
    hungry = sorted(
        (f for f in figures if f.memory_ratio is not None), key=lambda f: -(f.memory_ratio or 0)
    )
    broken = sorted((f for f in figures if f.graph_breaks), key=lambda f: -(f.graph_breaks or 0))
    return {
        "pass_rate": [Worst(f.model_id, str(f.result)) for f in failed[:WORST]],
        "speedup": [Worst(f.model_id, f"{f.speedup:.2f}x") for f in sped[:WORST]],
        "compile_mean_s": [Worst(f.model_id, f"{f.compile_s:.2f} s") for f in slow[:WORST]],
        "memory_ratio": [Worst(f.model_id, f"{f.memory_ratio:.2f}x") for f in hungry[:WORST]],
        "graph_breaks": [Worst(f.model_id, str(f.graph_breaks)) for f in broken[:WORST]],
    }


def _column(pair: str, figures: Mapping[str, ModelFigures], previous: Column | None) -> Column:
    rows = [f for f in figures.values() if f.result is not None]
    counts = Counter(str(f.result) for f in rows)
    tested = sum(f.result != Result.EXCLUDED for f in rows)
    speedups = [f.speedup for f in figures.values() if f.speedup is not None]
    compiles = [f.compile_s for f in figures.values() if f.compile_s is not None]
    memory = [f.memory_ratio for f in figures.values() if f.memory_ratio is not None]
    breaks = [f.graph_breaks for f in rows if f.graph_breaks is not None]
    nothing = sum(f.compiled_nothing for f in rows)
    geomean = _geomean(speedups)
    gsd = None
    if geomean is not None and len(speedups) > 1:
        gsd = math.exp(statistics.stdev(math.log(s) for s in speedups))
    metrics: dict[str, float | None] = {
        "pass_rate": (counts[Result.PASS] - nothing) / tested if tested else None,
        "unchecked": float(sum(f.unchecked for f in rows)),
        "compiled_nothing": float(nothing),
        "speedup": geomean,
        "compile_mean_s": statistics.fmean(compiles) if compiles else None,
        "compile_p90_s": percentile(compiles, 90) if compiles else None,
        "memory_ratio": _geomean(memory),
        "graph_breaks": float(sum(breaks)) if breaks else None,
    }
    changes: dict[str, float | None] = {key: None for key in metrics}
    count_changes: dict[str, int | None] = {r.value: None for r in Result}
    if previous is not None:
        for key, value in metrics.items():
            before = previous.metrics[key]
            changes[key] = None if value is None or before is None else value - before
        count_changes = {r.value: counts[r.value] - previous.counts.get(r.value, 0) for r in Result}
    return Column(
        pair=pair,
        previous=None if previous is None else previous.pair,
        tested=tested,
        counts={r.value: counts[r.value] for r in Result},
        metrics=metrics,
        changes=changes,
        count_changes=count_changes,
        models={"speedup": len(speedups), "compile": len(compiles), "memory_ratio": len(memory)},
        speedup_spread={
            "gsd": gsd,
            "min": min(speedups) if speedups else None,
            "max": max(speedups) if speedups else None,
        },
        left_out=sum(f.left_out for f in figures.values()),
        worst=_worst(list(figures.values())),
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
    last: dict[str, Column] = {}  # compiler -> its latest column so far
    for relpath in ordered:
        label = _label(relpath)
        rows = _latest(support[relpath]) if relpath in support else []
        bench = _latest(perf[relpath], PERF) if relpath in perf else []
        figures[label] = _pair_figures(rows, bench)
        column = _column(label, figures[label], last.get(_compiler(label)))
        last[_compiler(label)] = column
        columns.append(column)
    return Dashboard(tuple(columns), figures)


def _cell(column: Column, metric: Metric) -> str:
    value, change = column.metrics[metric.key], column.changes[metric.key]
    text = metric.text(value)
    if metric.key == "speedup" and value is not None:
        gsd = column.speedup_spread["gsd"]
        low, high = column.speedup_spread["min"], column.speedup_spread["max"]
        text += f" gsd {gsd:.2f}, {low:.2f}..{high:.2f}" if gsd is not None else ""
        text += f" [{column.models['speedup']} model{'s' if column.models['speedup'] != 1 else ''}"
        text += f", {column.left_out} left out]" if column.left_out else "]"
    elif metric.key == "speedup" and column.left_out:
        text += f" [{column.left_out} left out]"
    return f"{text} ({metric.change(change)})" if change is not None else text


def grid(board: Dashboard) -> Grid:
    """The dashboard as a table: a line per metric and result, a column per pair."""
    lines: list[tuple[str, ...]] = [
        ("vs", *(column.previous or NONE for column in board.columns)),
        ("models tested", *(str(column.tested) for column in board.columns)),
    ]
    for metric in METRICS:
        lines.append((metric.name, *(_cell(column, metric) for column in board.columns)))
        if metric.key == "compiled_nothing":
            for result in Result:
                cells = []
                for column in board.columns:
                    change = column.count_changes[result.value]
                    count = str(column.counts[result.value])
                    cells.append(count if not change else f"{count} ({change:+d})")
                lines.append((result.value, *cells))
    return Grid("", ("", *(column.pair for column in board.columns)), tuple(lines))


def dashboard_report(results: Path, fmt: str = "text") -> str:
    """What ``neuronsupport dashboard`` prints: ``text`` (the table, then the worst models of
    each pair) or ``json`` (a list of the columns)."""
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
            models = ", ".join(f"{w.model_id} {w.text}" for w in worst)
            lines.append(f"  {_BY_KEY[key].name}: {models}")
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


def page_dashboard(board: Dashboard, index_of: Mapping[tuple[str, str], int]) -> dict[str, Any]:
    """The Dashboard tab as the page's template shows it: the table's lines (each metric with
    its plot across pairs) and each pair's worst models, each with the index of its row on the
    page (``index_of``: (pair label, model id) → index; None: the page has no such row)."""
    table = grid(board)
    plotted = {metric.name: _plot(metric, board) for metric in METRICS}
    return {
        "header": table.header,
        "lines": [
            {"cells": line, "plot": plotted.get(line[0]) if len(board.columns) > 1 else None}
            for line in table.cells
        ],
        "worst": [
            {
                "pair": column.pair,
                "metrics": [
                    {
                        "name": _BY_KEY[key].name,
                        "models": [
                            {
                                "model_id": w.model_id,
                                "text": w.text,
                                "index": index_of.get((column.pair, w.model_id)),
                            }
                            for w in column.worst[key]
                        ],
                    }
                    for key in _WORST_OF
                    if column.worst[key]
                ],
            }
            for column in board.columns
        ],
    }
