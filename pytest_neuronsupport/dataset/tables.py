"""The tables of the results, by name: what a journal line's ``table`` names.

Each is a :class:`~pytest_neuronsupport.dataset.schema.Table` (a folder under ``<results>``, a
schema and a key). A journal line without a ``table`` is a support row (journals written
before there were tables read alike); merges write every table's files.
"""

from __future__ import annotations

from typing import Final

from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.dataset.schema import SUPPORT, Table
from pytest_neuronsupport.dataset.training import TRAIN

__all__ = ["TABLES", "table_named"]

TABLES: Final[dict[str, Table]] = {table.name: table for table in (SUPPORT, TRAIN, PERF)}


def table_named(name: object) -> Table:
    """The table called ``name``.

    Raises:
        ValueError: no such table.
    """
    table = TABLES.get(name) if isinstance(name, str) else None
    if table is None:
        raise ValueError(f"unknown table {name!r} (known: {', '.join(TABLES)})")
    return table
