"""The tables of the results, by name: what a journal line's ``table`` names (``support`` in
``data/``, ``train/``, ``perf/``, and ``bisect/``, where bisections record which release broke a
model).

Each is a :class:`~pytest_neuronsupport.dataset.table.Table` (a folder under ``<results>``, a
schema and a key). A journal line without a ``table`` is a support row (journals written
before there were tables read alike); merges write every table's files. A mode of a user's
(:mod:`pytest_neuronsupport.modes`) brings its own table, registered when the sweep is
configured; a journal line of a table this process does not know is kept in its journal.
"""

from __future__ import annotations

from typing import Final

from pytest_neuronsupport.dataset.bisect import BISECT
from pytest_neuronsupport.dataset.layout import RESERVED
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.table import Table
from pytest_neuronsupport.dataset.train import TRAIN

__all__ = ["TABLES", "register", "table_named"]

TABLES: Final[dict[str, Table]] = {table.name: table for table in (SUPPORT, TRAIN, PERF, BISECT)}


def table_named(name: object) -> Table:
    """The table called ``name``.

    Raises:
        ValueError: no such table.
    """
    table = TABLES.get(name) if isinstance(name, str) else None
    if table is None:
        raise ValueError(f"unknown table {name!r} (known: {', '.join(TABLES)})")
    return table


def register(table: Table) -> Table:
    """Make ``table`` known to journals and merges (a user's mode's table).

    Raises:
        ValueError: another table has its name or its folder, or the folder is one the
            results use for something else (:data:`~pytest_neuronsupport.dataset.layout.RESERVED`).
    """
    if table.folder in RESERVED or not table.folder or "/" in table.folder:
        raise ValueError(f"table {table.name!r}: {table.folder!r} cannot be its folder")
    for known in TABLES.values():
        if known == table:
            return table
        if table.name == known.name or table.folder == known.folder:
            raise ValueError(
                f"table {table.name!r} ({table.folder}/) clashes with {known.name!r} "
                f"({known.folder}/)"
            )
    TABLES[table.name] = table
    return table
