"""Reading the parquet files through the schema; upgrading old files; finding a model's row.

Reading goes through :data:`~pytest_neuronsupport.dataset.support.SCHEMA`: columns missing from
an old file come back as nulls, the others are cast to their schema type. Columns the schema
does not know (extra columns) are dropped unless ``keep_extra`` is given; then they follow the
schema's columns, and several tables are unified by :func:`concat_tables`.
:func:`upgrade_dataset` rewrites the files so that every one has the same schema.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pytest_neuronsupport.dataset.durable import (
    LOCK_TIMEOUT_S,
    atomic_write,
    data_lock,
    file_lock,
    remove_temps,
)
from pytest_neuronsupport.dataset.layout import check_relpath, data_files
from pytest_neuronsupport.dataset.support import SCHEMA, SUPPORT
from pytest_neuronsupport.dataset.table import Table, text_array, validate_row

__all__ = [
    "UnreadableResultsError",
    "concat_tables",
    "find_row",
    "forget_cached",
    "latest_positions",
    "read_dataset",
    "read_table",
    "set_selection",
    "tested_at_key",
    "upgrade_dataset",
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


def latest_positions(table: pa.Table, key: tuple[str, ...] = ("model_id",)) -> dict[Any, int]:
    """Key → index of its latest row in ``table`` (by ``tested_at``; ties: the last one).

    The key is the ``model_id`` (a one-column key), else the tuple of the ``key`` columns.
    Rows without a ``model_id`` are left out.
    """
    positions: dict[Any, int] = {}
    stamps = table.column("tested_at").to_pylist()
    columns = [table.column(name).to_pylist() for name in key]
    keys = columns[0] if len(key) == 1 else list(zip(*columns, strict=True))
    ids = table.column("model_id").to_pylist()
    for position, model_id in enumerate(keys):
        if ids[position] is None:
            continue
        best = positions.get(model_id)
        if best is None or tested_at_key(stamps[position]) >= tested_at_key(stamps[best]):
            positions[model_id] = position
    return positions


def _conform(
    table: pa.Table, path: Path, *, keep_extra: bool, schema: pa.Schema = SCHEMA
) -> pa.Table:
    """Cast ``table`` to ``schema`` (missing columns null), extras kept at the end or not."""
    names = table.column_names
    if len(set(names)) != len(names):
        raise UnreadableResultsError(path, f"duplicate column names: {names}")
    length = table.num_rows
    arrays: list[Any] = []
    out_fields: list[pa.Field] = []
    for schema_field in schema:
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
            if extra.name not in schema.names:
                arrays.append(table.column(extra.name))
                out_fields.append(extra)
    return pa.Table.from_arrays(arrays, schema=pa.schema(out_fields, metadata=schema.metadata))


def read_table(path: Path, *, keep_extra: bool = False, table: Table = SUPPORT) -> pa.Table:
    """One parquet file through :data:`SCHEMA` (``table``'s schema).

    Missing columns are filled with nulls, others cast to their schema type. Columns unknown to
    the schema are dropped, so that the result has exactly :data:`SCHEMA` (metadata included);
    with ``keep_extra`` they are kept, as they are, after the schema's columns.

    Raises:
        UnreadableResultsError: the file is missing, damaged or not castable (``.path`` names it).
    """
    path = Path(path)
    try:
        with pq.ParquetFile(path) as parquet_file:
            read = parquet_file.read()
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise UnreadableResultsError(path, f"{type(exc).__name__}: {exc}") from exc
    return _conform(read, path, keep_extra=keep_extra, schema=table.schema)


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


def concat_tables(tables: Sequence[pa.Table], schema: pa.Schema = SCHEMA) -> pa.Table:
    """Tables read through :data:`SCHEMA` (or ``schema``; extras after its columns) as one.

    The extra columns of all tables follow the schema's, in order of first appearance; a column
    absent from a table is null there, and the types of a column are unified (see
    ``_unified``). No tables give an empty table of :data:`SCHEMA`.
    """
    if not tables:
        return schema.empty_table()
    width = len(schema)
    extras = list(dict.fromkeys(name for table in tables for name in table.column_names[width:]))
    lengths = [table.num_rows for table in tables]
    columns = [[table.column(index) for index in range(width)] for table in tables]
    fields = list(schema)
    for name in extras:
        parts = [table.column(name) if name in table.column_names else None for table in tables]
        unified = _unified(parts, lengths)
        fields.append(pa.field(name, unified[0].type))
        for table_columns, column in zip(columns, unified, strict=True):
            table_columns.append(column)
    unified_schema = pa.schema(fields, metadata=schema.metadata)
    return pa.concat_tables(
        [pa.Table.from_arrays(table_columns, schema=unified_schema) for table_columns in columns]
    )


def read_dataset(
    results_dir: Path, *, keep_extra: bool = False, table: Table = SUPPORT
) -> pa.Table:
    """Every ``<results>/data/*/*.parquet`` through :data:`SCHEMA`, concatenated.

    Files are read in sorted path order; hidden files (temp files, locks) are skipped. An empty
    or absent dataset gives an empty table of :data:`SCHEMA`. With ``keep_extra``, the extra
    columns of all files are kept and unified (see :func:`concat_tables`).

    Raises:
        UnreadableResultsError: some file could not be read (its path is in ``.path``).
    """
    files = data_files(results_dir, table.folder)
    return concat_tables(
        [read_table(path, keep_extra=keep_extra, table=table) for path in files], table.schema
    )


def _is_current(schema: pa.Schema, table: Table = SUPPORT) -> bool:
    """Whether a file schema is :data:`SCHEMA` (plus, possibly, extra columns at the end)."""
    ours_schema = table.schema
    if len(schema) < len(ours_schema):
        return False
    for ours, theirs in zip(ours_schema, schema, strict=False):
        if ours.name != theirs.name or ours.type != theirs.type:
            return False
    if any(extra.name in ours_schema.names for extra in list(schema)[len(ours_schema) :]):
        return False
    metadata = schema.metadata or {}
    return bool(metadata.get(b"neuronsupport_schema") == table.version)


def upgrade_file(path: Path, table: Table = SUPPORT) -> bool:
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
        if _is_current(schema, table):
            return False
        upgraded = read_table(path, keep_extra=True, table=table)
        remove_temps(path)
        atomic_write(path, upgraded)
    forget_cached(path)
    return True


_StatKey = tuple[int, int, int]


def _stat_key(path: Path) -> _StatKey:
    """What identifies one version of a file: inode, mtime and size (a rewrite changes them)."""
    st = path.stat()
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _dataset_schema(
    schemas: dict[Path, pa.Schema], unreadable: list[tuple[Path, str]], base: pa.Schema = SCHEMA
) -> pa.Schema:
    """The schema every file of a dataset must have: :data:`SCHEMA`, then every extra column.

    The extra columns of all ``schemas`` (in sorted path order), in order of first appearance,
    each with one type: the types of the files that hold values in it, unified as
    :func:`concat_tables` does (a file where the column is all null does not constrain it): the
    schema of :func:`read_dataset` with ``keep_extra``. Only the extra columns are read, and only
    from the files that have some. A file that cannot be read is added to ``unreadable`` and
    left out.
    """
    names = list(
        dict.fromkeys(field.name for schema in schemas.values() for field in _extras(schema, base))
    )
    if not names:
        return base
    parts: dict[str, list[pa.ChunkedArray]] = {name: [] for name in names}
    for path, schema in schemas.items():
        extra = [field.name for field in _extras(schema, base)]
        if not extra:
            continue
        try:
            table = pq.read_table(path, columns=extra)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            unreadable.append((path, f"{type(exc).__name__}: {exc}"))
            continue
        for name in extra:
            parts[name].append(table.column(name))
    fields = list(base)
    for name in names:
        if parts[name]:
            unified = _unified(parts[name], [len(part) for part in parts[name]])
            fields.append(pa.field(name, unified[0].type))
    return pa.schema(fields, metadata=base.metadata)


def _extras(schema: pa.Schema, base: pa.Schema = SCHEMA) -> list[pa.Field]:
    """The fields of a file's schema that :data:`SCHEMA` (``base``) does not know."""
    return [field for field in schema if field.name not in base.names]


def _to_type(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """An extra column as ``target``, as ``_unified`` converts it (text: each value's text).

    Raises:
        pyarrow.ArrowInvalid: (and the like) the values do not cast exactly.
    """
    if column.type == target:
        return column
    if column.null_count == len(column):
        return pa.nulls(len(column), type=target)
    if pa.types.is_string(target):
        return text_array(column.to_pylist())
    return column.cast(target)


def _conform_extras(table: pa.Table, target: pa.Schema) -> pa.Table:
    """``table`` (read through :data:`SCHEMA`, extras kept) with exactly ``target``'s columns.

    Raises:
        pyarrow.ArrowInvalid: (and the like) an extra column does not cast to its target type.
        ValueError: ``table`` has an extra column ``target`` lacks.
    """
    lost = set(table.column_names) - set(target.names)
    if lost:
        raise ValueError(f"columns not in the dataset's schema: {sorted(lost)}")
    arrays = [
        _to_type(table.column(field.name), field.type)
        if field.name in table.column_names
        else pa.nulls(table.num_rows, type=field.type)
        for field in target
    ]
    return pa.Table.from_arrays(arrays, schema=target)


def set_selection(path: Path, ranks: Mapping[str, int]) -> bool:
    """Give every row of a pair's file the ``selection_rank`` of the latest selection.

    A model of ``ranks`` gets its rank (whether it ran in this sweep or not); any other model
    gets null: it is no longer selected, and it keeps its result. Atomic, under the file's lock.

    Returns:
        Whether the file was rewritten (``False``: absent, or every rank already right).

    Raises:
        UnreadableResultsError: the file is damaged; it is untouched.
    """
    path = Path(path)
    if not path.is_file():
        return False
    with data_lock(path):
        table = read_table(path, keep_extra=True)
        wanted = pa.array(
            [ranks.get(m) for m in table.column("model_id").to_pylist()], type=pa.int32()
        )
        index = table.schema.get_field_index("selection_rank")
        if table.column(index).combine_chunks().equals(wanted):
            return False
        remove_temps(path)
        atomic_write(path, table.set_column(index, SCHEMA.field("selection_rank"), wanted))
    forget_cached(path)
    return True


def upgrade_dataset(
    results_dir: Path, *, unreadable: list[tuple[Path, str]] | None = None, table: Table = SUPPORT
) -> list[Path]:
    """Rewrite the data files so that every one has exactly the same schema; return those.

    The schema is the one :func:`read_dataset` gives with ``keep_extra``: :data:`SCHEMA` (its
    metadata included), then the extra columns of all the files (added by users' hooks) in
    order of first appearance over the files in sorted path order, each with one type unified
    over the files (int64 and float64 to float64, an all-null column to any type; where types
    cannot be unified without loss, the text of each value), null in the rows of a file that
    lacked it. Why the union rather than dropping the extras, or leaving each file its own:
    readers that take one schema for a whole directory (``datasets.load_dataset``, the Hugging
    Face viewer, pandas' and duckdb's directory reads) fail on files whose columns differ, or
    silently drop the columns the first file lacks; dropping would destroy what users recorded;
    the union loses nothing, and reading the dataset file by file or all at once gives the same
    columns.

    Each file that differs is rewritten atomically under its lock (as a merge does), the whole
    upgrade under ``<results>/data/.upgrade.lock`` so that two upgrades never interleave. A file
    that changed after its schema was read is left to the upgrade that follows that change
    (:func:`~pytest_neuronsupport.dataset.merge.merge_journals` upgrades after it writes).
    When every file already has the same current schema (whatever the order of its extra
    columns), nothing is rewritten and no lock is taken: each file's schema alone is read.

    Args:
        results_dir: the results directory (``<results>``, holding ``data/``).
        unreadable: where files that cannot be read or cast go, as ``(path, reason)``; they
            are left untouched. Without it, the first such file raises once the others are done.

    Returns:
        The rewritten files, in sorted order.

    Raises:
        UnreadableResultsError: a file could not be read or cast and ``unreadable`` is None.
        filelock.Timeout: a lock could not be taken within
            :data:`~pytest_neuronsupport.dataset.durable.LOCK_TIMEOUT_S`.
    """
    problems: list[tuple[Path, str]] = [] if unreadable is None else unreadable
    start = len(problems)
    files = data_files(results_dir, table.folder)
    rewritten: list[Path] = []
    first_look: list[tuple[Path, str]] = []
    if _uniform(_read_schemas(files, first_look)[1], table.schema):
        problems.extend(first_look)
        return _done(rewritten, problems, start, raising=unreadable is None)
    with file_lock(Path(results_dir) / table.folder / ".upgrade.lock", LOCK_TIMEOUT_S):
        versions, schemas = _read_schemas(data_files(results_dir, table.folder), problems)
        if not _uniform(schemas, table.schema):
            target = _dataset_schema(schemas, problems, table.schema)
            failed = {path for path, _ in problems[start:]}
            for path, schema in schemas.items():
                if path in failed or schema.equals(target, check_metadata=True):
                    continue
                try:
                    if _upgrade_to(path, versions[path], target, table):
                        rewritten.append(path)
                except UnreadableResultsError as exc:
                    problems.append((path, exc.reason))
    return _done(rewritten, problems, start, raising=unreadable is None)


def _read_schemas(
    files: list[Path], unreadable: list[tuple[Path, str]]
) -> tuple[dict[Path, _StatKey], dict[Path, pa.Schema]]:
    """The version (:func:`_stat_key`) and schema of each file; unreadable ones reported."""
    versions: dict[Path, _StatKey] = {}
    schemas: dict[Path, pa.Schema] = {}
    for path in files:
        try:
            version = _stat_key(path)
            schemas[path] = pq.read_schema(path)
            versions[path] = version
        except FileNotFoundError:
            continue  # removed meanwhile: nothing to upgrade
        except Exception as exc:  # pyarrow raises several types for a damaged file
            unreadable.append((path, f"{type(exc).__name__}: {exc}"))
    return versions, schemas


def _is_exact(schema: pa.Schema, base: pa.Schema = SCHEMA) -> bool:
    """Whether a file schema is exactly :data:`SCHEMA` (fields, metadata) plus unique extras."""
    width = len(base)
    return (
        schema.metadata == base.metadata
        and len(schema) >= width
        and all(
            schema.field(index).equals(base.field(index), check_metadata=True)
            for index in range(width)
        )
        and len(set(schema.names)) == len(schema.names)
        and not any(name in base.names for name in schema.names[width:])
    )


def _uniform(schemas: dict[Path, pa.Schema], base: pa.Schema = SCHEMA) -> bool:
    """Whether every schema is the same exact current one (:func:`_is_exact`); none: true."""
    first = next(iter(schemas.values()), None)
    return first is None or (
        _is_exact(first, base)
        and all(schema.equals(first, check_metadata=True) for schema in schemas.values())
    )


def _done(
    rewritten: list[Path], problems: list[tuple[Path, str]], start: int, *, raising: bool
) -> list[Path]:
    """``rewritten``; or, if ``raising`` and some file was unreadable, raise for the first."""
    if raising and len(problems) > start:
        path, reason = problems[start]
        raise UnreadableResultsError(path, reason)
    return rewritten


def _upgrade_to(path: Path, version: _StatKey, target: pa.Schema, table: Table = SUPPORT) -> bool:
    """Rewrite ``path`` with ``target``'s columns if it is still the ``version`` read before.

    Returns:
        Whether it was rewritten (``False``: it changed meanwhile, or vanished).

    Raises:
        UnreadableResultsError: it cannot be read, or cast to ``target``; it is untouched.
    """
    with data_lock(path):
        try:
            if _stat_key(path) != version:
                return False
        except FileNotFoundError:
            return False
        read = read_table(path, keep_extra=True, table=table)
        try:
            read = _conform_extras(read, target)
        except (*_CAST_ERRORS, ValueError) as exc:
            raise UnreadableResultsError(path, f"cannot be upgraded: {exc}") from exc
        remove_temps(path)
        atomic_write(path, read)
    forget_cached(path)
    return True


# find_row is called once per model when a sweep starts: cache each file's table by identity.
_CacheKey = tuple[str, int, int, int]
_cache: dict[str, tuple[_CacheKey, pa.Table, dict[Any, int]]] = {}
_cache_lock = threading.Lock()
_CACHE_FILES: Final = 16


def forget_cached(path: Path) -> None:
    """Drop the cached read of ``path`` (call after rewriting it)."""
    with _cache_lock:
        _cache.pop(str(Path(path).absolute()), None)


def _indexed_table(path: Path, table: Table = SUPPORT) -> tuple[pa.Table, dict[Any, int]] | None:
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
        read = read_table(path, keep_extra=True, table=table)
    except UnreadableResultsError:
        return None
    index = latest_positions(read, table.key)
    with _cache_lock:
        if len(_cache) >= _CACHE_FILES:
            _cache.pop(next(iter(_cache)))
        _cache[key_path] = (key, read, index)
    return read, index


def find_row(
    results_dir: Path, pair_relpath: str, model_id: Any, table: Table = SUPPORT
) -> dict[str, Any] | None:
    """The recorded row of ``model_id`` in one pair's parquet file, validated, extras included.

    Of another ``table`` than the support dataset, ``model_id`` is the row's key
    (:meth:`~pytest_neuronsupport.dataset.table.Table.key_of`).

    Returns ``None`` when the file is absent or unreadable, the model has no row, or its row
    does not validate (:func:`~pytest_neuronsupport.dataset.table.validate_row`; an extra
    column of a type this version does not write counts). When the file holds several rows of
    the model, the latest ``tested_at`` wins. Reads are cached per file version (inode, mtime,
    size).

    Raises:
        ValueError: ``pair_relpath`` is not a valid pair path.
    """
    target = Path(results_dir) / table.folder / check_relpath(pair_relpath)
    indexed = _indexed_table(target, table)
    if indexed is None:
        return None
    read, index = indexed
    position = index.get(model_id)
    if position is None:
        return None
    record = read.slice(position, 1).to_pylist()[0]
    try:
        return validate_row(record, table)
    except ValueError:
        return None


def recorded_devices(path: Path) -> set[str]:
    """The devices a pair file's rows ran on (its ``device`` column); none where there is no
    such file, a file of a table without the column, or a file that cannot be read (the merge
    reports it and leaves it untouched)."""
    try:
        if "device" not in pq.read_schema(path).names:
            return set()
        return set(pq.read_table(path, columns=["device"]).column("device").to_pylist()) - {None}
    except (OSError, pa.ArrowException):
        return set()
