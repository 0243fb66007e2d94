"""The support mode: does the model load, compile and generate (or run its forward pass) on the
device, and does its output match the CPU? One row per model in ``<results>/data``
(:data:`~pytest_neuronsupport.dataset.support.SUPPORT`).

Its script is the model's ``run.py``, rendered from the runner's run code and the model's
parameters (:mod:`pytest_neuronsupport.pipeline.render`), run isolated on the cores the model
was sized for with its CPU reference (the file that holds or will hold it). A run whose load
fails for a library transformers says is missing runs once more with it
(:func:`~pytest_neuronsupport.pipeline.packages.missing_library`); its row is the second run's,
saying so. So a generating run whose CPU run failed or did not reproduce itself: it runs once
more with the English judge in its script, which then decides (:func:`judged_again`).
With ``--neuron-minify`` a failed one-core run runs again under PyTorch's minifier
(:mod:`pytest_neuronsupport.pipeline.minify`).

Every run's row says where its time went: the phase times (``load_s``, ``compile_s``,
``generate_s`` or ``forward_s``, ``reference_s``, adding up to ``wall_s`` but for a remainder)
and what its compile cache did (``graphs_cached``, ``graphs_compiled``), made of what its
verdict reports by :func:`timed`.

Every row names the checkpoint's ``architecture`` and ``model_type`` where its config was read
(EXCLUDED rows too): the loop of :func:`~pytest_neuronsupport.modes.test` adds them to the base
row from the plan (:attr:`~pytest_neuronsupport.pipeline.plan.Plan.columns`), as it does for
every table with those columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_neuronsupport.compilecache import SharedCache
from pytest_neuronsupport.dataset import layout
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.modes.mode import Script, common_row, trains
from pytest_neuronsupport.pipeline import classify, minify, packages
from pytest_neuronsupport.pipeline.isolate import Outcome
from pytest_neuronsupport.pipeline.modelrun import ScriptRun, run_script, scratch_reference
from pytest_neuronsupport.pipeline.plan import Plan
from pytest_neuronsupport.pipeline.reference import reference_file
from pytest_neuronsupport.pipeline.render import (
    RunParams,
    ScriptPlan,
    judge_needed,
    render,
    sha256,
)
from pytest_neuronsupport.pipeline.sizing import host_holds_fp32, host_holds_fp64
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.records import ModeOutcome
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.settings import Settings


class Support:
    """The support mode (see the module's docstring)."""

    name = "support"
    table = SUPPORT
    budgeted = True
    sized = True
    hooked = True

    def wanted(self, spec: ModelSpec, settings: Settings) -> bool:
        return not trains(spec, settings)

    def ready(self, sweep: Sweep, spec: ModelSpec, before: Mapping[str, ModeOutcome]) -> bool:
        return True

    def base_row(self, sweep: Sweep, spec: ModelSpec) -> dict[str, Any]:
        return {**common_row(sweep, spec), "selection_rank": spec.selection_rank}

    def script(self, sweep: Sweep, planned: Plan, base: dict[str, Any]) -> Script:
        text = render(*script_parts(sweep, planned), sweep.stack)
        path = layout.run_py_path(sweep.settings.results, sweep.pair, planned.spec.id)
        variants: tuple[str, ...] = ()
        assert planned.runner is not None
        if judge_needed(planned.runner, sweep.judge, cpu_compared=False):  # it may run again
            judged = render(*script_parts(sweep, planned, cpu_failed=True), sweep.stack)
            variants = (sha256(judged),) if judged != text else ()
        return Script(text, path, key=planned.spec.id, variants=variants)

    def run(
        self, sweep: Sweep, planned: Plan, script: Script, base: dict[str, Any]
    ) -> list[dict[str, Any]]:
        s, spec, run_py, text = sweep.settings, planned.spec, script.path, script.text
        parts = script_parts(sweep, planned)
        fields = attempt(sweep, planned, parts, run_py, text)
        missing = None
        if fields["result"] == Result.FAIL_LOAD:
            missing = packages.missing_library(fields.get("error"), spec.packages)
        if missing is not None:  # once: the retry's own missing library is its verdict
            parts = script_parts(sweep, planned, (*spec.packages, missing))
            text = render(*parts, sweep.stack)
            retried = attempt(sweep, planned, parts, run_py, text)
            fields = classify.retried(retried, missing, fields)
        if judged_again(sweep, planned, fields):  # the CPU comparison did not run after all
            parts = script_parts(sweep, planned, parts[1].packages, cpu_failed=True)
            text = render(*parts, sweep.stack)
            fields = classify.judged_again(attempt(sweep, planned, parts, run_py, text))
        if s.minify and minify.wanted(fields, planned.cores):
            fields = minified(sweep, planned, parts[1].packages, run_py, fields)
        assert planned.runner is not None
        fields = classify.with_checked_by(fields)
        fields.update(
            revision=planned.revision,
            runner=planned.runner.column,
            neuron_cores=planned.cores,
            hbm_capacity_gb=round(s.core_capacity_gb * planned.cores, 6),
            run_py=text,
            run_py_sha256=sha256(text),
            compile_cache=shared_cache(s),
        )
        return [{**base, **fields}]


def shared_cache(s: Settings) -> str | None:
    """The bucket folder the sweep's compile cache is shared through (the row's
    ``compile_cache``), or None."""
    shared = s.device.shared_cache(s.cache, s.backend) if s.compile_cache else None
    if s.compile_cache is None or shared is None:
        return None
    return SharedCache.of(s.compile_cache, shared[1], shared[0]).remote


def judged_again(sweep: Sweep, planned: Plan, fields: Mapping[str, Any]) -> bool:
    """Whether a run runs again with the English judge: a judge is set, and the run's output
    went unchecked because its CPU run failed or did not reproduce itself, with no judge in
    its script (:func:`~pytest_neuronsupport.pipeline.classify.left_to_a_judge`)."""
    assert planned.runner is not None
    can = judge_needed(planned.runner, sweep.judge, cpu_compared=False)
    return can and classify.left_to_a_judge(fields)


def cpu_compared(planned: Plan) -> bool:
    """Whether a run's output is to be held against the CPU fp32 run's: on one core, and on
    several where the host's memory holds the model in fp32."""
    return planned.cores == 1 or host_holds_fp32(planned.weight_bytes)


def script_parts(
    sweep: Sweep, planned: Plan, needs: tuple[str, ...] | None = None, cpu_failed: bool = False
) -> tuple[RunParams, ScriptPlan]:
    """What the model's ``run.py`` is made of: its parameters and its code (and the packages it
    needs beyond the stack: the list entry's, unless ``needs`` says otherwise; the English
    judge where the CPU comparison will not run, or did not (``cpu_failed``: see
    :func:`judged_again`))."""
    s, runner = sweep.settings, planned.runner
    assert runner is not None
    compared = cpu_compared(planned)
    judged = judge_needed(runner, sweep.judge, compared and not cpu_failed)
    several = planned.cores > 1
    params = RunParams(
        **sweep.run_fields(planned.spec.id, planned.checkpoint, planned.revision, runner.name),
        cores=planned.cores,
        prefill_chunk=s.prefill_chunk if runner.generates else None,
        judge=sweep.judge if judged else None,
        cpu_reference=compared if runner.generates and several else None,
        fp64_reference=None if host_holds_fp64(planned.weight_bytes) else False,
    )
    code = ScriptPlan(
        runner_module=runner.module,
        runner_entry=runner.entry_for(planned.config, planned.cores, planned.spec.task),
        entry="main_ranks" if several else "main",
        ops_class=s.device.rank_ops if several else s.device.ops,
        runner_column=runner.column,
        judged=judged,
        imported_backend=":" in s.backend,
        packages=planned.spec.packages if needs is None else needs,
    )
    return params, code


def attempt(
    sweep: Sweep, planned: Plan, parts: tuple[RunParams, ScriptPlan], run_py: Path, text: str
) -> dict[str, Any]:
    """Run ``run.py`` (``text``, rendered from ``parts``) on the model's path: the row fields
    it comes to (a package it needs that cannot be installed: FAIL(load))."""
    try:
        return classify.ran(execute(sweep, planned, parts, run_py, text))
    except packages.PackageError as exc:
        return classify.not_installed(exc)


def minified(
    sweep: Sweep, planned: Plan, needs: tuple[str, ...], run_py: Path, fields: dict[str, Any]
) -> dict[str, Any]:
    """The failed run again as ``minify.py``, under PyTorch's minifier: the row fields with its
    repro (:mod:`pytest_neuronsupport.pipeline.minify`)."""
    params, code = script_parts(sweep, planned, needs)
    code = replace(code, minified=True, script_name=minify.SCRIPT)
    text, script = render(params, code, sweep.stack), run_py.with_name(minify.SCRIPT)
    timeout_s = sweep.settings.minify_timeout_s
    outcome = execute(sweep, planned, (params, code), script, text, timeout_s)
    return minify.with_repro(fields, outcome, run_py.parent)


def execute(
    sweep: Sweep,
    planned: Plan,
    parts: tuple[RunParams, ScriptPlan],
    script: Path,
    text: str,
    timeout_s: float | None = None,
) -> Outcome:
    """A model's script (``text``, rendered from ``parts``) on the model's path
    (:func:`~pytest_neuronsupport.pipeline.modelrun.run_script`), with its CPU reference: the
    file that holds or will hold it (none where its output is not held to the CPU's)."""
    params, code = parts
    # hashing the checkpoint's files happens before the lease: the cores wait for no I/O
    cache = sweep.settings.cache
    reference = None
    if params.cpu_reference is not False:
        reference = reference_file(cache / "references", planned, sweep.stack, *parts)
        if reference is None:  # nothing names the checkpoint's files: computed afresh
            reference = scratch_reference(cache, script)
            reference.unlink(missing_ok=True)
    run = ScriptRun(text, script, planned.cores, code.packages, reference, timeout_s)
    fp64 = params.fp64_reference is not False  # as rendered: its pass's host memory
    return run_script(sweep, replace(run, weight_bytes=planned.weight_bytes, reference_fp64=fp64))
