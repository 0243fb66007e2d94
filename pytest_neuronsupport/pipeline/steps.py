"""One model's test, step by step: plan, size, render, skip if unchanged, install the packages
it needs, lease, isolate, classify (and, with ``--neuron-minify``, minify a failure), and the row
it comes to.

:meth:`Pipeline.test` takes a list entry and returns :class:`Tried` (a row to record) or
:class:`NotRun` (the model is skipped without a row: its ``run.py`` is the one recorded, or the
sweep's ``--neuron-limit`` is reached). Whatever goes wrong on the way, in the model's run or in
this code, the model gets its row. Nothing here knows pytest: the session and the items call it.

A run whose load fails for a library transformers says is missing runs once more with it
(:func:`.packages.missing_library`); its row is the second run's, saying so.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset import layout
from pytest_neuronsupport.dataset.schema import row_to_json, validate_row
from pytest_neuronsupport.dataset.store import find_row
from pytest_neuronsupport.hookspec import Hooks
from pytest_neuronsupport.modellist import ZOO_PREFIX, ModelSpec
from pytest_neuronsupport.options import Settings
from pytest_neuronsupport.pipeline import classify, minify, packages
from pytest_neuronsupport.pipeline.budget import Budget
from pytest_neuronsupport.pipeline.isolate import ISOLATIONS, Executor, Outcome, RunRequest
from pytest_neuronsupport.pipeline.leases import CoreAllocator
from pytest_neuronsupport.pipeline.plan import Plan, plan, resolve_checkpoint
from pytest_neuronsupport.pipeline.reference import reference_file
from pytest_neuronsupport.pipeline.render import RunParams, ScriptPlan, render, sha256
from pytest_neuronsupport.pipeline.sizing import size
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.runners.lib.protocol import REFERENCE_ENV, Result
from pytest_neuronsupport.stack import LIBRARY


@dataclass(frozen=True)
class Tried:
    """A model's row (JSON form: what a report carries and a journal stores), and its script."""

    row: dict[str, Any]
    run_py: Path | None = None


@dataclass(frozen=True)
class NotRun:
    """A model skipped without a row."""

    reason: str
    #: Its ``run.py`` is the one recorded (else: the sweep's limit is reached).
    unchanged: bool = False


#: What every run's environment has unless the sweep's says otherwise.
RUN_ENV: dict[str, str] = {
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


class Pipeline:
    """The test of one model at a time, with one sweep's settings."""

    def __init__(
        self,
        settings: Settings,
        runners: Runners,
        stack: dict[str, str | None],
        sweep_id: str,
        hooks: Hooks | None = None,
    ) -> None:
        self.settings = settings
        self.runners = runners
        self.stack = stack
        self.sweep_id = sweep_id
        self.hooks = hooks or Hooks()
        self._executor: Executor | None = None

    # --- where things go ----------------------------------------------------------------------

    @property
    def compiler(self) -> tuple[str, str]:
        return self.settings.device.compiler(self.settings.backend)

    @property
    def library_version(self) -> str:
        return self.stack.get("library_version") or "unknown"

    @property
    def pair(self) -> str:
        """The dataset file this sweep writes, relative to ``<results>/data``."""
        return layout.pair_relpath(*self.compiler, LIBRARY, self.library_version)

    @cached_property
    def budget(self) -> Budget:
        return Budget(self.settings.limit, self.settings.results / ".sweeps", self.sweep_id)

    @cached_property
    def allocator(self) -> CoreAllocator:
        """Leases of this machine's cores of the device, shared by every sweep on it."""
        device = self.settings.device
        return CoreAllocator(self.settings.leases / f"{device.name}.json", device.core_count())

    @property
    def executor(self) -> Executor:
        """The fork server starts with the first run: a sweep that runs nothing never pays."""
        if self._executor is None:
            self._executor = ISOLATIONS[self.settings.isolation]()
        return self._executor

    @cached_property
    def judge(self) -> str | None:
        """The English judge's checkpoint (a zoo model is built on first use)."""
        value = self.settings.judge
        if value is None:
            return None
        folder = self.settings.workdir / value
        if not value.startswith(ZOO_PREFIX) and folder.is_dir():
            return str(folder.resolve())
        return resolve_checkpoint(value, None, self.settings.cache)[0]

    # --- the test of one model ------------------------------------------------------------------

    def test(self, spec: ModelSpec) -> Tried | NotRun:
        """Plan, size, render, run and classify one model."""
        if spec.exclusion is None and self.budget.exhausted():  # an exclusion costs nothing
            return NotRun(f"--neuron-limit {self.settings.limit} reached")
        row = self.base_row(spec)
        try:
            tried = self._test(spec, row)
        except Exception:  # a bug of ours must not cost the model its row
            error = traceback.format_exc()
            why = f"pytest-neuronsupport could not run it: {error.strip().splitlines()[-1]}"
            tried = Tried({**row, **classify.crashed(why, error)})
        return tried if isinstance(tried, NotRun) else self.decided(tried, spec)

    def _test(self, spec: ModelSpec, row: dict[str, Any]) -> Tried | NotRun:
        s = self.settings
        planned = size(
            plan(spec, s.cache, self.runners),
            max_cores=s.max_cores,
            device_cores=s.device.core_count(),
            core_capacity_gb=s.core_capacity_gb,
        )
        if planned.exclusion is not None:
            return Tried({**row, **classify.excluded(planned.exclusion)})
        if planned.load_error is not None or planned.runner is None:
            if not self.budget.take():
                return NotRun(f"--neuron-limit {s.limit} reached")
            return Tried({**row, **classify.load_failed(str(planned.load_error))})
        text = render(*self.script(planned), self.stack)
        unchanged = self.unchanged(spec.id, sha256(text))
        if unchanged is not None:
            return NotRun(unchanged, unchanged=True)
        if not self.budget.take():
            return NotRun(f"--neuron-limit {s.limit} reached")
        run_py = layout.run_py_path(s.results, self.pair, spec.id)
        run_py.parent.mkdir(parents=True, exist_ok=True)
        needs = spec.packages
        fields = self.attempt(planned, needs, run_py, text)
        missing = None
        if fields["result"] == Result.FAIL_LOAD:
            missing = packages.missing_library(fields.get("error"), spec.packages)
        if missing is not None:  # once: the retry's own missing library is its verdict
            needs = (*spec.packages, missing)
            text = render(*self.script(planned, needs), self.stack)
            fields = classify.retried(self.attempt(planned, needs, run_py, text), missing, fields)
        if s.minify and minify.wanted(fields, planned.cores):
            fields = self.minified(planned, needs, run_py, fields)
        fields.update(
            revision=planned.revision,
            runner=planned.runner.column,
            neuron_cores=planned.cores,
            hbm_capacity_gb=round(s.core_capacity_gb * planned.cores, 6),
            run_py=text,
            run_py_sha256=sha256(text),
        )
        return Tried({**row, **fields}, run_py)

    def base_row(self, spec: ModelSpec) -> dict[str, Any]:
        """The fields of a model's row known before it runs."""
        compiler, version = self.compiler
        return {
            "model_id": spec.id,
            "library": LIBRARY,
            "selection_rank": spec.selection_rank,
            "task": spec.task,
            "revision": spec.revision,
            "device": self.settings.device.name,
            "backend": self.settings.backend,
            "compiler": compiler,
            "compiler_version": version,
            "dtype": self.settings.dtype,
            "tested_at": datetime.now(UTC).isoformat(),
            **self.stack,
        }

    def attempt(
        self, planned: Plan, needs: tuple[str, ...], run_py: Path, text: str
    ) -> dict[str, Any]:
        """Write ``run.py``, install the packages it needs, run it: the row fields it comes to."""
        run_py.write_text(text, encoding="utf-8")
        overlay = None
        if needs:
            try:
                overlay = packages.overlay(needs, self.settings.cache, self.settings.timeout_s)
            except packages.PackageError as exc:
                return classify.not_installed(exc)
        return classify.ran(self.execute(planned, run_py, overlay))

    def minified(
        self, planned: Plan, needs: tuple[str, ...], run_py: Path, fields: dict[str, Any]
    ) -> dict[str, Any]:
        """The failed run again as ``minify.py``, under PyTorch's minifier: the row fields with
        its repro (:mod:`.minify`)."""
        params, code = self.script(planned, needs)
        script = run_py.with_name(minify.SCRIPT)
        code = replace(code, minified=True, script_name=minify.SCRIPT)
        script.write_text(render(params, code, self.stack), "utf-8")
        s = self.settings
        overlay = packages.overlay(needs, s.cache, s.timeout_s) if needs else None  # made
        outcome = self.execute(planned, script, overlay, s.minify_timeout_s)
        return minify.with_repro(fields, outcome, run_py.parent)

    def script(
        self, planned: Plan, needs: tuple[str, ...] | None = None
    ) -> tuple[RunParams, ScriptPlan]:
        """What the model's ``run.py`` is made of: its parameters and its code (and the packages
        it needs beyond the stack: the list entry's, unless ``needs`` says otherwise)."""
        s, runner = self.settings, planned.runner
        assert runner is not None
        judged = runner.generates and self.judge is not None
        params = RunParams(
            model_id=planned.spec.id,
            checkpoint=planned.checkpoint,
            runner=runner.name,
            device=s.device.name,
            backend=s.backend,
            dtype=s.dtype,
            fullgraph=s.device.fullgraph,
            cores=planned.cores,
            revision=planned.revision,
            prefill_chunk=s.prefill_chunk if runner.generates else None,
            judge=self.judge if judged else None,
        )
        several = planned.cores > 1
        code = ScriptPlan(
            runner_module=runner.module,
            runner_entry=runner.entry_for(planned.config, planned.cores),
            entry="main_ranks" if several else "main",
            ops_class=s.device.rank_ops if several else s.device.ops,
            runner_column=runner.column,
            judged=judged,
            imported_backend=":" in s.backend,
            packages=planned.spec.packages if needs is None else needs,
        )
        return params, code

    def unchanged(self, model_id: str, sha: str) -> str | None:
        """Why a model is not run again: its run.py is the one recorded for it in this pair."""
        if self.settings.rerun:
            return None
        recorded = find_row(self.settings.results, self.pair, model_id)
        if recorded is None or recorded["run_py_sha256"] != sha:
            return None
        when = recorded["tested_at"].isoformat(timespec="seconds") if recorded["tested_at"] else "?"
        return f"unchanged since {when} ({recorded['result']}); --neuron-rerun runs it again"

    def execute(
        self,
        planned: Plan,
        run_py: Path,
        overlay: Path | None = None,
        timeout_s: float | None = None,
    ) -> Outcome:
        """Run a model's script with its CPU reference (the file that holds or will hold it)
        isolated on its cores (importing the packages of ``overlay`` before the environment's;
        ``timeout_s``: the sweep's own). ``run.py`` writes ``verdict.json`` and ``output.log``,
        another script ``<stem>.json`` and ``<stem>.log``."""
        # hashing the checkpoint's files happens before the lease: the cores wait for no I/O
        reference = reference_file(self.settings.cache / "references", planned, self.stack)
        env = {}
        if reference is not None:
            reference.parent.mkdir(parents=True, exist_ok=True)
            env[REFERENCE_ENV] = str(reference)
        stem = run_py.stem
        names = ("verdict.json", "output.log") if stem == "run" else (f"{stem}.json", f"{stem}.log")
        return self.run_isolated(run_py, planned.cores, overlay, timeout_s, env, names)

    def run_isolated(
        self,
        script: Path,
        cores: int,
        overlay: Path | None = None,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        names: tuple[str, str] = ("verdict.json", "output.log"),
        defaults: Mapping[str, str] = RUN_ENV,
    ) -> Outcome:
        """Lease ``cores``, run ``script`` isolated and pinned, and wait for it: the sweep's
        environment over ``defaults``, the device's, then ``env``; its verdict and log in
        ``names`` beside it; ``timeout_s``: the sweep's own unless given."""
        s = self.settings
        environment = {**defaults, **os.environ}
        environment.update(s.device.run_env(s.cache))
        environment.pop(REFERENCE_ENV, None)
        environment.update(env or {})
        with self.allocator.lease(cores) as lease:
            environment.update(s.device.pin_env(lease.cores))
            request = RunRequest(
                script=script,
                cwd=s.workdir,
                env=environment,
                verdict_path=script.parent / names[0],
                log_path=script.parent / names[1],
                timeout_s=timeout_s or s.timeout_s,
                max_memory_gb=s.max_memory_gb,
                cpus=s.device.cpus(lease.cores),
                python_path=() if overlay is None else (overlay,),
            )

            def started(pid: int) -> None:
                self.allocator.add_pid(lease, pid)  # the run holds the lease too

            return self.executor.run(request, started=started)

    def decided(self, tried: Tried, spec: ModelSpec) -> Tried:
        """The row as recorded: users' hooks may replace its result and change its fields; it
        must then fit the dataset's schema."""
        row = tried.row
        try:
            verdict = self.hooks.verdict(row, spec)
            if verdict is not None:
                classify.overridden(row, verdict, "pytest_neuronsupport_verdict")
            self.hooks.row(row, spec)
            return Tried(row_to_json(validate_row(row)), tried.run_py)
        except Exception as exc:
            why = f"its row could not be recorded: {type(exc).__name__}: {exc}"
            return Tried(classify.unrecordable(row, why), tried.run_py)

    def crashed(self, spec: ModelSpec, why: str) -> dict[str, Any]:
        """The row of a model whose process died while running it (an xdist worker)."""
        return row_to_json(validate_row({**self.base_row(spec), **classify.crashed(why)}))
