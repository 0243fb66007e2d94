"""Step 7 (``--neuron-minify``), minify: a failed run once more, under PyTorch's minifier.

A model whose compiled run raised (FAIL(gen), FAIL(forward)) or whose output is wrong
(FAIL(output)) on one core runs again as ``minify.py``: ``run.py``'s code with its entry wrapped
in :func:`~pytest_neuronsupport.runners.lib.minify.minified`, isolated like ``run.py`` and
bounded by ``--neuron-minify-timeout``. Its verdict's ``repro_py`` (the shrunken graph as a
standalone script) is written as ``repro.py`` beside ``run.py``, and joins the row with the ops
before and after. Minifying never changes a verdict: a minifier that finds nothing, fails or runs
out of time leaves the row as it was, with a note saying so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset.durable import atomic_write_text
from pytest_neuronsupport.pipeline.classify import ending
from pytest_neuronsupport.pipeline.isolate import Outcome
from pytest_neuronsupport.runners.lib.protocol import Result

#: The results a minifier can shrink a graph for.
MINIFIED = (Result.FAIL_GEN, Result.FAIL_FORWARD, Result.FAIL_OUTPUT)
#: The row columns a minify run gives.
REPRO_COLUMNS = ("repro_py", "repro_ops_before", "repro_ops_after", "repro_ops")
SCRIPT = "minify.py"
REPRO = "repro.py"


def wanted(fields: Mapping[str, Any], cores: int) -> bool:
    """Whether a run's outcome is one the minifier can shrink (a one-core compiled failure)."""
    return cores == 1 and fields.get("result") in MINIFIED


def with_repro(fields: dict[str, Any], outcome: Outcome, run_dir: Path) -> dict[str, Any]:
    """The row fields with the minify run's repro (written as ``repro.py``), or with a note
    saying why there is none; the verdict stays as it was."""
    verdict = outcome.verdict if not (outcome.timed_out or outcome.reason) else None
    done = dict(fields)
    if outcome.timed_out:
        note = f"the minifier did not finish in {outcome.timeout_s:g} s"
        done["notes"] = f"{fields.get('notes') or ''} [{note}]".strip()
    elif verdict is None:
        note = f"the minifier's run ended without a verdict: {ending(outcome)}"
    else:
        note = str(verdict.get("repro_note") or "the minifier gave no repro")
        if isinstance(verdict.get("repro_py"), str):
            atomic_write_text(run_dir / REPRO, verdict["repro_py"])
            done.update({column: verdict.get(column) for column in REPRO_COLUMNS})
    details = json.loads(done.get("check") or "{}")
    details["minify"] = note
    done["check"] = json.dumps(details, sort_keys=True, default=str)
    return done
