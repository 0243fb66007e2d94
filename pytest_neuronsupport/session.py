"""The sweep session: the state of one sweep (its journal, rows, problems), and thin hooks.

``plugin.py`` creates one :class:`SweepSession` in ``pytest_configure`` (only with
``--neuron-sweep``) and registers it as a plugin. Each hook method is a few lines that hand the
work to a plain module: collection to :mod:`collect`, a model's test to
:mod:`pipeline.steps`, rows to :mod:`dataset`, texts to :mod:`report`.

Who does what under pytest-xdist: workers collect the same items in the same order and test
the models; each row travels to the controller on its test's report; the controller alone
journals rows and writes the dataset. Without xdist the one process does both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import report, xdist
from pytest_neuronsupport.collect import ModelItem, ModelListFile
from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.layout import pair_path
from pytest_neuronsupport.dataset.merge import MergeReport, merge_journals
from pytest_neuronsupport.hookspec import Hooks
from pytest_neuronsupport.modellist import ModelSpec, parse
from pytest_neuronsupport.options import Settings
from pytest_neuronsupport.pipeline.classify import PYTEST_OUTCOMES, unrecordable
from pytest_neuronsupport.pipeline.steps import Pipeline
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.stack import LIBRARY, installed_stack

#: The report attributes that carry a model's row, and the mark of a model not run again.
ROW_ATTRIBUTE = "neuronsupport_row"
UNCHANGED_ATTRIBUTE = "neuronsupport_unchanged"
#: pytest's short letters of each outcome.
_LETTERS = {"passed": ".", "failed": "F", "skipped": "s"}


@dataclass(eq=False)  # a plugin must stay hashable
class SweepSession:
    config: pytest.Config
    settings: Settings
    runners: Runners
    stack: dict[str, str | None] = field(default_factory=installed_stack)
    #: The rows recorded by this process (the controller's: every model's).
    rows: list[dict[str, Any]] = field(default_factory=list)
    journal: Journal | None = None
    listed: dict[str, ModelSpec] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    unchanged: int = 0

    @cached_property
    def sweep_id(self) -> str:
        return xdist.sweep_id(self.config)

    @cached_property
    def pipeline(self) -> Pipeline:
        hooks = Hooks(self.config)
        return Pipeline(self.settings, self.runners, self.stack, self.sweep_id, hooks)

    # --- hooks -------------------------------------------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Any:
        """Model list files named by the options become collectors of model items."""
        if file_path.resolve() in self.settings.lists:
            return ModelListFile.from_parent(
                parent, path=file_path, pipeline=self.pipeline, listed=self.listed
            )
        return None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Recover the rows of killed sweeps, and open this sweep's journal (controller only)."""
        if xdist.is_worker(self.config):
            return
        self.settings.results.mkdir(parents=True, exist_ok=True)
        self.note_merge(merge_journals(self.settings.results))
        self.journal = Journal(self.settings.results)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """Put the row on the call report: under xdist it travels to the controller with it."""
        rep = yield
        if isinstance(item, ModelItem) and call.when == "call":
            if item.row is not None:
                self.attach_row(rep, item.row)
            setattr(rep, UNCHANGED_ATTRIBUTE, item.unchanged)
        return rep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Journal each row the moment its test ends (controller only)."""
        if xdist.is_worker(self.config):
            return
        row = getattr(report, ROW_ATTRIBUTE, None)
        if row is not None:
            self.record(row)
        elif getattr(report, UNCHANGED_ATTRIBUTE, False):
            self.unchanged += 1

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str] | None:
        row = getattr(report, ROW_ATTRIBUTE, None)
        if row is None:
            return None
        outcome = PYTEST_OUTCOMES.get(Result(row["result"]), "failed")
        return outcome, _LETTERS[outcome], str(row["result"])

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.config.option.collectonly:
            return
        tr, s = terminalreporter, self.settings
        compiler, version = self.pipeline.compiler
        tr.section(
            f"neuronsupport: {compiler}-{version} / {LIBRARY}-{self.pipeline.library_version}"
        )
        tr.write_line(f"device {s.device.name}, backend {s.backend}, dtype {s.dtype}")
        line = report.counts_line(self.rows)
        if self.unchanged:
            line += f"; {self.unchanged} unchanged (not run again)"
        tr.write_line(line)
        for failure in report.failure_lines(self.rows):
            tr.write_line(failure)
        dataset = pair_path(s.results, compiler, version, LIBRARY, self.pipeline.library_version)
        tr.write_line(f"dataset: {dataset}")
        for problem in self.problems:
            tr.write_line(f"problem: {problem}", yellow=True)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Merge this sweep's journal into the parquet dataset (controller only)."""
        if xdist.is_worker(self.config) or self.journal is None:
            return
        path = self.journal.path
        self.journal.close()
        self.journal = None
        self.note_merge(merge_journals(self.settings.results, include=[path]))
        self.pipeline.budget.remove()

    # --- the state ---------------------------------------------------------------------------

    def attach_row(self, rep: pytest.TestReport, row: dict[str, Any]) -> None:
        setattr(rep, ROW_ATTRIBUTE, row)

    def record(self, row: dict[str, Any]) -> None:
        """Keep a row and journal it; a row that does not fit the dataset is kept as
        FAIL(other), with the problem (a bug of ours must not cost the model its row)."""
        try:
            if self.journal is not None:
                self.journal.append(self.pipeline.pair, row)
        except ValueError as exc:
            self.problems.append(
                f"{row.get('model_id')}: malformed row ({exc}); kept as FAIL(other)"
            )
            row = unrecordable(row, f"malformed row: {exc}")
            if self.journal is not None:
                self.journal.append(self.pipeline.pair, row)
        self.rows.append(row)

    def crashed_row(self, nodeid: str, why: str) -> dict[str, Any]:
        """The row of a model whose xdist worker died while running it."""
        model_id = nodeid.rsplit("::", 1)[-1]
        specs = {s.id: s for path in self.settings.lists for s in parse(path, self.runners)}
        spec = specs.get(model_id) or ModelSpec(id=model_id, source=Path(nodeid), line=0)
        return self.pipeline.crashed(spec, why)

    def note_merge(self, merge: MergeReport) -> None:
        """Keep what a merge could not do for the terminal summary."""
        for path, error in merge.unreadable:
            self.problems.append(
                f"{path} is unreadable and was left untouched ({error}); "
                "its new rows stay in the journal until it is repaired or moved away"
            )
        self.problems.extend(merge.problems)
