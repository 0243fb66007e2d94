"""The sweep session: settings from the options, and the hooks' work, one method per hook.

``plugin.py`` creates one :class:`SweepSession` in ``pytest_configure`` (only with
``--neuron-sweep``) and registers it as a plugin; its hook methods are thin too, and call the
plain modules: :mod:`plan`, :mod:`script`, :mod:`execute`, :mod:`results`, :mod:`report`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import execute, report, results, script
from pytest_neuronsupport.devices import Device
from pytest_neuronsupport.items import ModelFailure, ModelItem, ModelListFile
from pytest_neuronsupport.modellist import ModelSpec, check_unique, runner_column
from pytest_neuronsupport.plan import Plan, plan
from pytest_neuronsupport.stack import LIBRARY, installed_stack

ROW_ATTRIBUTE = "neuronsupport_row"


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


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def run_dirname(model_id: str) -> str:
    """A model id as one folder name; ``--`` cannot occur in a Hub id, so this is unambiguous."""
    return re.sub(r"[^A-Za-z0-9._-]", "--", model_id)


@dataclass
class SweepSession:
    config: pytest.Config
    settings: Settings
    stack: dict[str, str | None] = field(default_factory=installed_stack)
    rows: list[dict[str, Any]] = field(default_factory=list)
    journal: results.Journal | None = None
    listed: dict[str, ModelSpec] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    # --- where things go -----------------------------------------------------------------

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
        """Recover the rows of sweeps that were killed, then open this sweep's journal."""
        if is_worker(self.config):
            return
        self.settings.results.mkdir(parents=True, exist_ok=True)
        recovered = results.merge_journals(self.settings.results)
        self._note_merge(recovered)
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
        row = getattr(report, ROW_ATTRIBUTE, None)
        if row is None or is_worker(self.config):
            return
        self.rows.append(row)
        if self.journal is not None:
            self.journal.append(self.pair_relpath, results.Row.from_dict(row))

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
        tr.write_line(report.counts_line(self.rows))
        for line in report.failure_lines(self.rows):
            tr.write_line(line)
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
        merged = results.merge_journals(self.settings.results, include=[path])
        self._note_merge(merged)

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

    def run_model(self, item: ModelItem) -> None:
        """Plan, render, run and classify one model; leaves the row on the item."""
        spec = item.spec
        started = datetime.now(UTC)
        row = self.base_row(spec, started)
        planned = plan(spec, self.settings.cache)
        if planned.exclusion is not None:
            row.update(
                result="EXCLUDED",
                exclusion=planned.exclusion.category,
                notes=planned.exclusion.reason,
            )
            item.finish(row)
            # reported at the model's entry in its list, not at this line
            raise pytest.skip.Exception(
                f"EXCLUDED ({planned.exclusion.category}): {planned.exclusion.reason}",
                _use_item_location=True,
            )
        if planned.load_error is not None or planned.runner is None:
            row.update(result="FAIL(load)", error=planned.load_error, notes=planned.load_error)
            item.finish(row)
            raise ModelFailure(report.failure_text(row, None))
        run_py = self.write_script(planned)
        row.update(self.execute(planned, run_py))
        item.finish(row)
        if row["result"] != "PASS":
            raise ModelFailure(report.failure_text(row, str(run_py)))

    def params(self, planned: Plan) -> script.RunParams:
        s = self.settings
        assert planned.runner is not None
        return script.RunParams(
            model_id=planned.spec.id,
            checkpoint=planned.checkpoint,
            runner=planned.runner,
            device=s.device.name,
            backend=s.backend,
            dtype=s.dtype,
            fullgraph=s.device.fullgraph,
            cores=planned.spec.cores or 1,
            revision=planned.spec.revision,
            task=planned.spec.task,
        )

    def write_script(self, planned: Plan) -> Path:
        """Render the model's run.py into its run folder."""
        params = self.params(planned)
        run_dir = self.run_dir(params.model_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        run_py = run_dir / "run.py"
        run_py.write_text(script.render(params, self.stack), encoding="utf-8")
        return run_py

    def execute(self, planned: Plan, run_py: Path) -> dict[str, Any]:
        """Run a rendered script isolated; the row fields of its outcome."""
        params = self.params(planned)
        text = run_py.read_text(encoding="utf-8")
        run_dir = run_py.parent
        outcome = execute.run_script(
            run_py,
            cwd=self.settings.workdir,
            env=self.run_env(),
            timeout_s=self.settings.timeout_s,
            verdict_path=run_dir / "verdict.json",
            log_path=run_dir / "output.log",
        )
        fields = execute.classify(outcome)
        if fields.get("wall_s") is None:
            fields["wall_s"] = outcome.wall_s
        fields["runner"] = runner_column(fields.get("runner") or params.runner)
        fields["neuron_cores"] = params.cores
        fields["hbm_capacity_gb"] = self.settings.device.capacity_gb(params.cores)
        fields["run_py"] = text
        fields["run_py_sha256"] = script.sha256(text)
        return fields

    def run_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.settings.device.run_env(self.settings.cache))
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        return env
