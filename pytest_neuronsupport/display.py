"""A sweep's progress on pytest's terminal: a plugin object of its own, registered by the
session (:meth:`~pytest_neuronsupport.session.SweepSession.register`).

In the default verbosity each finished model gets a line (:func:`.report.model_line`) instead
of pytest's letters, and a status ticks on the last line of a terminal, or is a line now and
then in a log (:class:`~pytest_neuronsupport.progress.Ticker`, reading the sweep's phase files).
This is the one module that reaches into pytest's terminal reporter (its path prefix, its
``[ 50%]``, its file and width); the state and the texts are :mod:`.progress`'s and
:mod:`.report`'s, the status word and letter :mod:`.outcomes`'s. Only the controller shows
anything: under xdist the first worker's collection starts the count
(:class:`~pytest_neuronsupport.xdist.XdistHooks`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import pytest

from pytest_neuronsupport import report, xdist
from pytest_neuronsupport.dataset.layout import phases_dir
from pytest_neuronsupport.outcomes import outcomes_of, report_status, skip_reason
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.progress import Progress, Ticker, read_running, terminal_writer
from pytest_neuronsupport.records import ModeOutcome


class Sweeping(Protocol):
    """What the display needs of the sweep session: the sweep (its phase files, under its
    results folder), and the recorded cost of each model."""

    @property
    def sweep(self) -> Sweep: ...
    def costs(self, models: list[str]) -> dict[str, float]: ...


@dataclass(eq=False)  # a plugin must stay hashable
class ProgressDisplay:
    config: pytest.Config
    session: Sweeping
    progress: Progress | None = None
    ticker: Ticker | None = None

    @property
    def controller(self) -> bool:
        return not xdist.is_worker(self.config)

    @property
    def phases(self) -> Path:
        """The folder of the sweep's phase files (what runs now)."""
        sweep = self.session.sweep
        return phases_dir(sweep.settings.results, sweep.sweep_id)

    @property
    def lines_per_model(self) -> bool:
        """A line per finished model replaces pytest's letters in the default verbosity."""
        return self.config.get_verbosity() == 0 and not self.config.option.collectonly

    # --- hooks -------------------------------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """With a line per model (each names it), no path before pytest's letters."""
        if self.controller:
            self.hide_paths()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Without xdist: the models to run are known; start counting (controller only)."""
        if self.controller:
            self.start([item.name for item in session.items])

    @pytest.hookimpl(trylast=True)  # after the session journaled the rows
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A line for each model as its test ends (controller only)."""
        outcomes = outcomes_of(report)
        if self.controller and outcomes is not None:
            self.show(report.nodeid.rsplit("::", 1)[-1], outcomes, report)

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str] | None:
        """A model's result as its pytest status; in the default verbosity no letter, as each
        model gets a line of its own (:meth:`show`), skipped ones included."""
        outcomes = outcomes_of(report)
        return None if outcomes is None else report_status(report, outcomes, self.lines_per_model)

    @pytest.hookimpl(tryfirst=True)  # before the session's merge: the status stops first
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The status stops; the sweep's phase files go (the controller's, at its end)."""
        self.stop()

    # --- the display -------------------------------------------------------------------------

    def hide_paths(self) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None and self.lines_per_model:
            tr.showfspath = False  # each model's line names it

    def start(self, models: list[str]) -> None:
        """Count the sweep's models; with a line per model, the status ticks from now on."""
        self.progress = Progress(models, self.session.costs(models))
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None or not self.lines_per_model or self.ticker is not None:
            return
        tr._show_progress_info = False  # pytest's own [ 50%] would fight the status
        tr.flush()
        write = terminal_writer(tr._tw._file)  # not fd 1: pytest captures it while tests run
        running = partial(read_running, self.phases)
        self.ticker = Ticker(self.progress, running, write, bool(tr.isatty()), tr._tw.fullwidth)
        self.ticker.start()

    def stop(self) -> None:
        """The status stops; the sweep's phase files go (the controller's, at its end)."""
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None
        if self.controller:
            shutil.rmtree(self.phases, ignore_errors=True)

    def show(self, model_id: str, outcomes: list[ModeOutcome], rep: pytest.TestReport) -> None:
        """A line for the model; the status stays on the last line of a terminal, and is a
        line of its own in a log at each tenth of the sweep."""
        if self.progress is None:
            self.start([])
        assert self.progress is not None
        line, result, wall_s = report.model_line(model_id, outcomes, rep.outcome, skip_reason(rep))
        self.progress.finished(model_id, result, wall_s)
        tr: Any = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None or self.ticker is None:
            return
        tr.flush()
        self.ticker.finished(line)
        if self.ticker.tty:
            tr.currentfspath = -2  # the next write of pytest's starts a new line
