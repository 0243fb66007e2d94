"""One model's path, written once: every mode's script goes through :func:`run_script`.

A mode says what it renders (a :class:`ScriptRun`: the script's text, where it goes, the cores
it needs, the packages it imports, the file of its CPU reference) and makes its rows of the
:class:`~pytest_neuronsupport.pipeline.isolate.Outcome` it gets back. In between, in order:

1. **write** the script beside its outputs;
2. **overlay** the packages it needs beyond the stack (made once, before any lease:
   :func:`~pytest_neuronsupport.pipeline.packages.overlay`; a package that cannot be installed
   raises :class:`~pytest_neuronsupport.pipeline.packages.PackageError` for the mode to
   classify);
3. **reference**, off the lease: where the run holds its output to a CPU reference and none is
   kept for it yet, the same script runs first in a CPU-only process that holds no core
   (``$NEURONSUPPORT_REFERENCE_ONLY``: :func:`~pytest_neuronsupport.runners.lib.reference.
   reference_pass`) and keeps it in its file; the device's run then only reads it. A reference
   that failed is told to the device's run, which says so in its verdict; a runner that does
   not know the reference-only pass computes its reference in the leased run, as before;
4. **lease** the cores, **run** isolated and pinned (:meth:`~pytest_neuronsupport.pipeline.
   sweep.Sweep.run_isolated`, called from here only);
5. **time** the phases: the verdict's phase marks become the row's phase times
   (:func:`timed`), the reference's from its own pass; and the outcome's ``core_s``, the
   cores times the seconds the run held them (a row column, whatever the run came to).

So a change to how a model runs (where its reference is computed, what holds its cores) is
made here once, for the support, perf and training modes alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_neuronsupport.devices import Device
from pytest_neuronsupport.pipeline import packages
from pytest_neuronsupport.pipeline.isolate import Outcome
from pytest_neuronsupport.pipeline.leases import host_bytes
from pytest_neuronsupport.pipeline.sweep import RUN_ENV, Sweep
from pytest_neuronsupport.runners.lib.protocol import (
    REFERENCE_ENV,
    REFERENCE_FAILED_ENV,
    REFERENCE_ONLY_ENV,
    phase_times,
)

#: What a run reports for its phase times (:func:`timed`), not columns of its row.
TIMING_KEYS = ("phases", "dynamo", "counters")


@dataclass(frozen=True)
class ScriptRun:
    """One script of a model, as a mode renders it: what :func:`run_script` runs."""

    #: The script's text, and where it is written (its verdict and log go beside it).
    text: str
    script: Path
    #: Cores leased for it.
    cores: int
    #: Packages it imports beyond the stack (overlaid before the lease).
    needs: tuple[str, ...] = ()
    #: The file that holds (or will hold) its CPU reference; None: it holds its output to none.
    reference: Path | None = None
    #: The sweep's own timeout unless given.
    timeout_s: float | None = None
    #: Its environment over the sweep's (beside :data:`RUN_ENV` or ``defaults``).
    env: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, str] = field(default_factory=lambda: dict(RUN_ENV))
    #: What the status says it runs (a benchmark's configuration, a training trial).
    step: str = "run"
    #: The checkpoint's bf16 bytes (None: unknown): the host memory its run and its
    #: reference's pass hold (:func:`~pytest_neuronsupport.pipeline.leases.host_bytes`).
    weight_bytes: int | None = None
    #: Whether its CPU reference, where the run computes it, holds float64 beside fp32 (as its
    #: script was rendered): the host memory that computation holds.
    reference_fp64: bool = True
    #: Folders made already that it imports from before the environment and its ``needs``
    #: (a bisection's candidate: :mod:`pytest_neuronsupport.bisect.environments`).
    overlays: tuple[Path, ...] = ()

    @property
    def names(self) -> tuple[str, str]:
        """Its verdict's and its log's file names: ``run.py`` writes ``verdict.json`` and
        ``output.log``, another script ``<stem>.json`` and ``<stem>.log``."""
        stem = self.script.stem
        return ("verdict.json", "output.log") if stem == "run" else (f"{stem}.json", f"{stem}.log")


def run_script(sweep: Sweep, run: ScriptRun) -> Outcome:
    """Write, overlay, reference off the lease, lease, run isolated, time (the module's
    docstring): what became of the run, its verdict with its row's phase times."""
    s = sweep.settings
    run.script.parent.mkdir(parents=True, exist_ok=True)
    run.script.write_text(run.text, encoding="utf-8")
    overlays = run.overlays
    if run.needs:
        overlays = (*overlays, packages.overlay(run.needs, s.cache, s.timeout_s))
    env, before = dict(run.env), None
    if run.reference is not None:
        run.reference.parent.mkdir(parents=True, exist_ok=True)
        env[REFERENCE_ENV] = str(run.reference)
        if not run.reference.is_file():
            before = reference_pass(sweep, run, overlays)
            env.update(told(before))
    names, timeout_s = run.names, run.timeout_s
    host = host_bytes(run.weight_bytes, s.dtype, reference_dtype(run))  # one it computes too
    outcome = sweep.run_isolated(
        run.script, run.cores, overlays, timeout_s, env, names, run.defaults, run.step, host
    )
    verdict = timed(outcome.verdict, s.device, before)
    return replace(outcome, verdict=verdict, core_s=round(run.cores * outcome.wall_s, 3))


def reference_pass(sweep: Sweep, run: ScriptRun, overlays: tuple[Path, ...]) -> Outcome:
    """The script run for its CPU reference only, in a process that holds no core and sees no
    device (its verdict says ``reference_only``; a runner that ignores the pass fails it or
    says otherwise, and the leased run computes its reference as before)."""
    env = {**run.env, REFERENCE_ENV: str(run.reference), REFERENCE_ONLY_ENV: "1"}
    env.update(sweep.settings.device.reference_env(run.cores, sweep.settings.at_once))
    stem = f"{run.script.stem}-reference"
    host = host_bytes(run.weight_bytes, None, reference_dtype(run))
    return sweep.run_unleased(run.script, overlays, env, (f"{stem}.json", f"{stem}.log"), host)


def reference_dtype(run: ScriptRun) -> str | None:
    """The dtypes of the CPU reference a run computes (None: none): fp64 beside fp32 where its
    script says so (decided once, when it was rendered: the host's memory, read again now,
    may say otherwise while other runs hold it)."""
    if run.reference is None or run.reference.is_file():
        return None
    return "fp64" if run.reference_fp64 else "fp32"


def told(before: Outcome) -> dict[str, str]:
    """What the device's run is told of its reference's pass: why the reference failed, where
    it did (the run then says "the CPU run failed" without computing it again)."""
    verdict = before.verdict or {}
    if verdict.get("reference_only") and verdict.get("reference_error"):
        return {REFERENCE_FAILED_ENV: str(verdict["reference_error"])}
    return {}


def timed(
    verdict: dict[str, Any] | None, device: Device, before: Outcome | None = None
) -> dict[str, Any] | None:
    """A run's verdict with its phase times and its compile cache's counts as row columns, made
    of what it reported (its phase marks, dynamo's compile times and counters:
    :func:`~pytest_neuronsupport.runners.lib.entry.attempt`); graphs the run's runtime counted
    itself (TorchNeuron's metrics) stand over inductor's counters. ``before``: its reference's
    pass, whose time is the row's ``reference_s`` and whose ``reference_cached`` is the row's
    (the leased run's reference phase only read the file it wrote)."""
    if verdict is None or "phases" not in verdict:
        return verdict
    done = {k: v for k, v in verdict.items() if k not in TIMING_KEYS}
    compiles = (verdict.get("dynamo") or {}).get("_compile.compile_inner") or []
    done.update(phase_times(verdict["phases"], float(sum(compiles))))
    counted = device.graphs((verdict.get("counters") or {}).get("inductor") or {})
    done.update({k: v for k, v in counted.items() if done.get(k) is None})
    passed = (before.verdict or {}) if before is not None else {}
    if passed.get("reference_only") and passed.get("phases"):  # the reference was its pass's
        done["reference_s"] = phase_times(passed["phases"], 0.0).get("reference_s")
        done["reference_cached"] = bool(passed.get("reference_cached"))
    return done


def scratch_reference(cache: Path, script: Path) -> Path:
    """Where a run keeps a reference that nothing identifies for another sweep (a Hub id not in
    the cache): a file of its own, computed afresh each time, off the lease all the same."""
    digest = hashlib.sha256(str(script.resolve()).encode()).hexdigest()[:16]
    return cache / "references" / "scratch" / f"{digest}.pt"
