"""A table of the results, and rows: plain dicts validated against its schema.

A :class:`Table` is one dataset of the results: its folder under ``<results>``, its schema and
the columns that identify a row in a pair file. The tables themselves are declared beside it:
:mod:`~pytest_neuronsupport.dataset.support` (``<results>/data``, the model support dataset),
:mod:`~pytest_neuronsupport.dataset.train` and :mod:`~pytest_neuronsupport.dataset.perf`; they
are listed by name in :mod:`~pytest_neuronsupport.dataset.tables`.

A row is a ``dict`` with every column of its table's schema (``None`` for null) in schema
order, then its extra columns (keys the schema does not know, added by users' hooks) sorted by
name. :func:`validate_row` makes one out of any mapping; :func:`row_to_json` and
:func:`row_from_json` carry it through a journal line; :func:`rows_to_table` turns rows into an
arrow table. Every table starts with the columns of its run (:data:`RUN_FIELDS`).
"""

from __future__ import annotations

import datetime as dt
import json
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

import pyarrow as pa

from pytest_neuronsupport.runners.lib.protocol import Result

__all__ = [
    "DEVICE_FIELDS",
    "DEVICE_NAMES",
    "POLICY_FIELDS",
    "RUNTIME_FIELDS",
    "RUN_FIELDS",
    "STACK_COLUMNS",
    "STACK_DOCS",
    "Table",
    "row_from_json",
    "row_to_json",
    "rows_to_table",
    "text_array",
    "validate_row",
]

STACK_COLUMNS: Final = (
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

RUN_FIELDS: Final[tuple[pa.Field, ...]] = (
    # software stack (null where a package is absent)
    *(pa.field(name, pa.string()) for name in STACK_COLUMNS),
    pa.field("tested_at", pa.timestamp("us", tz="UTC")),
    pa.field("run_py", pa.string()),
    pa.field("device", pa.string()),
    pa.field("backend", pa.string()),
    pa.field("compiler", pa.string()),
    pa.field("compiler_version", pa.string()),
)
"""The columns every table has about its run, in this order: the stack, when, the script, the
device, the backend and the compiler."""

RUNTIME_FIELDS: Final[tuple[pa.Field, ...]] = (
    pa.field("graphs_cached", pa.int32()),
    pa.field("graphs_compiled", pa.int32()),
    pa.field("compiled", pa.bool_()),
    pa.field("cpu_ops", pa.list_(pa.field("element", pa.string()))),
    pa.field("fallback_execution", pa.bool_()),
    pa.field("backend_compile_s", pa.float64()),
)
"""What a run's compile cache and runtime say of it (TorchNeuron's op tracking and compile
metrics, inductor's or the NEFF cache's counts)."""

POLICY_FIELDS: Final[tuple[pa.Field, ...]] = (
    pa.field("fullgraph", pa.bool_()),
    pa.field("lnc", pa.int32()),
)
"""The device's ``fullgraph`` policy, and the logical core configuration of its cores."""

DEVICE_FIELDS: Final[tuple[pa.Field, ...]] = (*RUNTIME_FIELDS, *POLICY_FIELDS)
"""What the device and its runtime say of a run: columns of every built-in table, with these
types, so that a row of any mode on any device can be written (the support table has them
where they were added; the others at their end)."""

DEVICE_NAMES: Final = ("neuron", "cuda", "cpu")
"""Allowed values of the ``device`` column (or null)."""

STACK_DOCS: Final = {
    "neuronx_cc": "Version of the neuronx-cc compiler",
    "library_version": "Version of the library in `library` (the pair's library version)",
    "transformers": "Version of transformers",
    "accelerate": "Version of accelerate",
    "torch_neuronx": "Version of torch-neuronx (TorchNeuron)",
    "torch": "Version of torch",
    "nki": "Version of nki (the Neuron Kernel Interface)",
    "python": "Version of Python",
    "neuron_driver": "Version of the loaded Neuron kernel driver (what `modinfo neuron` reports)",
}


@dataclass(frozen=True)
class Table:
    """One dataset of the results: ``<results>/<folder>/<compiler>-<v>/<library>-<v>.parquet``.

    Every file of a table has its :attr:`schema` (then the extra columns); a pair file holds at
    most one row per value of :attr:`key` (a later row replaces it). Journal lines of a table
    other than the support table name it (``"table": name``).
    """

    name: str
    folder: str
    schema: pa.Schema
    key: tuple[str, ...] = ("model_id",)
    docs: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def names(self) -> frozenset[str]:
        """The names of the schema's columns (any other key of a row is an extra column)."""
        return frozenset(self.schema.names)

    @property
    def version(self) -> bytes:
        """The schema's ``neuronsupport_schema`` metadata value."""
        return bytes((self.schema.metadata or {}).get(b"neuronsupport_schema", b""))

    def key_of(self, row: Mapping[str, Any]) -> Any:
        """The identity of ``row`` in a pair file: its ``model_id`` for a one-column key, else
        the tuple of its key columns."""
        if len(self.key) == 1:
            return row.get(self.key[0])
        return tuple(row.get(name) for name in self.key)


_RESULTS: Final = tuple(member.value for member in Result)
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_EXTRA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UTC: Final = dt.UTC


def _plain(text: str) -> str:
    """``text`` as an exact ``str`` (a :class:`~enum.StrEnum` member becomes its value)."""
    return str.__str__(text)


def _check_value(prefix: str, name: str, type_: pa.DataType, value: object) -> object:
    """Validate one non-null value of a schema column; return it normalised."""
    if pa.types.is_string(type_):
        if not isinstance(value, str):
            raise ValueError(f"{prefix}{name} must be a str, got {type(value).__name__}")
        return _plain(value)
    if pa.types.is_int32(type_) or pa.types.is_int64(type_):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{prefix}{name} must be an int, got {type(value).__name__}")
        number = int(value)
        low, high = (
            (_INT32_MIN, _INT32_MAX) if pa.types.is_int32(type_) else (_INT64_MIN, _INT64_MAX)
        )
        if not low <= number <= high:
            raise ValueError(f"{prefix}{name} does not fit in {type_}: {number}")
        return number
    if pa.types.is_float64(type_):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{prefix}{name} must be a float, got {type(value).__name__}")
        return float(value)
    if pa.types.is_boolean(type_):
        if not isinstance(value, bool):
            raise ValueError(f"{prefix}{name} must be a bool, got {type(value).__name__}")
        return value
    if pa.types.is_timestamp(type_):
        return _check_timestamp(prefix, name, value)
    if pa.types.is_list(type_):
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{prefix}{name} must be a list of str, got {value!r:.80}")
        return [_plain(v) for v in value]
    raise AssertionError(f"unhandled column type {type_} of {name}")  # pragma: no cover


def _check_timestamp(prefix: str, name: str, value: object) -> dt.datetime:
    """A timezone-aware datetime, or an ISO-8601 string with an offset or ``Z``, as UTC."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"{prefix}{name} is not ISO-8601: {value!r}") from exc
    if not isinstance(value, dt.datetime):
        raise ValueError(f"{prefix}{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{prefix}{name} must be timezone-aware, got naive {value.isoformat()}")
    return value.astimezone(_UTC)


def _check_extra(prefix: str, name: object, value: object) -> object:
    """Validate one extra column (its name and value); return the value normalised."""
    if not isinstance(name, str) or _EXTRA_NAME.fullmatch(name) is None:
        raise ValueError(
            f"{prefix}extra column {name!r}: the name must match {_EXTRA_NAME.pattern}"
        )
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"{prefix}extra column {name!r} does not fit in int64: {value}")
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return _plain(value)
    raise ValueError(
        f"{prefix}extra column {name!r} must be None, str, bool, int or float, "
        f"got {type(value).__name__}"
    )


def validate_row(row: Mapping[str, Any], table: Table) -> dict[str, Any]:
    """Check ``row`` against ``table``'s schema; return a new, normalised row.

    The result has every schema column in schema order (``None`` where ``row`` lacks it), then
    the extra columns sorted by name. ``model_id`` (non-empty) and ``result`` (a value of
    :class:`~pytest_neuronsupport.runners.lib.protocol.Result`) are required. Integers given for
    float columns become floats; ``tested_at`` (a datetime or an ISO-8601 string) is converted
    to UTC and must carry a timezone (a naive one is rejected rather than guessed). ``device``
    must be one of :data:`DEVICE_NAMES` or null, ``check`` (when set) the text of a JSON object.
    Extra columns are named like identifiers and hold None, str, bool, int (int64) or float.

    Raises:
        ValueError: a value does not fit its column; the message starts with
            ``"row <model_id>: "`` (``"row: "`` when the id itself is missing or invalid).
    """
    if not isinstance(row, Mapping):
        raise ValueError(f"row: must be a mapping, got {type(row).__name__}")
    model_id = row.get("model_id")
    prefix = f"row {model_id}: " if isinstance(model_id, str) and model_id else "row: "
    missing = [name for name in ("model_id", "result") if row.get(name) is None]
    if missing:
        raise ValueError(f"{prefix}missing required column(s): {', '.join(missing)}")
    valid: dict[str, Any] = {}
    for schema_field in table.schema:
        value = row.get(schema_field.name)
        if value is not None:
            value = _check_value(prefix, schema_field.name, schema_field.type, value)
        valid[schema_field.name] = value
    if not valid["model_id"]:
        raise ValueError(f"{prefix}model_id must be a non-empty string")
    if valid["result"] not in _RESULTS:
        raise ValueError(f"{prefix}result must be one of {_RESULTS}, got {valid['result']!r}")
    if valid.get("device") is not None and valid["device"] not in DEVICE_NAMES:
        raise ValueError(
            f"{prefix}device must be one of {DEVICE_NAMES} or None, got {valid['device']!r}"
        )
    if valid.get("check") is not None:
        try:
            parsed = json.loads(valid["check"])
        except ValueError as exc:
            raise ValueError(f"{prefix}check is not JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise ValueError(f"{prefix}check must be the text of a JSON object")
    names = table.names
    extras = {key: _check_extra(prefix, key, row[key]) for key in row if key not in names}
    for name in sorted(extras):
        valid[name] = extras[name]
    return valid


def row_to_json(row: Mapping[str, Any], table: Table) -> dict[str, Any]:
    """``row`` validated, as a JSON-serialisable dict (``tested_at`` as ISO-8601 with offset).

    Floats may be NaN or infinite; :func:`json.dumps` writes those as ``NaN``/``Infinity`` and
    :func:`json.loads` reads them back.

    Raises:
        ValueError: as :func:`validate_row`.
    """
    data = validate_row(row, table)
    if data["tested_at"] is not None:
        data["tested_at"] = data["tested_at"].isoformat()
    return data


def row_from_json(data: object, table: Table) -> dict[str, Any]:
    """Inverse of :func:`row_to_json`: the row of a decoded JSON object.

    Columns missing from ``data`` are null (a row journaled by an older version loads); keys
    the schema does not know are extra columns.

    Raises:
        ValueError: ``data`` is not an object, or as :func:`validate_row`.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"row: must be a JSON object, got {type(data).__name__}")
    return validate_row(data, table)


def text_array(values: Iterable[object]) -> pa.Array:
    """``values`` as a string array: strings as they are, nulls null, anything else ``str()``."""
    texts = [value if value is None or isinstance(value, str) else str(value) for value in values]
    return pa.array(texts, type=pa.string())


def _extra_array(values: Sequence[object]) -> pa.Array:
    """An extra column's (validated) values as an array of the narrowest lossless type.

    All bool: bool; all int: int64; int and float: float64 (when every int is exact as a
    float); all str or all null: string; anything else: the text of each value.
    """
    kinds = {type(value) for value in values if value is not None}
    if kinds == {bool}:
        return pa.array(values, type=pa.bool_())
    if kinds == {int}:
        return pa.array(values, type=pa.int64())
    if kinds in ({float}, {int, float}) and all(
        float(value) == value for value in values if isinstance(value, int)
    ):
        return pa.array(values, type=pa.float64())
    return text_array(values)


def rows_to_table(
    rows: Iterable[Mapping[str, Any]], table: Table, *, validated: bool = False
) -> pa.Table:
    """Rows as a table: validated with :func:`validate_row` here, unless they are
    ``validated`` already (rows a journal read back, each validated as it was parsed).

    The columns are the table's schema's (metadata included), then the extra columns of all rows
    sorted by name, each null where a row lacks it and typed by its values: all bool: bool;
    all int: int64; int and float: float64 (when every int is exact as a float); all str or all
    null: string; anything else: string, the text of each value.

    Raises:
        ValueError: as :func:`validate_row`.
    """
    schema = table.schema
    valid = list(rows) if validated else [validate_row(row, table) for row in rows]
    arrays = [pa.array([row[f.name] for row in valid], type=f.type) for f in schema]
    fields = list(schema)
    for name in sorted({key for row in valid for key in row if key not in schema.names}):
        array = _extra_array([row.get(name) for row in valid])
        arrays.append(array)
        fields.append(pa.field(name, array.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))
