"""How rows are shown: failure texts, junit properties, the terminal summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from pytest_neuronsupport.results import RESULTS

#: Row fields carried by each test as junit properties (``--junitxml``), in this order.
JUNIT_FIELDS = (
    "model_id",
    "result",
    "runner",
    "neuron_cores",
    "cpu_match",
    "english",
    "exclusion",
    "wall_s",
    "device",
    "backend",
    "compiler",
    "compiler_version",
    "library",
    "library_version",
    "run_py_sha256",
)


def first_line(text: str | None, limit: int = 200) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def failure_text(row: Mapping[str, Any], run_py: str | None) -> str:
    """The short text of a failed model's test: result, first line of the error, run.py."""
    detail = first_line(row.get("error")) or first_line(row.get("cpu_match")) or ""
    lines = [f"{row['result']} {row['model_id']}: {detail}".rstrip(": ")]
    if row.get("result") == "FAIL(output)" and row.get("cpu_match"):
        lines.append(f"cpu_match: {row['cpu_match']}")
        if row.get("notes"):
            lines.append(f"output: {first_line(row['notes'])}")
    if run_py:
        lines.append(f"run.py: {run_py}")
    return "\n".join(lines)


def junit_properties(row: Mapping[str, Any]) -> list[tuple[str, object]]:
    return [(name, row[name]) for name in JUNIT_FIELDS if row.get(name) is not None]


def counts_line(rows: Iterable[Mapping[str, Any]]) -> str:
    counts = Counter(str(r["result"]) for r in rows)
    order = [r for r in RESULTS if r in counts] + sorted(set(counts) - set(RESULTS))
    return ", ".join(f"{counts[r]} {r}" for r in order) or "no models run"


def failure_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per failed model: result, model, why."""
    lines = []
    for row in rows:
        if str(row["result"]).startswith("FAIL"):
            why = first_line(row.get("cpu_match") if row["result"] == "FAIL(output)" else None)
            why = why or first_line(row.get("notes")) or first_line(row.get("error"))
            lines.append(f"{row['result']:<14} {row['model_id']}  {why}")
    return lines
