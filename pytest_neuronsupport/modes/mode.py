"""What a mode is, and the one loop that drives every mode.

A :class:`Mode` says:

* which list entries it tests (:meth:`Mode.wanted`) and the fields its rows have before anything
  runs (:meth:`Mode.base_row`);
* the script it runs for a planned entry (:meth:`Mode.script`), whose text decides whether the
  model is *unchanged*: the row recorded for the script's key in this pair has its hash, so it is
  not run again (unless ``--neuron-rerun``); or rows decided without a run;
* how running that script becomes rows (:meth:`Mode.run`).

One loop drives every mode (:func:`test`): the ``--neuron-limit`` budget, the plan (exclusions
and checkpoints that cannot be found are decided there, the same for every mode; so is what the
checkpoint is, its ``architecture`` and ``model_type``, for the tables with those columns), the
mode's script, the unchanged check, the run, the users' hooks, and the validation of each row, once,
where it is made. Whatever goes wrong in a mode's code, the model gets its row: a bug of ours
must not cost a model its row. What the loop returns, :class:`ModeOutcome`, is the one value a
test report carries to the session, per table.

The modes an entry runs, in order, are those of :func:`modes_for` (:func:`test_entry` runs them);
a mode after the first sees the outcomes before it (a benchmark runs after the support run that
ran the model).
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pytest_neuronsupport import faults
from pytest_neuronsupport.dataset.table import Table, row_to_json, validate_row
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.pipeline import classify, prefetch
from pytest_neuronsupport.pipeline.plan import Plan
from pytest_neuronsupport.pipeline.render import sha256
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.records import ModeOutcome
from pytest_neuronsupport.settings import Settings
from pytest_neuronsupport.stack import LIBRARY


@dataclass(frozen=True)
class Script:
    """A script a mode runs for one model: its text, where it is written, and the key of the
    row that decides whether it is unchanged (None: it always runs)."""

    text: str
    path: Path
    key: Any = None
    #: Whatever the mode needs again in :meth:`Mode.run`.
    state: Any = None
    #: The hashes of the other scripts a run of this one may end as (the support mode's run
    #: again with the English judge): a row recorded with one of them is unchanged too.
    variants: tuple[str, ...] = ()

    @property
    def sha256(self) -> str:
        return sha256(self.text)

    def stands_for(self, recorded: Mapping[str, Any]) -> bool:
        """Whether ``recorded`` is this script's row: it ran this script, or a variant."""
        return recorded["run_py_sha256"] in (self.sha256, *self.variants)


class Mode(Protocol):
    """One kind of test of a model, and its table (see the module's docstring)."""

    #: The mode's name (``support``, ``perf``, ``train``...), as the docs and options say it.
    name: str
    table: Table
    #: Its runs count against ``--neuron-limit`` (a mode that follows another does not).
    budgeted: bool
    #: The plan sizes the model (its cores, or EXCLUDED ``too-large``).
    sized: bool
    #: The users' ``pytest_neuronsupport_verdict`` and ``pytest_neuronsupport_row`` hooks see
    #: its rows.
    hooked: bool

    def wanted(self, spec: ModelSpec, settings: Settings) -> bool:
        """Whether this mode tests the list entry."""

    def ready(self, sweep: Sweep, spec: ModelSpec, before: Mapping[str, ModeOutcome]) -> bool:
        """Whether the outcomes of the entry's modes that ran before this one (by table) let
        it test the model (a benchmark needs a support run that ran it); if not, it records
        nothing."""

    def base_row(self, sweep: Sweep, spec: ModelSpec) -> dict[str, Any]:
        """The fields of the entry's rows known before anything runs."""

    def script(
        self,
        sweep: Sweep,
        planned: Plan,
        base: dict[str, Any],
    ) -> Script | list[dict[str, Any]]:
        """The script to run for a planned entry, or its rows decided without a run (none:
        this mode has nothing to say of the model)."""

    def run(
        self, sweep: Sweep, planned: Plan, script: Script, base: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Run the script: the rows (each ``base`` and its fields) it comes to."""


def modes_for(spec: ModelSpec, modes: Iterable[Mode], settings: Settings) -> list[Mode]:
    """The modes that test ``spec``, in order; the first decides the test's outcome."""
    return [mode for mode in modes if mode.wanted(spec, settings)]


def trains(spec: ModelSpec, settings: Settings) -> bool:
    """Whether the entry is a training test (``mode = "train"``, or ``--neuron-train``)."""
    return spec.mode == "train" or settings.train


def common_row(sweep: Sweep, spec: ModelSpec) -> dict[str, Any]:
    """The fields every table's row of a model has before it runs: who, what ran it, when."""
    s = sweep.settings
    compiler, version = sweep.compiler
    return {
        "model_id": spec.id,
        "library": LIBRARY,
        "task": spec.task,
        "revision": spec.revision,
        "device": s.device.name,
        "backend": s.backend,
        "compiler": compiler,
        "compiler_version": version,
        "dtype": s.dtype,
        "fullgraph": s.device.fullgraph,
        "lnc": s.device.lnc(),
        "tested_at": datetime.now(UTC).isoformat(),
        **sweep.stack,
    }


def of_checkpoint(table: Table, planned: Plan) -> dict[str, Any]:
    """What the plan says the checkpoint is (``architecture``, ``model_type``, from its config),
    for the columns of them ``table`` has: every row of the model, EXCLUDED included, where the
    config was read (the support table has both)."""
    return {name: value for name, value in planned.columns.items() if name in table.schema.names}


def unchanged_reason(recorded: Mapping[str, Any]) -> str:
    """Why a model is not run again: its script is the one recorded."""
    stamp = recorded.get("tested_at")
    when = stamp.isoformat(timespec="seconds") if stamp else "?"
    return f"unchanged since {when} ({recorded['result']}); --neuron-rerun runs it again"


def test(
    mode: Mode, sweep: Sweep, spec: ModelSpec, before: Mapping[str, ModeOutcome] | None = None
) -> ModeOutcome:
    """One mode's test of one list entry: plan, script, skip if unchanged, run, hooks, rows."""
    name, limit = mode.table.name, f"--neuron-limit {sweep.settings.limit} reached"
    if not mode.ready(sweep, spec, before or {}):
        return ModeOutcome(name, spec.id)
    if mode.budgeted and spec.exclusion is None and sweep.budget.exhausted():
        # an exclusion costs nothing, nor does a recorded model whose script is unchanged
        if sweep.settings.rerun or sweep.recorded(mode.table, spec.id) is None:
            return ModeOutcome(name, spec.id, reason=limit)
    base = mode.base_row(sweep, spec)
    script: Script | None = None
    try:
        planned = sweep.plan(spec, sized=mode.sized)
        if planned.fault is not None:
            return ModeOutcome(name, spec.id, fault=planned.fault)
        base = {**base, **of_checkpoint(mode.table, planned)}
        if planned.exclusion is not None:
            rows = [{**base, **classify.excluded(planned.exclusion)}]
        elif planned.load_error is not None:
            if mode.budgeted and not sweep.budget.take():
                return ModeOutcome(name, spec.id, reason=limit)
            rows = [{**base, **classify.load_failed(planned.load_error)}]
        else:
            found = mode.script(sweep, planned, base)
            if isinstance(found, list):
                rows = found
            else:
                script = found
                done = scripted(mode, sweep, planned, script, base)
                if isinstance(done, ModeOutcome):
                    return done
                rows = done
    except Exception as exc:  # a bug of ours must not cost the model its row; a fault: no row
        if (fault := faults.of(exc)) is not None:
            return ModeOutcome(name, spec.id, fault=str(fault))
        error = traceback.format_exc()
        why = f"pytest-neuronsupport could not run it: {error.strip().splitlines()[-1]}"
        rows = [{**base, **classify.fail_other(why, error)}]
    try:
        recorded_rows = [decided(mode, sweep, spec, row) for row in rows]
    except faults.Fault as met:  # a hook met the disk full, say
        return ModeOutcome(name, spec.id, fault=str(met))
    ran_into = [fault for row in recorded_rows if (fault := faults.in_run(row)) is not None]
    if ran_into:  # the run's disk filled up, the Hub failed its download
        return ModeOutcome(name, spec.id, fault=str(ran_into[0]))
    run_py = None if script is None else str(script.path)
    return ModeOutcome(name, spec.id, recorded_rows, run_py=run_py)


def scripted(
    mode: Mode, sweep: Sweep, planned: Plan, script: Script, base: dict[str, Any]
) -> ModeOutcome | list[dict[str, Any]]:
    """A mode's script of the model: not run again when it is the one recorded; else counted
    against ``--neuron-limit``, its checkpoint's files fetched before its lease, and run: its
    rows (or the outcome without any: unchanged, past the limit, a fault)."""
    name, model_id = mode.table.name, planned.spec.id
    recorded = None
    if script.key is not None and not sweep.settings.rerun:
        recorded = sweep.recorded(mode.table, script.key)
    if recorded is not None and script.stands_for(recorded):
        return ModeOutcome(name, model_id, unchanged=True, reason=unchanged_reason(recorded))
    if mode.budgeted and not sweep.budget.take():
        return ModeOutcome(name, model_id, reason=f"--neuron-limit {sweep.settings.limit} reached")
    fetched = fetch(sweep, planned, mode.table)  # its files, before its lease
    if fetched.fault is not None:
        return ModeOutcome(name, model_id, fault=fetched.fault)
    base = {**base, **fetched.columns}
    if fetched.error is not None:
        return [{**base, **classify.load_failed(fetched.error)}]
    script.path.parent.mkdir(parents=True, exist_ok=True)
    return mode.run(sweep, planned, script, base)


def fetch(sweep: Sweep, planned: Plan, table: Table) -> prefetch.Fetched:
    """A Hub checkpoint's files, fetched into the cache before its lease
    (:mod:`pytest_neuronsupport.pipeline.prefetch`): how long it took, for ``table``'s
    ``download_s`` if it has one."""
    if planned.hub:
        sweep.phases.mark("download")
    fetched = prefetch.before_lease(planned.checkpoint, planned.revision, planned.hub)
    if "download_s" in table.schema.names:
        return fetched
    return prefetch.Fetched(error=fetched.error, fault=fetched.fault)


def test_entry(modes: Sequence[Mode], sweep: Sweep, spec: ModelSpec) -> Iterator[ModeOutcome]:
    """The test of one list entry: each of its modes (:func:`modes_for`) in order, each seeing
    the outcomes before it, by table; each outcome as soon as its mode is done."""
    before: dict[str, ModeOutcome] = {}
    for mode in modes:
        outcome = test(mode, sweep, spec, before)
        before[outcome.table] = outcome
        yield outcome


def decided(mode: Mode, sweep: Sweep, spec: ModelSpec, row: dict[str, Any]) -> dict[str, Any]:
    """The row as recorded, validated here, once: users' hooks may replace its result and
    change its fields (a mode that is ``hooked``); a row that then does not fit the table's
    schema is FAIL(other), keeping what names the model, its key and its run."""
    table = mode.table
    try:
        if mode.hooked:
            verdict = sweep.hooks.verdict(row, spec)
            if verdict is not None:
                classify.overridden(row, verdict, "pytest_neuronsupport_verdict", table)
            sweep.hooks.row(row, spec)
        return row_to_json(validate_row(row, table), table)
    except Exception as exc:
        if (fault := faults.of(exc)) is not None:
            raise fault from exc
        why = f"its row could not be recorded: {type(exc).__name__}: {exc}"
        return classify.unrecordable(row, why, table)


def worker_died(mode: Mode, sweep: Sweep, spec: ModelSpec, why: str) -> ModeOutcome:
    """The outcome of a model whose process died while running it (an xdist worker)."""
    row = {**mode.base_row(sweep, spec), **classify.fail_other(why)}
    valid = row_to_json(validate_row(row, mode.table), mode.table)
    return ModeOutcome(mode.table.name, spec.id, [valid])
