"""How rows are shown to people: failure, skip and fault texts, a finished model's line, the
terminal summary. Which of them a model's test gets (passed, failed, skipped, the baseline's
expectations, junit) is decided in :mod:`pytest_neuronsupport.outcomes`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_neuronsupport.baseline import Comparison
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.train import TRAIN
from pytest_neuronsupport.pipeline.classify import (
    COMPILED_NOTHING,
    compiled_nothing,
    cpu_ops_text,
    own_error,
    unchecked_kind,
)
from pytest_neuronsupport.progress import UNCHANGED, row_line
from pytest_neuronsupport.records import ModeOutcome
from pytest_neuronsupport.runners.lib.protocol import Result, first_line


def failure_text(row: Mapping[str, Any], run_py: str | Path | None) -> str:
    """The short text of a failed model's test: result, first line of the error, run.py."""
    detail = first_line(own_error(row.get("error")), 200) or first_line(row.get("cpu_match"), 200)
    lines = [f"{row['result']} {row['model_id']}: {detail}".rstrip(": ")]
    if row.get("result") == Result.FAIL_OUTPUT and row.get("cpu_match"):
        lines.append(f"cpu_match: {row['cpu_match']}")
        if row.get("notes"):
            lines.append(f"output: {first_line(row['notes'], 200)}")
    if run_py:
        lines.append(f"run.py: {run_py}")
    return "\n".join(lines)


def fault_text(model_id: str, fault: str) -> str:
    """The failure text of a model whose test an environment fault stopped (no row)."""
    return f"{model_id}: not tested, no row recorded: {fault}"


def unreadable_text(path: Path, error: str, results: Path) -> str:
    """The problem of a pair file a merge could not read: its rows wait in the journal."""
    return (
        f"{path} is unreadable and was left untouched ({error}); "
        "its new rows are safe in the journal: repair the file or move it away, then "
        f"`neuronsupport merge --results {results}` (or the next sweep) merges them"
    )


def skip_text(row: Mapping[str, Any]) -> str:
    """The reason an EXCLUDED model's test is skipped."""
    return f"EXCLUDED ({row.get('exclusion')}): {row.get('notes')}"


#: How an unchecked PASS (``checked_by`` = ``none``) is counted apart from checked ones.
UNCHECKED = "PASS unchecked"


def counts_line(rows: Iterable[Mapping[str, Any]]) -> str:
    """Each result's count, unchecked PASS apart with why (``3 PASS, 2 PASS unchecked: judge
    unavailable``), a PASS that compiled nothing apart from both (``1 PASS compiled
    nothing``), and how many PASS ran operators on the CPU (``3 PASS (1 with operators on the
    CPU)``)."""
    every = list(rows)
    rows = [r for r in every if not compiled_nothing(r)]
    kinds = Counter(kind for r in rows if (kind := unchecked_kind(r)) is not None)
    counts = Counter(str(r["result"]) for r in rows if unchecked_kind(r) is None)
    order = [r for r in Result if r in counts] + sorted(set(counts) - set(Result))
    parts = [f"{counts[r]} {r}" for r in order]
    on_cpu = sum(r["result"] == Result.PASS and cpu_ops_text(r) is not None for r in rows)
    if on_cpu and Result.PASS in counts:
        parts[0] += f" ({on_cpu} with operators on the CPU)"
    after_pass = 1 if Result.PASS in counts else 0
    if kinds:
        why = " / ".join(k if len(kinds) == 1 else f"{n} {k}" for k, n in kinds.most_common())
        parts.insert(after_pass, f"{kinds.total()} {UNCHECKED}: {why}")
        after_pass += 1
    if len(every) > len(rows):
        parts.insert(after_pass, f"{len(every) - len(rows)} {COMPILED_NOTHING}")
    return ", ".join(parts) or "no models run"


def unchecked_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The PASS rows whose output was compared with nothing (``checked_by`` = ``none``), that
    compiled something."""
    return [
        r
        for r in rows
        if r.get("result") == Result.PASS
        and unchecked_kind(r) is not None
        and not compiled_nothing(r)
    ]


def unchecked_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per unchecked PASS: the model and why nothing was compared; one per PASS that
    compiled nothing; one per PASS with operators on the CPU, naming them."""
    rows = list(rows)
    lines = [f"{UNCHECKED:<14} {r['model_id']}  {unchecked_kind(r)}" for r in unchecked_rows(rows)]
    nothing = "no graph was compiled: the model ran as it is"
    lines += [f"{COMPILED_NOTHING} {r['model_id']}  {nothing}" for r in rows if compiled_nothing(r)]
    for r in rows:
        if r.get("result") == Result.PASS and (text := cpu_ops_text(r)) is not None:
            lines.append(f"{'PASS':<14} {r['model_id']}  {text}: {', '.join(r['cpu_ops'])}")
    return lines


def require_check_line(models: Sequence[str]) -> str:
    """The summary's line when ``--neuron-require-check`` fails the session."""
    return (
        f"--neuron-require-check: {len(models)} PASS compared with nothing, the session fails: "
        + ", ".join(models)
    )


def failure_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per failed model: result, model, why."""
    lines = []
    for row in rows:
        if str(row["result"]).startswith("FAIL"):
            output = row.get("cpu_match") if row["result"] == Result.FAIL_OUTPUT else None
            why = first_line(output, 200) or first_line(row.get("notes"), 200)
            why = why or first_line(own_error(row.get("error")), 200)
            lines.append(f"{row['result']:<14} {row['model_id']}  {why}")
    return lines


def _no_facts(row: Mapping[str, Any]) -> list[str]:
    return []


def _batches(row: Mapping[str, Any]) -> list[str]:
    return [f"batch {row.get('batch_native')} native, {row.get('batch_compiled')} compiled"]


def _compiled(row: Mapping[str, Any]) -> list[str]:
    said = ["compiled nothing"] if compiled_nothing(row) else []
    return [*said, *filter(None, [cpu_ops_text(row)])]


#: What a finished model's line says of its row beyond its cores and time, per table.
LINE_FACTS = {TRAIN.name: _batches, SUPPORT.name: _compiled}


def model_line(
    model_id: str, outcomes: Sequence[ModeOutcome], outcome: str = "", reason: str = ""
) -> tuple[str, str, float | None]:
    """A finished model's line, the result it counts as in the progress, and its wall time:
    by its first mode's row, else why nothing ran (its test's ``outcome`` and the ``reason``
    of its report, :func:`.outcomes.skip_reason`); then what the modes after it recorded
    (``perf: 2 PASS``: a benchmark ran, the support run unchanged or not)."""
    first = outcomes[0] if outcomes else None
    fault = next((o.fault for o in outcomes if o.fault is not None), None)
    if fault is not None:  # the environment's, not the model's: no row
        return f"{'ERROR':<13} {model_id}  (not tested: {fault})", "ERROR", None
    row = first.rows[0] if first is not None and first.rows else None
    later = [o for o in outcomes[1:] if o.rows]
    then = [f"{o.table}: {counts_line(o.rows)}" for o in later]
    later_s = [r["wall_s"] for o in later for r in o.rows if r.get("wall_s") is not None]
    if row is not None:
        more = LINE_FACTS.get(first.table, _no_facts)(row) if first else []
        wall_s = row.get("wall_s")
        if later_s:
            wall_s = (wall_s or 0.0) + sum(later_s)
        return row_line(row, [*more, *then]), str(row["result"]), wall_s
    unchanged = first is not None and first.unchanged
    result = UNCHANGED if unchanged else outcome
    why = "run.py as recorded" if unchanged else reason
    line = f"{result:<13} {model_id}  ({'; '.join([why, *then])})"
    return line, result, sum(later_s) if later_s else None


@dataclass(frozen=True)
class TableFacts:
    """What a sweep recorded into one table."""

    name: str
    rows: list[dict[str, Any]]
    unchanged: int
    #: The pair file the rows went to, and whether the merge could write it.
    path: Path
    written: bool = True


@dataclass(frozen=True)
class SummaryFacts:
    """What the terminal summary of a sweep says."""

    pair: str
    device: str
    shard: str | None
    tables: list[TableFacts]
    problems: list[str] = field(default_factory=list)
    #: Lines of what the sweep did beside its rows (the Hub cache's evictions).
    notes: list[str] = field(default_factory=list)
    baseline: Path | str | None = None
    comparison: Comparison | None = None
    #: The pair the sweep wrote, as a baseline names it.
    pair_name: str = ""
    #: The unchecked PASS models that fail the session (``--neuron-require-check``).
    unchecked_failing: list[str] = field(default_factory=list)


def table_lines(table: TableFacts) -> list[str]:
    """A table's counts (and its models not run again), its failures, and the file it wrote."""
    unchanged = f"{table.unchanged} unchanged (not run again)"
    if not table.rows and table.unchanged:
        line = unchanged  # "no models run" would hide the other tables' runs
    else:
        line = counts_line(table.rows) + (f"; {unchanged}" if table.unchanged else "")
    lines = [line if table.name == SUPPORT.name else f"{table.name}: {line}"]
    lines += failure_lines(table.rows)
    lines += unchecked_lines(table.rows)
    if table.rows and table.written:
        lines.append(f"{'dataset' if table.name == SUPPORT.name else table.name}: {table.path}")
    return lines


def write_summary(tr: Any, facts: SummaryFacts) -> None:
    """The sweep's terminal summary through pytest's terminal reporter ``tr``."""
    tr.section(f"neuronsupport: {facts.pair}")
    tr.write_line(facts.device)
    if facts.shard is not None:
        tr.write_line(facts.shard)
    for table in facts.tables:
        for line in table_lines(table):
            tr.write_line(line)
    if not facts.tables:
        tr.write_line(counts_line([]))
    for note in facts.notes:
        tr.write_line(note)
    for problem in facts.problems:
        tr.write_line(f"problem: {problem}", yellow=True)
    if facts.unchecked_failing:
        tr.write_line(require_check_line(facts.unchecked_failing), red=True)
    comparison = facts.comparison
    if comparison is not None:
        tr.section(f"neuronsupport: held against the baseline {facts.baseline}", sep="-")
        if comparison.baseline.pair != facts.pair_name:
            tr.write_line(f"(the baseline was written for {comparison.baseline.pair})")
        for number, text in enumerate(comparison.lines()):
            tr.write_line(text, red=number == 0 and not comparison.ok)
