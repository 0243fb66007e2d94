"""``neuronsupport lookup`` and ``diff``: a model's rows over every pair, and two pairs' changes.

Pairs are named as their file under ``<results>/data`` (``inductor-2.13.0/transformers-5.24.0``,
with or without ``.parquet``, with or without a leading ``data/`` or results folder).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from pytest_neuronsupport.dataset.layout import DATA, check_relpath, data_files, run_py_path
from pytest_neuronsupport.dataset.store import latest_positions, read_table
from pytest_neuronsupport.pipeline.classify import own_error, result_text, unchecked_kind
from pytest_neuronsupport.progress import duration
from pytest_neuronsupport.runners.lib.protocol import Result, first_line

__all__ = [
    "Change",
    "PairError",
    "diff",
    "format_changes",
    "latest_rows",
    "lookup",
    "natural_key",
    "pairs",
    "resolve_pair",
]

_PARQUET = ".parquet"


class PairError(ValueError):
    """A pair that names no data file; the message lists the pairs there are."""


def pairs(results: Path) -> list[str]:
    """The pairs of a dataset: ``compiler-version/library-version``, sorted."""
    data = Path(results) / DATA
    return [
        path.relative_to(data).as_posix().removesuffix(_PARQUET) for path in data_files(results)
    ]


def resolve_pair(results: Path, name: str) -> str:
    """The pair path (``.../x.parquet`` relative to ``data/``) that ``name`` means.

    Raises:
        PairError: no such pair in the dataset (the message lists those there are).
    """
    text = name.replace("\\", "/").strip("/")
    for prefix in (Path(results).as_posix().strip("/") + "/", "data/"):
        text = text.removeprefix(prefix)
    text = text if text.endswith(_PARQUET) else text + _PARQUET
    known = pairs(results)
    try:
        check_relpath(text)
    except ValueError:
        pass
    else:
        if text.removesuffix(_PARQUET) in known:
            return text
    raise PairError(
        f"no pair {name!r} in {Path(results) / DATA}; pairs there: {', '.join(known) or 'none'}"
    )


def latest_rows(results: Path, pair: str) -> dict[str, dict[str, Any]]:
    """model_id → its latest row in one pair's file."""
    table = read_table(Path(results) / DATA / pair)
    rows = table.to_pylist()
    return {model: rows[position] for model, position in latest_positions(table).items()}


def natural_key(text: str) -> list[str | int]:
    """Sort key that orders version numbers as numbers (``2.9`` before ``2.13``): the order
    of pairs on the page and in ``coverage``, compiler by compiler, oldest version first."""
    return [int(part) if i % 2 else part.lower() for i, part in enumerate(re.split(r"(\d+)", text))]


def _version_key(text: str | None) -> tuple[int, Any]:
    try:
        return (1, Version(text or ""))
    except InvalidVersion:
        return (0, text or "")


def phases_line(row: Mapping[str, Any]) -> str | None:
    """Where a row's time went: its phase times (seconds, one decimal) and what its compile
    cache did (``2 cached, 0 compiled``); None for a row without them."""
    names = ("load_s", "compile_s", "generate_s", "forward_s", "reference_s")
    parts = [f"{n.removesuffix('_s')} {row[n]:.1f}s" for n in names if row.get(n) is not None]
    if not parts:
        return None
    cached, fresh = row.get("graphs_cached"), row.get("graphs_compiled")
    if cached is not None or fresh is not None:
        known = ("?" if v is None else str(v) for v in (cached, fresh))
        parts.append("graphs: {} cached, {} compiled".format(*known))
    return "time: " + ", ".join(parts)


def _memory(row: Mapping[str, Any]) -> str:
    peak, capacity = row.get("hbm_peak_gb"), row.get("hbm_capacity_gb")
    if peak is None:
        return "-"
    return f"{peak:.2f}/{capacity:.0f} GB" if capacity else f"{peak:.2f} GB"


def lookup(results: Path, model: str) -> list[str]:
    """Every recorded row of the models whose id contains ``model`` (case-insensitive).

    One block per model; in it one line per pair, newest compiler first: pair, result, cores,
    wall time, peak memory against capacity, the start of ``notes`` or ``error``, and where
    the run.py is; a PASS whose output was compared with nothing is ``PASS unchecked``, with
    why, one whose run compiled no graph ``PASS compiled nothing``, and one that ran operators
    on the CPU ``PASS, 3 operators on the CPU`` (named on a line of their own). No match gives a
    single line saying so.
    """
    needle = model.lower()
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for pair in pairs(results):
        for model_id, row in latest_rows(results, pair + _PARQUET).items():
            if needle in model_id.lower():
                found.setdefault(model_id, []).append((pair, row))
    if not found:
        return [f"no model matching {model!r} in {Path(results) / DATA}"]
    lines: list[str] = []
    for model_id in sorted(found):
        lines.append(model_id)
        entries = sorted(
            found[model_id],
            key=lambda e: (
                _version_key(e[1].get("compiler_version")),
                _version_key(e[1].get("library_version")),
                e[0],
            ),
            reverse=True,
        )
        for pair, row in entries:
            wall = "-" if row.get("wall_s") is None else duration(row["wall_s"])
            why = first_line(own_error(row.get("error")) or row.get("notes"), 100)
            result, kind = result_text(row), unchecked_kind(row)
            if kind is not None and result.startswith(f"{Result.PASS} unchecked"):
                why = f"({kind}) {why or ''}".rstrip()
            lines.append(
                f"  {pair:<40} {result:<13} cores={row.get('neuron_cores') or '-'} "
                f"wall={wall} mem={_memory(row)}" + (f"  {why}" if why else "")
            )
            if (times := phases_line(row)) is not None:
                lines.append(f"  {'':<40} {times}")
            if row.get("cpu_ops"):
                lines.append(f"  {'':<40} on the CPU: {', '.join(row['cpu_ops'])}")
            script = run_py_path(results, pair + _PARQUET, model_id)
            lines.append(f"  {'':<40} run.py: {script if script.is_file() else '(not here)'}")
    return lines


@dataclass(frozen=True)
class Change:
    """A model whose result differs between two pairs (None: no row in that pair)."""

    model_id: str
    result_a: str | None
    result_b: str | None
    error_a: str
    error_b: str


def diff(results: Path, pair_a: str, pair_b: str) -> list[Change]:
    """The models whose result differs between two pairs, by model id.

    Raises:
        PairError: a pair that names no data file.
    """
    rows_a = latest_rows(results, resolve_pair(results, pair_a))
    rows_b = latest_rows(results, resolve_pair(results, pair_b))
    changes = []
    for model_id in sorted(set(rows_a) | set(rows_b)):
        a, b = rows_a.get(model_id), rows_b.get(model_id)
        result_a, result_b = (None if r is None else str(r["result"]) for r in (a, b))
        if result_a != result_b:
            errors = (first_line(own_error((r or {}).get("error")), 200) for r in (a, b))
            changes.append(Change(model_id, result_a, result_b, *errors))
    return changes


def format_changes(changes: Sequence[Change], pair_a: str, pair_b: str, fmt: str) -> str:
    """``text`` (aligned lines), ``csv`` (a header, then one row each) or ``json`` (a list)."""
    if fmt == "json":
        return json.dumps([asdict(change) for change in changes], indent=2) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["model_id", "result_a", "result_b", "error_a", "error_b"])
        for c in changes:
            writer.writerow([c.model_id, c.result_a or "", c.result_b or "", c.error_a, c.error_b])
        return out.getvalue()
    lines = [f"{len(changes)} model(s) differ between {pair_a} (a) and {pair_b} (b)"]
    for c in changes:
        lines.append(f"{c.model_id}: {c.result_a or 'no row'} -> {c.result_b or 'no row'}")
        for side, error in (("a", c.error_a), ("b", c.error_b)):
            if error:
                lines.append(f"  {side}: {error}")
    return "\n".join(lines) + "\n"
