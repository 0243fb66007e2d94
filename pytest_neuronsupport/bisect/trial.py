"""One candidate tried: the model's script, run at that candidate as a sweep runs it.

The script is the model's recorded ``run.py``, its header saying the candidate (the stack line
and the ``pip install`` line name its version, and a ``# bisect:`` line what was moved), so each
candidate's ``run.py`` is a standalone reproduction of its verdict. It is written under the
model's run folder (``bisect/<package>/<version>/run.py``) and runs on the model's path
(:func:`~pytest_neuronsupport.pipeline.modelrun.run_script`): the packages its header names
overlaid, the candidate's overlay first on its ``PYTHONPATH``, its cores leased, isolated and
watched; its CPU reference is computed in the run itself, by the candidate's own library. What
it comes to is read as a sweep reads a run (:func:`~pytest_neuronsupport.pipeline.classify.ran`)
and judged against the bisected failure (:func:`~pytest_neuronsupport.bisect.outcomes.judge`).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.bisect.environments import Environment
from pytest_neuronsupport.bisect.outcomes import Outcome, Signature, error_line, judge, signature
from pytest_neuronsupport.modellist import ZOO_PREFIX
from pytest_neuronsupport.pipeline import classify, packages
from pytest_neuronsupport.pipeline.modelrun import ScriptRun, run_script
from pytest_neuronsupport.pipeline.sweep import Sweep

#: What a trial keeps of its run's row fields (the report's and the row's).
KEPT: Final = ("result", "error", "error_site", "notes", "cpu_match", "english", "check", "wall_s")
#: The header's stack packages: not what the script needs beyond the stack.
_STACK_PINS: Final = frozenset({"transformers", "accelerate"})


@dataclass(frozen=True)
class Trial:
    """One run of a candidate (or why there was none: a skip)."""

    version: str
    outcome: Outcome
    #: The run's row fields (:data:`KEPT`); empty for a skip.
    fields: dict[str, Any] = field(default_factory=dict)
    signature: Signature | None = None
    #: Its script (None: no run).
    script: Path | None = None
    environment: Environment | None = None
    #: Why it is a skip.
    why: str | None = None

    @property
    def error(self) -> str:
        """The first line of its failure (empty for a PASS or a skip)."""
        return error_line(self.fields)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "outcome": str(self.outcome),
            "result": self.fields.get("result"),
            "signature": None if self.signature is None else self.signature.to_dict(),
            "error": self.error or None,
            "skip": self.why,
            "run_py": None if self.script is None else str(self.script),
            "overlay": None
            if self.environment is None or self.environment.folder is None
            else str(self.environment.folder),
            "wall_s": self.fields.get("wall_s"),
        }


def _safe(value: str) -> str:
    return json.dumps(value, ensure_ascii=True)


def candidate_script(text: str, package: str, version: str, column: str | None) -> str:
    """``text`` (a recorded ``run.py``) with its header saying the candidate: the stack line's
    ``column`` and the ``pip install`` line at ``version``, and a ``# bisect:`` line."""
    lines = text.split("\n")
    moved = f"{package}=={version}"
    for i, line in enumerate(lines[:12]):
        if line.startswith("# stack: ") and column:
            lines[i] = re.sub(
                rf"\b{re.escape(column)} \"[^\"]*\"", f"{column} {_safe(version)}", line
            )
        elif line.startswith("# pip install "):
            words = [] if "(nothing beyond the stack)" in line else shlex.split(line[14:])
            kept = [w for w in words if packages.base_name(w) != packages.canonical(package)]
            lines[i] = "# pip install " + " ".join(_safe(w) for w in [moved, *kept])
            note = f"# bisect: {_safe(package)} at {_safe(version)}, the rest as recorded"
            lines.insert(i + 1, note)
            break
    return "\n".join(lines)


def needs_of(text: str, moved: str | None = None) -> tuple[str, ...]:
    """The packages a ``run.py`` needs beyond the stack: its ``pip install`` line's, less the
    stack's own pins and the package a bisection ``moved``."""
    left_out = _STACK_PINS | ({packages.canonical(moved)} if moved else set())
    for line in text.split("\n")[:12]:
        if line.startswith("# pip install ") and "(nothing beyond the stack)" not in line:
            words = shlex.split(line[14:])
            return tuple(w for w in words if packages.base_name(w) not in left_out)
    return ()


def with_checkpoint(text: str, model_id: str, cache: Path) -> str:
    """``text`` with a zoo model's checkpoint in this cache, where the recorded one is gone
    (the zoo rebuilds it byte for byte); the script as it is otherwise."""
    found = re.search(r"'checkpoint': ('(?:[^'\\]|\\.)*')", text)
    if found is None or not model_id.startswith(ZOO_PREFIX):
        return text
    import ast

    recorded = ast.literal_eval(found[1])
    if Path(recorded).exists():
        return text
    from pytest_neuronsupport.pipeline.plan import resolve_checkpoint

    here = resolve_checkpoint(model_id, None, cache)[0]
    return text.replace(found[0], f"'checkpoint': {here!r}", 1)


def run_trial(
    sweep: Sweep,
    script: Path,
    text: str,
    cores: int,
    environment: Environment,
    target: Signature | None,
) -> Trial:
    """Run ``text`` (a candidate's script) at ``environment`` into ``script``; its trial,
    judged against ``target`` (None: the bad end's own run, any failure is bad)."""
    overlays = () if environment.folder is None else (environment.folder,)
    step = f"bisect {environment.package} {environment.version}"
    needs = needs_of(text, environment.package)
    run = ScriptRun(text, script, cores, needs=needs, overlays=overlays, step=step)
    try:
        fields = classify.ran(run_script(sweep, run))
    except packages.PackageError as exc:  # what the script needs beside it cannot install
        why = f"its packages cannot install beside it: {exc.reason}"
        return Trial(environment.version, Outcome.SKIP, environment=environment, why=why)
    kept = {k: fields.get(k) for k in KEPT if fields.get(k) is not None}
    outcome = judge(fields, target)
    return Trial(environment.version, outcome, kept, signature(fields), script, environment)
