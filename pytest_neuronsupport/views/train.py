"""The training table as the seed prints it: per model, the largest batch natively and compiled.

One block per pair (``<compiler>-<v> / <library>-<v>``), one line per model and sequence
length; a batch that hit the search's cap is marked ``*`` (the limit is higher).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset.files import read_table
from pytest_neuronsupport.dataset.layout import data_files
from pytest_neuronsupport.dataset.train import TRAIN
from pytest_neuronsupport.views.perf import Grid

__all__ = ["TrainPair", "train_report", "train_tables"]

_HEADER = (
    "model",
    "objective",
    "precision",
    "seq",
    "batch native",
    "batch compiled",
    "ratio",
    "samples/s native",
    "samples/s compiled",
    "peak GB native",
    "peak GB compiled",
    "result",
)
NOTE = "* the search's cap (--neuron-train-max-batch): the real limit is higher"
"""The legend of the ``*`` of a capped batch."""


@dataclass(frozen=True)
class TrainPair:
    """One pair's training table, and the memory caps its rows were searched under."""

    pair: str
    memory_caps: str
    grid: Grid


def _batch(row: dict[str, Any], mode: str) -> str:
    batch = row.get(f"batch_{mode}")
    if batch is None:
        return "-"
    return f"{batch}*" if row.get(f"batch_{mode}_capped") else str(batch)


def _number(value: object, digits: int) -> str:
    return "-" if not isinstance(value, float) else f"{value:.{digits}f}"


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    return (
        str(row["model_id"]),
        str(row.get("objective") or "-"),
        str(row.get("precision") or "-"),
        str(row.get("seq_len") or "-"),
        _batch(row, "native"),
        _batch(row, "compiled"),
        _number(row.get("batch_ratio"), 2),
        _number(row.get("samples_per_s_native"), 1),
        _number(row.get("samples_per_s_compiled"), 1),
        _number(row.get("peak_gb_native"), 2),
        _number(row.get("peak_gb_compiled"), 2),
        str(row["result"]),
    )


def train_tables(results: Path) -> list[TrainPair]:
    """Every training pair's table under ``results``, in the order of the files."""
    shown = []
    for path in data_files(results, TRAIN.folder):
        rows = read_table(path, table=TRAIN).to_pylist()
        caps = ", ".join(sorted({f"{row.get('memory_cap_gb')}" for row in rows}))
        grid = Grid("", _HEADER, tuple(_cells(row) for row in rows))
        shown.append(TrainPair(f"{path.parent.name} / {path.stem}", caps, grid))
    return shown


def train_report(results: Path) -> list[str]:
    """The lines of the table of every training pair under ``results`` (none: one line)."""
    lines: list[str] = []
    for entry in train_tables(results):
        lines.append(f"{entry.pair}  (memory cap GB: {entry.memory_caps})")
        lines.extend(entry.grid.lines())
        lines.append(NOTE)
        lines.append("")
    return lines or [f"no training results under {results / TRAIN.folder}"]
