"""What a run and the plugin say to each other: the results, the marks a run prints, its verdict.

A run prints ``[neuronsupport] phase: <name>`` before each phase (load, gen, forward, reference,
judge), so that a run that dies can be placed, and ends by writing its verdict, a JSON object
whose keys are row columns (``result``, ``notes``, ``cpu_match``...) or details that go into the
row's ``check`` column, to the file named by ``--result PATH``, and on its last lines of output
after ``[neuronsupport] verdict:``.

Standard library only: the plugin imports this module without importing torch.
"""

from __future__ import annotations

import json
import os
from enum import StrEnum
from typing import Any

#: Printed before each phase, so a run that dies can be placed.
PHASE_MARK = "[neuronsupport] phase:"
#: Printed before the verdict's JSON near the end of a run's output.
VERDICT_MARK = "[neuronsupport] verdict:"
#: The file that holds (or will hold) the run's CPU reference (unset: computed every time).
REFERENCE_ENV = "NEURONSUPPORT_REFERENCE"
#: The dtypes a run may use, by their torch names.
DTYPES = ("bfloat16", "float16", "float32")


class Result(StrEnum):
    """The outcome of one model: the row's ``result`` column."""

    PASS = "PASS"
    FAIL_LOAD = "FAIL(load)"
    FAIL_GEN = "FAIL(gen)"
    FAIL_FORWARD = "FAIL(forward)"
    FAIL_TRAIN = "FAIL(train)"
    FAIL_OUTPUT = "FAIL(output)"
    FAIL_OTHER = "FAIL(other)"
    EXCLUDED = "EXCLUDED"


def phase(name: str) -> None:
    """Announce a phase (rank 0 only, on several cores)."""
    if os.environ.get("RANK", "0") == "0":
        print(f"{PHASE_MARK} {name}", flush=True)


def first_line(text: str | None, limit: int = 300) -> str:
    """The first non-blank line of ``text``, cut to ``limit`` characters."""
    line = (text or "").strip().split("\n")[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def write_verdict(verdict: dict[str, Any], argv: list[str]) -> None:
    """Print the verdict, and write it to the file that ``--result PATH`` names."""
    text = json.dumps(verdict, sort_keys=True, default=str)
    if "--result" in argv:  # a run killed while writing leaves no valid JSON: no verdict
        with open(argv[argv.index("--result") + 1], "w", encoding="utf-8") as f:
            f.write(text)
    summary = f"RESULT: {verdict['result']}  {verdict.get('cpu_match') or ''}"
    print(f"{VERDICT_MARK} {text}\n{summary}", flush=True)


def read_verdict(path: str) -> dict[str, Any] | None:
    """A verdict written by :func:`write_verdict`, or None when there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
