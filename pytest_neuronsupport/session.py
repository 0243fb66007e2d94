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

from pytest_neuronsupport import baseline, report, shards, xdist
from pytest_neuronsupport.baseline import Baseline, Comparison
from pytest_neuronsupport.collect import ModelItem, ModelListFile
from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.layout import pair_path, run_py_path
from pytest_neuronsupport.dataset.merge import MergeReport, merge_journals
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.dataset.schema import SUPPORT, Table, row_to_json
from pytest_neuronsupport.dataset.shared import SharedResults
from pytest_neuronsupport.dataset.store import UnreadableResultsError, find_row, set_selection
from pytest_neuronsupport.dataset.tables import table_named
from pytest_neuronsupport.dataset.training import TRAIN
from pytest_neuronsupport.hookspec import Hooks
from pytest_neuronsupport.modellist import ModelListError, ModelSpec, parse
from pytest_neuronsupport.options import Settings
from pytest_neuronsupport.pipeline.classify import unrecordable
from pytest_neuronsupport.pipeline.steps import Pipeline
from pytest_neuronsupport.progress import UNCHANGED, Progress, model_line, recorded_costs
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.stack import LIBRARY, installed_stack

#: The report attributes that carry a model's row, and the mark of a model not run again.
ROW_ATTRIBUTE = "neuronsupport_row"
UNCHANGED_ATTRIBUTE = "neuronsupport_unchanged"
#: The report attribute naming the table of a row other than the support dataset's.
TABLE_ATTRIBUTE = "neuronsupport_table"
#: The report attribute that carries a model's performance rows (``--neuron-bench``).
PERF_ATTRIBUTE = "neuronsupport_perf_rows"
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
    #: The performance rows recorded by this process (``--neuron-bench``).
    perf_rows: list[dict[str, Any]] = field(default_factory=list)
    journal: Journal | None = None
    listed: dict[str, ModelSpec] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: Models not run again (their run.py is the one recorded).
    unchanged: list[str] = field(default_factory=list)
    #: Training tests not run again (their rows are in the training table).
    unchanged_trained: list[str] = field(default_factory=list)
    #: The expected results (``--neuron-baseline``), and how the sweep stood against them.
    baseline: Baseline | None = None
    comparison: Comparison | None = None
    progress: Progress | None = None
    #: Rows published to a shared dataset, and those whose publishing failed (and why).
    published: list[str] = field(default_factory=list)
    unpublished: list[tuple[dict[str, Any], str]] = field(default_factory=list)

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
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None and self.lines_per_model:
            tr.showfspath = False  # each model's line names it
        self.settings.results.mkdir(parents=True, exist_ok=True)
        if self.shared is not None:
            try:  # a local copy: skip-unchanged and --neuron-rerun read the shared dataset
                self.shared.pull(self.settings.results)
            except Exception as exc:  # boto3's and botocore's errors
                raise pytest.UsageError(
                    f"neuronsupport: cannot read {self.shared.uri}: {type(exc).__name__}: {exc}"
                ) from None
        self.note_merge(merge_journals(self.settings.results))
        self.journal = Journal(self.settings.results)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """Put the row on the call report: under xdist it travels to the controller with it."""
        rep = yield
        if isinstance(item, ModelItem) and call.when == "call":
            if item.table != SUPPORT.name:
                setattr(rep, TABLE_ATTRIBUTE, item.table)
            if item.row is not None:
                self.attach_row(rep, item.row)
                if item.table == SUPPORT.name:
                    self.hold_against_baseline(rep, item.row, item.user_properties)
            setattr(rep, UNCHANGED_ATTRIBUTE, item.unchanged)
            if item.perf_rows:
                setattr(rep, PERF_ATTRIBUTE, item.perf_rows)
        return rep

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """With a shard: keep this machine's part of the models, deselect the others."""
        shard = self.settings.shard
        if shard is None:
            return
        models = [item.spec.id for item in items if isinstance(item, ModelItem)]
        costs = recorded_costs(models, self.recorded)
        if self.shared is not None:  # the split every machine reads is in the shared dataset
            name, text = shards.split_document(models, costs, shard.count)
            text = self.shared.put_if_absent(f"shards/{name}", text)
            parts = shards.read_split(text, models, shard.count, f"{self.shared.uri}/shards/{name}")
        else:
            parts = shards.load_or_write(
                self.settings.results / "shards", models, costs, shard.count
            )
        mine = set(parts[shard.index - 1])
        kept = [i for i in items if not isinstance(i, ModelItem) or i.spec.id in mine]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[i for i in items if i not in kept])
            items[:] = kept

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Without xdist: the models to run are known; start counting (controller only)."""
        if not xdist.is_worker(self.config):
            self.start_progress([item.name for item in session.items])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Journal each row the moment its test ends (controller only)."""
        if xdist.is_worker(self.config):
            return
        row = getattr(report, ROW_ATTRIBUTE, None)
        model_id = report.nodeid.rsplit("::", 1)[-1]
        for perf_row in getattr(report, PERF_ATTRIBUTE, None) or ():
            self.record(perf_row, PERF)
        if row is not None:
            self.record(row, table_named(getattr(report, TABLE_ATTRIBUTE, SUPPORT.name)))
            self.show_progress(model_id, row, report)
        elif getattr(report, UNCHANGED_ATTRIBUTE, False):
            if hasattr(report, TABLE_ATTRIBUTE):  # a training test: not held against a baseline
                self.unchanged_trained.append(model_id)
            else:
                self.unchanged.append(model_id)
            self.show_progress(model_id, None, report)
        elif hasattr(report, UNCHANGED_ATTRIBUTE):  # a model's test that ran nothing
            self.show_progress(model_id, None, report)

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str] | None:
        """A model's result as its pytest status; in the default verbosity no letter, as each
        model gets a line of its own (:meth:`show_progress`), skipped ones included."""
        row = getattr(report, ROW_ATTRIBUTE, None)
        if row is None:
            if hasattr(report, UNCHANGED_ATTRIBUTE) and self.lines_per_model:
                return report.outcome, "", report.outcome.upper()
            return None
        word = str(row["result"])
        if hasattr(report, "wasxfail"):
            category, letter = ("xpassed", "X") if report.passed else ("xfailed", "x")
            word = f"{category.upper()[:5]} {word}"
        else:
            category = report.outcome
            letter = _LETTERS[category]
        return category, "" if self.lines_per_model else letter, word

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.config.option.collectonly:
            return
        tr, s = terminalreporter, self.settings
        compiler, version = self.pipeline.compiler
        tr.section(
            f"neuronsupport: {compiler}-{version} / {LIBRARY}-{self.pipeline.library_version}"
        )
        tr.write_line(f"device {s.device.name}, backend {s.backend}, dtype {s.dtype}")
        if s.shard is not None:
            where = f"{self.shared.uri}/shards" if self.shared else s.results / "shards"
            tr.write_line(f"shard {s.shard} (the split: {where})")
        line = report.counts_line(self.rows)
        if self.unchanged or self.unchanged_trained:
            count = len(self.unchanged) + len(self.unchanged_trained)
            line += f"; {count} unchanged (not run again)"
        tr.write_line(line)
        for failure in report.failure_lines(self.rows):
            tr.write_line(failure)
        dataset = pair_path(s.results, compiler, version, LIBRARY, self.pipeline.library_version)
        tr.write_line(f"dataset: {dataset}")
        if self.perf_rows:
            where = s.results / PERF.folder / self.pipeline.pair
            tr.write_line(
                f"performance: {len(self.perf_rows)} rows in {where} (`neuronsupport perf` "
                "prints them)"
            )
        if any("seq_len" in row for row in self.rows):
            trained = s.results / TRAIN.folder / self.pipeline.pair
            tr.write_line(f"training: {trained} (`neuronsupport train-report` prints it)")
        for problem in self.problems:
            tr.write_line(f"problem: {problem}", yellow=True)
        if self.comparison is not None:
            tr.section(f"neuronsupport: held against the baseline {s.baseline}", sep="-")
            if self.comparison.baseline.pair != self.pipeline.pair.removesuffix(".parquet"):
                tr.write_line(f"(the baseline was written for {self.comparison.baseline.pair})")
            for number, text in enumerate(self.comparison.lines()):
                tr.write_line(text, red=number == 0 and not self.comparison.ok)

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file: it gets the baseline
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Merge this sweep's journal into the parquet dataset, then hold the sweep against
        the baseline (controller only)."""
        if xdist.is_worker(self.config) or self.journal is None:
            return
        path = self.journal.path
        self.journal.close()
        self.journal = None
        self.note_merge(merge_journals(self.settings.results, include=[path]))
        self.pipeline.budget.remove()
        self.apply_selection()
        if self.shared is not None:
            self.merge_shared()
        if self.baseline is not None:
            self.comparison = self.compare_with_baseline()
            report.junit_global_properties(self.config, self.comparison)
            if not self.comparison.ok and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    # --- the state ---------------------------------------------------------------------------

    def attach_row(self, rep: pytest.TestReport, row: dict[str, Any]) -> None:
        setattr(rep, ROW_ATTRIBUTE, row)

    def hold_against_baseline(
        self, rep: pytest.TestReport, row: dict[str, Any], properties: list[tuple[str, object]]
    ) -> None:
        """An expected failure becomes xfailed, an improvement xpassed or failed (strict), a
        regression failed; the test's junit ``properties`` get the expectation."""
        if self.baseline is None:
            return
        expected = self.baseline.expected.get(row["model_id"])
        result, breaks = str(row["result"]), row.get("graph_breaks")
        allowed = self.settings.baseline_allow_improvements
        held = baseline.pytest_outcome(expected, result, allowed, breaks)
        kind = held[0] if held else baseline.decide(expected, result, breaks)
        properties.append(("baseline_expected", expected.result if expected else "-"))
        properties.append(("baseline", kind.value))
        if held is None:
            return
        _, outcome, reason = held
        if outcome == "failed":
            rep.outcome = "failed"
            rep.longrepr = f"{reason}\n{rep.longrepr}" if rep.longrepr else reason
        else:
            rep.outcome = "skipped" if outcome == "xfailed" else "passed"
            rep.wasxfail = reason

    def apply_selection(self) -> None:
        """When the lists carry a selection, ``selection_rank`` means the latest one: every
        row of the pair gets its model's rank in these lists, or null if it has none."""
        try:
            specs = [spec for path in self.settings.lists for spec in parse(path, self.runners)]
        except ModelListError:
            return  # collection has said what is wrong with the list
        ranks = {s.id: s.selection_rank for s in specs if s.selection_rank is not None}
        if not ranks:
            return
        target = self.settings.results / "data" / self.pipeline.pair
        try:
            set_selection(target, ranks)
        except UnreadableResultsError as exc:
            self.problems.append(f"{target}: selection ranks not updated ({exc.reason})")

    def compare_with_baseline(self) -> Comparison:
        """This sweep's models (their rows, or the recorded rows of those not run again)
        held against the baseline."""
        assert self.baseline is not None
        results, pair = self.settings.results, self.pipeline.pair
        rows = list(self.rows)
        rows += [r for m in self.unchanged if (r := find_row(results, pair, m)) is not None]
        run_py = {r["model_id"]: run_py_path(results, pair, r["model_id"]) for r in rows}
        return baseline.compare(
            self.baseline,
            rows,
            run_py=run_py,
            allow_improvements=self.settings.baseline_allow_improvements,
        )

    # --- progress ----------------------------------------------------------------------------

    @property
    def lines_per_model(self) -> bool:
        """A line per finished model replaces pytest's letters in the default verbosity."""
        return self.config.get_verbosity() == 0 and not self.config.option.collectonly

    def recorded(self, model_id: str) -> dict[str, Any] | None:
        """The model's recorded row on this sweep's pair."""
        return find_row(self.settings.results, self.pipeline.pair, model_id)

    def start_progress(self, models: list[str]) -> None:
        self.progress = Progress(models, recorded_costs(models, self.recorded))

    def show_progress(
        self, model_id: str, row: dict[str, Any] | None, rep: pytest.TestReport
    ) -> None:
        """A line for the model; the status stays on the last line of a terminal, and is a
        line of its own in a log at each tenth of the sweep."""
        if self.progress is None:
            self.start_progress([])
        assert self.progress is not None
        unchanged = getattr(rep, UNCHANGED_ATTRIBUTE, False)
        result = str(row["result"]) if row else UNCHANGED if unchanged else rep.outcome
        self.progress.finished(model_id, result, None if row is None else row.get("wall_s"))
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None or not self.lines_per_model:
            return
        if row is not None:
            line = model_line(row)
        else:
            why = "run.py as recorded" if unchanged else report.skip_reason(rep)
            line = f"{result:<13} {model_id}  ({why})"
        status = self.progress.status_line()
        if tr.isatty():
            tr.rewrite(line, erase=True)
            tr.write("\n")
            tr.write(status, flush=True)
            tr.currentfspath = -2  # the next write of pytest's starts a new line
        else:
            tr.write_line(line)
            if self.progress.milestone():
                tr.write_line(status)

    def record(self, row: dict[str, Any], table: Table = SUPPORT) -> None:
        """Keep a row, publish it (a shared dataset) and journal it; a row that does not fit
        the dataset is kept as FAIL(other), with the problem (a bug of ours must not cost the
        model its row)."""
        if table is not SUPPORT:  # a training row: journaled; not published nor held (yet)
            if self.journal is not None:
                self.journal.append(self.pipeline.pair, row, table)
            (self.perf_rows if table is PERF else self.rows).append(row)
            return
        try:
            row_to_json(row)
        except ValueError:
            pass  # the journal says why, below
        else:
            self.publish(row)  # before the journal: a kill in between loses nothing shared
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

    @cached_property
    def shared(self) -> SharedResults | None:
        """The dataset on object storage that the local results are a copy of, if any."""
        uri = self.settings.shared
        return None if uri is None else SharedResults(uri)

    def publish(self, row: dict[str, Any]) -> None:
        """Publish a row to the shared dataset; one that fails is published again at the end."""
        if self.shared is None:
            return
        try:
            self.shared.publish(self.sweep_id, len(self.published), self.pipeline.pair, row)
        except Exception as exc:  # S3 down: the row is journaled; retried at the end
            self.unpublished.append((row, f"{type(exc).__name__}: {exc}"))
        self.published.append(row["model_id"])

    def merge_shared(self) -> None:
        """Publish what could not be, then fold every published row into the shared pair
        files (conditional writes: see :mod:`~pytest_neuronsupport.dataset.shared`)."""
        assert self.shared is not None
        failed, self.unpublished = self.unpublished, []
        for row, _ in failed:
            self.publish(row)
        for row, why in self.unpublished:
            self.problems.append(
                f"{row['model_id']}: not published to {self.shared.uri} ({why}); "
                "it is in the local copy's journal"
            )
        try:
            summary = self.shared.merge()
        except Exception as exc:
            self.problems.append(f"merging into {self.shared.uri}: {type(exc).__name__}: {exc}")
            return
        self.problems.extend(summary.problems)

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
