"""The sweep session: the state of one sweep (its journal, its rows per table, its problems),
and thin hooks.

``plugin.py`` calls :func:`.configure.configure` in ``pytest_configure`` (only with
``--neuron-sweep``), which makes one :class:`SweepSession`; the session registers itself as a
plugin (:meth:`SweepSession.register`), beside the progress display (:mod:`display`) and junit's
skip mend (:class:`~pytest_neuronsupport.outcomes.JunitSkips`). Each hook method is a few lines
that hand the work to a plain module: collection to :mod:`collect`, a model's test to
:mod:`pytest_neuronsupport.modes`, its pytest outcome to :mod:`outcomes`, rows to the results
store (:mod:`dataset.stores`) and the journal, the Hub cache's bound to :mod:`hub`, the
shared compile cache's seeding and publishing to :mod:`compilecache`, the selection's ranks to
:mod:`selection`, texts to :mod:`report`.

Who does what under pytest-xdist: workers collect the same items in the same order and test
the models; each test's outcomes (one per mode: its table, its rows, whether it was unchanged)
travel to the controller on its report; the controller alone journals rows and writes the
results. Without xdist the one process does both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import (
    baseline,
    collect,
    compilecache,
    hub,
    lanes,
    order,
    outcomes,
    report,
    selection,
    shards,
    xdist,
    xdist_lanes,
)
from pytest_neuronsupport import modes as modes_
from pytest_neuronsupport.baseline import Baseline, Comparison
from pytest_neuronsupport.collect import ModelItem, ModelListFile
from pytest_neuronsupport.dataset.files import recorded_devices
from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.layout import SHARDS, phases_dir, run_py_path
from pytest_neuronsupport.dataset.merge import MergeReport, merge_journals
from pytest_neuronsupport.dataset.stores import Results, ResultsError
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.tables import table_named
from pytest_neuronsupport.display import ProgressDisplay
from pytest_neuronsupport.hookcalls import Hooks
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.modes import Mode
from pytest_neuronsupport.outcomes import outcomes_of
from pytest_neuronsupport.pipeline import prefetch
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.progress import recorded_costs
from pytest_neuronsupport.records import ModeOutcome
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.settings import Settings
from pytest_neuronsupport.stack import LIBRARY, installed_stack

#: What the session does not keep of a recorded row (the journal and the dataset have it; the
#: summary, the baseline and the progress never read it): the scripts' text, the raw timings.
UNKEPT = frozenset({"run_py", "repro_py", "timings"})


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
    #: The specs of each model list, parsed (and checked) as the sweep was configured.
    lists: dict[Path, list[ModelSpec]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: Pair files a merge could not read (their rows wait in the journal).
    unreadable: set[Path] = field(default_factory=set)
    #: The expected results (``--neuron-baseline``), and how the sweep stood against them.
    baseline: Baseline | None = None
    comparison: Comparison | None = None
    #: The unchecked PASS models that fail the session (``--neuron-require-check``).
    unchecked_failing: list[str] = field(default_factory=list)
    #: What ``--neuron-bisect`` found, a line per model (the summary's).
    bisections: list[str] = field(default_factory=list)
    #: Downloads the models to come while others run (controller only): ``--neuron-prefetch-gb``.
    prefetcher: prefetch.Prefetcher | None = None
    #: The compile cache shared through a bucket (controller only): ``--neuron-compile-cache``.
    compile_cache: compilecache.SharedCache | None = None
    #: What sharing it did, for the summary.
    cache_notes: list[str] = field(default_factory=list)

    @cached_property
    def sweep(self) -> Sweep:
        hooks = Hooks(self.config)
        return Sweep(self.settings, self.runners, self.stack, xdist.sweep_id(self.config), hooks)

    @property
    def sweep_id(self) -> str:
        return self.sweep.sweep_id

    @property
    def lanes(self) -> int:
        return self.settings.lanes

    @property
    def device_name(self) -> str:
        return self.settings.device.name

    @cached_property
    def hub_cache(self) -> hub.CacheBound:
        """The Hub cache's bound (``--neuron-hub-cache-max``), as the models' runs end."""
        return hub.CacheBound(self.settings.hub_cache_max_gb, self.settings.judge)

    @property
    def controller(self) -> bool:
        return not xdist.is_worker(self.config)

    def register(self) -> None:
        """Register the session as a plugin, then the progress display (where both hooks come
        first, the display's runs first: the status stops before the merge), junit's skip mend,
        and xdist's hooks where xdist is installed."""
        plugins, display = self.config.pluginmanager, ProgressDisplay(self.config, self)
        plugins.register(self, "neuronsupport-session")
        plugins.register(display, "neuronsupport-display")
        plugins.register(outcomes.JunitSkips(self.config), "neuronsupport-junit-skips")
        if plugins.hasplugin("xdist"):
            plugins.register(xdist.XdistHooks(self.config, self, display), "neuronsupport-xdist")

    # --- hooks -------------------------------------------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Any:
        """Model list files named by the options become collectors of model items."""
        specs = self.lists.get(file_path.resolve())
        if specs is not None:
            return ModelListFile.of(parent, file_path, self.sweep, self.modes, specs)
        return None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Recover the rows of killed sweeps, and open this sweep's journal (controller only)."""
        if self.controller:
            self.start()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """Put the outcomes on the call report (:func:`.outcomes.attach`): under xdist they
        travel to the controller."""
        rep = yield
        if isinstance(item, ModelItem) and call.when == "call":
            allowed = self.settings.baseline_allow_improvements
            outcomes.attach(rep, item.outcomes, item.user_properties, self.baseline, allowed)
        return rep

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """With a shard: keep this machine's part of the models, deselect the others; then
        the order they start in (:meth:`start_order`)."""
        if self.settings.shard is not None:
            ids = collect.model_ids(items)
            mine = shards.mine(ids, self.costs(ids), self.settings.shard, self.store)
            collect.deselect(config, items, keep=mine)
        self.start_order(items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Without xdist: the models are known (controller only)."""
        if self.controller:
            self.start_prefetch([item.name for item in session.items])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """With ``--neuron-lanes N``: the models run N at a time in this process (:mod:`.lanes`),
        or in this xdist worker (:mod:`.xdist_lanes`); else pytest's (or xdist's) own loop."""
        if self.settings.lanes <= 1 or xdist.is_controller(self.config):
            return None
        (lanes.run if self.controller else xdist_lanes.run)(session, self.sweep)
        return True

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Journal each row the moment its test ends (controller only)."""
        carried = outcomes_of(report)
        if self.controller and carried is not None:
            self.record(carried)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The sweep's summary: per table, what was recorded and where; problems; the
        baseline (:func:`report.write_summary`)."""
        if not self.config.option.collectonly:
            report.write_summary(terminalreporter, self.summary_facts())

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file: the baseline, the order
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The reports in list order; merge this sweep's journal into the results, then hold
        the sweep against the baseline (controller only)."""
        self.in_list_order()
        if self.prefetcher is not None:
            self.prefetcher.stop()
        if self.controller and self.journal is not None:
            self.finish(session)

    # --- the sweep's start and end -----------------------------------------------------------

    def start(self) -> None:
        try:  # a local copy: skip-unchanged and --neuron-rerun read the shared dataset
            self.store.pull()
        except ResultsError as exc:
            raise pytest.UsageError(f"neuronsupport: --neuron-results {exc}") from None
        self.share_compile_cache()
        self.note_merge(merge_journals(self.settings.results))
        self.refuse_other_devices()
        self.journal = Journal(self.settings.results)

    def share_compile_cache(self) -> None:
        """Seed the local compile cache from its bucket (``--neuron-compile-cache``, opened
        when the sweep was configured) before any run, and say so at once; a bucket that
        cannot be read stops the sweep here."""
        if self.compile_cache is None:
            return
        try:
            lines = compilecache.start(self.compile_cache)
        except compilecache.CompileCacheError as exc:
            raise pytest.UsageError(f"neuronsupport: --neuron-compile-cache {exc}") from None
        self.cache_notes.extend(lines)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            if tr is not None:
                tr.write_line(line, yellow="will not publish" in line)

    def refuse_other_devices(self) -> None:
        """One pair is one device: a sweep whose pair files hold rows of another device (a
        Neuron sweep with a non-Neuron backend shares the CPU's pair name, ``aot_eager-<torch>``)
        is refused before it runs, never mixing a CPU row and a Neuron row in one pair."""
        device = self.settings.device.name
        for table in {mode.table.name: mode.table for mode in self.modes}.values():
            path = self.settings.results / table.folder / self.sweep.pair
            other = recorded_devices(path) - {device}
            if other:
                raise pytest.UsageError(
                    f"neuronsupport: {path} holds rows of device {', '.join(sorted(other))} and "
                    f"this sweep runs on {device}: one pair is one device; give this sweep "
                    "another --neuron-results"
                )

    def finish(self, session: pytest.Session) -> None:
        assert self.journal is not None
        if self.settings.bisect:  # its rows go through this sweep's journal
            self.bisect_new_failures()
        path = self.journal.path
        self.journal.close()
        self.journal = None
        self.note_merge(merge_journals(self.settings.results, include=[path]))
        self.sweep.budget.remove()
        target = self.settings.results / SUPPORT.folder / self.sweep.pair
        problem = selection.apply_ranks(self.settings.lists, self.runners, target)
        self.problems.extend([problem] if problem else [])
        not_shared = self.store.finish()  # rows the shared dataset lacks (kept locally)
        self.problems.extend(not_shared)
        if self.compile_cache is not None:  # what the sweep compiled, for other machines
            line, went = compilecache.finish(self.compile_cache)
            (self.cache_notes if went else self.problems).append(line)
        if self.settings.require_check:
            self.unchecked_failing = [r["model_id"] for r in report.unchecked_rows(self.covered())]
        if self.baseline is not None:
            self.comparison = self.compare_with_baseline(self.baseline)
            outcomes.junit_global_properties(self.config, self.comparison)
        session.exitstatus = outcomes.exit_status(
            session.exitstatus,
            rows_lost=bool(self.unreadable or not_shared),  # rows not in the dataset: say so
            unchecked_failing=self.unchecked_failing,
            comparison=self.comparison,
        )

    def bisect_new_failures(self) -> None:
        """``--neuron-bisect``: each model that newly fails, bisected across the releases of
        the package that moved (:mod:`pytest_neuronsupport.bisect.aftersweep`); its row
        published and journaled as a mode's are, its line kept for the summary."""
        from pytest_neuronsupport.bisect.aftersweep import bisect_new_failures
        from pytest_neuronsupport.dataset.bisect import BISECT
        from pytest_neuronsupport.dataset.table import row_to_json

        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        say = terminal.write_line if terminal is not None else print
        found = bisect_new_failures(self.sweep, self.covered(), self.baseline, say)
        for made in found.rows:
            row = row_to_json(made, BISECT)  # validated once, as a mode's rows are
            self.store.publish(self.sweep.sweep_id, self.sweep.pair, BISECT, row)
            assert self.journal is not None
            self.journal.append(self.sweep.pair, row, BISECT, validated=True)
        self.bisections = found.lines

    # --- the order models start in, and the order they are reported in -----------------------

    def start_order(self, items: list[pytest.Item]) -> None:
        """``--neuron-order cost`` under several workers or lanes: the model items in their
        start order (:func:`.order.start_order`), the same in every worker
        (:func:`.order.shared_order`)."""
        workers, most, dist = xdist.scheduling(self.config)
        s = self.settings
        if s.order != "cost" or workers * s.lanes <= 1:
            return
        found = order.start_order(
            [item.spec for item in items if isinstance(item, ModelItem)],
            partial(self.sweep.recorded, SUPPORT),
            cache=s.cache,
            core_gb=s.core_capacity_gb,
            max_cores=min(s.max_cores, s.device.core_count()),
            workers=workers,
            most=most,
            dist=dist,
        )
        found = order.shared_order(phases_dir(s.results, self.sweep.sweep_id), found)
        order.reorder(
            items, found, lambda item: item.spec.id if isinstance(item, ModelItem) else None
        )

    def in_list_order(self) -> None:
        """The sweep's reports in list order whatever order its models ran in: the rows the
        summary lists and junit's test cases (the dataset's files are sorted by model)."""
        position = {m: i for i, m in enumerate(self.list_ids())}
        for rows in self.rows.values():
            rows.sort(key=lambda row: position.get(row["model_id"], len(position)))
        outcomes.junit_in_order(self.config, lambda name: position.get(name, len(position)))

    def list_ids(self) -> list[str]:
        """The models of the lists, in list order."""
        return [spec.id for specs in self.lists.values() for spec in specs]

    # --- the state ---------------------------------------------------------------------------

    def worker_died(self, nodeid: str, why: str, report: pytest.TestReport) -> None:
        """A worker died while running a model: its report carries that model's row,
        FAIL(other) (:func:`.outcomes.carry`)."""
        listed = {spec.id: spec for specs in self.lists.values() for spec in specs}
        outcomes.carry(report, died_outcomes(nodeid, why, self.sweep, self.modes, listed))

    def record(self, carried: list[ModeOutcome]) -> None:
        """Keep each outcome's rows, publish them (beyond the local folder, if the store goes
        further) and journal them: they were validated where they were made."""
        for outcome in carried:
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
        if carried:  # the model's runs ended: its checkpoint may go, and its prefetch budget
            self.hub_cache.done(carried[0].model_id)
            if self.prefetcher is not None:
                self.prefetcher.done(carried[0].model_id)

    def start_prefetch(self, models: list[str]) -> None:
        """The sweep's models are known (controller): download the next ones' files ahead."""
        s = self.settings
        specs = {spec.id: spec for listed in self.lists.values() for spec in listed}
        start = [specs[model] for model in models if model in specs]
        recorded = partial(self.sweep.recorded, SUPPORT)
        self.prefetcher = prefetch.ahead(start, recorded, prefetch_gb=s.prefetch_gb,
            hub_cache_max_gb=s.hub_cache_max_gb, rerun=s.rerun, limit=s.limit)  # fmt: skip

    def covered(self) -> list[dict[str, Any]]:
        """This sweep's models: their support rows, or the recorded rows of those not run
        again."""
        rows = list(self.rows.get(SUPPORT.name, []))
        for model_id in self.unchanged.get(SUPPORT.name, []):
            found = self.sweep.recorded(SUPPORT, model_id)
            if found is not None:
                rows.append(found)
        return rows

    def compare_with_baseline(self, expected: Baseline) -> Comparison:
        """This sweep's models (:meth:`covered`) held against the baseline."""
        rows, results, pair = self.covered(), self.settings.results, self.sweep.pair
        run_py = {r["model_id"]: run_py_path(results, pair, r["model_id"]) for r in rows}
        allowed = self.settings.baseline_allow_improvements
        return baseline.compare(expected, rows, run_py=run_py, allow_improvements=allowed)

    def note_merge(self, merge: MergeReport) -> None:
        """Keep what a merge could not do for the terminal summary (once each)."""
        for path, error in merge.unreadable:
            self.unreadable.add(path)
            self.note(report.unreadable_text(path, error, self.settings.results))
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
            notes=[*self.hub_cache.notes(), *self.cache_notes, *self.bisections],
            baseline=s.baseline_uri or s.baseline,
            comparison=self.comparison,
            pair_name=self.sweep.pair.removesuffix(".parquet"),
            unchecked_failing=self.unchecked_failing,
        )

    def costs(self, models: list[str]) -> dict[str, float]:
        """The recorded ``wall_s`` of each model of this sweep's pair."""
        return recorded_costs(models, lambda m: self.sweep.recorded(SUPPORT, m))


def died_outcomes(
    nodeid: str, why: str, sweep: Sweep, modes: list[Mode], listed: dict[str, ModelSpec]
) -> list[dict[str, Any]]:
    """The outcomes of a model whose xdist worker died while running it: its first mode's
    row, FAIL(other) (plain types, as a report carries them)."""
    model_id = nodeid.rsplit("::", 1)[-1]
    spec = listed.get(model_id) or ModelSpec(id=model_id, source=Path(nodeid), line=0)
    first = (modes_.modes_for(spec, modes, sweep.settings) or modes)[0]
    return [modes_.worker_died(first, sweep, spec, why).to_dict()]
