"""What the ``bisect/`` table says of a model: which release broke it, or where inside the
compiler (:data:`~pytest_neuronsupport.dataset.bisect.BISECT`).

A bisection's row is in the pair of the failure it bisected, so ``lookup`` shows it under the
model's line of that pair, ``failures`` beside the model in its group (and the pair's new
failures grouped by the release that broke them), and the page in the model's details and its
Failures view. Plugin side: no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset.bisect import BISECT
from pytest_neuronsupport.dataset.files import latest_positions, read_table
from pytest_neuronsupport.dataset.layout import data_files

__all__ = [
    "answered",
    "bisected",
    "bisected_range",
    "by_release",
    "pair_bisections",
    "release_of",
    "said",
    "said_of",
]

#: A pair's bisections: model id → its rows (one per package bisected).
Bisections = dict[str, list[dict[str, Any]]]


def _pair_of(results: Path, path: Path) -> str:
    return path.relative_to(Path(results) / BISECT.folder).as_posix()


def _read(path: Path) -> Bisections:
    """A bisection file's latest row of each model and package, by model id."""
    table = read_table(path, table=BISECT)
    rows = table.to_pylist()
    per_model: Bisections = {}
    for position in sorted(latest_positions(table, BISECT.key).values()):
        row = rows[position]
        per_model.setdefault(str(row["model_id"]), []).append(row)
    return per_model


def bisected(results: Path) -> dict[str, Bisections]:
    """Every pair's bisections: pair file (``inductor-2.13.0/transformers-5.25.0.parquet``)
    → model id → its latest row per package."""
    return {
        _pair_of(results, path): _read(path) for path in data_files(Path(results), BISECT.folder)
    }


def pair_bisections(results: Path, pair: str) -> Bisections:
    """One pair's bisections (``pair``: its file relative to ``data/``)."""
    path = Path(results) / BISECT.folder / pair
    return _read(path) if path.is_file() else {}


def said(row: Mapping[str, Any]) -> str:
    """A bisection in a few words: ``broke in transformers 5.25.0 (last passing 5.24.0)``."""
    answer = str(row.get("answer") or row.get("status") or "bisected")
    if row.get("kind") == "release" and row.get("last_good") and row.get("first_bad"):
        return f"{answer} (last passing {row['last_good']})"
    return answer


def answered(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The bisections that say where the model broke (a release, a range, a place in the
    compiler); where none does, the latest of the others, which says why not."""
    rows = list(rows)
    found = [
        r for r in rows if r.get("first_bad") or (r.get("kind") == "compiler" and r.get("stage"))
    ]
    latest = max(rows, key=lambda r: str(r.get("tested_at") or ""), default=None)
    return found or ([latest] if latest is not None else [])


def bisected_range(row: Mapping[str, Any]) -> str:
    """What a bisection searched: ``transformers 5.20.0..5.25.0``, or ``inside inductor``."""
    if row.get("kind") == "compiler":
        return f"inside {row.get('package')}"
    return f"{row.get('package')} {row.get('good')}..{row.get('bad')}"


def said_of(rows: Iterable[Mapping[str, Any]]) -> str:
    """A model's bisections in a pair, in a few words each (:func:`answered`)."""
    return "; ".join(dict.fromkeys(said(row) for row in answered(rows)))  # each answer once


def release_of(rows: Iterable[Mapping[str, Any]]) -> str:
    """The release a model's bisections found broke it (``transformers 5.25.0``, or a range,
    ``transformers 5.22.0..5.22.2``); empty when none did."""
    for row in sorted(rows, key=lambda r: str(r.get("tested_at") or ""), reverse=True):
        if row.get("kind") == "release" and row.get("first_bad"):
            low = (row.get("first_bad_range") or [row["first_bad"]])[0]
            found = row["first_bad"] if low == row["first_bad"] else f"{low}..{row['first_bad']}"
            return f"{row['package']} {found}"
    return ""


def by_release(releases: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """Models grouped by the release that broke them (``releases``: model id → its
    :func:`release_of`, empty: none found), most models first (ties: by release)."""
    groups: dict[str, list[str]] = {}
    for model_id, release in sorted(releases.items()):
        if release:
            groups.setdefault(release, []).append(model_id)
    return sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
