"""The bisection table: which release of a package broke a model, or where inside the compiler.

``<results>/bisect/<compiler>-<version>/<library>-<version>.parquet``, in the pair of the
failure bisected, one row per model, package and range (``good``, ``bad``) bisected: its key (a
compiler bisection's package is the run's backend, its range null); a later bisection of the
same range replaces its row. Written through the same journal and merge as the
support dataset (:data:`~pytest_neuronsupport.dataset.support.SUPPORT`) by ``neuronsupport
bisect`` and by a sweep with ``--neuron-bisect``. ``lookup``, ``failures`` and the page read it
(:mod:`pytest_neuronsupport.views.bisections`).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from pytest_neuronsupport.dataset.layout import BISECT_DATA
from pytest_neuronsupport.dataset.table import RUN_FIELDS, STACK_DOCS, Table

__all__ = ["BISECT", "BISECT_COLUMN_DOCS", "BISECT_SCHEMA"]

_TEXTS: Final = pa.list_(pa.field("element", pa.string()))

BISECT_SCHEMA: Final[pa.Schema] = pa.schema(
    [
        # identity
        pa.field("model_id", pa.string()),
        pa.field("library", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("package", pa.string()),
        # the answer
        pa.field("status", pa.string()),
        pa.field("answer", pa.string()),
        pa.field("good", pa.string()),
        pa.field("bad", pa.string()),
        pa.field("first_bad", pa.string()),
        pa.field("last_good", pa.string()),
        pa.field("first_bad_range", _TEXTS),
        pa.field("flaky", pa.bool_()),
        # the search
        pa.field("candidates", pa.int32()),
        pa.field("runs", pa.int32()),
        pa.field("confirm_runs", pa.int32()),
        pa.field("tried", _TEXTS),
        # the failure at each end of the boundary
        pa.field("result", pa.string()),
        pa.field("error_bad", pa.string()),
        pa.field("signature", pa.string()),
        pa.field("result_good", pa.string()),
        pa.field("run_py_good", pa.string()),
        pa.field("pip_bad", pa.string()),
        pa.field("pip_good", pa.string()),
        # inside the compiler
        pa.field("stage", pa.string()),
        pa.field("subsystem", pa.string()),
        pa.field("application", pa.int32()),
        pa.field("application_info", pa.string()),
        # what else a reader needs
        pa.field("context", pa.string()),
        pa.field("report", pa.string()),
        pa.field("wall_s", pa.float64()),
        *RUN_FIELDS,
    ],
    metadata={"neuronsupport_schema": "bisect-1"},
)
"""The schema of every bisection parquet file (all columns nullable)."""

BISECT_COLUMN_DOCS: Final[dict[str, str]] = {
    "model_id": "The model bisected (a Hub repo id, or `zoo:<name>`).",
    "library": "The library the model was loaded with (`transformers`).",
    "kind": "`release`: across a package's releases; `compiler`: inside the compiler, by stage.",
    "package": "The package bisected (`transformers`...), or the compiler (`inductor`, `neuron`).",
    "status": (
        "How the bisection ended: `found`, `found within a range`, `the bad end passes`, "
        "`the good end fails`, `an end cannot be tried`, `the budget of runs was spent`, "
        "`flaky`; a compiler bisection: `found`, `no issue found`, `does not fail here`."
    ),
    "answer": "The answer in one line: `broke in transformers 5.25.0`.",
    "good": "The good end asked (a version that passed).",
    "bad": "The bad end asked (a version that failed).",
    "first_bad": "The first failing release found (null: none found).",
    "last_good": "The last passing release found (null: none found).",
    "first_bad_range": (
        "Where releases that could not be decided (skips, failures of another kind) sit on the "
        "boundary: the releases the first failing one is among, oldest first."
    ),
    "flaky": "The boundary pair, run again, disagreed with its first runs.",
    "candidates": "Releases from the good end to the bad end the index offers here, both included.",
    "runs": "Runs of the search: the two ends and the steps (re-runs apart).",
    "confirm_runs": "Runs of the boundary pair again.",
    "tried": "Each run in order: `5.22.1 good`, `5.24.1 skip`...",
    "result": (
        "The result of the failure bisected (`FAIL(gen)`...): the first failing release's run, "
        "else the bad end's (`PASS` where it passed), else its recorded row's."
    ),
    "error_bad": "The first line of its error.",
    "signature": "The failure bisected: result, exception, and where (as `failures` groups).",
    "result_good": "The result of the last passing release's run (`PASS`).",
    "run_py_good": "The last passing release's `run.py` (`run_py`: the first failing one's).",
    "pip_bad": "The pip line that makes the first failing release's environment.",
    "pip_good": "The pip line that makes the last passing release's environment.",
    "stage": "A compiler bisection: the first backend stage that fails (`inductor`...).",
    "subsystem": "A compiler bisection: the subsystem that breaks it (`lowerings`...).",
    "application": "A compiler bisection: which application of the subsystem breaks it.",
    "application_info": "A compiler bisection: what that application was (a pass, a node).",
    "context": (
        "A JSON object: the model's architecture and model type, its config's flags, how the "
        "ends were chosen, what differs from the good end's stack."
    ),
    "report": "The whole report as JSON (every run, its outcome, its script and overlay).",
    "wall_s": "Seconds the bisection took, installs included.",
    **{name: f"{doc} (where it ran); null where absent." for name, doc in STACK_DOCS.items()},
    "tested_at": "When the bisection started (UTC).",
    "run_py": "The first failing release's `run.py`.",
    "device": "The device: `neuron`, `cuda` or `cpu`.",
    "backend": "The `torch.compile` backend.",
    "compiler": "The pair's compiler (`neuronxcc` on Neuron, else the backend).",
    "compiler_version": "The compiler's version.",
}
"""One sentence per column of :data:`BISECT_SCHEMA`."""

BISECT: Final = Table(
    "bisect", BISECT_DATA, BISECT_SCHEMA, ("model_id", "package", "good", "bad"), BISECT_COLUMN_DOCS
)
"""Bisection rows: ``<results>/bisect``, one row per model, package and range bisected."""
