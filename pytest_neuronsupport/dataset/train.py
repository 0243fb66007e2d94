"""The training table: does a model train, and the largest batch that fits, native and compiled.

``<results>/train/<compiler>-<version>/<library>-<version>.parquet``, one row per model and
sequence length (its key), written through the same journal and merge as the support dataset
(:data:`~pytest_neuronsupport.dataset.support.SUPPORT`).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from pytest_neuronsupport.dataset.layout import TRAIN_DATA
from pytest_neuronsupport.dataset.support import DEVICE_DOCS
from pytest_neuronsupport.dataset.table import DEVICE_FIELDS, RUN_FIELDS, STACK_DOCS, Table

__all__ = ["TRAIN", "TRAIN_COLUMN_DOCS", "TRAIN_SCHEMA"]

TRAIN_SCHEMA: Final[pa.Schema] = pa.schema(
    [
        # identity
        pa.field("model_id", pa.string()),
        pa.field("library", pa.string()),
        pa.field("task", pa.string()),
        pa.field("revision", pa.string()),
        pa.field("objective", pa.string()),
        pa.field("neuron_cores", pa.int32()),
        pa.field("seq_len", pa.int32()),
        pa.field("precision", pa.string()),
        # verdict
        pa.field("result", pa.string()),
        pa.field("notes", pa.string()),
        pa.field("error", pa.string()),
        # the largest batch that fits
        pa.field("batch_native", pa.int32()),
        pa.field("batch_compiled", pa.int32()),
        pa.field("batch_ratio", pa.float64()),
        pa.field("batch_native_capped", pa.bool_()),
        pa.field("batch_compiled_capped", pa.bool_()),
        pa.field("max_batch", pa.int32()),
        pa.field("memory_cap_gb", pa.float64()),
        pa.field("samples_per_s_native", pa.float64()),
        pa.field("samples_per_s_compiled", pa.float64()),
        pa.field("peak_gb_native", pa.float64()),
        pa.field("peak_gb_compiled", pa.float64()),
        # correctness against the eager CPU fp32 step
        pa.field("loss_ref", pa.float64()),
        pa.field("loss", pa.float64()),
        pa.field("grad_norm_ref", pa.float64()),
        pa.field("grad_norm", pa.float64()),
        pa.field("param_error", pa.float64()),
        pa.field("tolerance", pa.float64()),
        pa.field("wall_s", pa.float64()),
        *RUN_FIELDS,
        pa.field("dtype", pa.string()),
        pa.field("run_py_sha256", pa.string()),
        pa.field("check", pa.string()),
        # why it fails (the correctness check's compiled step): as in the support table
        pa.field("error_site", pa.string()),
        pa.field("graph_count", pa.int32()),
        pa.field("graph_breaks", pa.int32()),
        pa.field("graph_break_reasons", pa.list_(pa.field("element", pa.string()))),
        # what the device and its runtime say of the check's compiled step (appended: older
        # files load them null)
        *DEVICE_FIELDS,
    ],
    metadata={"neuronsupport_schema": "train-1"},
)
"""The schema of every training parquet file (all columns nullable)."""

TRAIN_COLUMN_DOCS: Final[dict[str, str]] = {
    "model_id": "The model trained (a Hub repo id, or `zoo:<name>`).",
    "library": "The library the model was loaded with (`transformers`).",
    "task": "The task given by the model list entry, if any.",
    "revision": "The Hub revision given by the model list entry; null: the default branch.",
    "objective": (
        "The loss of the step: `causal-lm` (decoders), `masked-lm` (encoders with an MLM "
        "head) or `classification` (the head's own loss)."
    ),
    "neuron_cores": "Cores the step ran on (one).",
    "seq_len": "Tokens per sample (the list entry's `seq_len`, default 128).",
    "precision": "`fp32`, or `bf16-autocast`/`fp16-autocast` (mixed precision, fp32 weights).",
    "result": "`PASS`, `FAIL(train)` (a step raised), `FAIL(output)`, `FAIL(load)`, ...",
    "notes": "One line on what happened.",
    "error": "The error that decided a failure, with its traceback; null on PASS.",
    "batch_native": "The largest batch whose eager (native) step fits the memory cap.",
    "batch_compiled": "The largest batch whose compiled step fits the memory cap.",
    "batch_ratio": "`batch_compiled / batch_native`.",
    "batch_native_capped": "The native search stopped at `max_batch`: the real limit is higher.",
    "batch_compiled_capped": "The compiled search stopped at `max_batch`.",
    "max_batch": "The search's cap (`--neuron-train-max-batch`).",
    "memory_cap_gb": (
        "The memory a step could use: `--neuron-core-memory` on the CPU (an address-space "
        "limit on the run), the device's own memory on Neuron and CUDA."
    ),
    "samples_per_s_native": "Samples per second of the eager step at `batch_native`.",
    "samples_per_s_compiled": "Samples per second of the compiled step at `batch_compiled`.",
    "peak_gb_native": (
        "Peak memory of the eager trial at `batch_native` (GB): the device's peak allocated; "
        "on the CPU the address space mapped beyond the cap's base (what the cap counts)."
    ),
    "peak_gb_compiled": "Peak memory of the compiled trial at `batch_compiled` (GB), likewise.",
    "loss_ref": (
        "The loss of the CPU float64 step (the reference; before the tolerance came from "
        "measured noise: the eager CPU fp32 step's)."
    ),
    "loss": "The loss of the compiled step on the device.",
    "grad_norm_ref": "The global gradient norm of the reference step.",
    "grad_norm": "The global gradient norm of the compiled step.",
    "param_error": (
        "After one optimizer step, the compiled update's `|Δθ - Δθ_ref| / max(1, |Δθ_ref|)` "
        "over all parameters, against the reference step."
    ),
    "tolerance": (
        "The update's tolerance: `3 x` the eager CPU step's own `param_error` against float64 "
        "plus one eps of the dtype (`check` has the loss's and gradient norm's too, whose floor "
        "is 16 eps; formerly `+ 1e-5`, before that `sqrt(eps(dtype))`)."
    ),
    "wall_s": "Seconds of the whole training test (check and both searches).",
    **{name: f"{doc}; null where absent." for name, doc in STACK_DOCS.items()},
    "tested_at": "When the model's training test started (UTC).",
    "run_py": "`train.py`: the standalone correctness check; each trial's script is beside it.",
    "device": "The device: `neuron`, `cuda` or `cpu`.",
    "backend": "The `torch.compile` backend.",
    "compiler": "The pair's compiler (`neuronxcc` on Neuron, else the backend).",
    "compiler_version": "The compiler's version.",
    "dtype": "The dtype of the device step (autocast dtype on accelerators; fp32 on the CPU).",
    "run_py_sha256": "SHA-256 of `run_py`.",
    "check": (
        "A JSON object: the check's numbers, rule and seconds (`check_s`), and per search "
        "(`search_native`, `search_compiled`) its start, every trial (batch, fits, seconds), "
        "the batch it stopped at and the out-of-memory message there."
    ),
    "error_site": "Where the check's failure was raised, inside the compiler (as in `data/`).",
    "graph_count": "Graphs dynamo compiled in the check's compiled step (backward included).",
    "graph_breaks": "Graph breaks dynamo took in the check's compiled step.",
    "graph_break_reasons": "The distinct graph-break reasons, each with its user frame.",
    **DEVICE_DOCS,
}
"""One sentence per column of :data:`TRAIN_SCHEMA`."""

TRAIN: Final = Table("train", TRAIN_DATA, TRAIN_SCHEMA, ("model_id", "seq_len"), TRAIN_COLUMN_DOCS)
"""Training rows: ``<results>/train``, one row per model and sequence length."""
