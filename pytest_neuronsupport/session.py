"""The sweep session: the state of one sweep (its journal, its rows per table, its problems),
and thin hooks.

``plugin.py`` calls :func:`configure` in ``pytest_configure`` (only with ``--neuron-sweep``),
which registers one :class:`SweepSession` as a plugin. Each hook method is a few lines that hand
the work to a plain module: collection to :mod:`collect`, a model's test to
:mod:`pytest_neuronsupport.modes`, rows to the results store (:mod:`dataset.results`) and the
journal, texts to :mod:`report`.

Who does what under pytest-xdist: workers collect the same items in the same order and test
the models; each test's outcomes (one per mode: its table, its rows, whether it was unchanged)
travel to the controller on its report; the controller alone journals rows and writes the
results. Without xdist the one process does both.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import baseline, collect, hub, modes, order, report, shards, xdist
from pytest_neuronsupport.baseline import Baseline, Comparison
from pytest_neuronsupport.collect import ModelItem, ModelListFile
from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.layout import SHARDS, phases_dir, run_py_path
from pytest_neuronsupport.dataset.merge import MergeReport, merge_journals
from pytest_neuronsupport.dataset.results import Results, ResultsError, open_results
from pytest_neuronsupport.dataset.schema import SUPPORT
from pytest_neuronsupport.dataset.store import UnreadableResultsError, set_selection
from pytest_neuronsupport.dataset.tables import register, table_named
from pytest_neuronsupport.hookcalls import Hooks
from pytest_neuronsupport.modellist import ModelListError, ModelSpec, parse
from pytest_neuronsupport.modes import Mode, ModeOutcome
from pytest_neuronsupport.pipeline import prefetch
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.progress import (
    Progress,
    Ticker,
    read_running,
    recorded_costs,
    terminal_writer,
)
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.settings import Settings
from pytest_neuronsupport.stack import LIBRARY, installed_stack

#: What the session does not keep of a recorded row (the journal and the dataset have it; the
#: summary, the baseline and the progress never read it): the scripts' text, the raw timings.
UNKEPT = frozenset({"run_py", "repro_py", "timings"})
#: The report attribute that carries a model's outcomes, one per mode (plain types).
OUTCOMES_ATTRIBUTE = xdist.OUTCOMES_ATTRIBUTE


def configure(config: pytest.Config) -> SweepSession:
    """The sweep's session, from the options: settings, runners, modes, the model lists as
    the session's collection arguments, the baseline; registered as a plugin. Bad options are
    a ``UsageError`` naming them."""
    from pytest_neuronsupport.backends import check_backend
    from pytest_neuronsupport.runners import entry_point_runners
    from pytest_neuronsupport.settings import settings_from

    config.addinivalue_line("markers", "neuronsupport: a model of a pytest-neuronsupport sweep")
    xdist.tie_to_controller(config)
    settings = settings_from(config)
    try:
        store = open_results(settings.results, settings.shared)
    except ResultsError as exc:
        raise pytest.UsageError(f"neuronsupport: --neuron-results {exc}") from None
    if not xdist.is_worker(config):
        problem = check_backend(settings.backend, settings.device, settings.workdir)
        if problem:
            raise pytest.UsageError(f"neuronsupport: --neuron-backend: {problem}")
        problem = settings.device.check(os.environ)  # what the runs inherit
        if problem:
            device = settings.device.name
            raise pytest.UsageError(f"neuronsupport: --neuron-device {device}: {problem}")
    try:
        hook = config.hook
        added = [*entry_point_runners(), *users(hook.pytest_neuronsupport_runners, config)]
        runners = Runners.builtin().extended(added)
        sweep_modes = [*modes.builtin_modes(), *users(hook.pytest_neuronsupport_modes, config)]
        for mode in sweep_modes:
            register(mode.table)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"neuronsupport: runners and modes: {exc}") from None
    # The model lists are what the session collects, beside any path given explicitly.
    explicit = config.args if config.args_source == pytest.Config.ArgsSource.ARGS else []
    config.args = [str(p) for p in settings.lists] + list(explicit)
    expected = None
    source = settings.baseline
    if settings.baseline_uri is not None:
        from pytest_neuronsupport.dataset.hub import HubError, download_file

        try:
            source = download_file(settings.baseline_uri)
        except (HubError, ValueError) as exc:
            raise pytest.UsageError(f"neuronsupport: --neuron-baseline: {exc}") from None
    if source is not None:
        try:
            expected = baseline.read(source)
        except baseline.BaselineError as exc:
            raise pytest.UsageError(f"neuronsupport: --neuron-baseline: {exc}") from None
    session = SweepSession(config, settings, runners, sweep_modes, store, baseline=expected)
    config.pluginmanager.register(session, "neuronsupport-session")
    config.pluginmanager.register(JunitSkips(config), "neuronsupport-junit-skips")
    config.pluginmanager.register(order.ListOrder(config, session), "neuronsupport-list-order")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(xdist.XdistHooks(session), "neuronsupport-xdist")
    return session


def users(hook: Any, config: pytest.Config) -> list[Any]:
    """What the users' implementations of a hook that returns a list (runners, modes) return,
    in one list."""
    return [item for items in hook(config=config) for item in items]


class JunitSkips:
    """junit's text of a skipped model's test (:func:`collect.mend_junit_skip`), once
    junitxml has written it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(trylast=True)  # after junitxml's: its element is there to mend
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A model's skip, at no line, reads ``models.toml::zoo:x: reason`` in junit."""
        if getattr(report, OUTCOMES_ATTRIBUTE, None) is not None:
            collect.mend_junit_skip(self.config, report)


def outcomes_of(rep: pytest.TestReport) -> list[ModeOutcome] | None:
    """The outcomes a model's test report carries (None: not a model's test, or it did not
    get as far as its call)."""
    data = getattr(rep, OUTCOMES_ATTRIBUTE, None)
    return None if data is None else [ModeOutcome.from_dict(d) for d in data]


@dataclass(eq=False)  # a plugin must stay hashable
class SweepSession:
    config: pytest.Config
    settings: Settings
    runners: Runners
    modes: list[Mode]
    store: Results
    stack: dict[str, str | None] = field(default_factory=installed_stack)
    #: The rows recorded by this process (the controller's: every model's), per table.
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Models not run again (their script is the one recorded), per table.
    unchanged: dict[str, list[str]] = field(default_factory=dict)
    journal: Journal | None = None
    listed: dict[str, ModelSpec] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: Models done, whose Hub checkpoints may be evicted, and those evicted (repo id, bytes):
    #: ``--neuron-hub-cache-max``.
    hub_done: set[str] = field(default_factory=set)
    evicted: list[tuple[str, int]] = field(default_factory=list)
    #: Pair files a merge could not read (their rows wait in the journal).
    unreadable: set[Path] = field(default_factory=set)
    #: The expected results (``--neuron-baseline``), and how the sweep stood against them.
    baseline: Baseline | None = None
    comparison: Comparison | None = None
    #: The unchecked PASS models that fail the session (``--neuron-require-check``).
    unchecked_failing: list[str] = field(default_factory=list)
    progress: Progress | None = None
    ticker: Ticker | None = None
    #: Downloads the models to come while others run (controller only): ``--neuron-prefetch-gb``.
    prefetcher: prefetch.Prefetcher | None = None

    @cached_property
    def sweep(self) -> Sweep:
        hooks = Hooks(self.config)
        return Sweep(self.settings, self.runners, self.stack, xdist.sweep_id(self.config), hooks)

    @property
    def sweep_id(self) -> str:
        return self.sweep.sweep_id

    @property
    def controller(self) -> bool:
        return not xdist.is_worker(self.config)

    # --- hooks -------------------------------------------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Any:
        """Model list files named by the options become collectors of model items."""
        if file_path.resolve() in self.settings.lists:
            return ModelListFile.of(parent, file_path, self.sweep, self.modes, self.listed)
        return None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Recover the rows of killed sweeps, and open this sweep's journal (controller only)."""
        if self.controller:
            self.start()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        """While a model's test runs, its phase file says what it does (for the status)."""
        if isinstance(item, ModelItem):
            with self.sweep.phases.running(item.name):
                return (yield)
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """Put the outcomes on the call report: under xdist they travel to the controller."""
        rep = yield
        if isinstance(item, ModelItem) and call.when == "call":
            self.attach(rep, item.outcomes, item.user_properties)
        return rep

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """With a shard: keep this machine's part of the models, deselect the others; then
        the order they start in (:mod:`.order`)."""
        if self.settings.shard is not None:
            ids = collect.model_ids(items)
            mine = shards.mine(ids, self.costs(ids), self.settings.shard, self.store)
            collect.deselect(config, items, keep=mine)
        order.apply(config, items, self.sweep)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Without xdist: the models to run are known; start counting (controller only)."""
        if self.controller:
            self.start_progress([item.name for item in session.items])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Journal each row the moment its test ends (controller only)."""
        outcomes = outcomes_of(report)
        if self.controller and outcomes is not None:
            self.record(outcomes)
            self.show_progress(report.nodeid.rsplit("::", 1)[-1], outcomes, report)

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str] | None:
        """A model's result as its pytest status; in the default verbosity no letter, as each
        model gets a line of its own (:meth:`show_progress`), skipped ones included."""
        outcomes = outcomes_of(report)
        return None if outcomes is None else report_status(report, outcomes, self.lines_per_model)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The sweep's summary: per table, what was recorded and where; problems; the
        baseline (:func:`report.write_summary`)."""
        if not self.config.option.collectonly:
            report.write_summary(terminalreporter, self.summary_facts())

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file: it gets the baseline
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Merge this sweep's journal into the results, then hold the sweep against the
        baseline (controller only)."""
        self.stop_progress()
        if self.controller and self.journal is not None:
            self.finish(session)

    # --- the sweep's start and end -----------------------------------------------------------

    def start(self) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None and self.lines_per_model:
            tr.showfspath = False  # each model's line names it
        try:  # a local copy: skip-unchanged and --neuron-rerun read the shared dataset
            self.store.pull()
        except ResultsError as exc:
            raise pytest.UsageError(f"neuronsupport: --neuron-results {exc}") from None
        self.note_merge(merge_journals(self.settings.results))
        self.journal = Journal(self.settings.results)

    def finish(self, session: pytest.Session) -> None:
        assert self.journal is not None
        path = self.journal.path
        self.journal.close()
        self.journal = None
        self.note_merge(merge_journals(self.settings.results, include=[path]))
        self.sweep.budget.remove()
        self.apply_selection()
        not_shared = self.store.finish()  # rows the shared dataset lacks (kept locally)
        self.problems.extend(not_shared)
        if (self.unreadable or not_shared) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # rows not in the dataset: say so
        if self.settings.require_check:
            self.unchecked_failing = [r["model_id"] for r in report.unchecked_rows(self.covered())]
            if self.unchecked_failing and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED  # the tests stay PASS
        if self.baseline is not None:
            self.comparison = self.compare_with_baseline()
            report.junit_global_properties(self.config, self.comparison)
            if not self.comparison.ok and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    # --- the state ---------------------------------------------------------------------------

    def attach(
        self,
        rep: pytest.TestReport,
        outcomes: list[ModeOutcome],
        properties: list[tuple[str, object]],
    ) -> None:
        """Put a model's outcomes on its report (a skipped one's reason names the model), and
        hold its support row against the baseline."""
        setattr(rep, OUTCOMES_ATTRIBUTE, [outcome.to_dict() for outcome in outcomes])
        if rep.skipped and isinstance(rep.longrepr, tuple):  # named by its model, not a line
            rep.longrepr = (rep.nodeid, None, rep.longrepr[2])  # type: ignore[assignment]
        for outcome in outcomes:
            if outcome.table == SUPPORT.name and outcome.rows:
                self.hold_against_baseline(rep, outcome.rows[0], properties)

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

    def record(self, outcomes: list[ModeOutcome]) -> None:
        """Keep each outcome's rows, publish them (beyond the local folder, if the store goes
        further) and journal them: they were validated where they were made."""
        for outcome in outcomes:
            table = table_named(outcome.table)
            if outcome.unchanged:
                self.unchanged.setdefault(table.name, []).append(outcome.model_id)
            if outcome.unchanged or outcome.rows:
                kept = self.rows.setdefault(table.name, [])
            for row in outcome.rows:
                # published before it is journaled: a kill in between loses nothing shared
                self.store.publish(self.sweep.sweep_id, self.sweep.pair, table, row)
                if self.journal is not None:
                    self.journal.append(self.sweep.pair, row, table, validated=True)
                kept.append({k: v for k, v in row.items() if k not in UNKEPT})
        self.bound_hub_cache(outcomes)  # the model's runs ended: its checkpoint may go

    def bound_hub_cache(self, outcomes: list[ModeOutcome]) -> None:
        """The model's runs ended: evict what the bound (``--neuron-hub-cache-max``, else
        :func:`.hub.default_bound`) asks of the checkpoints of models done (never the judge's)."""
        if not outcomes:
            return
        self.hub_done.add(outcomes[0].model_id)
        if self.prefetcher is not None:  # what it fetched for the model leaves its budget
            self.prefetcher.done(outcomes[0].model_id)
        gb = self.settings.hub_cache_max_gb
        limit = hub.default_bound() if gb is None else int(gb * hub.GB)
        if limit is not None:
            judge = (self.settings.judge or "").partition("@")[0]
            self.evicted.extend(hub.bound_cache(limit, self.hub_done - {judge}))

    def hub_cache_notes(self) -> list[str]:
        gb = self.settings.hub_cache_max_gb
        line = hub.eviction_line(self.evicted, None if gb is None else int(gb * hub.GB))
        return [] if line is None else [line]

    def crashed(self, nodeid: str, why: str) -> list[dict[str, Any]]:
        """The outcome of a model whose xdist worker died while running it: its first mode's
        row, FAIL(other)."""
        model_id = nodeid.rsplit("::", 1)[-1]
        specs = {s.id: s for path in self.settings.lists for s in parse(path, self.runners)}
        spec = specs.get(model_id) or ModelSpec(id=model_id, source=Path(nodeid), line=0)
        first = (modes.modes_for(spec, self.modes, self.settings) or self.modes)[0]
        return [modes.crashed(first, self.sweep, spec, why).to_dict()]

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
        target = self.settings.results / SUPPORT.folder / self.sweep.pair
        try:
            set_selection(target, ranks)
        except UnreadableResultsError as exc:
            self.problems.append(f"{target}: selection ranks not updated ({exc.reason})")

    def covered(self) -> list[dict[str, Any]]:
        """This sweep's models: their support rows, or the recorded rows of those not run
        again."""
        rows = list(self.rows.get(SUPPORT.name, []))
        for model_id in self.unchanged.get(SUPPORT.name, []):
            found = self.sweep.recorded(SUPPORT, model_id)
            if found is not None:
                rows.append(found)
        return rows

    def compare_with_baseline(self) -> Comparison:
        """This sweep's models (:meth:`covered`) held against the baseline."""
        assert self.baseline is not None
        results, pair = self.settings.results, self.sweep.pair
        rows = self.covered()
        run_py = {r["model_id"]: run_py_path(results, pair, r["model_id"]) for r in rows}
        return baseline.compare(
            self.baseline,
            rows,
            run_py=run_py,
            allow_improvements=self.settings.baseline_allow_improvements,
        )

    def note_merge(self, merge: MergeReport) -> None:
        """Keep what a merge could not do for the terminal summary (once each)."""
        for path, error in merge.unreadable:
            self.unreadable.add(path)
            self.note(
                f"{path} is unreadable and was left untouched ({error}); "
                "its new rows are safe in the journal: repair the file or move it away, then "
                f"`neuronsupport merge --results {self.settings.results}` (or the next sweep) "
                "merges them"
            )
        for problem in merge.problems:
            self.note(problem)

    def note(self, problem: str) -> None:
        if problem not in self.problems:
            self.problems.append(problem)

    def summary_facts(self) -> report.SummaryFacts:
        """What the terminal summary says, as plain facts."""
        compiler, version = self.sweep.compiler
        s = self.settings
        return report.SummaryFacts(
            pair=f"{compiler}-{version} / {LIBRARY}-{self.sweep.library_version}",
            device=f"device {s.device.name}, backend {s.backend}, dtype {s.dtype}",
            shard=None
            if s.shard is None
            else f"shard {s.shard} (the split: {self.store.where(SHARDS)})",
            tables=[
                report.TableFacts(
                    name=mode.table.name,
                    rows=self.rows.get(mode.table.name, []),
                    unchanged=len(self.unchanged.get(mode.table.name, [])),
                    path=s.results / mode.table.folder / self.sweep.pair,
                    written=s.results / mode.table.folder / self.sweep.pair not in self.unreadable,
                )
                for mode in self.modes
                if mode.table.name in self.rows
            ],
            problems=self.problems,
            notes=self.hub_cache_notes(),
            baseline=s.baseline_uri or s.baseline,
            comparison=self.comparison,
            pair_name=self.sweep.pair.removesuffix(".parquet"),
            unchecked_failing=self.unchecked_failing,
        )

    # --- progress ----------------------------------------------------------------------------

    @property
    def lines_per_model(self) -> bool:
        """A line per finished model replaces pytest's letters in the default verbosity."""
        return self.config.get_verbosity() == 0 and not self.config.option.collectonly

    def costs(self, models: list[str]) -> dict[str, float]:
        """The recorded ``wall_s`` of each model of this sweep's pair."""
        return recorded_costs(models, lambda m: self.sweep.recorded(SUPPORT, m))

    def start_prefetch(self, models: list[str]) -> None:
        """Download the files of ``models`` (in start order) while others run, within
        ``--neuron-prefetch-gb`` (:class:`~pytest_neuronsupport.pipeline.prefetch.Prefetcher`)."""
        s = self.settings
        budget = prefetch.ahead_budget(s.prefetch_gb, s.hub_cache_max_gb)
        if not models or budget <= 0 or self.prefetcher is not None or prefetch.offline():
            return
        specs = self.listed or {e.id: e for path in s.lists for e in parse(path, self.runners)}
        listed = [specs[model] for model in models if model in specs]
        recorded = partial(self.sweep.recorded, SUPPORT)
        ahead = prefetch.upcoming(listed, recorded, s.rerun, s.limit)
        self.prefetcher = prefetch.Prefetcher(budget)
        self.prefetcher.start([(spec.id, spec.revision) for spec in ahead])

    def start_progress(self, models: list[str]) -> None:
        """Count the sweep's models; with a line per model, the status ticks from now on."""
        self.start_prefetch(models)
        self.progress = Progress(models, self.costs(models))
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None or not self.lines_per_model or self.ticker is not None:
            return
        tr._show_progress_info = False  # pytest's own [ 50%] would fight the status
        tr.flush()
        write = terminal_writer(tr._tw._file)  # not fd 1: pytest captures it while tests run
        folder = phases_dir(self.settings.results, self.sweep_id)
        running = partial(read_running, folder)
        self.ticker = Ticker(self.progress, running, write, bool(tr.isatty()), tr._tw.fullwidth)
        self.ticker.start()

    def stop_progress(self) -> None:
        """The status stops, and the prefetch; the sweep's phase files go (the controller's,
        at its end)."""
        if self.prefetcher is not None:
            self.prefetcher.stop()
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None
        if self.controller:
            shutil.rmtree(phases_dir(self.settings.results, self.sweep_id), ignore_errors=True)

    def show_progress(
        self, model_id: str, outcomes: list[ModeOutcome], rep: pytest.TestReport
    ) -> None:
        """A line for the model; the status stays on the last line of a terminal, and is a
        line of its own in a log at each tenth of the sweep."""
        if self.progress is None:
            self.start_progress([])
        assert self.progress is not None
        line, result, wall_s = report.model_line(model_id, outcomes, rep)
        self.progress.finished(model_id, result, wall_s)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None or self.ticker is None:
            return
        tr.flush()
        self.ticker.finished(line)
        if self.ticker.tty:
            tr.currentfspath = -2  # the next write of pytest's starts a new line


def report_status(
    rep: pytest.TestReport, outcomes: list[ModeOutcome], lines_per_model: bool
) -> tuple[str, str, str] | None:
    """A model's test status: its first row's result as the word (``XPASS PASS`` when the
    baseline decided), and no letter when each model gets a line of its own."""
    first = outcomes[0] if outcomes else None
    if any(outcome.fault is not None for outcome in outcomes):  # the environment's: an error
        return "error", "" if lines_per_model else "E", "ERROR"
    if first is None or not first.rows:
        return (rep.outcome, "", rep.outcome.upper()) if lines_per_model else None
    word = str(first.rows[0]["result"])
    if hasattr(rep, "wasxfail"):
        category, letter = ("xpassed", "X") if rep.passed else ("xfailed", "x")
        word = f"{category.upper()[:5]} {word}"
    else:
        category = rep.outcome
        letter = report.LETTERS[category]
    return category, "" if lines_per_model else letter, word
