"""Results datasets written directly (journal, then merge), for tests of what reads them.

No sweep runs: each row is made here, with the columns a sweep would fill, and goes through the
real :class:`~pytest_neuronsupport.dataset.journal.Journal` and
:func:`~pytest_neuronsupport.dataset.merge.merge_journals`, so the files are the ones a sweep
writes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.layout import pair_relpath
from pytest_neuronsupport.dataset.merge import merge_journals
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.table import validate_row

T0 = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.UTC)


def perf_row(
    model_id: str, configuration: str, *, tested_at: dt.datetime = T0, **more: Any
) -> dict[str, Any]:
    """A passed encoder's performance row of ``model_id`` at ``configuration``: the keys every
    perf row has, and ``more``."""
    return {
        "model_id": model_id,
        "configuration": configuration,
        "kind": "encoder",
        "result": "PASS",
        "tested_at": tested_at,
        **more,
    }


def result_row(model_id: str, result: str = "PASS", /, **fields: Any) -> dict[str, Any]:
    """A validated row of ``model_id`` as a sweep records it, tested ``minutes`` after T0.

    ``fields`` are columns of the row (checked by the table's validation, not here), and
    ``minutes`` (default 0). The pair is ``compiler`` (default inductor), ``compiler_version``
    (2.13.0) and ``library_version`` (5.24.0, also the ``transformers`` column); the
    ``backend`` is the compiler. A failed result gets an ``error`` naming the model unless one
    is given; every row gets a small ``run_py`` naming the model and the pair.
    """
    minutes = fields.pop("minutes", 0)
    compiler = fields.pop("compiler", "inductor")
    compiler_version = fields.pop("compiler_version", "2.13.0")
    library_version = fields.pop("library_version", "5.24.0")
    failed = result.startswith("FAIL")
    defaults: dict[str, Any] = {
        "library": "transformers",
        "library_version": library_version,
        "transformers": library_version,
        "compiler": compiler,
        "compiler_version": compiler_version,
        "device": "cpu",
        "backend": compiler,
        "dtype": "float32",
        "neuron_cores": 1,
        "runner": "dense",
        "task": "text-generation",
        "wall_s": 2.5,
        "hbm_peak_gb": 0.25,
        "hbm_capacity_gb": 16.0,
        "cpu_match": None if failed else "32/32 tokens",
        "error": f"RuntimeError: {model_id} broke\nTraceback (most recent call last): ..."
        if failed
        else None,
        "run_py": f"# run.py of {model_id} on {compiler}-{compiler_version}\nprint('run')\n",
    }
    return validate_row(
        {
            "model_id": model_id,
            "result": result,
            "tested_at": T0 + dt.timedelta(minutes=minutes),
            **defaults,
            **fields,
        },
        SUPPORT,
    )


def pair_of(row: dict[str, Any]) -> str:
    """The pair path (relative to ``data/``) a row belongs to."""
    return pair_relpath(
        row["compiler"], row["compiler_version"], row["library"], row["library_version"]
    )


def write_results(results: Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Record ``rows`` under ``results`` (each in its pair's file) through a journal and a merge.

    Returns ``results``. Raises AssertionError when the merge reports a problem.
    """
    with Journal(results) as journal:
        for row in rows:
            journal.append(pair_of(row), row)
        path = journal.path
    report = merge_journals(results, include=[path])
    assert report.ok, report
    return results
