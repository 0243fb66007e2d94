"""One run of a compiler bisection: ``python -m pytest_neuronsupport.bisect.step``.

PyTorch's ``compiler_bisector run CMD`` runs ``CMD`` once per step, with the stage and the
subsystem it tests in the environment (``TORCH_BISECT_BACKEND``, ``TORCH_BISECT_SUBSYSTEM``,
``TORCH_BISECT_MAX``), and reads its exit status: 0 good, else bad. This is that command: it
runs the model's script in a fresh interpreter as a sweep does (isolated, watched, within its
timeout: :class:`~pytest_neuronsupport.pipeline.isolate.SubprocessExecutor`), reads the run as
a sweep reads it, and exits 0 when it passed, 1 when it failed (the same way as the failure
bisected, or otherwise: the bisector knows only good and bad); each run is a line of the
bisection's log (``--log``, JSON lines) and of its output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from pytest_neuronsupport.bisect.outcomes import Outcome, Signature, judge, signature
from pytest_neuronsupport.pipeline import classify
from pytest_neuronsupport.pipeline.isolate import RunRequest, SubprocessExecutor

#: What the bisector tells each run of what it tests.
BISECT_ENV: Final = ("TORCH_BISECT_BACKEND", "TORCH_BISECT_SUBSYSTEM", "TORCH_BISECT_MAX")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the script once; 0 when it passed, 1 when it failed."""
    parser = argparse.ArgumentParser(prog="python -m pytest_neuronsupport.bisect.step")
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--expect", type=Path, required=True, help="the failure's signature")
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args(argv)
    target = Signature.from_dict(json.loads(args.expect.read_text("utf-8")))
    folder = args.script.parent
    request = RunRequest(
        script=args.script,
        cwd=Path.cwd(),
        env=dict(os.environ),
        verdict_path=folder / "step.json",
        log_path=folder / "step.log",
        timeout_s=args.timeout,
    )
    fields = classify.ran(SubprocessExecutor().run(request))
    outcome = judge(fields, target)
    found = signature(fields)
    tested = {name: os.environ.get(name) for name in BISECT_ENV if os.environ.get(name)}
    line = {
        "tested": tested,
        "outcome": str(outcome),
        "result": fields.get("result"),
        "signature": None if found is None else found.text,
        "wall_s": fields.get("wall_s"),
    }
    with args.log.open("a", encoding="utf-8") as log:
        log.write(json.dumps(line, sort_keys=True) + "\n")
    what = ", ".join(f"{k.removeprefix('TORCH_BISECT_').lower()} {v}" for k, v in tested.items())
    print(f"[step] {what or 'as compiled'}: {outcome} ({line['signature'] or 'PASS'})", flush=True)
    return 0 if outcome is Outcome.GOOD else 1


if __name__ == "__main__":  # pragma: no cover - run by the bisector
    sys.exit(main())
