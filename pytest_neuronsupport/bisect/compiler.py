"""Bisecting inside the compiler: which stage, subsystem and application breaks a compile.

The model's newest failing row (FAIL(gen), FAIL(forward), FAIL(output)) is run again first: its
failure, here, is the one narrowed (a model that passes here has nothing to narrow). Then:

* **On inductor** (any device but Neuron, a backend of one's own included): PyTorch's own
  ``torch._inductor.compiler_bisector``, in its ``run`` mode, runs the model's script once per
  step (through :mod:`.step`: isolated, its verdict read as a sweep reads it; 0 when it passed).
  It tries the backends eager, aot_eager, aot_eager_decomp_partition and inductor; in the first
  that fails, it disables each subsystem in turn (pre-, joint- and post-grad passes, some
  config flags, cudagraphs, lowerings) until one fixes the failure, then bisects which of that
  subsystem's applications breaks it. The script runs with inductor's
  ``bisect_keep_custom_backend_for_inductor`` set, so that at the inductor stage the run's own
  backend (one of your own built on inductor's ``compile_fx``) is what is bisected; at the
  stages before it, the bisector's stock backends stand in. The runs share a compile cache of
  their own (the bisector keeps its state there), dropped at the end.
* **On Neuron** (or when asked): the existing minifier (:mod:`pytest_neuronsupport.pipeline.
  minify`): the graph that fails alone, shrunk to the operator that breaks it, as ``repro.py``.

What the bisector cannot do (torch 2.13, read from its source): it knows only good and bad (a
run failing another way counts as bad); a failure of the Neuron backend, or of any backend not
built on inductor, is beyond it (the stock backends stand in for it before the inductor stage,
and it has no subsystems of its own); it bisects inductor's and aot_autograd's own passes and
lowerings, not a custom backend's; a subsystem a failure needs two of to show is reported as
the first alone; its ``debug_info`` names the application (a pass's name, a node's ``repr``)
only for the last few it tried.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.bisect.ends import model_rows
from pytest_neuronsupport.bisect.outcomes import Signature, error_line, signature
from pytest_neuronsupport.bisect.trial import needs_of, with_checkpoint
from pytest_neuronsupport.dataset import layout
from pytest_neuronsupport.dataset.bisect import BISECT
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.pipeline import classify, packages
from pytest_neuronsupport.pipeline.modelrun import ScriptRun, run_script
from pytest_neuronsupport.pipeline.sweep import RUN_ENV, Sweep
from pytest_neuronsupport.runners.lib.processes import COMPILE_THREADS_ENV
from pytest_neuronsupport.runners.lib.protocol import Result

#: The results a compile can be narrowed for.
NARROWED: Final = (Result.FAIL_GEN, Result.FAIL_FORWARD, Result.FAIL_OUTPUT)
#: How it is narrowed: ``auto`` (the minifier on Neuron, else the bisector) or either.
METHODS: Final = ("auto", "bisector", "minifier")
#: What the bisected script sets before its entry runs.
KEEP_BACKEND: Final = (
    "import torch._inductor.config as _bisected\n"
    "_bisected.test_configs.bisect_keep_custom_backend_for_inductor = True\n\n"
)
_MAIN: Final = 'if __name__ == "__main__":'
_COMPLETE: Final = re.compile(r"^Bisection complete: (?P<what>.+)$", re.MULTILINE)


class CompilerError(ValueError):
    """A compile that cannot be narrowed (no failing row); the message says why."""


def failing_row(results: Path, model_id: str) -> tuple[str, dict[str, Any]]:
    """The model's newest row whose compile failed or whose output was wrong, and its pair.

    Raises:
        CompilerError: the model has none.
    """
    rows = [(p, r) for p, r in model_rows(results, model_id) if r.get("result") in NARROWED]
    if not rows:
        raise CompilerError(
            f"{model_id}: no row of it failed to compile, run or match "
            f"({', '.join(str(r) for r in NARROWED)}) in {Path(results) / 'data'}"
        )
    return max(rows, key=lambda m: str(m[1].get("tested_at") or ""))


def bisected_script(text: str) -> str:
    """``text`` (a ``run.py``) that keeps its own backend at inductor's stage of a bisection."""
    at = text.rindex(_MAIN)
    return text[:at] + KEEP_BACKEND + text[at:]


@dataclass
class CompilerReport:
    """What narrowing a compile found."""

    model_id: str
    backend: str
    method: str
    #: ``found``, ``no issue found``, ``does not fail here``, ``no repro``.
    status: str
    started: datetime
    pair: str = ""
    folder: Path | None = None
    target: Signature | None = None
    error: str = ""
    stage: str | None = None
    subsystem: str | None = None
    application: int | None = None
    application_info: str | None = None
    #: Each run of the bisector (what it tested, what the run came to), or the minifier's.
    steps: list[dict[str, Any]] = field(default_factory=list)
    #: The minifier's: the ops left, its note, ``repro.py``.
    repro: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def found(self) -> bool:
        return self.status == "found"

    @property
    def answer(self) -> str:
        """``breaks in inductor: post_grad_passes, application 1 (post_grad_custom_pre_pass)``."""
        if not self.found:
            return f"{self.backend}: {self.status}"
        if self.method == "minifier":
            ops, note = self.repro.get("ops") or [], self.repro.get("note")
            if not ops:  # the compiler refuses a graph of no op at all: not an op's failure
                return f"breaks on any graph, whatever its ops ({note})"
            return f"breaks at op {ops[-1]} ({note})"
        said = f"breaks in {self.stage}"
        if self.subsystem:
            said += f": {self.subsystem}"
        if self.application is not None and self.subsystem:
            said += f", application {self.application}"
            said += f" ({self.application_info})" if self.application_info else ""
        return said

    def lines(self) -> list[str]:
        """The one-screen answer."""
        lines = [f"{self.model_id}: {self.answer}"]
        if self.target is not None:
            lines.append(f"  the failure narrowed: {self.target.text}")
            lines.append(f"    {self.error}")
        by = "PyTorch's CompilerBisector" if self.method == "bisector" else "the minifier"
        lines.append(f"  by {by}, {len(self.steps)} runs, backend {self.backend}")
        for step in self.steps:
            tested = ", ".join(f"{k}={v}" for k, v in (step.get("tested") or {}).items())
            lines.append(f"    {tested or 'as compiled'}: {step.get('outcome')}")
        if self.repro.get("path"):
            lines.append(f"  repro.py: {self.repro['path']}")
        if self.folder is not None:
            lines.append(f"  run.py: {self.folder / 'run.py'}")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "compiler",
            "model_id": self.model_id,
            "package": self.backend,
            "method": self.method,
            "status": self.status,
            "answer": self.answer,
            "signature": None if self.target is None else self.target.to_dict(),
            "error": self.error,
            "stage": self.stage,
            "subsystem": self.subsystem,
            "application": self.application,
            "application_info": self.application_info,
            "steps": self.steps,
            "repro": self.repro,
            "pair": self.pair,
            "started": self.started.isoformat(),
            "wall_s": round(self.wall_s, 3),
        }

    def row(self, stack: Mapping[str, str | None], base: Mapping[str, Any]) -> dict[str, Any]:
        """The ``bisect/`` table's row."""
        script = None if self.folder is None else self.folder / "run.py"
        return {
            **{k: v for k, v in base.items() if k in BISECT.schema.names},
            **{k: v for k, v in stack.items() if k in BISECT.schema.names},
            "model_id": self.model_id,
            "kind": "compiler",
            "package": self.backend,
            "status": self.status,
            "answer": self.answer,
            "runs": len(self.steps),
            "result": Result.PASS if self.target is None else self.target.result,
            "error_bad": self.error or None,
            "signature": None if self.target is None else self.target.text,
            "stage": self.stage,
            "subsystem": self.subsystem,
            "application": self.application,
            "application_info": self.application_info,
            "run_py": script.read_text("utf-8") if script and script.is_file() else None,
            "report": json.dumps(self.to_json(), sort_keys=True, default=str),
            "wall_s": round(self.wall_s, 3),
            "tested_at": self.started,
        }


def bisect_compiler(
    sweep: Sweep,
    pair: str,
    row: Mapping[str, Any],
    say: Callable[[str], None] = print,
    method: str = "auto",
) -> CompilerReport:
    """Narrow ``row``'s failure inside its compiler (the module's docstring)."""
    s, model_id = sweep.settings, str(row["model_id"])
    folder = layout.run_dir(s.results, pair, model_id) / "bisect" / "compiler"
    text = with_checkpoint(str(row["run_py"]), model_id, s.cache)
    if method == "auto":
        method = "minifier" if s.device.name == "neuron" else "bisector"
    report = CompilerReport(model_id, s.backend, method, "does not fail here", datetime.now(UTC))
    report.pair, report.folder = pair, folder
    t0 = time.monotonic()
    say(f"bisect {model_id} inside {s.backend} ({method}): its failure, run again first")
    cores = int(row.get("neuron_cores") or 1)
    fields = _run(sweep, folder / "run.py", text, cores)
    report.target, report.error = signature(fields), error_line(fields)
    say(f"    {report.target.text if report.target else 'PASS'}")
    if report.target is not None:
        if method == "minifier":
            _minified(sweep, row, folder, fields, report)
        else:
            _bisector(sweep, folder, text, cores, report, say)
    report.wall_s = time.monotonic() - t0
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bisect.json").write_text(json.dumps(report.to_json(), indent=1) + "\n", "utf-8")
    return report


def _run(sweep: Sweep, script: Path, text: str, cores: int) -> dict[str, Any]:
    run = ScriptRun(text, script, cores, needs=needs_of(text), step="bisect compiler")
    return classify.ran(run_script(sweep, run))


def parse_result(output: str) -> dict[str, Any] | None:
    """What ``compiler_bisector run`` printed last: its ``BisectionResult`` as a dict (None:
    "no issue found", or nothing)."""
    said = [m["what"] for m in _COMPLETE.finditer(output)]
    if not said or not said[-1].startswith("BisectionResult("):
        return None
    call = ast.parse(said[-1], mode="eval").body
    assert isinstance(call, ast.Call)
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}


def _bisector(
    sweep: Sweep,
    folder: Path,
    text: str,
    cores: int,
    report: CompilerReport,
    say: Callable[[str], None],
) -> None:
    """PyTorch's bisector in its ``run`` mode, one step a run of the script (:mod:`.step`)."""
    s = sweep.settings
    script, expect, log = folder / "bisected.py", folder / "failure.json", folder / "steps.jsonl"
    script.write_text(bisected_script(text), "utf-8")
    assert report.target is not None
    expect.write_text(json.dumps(report.target.to_dict()) + "\n", "utf-8")
    log.unlink(missing_ok=True)
    state = s.cache / "bisect" / "compiler" / uuid.uuid4().hex[:12]
    env = sweep.environment(RUN_ENV, {"TORCHINDUCTOR_CACHE_DIR": str(state)})
    env[COMPILE_THREADS_ENV] = "1"  # no pool of compile workers started each run
    needs = needs_of(text)
    if needs:
        overlay = str(packages.overlay(needs, s.cache, s.timeout_s))
        env["PYTHONPATH"] = ":".join(filter(None, [overlay, env.get("PYTHONPATH", "")]))
    step = ["--script", script, "--expect", expect, "--log", log, "--timeout", s.timeout_s]
    command = [
        *(sys.executable, "-m", "torch._inductor.compiler_bisector", "run"),
        *(sys.executable, "-m", "pytest_neuronsupport.bisect.step", *map(str, step)),
    ]
    try:
        with sweep.allocator.lease(cores) as lease:  # every step's run holds them
            env.update(s.device.lease_env(lease.cores, s.at_once))
            output = _stream(command, s.workdir, env, say)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    found = parse_result(output)
    report.steps = [json.loads(line) for line in log.read_text("utf-8").splitlines() if line]
    if found is None:
        report.status = "no issue found"
        return
    report.status = "found"
    report.stage, report.subsystem = found.get("backend"), found.get("subsystem")
    report.application = found.get("bisect_number")
    report.application_info = found.get("debug_info")


def _stream(command: list[str], cwd: Path, env: dict[str, str], say: Callable[[str], None]) -> str:
    """Run ``command``, each line of its output said as it comes; all of it."""
    lines: list[str] = []
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                say(f"    {line.rstrip()}")
        except BaseException:
            proc.kill()
            raise
    return "".join(lines)


def _minified(
    sweep: Sweep,
    row: Mapping[str, Any],
    folder: Path,
    fields: dict[str, Any],
    report: CompilerReport,
) -> None:
    """The minifier on the failing run: the graph that fails alone and its operator."""
    from pytest_neuronsupport.modes.support import minified

    spec = ModelSpec(
        id=str(row["model_id"]),
        source=folder,
        line=0,
        runner=row.get("runner"),
        task=row.get("task"),
        revision=row.get("revision"),
    )
    planned = sweep.plan(spec)
    done = minified(sweep, planned, (), folder / "run.py", fields)
    note = json.loads(done.get("check") or "{}").get("minify")
    repro = folder / "repro.py"
    report.repro = {
        "ops": done.get("repro_ops") or [],
        "before": done.get("repro_ops_before"),
        "after": done.get("repro_ops_after"),
        "note": note,
        "path": str(repro) if repro.is_file() else None,
    }
    report.steps = [{"tested": {"minifier": "minify.py"}, "outcome": note}]
    report.status = "found" if done.get("repro_py") else "no repro"
