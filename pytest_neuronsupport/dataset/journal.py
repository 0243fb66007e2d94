"""The journal: rows appended durably the moment each test ends, recovered by the next merge.

File ``<results>/journal/<session_id>.jsonl``, one JSON object a line,
``{"pair": "<compiler>-<v>/<library>-<v>.parquet", "row": {...}}`` where the row is
:func:`~pytest_neuronsupport.dataset.table.row_to_json`'s (journals written by the previous
version, with a ``Row`` class, have the same lines and are read alike). A row of another table
than the support dataset names it: ``{"table": "train", "pair": ..., "row": ...}`` (the pair is
then relative to that table's folder, ``<results>/train``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import threading
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import filelock

from pytest_neuronsupport.dataset.durable import file_lock, fsync_dir, makedirs_durable
from pytest_neuronsupport.dataset.layout import check_relpath, journal_dir
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.table import Table, row_from_json, row_to_json
from pytest_neuronsupport.dataset.tables import table_named

__all__ = [
    "Journal",
    "JournalContent",
    "JournalWarning",
    "parse_journal",
    "read_journal",
]

_SESSION_ID: Final = re.compile(r"[A-Za-z0-9+-][A-Za-z0-9._+-]*")


class JournalWarning(UserWarning):
    """A journal line was skipped by :func:`read_journal` (torn by a kill, or corrupt)."""


def _new_session_id() -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{stamp}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


class Journal:
    """Append-only, durable record of rows written the moment each test ends.

    Each :meth:`append` returns only after the line is written and fsynced. The journal holds
    an flock on ``<results>/journal/<session_id>.lock`` from construction to :meth:`close`: a
    free lock means the writer is gone (closed or killed), which is how
    :func:`~pytest_neuronsupport.dataset.merge.merge_journals` tells a dead journal from a live
    one. The lock dies with the process, so no stale lock survives a ``kill -9``.

    Session ids must be unique (the default is a timestamp, the pid and random digits); reopening
    an existing id appends to its file after repairing a torn last line.
    """

    def __init__(self, results_dir: Path, session_id: str | None = None) -> None:
        """Create (or reopen) the journal and take its lock.

        Raises:
            ValueError: ``session_id`` is not made of ``[A-Za-z0-9._+-]`` or starts with ``.``.
            RuntimeError: another live process holds this session's journal.
        """
        sid = _new_session_id() if session_id is None else session_id
        if _SESSION_ID.fullmatch(sid) is None:
            raise ValueError(f"invalid journal session id {sid!r}")
        self.session_id = sid
        self.directory = journal_dir(results_dir)
        self.path = self.directory / f"{sid}.jsonl"
        self.lock_path = self.directory / f"{sid}.lock"
        makedirs_durable(self.directory)
        self._lock = file_lock(self.lock_path, timeout=0)
        try:
            self._lock.acquire()
        except filelock.Timeout as exc:
            raise RuntimeError(f"journal {self.path} is in use by another process") from exc
        self._mutex = threading.Lock()
        self._fd: int | None = None
        try:
            existed = self.path.exists()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if existed:
                self._repair_tail()
            os.fsync(self._fd)
            fsync_dir(self.directory)
        except BaseException:
            self.close()
            raise

    def _repair_tail(self) -> None:
        """Deal with a torn last line before appending after it.

        A tail without its newline is an append that never returned (killed mid-write): it is
        cut off, so it cannot turn into a corrupt line in the middle of the journal. (A tail that
        is nevertheless a complete, valid entry is kept and terminated.)
        """
        assert self._fd is not None
        data = self.path.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        tail = _parse_journal_bytes(self.path, data[cut:] + b"\n")
        if tail.entries and not tail.problems:
            self._write_all(b"\n")
        else:
            os.ftruncate(self._fd, cut)

    def _write_all(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._fd is None

    def append(
        self,
        pair_relpath: str,
        row: Mapping[str, Any],
        table: Table = SUPPORT,
        *,
        validated: bool = False,
    ) -> None:
        """Record ``row`` for the pair file ``pair_relpath`` (of ``table``) durably.

        ``pair_relpath`` is as :func:`~pytest_neuronsupport.dataset.layout.pair_relpath` makes
        it; ``row`` is validated with :func:`~pytest_neuronsupport.dataset.table.validate_row`
        (extra columns included), unless it is ``validated`` already: a row in JSON form as
        :func:`~pytest_neuronsupport.dataset.table.row_to_json` made it where the row was made
        (a sweep's rows are validated once, by the mode that made them). The line is written
        with a single ``write`` on an ``O_APPEND`` descriptor and fsynced before this returns.

        Raises:
            ValueError: invalid pair path or row.
            RuntimeError: the journal is closed.
        """
        check_relpath(pair_relpath)
        record: dict[str, Any] = {} if table is SUPPORT else {"table": table.name}
        record.update(pair=pair_relpath, row=dict(row) if validated else row_to_json(row, table))
        line = json.dumps(
            record,
            ensure_ascii=True,
            separators=(",", ":"),
        )
        data = line.encode("ascii") + b"\n"
        with self._mutex:
            if self._fd is None:
                raise RuntimeError(f"journal {self.path} is closed")
            self._write_all(data)
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the file and release the lock (idempotent). The journal file stays."""
        with self._mutex:
            fd, self._fd = self._fd, None
            try:
                if fd is not None:
                    os.close(fd)
            finally:
                if self._lock.is_locked:
                    self._lock.release()

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass
class JournalContent:
    """What a journal file holds: its entries and what was wrong with it."""

    entries: list[tuple[str, dict[str, Any]]]
    """``(pair_relpath, row)`` in append order."""
    problems: list[str]
    """One message per skipped line, a torn last line included."""
    corrupt: bool
    """Some line other than a torn last line was skipped."""
    tables: list[Table] = field(default_factory=list)
    """The table of each entry (same order as :attr:`entries`)."""


def parse_journal(path: Path) -> JournalContent:
    """Read and parse a journal file.

    Raises:
        OSError: the file cannot be read.
    """
    return _parse_journal_bytes(path, path.read_bytes())


def _parse_journal_bytes(path: Path, data: bytes) -> JournalContent:
    lines = data.split(b"\n")
    torn_tail = lines.pop()  # b"" when the file ends with a newline
    content = JournalContent(entries=[], problems=[], corrupt=False)
    numbered = [(number, line, False) for number, line in enumerate(lines, start=1)]
    if torn_tail.strip():
        numbered.append((len(lines) + 1, torn_tail, True))
    for number, line, is_tail in numbered:
        if not line.strip():
            continue  # a blank line is what repairing a torn tail can leave
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or set(record) - {"table"} != {"pair", "row"}:
                raise ValueError(
                    "expected an object with exactly the keys 'pair' and 'row' (and 'table')"
                )
            if not isinstance(record["row"], dict):
                raise ValueError("'row' is not an object")
            table = table_named(record["table"]) if "table" in record else SUPPORT
            pair = check_relpath(record["pair"])
            row = row_from_json(record["row"], table)
        except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError included
            if is_tail:
                content.problems.append(
                    f"{path}:{number}: torn last line (an append that never returned), skipped"
                )
            else:
                content.corrupt = True
                content.problems.append(f"{path}:{number}: corrupt line skipped: {exc}")
            continue
        content.entries.append((pair, row))
        content.tables.append(table)
    return content


def read_journal(
    path: Path, *, problems: list[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The ``(pair_relpath, row)`` entries of a journal file, in append order.

    A torn last line (a process killed mid-append, so the append never returned) is skipped.
    A corrupt line elsewhere is skipped as well. Each skipped line is reported: appended as a
    message (``"<path>:<line>: ..."``) to ``problems`` when a list is given, otherwise emitted
    as a :class:`JournalWarning`.
    """
    content = parse_journal(Path(path))
    if problems is not None:
        problems.extend(content.problems)
    else:
        for message in content.problems:
            warnings.warn(message, JournalWarning, stacklevel=2)
    return content.entries
