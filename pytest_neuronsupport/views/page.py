"""The results page: one static HTML file that opens from ``file://`` and needs no network.

:func:`write_page` reads a results dataset and writes ``<out>/index.html`` from the Jinja
templates next to this module (autoescaped): counts per result, stacked bars per pair as inline
SVG, and a table of every row that the page's own script filters (search, result, pair, task),
orders (the selection, by task) and opens (a row's details, its ``run.py`` and ``repro.py``), and
each pair's failures grouped by cause (:mod:`.failures`, as ``neuronsupport failures`` groups
them, rendered by the template), the support matrix by architecture (:mod:`.coverage`, the
lines of ``neuronsupport coverage``), the performance and training tables (:mod:`.perf` and
:mod:`.train`, the same cells as ``neuronsupport perf`` and ``train-report``), and the
dashboard across pairs (:mod:`.dashboard`, the table of ``neuronsupport dashboard`` with a plot
of each metric, and each model's history in its details). The rows reach
the script as JSON in a ``<script type="application/json">`` element; the script builds the DOM
with ``textContent`` only, and a Content-Security-Policy lets nothing but that script run and
nothing load from the network.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import itertools
import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import jinja2

from pytest_neuronsupport.dataset.durable import atomic_write_text
from pytest_neuronsupport.dataset.files import read_dataset, tested_at_key
from pytest_neuronsupport.dataset.layout import pair_relpath
from pytest_neuronsupport.pipeline.classify import compiled_nothing, own_error
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.bisections import Bisections, bisected, by_release, said_of
from pytest_neuronsupport.views.coverage import coverage
from pytest_neuronsupport.views.dashboard import dashboard, history, page_dashboard
from pytest_neuronsupport.views.failures import NO_REPRO, pair_failures
from pytest_neuronsupport.views.lookup import natural_key, pairs
from pytest_neuronsupport.views.perf import FAILED_HEADER, PerfPair, perf_tables
from pytest_neuronsupport.views.perf import NOTE as PERF_NOTE
from pytest_neuronsupport.views.train import NOTE as TRAIN_NOTE
from pytest_neuronsupport.views.train import TrainPair, train_tables

__all__ = ["write_page"]

_FIELDS: Final = (
    "model_id",
    "result",
    "selection_rank",
    "neuron_cores",
    "wall_s",
    "hbm_peak_gb",
    "hbm_capacity_gb",
    "notes",
    "exclusion",
    "error",
    "cpu_match",
    "english",
    "checked_by",
    "check",
    "run_py",
    "error_site",
    "graph_count",
    "graph_breaks",
    "graph_break_reasons",
    "compiled",
    "cpu_ops",
    "repro_py",
    "repro_ops_before",
    "repro_ops_after",
    "revision",
    "runner",
    "device",
    "backend",
    "dtype",
    "tested_at",
    "reference_cpu",
    "reference_isa",
)
"""The columns the page shows (besides the pair and the task, made from others)."""

_NO_TASK: Final = "(no task)"
_PASS_COLOUR: Final = "#1a7f37"
_EXCLUDED_COLOUR: Final = "#6e7781"
_FAIL_COLOURS: Final = ("#a40e26", "#d1242f", "#82071e", "#d4452f", "#b3244f")
_CHAR_WIDTH: Final = 7.5
"""Room for one character of a pair label left of the bars, in SVG units (13px text)."""
_BAR_WIDTH: Final = 440
_BAR_HEIGHT: Final = 22
_BAR_STEP: Final = 32


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_neuronsupport.views", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _legend() -> list[dict[str, str]]:
    """Each result in the enum's order, with a CSS-safe slug and a colour (red for failures)."""
    fail_colours = itertools.cycle(_FAIL_COLOURS)
    legend = []
    for result in Result:
        if result is Result.PASS:
            colour = _PASS_COLOUR
        elif result is Result.EXCLUDED:
            colour = _EXCLUDED_COLOUR
        else:
            colour = next(fail_colours)
        legend.append({"value": result.value, "slug": result.name.lower(), "colour": colour})
    return legend


def _pair_file(row: Mapping[str, Any]) -> str:
    """The row's pair file, relative to its table's folder."""
    return pair_relpath(
        row["compiler"] or "unknown",
        row["compiler_version"] or "unknown",
        row["library"] or "unknown",
        row["library_version"] or "unknown",
    )


def _pair_label(row: Mapping[str, Any]) -> str:
    """``"inductor-2.13.0 / transformers-5.24.0"``: the row's pair file, as people read it."""
    return _pair_file(row).removesuffix(".parquet").replace("/", " / ")


def _plain(value: object) -> object:
    """A cell as JSON can carry it: datetimes as ISO text, NaN and infinities as null."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _page_row(
    index: int, row: Mapping[str, Any], bisections: Mapping[str, Bisections]
) -> dict[str, Any]:
    data = {name: _plain(row[name]) for name in _FIELDS}
    data["error"] = own_error(row["error"])  # the backend's own exception first
    data.update(index=index, pair=_pair_label(row), task=row["task"] or _NO_TASK)
    found = bisections.get(_pair_file(row), {}).get(row["model_id"], [])
    data["bisected"] = said_of(found) or None  # what bisecting its failure found
    return data


def _page_rows(raw: list[dict[str, Any]], results_dir: Path) -> list[dict[str, Any]]:
    """The page's rows, each with what a bisection of its failure found."""
    bisections = bisected(results_dir)
    return [_page_row(index, row, bisections) for index, row in enumerate(raw)]


def _chart(rows: list[dict[str, Any]], legend: list[dict[str, str]]) -> dict[str, Any]:
    """The stacked bars per pair (in version order), positioned in SVG units.

    Each bar has its pair's label, total, and one segment per result present, its length
    proportional to the count (the longest bar is :data:`_BAR_WIDTH` long).
    """
    per_pair: dict[str, Counter[str]] = {}
    for row in rows:
        per_pair.setdefault(row["pair"], Counter())[row["result"]] += 1
    longest = max((sum(counts.values()) for counts in per_pair.values()), default=1)
    bar_x = max((len(label) for label in per_pair), default=0) * _CHAR_WIDTH + 16
    bars = []
    for n, label in enumerate(sorted(per_pair, key=natural_key)):
        counts = per_pair[label]
        x = bar_x
        segments = []
        for entry in legend:
            width = counts[entry["value"]] / longest * _BAR_WIDTH
            if width:
                segments.append({**entry, "count": counts[entry["value"]], "x": x, "width": width})
            x += width
        total = sum(counts.values())
        bars.append(
            {"label": label, "total": total, "y": n * _BAR_STEP, "end": x, "segments": segments}
        )
    return {
        "bars": bars,
        "bar_x": bar_x,
        "bar_height": _BAR_HEIGHT,
        "width": bar_x + _BAR_WIDTH + 48,
        "height": len(bars) * _BAR_STEP,
    }


def _latest_index(raw: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """(pair label, model id) → the index on the page of the pair's latest row of the model."""
    latest: dict[tuple[str, str], int] = {}
    for index, row in enumerate(raw):
        key = (_pair_label(row), row["model_id"])
        best = latest.get(key)
        if best is None or tested_at_key(row["tested_at"]) >= tested_at_key(raw[best]["tested_at"]):
            latest[key] = index
    return latest


def _failures(results_dir: Path, latest: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
    """Each pair's failure groups (:func:`.failures.pair_failures`), in version order, as the
    template shows them: the cause, and each model (and the repro's) with the index of its row
    on the page, the pair's latest row of that model (``latest``; None if the page has none)."""
    shown = []
    for pair in sorted(pairs(results_dir), key=natural_key):
        label = pair.replace("/", " / ")
        _, groups = pair_failures(results_dir, pair)
        if not groups:
            continue
        entries: list[dict[str, Any]] = []
        for group in groups:
            repro = group.repro
            entries.append(
                {
                    "count": len(group.models),
                    "cause": group.cause.text,
                    "key": group.cause.key,
                    "models": [
                        {
                            "model_id": m.model_id,
                            "result": m.result,
                            "slug": Result(m.result).name.lower(),
                            "index": latest.get((label, m.model_id)),
                            "broke_in": m.broke_in,
                        }
                        for m in group.models
                    ],
                    "repro": None
                    if repro is None
                    else {
                        "model_id": repro.model_id,
                        "ops": repro.ops,
                        "index": latest.get((label, repro.model_id)),
                    },
                }
            )
        failed = sum(len(group.models) for group in groups)
        releases = by_release({m.model_id: m.release for g in groups for m in g.models})
        shown.append({"pair": label, "failed": failed, "groups": entries, "releases": releases})
    return shown


def _by_pair(entry: PerfPair | TrainPair) -> list[str | int]:
    return natural_key(entry.pair)


def _script_hash(env: jinja2.Environment) -> str:
    """The CSP source (``'sha256-...'``) of the page's script, rendered as the page includes it."""
    script = env.get_template("page.js").render()
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def write_page(results_dir: Path, out_dir: Path) -> Path:
    """Write the static results page of the dataset under ``results_dir`` into ``out_dir``.

    ``out_dir`` (and its parents) are created; its ``index.html`` is replaced. The page is a
    single self-contained file (inline CSS, script and SVG; no network, no server), showing an
    empty state when the dataset has no rows.

    Returns:
        The path of ``out_dir/index.html``.

    Raises:
        UnreadableResultsError: a parquet file of the dataset could not be read.
    """
    table = read_dataset(Path(results_dir), keep_extra=False)
    raw = sorted(
        table.to_pylist(),
        key=lambda row: (natural_key(row["model_id"]), natural_key(_pair_label(row))),
    )
    rows = _page_rows(raw, Path(results_dir))
    legend = _legend()
    counts = Counter(row["result"] for row in rows)
    chart = _chart(rows, legend)
    times = [row["tested_at"] for row in raw if row["tested_at"] is not None]
    tasks = sorted({row["task"] for row in rows})
    latest_index = _latest_index(raw)
    failures = _failures(Path(results_dir), latest_index)
    board = dashboard(Path(results_dir))
    perf: list[PerfPair] = sorted(perf_tables(Path(results_dir)), key=_by_pair)
    train: list[TrainPair] = sorted(train_tables(Path(results_dir)), key=_by_pair)
    matrix = coverage(Path(results_dir))
    env = _environment()
    html = env.get_template("index.html").render(
        rows=rows,
        legend=legend,
        counts=[{**entry, "count": counts[entry["value"]]} for entry in legend],
        models=len({row["model_id"] for row in rows}),
        unchecked=sum(
            r["result"] == Result.PASS and r["checked_by"] == "none" and r["compiled"] is not False
            for r in rows
        ),
        compiled_nothing=sum(compiled_nothing(r) for r in rows),
        pairs=[bar["label"] for bar in chart["bars"]],
        tasks=tasks,
        chart=chart,
        failures=failures,
        no_repro=NO_REPRO,
        coverage=matrix,
        perf=perf,
        perf_note=PERF_NOTE,
        failed_header=FAILED_HEADER,
        train=train,
        train_note=TRAIN_NOTE,
        latest=max(times).isoformat(timespec="seconds") if times else None,
        dashboard=page_dashboard(board, latest_index),
        script_hash=_script_hash(env),
        data={"rows": rows, "results": legend, "tasks": tasks, "history": history(board)},
    )
    index = Path(out_dir) / "index.html"
    atomic_write_text(index, html)
    return index
