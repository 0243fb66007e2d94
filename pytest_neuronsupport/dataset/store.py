"""Reading the parquet files through the schema; upgrading old files; finding a model's row.

Reading goes through :data:`~pytest_neuronsupport.dataset.schema.SCHEMA`: columns missing from
an old file come back as nulls, the others are cast to their schema type. Columns the schema
does not know (extra columns) are dropped unless ``keep_extra`` is given; then they follow the
schema's columns, and several tables are unified by :func:`concat_tables`.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pytest_neuronsupport.dataset.durable import atomic_write, data_lock, remove_temps
from pytest_neuronsupport.dataset.layout import check_relpath, data_files
from pytest_neuronsupport.dataset.schema import SCHEMA, SCHEMA_VERSION, text_array, validate_row

__all__ = [
    "UnreadableResultsError",
    "concat_tables",
    "find_row",
    "forget_cached",
    "latest_positions",
    "read_dataset",
    "read_table",
    "tested_at_key",
    "upgrade_file",
]

_CAST_ERRORS: Final = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


class UnreadableResultsError(Exception):
    """A results parquet file could not be read (or cast to :data:`SCHEMA`)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def tested_at_key(stamp: dt.datetime | None) -> tuple[int, dt.datetime]:
    """Order of ``tested_at`` values: null before every timestamp."""
    if stamp is None:
        return (0, dt.datetime.min.replace(tzinfo=dt.UTC))
    return (1, stamp)


def latest_positions(table: pa.Table) -> dict[str, int]:
    """model_id → index of its latest row in ``table`` (by ``tested_at``; ties: the last one).

    Rows without a ``model_id`` are left out.
    """
    positions: dict[str, int] = {}
    stamps = table.column("tested_at").to_pylist()
    for position, model_id in enumerate(table.column("model_id").to_pylist()):
        if model_id is None:
            continue
        best = positions.get(model_id)
        if best is None or tested_at_key(stamps[position]) >= tested_at_key(stamps[best]):
            positions[model_id] = position
    return positions


def _conform(table: pa.Table, path: Path, *, keep_extra: bool) -> pa.Table:
    """Cast ``table`` to :data:`SCHEMA` (missing columns null), extras kept at the end or not."""
    names = table.column_names
    if len(set(names)) != len(names):
        raise UnreadableResultsError(path, f"duplicate column names: {names}")
    length = table.num_rows
    arrays: list[Any] = []
    out_fields: list[pa.Field] = []
    for schema_field in SCHEMA:
        if schema_field.name in names:
            column = table.column(schema_field.name)
            if column.type != schema_field.type:
                try:
                    # timestamps may lose sub-microsecond digits; anything else must cast exactly
                    safe = not pa.types.is_timestamp(schema_field.type)
                    column = pc.cast(column, schema_field.type, safe=safe)
                except _CAST_ERRORS as exc:
                    raise UnreadableResultsError(
                        path,
                        f"column {schema_field.name!r} of type {column.type} cannot be "
                        f"read as {schema_field.type}: {exc}",
                    ) from exc
        else:
            column = pa.nulls(length, type=schema_field.type)
        arrays.append(column)
        out_fields.append(schema_field)
    if keep_extra:
        for extra in table.schema:
            if extra.name not in SCHEMA.names:
                arrays.append(table.column(extra.name))
                out_fields.append(extra)
    return pa.Table.from_arrays(arrays, schema=pa.schema(out_fields, metadata=SCHEMA.metadata))


def read_table(path: Path, *, keep_extra: bool = False) -> pa.Table:
    """One parquet file through :data:`SCHEMA`.

    Missing columns are filled with nulls, others cast to their schema type. Columns unknown to
    the schema are dropped, so that the result has exactly :data:`SCHEMA` (metadata included);
    with ``keep_extra`` they are kept, as they are, after the schema's columns.

    Raises:
        UnreadableResultsError: the file is missing, damaged or not castable (``.path`` names it).
    """
    path = Path(path)
    try:
        with pq.ParquetFile(path) as parquet_file:
            table = parquet_file.read()
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise UnreadableResultsError(path, f"{type(exc).__name__}: {exc}") from exc
    return _conform(table, path, keep_extra=keep_extra)


def _unified(parts: Sequence[pa.ChunkedArray | None], lengths: Sequence[int]) -> list[Any]:
    """One extra column of several tables (``None`` where a table lacks it) as one type.

    A part with no values (absent, or all null) takes any type. The types of the others are
    promoted as arrow's permissive promotion does (int64 and float64 to float64...) where every
    value casts exactly; otherwise the column becomes the text of each value, so that nothing
    is lost.
    """
    present = [part for part in parts if part is not None]
    valued = [part for part in present if part.null_count < len(part)]
    try:
        unified = pa.unify_schemas(
            [pa.schema([pa.field("column", part.type)]) for part in valued or present[:1]],
            promote_options="permissive",
        )
        target = unified.field("column").type
        return [
            part.cast(target)
            if part is not None and part.null_count < len(part)
            else pa.nulls(length, type=target)
            for part, length in zip(parts, lengths, strict=True)
        ]
    except _CAST_ERRORS:
        return [
            pa.nulls(length, type=pa.string()) if part is None else text_array(part.to_pylist())
            for part, length in zip(parts, lengths, strict=True)
        ]


def concat_tables(tables: Sequence[pa.Table]) -> pa.Table:
    """Tables read through :data:`SCHEMA` (extras after its columns) as one table.

    The extra columns of all tables follow the schema's, in order of first appearance; a column
    absent from a table is null there, and the types of a column are unified (see
    ``_unified``). No tables give an empty table of :data:`SCHEMA`.
    """
    if not tables:
        return SCHEMA.empty_table()
    width = len(SCHEMA)
    extras = list(dict.fromkeys(name for table in tables for name in table.column_names[width:]))
    lengths = [table.num_rows for table in tables]
    columns = [[table.column(index) for index in range(width)] for table in tables]
    fields = list(SCHEMA)
    for name in extras:
        parts = [table.column(name) if name in table.column_names else None for table in tables]
        unified = _unified(parts, lengths)
        fields.append(pa.field(name, unified[0].type))
        for table_columns, column in zip(columns, unified, strict=True):
            table_columns.append(column)
    schema = pa.schema(fields, metadata=SCHEMA.metadata)
    return pa.concat_tables(
        [pa.Table.from_arrays(table_columns, schema=schema) for table_columns in columns]
    )


def read_dataset(results_dir: Path, *, keep_extra: bool = False) -> pa.Table:
    """Every ``<results>/data/*/*.parquet`` through :data:`SCHEMA`, concatenated.

    Files are read in sorted path order; hidden files (temp files, locks) are skipped. An empty
    or absent dataset gives an empty table of :data:`SCHEMA`. With ``keep_extra``, the extra
    columns of all files are kept and unified (see :func:`concat_tables`).

    Raises:
        UnreadableResultsError: some file could not be read (its path is in ``.path``).
    """
    return concat_tables(
        [read_table(path, keep_extra=keep_extra) for path in data_files(results_dir)]
    )


def _is_current(schema: pa.Schema) -> bool:
    """Whether a file schema is :data:`SCHEMA` (plus, possibly, extra columns at the end)."""
    if len(schema) < len(SCHEMA):
        return False
    for ours, theirs in zip(SCHEMA, schema, strict=False):
        if ours.name != theirs.name or ours.type != theirs.type:
            return False
    if any(extra.name in SCHEMA.names for extra in list(schema)[len(SCHEMA) :]):
        return False
    metadata = schema.metadata or {}
    return bool(metadata.get(b"neuronsupport_schema") == SCHEMA_VERSION.encode())


def upgrade_file(path: Path) -> bool:
    """Rewrite a file written with an older schema so that it has :data:`SCHEMA`, atomically.

    Missing columns are added as nulls, columns put in schema order and cast; unknown columns
    are kept, after the known ones. Afterwards ``pandas.read_parquet("<results>/data")`` over a
    directory of mixed versions sees every column whichever file it reads first.

    Returns:
        Whether the file was rewritten (``False``: it already had the current schema).

    Raises:
        UnreadableResultsError: the file is missing, damaged or not castable; it is untouched.
    """
    path = Path(path)
    if not path.is_file():
        raise UnreadableResultsError(path, "no such file")
    with data_lock(path):
        try:
            schema = pq.read_schema(path)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise UnreadableResultsError(path, f"{type(exc).__name__}: {exc}") from exc
        if _is_current(schema):
            return False
        table = read_table(path, keep_extra=True)
        remove_temps(path)
        atomic_write(path, table)
    forget_cached(path)
    return True


# find_row is called once per model when a sweep starts: cache each file's table by identity.
_CacheKey = tuple[str, int, int, int]
_cache: dict[str, tuple[_CacheKey, pa.Table, dict[str, int]]] = {}
_cache_lock = threading.Lock()
_CACHE_FILES: Final = 16


def forget_cached(path: Path) -> None:
    """Drop the cached read of ``path`` (call after rewriting it)."""
    with _cache_lock:
        _cache.pop(str(Path(path).absolute()), None)


def _indexed_table(path: Path) -> tuple[pa.Table, dict[str, int]] | None:
    """The table of ``path`` (extras kept) and :func:`latest_positions`; cached."""
    key_path = str(path.absolute())
    try:
        st = path.stat()
    except OSError:
        return None
    key: _CacheKey = (key_path, st.st_ino, st.st_mtime_ns, st.st_size)
    with _cache_lock:
        hit = _cache.get(key_path)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
    try:
        table = read_table(path, keep_extra=True)
    except UnreadableResultsError:
        return None
    index = latest_positions(table)
    with _cache_lock:
        if len(_cache) >= _CACHE_FILES:
            _cache.pop(next(iter(_cache)))
        _cache[key_path] = (key, table, index)
    return table, index


def find_row(results_dir: Path, pair_relpath: str, model_id: str) -> dict[str, Any] | None:
    """The recorded row of ``model_id`` in one pair's parquet file, validated, extras included.

    Returns ``None`` when the file is absent or unreadable, the model has no row, or its row
    does not validate (:func:`~pytest_neuronsupport.dataset.schema.validate_row`; an extra
    column of a type this version does not write counts). When the file holds several rows of
    the model, the latest ``tested_at`` wins. Reads are cached per file version (inode, mtime,
    size).

    Raises:
        ValueError: ``pair_relpath`` is not a valid pair path.
    """
    target = Path(results_dir) / "data" / check_relpath(pair_relpath)
    indexed = _indexed_table(target)
    if indexed is None:
        return None
    table, index = indexed
    position = index.get(model_id)
    if position is None:
        return None
    record = table.slice(position, 1).to_pylist()[0]
    try:
        return validate_row(record)
    except ValueError:
        return None
