"""``neuronsupport coverage``: the support matrix by architecture.

One line per (model type, head class), the ``model_type`` and ``architecture`` of the rows (each
from its checkpoint's config): the line's result in each pair, the runner, the cores, the graph
breaks, the cause of its failed rows as ``neuronsupport failures`` groups them (the same code),
and the models the line covers. Every model whose config names the class joins its line: the
zoo's tiny model of an architecture and the Hub's checkpoints of it alike, so a line says which
models of a sweep (the Hub's top models) each architecture covers.

Pairs are columns in the page's order (:func:`~.lookup.natural_key`: compiler by compiler,
oldest version first). A pair's cell is the result of the line's one model there, or how many
of its models came to each result (``2 PASS, 1 FAIL(gen)``); a PASS that compared nothing
(``checked_by`` ``none``) counts as ``PASS unchecked``, one that compiled no graph as ``PASS
compiled nothing``; ``-``: no model of the line was tested
in that pair. The other cells list the distinct values over every pair shown (``-``: none
recorded). Lines come by model type, then head class.

A row with neither column (written before they existed and not run since, or whose config was
never read) is on no line; :attr:`Coverage.unplaced` names its models, and the text says so.

Plugin side: this module never imports torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.dataset.layout import DATA
from pytest_neuronsupport.pipeline.classify import (
    COMPILED_NOTHING,
    compiled_nothing,
    unchecked_kind,
)
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.failures import group_failures
from pytest_neuronsupport.views.lookup import latest_rows, natural_key, pairs, resolve_pair
from pytest_neuronsupport.views.perf import Grid

__all__ = ["HEAD", "TAIL", "Coverage", "coverage", "coverage_report"]

HEAD: Final = ("model type", "head class")
"""The columns before the pairs'."""
TAIL: Final = ("runner", "cores", "graph breaks", "failure", "models")
"""The columns after the pairs'."""
NONE: Final = "-"
"""A cell with nothing to say: not tested in that pair, or nothing recorded."""
UNCHECKED: Final = f"{Result.PASS.value} unchecked"
"""How a PASS that compared nothing is counted."""

_PARQUET: Final = ".parquet"
_ORDER: Final = {result.value: i for i, result in enumerate(Result)}


@dataclass(frozen=True)
class Coverage:
    """The matrix: the pairs shown (their labels, in column order), one grid line per model
    type and head class, and the models of rows that name neither (on no line)."""

    pairs: tuple[str, ...]
    grid: Grid
    unplaced: tuple[str, ...] = ()

    @property
    def note(self) -> str | None:
        """What the grid leaves out: the models whose rows name no architecture (None: no
        model)."""
        if not self.unplaced:
            return None
        count = len(self.unplaced)
        one = count == 1
        return (
            f"{count} model{'' if one else 's'} on no line: {'its' if one else 'their'} rows name "
            "no architecture or model type (recorded before those columns, or the "
            f"config was never read): {', '.join(self.unplaced)}"
        )

    def lines(self) -> list[str]:
        """The grid, padded as the other reports are, then the note."""
        lines = self.grid.lines()
        return [*lines, "", self.note] if self.note else lines


def _label(pair: str) -> str:
    """``inductor-2.13.0/transformers-5.24.0.parquet`` → ``inductor-2.13.0 / transformers-5.24.0``,
    as the page names a pair."""
    return pair.removesuffix(_PARQUET).replace("/", " / ")


def _chosen(results: Path, names: Sequence[str]) -> list[str]:
    """The pair files (``.../x.parquet`` relative to ``data/``) to show, in column order: those
    named (each resolved as ``lookup`` and ``failures`` resolve one), else every pair."""
    found = [resolve_pair(results, name) for name in names] if names else None
    chosen = found if found is not None else [pair + _PARQUET for pair in pairs(results)]
    return sorted(set(chosen), key=lambda pair: natural_key(_label(pair)))


def _result(row: Mapping[str, Any]) -> str:
    result = str(row["result"])
    if compiled_nothing(row):
        return COMPILED_NOTHING
    return UNCHECKED if result == Result.PASS and unchecked_kind(row) is not None else result


def _results_cell(rows: Sequence[Mapping[str, Any]]) -> str:
    """One model's result, or how many came to each result (in the enum's order)."""
    if not rows:
        return NONE
    if len(rows) == 1:
        return _result(rows[0])
    counts = Counter(_result(row) for row in rows)
    ordered = sorted(counts, key=lambda r: (_ORDER.get(r.split(" ")[0], 99), r))
    return ", ".join(f"{counts[result]} {result}" for result in ordered)


def _distinct(values: Iterable[object]) -> str:
    """The distinct values that are not null, in order (numbers as numbers), or ``-``."""
    seen = sorted(
        {value for value in values if value is not None}, key=lambda v: natural_key(str(v))
    )
    return ", ".join(str(value) for value in seen) or NONE


def _in_order(values: Iterable[str]) -> str:
    """The distinct values in the order met, joined by ``; `` (``-``: none)."""
    return "; ".join(dict.fromkeys(values)) or NONE


def coverage(results: Path, pair_names: Sequence[str] = ()) -> Coverage:
    """The support matrix by architecture of the latest rows of ``pair_names`` (default: every
    pair of the dataset); see the module's documentation.

    Raises:
        PairError: a name that is no pair of the dataset (the message lists those there are).
    """
    chosen = _chosen(Path(results), pair_names)
    labels = tuple(_label(pair) for pair in chosen)
    cells: dict[tuple[str, str], dict[str, list[Mapping[str, Any]]]] = {}
    causes: dict[tuple[str, str], str] = {}  # (pair, model) -> the cause of its failure group
    unplaced: set[str] = set()
    for pair, label in zip(chosen, labels, strict=True):
        rows = latest_rows(Path(results), pair)
        for group in group_failures(rows.values(), Path(results), pair):
            for model in group.models:
                causes[(label, model.model_id)] = group.cause.text
        for model_id, row in rows.items():
            model_type, architecture = row.get("model_type"), row.get("architecture")
            if model_type is None and architecture is None:
                unplaced.add(model_id)
                continue
            line = (str(model_type or NONE), str(architecture or NONE))
            cells.setdefault(line, {}).setdefault(label, []).append(row)
    lines = []
    for line in sorted(cells, key=lambda key: (key[0].lower(), key[1].lower(), key)):
        by_pair = cells[line]
        every = [(label, row) for label in labels for row in by_pair.get(label, [])]
        failed = ((label, str(row["model_id"])) for label, row in every)
        failures = (causes[key] for key in failed if key in causes)
        lines.append(
            (
                *line,
                *(_results_cell(by_pair.get(label, [])) for label in labels),
                _distinct(row.get("runner") for _, row in every),
                _distinct(row.get("neuron_cores") for _, row in every),
                _distinct(row.get("graph_breaks") for _, row in every),
                _in_order(failures),
                ", ".join(sorted({str(row["model_id"]) for _, row in every}, key=natural_key)),
            )
        )
    # a model on a line in one pair and on none in another is listed there: it is placed
    placed = {str(r["model_id"]) for by in cells.values() for rows in by.values() for r in rows}
    grid = Grid("", (*HEAD, *labels, *TAIL), tuple(lines))
    return Coverage(labels, grid, tuple(sorted(unplaced - placed, key=natural_key)))


def coverage_report(results: Path, pair_names: Sequence[str] = ()) -> list[str]:
    """The lines ``neuronsupport coverage`` prints (no line of the matrix: one line saying so,
    then the note)."""
    matrix = coverage(results, pair_names)
    if matrix.grid.cells:
        return matrix.lines()
    shown = ", ".join(matrix.pairs) or "no pair"
    empty = f"no row names its architecture in {Path(results) / DATA} ({shown})"
    return [empty, *([matrix.note] if matrix.note else [])]
