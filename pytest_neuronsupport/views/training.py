"""The training table as the seed prints it: per model, the largest batch natively and compiled.

One block per pair (``<compiler>-<v> / <library>-<v>``), one line per model and sequence
length; a batch that hit the search's cap is marked ``*`` (the limit is higher).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset.layout import data_files
from pytest_neuronsupport.dataset.store import read_table
from pytest_neuronsupport.dataset.training import TRAIN

__all__ = ["train_report"]

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
    "result",
)


def _batch(row: dict[str, Any], mode: str) -> str:
    batch = row.get(f"batch_{mode}")
    if batch is None:
        return "-"
    return f"{batch}*" if row.get(f"batch_{mode}_capped") else str(batch)


def _number(value: object, digits: int) -> str:
    return "-" if not isinstance(value, float) else f"{value:.{digits}f}"


def train_report(results: Path) -> list[str]:
    """The lines of the table of every training pair under ``results`` (none: one line)."""
    lines: list[str] = []
    for path in data_files(results, TRAIN.folder):
        rows = read_table(path, table=TRAIN).to_pylist()
        cells = [
            (
                str(row["model_id"]),
                str(row.get("objective") or "-"),
                str(row.get("precision") or "-"),
                str(row.get("seq_len") or "-"),
                _batch(row, "native"),
                _batch(row, "compiled"),
                _number(row.get("batch_ratio"), 2),
                _number(row.get("samples_per_s_native"), 1),
                _number(row.get("samples_per_s_compiled"), 1),
                str(row["result"]),
            )
            for row in rows
        ]
        widths = [max(len(line[i]) for line in [_HEADER, *cells]) for i in range(len(_HEADER))]
        caps = {f"{row.get('memory_cap_gb')}" for row in rows}
        lines.append(
            f"{path.parent.name} / {path.stem}  (memory cap GB: {', '.join(sorted(caps))})"
        )
        for line in [_HEADER, *cells]:
            padded = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            lines.append("  ".join(padded).rstrip())
        lines.append("* the search's cap (--neuron-train-max-batch): the real limit is higher")
        lines.append("")
    return lines or [f"no training results under {results / TRAIN.folder}"]
