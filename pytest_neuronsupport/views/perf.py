"""The performance tables as the seed prints them: encoders, decoders, encoder-decoders.

One block per pair (``<compiler>-<v> / <library>-<v>``) and kind, one line per model and
configuration. Every timed figure is shown with its spread (``P50 (±stdev)`` or its P99 beside
it); a configuration flagged ``noisy`` (P99 over twice P50) is marked ``!``, one flagged
``wide_interval`` (a 95% interval wider than a tenth of its figure) ``~``; the speedup has its
interval. A row without
figures (a failed or excluded benchmark) shows its result and why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset.files import read_table
from pytest_neuronsupport.dataset.layout import data_files
from pytest_neuronsupport.dataset.perf import PERF

__all__ = ["Grid", "PerfPair", "perf_report", "perf_tables"]

Column = tuple[str, Callable[[dict[str, Any]], str]]


def _n(value: object, digits: int = 2) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.{digits}f}"


def _money(value: object) -> str:
    return "-" if not isinstance(value, int | float) else f"${value:.3f}"


def _thr(row: dict[str, Any]) -> str:
    flag = ("!" if row.get("noisy") else "") + ("~" if row.get("wide_interval") else "")
    return f"{_n(row.get('throughput'))} ±{_n(row.get('throughput_round_stdev'), 1)}{flag}"


def _speedup(row: dict[str, Any]) -> str:
    """``2.00x``, with its 95% interval where the row has one: ``2.00x [1.90-2.10]``."""
    low, high = row.get("speedup_vs_eager_ci_low"), row.get("speedup_vs_eager_ci_high")
    interval = "" if low is None or high is None else f" [{_n(low)}-{_n(high)}]"
    return f"{_n(row.get('speedup_vs_eager'))}x{interval}"


_COMMON_HEAD: Sequence[Column] = (
    ("Model", lambda r: str(r["model_id"])),
    ("Config", lambda r: str(r["configuration"])),
)
_COMMON_TAIL: Sequence[Column] = (
    ("Cost per 1M", lambda r: _money(r.get("cost_per_million"))),
    ("vs eager", _speedup),
    ("Roofline", lambda r: _n(r.get("roofline_fraction"), 4)),
    ("Compile s", lambda r: _n(r.get("compile_s"))),
    ("Run Mode", lambda r: str(r.get("run_mode") or "-")),
    ("DP", lambda r: str(r.get("dp_degree") or "-")),
    ("Batch", lambda r: str(r.get("batch") or "-")),
    ("dtype", lambda r: str(r.get("dtype") or "-")),
)
COLUMNS: dict[str, Sequence[Column]] = {
    "encoder": (
        *_COMMON_HEAD,
        ("Throughput (inference/sec)", _thr),
        ("Latency P50 (ms)", lambda r: _n(r.get("latency_ms_p50"))),
        ("Latency P99 (ms)", lambda r: _n(r.get("latency_ms_p99"))),
        *_COMMON_TAIL,
        ("Seq", lambda r: str(r.get("seq_len") or "-")),
    ),
    "decoder": (
        *_COMMON_HEAD,
        ("Output Token Throughput (tokens/sec)", _thr),
        ("TTFT P50 (ms)", lambda r: _n(r.get("ttft_ms_p50"))),
        ("TTFT P99 (ms)", lambda r: _n(r.get("ttft_ms_p99"))),
        ("TPOT P50 (ms)", lambda r: _n(r.get("tpot_ms_p50"))),
        ("TPOT P99 (ms)", lambda r: _n(r.get("tpot_ms_p99"))),
        *_COMMON_TAIL,
        ("TP", lambda r: str(r.get("neuron_cores") or "-")),
        ("In", lambda r: str(r.get("input_len") or "-")),
        ("Out", lambda r: str(r.get("output_len") or "-")),
        ("Hourly", lambda r: _n(r.get("price_per_hour"))),
    ),
    "encoder-decoder": (
        *_COMMON_HEAD,
        ("Throughput (tokens/second)", _thr),
        ("Latency per Token P50 (ms)", lambda r: _n(r.get("token_latency_ms_p50"))),
        ("Latency per Token P99 (ms)", lambda r: _n(r.get("token_latency_ms_p99"))),
        *_COMMON_TAIL,
        ("TP", lambda r: str(r.get("neuron_cores") or "-")),
        ("In", lambda r: str(r.get("input_len") or "-")),
        ("Out", lambda r: str(r.get("output_len") or "-")),
    ),
}
TITLES = {"encoder": "Encoder Models", "decoder": "Decoder Models"}


NOTE = (
    "± the standard deviation over the timed rounds; ! noisy (a P99 over twice its "
    "P50); vs eager: eager latency / compiled latency; roofline: fraction of the peak"
)
"""The legend of the performance tables' signs."""
FAILED_HEADER = ("Model", "Config", "Result", "Notes")
"""The columns of a pair's rows without figures."""


@dataclass(frozen=True)
class Grid:
    """A table as the reports show it: a title, the column names, and each line's cells."""

    title: str
    header: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]

    def lines(self, width: int | None = None, keep: int = 2) -> list[str]:
        """The header and the cells, each column padded to its widest text. With ``width``,
        a table wider than that is wrapped: blocks of the columns that fit, one after another
        (a blank line between them), each starting with the first ``keep`` columns again."""
        widths = [
            max(len(line[i]) for line in [self.header, *self.cells])
            for i in range(len(self.header))
        ]
        blocks: list[list[int]] = [list(range(len(self.header)))]
        if width is not None and sum(widths) + 2 * (len(widths) - 1) > width:
            blocks = [[]]
            used = sum(widths[:keep]) + 2 * keep
            for i in range(keep, len(widths)):
                if blocks[-1] and used + widths[i] > width:
                    blocks.append([])
                    used = sum(widths[:keep]) + 2 * keep
                blocks[-1].append(i)
                used += widths[i] + 2
            blocks = [[*range(min(keep, len(widths))), *block] for block in blocks]
        out: list[str] = []
        for block in blocks:
            out.extend([""] if out else [])
            out.extend(
                "  ".join(line[i].ljust(widths[i]) for i in block).rstrip()
                for line in [self.header, *self.cells]
            )
        return out


@dataclass(frozen=True)
class PerfPair:
    """One pair's performance tables (one per kind with figures) and its rows without figures."""

    pair: str
    tables: tuple[Grid, ...]
    failed: tuple[tuple[str, ...], ...]


def _grid(title: str, rows: list[dict[str, Any]], columns: Sequence[Column]) -> Grid:
    return Grid(
        title,
        tuple(name for name, _ in columns),
        tuple(tuple(cell(row) for _, cell in columns) for row in rows),
    )


def perf_tables(results: Path) -> list[PerfPair]:
    """Every pair's performance tables under ``results``, in the order of the files."""
    shown: list[PerfPair] = []
    for path in data_files(results, PERF.folder):
        rows = read_table(path, table=PERF).to_pylist()
        tables = []
        for kind, columns in COLUMNS.items():
            measured = [r for r in rows if r.get("kind") == kind and r["result"] == "PASS"]
            if measured:
                tables.append(_grid(TITLES.get(kind, "Encoder-Decoder Models"), measured, columns))
        failed = tuple(
            (str(r["model_id"]), str(r["configuration"]), str(r["result"]), r.get("notes") or "")
            for r in rows
            if r["result"] != "PASS"
        )
        shown.append(PerfPair(f"{path.parent.name} / {path.stem}", tuple(tables), failed))
    return shown


#: The widest line of ``neuronsupport perf`` where the terminal does not say (a pipe, a log).
WIDTH = 100


def perf_report(results: Path, width: int = WIDTH) -> list[str]:
    """The lines of the performance tables of every pair under ``results`` (none: one line),
    wrapped to ``width`` columns (:meth:`Grid.lines`)."""
    lines: list[str] = []
    for entry in perf_tables(results):
        lines.append(entry.pair)
        for grid in entry.tables:
            lines.append(f"\n{grid.title}")
            lines.extend(grid.lines(width))
        if entry.failed:
            lines.append("\nWithout figures")
            lines.extend("  ".join(line) for line in entry.failed)
        lines.append(f"\n{NOTE}")
        lines.append("")
    return lines or [f"no performance results under {results / PERF.folder}"]
