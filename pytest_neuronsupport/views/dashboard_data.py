"""The dashboard made from a dataset: each pair's latest rows, support and performance, read
into each model's figures, summed up over a pair's models into its column, and set against the
previous pair of the same compiler over the models both tested (what each figure is:
:mod:`.dashboard`).

Plugin side: this module never imports torch.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.dataset.files import latest_positions, read_table
from pytest_neuronsupport.dataset.layout import DATA, data_files
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.table import Table
from pytest_neuronsupport.pipeline.classify import compiled_nothing, unchecked_kind
from pytest_neuronsupport.runners.lib.measures import percentile
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.dashboard_types import (
    METRICS,
    WORST,
    Column,
    Dashboard,
    ModelFigures,
    Versus,
    Worst,
)
from pytest_neuronsupport.views.lookup import (
    fullgraph_of,
    fullgraph_warning,
    host_kind,
    hosts_apart,
    natural_key,
    split_models,
)

__all__ = ["dashboard"]


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
        cached, fresh = (None, None) if row is None else _graphs(row)
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
            graphs_cached=cached,
            graphs_compiled=fresh,
            reference_host=None if row is None else host_kind(row),
        )
    return figures


def _graphs(row: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """A row's ``graphs_cached`` and ``graphs_compiled`` where it records both, else none."""
    cached, fresh = row.get("graphs_cached"), row.get("graphs_compiled")
    if isinstance(cached, int) and isinstance(fresh, int):
        return cached, fresh
    return None, None


def _cache_hits(rows: Sequence[ModelFigures]) -> tuple[float | None, int]:
    """The share of the graphs the models' runs needed that their compile cache served, and
    the models it is made of (those whose row records both counts, and some graph)."""
    known = [
        (cached, fresh)
        for f in rows
        if (cached := f.graphs_cached) is not None
        and (fresh := f.graphs_compiled) is not None
        and cached + fresh > 0
    ]
    total = sum(c + n for c, n in known)
    return (sum(c for c, _ in known) / total if total else None), len(known)


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
    hits, hit_models = _cache_hits(rows)
    metrics: dict[str, float | None] = {
        "pass_rate": (counts[Result.PASS] - nothing) / tested if tested else None,
        "unchecked": float(sum(f.unchecked for f in rows)),
        "compiled_nothing": float(nothing),
        "speedup": _geomean(speedups),
        "compile_mean_s": statistics.fmean(compiles) if compiles else None,
        "compile_p90_s": percentile(compiles, 90) if compiles else None,
        "cache_hits": hits,
        "memory_ratio": _geomean(memory),
        "graph_breaks": float(sum(breaks)) if breaks else None,
    }
    made_of = (tested, tested, tested, len(speedups), len(compiles), len(compiles), hit_models)
    models = dict(zip((m.key for m in METRICS), (*made_of, len(memory), len(breaks)), strict=True))
    return _Summary(metrics, {r.value: counts[r.value] for r in Result}, models, speedups)


def _tested(figures: Mapping[str, ModelFigures]) -> list[str]:
    """The models a pair tested: a latest row other than ``EXCLUDED``, or only performance
    figures."""
    return [model for model, f in figures.items() if f.result != Result.EXCLUDED]


_ALIKE: Final = (
    *("result", "compile_s", "speedup", "memory_ratio", "graph_breaks"),
    *("graphs_cached", "graphs_compiled"),
)
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
        reference_hosts=hosts_apart(
            (before[m].reference_host for m in split.both),
            (here[m].reference_host for m in split.both),
        ),
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
        reference_hosts=dict(
            Counter(f.reference_host for f in figures.values() if f.reference_host is not None)
        ),
        versus=versus,
    )


def dashboard(results: Path) -> Dashboard:
    """Every pair's column under ``results`` (support and performance files alike); see
    :mod:`.dashboard`.

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
        column = _column(label, figures[label], previous)
        columns.append(replace(column, fullgraph=fullgraph_of(rows)))
        last[_compiler(label)] = label
    warning = fullgraph_warning({column.pair: column.fullgraph for column in columns})
    return Dashboard(tuple(columns), figures, warning)
