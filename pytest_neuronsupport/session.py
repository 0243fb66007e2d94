"""The sweep session: settings from the options, and the hooks' work, one method per hook.

``plugin.py`` creates one :class:`SweepSession` in ``pytest_configure`` (only with
``--neuron-sweep``) and registers it as a plugin; its hook methods are thin too, and call the
plain modules: :mod:`plan`, :mod:`cores`, :mod:`script`, :mod:`execute`, :mod:`results`,
:mod:`report`.

Who does what under pytest-xdist: workers collect the same items in the same order, plan, run
and classify models, and put each row on its test report; the controller alone journals rows
and writes the dataset. Without xdist the one process does both.
"""

from __future__ import annotations

import os
import re
import traceback
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any, NoReturn

import pytest

from pytest_neuronsupport import cores, execute, report, results, script
from pytest_neuronsupport.budget import Budget
from pytest_neuronsupport.devices import Device
from pytest_neuronsupport.items import ModelFailure, ModelItem, ModelListFile
from pytest_neuronsupport.modellist import (
    GENERATING_RUNNERS,
    SEVERAL_CORES_RUNNERS,
    ZOO_PREFIX,
    ModelSpec,
    check_unique,
    parse,
    runner_column,
)
from pytest_neuronsupport.plan import Exclusion, Plan, plan, resolve_checkpoint
from pytest_neuronsupport.stack import LIBRARY, installed_stack

ROW_ATTRIBUTE = "neuronsupport_row"
#: Where runs keep their CPU references (the same name as in runners/common.py, which run.py
#: reads; that module imports torch, so the name is not imported from it here).
REFERENCE_CACHE_ENV = "NEURONSUPPORT_REFERENCE_CACHE"
SWEEP_ID_KEY = "neuronsupport_sweep_id"


@dataclass(frozen=True)
class Settings:
    """The resolved options of one sweep."""

    lists: tuple[Path, ...]
    device: Device
    backend: str
    dtype: str
    results: Path
    cache: Path
    timeout_s: float
    #: Where runs start (their working directory): the folder pytest was invoked from.
    workdir: Path
    isolation: str = "fork"
    limit: int | None = None
    rerun: bool = False
    max_memory_gb: float | None = None
    max_cores: int = 16
    #: Memory of one core for sizing; None: the device's own figure.
    core_memory_gb: float | None = None
    #: Generating runners prefill in chunks of this many tokens (None: in one pass).
    prefill_chunk: int | None = 32
    #: The English judge: a Hub id, a local checkpoint or a zoo model (None: no judge).
    judge: str | None = None


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def is_xdist_controller(config: pytest.Config) -> bool:
    """The xdist controller runs no test: its workers do."""
    return not is_worker(config) and getattr(config.option, "dist", "no") != "no"


def run_dirname(model_id: str) -> str:
    """A model id as one folder name; ``--`` cannot occur in a Hub id, so this is unambiguous."""
    return re.sub(r"[^A-Za-z0-9._-]", "--", model_id)


def skip_model(reason: str) -> NoReturn:
    """Skip a model's test, reported at its entry in the list rather than at a line of ours."""
    raise pytest.skip.Exception(reason, _use_item_location=True)


@dataclass(eq=False)  # a plugin must stay hashable
class SweepSession:
    config: pytest.Config
    settings: Settings
    stack: dict[str, str | None] = field(default_factory=installed_stack)
    rows: list[dict[str, Any]] = field(default_factory=list)
    journal: results.Journal | None = None
    listed: dict[str, ModelSpec] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    unchanged: int = 0
    _executor: execute.Executor | None = None

    # --- where things go -----------------------------------------------------------------

    @cached_property
    def sweep_id(self) -> str:
        """The sweep's id, the same in the controller and every worker."""
        workerinput = getattr(self.config, "workerinput", {})
        return str(workerinput.get(SWEEP_ID_KEY) or uuid.uuid4().hex)

    @property
    def compiler(self) -> tuple[str, str]:
        return self.settings.device.compiler(self.settings.backend)

    @property
    def library_version(self) -> str:
        return self.stack.get("library_version") or "unknown"

    @property
    def pair_relpath(self) -> str:
        return results.pair_relpath(*self.compiler, LIBRARY, self.library_version)

    def run_dir(self, model_id: str) -> Path:
        pair = Path(self.pair_relpath).with_suffix("")
        return self.settings.results / "runs" / pair / run_dirname(model_id)

    @cached_property
    def budget(self) -> Budget:
        return Budget(self.settings.limit, self.settings.results / ".sweeps", self.sweep_id)

    @cached_property
    def allocator(self) -> cores.CoreAllocator:
        """Leases of this machine's cores of the device, shared by every sweep on it."""
        device = self.settings.device
        path = self.settings.cache / "leases" / f"{device.name}.json"
        return cores.CoreAllocator(path, device.core_count())

    @cached_property
    def core_capacity_gb(self) -> float:
        return self.settings.core_memory_gb or self.settings.device.core_capacity_gb()

    @property
    def executor(self) -> execute.Executor:
        if self._executor is None:
            self._executor = execute.ISOLATIONS[self.settings.isolation]()
        return self._executor

    def claim(self, specs: list[ModelSpec]) -> None:
        """Record a list's models; a model already listed by another file is an error."""
        check_unique(specs, self.listed)

    # --- hooks ---------------------------------------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Any:
        """Model list files named by the options become collectors of model items."""
        if file_path.resolve() in self.settings.lists:
            return ModelListFile.from_parent(parent, path=file_path)
        return None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Recover the rows of killed sweeps, and open this sweep's journal (controller only).

        The fork server starts with the first model that runs: a sweep that runs nothing
        (collection only, or every model unchanged) never pays for its imports.
        """
        if is_worker(self.config):
            return
        self.settings.results.mkdir(parents=True, exist_ok=True)
        self._note_merge(results.merge_journals(self.settings.results))
        self.journal = results.Journal(self.settings.results)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """Put the row on the call report: under xdist it travels to the controller with it."""
        rep = yield
        if isinstance(item, ModelItem) and item.row is not None and call.when == "call":
            setattr(rep, ROW_ATTRIBUTE, item.row)
        return rep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Journal each row the moment its test ends (controller only)."""
        if is_worker(self.config):
            return
        row = getattr(report, ROW_ATTRIBUTE, None)
        if row is None:
            if report.skipped and "unchanged since" in str(report.longrepr):
                self.unchanged += 1
            return
        try:
            recorded = results.Row.from_dict(row)
        except ValueError as exc:  # a bug of ours must not cost the model its row
            self.problems.append(
                f"{row.get('model_id')}: malformed row ({exc}); kept as FAIL(other)"
            )
            keep = ("model_id", "library", "tested_at", "run_py", "run_py_sha256")
            row = {k: row.get(k) for k in keep} | {"result": "FAIL(other)", "error": str(exc)}
            recorded = results.Row.from_dict(row)
        self.rows.append(row)
        if self.journal is not None:
            self.journal.append(self.pair_relpath, recorded)

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str] | None:
        row = getattr(report, ROW_ATTRIBUTE, None)
        if row is None:
            return None
        result = str(row["result"])
        if result == "PASS":
            return "passed", ".", "PASS"
        if result.startswith("FAIL"):
            return "failed", "F", result
        return "skipped", "s", result

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.config.option.collectonly:
            return
        compiler, version = self.compiler
        tr = terminalreporter
        tr.section(f"neuronsupport: {compiler}-{version} / {LIBRARY}-{self.library_version}")
        s = self.settings
        tr.write_line(f"device {s.device.name}, backend {s.backend}, dtype {s.dtype}")
        line = report.counts_line(self.rows)
        if self.unchanged:
            line += f"; {self.unchanged} unchanged (not run again)"
        tr.write_line(line)
        for failure in report.failure_lines(self.rows):
            tr.write_line(failure)
        dataset = results.pair_path(s.results, *self.compiler, LIBRARY, self.library_version)
        tr.write_line(f"dataset: {dataset}")
        for problem in self.problems:
            tr.write_line(f"problem: {problem}", yellow=True)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Merge this sweep's journal into the parquet dataset."""
        if is_worker(self.config) or self.journal is None:
            return
        path = self.journal.path
        self.journal.close()
        self.journal = None
        self._note_merge(results.merge_journals(self.settings.results, include=[path]))
        self.budget.remove()

    def _note_merge(self, merge: results.MergeReport) -> None:
        """Keep what a merge could not do for the terminal summary."""
        for path, error in merge.unreadable:
            self.problems.append(
                f"{path} is unreadable and was left untouched ({error}); "
                "its new rows stay in the journal until it is repaired or moved away"
            )
        self.problems.extend(merge.problems)

    # --- the run of one model ------------------------------------------------------------

    def base_row(self, spec: ModelSpec, started: datetime) -> dict[str, Any]:
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
            "tested_at": started.isoformat(),
            **self.stack,
        }

    def crash_row(self, nodeid: str, why: str) -> dict[str, Any]:
        """The row of a model whose xdist worker died while running it."""
        model_id = nodeid.rsplit("::", 1)[-1]
        specs = {s.id: s for path in self.settings.lists for s in parse(path)}
        spec = specs.get(model_id) or ModelSpec(id=model_id, source=Path(nodeid), line=0)
        row = self.base_row(spec, datetime.now(UTC))
        row.update(result="FAIL(other)", notes=why, error=why)
        return row

    def run_model(self, item: ModelItem) -> None:
        """Plan, render, run and classify one model; leaves the row on the item.

        Whatever goes wrong in our own code still gives the model its row: FAIL(other), with
        the traceback in ``error``.
        """
        if self.budget.exhausted():
            skip_model(f"--neuron-limit {self.settings.limit} reached")
        row = self.base_row(item.spec, datetime.now(UTC))
        try:
            self._run_model(item, row)
        except (ModelFailure, pytest.skip.Exception, KeyboardInterrupt):
            raise
        except Exception:
            error = traceback.format_exc()
            last = error.strip().splitlines()[-1]
            row.update(
                result="FAIL(other)",
                notes=f"pytest-neuronsupport could not run it: {last}",
                error=error,
            )
            item.finish(row)
            raise ModelFailure(report.failure_text(row, None)) from None

    def _run_model(self, item: ModelItem, row: dict[str, Any]) -> None:
        spec = item.spec
        planned = self.size(plan(spec, self.settings.cache))
        if planned.exclusion is not None:
            row.update(
                result="EXCLUDED",
                exclusion=planned.exclusion.category,
                notes=planned.exclusion.reason,
            )
            item.finish(row)
            exclusion = planned.exclusion
            skip_model(f"EXCLUDED ({exclusion.category}): {exclusion.reason}")
        if planned.load_error is not None or planned.runner is None:
            if not self.budget.take():
                skip_model(f"--neuron-limit {self.settings.limit} reached")
            row.update(result="FAIL(load)", error=planned.load_error, notes=planned.load_error)
            item.finish(row)
            raise ModelFailure(report.failure_text(row, None))
        params = self.params(planned)
        text = script.render(params, self.stack)
        self.skip_if_unchanged(spec.id, script.sha256(text))
        if not self.budget.take():
            skip_model(f"--neuron-limit {self.settings.limit} reached")
        run_py = self.write_script(params, text)
        row.update(self.execute(params, run_py, text))
        item.finish(row)
        if row["result"] != "PASS":
            raise ModelFailure(report.failure_text(row, str(run_py)))

    def skip_if_unchanged(self, model_id: str, sha: str) -> None:
        """Skip a model whose run.py is the one recorded for it in this pair."""
        if self.settings.rerun:
            return
        recorded = results.find_row(self.settings.results, self.pair_relpath, model_id)
        if recorded is not None and recorded.run_py_sha256 == sha:
            when = recorded.tested_at.isoformat(timespec="seconds") if recorded.tested_at else "?"
            skip_model(f"unchanged since {when} ({recorded.result}); --neuron-rerun runs it again")

    def size(self, planned: Plan) -> Plan:
        """How many cores the model gets: sized by its bf16 weights (or forced by its entry).

        Only runners that shard (dense, dense_ep) use several cores; the others run on one,
        so a model of theirs too large for one core is excluded.
        """
        if planned.exclusion is not None or planned.load_error is not None:
            return planned
        s = self.settings
        weights = cores.weight_bytes(planned.checkpoint, planned.config)
        needed = 1 if weights is None else cores.cores_needed(weights, self.core_capacity_gb)
        several = planned.runner in SEVERAL_CORES_RUNNERS
        if several and planned.spec.cores is not None:
            needed = planned.spec.cores
        limit = min(s.max_cores, s.device.core_count()) if several else 1
        if needed > limit:
            size = f"{weights / 1e9:.2f} GB of bf16 weights, " if weights is not None else ""
            where = (
                f"at most {limit} (--neuron-max-cores {s.max_cores}, the device has "
                f"{s.device.core_count()})"
                if several
                else f"runner {planned.runner} runs on one core"
            )
            why = f"needs {needed} cores ({size}{self.core_capacity_gb:g} GB a core); {where}"
            return replace(planned, exclusion=Exclusion("too-large", why))
        return replace(planned, cores=needed, weight_bytes=weights)

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

    def params(self, planned: Plan) -> script.RunParams:
        s = self.settings
        assert planned.runner is not None
        generating = planned.runner in GENERATING_RUNNERS
        return script.RunParams(
            model_id=planned.spec.id,
            checkpoint=planned.checkpoint,
            runner=planned.runner,
            device=s.device.name,
            backend=s.backend,
            dtype=s.dtype,
            fullgraph=s.device.fullgraph,
            cores=planned.cores,
            revision=planned.spec.revision,
            task=planned.spec.task,
            prefill_chunk=s.prefill_chunk if generating else None,
            judge=self.judge if generating else None,
        )

    def write_script(self, params: script.RunParams, text: str) -> Path:
        """Write the model's run.py into its run folder."""
        run_dir = self.run_dir(params.model_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        run_py = run_dir / "run.py"
        run_py.write_text(text, encoding="utf-8")
        return run_py

    def execute(self, params: script.RunParams, run_py: Path, text: str) -> dict[str, Any]:
        """Lease the cores, run the script isolated and pinned; the row fields of its outcome."""
        device = self.settings.device
        with self.allocator.lease(params.cores) as lease:
            request = execute.RunRequest(
                script=run_py,
                cwd=self.settings.workdir,
                env=self.run_env(lease.cores),
                verdict_path=run_py.parent / "verdict.json",
                log_path=run_py.parent / "output.log",
                timeout_s=self.settings.timeout_s,
                max_memory_gb=self.settings.max_memory_gb,
                cpus=device.cpus(lease.cores),
            )

            def started(pid: int) -> None:
                self.allocator.add_pid(lease, pid)  # the run holds the lease too

            outcome = self.executor.run(request, started=started)
        fields = execute.classify(outcome)
        if fields.get("wall_s") is None:
            fields["wall_s"] = outcome.wall_s
        fields["runner"] = runner_column(fields.get("runner") or params.runner)
        fields["neuron_cores"] = params.cores
        fields["hbm_capacity_gb"] = round(self.core_capacity_gb * params.cores, 6)
        fields["run_py"] = text
        fields["run_py_sha256"] = script.sha256(text)
        return fields

    def run_env(self, leased: list[int]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.settings.device.run_env(self.settings.cache))
        env.update(self.settings.device.pin_env(leased))
        env[REFERENCE_CACHE_ENV] = str(self.settings.cache / "references")
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        return env


class XdistHooks:
    """Hooks that exist only with pytest-xdist (registered only when it is installed)."""

    def __init__(self, session: SweepSession) -> None:
        self.session = session

    def pytest_configure_node(self, node: Any) -> None:
        """Hand the sweep's id to each worker (for the shared --neuron-limit count)."""
        node.workerinput[SWEEP_ID_KEY] = self.session.sweep_id

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A worker died while running a model: that model's row is FAIL(other)."""
        why = f"the xdist worker running it died ({report.longrepr})".replace("\n", " ")
        setattr(report, ROW_ATTRIBUTE, self.session.crash_row(crashitem, why))
