"""Merging journals into the parquet files, crash-safely, then deleting the merged journals;
then upgrading every file to the dataset's one schema."""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock
import pyarrow as pa

from pytest_neuronsupport.dataset.durable import (
    atomic_write,
    data_lock,
    file_lock,
    fsync_dir,
    makedirs_durable,
    remove_temps,
    sweep_temps,
)
from pytest_neuronsupport.dataset.files import (
    UnreadableResultsError,
    concat_tables,
    forget_cached,
    latest_positions,
    read_table,
    tested_at_key,
    upgrade_dataset,
)
from pytest_neuronsupport.dataset.journal import JournalContent, parse_journal
from pytest_neuronsupport.dataset.layout import journal_dir
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.table import Table, rows_to_table, validate_row
from pytest_neuronsupport.dataset.tables import TABLES

__all__ = ["MergeReport", "merge_file", "merge_journals"]


@dataclass
class MergeReport:
    """What :func:`merge_journals` did."""

    written: dict[Path, int] = field(default_factory=dict)
    """Parquet file → number of journal rows written into it (new or replacing)."""
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    """Parquet files that could not be read, with the error; left untouched."""
    journals_merged: list[Path] = field(default_factory=list)
    """Journals fully merged, then deleted (with their lock files)."""
    journals_kept: list[Path] = field(default_factory=list)
    """Journals left in place: some rows could not be merged, some line was corrupt, or the
    journal itself could not be read."""
    journals_live: list[Path] = field(default_factory=list)
    """Journals whose lock is held by a live writer: skipped (``skip_live=True``), or merged
    but never deleted (``skip_live=False``)."""
    problems: list[str] = field(default_factory=list)
    """Skipped journal lines, failed writes and failed upgrades, one message each."""
    upgraded: list[Path] = field(default_factory=list)
    """Parquet files rewritten by :func:`~pytest_neuronsupport.dataset.files.upgrade_dataset`
    so that every file of the dataset has the same schema."""

    @property
    def ok(self) -> bool:
        """Nothing unreadable, kept or skipped with a problem."""
        return not (self.unreadable or self.journals_kept or self.problems)


@dataclass
class _Candidate:
    path: Path
    lock: filelock.BaseFileLock | None  # held by us; None for a live journal merged anyway
    content: JournalContent
    keep: bool = False


def _apply_rows(target: Path, rows: list[dict[str, Any]], table: Table = SUPPORT) -> int:
    """Merge ``rows`` (validated, unique keys) into ``target``; return how many applied.

    A row's key is its ``model_id`` in the support dataset, its ``table``'s key columns in
    another table (:meth:`~pytest_neuronsupport.dataset.table.Table.key_of`).

    A row replaces the file's row of the same model unless that one has a strictly later
    ``tested_at`` (null counts as earliest), so a late recovery never reverts a newer run. The
    file's extra columns are kept (null for the new rows), the rows' new ones added (null for
    the old rows), and a column whose types differ is unified as
    :func:`~pytest_neuronsupport.dataset.files.concat_tables` does.

    Raises:
        UnreadableResultsError: the existing file could not be read; it is left untouched.
    """
    makedirs_durable(target.parent)
    with data_lock(target):
        remove_temps(target)
        if target.exists():
            existing = read_table(target, keep_extra=True, table=table)
        else:
            existing = table.schema.empty_table()
        latest = latest_positions(existing, table.key)
        stamps = existing.column("tested_at").to_pylist()
        applied = [
            row
            for row in rows
            if table.key_of(row) not in latest
            or tested_at_key(stamps[latest[table.key_of(row)]]) <= tested_at_key(row["tested_at"])
        ]
        ids = existing.column("model_id").to_pylist()
        keys = latest_keys(existing, table)
        duplicated = len(latest) < sum(model_id is not None for model_id in ids)
        if not applied and not duplicated:
            return 0
        replaced = {table.key_of(row) for row in applied}
        mask = [  # each key's latest row (a file not written by us may hold several), if kept
            model_id is None or (latest[key] == position and key not in replaced)
            for position, (model_id, key) in enumerate(zip(ids, keys, strict=True))
        ]
        kept = existing.filter(pa.array(mask, type=pa.bool_()))
        merged = concat_tables([kept, rows_to_table(applied, table, validated=True)], table.schema)
        merged = merged.sort_by([(name, "ascending") for name in table.key])
        atomic_write(target, merged)
    forget_cached(target)
    return len(applied)


def merge_file(source: Path, target: Path, table: Table = SUPPORT) -> int:
    """Fold the rows of the pair file ``source`` into ``target`` (made if absent) by the
    journals' rules: each key's latest row of ``source`` replaces ``target``'s unless that one
    has a strictly later ``tested_at``. Returns the rows applied.

    Raises:
        UnreadableResultsError: either file could not be read; ``target`` is left untouched.
    """
    existing = read_table(source, keep_extra=True, table=table)
    rows = existing.to_pylist()
    latest = latest_positions(existing, table.key)
    picked = [validate_row(rows[i], table) for i in sorted(latest.values())]
    return _apply_rows(target, picked, table)


def latest_keys(existing: pa.Table, table: Table) -> list[Any]:
    """The key of each row of ``existing`` (as :func:`latest_positions` indexes them)."""
    columns = [existing.column(name).to_pylist() for name in table.key]
    return columns[0] if len(table.key) == 1 else list(zip(*columns, strict=True))


def _journal_order(path: Path) -> tuple[int, str]:
    try:
        return (path.stat().st_mtime_ns, path.name)
    except OSError:
        return (0, path.name)


def merge_journals(
    results_dir: Path, *, include: Iterable[Path] = (), skip_live: bool = True
) -> MergeReport:
    """Merge journals into the parquet files, then delete the journals that are fully merged.

    Candidates are every ``<results>/journal/*.jsonl`` plus the paths in ``include`` (the
    caller's own journals, already closed). A candidate whose lock (``<name>.lock`` beside it)
    can be taken is dead or closed: it is merged while we hold its lock (so two concurrent
    merges never both take it) and deleted afterwards. A candidate whose lock is held is live:
    listed in ``journals_live`` and skipped; with ``skip_live=False`` its rows are merged too
    but the journal is never deleted (its writer may still append).

    Ordering: within a journal the later line wins; between journals the later ``tested_at``
    wins (ties: the journal modified last); against the parquet file, a journal row replaces
    the model's row unless the file's row has a strictly later ``tested_at`` (null is earliest).
    Files are written sorted by ``model_id``. Merging the same journal twice gives the same file.

    Extra columns: a file keeps its own, gains the rows' new ones (null for its old rows); where
    a column's types differ they are promoted (int64 and float64 to float64, null to anything)
    or, where they cannot be without loss, the column is stored as text for all rows.

    A parquet file that cannot be read is reported in ``unreadable`` and never written; every
    journal with rows for it is kept, as is a journal with a corrupt (not torn-last) line.
    Other failures to write a pair are reported in ``problems`` and keep its journals too.
    Temp files left by killed merges are deleted.

    Last, :func:`~pytest_neuronsupport.dataset.files.upgrade_dataset` gives every file of the
    dataset the same schema, files this merge did not write included (listed in ``upgraded``);
    a file it cannot read, and not already in ``unreadable``, is reported in ``problems``, as
    is a failed upgrade. When the files already agree this costs one schema read per file.
    """
    results_dir = Path(results_dir)
    report = MergeReport()
    candidates: list[_Candidate] = []
    try:
        _take(_journal_paths(results_dir, include), report, skip_live, candidates)
        winners, feeders = _winners(candidates)
        _write_pairs(results_dir, winners, feeders, report)
        _retire(candidates, report)
    finally:
        for candidate in candidates:
            if candidate.lock is not None and candidate.lock.is_locked:
                candidate.lock.release()
    _upgrade(results_dir, report)
    return report


#: Where each (table, pair) stands: its rows' keys → (the winning row, the journal it is from).
Winners = dict[tuple[str, str], dict[Any, tuple[dict[str, Any], _Candidate]]]
#: The journals that hold rows of each (table, pair).
Feeders = dict[tuple[str, str], list[_Candidate]]


def _journal_paths(results_dir: Path, include: Iterable[Path]) -> list[Path]:
    """Every journal of the results, then the paths of ``include`` (each once)."""
    paths: dict[str, Path] = {}  # absolute path → path as found or given
    journals = journal_dir(results_dir)
    if journals.is_dir():
        for path in sorted(journals.glob("*.jsonl")):
            if path.name[0] != ".":
                paths.setdefault(os.path.abspath(path), path)
    for path in include:
        paths.setdefault(os.path.abspath(path), Path(path))
    return list(paths.values())


def _take(
    paths: list[Path], report: MergeReport, skip_live: bool, candidates: list[_Candidate]
) -> None:
    """Into ``candidates`` (as each is taken: the caller releases the locks whatever happens),
    the journals to merge, each parsed and held by its lock (a live one, whose lock is held,
    skipped, or with ``skip_live`` false merged without it); then sorted oldest first."""
    for path in paths:
        journal_lock = file_lock(path.with_suffix(".lock"), timeout=0)
        lock: filelock.BaseFileLock | None = journal_lock
        try:
            journal_lock.acquire()
        except filelock.Timeout:
            report.journals_live.append(path)
            if skip_live:
                continue
            lock = None
        if not path.exists():  # merged and deleted by someone else meanwhile
            if lock is not None:
                lock.release()
            continue
        try:
            content = parse_journal(path)
        except Exception as exc:  # unreadable journal: leave it where it is
            report.problems.append(f"{path}: cannot read journal: {exc}")
            report.journals_kept.append(path)
            if lock is not None:
                lock.release()
            continue
        report.problems.extend(content.problems)
        candidates.append(_Candidate(path, lock, content, keep=content.corrupt))
    candidates.sort(key=lambda candidate: _journal_order(candidate.path))


def _winners(
    candidates: list[_Candidate],
) -> tuple[Winners, Feeders]:
    """Each (table, pair)'s winning rows (within a journal the last line, between journals the
    later ``tested_at``), and the journals that feed each (table, pair)."""
    winners: Winners = {}
    feeders: Feeders = {}
    for candidate in candidates:
        last: dict[tuple[str, str], dict[Any, dict[str, Any]]] = {}
        content = candidate.content
        tables = content.tables or [SUPPORT] * len(content.entries)
        for (pair, row), table in zip(content.entries, tables, strict=True):
            last.setdefault((table.name, pair), {})[table.key_of(row)] = row
        for where, by_key in last.items():
            feeders.setdefault(where, []).append(candidate)
            pair_winners = winners.setdefault(where, {})
            for key, row in by_key.items():
                current = pair_winners.get(key)
                if current is None or tested_at_key(row["tested_at"]) >= tested_at_key(
                    current[0]["tested_at"]
                ):
                    pair_winners[key] = (row, candidate)
    return winners, feeders


def _write_pairs(
    results_dir: Path,
    winners: Winners,
    feeders: Feeders,
    report: MergeReport,
) -> None:
    """Each (table, pair)'s winning rows into its parquet file; a file that cannot be read or
    written keeps every journal that feeds it."""
    sweep_temps(results_dir / SUPPORT.folder)
    for name in {name for name, _ in winners} - {SUPPORT.name}:
        sweep_temps(results_dir / TABLES[name].folder)
    for where in sorted(winners):
        table = TABLES[where[0]]
        target = results_dir / table.folder / where[1]
        rows = [row for row, _ in winners[where].values()]
        try:
            count = _apply_rows(target, rows, table)
        except Exception as exc:  # keep the journals: nothing may be lost
            if isinstance(exc, UnreadableResultsError):
                report.unreadable.append((target, exc.reason))
            else:
                report.problems.append(f"{target}: merge failed: {type(exc).__name__}: {exc}")
            for candidate in feeders[where]:
                candidate.keep = True
            continue
        if count:
            report.written[target] = count


def _retire(candidates: list[_Candidate], report: MergeReport) -> None:
    """Delete each journal merged whole (with its lock file); keep the others."""
    for candidate in candidates:
        if candidate.lock is None:
            continue  # live: rows merged, file left to its writer
        if candidate.keep:
            report.journals_kept.append(candidate.path)
            continue
        candidate.path.unlink(missing_ok=True)
        fsync_dir(candidate.path.parent)
        with suppress(OSError):
            candidate.path.with_suffix(".lock").unlink()
        report.journals_merged.append(candidate.path)


def _upgrade(results_dir: Path, report: MergeReport) -> None:
    """Upgrade the dataset after a merge; what fails goes into ``report.problems``."""
    unreadable: list[tuple[Path, str]] = []
    for table in TABLES.values():
        if table is not SUPPORT and not (results_dir / table.folder).is_dir():
            continue
        try:
            report.upgraded += upgrade_dataset(results_dir, unreadable=unreadable, table=table)
        except Exception as exc:  # the merge itself succeeded: report, never raise
            report.problems.append(
                f"{results_dir / table.folder}: upgrading the dataset failed: "
                f"{type(exc).__name__}: {exc}"
            )
    known = {path for path, _ in report.unreadable}
    for path, reason in unreadable:
        if path not in known:
            report.problems.append(
                f"{path} is unreadable and was not upgraded to the current schema ({reason})"
            )
