"""What a run and the plugin say to each other: the results, the marks a run prints, its verdict.

A run prints ``[neuronsupport] phase: <name>`` before each phase (load, gen, forward, reference,
judge), so that a run that dies can be placed, and keeps when each began (:data:`PHASES`, of
which the plugin makes the row's phase times: :func:`phase_times`). It ends by writing its
verdict, a JSON object whose keys are row columns (``result``, ``notes``, ``cpu_match``...) or
details that go into the row's ``check`` column, to the file named by ``--result PATH``, and on
its last lines of output after ``[neuronsupport] verdict:``.

Standard library only: the plugin imports this module without importing torch.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

#: Printed before each phase, so a run that dies can be placed.
PHASE_MARK = "[neuronsupport] phase:"
#: Printed before the verdict's JSON near the end of a run's output.
VERDICT_MARK = "[neuronsupport] verdict:"
#: The file that holds (or will hold) the run's CPU reference (unset: computed every time).
REFERENCE_ENV = "NEURONSUPPORT_REFERENCE"
#: Set: the run only computes its CPU reference into its file, off the device and its lease.
REFERENCE_ONLY_ENV = "NEURONSUPPORT_REFERENCE_ONLY"
#: Why the reference-only pass failed, told to the device's run (which then computes none).
REFERENCE_FAILED_ENV = "NEURONSUPPORT_REFERENCE_FAILED"
#: The run's parameters that change nothing of its CPU reference: where and how the device runs
#: it, and who judges its output. Every other parameter (the dtype first: the reference's eager
#: run is in the device's dtype) is part of the reference's key (:func:`reference_key`).
REFERENCE_IGNORES = ("model_id", "checkpoint", "device", "backend", "fullgraph", "cores", "judge")
#: The dtypes a run may use, by their torch names.
DTYPES = ("bfloat16", "float16", "float32")
#: When each phase of this run began, in order: ``(name, time.perf_counter())``.
PHASES: list[tuple[str, float]] = []


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
    """Announce a phase (rank 0 only, on several cores), and note when it began."""
    PHASES.append((name, time.perf_counter()))
    if os.environ.get("RANK", "0") == "0":
        print(f"{PHASE_MARK} {name}", flush=True)


def phase_times(marks: Sequence[Sequence[Any]], compile_s: float) -> dict[str, float | None]:
    """A support row's phase times in seconds, from a run's marks (``[phase, began]`` for each
    phase in order, then ``["", ended]``, on one clock: :data:`PHASES`) and dynamo's compile
    time: ``load_s``; ``compile_s``; ``generate_s`` (phase ``gen``) or ``forward_s``, each less
    ``compile_s`` (dynamo compiles on a compiled call's first run, in those phases);
    ``reference_s``; and ``wall_s``, from the first mark to the last. What they leave of
    ``wall_s`` is the judge's phase and the moments between phases."""
    if len(marks) < 2:
        return {}
    spent: dict[str, float] = {}
    for (name, start), (_, end) in itertools.pairwise(marks):
        spent[name] = spent.get(name, 0.0) + end - start
    run = {"generate_s": spent.get("gen"), "forward_s": spent.get("forward")}
    times = {k: v if v is None else v - compile_s for k, v in run.items()}
    times.update(load_s=spent.get("load"), compile_s=compile_s, reference_s=spent.get("reference"))
    times["wall_s"] = marks[-1][1] - marks[0][1]
    return {k: v if v is None else round(v, 3) for k, v in times.items()}


def reference_key(params: dict[str, Any]) -> dict[str, Any]:
    """What of a run's parameters its CPU reference depends on: all but :data:`REFERENCE_IGNORES`
    (the checkpoint is named by its files' hashes instead, by the plugin). A new parameter is
    in the key unless it is listed there: at worst a reference computed once more, never one
    computed for another run reused."""
    return {k: params[k] for k in sorted(params) if k not in REFERENCE_IGNORES}


def first_line(text: str | None, limit: int = 300) -> str:
    """The first non-blank line of ``text``, cut to ``limit`` characters."""
    line = (text or "").strip().split("\n")[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


#: A several-core run's error and note start with the rank that failed first (``rank 1 of 2: ``,
#: ranks.py; ``rank 1 of 2 `` and how its process ended, where it said nothing).
RANK_PREFIX = re.compile(r"rank \d+ of \d+:?[ \t]*")


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
