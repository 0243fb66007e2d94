"""The results dataset: one schema, durable journals, crash-safe parquet merges.

Layout under a results directory ``<results>``::

    <results>/data/<compiler>-<compiler_version>/<library>-<library_version>.parquet
    <results>/journal/<session_id>.jsonl     rows appended the moment each test ends
    <results>/journal/<session_id>.lock      held (flock) for the whole life of the journal

Every parquet file holds at most one row per ``model_id``. Rows reach the parquet files only
through :func:`merge_journals`, which rewrites a file by writing a temporary file in the same
directory, fsyncing it and ``os.replace``-ing it over the old one, under a lock on the hidden
file ``.<file>.lock`` next to it. A ``kill -9`` at any moment therefore leaves every parquet
file complete (old or new version) and every appended row in a journal that the next merge
recovers.

Hidden names (a leading ``.``) are used for everything that is not a data file, so that
``pandas.read_parquet("<results>/data")`` and :func:`read_dataset` skip them:

* temporary files: ``.<file>.<16 hex digits>.tmp``
* per-file locks: ``.<file>.lock``

The schema is :data:`SCHEMA` (defined once, here). Reading goes through it: columns missing
from an old file come back as nulls, columns unknown to it are dropped by :func:`read_table` and
:func:`read_dataset` but preserved (after the known columns) when a file is rewritten by
:func:`merge_journals` or :func:`upgrade_file`, so an older writer never destroys what a newer
one recorded.
"""

from __future__ import annotations

import datetime as dt
import json
import numbers
import os
import re
import secrets
import threading
import uuid
import warnings
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import filelock
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = [
    "COLUMNS",
    "DEVICES",
    "RESULTS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Journal",
    "JournalWarning",
    "MergeReport",
    "Row",
    "UnreadableResultsError",
    "find_row",
    "merge_journals",
    "pair_dirname",
    "pair_path",
    "pair_relpath",
    "read_dataset",
    "read_journal",
    "read_table",
    "upgrade_file",
]

# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------

SCHEMA_VERSION: Final = "1"
"""Value of the ``neuronsupport_schema`` key of the schema metadata."""

_STACK_COLUMNS: Final = (
    "neuronx_cc",
    "library_version",
    "transformers",
    "accelerate",
    "torch_neuronx",
    "torch",
    "nki",
    "python",
    "neuron_driver",
)

SCHEMA: Final[pa.Schema] = pa.schema(
    [
        # identity
        pa.field("model_id", pa.string()),
        pa.field("library", pa.string()),
        pa.field("neuron_cores", pa.int32()),
        pa.field("runner", pa.string()),
        pa.field("selection_rank", pa.int32()),
        pa.field("task", pa.string()),
        pa.field("revision", pa.string()),
        # verdict
        pa.field("result", pa.string()),
        pa.field("notes", pa.string()),
        pa.field("exclusion", pa.string()),
        pa.field("error", pa.string()),
        pa.field("cpu_match", pa.string()),
        pa.field("english", pa.string()),
        # measures
        pa.field("wall_s", pa.float64()),
        pa.field("hbm_peak_gb", pa.float64()),
        pa.field("hbm_capacity_gb", pa.float64()),
        # software stack (null where a package is absent)
        *(pa.field(name, pa.string()) for name in _STACK_COLUMNS),
        pa.field("tested_at", pa.timestamp("us", tz="UTC")),
        pa.field("run_py", pa.string()),
        # ours
        pa.field("device", pa.string()),
        pa.field("backend", pa.string()),
        pa.field("compiler", pa.string()),
        pa.field("compiler_version", pa.string()),
        pa.field("dtype", pa.string()),
        pa.field("run_py_sha256", pa.string()),
        pa.field("reference_reproducible", pa.bool_()),
        pa.field("first_divergence", pa.int32()),
        pa.field("divergence_margin", pa.float64()),
        pa.field("near_tie_tolerance", pa.float64()),
        pa.field("check", pa.string()),
    ],
    metadata={"neuronsupport_schema": SCHEMA_VERSION},
)
"""The one schema of every results parquet file (all columns nullable)."""

COLUMNS: Final[tuple[str, ...]] = tuple(SCHEMA.names)
"""Column names of :data:`SCHEMA`, in order."""

RESULTS: Final = (
    "PASS",
    "FAIL(load)",
    "FAIL(gen)",
    "FAIL(forward)",
    "FAIL(output)",
    "FAIL(other)",
    "EXCLUDED",
)
"""Allowed values of the ``result`` column."""

DEVICES: Final = ("neuron", "cuda", "cpu")
"""Allowed values of the ``device`` column (or null)."""

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_SAFE_CHAR: Final = re.compile(r"[^A-Za-z0-9._+-]")
_SESSION_ID: Final = re.compile(r"[A-Za-z0-9+-][A-Za-z0-9._+-]*")
_TEMP_NAME: Final = re.compile(r"\.(?P<target>.+)\.[0-9a-f]{16}\.tmp")
_LOCK_TIMEOUT_S: Final = 600.0
_UTC: Final = dt.UTC


# --------------------------------------------------------------------------------------------
# Row
# --------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Row:
    """One outcome: one model tested on one (compiler, library) pair.

    One field per column of :data:`SCHEMA`, in the same order. Only ``model_id`` and ``result``
    are required (keyword-only, like every field); the rest default to ``None`` (null).
    Construction validates and normalises the values (see :meth:`validate`).
    """

    # identity
    model_id: str
    library: str | None = None
    neuron_cores: int | None = None
    runner: str | None = None
    selection_rank: int | None = None
    task: str | None = None
    revision: str | None = None
    # verdict
    result: str
    notes: str | None = None
    exclusion: str | None = None
    error: str | None = None
    cpu_match: str | None = None
    english: str | None = None
    # measures
    wall_s: float | None = None
    hbm_peak_gb: float | None = None
    hbm_capacity_gb: float | None = None
    # software stack
    neuronx_cc: str | None = None
    library_version: str | None = None
    transformers: str | None = None
    accelerate: str | None = None
    torch_neuronx: str | None = None
    torch: str | None = None
    nki: str | None = None
    python: str | None = None
    neuron_driver: str | None = None
    tested_at: dt.datetime | None = None
    run_py: str | None = None
    # ours
    device: str | None = None
    backend: str | None = None
    compiler: str | None = None
    compiler_version: str | None = None
    dtype: str | None = None
    run_py_sha256: str | None = None
    reference_reproducible: bool | None = None
    first_divergence: int | None = None
    divergence_margin: float | None = None
    near_tie_tolerance: float | None = None
    check: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every value against :data:`SCHEMA` and normalise it in place.

        Integers given for float columns become floats; ``tested_at`` is converted to UTC and
        must carry a timezone (a naive datetime is rejected rather than guessed). ``result`` must
        be one of :data:`RESULTS`, ``device`` one of :data:`DEVICES` or null, ``check`` (when
        set) the text of a JSON object.

        Raises:
            ValueError: a value does not fit its column.
        """
        for schema_field in SCHEMA:
            name = schema_field.name
            value = getattr(self, name)
            if value is None:
                continue
            setattr(self, name, _check_value(name, schema_field.type, value))
        if not self.model_id:
            raise ValueError("Row.model_id must be a non-empty string")
        if self.result not in RESULTS:
            raise ValueError(f"Row.result must be one of {RESULTS}, got {self.result!r}")
        if self.device is not None and self.device not in DEVICES:
            raise ValueError(f"Row.device must be one of {DEVICES} or None, got {self.device!r}")
        if self.check is not None:
            try:
                parsed = json.loads(self.check)
            except ValueError as exc:
                raise ValueError(f"Row.check is not JSON: {exc}") from exc
            if not isinstance(parsed, dict):
                raise ValueError("Row.check must be the text of a JSON object")

    def to_dict(self) -> dict[str, Any]:
        """Every column as a JSON-serialisable dict (``tested_at`` as ISO-8601 with offset).

        Floats may be NaN or infinite; :func:`json.dumps` writes those as ``NaN``/``Infinity``
        and :func:`json.loads` reads them back.
        """
        data: dict[str, Any] = {name: getattr(self, name) for name in COLUMNS}
        if self.tested_at is not None:
            data["tested_at"] = self.tested_at.isoformat()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Row:
        """Inverse of :meth:`to_dict`.

        Keys missing from ``data`` take their defaults (a row journaled by an older version
        loads); ``tested_at`` may be an ISO-8601 string or a datetime, with a timezone.

        Raises:
            ValueError: unknown keys (named in the message), a missing ``model_id`` or
                ``result``, or a value that does not fit its column.
        """
        unknown = sorted(str(key) for key in data if key not in _ROW_FIELDS)
        if unknown:
            raise ValueError(f"unknown Row field(s): {', '.join(unknown)}")
        missing = [name for name in ("model_id", "result") if data.get(name) is None]
        if missing:
            raise ValueError(f"missing required Row field(s): {', '.join(missing)}")
        kwargs = dict(data)
        tested_at = kwargs.get("tested_at")
        if isinstance(tested_at, str):
            try:
                kwargs["tested_at"] = dt.datetime.fromisoformat(tested_at)
            except ValueError as exc:
                raise ValueError(f"Row.tested_at is not ISO-8601: {tested_at!r}") from exc
        return cls(**kwargs)


_ROW_FIELDS: Final = frozenset(f.name for f in fields(Row))
if tuple(f.name for f in fields(Row)) != COLUMNS:  # pragma: no cover - guards edits
    raise RuntimeError("Row fields and SCHEMA columns have drifted apart")


def _check_value(name: str, type_: pa.DataType, value: object) -> object:
    """Validate one non-null value against its arrow type; return it normalised."""
    if pa.types.is_string(type_):
        if not isinstance(value, str):
            raise ValueError(f"Row.{name} must be a str, got {type(value).__name__}")
        return value
    if pa.types.is_int32(type_):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"Row.{name} must be an int, got {type(value).__name__}")
        number = int(value)
        if not _INT32_MIN <= number <= _INT32_MAX:
            raise ValueError(f"Row.{name} does not fit in int32: {number}")
        return number
    if pa.types.is_float64(type_):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"Row.{name} must be a float, got {type(value).__name__}")
        return float(value)
    if pa.types.is_boolean(type_):
        if not isinstance(value, bool):
            raise ValueError(f"Row.{name} must be a bool, got {type(value).__name__}")
        return value
    if pa.types.is_timestamp(type_):
        if not isinstance(value, dt.datetime):
            raise ValueError(f"Row.{name} must be a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"Row.{name} must be timezone-aware, got naive {value.isoformat()}")
        return value.astimezone(_UTC)
    raise AssertionError(f"unhandled column type {type_} of {name}")  # pragma: no cover


def _rows_to_table(rows: Iterable[Row]) -> pa.Table:
    """Rows as a table of exactly :data:`SCHEMA`."""
    rows = list(rows)
    arrays = [pa.array([getattr(row, f.name) for row in rows], type=f.type) for f in SCHEMA]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _row_from_record(record: Mapping[str, Any]) -> Row:
    return Row.from_dict({name: record.get(name) for name in COLUMNS})


# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


def _safe_component(what: str, text: str) -> str:
    if not isinstance(text, str) or not text:
        raise ValueError(f"{what} must be a non-empty string, got {text!r}")
    return _SAFE_CHAR.sub("_", text)


def _safe_name(first: str, second: str) -> str:
    name = f"{first}-{second}"
    # pyarrow and pandas skip names starting with "." or "_": a data file must never be hidden.
    if name[0] in "._":
        name = "-" + name[1:]
    return name


def pair_dirname(compiler: str, compiler_version: str) -> str:
    """Folder name of a compiler: ``"inductor-2.13.0"``.

    Characters outside ``[A-Za-z0-9._+-]`` become ``_`` (``"tests.backends:perturb"`` gives
    ``"tests.backends_perturb"``); a leading ``.`` or ``_`` becomes ``-`` so the folder is never
    hidden from dataset readers.

    Raises:
        ValueError: an empty component.
    """
    return _safe_name(
        _safe_component("compiler", compiler),
        _safe_component("compiler_version", compiler_version),
    )


def pair_relpath(compiler: str, compiler_version: str, library: str, library_version: str) -> str:
    """Path of a pair's parquet file relative to ``<results>/data``, with ``/``.

    ``"inductor-2.13.0/transformers-5.24.0.parquet"``; this is the ``pair`` recorded in
    journals. Library name and version are sanitised like :func:`pair_dirname`.
    """
    file_stem = _safe_name(
        _safe_component("library", library),
        _safe_component("library_version", library_version),
    )
    return f"{pair_dirname(compiler, compiler_version)}/{file_stem}.parquet"


def pair_path(
    results_dir: Path, compiler: str, compiler_version: str, library: str, library_version: str
) -> Path:
    """``<results>/data/<compiler>-<version>/<library>-<version>.parquet`` (sanitised)."""
    return (
        Path(results_dir)
        / "data"
        / pair_relpath(compiler, compiler_version, library, library_version)
    )


def _check_relpath(relpath: str) -> str:
    """Validate a pair path relative to ``<results>/data``; return it."""
    if not isinstance(relpath, str):
        raise ValueError(f"pair path must be a str, got {type(relpath).__name__}")
    parts = relpath.split("/")
    ok = (
        len(parts) == 2
        and all(part and _SAFE_CHAR.search(part) is None and part[0] not in "._" for part in parts)
        and parts[1].endswith(".parquet")
        and len(parts[1]) > len(".parquet")
    )
    if not ok:
        raise ValueError(
            f"invalid pair path {relpath!r}: expected '<compiler>-<version>/<library>-<version>"
            ".parquet' made of [A-Za-z0-9._+-], not starting with '.' or '_'"
        )
    return relpath


# --------------------------------------------------------------------------------------------
# Durability helpers
# --------------------------------------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    """Make a directory's entries (creations, renames, deletions) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _makedirs_durable(path: Path) -> None:
    """``mkdir -p`` that fsyncs the parent of every directory it created."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:  # pragma: no cover - filesystem root
            break
        current = current.parent
    path.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        _fsync_dir(created.parent)


def _file_lock(path: Path, timeout: float) -> filelock.BaseFileLock:
    # flock only: a soft lock outlives a killed process, which would make a dead journal look
    # alive forever. thread_local=False: the hold belongs to the object, whichever thread.
    return filelock.FileLock(path, timeout=timeout, thread_local=False, fallback_to_soft=False)


def _data_lock(target: Path, timeout: float = _LOCK_TIMEOUT_S) -> filelock.BaseFileLock:
    """The lock serialising rewrites of one parquet file: hidden ``.<file>.lock`` beside it."""
    return _file_lock(target.parent / f".{target.name}.lock", timeout)


def _remove_temps(target: Path) -> None:
    """Delete temp files left by killed writers of ``target`` (call with its lock held)."""
    for temp in target.parent.glob(f".{target.name}.*.tmp"):
        match = _TEMP_NAME.fullmatch(temp.name)
        if match is not None and match["target"] == target.name:
            with suppress(FileNotFoundError):
                temp.unlink()


def _sweep_temps(data_dir: Path) -> None:
    """Delete every orphaned temp file under ``data_dir`` whose target is not being written."""
    if not data_dir.is_dir():
        return
    for folder in sorted(data_dir.iterdir()):
        if not folder.is_dir():
            continue
        targets = {
            match["target"]
            for temp in folder.glob(".*.tmp")
            if (match := _TEMP_NAME.fullmatch(temp.name)) is not None
        }
        for name in sorted(targets):
            lock = _data_lock(folder / name, timeout=0)
            try:
                lock.acquire()
            except filelock.Timeout:
                continue  # being written right now; its writer owns those temps
            try:
                _remove_temps(folder / name)
            finally:
                lock.release()


def _atomic_write(target: Path, table: pa.Table) -> None:
    """Write ``table`` to ``target`` so that ``target`` is always old-complete or new-complete.

    Call with the target's lock held. The temp file is hidden (``.<name>.<hex>.tmp``).
    """
    temp = target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"
    try:
        pq.write_table(table, str(temp))
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        with suppress(OSError):
            temp.unlink()
        raise
    _fsync_dir(target.parent)


# --------------------------------------------------------------------------------------------
# Reading through the schema
# --------------------------------------------------------------------------------------------


class UnreadableResultsError(Exception):
    """A results parquet file could not be read (or cast to :data:`SCHEMA`)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


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
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
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


def _read_file(path: Path, *, keep_extra: bool) -> pa.Table:
    try:
        with pq.ParquetFile(path) as parquet_file:
            table = parquet_file.read()
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise UnreadableResultsError(path, f"{type(exc).__name__}: {exc}") from exc
    return _conform(table, path, keep_extra=keep_extra)


def read_table(path: Path) -> pa.Table:
    """One parquet file through :data:`SCHEMA`.

    Missing columns are filled with nulls, others cast to their schema type; columns unknown
    to the schema are dropped. The result has exactly :data:`SCHEMA` (metadata included).

    Raises:
        UnreadableResultsError: the file is missing, damaged or not castable (``.path`` names it).
    """
    return _read_file(Path(path), keep_extra=False)


def _data_files(results_dir: Path) -> list[Path]:
    """``data/*/*.parquet`` in sorted order, skipping hidden (``.``/``_``) names like pyarrow."""
    data_dir = Path(results_dir) / "data"
    if not data_dir.is_dir():
        return []
    found: list[Path] = []
    for folder in sorted(data_dir.iterdir()):
        if folder.name[0] in "._" or not folder.is_dir():
            continue
        for file in sorted(folder.iterdir()):
            if file.name[0] not in "._" and file.name.endswith(".parquet") and file.is_file():
                found.append(file)
    return found


def read_dataset(results_dir: Path) -> pa.Table:
    """Every ``<results>/data/*/*.parquet`` through :data:`SCHEMA`, concatenated.

    Files are read in sorted path order; hidden files (temp files, locks) are skipped. An
    empty or absent dataset gives an empty table of :data:`SCHEMA`.

    Raises:
        UnreadableResultsError: some file could not be read (its path is in ``.path``).
    """
    tables = [read_table(path) for path in _data_files(results_dir)]
    if not tables:
        return SCHEMA.empty_table()
    return pa.concat_tables(tables)


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
    with _data_lock(path):
        try:
            schema = pq.read_schema(path)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise UnreadableResultsError(path, f"{type(exc).__name__}: {exc}") from exc
        if _is_current(schema):
            return False
        table = _read_file(path, keep_extra=True)
        _remove_temps(path)
        _atomic_write(path, table)
    _forget_cached(path)
    return True


# find_row is called once per model when a sweep starts: cache each file's table by identity.
_CacheKey = tuple[str, int, int, int]
_cache: dict[str, tuple[_CacheKey, pa.Table, dict[str, int]]] = {}
_cache_lock = threading.Lock()
_CACHE_FILES: Final = 16


def _forget_cached(path: Path) -> None:
    with _cache_lock:
        _cache.pop(str(Path(path).absolute()), None)


def _indexed_table(path: Path) -> tuple[pa.Table, dict[str, int]] | None:
    """The table of ``path`` and model_id → row index (latest ``tested_at`` wins); cached."""
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
        table = read_table(path)
    except UnreadableResultsError:
        return None
    index: dict[str, int] = {}
    ids = table.column("model_id").to_pylist()
    stamps = table.column("tested_at").to_pylist()
    for position, model_id in enumerate(ids):
        if model_id is None:
            continue
        previous = index.get(model_id)
        if previous is None or _ts_key(stamps[position]) >= _ts_key(stamps[previous]):
            index[model_id] = position
    with _cache_lock:
        if len(_cache) >= _CACHE_FILES:
            _cache.pop(next(iter(_cache)))
        _cache[key_path] = (key, table, index)
    return table, index


def find_row(results_dir: Path, pair_relpath: str, model_id: str) -> Row | None:
    """The recorded row of ``model_id`` in one pair's parquet file.

    Returns ``None`` when the file is absent or unreadable, the model has no row, or its row
    does not validate as a :class:`Row`. Reads are cached per file version (inode, mtime, size).

    Raises:
        ValueError: ``pair_relpath`` is not a valid pair path.
    """
    target = Path(results_dir) / "data" / _check_relpath(pair_relpath)
    indexed = _indexed_table(target)
    if indexed is None:
        return None
    table, index = indexed
    position = index.get(model_id)
    if position is None:
        return None
    record = table.slice(position, 1).to_pylist()[0]
    try:
        return _row_from_record(record)
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------
# Journal
# --------------------------------------------------------------------------------------------


class JournalWarning(UserWarning):
    """A journal line was skipped by :func:`read_journal` (torn by a kill, or corrupt)."""


def _new_session_id() -> str:
    stamp = dt.datetime.now(_UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{stamp}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


class Journal:
    """Append-only, durable record of rows written the moment each test ends.

    File ``<results>/journal/<session_id>.jsonl``, one JSON object a line,
    ``{"pair": "<compiler>-<v>/<library>-<v>.parquet", "row": {...}}``. Each :meth:`append`
    returns only after the line is written and fsynced. The journal holds an flock on
    ``<results>/journal/<session_id>.lock`` from construction to :meth:`close`: a free lock
    means the writer is gone (closed or killed), which is how :func:`merge_journals` tells a
    dead journal from a live one. The lock dies with the process, so no stale lock survives a
    ``kill -9``.

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
        self.directory = Path(results_dir) / "journal"
        self.path = self.directory / f"{sid}.jsonl"
        self.lock_path = self.directory / f"{sid}.lock"
        _makedirs_durable(self.directory)
        self._lock = _file_lock(self.lock_path, timeout=0)
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
            _fsync_dir(self.directory)
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

    def append(self, pair_relpath: str, row: Row) -> None:
        """Record ``row`` for the pair file ``pair_relpath`` (see :func:`pair_relpath`) durably.

        The line is written with a single ``write`` on an ``O_APPEND`` descriptor and fsynced
        before this returns.

        Raises:
            ValueError: invalid pair path or row.
            RuntimeError: the journal is closed.
        """
        _check_relpath(pair_relpath)
        row.validate()
        line = json.dumps(
            {"pair": pair_relpath, "row": row.to_dict()},
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
class _JournalContent:
    entries: list[tuple[str, Row]]
    problems: list[str]  # every skipped line, torn last line included
    corrupt: bool  # some line other than a torn last line was skipped


def _parse_journal(path: Path) -> _JournalContent:
    return _parse_journal_bytes(path, path.read_bytes())


def _parse_journal_bytes(path: Path, data: bytes) -> _JournalContent:
    lines = data.split(b"\n")
    torn_tail = lines.pop()  # b"" when the file ends with a newline
    content = _JournalContent(entries=[], problems=[], corrupt=False)
    numbered = [(number, line, False) for number, line in enumerate(lines, start=1)]
    if torn_tail.strip():
        numbered.append((len(lines) + 1, torn_tail, True))
    for number, line, is_tail in numbered:
        if not line.strip():
            continue  # a blank line is what repairing a torn tail can leave
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or set(record) != {"pair", "row"}:
                raise ValueError("expected an object with exactly the keys 'pair' and 'row'")
            if not isinstance(record["row"], dict):
                raise ValueError("'row' is not an object")
            pair = _check_relpath(record["pair"])
            row = Row.from_dict(record["row"])
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
    return content


def read_journal(path: Path, *, problems: list[str] | None = None) -> list[tuple[str, Row]]:
    """The ``(pair_relpath, row)`` entries of a journal file, in append order.

    A torn last line (a process killed mid-append, so the append never returned) is skipped.
    A corrupt line elsewhere is skipped as well. Each skipped line is reported: appended as a
    message (``"<path>:<line>: ..."``) to ``problems`` when a list is given, otherwise emitted
    as a :class:`JournalWarning`.
    """
    content = _parse_journal(Path(path))
    if problems is not None:
        problems.extend(content.problems)
    else:
        for message in content.problems:
            warnings.warn(message, JournalWarning, stacklevel=2)
    return content.entries


# --------------------------------------------------------------------------------------------
# Merge
# --------------------------------------------------------------------------------------------


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
    """Skipped journal lines and failed writes, one message each."""

    @property
    def ok(self) -> bool:
        """Nothing unreadable, kept or skipped with a problem."""
        return not (self.unreadable or self.journals_kept or self.problems)


def _ts_key(stamp: dt.datetime | None) -> tuple[int, dt.datetime]:
    """Order of ``tested_at`` values: null before every timestamp."""
    if stamp is None:
        return (0, dt.datetime.min.replace(tzinfo=_UTC))
    return (1, stamp)


@dataclass
class _Candidate:
    path: Path
    lock: filelock.BaseFileLock | None  # held by us; None for a live journal merged anyway
    content: _JournalContent
    keep: bool = False


def _apply_rows(target: Path, rows: list[Row]) -> int:
    """Merge ``rows`` (unique model_ids) into ``target``; return how many were applied.

    A row replaces the file's row of the same model unless that one has a strictly later
    ``tested_at`` (null counts as earliest), so a late recovery never reverts a newer run.

    Raises:
        UnreadableResultsError: the existing file could not be read; it is left untouched.
    """
    _makedirs_durable(target.parent)
    with _data_lock(target):
        _remove_temps(target)
        if target.exists():
            existing = _read_file(target, keep_extra=True)
        else:
            existing = SCHEMA.empty_table()
        ids = existing.column("model_id").to_pylist()
        stamps = existing.column("tested_at").to_pylist()
        latest: dict[str, tuple[int, dt.datetime]] = {}
        duplicated = False
        for model_id, stamp in zip(ids, stamps, strict=True):
            if model_id is None:
                continue
            if model_id in latest:
                duplicated = True
            latest[model_id] = max(latest.get(model_id, _ts_key(None)), _ts_key(stamp))
        applied = [
            row
            for row in rows
            if row.model_id not in latest or latest[row.model_id] <= _ts_key(row.tested_at)
        ]
        if not applied and not duplicated:
            return 0
        if duplicated:  # not written by us; keep each model's latest row only
            keep_positions: dict[str, int] = {}
            for position, (model_id, stamp) in enumerate(zip(ids, stamps, strict=True)):
                if model_id is None:
                    continue
                best = keep_positions.get(model_id)
                if best is None or _ts_key(stamp) >= _ts_key(stamps[best]):
                    keep_positions[model_id] = position
            mask = [
                model_id is None or keep_positions[model_id] == position
                for position, model_id in enumerate(ids)
            ]
            existing = existing.filter(pa.array(mask, type=pa.bool_()))
        replaced = pa.array([row.model_id for row in applied], type=pa.string())
        stale = pc.fill_null(pc.is_in(existing.column("model_id"), value_set=replaced), False)
        kept = existing.filter(pc.invert(stale))
        new = _rows_to_table(applied)
        for extra in kept.schema:
            if extra.name not in SCHEMA.names:
                new = new.append_column(extra, pa.nulls(new.num_rows, type=extra.type))
        merged = pa.concat_tables([kept, new.cast(kept.schema)])
        merged = merged.sort_by([("model_id", "ascending")])
        _atomic_write(target, merged)
    _forget_cached(target)
    return len(applied)


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

    A parquet file that cannot be read is reported in ``unreadable`` and never written; every
    journal with rows for it is kept, as is a journal with a corrupt (not torn-last) line.
    Other failures to write a pair are reported in ``problems`` and keep its journals too.
    Temp files left by killed merges are deleted.
    """
    results_dir = Path(results_dir)
    journal_dir = results_dir / "journal"
    data_dir = results_dir / "data"
    report = MergeReport()

    paths: dict[str, Path] = {}  # absolute path → path as found or given
    if journal_dir.is_dir():
        for path in sorted(journal_dir.glob("*.jsonl")):
            if path.name[0] != ".":
                paths.setdefault(os.path.abspath(path), path)
    for path in include:
        paths.setdefault(os.path.abspath(path), Path(path))

    candidates: list[_Candidate] = []
    try:
        for path in paths.values():
            journal_lock = _file_lock(path.with_suffix(".lock"), timeout=0)
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
                content = _parse_journal(path)
            except Exception as exc:  # unreadable journal: leave it where it is
                report.problems.append(f"{path}: cannot read journal: {exc}")
                report.journals_kept.append(path)
                if lock is not None:
                    lock.release()
                continue
            report.problems.extend(content.problems)
            candidates.append(_Candidate(path, lock, content, keep=content.corrupt))
        candidates.sort(key=lambda candidate: _journal_order(candidate.path))

        # pair → model_id → (row, candidate); then which candidates feed each pair
        winners: dict[str, dict[str, tuple[Row, _Candidate]]] = {}
        feeders: dict[str, list[_Candidate]] = {}
        for candidate in candidates:
            last: dict[str, dict[str, Row]] = {}
            for pair, row in candidate.content.entries:
                last.setdefault(pair, {})[row.model_id] = row
            for pair, by_model in last.items():
                feeders.setdefault(pair, []).append(candidate)
                pair_winners = winners.setdefault(pair, {})
                for model_id, row in by_model.items():
                    current = pair_winners.get(model_id)
                    if current is None or _ts_key(row.tested_at) >= _ts_key(current[0].tested_at):
                        pair_winners[model_id] = (row, candidate)

        _sweep_temps(data_dir)
        for pair in sorted(winners):
            target = data_dir / pair
            rows = [row for row, _ in winners[pair].values()]
            try:
                count = _apply_rows(target, rows)
            except UnreadableResultsError as exc:
                report.unreadable.append((target, exc.reason))
                for candidate in feeders[pair]:
                    candidate.keep = True
                continue
            except Exception as exc:  # keep the journals: nothing may be lost
                report.problems.append(f"{target}: merge failed: {type(exc).__name__}: {exc}")
                for candidate in feeders[pair]:
                    candidate.keep = True
                continue
            if count:
                report.written[target] = count

        for candidate in candidates:
            if candidate.lock is None:
                continue  # live: rows merged, file left to its writer
            if candidate.keep:
                report.journals_kept.append(candidate.path)
                continue
            candidate.path.unlink(missing_ok=True)
            _fsync_dir(candidate.path.parent)
            with suppress(OSError):
                candidate.path.with_suffix(".lock").unlink()
            report.journals_merged.append(candidate.path)
    finally:
        for candidate in candidates:
            if candidate.lock is not None and candidate.lock.is_locked:
                candidate.lock.release()
    return report
