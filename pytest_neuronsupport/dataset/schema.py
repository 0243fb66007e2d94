"""The schema of the results, and rows: plain dicts validated against it.

A row is a ``dict`` with every column of its table's schema (``None`` for null) in schema
order, then its extra columns (keys the schema does not know, added by users' hooks) sorted by
name. :func:`validate_row` makes one out of any mapping; :func:`row_to_json` and
:func:`row_from_json` carry it through a journal line; :func:`rows_to_table` turns rows into an
arrow table.

A :class:`Table` is one dataset of the results: its folder under ``<results>``, its schema and
the columns that identify a row in a pair file. :data:`SUPPORT` (``<results>/data``, the model
support dataset, keyed by ``model_id``) is the default everywhere; the other tables (training
rows in ``<results>/train``...) are listed in :mod:`~pytest_neuronsupport.dataset.tables`.
"""

from __future__ import annotations

import datetime as dt
import json
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa

from pytest_neuronsupport.dataset.layout import DATA
from pytest_neuronsupport.runners.lib.protocol import Result

__all__ = [
    "COLUMNS",
    "COLUMN_DOCS",
    "DEVICES",
    "FP64_COLUMNS",
    "PHASE_COLUMNS",
    "RESULT_MEANINGS",
    "RUN_FIELDS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "STACK_COLUMNS",
    "SUPPORT",
    "Table",
    "row_from_json",
    "row_to_json",
    "rows_to_table",
    "text_array",
    "validate_row",
]

SCHEMA_VERSION: Final = "1"
"""Value of the ``neuronsupport_schema`` key of the schema metadata."""

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

#: The phase times of a support row, in seconds: they add up to ``wall_s`` but for a remainder.
PHASE_COLUMNS: Final = ("load_s", "compile_s", "generate_s", "forward_s", "reference_s")

#: The output check's numbers against float64: the device's error, the CPU eager run's in the
#: same dtype (the measured noise), and the largest error that passes (``check.fp64``).
FP64_COLUMNS: Final = ("fp64_error_device", "fp64_error_eager", "fp64_tolerance")

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
        *RUN_FIELDS,
        pa.field("dtype", pa.string()),
        pa.field("run_py_sha256", pa.string()),
        pa.field("reference_reproducible", pa.bool_()),
        pa.field("first_divergence", pa.int32()),
        pa.field("divergence_margin", pa.float64()),
        pa.field("near_tie_tolerance", pa.float64()),
        pa.field("check", pa.string()),
        # why it fails: dynamo's accounting and the minifier's repro
        pa.field("error_site", pa.string()),
        pa.field("graph_count", pa.int32()),
        pa.field("graph_breaks", pa.int32()),
        pa.field("graph_break_reasons", pa.list_(pa.field("element", pa.string()))),
        pa.field("repro_py", pa.string()),
        pa.field("repro_ops_before", pa.int32()),
        pa.field("repro_ops_after", pa.int32()),
        pa.field("repro_ops", pa.list_(pa.field("element", pa.string()))),
        # what the output was checked against (appended: older files load with it null)
        pa.field("checked_by", pa.string()),
        # what the checkpoint is, from its config (appended: older files load them null)
        pa.field("architecture", pa.string()),
        pa.field("model_type", pa.string()),
        # where the time went, and the compile cache's part in it (appended: older files load
        # them null)
        *(pa.field(name, pa.float64()) for name in PHASE_COLUMNS),
        pa.field("graphs_cached", pa.int32()),
        pa.field("graphs_compiled", pa.int32()),
        # what the compiler did and did not do (appended: older files load them null)
        pa.field("compiled", pa.bool_()),
        pa.field("cpu_ops", pa.list_(pa.field("element", pa.string()))),
        pa.field("fallback_execution", pa.bool_()),
        pa.field("backend_compile_s", pa.float64()),
        # the output check's numbers against float64 (appended: older files load them null)
        *(pa.field(name, pa.float64()) for name in FP64_COLUMNS),
        # the device's cores held, times the seconds (appended: older files load it null)
        pa.field("core_s", pa.float64()),
        # the download of its files before its lease (appended: older files load it null)
        pa.field("download_s", pa.float64()),
    ],
    metadata={"neuronsupport_schema": SCHEMA_VERSION},
)
"""The one schema of every results parquet file (all columns nullable)."""

COLUMNS: Final[tuple[str, ...]] = tuple(SCHEMA.names)
"""Column names of :data:`SCHEMA`, in order."""

DEVICES: Final = ("neuron", "cuda", "cpu")
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

COLUMN_DOCS: Final[dict[str, str]] = {
    "model_id": (
        "The model tested: a Hugging Face Hub repo id, or `zoo:<name>` for a tiny model "
        "bundled with the plugin; at most one row per model in a file."
    ),
    "library": "The library the model was loaded with (`transformers`).",
    "neuron_cores": (
        "Cores the run used (NeuronCores, GPUs or CPU shares): the smallest power of two whose "
        "memory holds the bf16 weights, or the model list's `cores`; null if it never ran."
    ),
    "runner": (
        "The runner that ran the model (`run_dense`, `run_dense_ep`, `run_seq2seq`, "
        "`run_multimodal`, `run_encoder`...); null if it never ran."
    ),
    "selection_rank": "The model's rank in the sweep's selection, from its model list entry.",
    "task": "The task given by the model list entry (e.g. `text-generation`), if any.",
    "revision": "The Hub revision given by the model list entry; null: the default branch.",
    "result": "The outcome: one of the results listed in this card.",
    "notes": (
        "One line on what happened: the start of the generated text or the encoder's "
        "predictions, the reason of an exclusion, or the first line of the error."
    ),
    "exclusion": (
        "Why the model was not run (`quantized`, `trust-remote-code`, `too-large`, "
        "`no-runner`); null unless the result is EXCLUDED."
    ),
    "error": (
        "What went wrong: the exception and its traceback, or how the run ended (signal, "
        "timeout, memory) with the tail of its output; null on PASS."
    ),
    "cpu_match": (
        "The output against the CPU fp32 reference: `Y`, `Y (CPU bf16)`, `~ near-tie ...` "
        "(passes) or `N ...` (FAIL(output)); null when the comparison did not run."
    ),
    "english": (
        "The English judge's answer on the generated text, `Y` or `N` (FAIL(output)); null "
        "when the judge did not run."
    ),
    "wall_s": (
        "Seconds of the device's run (on its leased cores), from its first phase to its "
        "verdict: loading, compiling, generating or the forward pass, and the check against "
        "the CPU reference (the phase times add up to it but for a remainder: the judge, the "
        "moments between phases; and `reference_s` where the reference was computed before "
        "the run, off its lease); for a run without a verdict, the run's wall time. Files "
        "written before the phase times counted from loading the model to the end of "
        "generation or of the forward pass."
    ),
    "core_s": (
        "Core-seconds the run held: its cores (`neuron_cores`) times the seconds of its "
        "leased run (the CPU reference, computed before it in a process holding no core, is "
        "not in it); null in files written before the column existed, and for EXCLUDED rows."
    ),
    "hbm_peak_gb": (
        "Peak device memory of the run in GB (torch's counters; on the CPU the peak resident set)."
    ),
    "hbm_capacity_gb": "Device memory available to the run in GB: one core's times `neuron_cores`.",
    **{name: f"{doc}; null where absent." for name, doc in STACK_DOCS.items()},
    "tested_at": "When the model's test started (UTC).",
    "run_py": (
        "The standalone script that is the model's test (standard library, torch and "
        "transformers only): save it and run `python run.py` on the same stack to reproduce "
        "the verdict; null if the model never ran."
    ),
    "device": "The device the model ran on: `neuron`, `cuda` or `cpu`.",
    "backend": "The `torch.compile` backend (`neuron`, `inductor`, `aot_eager` or an import path).",
    "compiler": (
        "The pair's compiler, the first part of its folder name: `neuronxcc` on Neuron, "
        "else the backend."
    ),
    "compiler_version": "The compiler's version: neuronx-cc's on Neuron, else torch's.",
    "dtype": "The dtype of the device run (bf16 on accelerators and fp32 on the CPU by default).",
    "run_py_sha256": (
        "SHA-256 of `run_py`: a model whose script is unchanged in its pair is not run again."
    ),
    "reference_reproducible": (
        "Whether two CPU fp32 reference runs agreed; false: the output check could not run "
        "and the model passes on having run. Null when no reference ran."
    ),
    "first_divergence": (
        "The first token (or prediction) where the device and the CPU fp32 reference differ; "
        "null when they agree or were not compared."
    ),
    "divergence_margin": (
        "At the first divergence, the CPU fp32 score of the CPU's choice minus that of the "
        "device's (`z[a] - z[b]`)."
    ),
    "near_tie_tolerance": (
        "The numerical noise of the device's dtype, `4 * eps(dtype) * max(1, max |z|)`: a "
        "margin at most this is a near-tie, which passes."
    ),
    "check": (
        "A JSON object with everything that decided the verdict: the rule, both sides' tokens "
        "or predictions, distances, cosines, the judge's prompt and logits, or why the check "
        "was skipped."
    ),
    "error_site": (
        "Where a failure was raised: the first frame of its traceback inside the compiler "
        "(`module:function`: the backend's own code, inductor, TorchNeuron...), else its "
        "innermost frame; null on PASS."
    ),
    "graph_count": (
        "How many graphs dynamo compiled in the device run (recompilations included), "
        "counted by dynamo itself; null if compilation never started."
    ),
    "graph_breaks": (
        "How many graph breaks dynamo took in the device run; under `fullgraph=True` (the "
        "Neuron default) a break is the failure itself and `notes` names its reason."
    ),
    "graph_break_reasons": (
        "The distinct graph-break reasons, each with the user frame that caused it "
        "(`reason (file:line in function)`), deduplicated."
    ),
    "repro_py": (
        "With `--neuron-minify`, on a failure: a standalone script holding the failing graph "
        "shrunk by PyTorch's minifier, its inputs and the backend call; `python repro.py` "
        "raises the same error (or shows the same mismatch)."
    ),
    "repro_ops_before": "Ops of the failing graph before the minifier shrank it.",
    "repro_ops_after": "Ops left in `repro_py`'s graph.",
    "repro_ops": "The ops left in `repro_py`'s graph, by name (e.g. `torch._C._nn.linear`).",
    "checked_by": (
        "What the output was held against, for PASS and FAIL(output): `cpu` (the CPU fp32 "
        "reference, equal), `near-tie` (the CPU reference, differing only at a near-tie), "
        "`judge` (the English judge) or `none` (nothing was compared: a PASS on having run, "
        "with the reason at the end of `notes`); null for other results and in files written "
        "before the column existed."
    ),
    "architecture": (
        "The checkpoint's class, its config's `architectures[0]` (the head class, e.g. "
        "`LlamaForCausalLM`); null when its config was not read, or names none, and in files "
        "written before the column existed."
    ),
    "model_type": (
        "The checkpoint's config's `model_type` (e.g. `llama`); null when its config was not "
        "read, and in files written before the column existed."
    ),
    "load_s": (
        "Seconds of the load phase: tokenizer, config and weights onto the device; null when "
        "the run gave no verdict, and in files written before the phase times existed (so "
        "for every phase time)."
    ),
    "compile_s": (
        "Seconds dynamo spent compiling, by its own accounting (every frame it compiled, "
        "recompilations included: tracing, lowering and the backend's compile), taken out "
        "of the phase it happened in; 0 when nothing compiled."
    ),
    "generate_s": (
        "Seconds of generating the 32 tokens (decoders), without `compile_s`: the first "
        "execution of a compiled graph is counted here; null for an encoder."
    ),
    "forward_s": (
        "Seconds of the forward pass (encoders), without `compile_s`; null for a decoder."
    ),
    "reference_s": (
        "Seconds of the CPU reference: computed before the device's run, in a process that "
        "holds none of the device's cores (not in `wall_s` nor `core_s`); near 0 when it was "
        "read from the cache (`reference_cached` in `check`); for a runner that computes it "
        "in its device run, that phase's seconds (then within `wall_s`); null when none ran."
    ),
    "graphs_cached": (
        "Graphs the compile cache served (inductor's FX graph cache hits on the CPU and "
        "CUDA); null where the backend has no cache (`aot_eager`) or, on Neuron, where the "
        "runtime does not say (the NEFF cache's hits are not reported)."
    ),
    "graphs_compiled": (
        "Graphs compiled fresh: inductor's FX graph cache misses and bypasses; on Neuron the "
        "graphs TorchNeuron's `get_dynamo_metrics()` lists for the run; 0 with `graphs_cached` "
        "above 0: a warm compile; null where the backend has no cache and the runtime does "
        "not say."
    ),
    "compiled": (
        "Whether the device run compiled at least one graph (dynamo handed the backend a "
        "graph, and on Neuron TorchNeuron's metrics list one): false on a PASS means it is not "
        "a compiler PASS (the model ran as it is), counted apart everywhere rows are counted; "
        "null where the run gave no verdict, and in files written before the column existed."
    ),
    "cpu_ops": (
        "The ATen operators that ran on the CPU instead of the device during the run "
        "(TorchNeuron's `get_fallback_ops()`: operators without a Neuron kernel, `CPU_FALLBACK` "
        "in its operator table), sorted; empty when none did; null where the runtime cannot "
        "tell (the CPU, CUDA, a TorchNeuron without the function), and in files written before "
        "the column existed."
    ),
    "fallback_execution": (
        "Whether TorchNeuron's fallback execution (a graph that fails to compile run eagerly "
        "instead of raising) was on in the run: false on every Neuron run "
        "(`TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1` and the `fallback_execution` compile "
        "option off); null off Neuron."
    ),
    "backend_compile_s": (
        "Seconds the backend's compiler spent on the run's graphs, as the runtime reports "
        "them (TorchNeuron's `get_dynamo_metrics()`: each graph's neuronx-cc compile time, "
        "which happens at the graph's first execution, inside `generate_s` or `forward_s`); "
        "null where the runtime does not say."
    ),
    "fp64_error_device": (
        "The device's error against the CPU float64 run, `|y - y64| / max(1, |y64|)` (norms "
        "over what the check compared: a decoder's scores at its `positions`, an encoder's "
        "whole output); null where float64 did not decide (`check.fp64` says why)."
    ),
    "fp64_error_eager": (
        "The same error of the CPU eager run in the device's dtype: the noise the dtype "
        "itself makes, which the device is held to."
    ),
    "fp64_tolerance": (
        "The largest `fp64_error_device` that passes: `3 * fp64_error_eager` plus a floor of "
        "the dtype's epsilon (see the output check in the runners' documentation)."
    ),
    "download_s": (
        "Seconds of fetching a Hub checkpoint's files into the local cache before the run "
        "leased its cores (not in `wall_s`: no core waited for it); near 0 when they were "
        "there already (downloaded ahead while other models ran); null for a local checkpoint "
        "or offline."
    ),
}
"""One sentence (or two) per column of :data:`SCHEMA`, in its order: the meaning of each."""

RESULT_MEANINGS: Final[dict[Result, str]] = {
    Result.PASS: (
        "The model loaded, compiled and ran on the device, and its output matched the CPU fp32 "
        "reference (or differed only at near-ties), or the check could not run. In pytest: "
        "passed."
    ),
    Result.FAIL_LOAD: (
        "The checkpoint could not be found or loaded (config, tokenizer or weights). In "
        "pytest: failed."
    ),
    Result.FAIL_GEN: (
        "Compiling the model or generating with it raised (generating runners). In pytest: failed."
    ),
    Result.FAIL_FORWARD: (
        "Compiling the model or its forward pass raised (encoder runners). In pytest: failed."
    ),
    Result.FAIL_TRAIN: (
        "A training step (forward, loss, backward, optimizer step) raised, other than for lack "
        "of memory (training rows). In pytest: failed."
    ),
    Result.FAIL_OUTPUT: (
        "The model ran, but its output differs from the CPU fp32 reference beyond a near-tie, "
        "or the English judge found its text not fluent English; in a training row, the "
        "compiled step differs from the eager CPU fp32 step beyond the tolerance. In pytest: "
        "failed."
    ),
    Result.FAIL_OTHER: (
        "The run ended without a verdict: a crash, a hang past the timeout, memory past the "
        "limit, a rank or xdist worker that died, or a failure of the plugin; `notes` says how "
        "and in which phase. In pytest: failed."
    ),
    Result.EXCLUDED: (
        "Not run: a quantized checkpoint, remote code, too large for the cores allowed, or no "
        "runner for it; `exclusion` says which. In pytest: skipped."
    ),
}
"""The meaning of each value of the ``result`` column."""


@dataclass(frozen=True)
class Table:
    """One dataset of the results: ``<results>/<folder>/<compiler>-<v>/<library>-<v>.parquet``.

    Every file of a table has its :attr:`schema` (then the extra columns); a pair file holds at
    most one row per value of :attr:`key` (a later row replaces it). Journal lines of a table
    other than :data:`SUPPORT` name it (``"table": name``).
    """

    name: str
    folder: str
    schema: pa.Schema
    key: tuple[str, ...] = ("model_id",)
    docs: Mapping[str, str] = field(default_factory=dict)

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


SUPPORT: Final = Table("support", DATA, SCHEMA, ("model_id",), COLUMN_DOCS)
"""The model support dataset: ``<results>/data``, one row per model in a pair."""

_RESULTS: Final = tuple(member.value for member in Result)
_SCHEMA_NAMES: Final = frozenset(COLUMNS)
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


def validate_row(row: Mapping[str, Any], table: Table = SUPPORT) -> dict[str, Any]:
    """Check ``row`` against ``table``'s schema (:data:`SCHEMA`); return a new, normalised row.

    The result has every schema column in schema order (``None`` where ``row`` lacks it), then
    the extra columns sorted by name. ``model_id`` (non-empty) and ``result`` (a value of
    :class:`~pytest_neuronsupport.runners.lib.protocol.Result`) are required. Integers given for
    float columns become floats; ``tested_at`` (a datetime or an ISO-8601 string) is converted
    to UTC and must carry a timezone (a naive one is rejected rather than guessed). ``device``
    must be one of :data:`DEVICES` or null, ``check`` (when set) the text of a JSON object.
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
    if valid.get("device") is not None and valid["device"] not in DEVICES:
        raise ValueError(
            f"{prefix}device must be one of {DEVICES} or None, got {valid['device']!r}"
        )
    if valid.get("check") is not None:
        try:
            parsed = json.loads(valid["check"])
        except ValueError as exc:
            raise ValueError(f"{prefix}check is not JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise ValueError(f"{prefix}check must be the text of a JSON object")
    names = _SCHEMA_NAMES if table is SUPPORT else frozenset(table.schema.names)
    extras = {key: _check_extra(prefix, key, row[key]) for key in row if key not in names}
    for name in sorted(extras):
        valid[name] = extras[name]
    return valid


def row_to_json(row: Mapping[str, Any], table: Table = SUPPORT) -> dict[str, Any]:
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


def row_from_json(data: object, table: Table = SUPPORT) -> dict[str, Any]:
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
    rows: Iterable[Mapping[str, Any]], table: Table = SUPPORT, *, validated: bool = False
) -> pa.Table:
    """Rows as a table: validated with :func:`validate_row` here, unless they are
    ``validated`` already (rows a journal read back, each validated as it was parsed).

    The columns are :data:`SCHEMA`'s (metadata included), then the extra columns of all rows
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
