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
- **compile cache hits**: the share of the graphs the models' runs needed that their compile
  cache served, ``graphs_cached`` over ``graphs_cached + graphs_compiled`` summed over the
  latest rows that record both (inductor's FX graph cache; on Neuron, TorchNeuron's NEFF
  cache, seeded from a bucket or warm from earlier runs);
- **memory ratio**: the geometric mean over the models of compiled/eager peak memory
  (``peak_gb / eager_peak_gb`` of its PASS performance rows; none on CPU);
- **graph breaks**: their total over the pair's latest rows;
- **CPU references from**: the kinds of host (the CPU and oneDNN's ISA, the rows'
  ``reference_cpu`` and ``reference_isa``) the pair's CPU references came from, with their
  models; flagged where, over the models both tested, they are not the previous pair's (a
  change there may be the host's, not the compiler's; listed again after the table).

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

This module writes the dashboard: the command's table and report, and the page's tab;
:mod:`.dashboard_data` makes it from a dataset, and :mod:`.dashboard_types` holds its types.

Plugin side: this module never imports torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.dataset.layout import DATA
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.dashboard_data import dashboard
from pytest_neuronsupport.views.dashboard_types import (
    BY_KEY,
    METRICS,
    NONE,
    ONLY_HERE,
    ONLY_PREVIOUS,
    OTHER_HOSTS,
    WORST_OF,
    Column,
    Dashboard,
    Metric,
    ModelFigures,
    Versus,
    Worst,
)
from pytest_neuronsupport.views.lookup import hosts_text
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
        ("CPU references from", *(_hosts_cell(column) for column in columns)),
    ]
    for metric in METRICS:
        lines.append((metric.name, *(_cell(column, metric) for column in columns)))
        if metric.key == "compiled_nothing":
            for result in Result:
                lines.append((result.value, *(_count_cell(column, result) for column in columns)))
    return Grid("", ("", *(column.pair for column in columns)), tuple(lines))


def _hosts_cell(column: Column) -> str:
    """The kinds of host a pair's CPU references came from, with their models; and, where they
    are not the previous pair's over the models in both, :data:`OTHER_HOSTS`."""
    text = hosts_text(column.reference_hosts) or NONE
    return f"{text} ({OTHER_HOSTS})" if column.versus and column.versus.reference_hosts else text


def _worst_text(worst: Sequence[Worst]) -> str:
    return ", ".join(
        f"{w.model_id} {w.text}" + (f" ({ONLY_HERE})" if w.only_here else "") for w in worst
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
            (ONLY_HERE, versus.only_here),
            (ONLY_PREVIOUS, versus.only_previous),
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
    lines += ["", board.warning] if board.warning else []
    lines += ["", "worst models (lookup MODEL shows a model's rows)"]
    for column in board.columns:
        named = [(key, column.worst[key]) for key in WORST_OF if column.worst[key]]
        if named:
            lines.append(column.pair)
        for key, worst in named:
            lines.append(f"  {BY_KEY[key].name}: {_worst_text(worst)}")
    lines += _apart_lines(board)
    hosts = [(c.pair, c.versus) for c in board.columns if c.versus and c.versus.reference_hosts]
    if hosts:
        lines += ["", "CPU references from different kinds of host than the previous pair's"]
        lines += [f"{pair} vs {v.previous}: {v.reference_hosts}" for pair, v in hosts]
    return "\n".join(lines) + "\n"


def history(board: Dashboard) -> dict[str, list[dict[str, Any]]]:
    """model id → its result, compile time, speedup and the kind of host of its CPU reference in
    each pair it has figures in, in the columns' order (for the page's detail view)."""
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
                    "reference_host": f.reference_host,
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
                "name": BY_KEY[key].name,
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
            for key in WORST_OF
            if column.worst[key]
        ],
    }


def _page_apart(
    versus: Versus, pair: str, index_of: Mapping[tuple[str, str], int]
) -> dict[str, Any]:
    """A pair's models tested in it only and in its previous pair only, each with the index of
    its row on the page in the pair that tested it."""
    sides = (
        (ONLY_HERE, pair, versus.only_here),
        (ONLY_PREVIOUS, versus.previous, versus.only_previous),
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
        "warning": board.warning,
        "apart": [
            _page_apart(column.versus, column.pair, index_of)
            for column in board.columns
            if column.versus is not None
            and (column.versus.only_here or column.versus.only_previous)
        ],
    }
