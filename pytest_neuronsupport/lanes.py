"""Several models at once in one pytest process: ``--neuron-lanes N``.

Without it a process runs one model at a time, and a sweep fills a device of 64 cores with
small models only through as many xdist workers (``-n 64``), each a pytest process with its
own imports and its own fork server. With ``N`` lanes the one process runs up to ``N`` models
at once, each in a thread of its own (a *lane*) down the same path as ever (its plan, its
script, its reference before its lease, its own cores waited for, its isolated run): what
bounds the models running at once is then the device's cores, not the processes.

A :class:`Loop` runs the items handed to it, by their index in the session: the models in
lanes, taken in the order they are handed (``--neuron-order cost``: largest first), each
reported by pytest (its report, its rows journaled, its line) in the main thread as its lane
ends it, in the order they end (the dataset's rows are kept by model, the summary and junit in
the lists' order); an item that is no model runs in the main thread once no lane runs. Without
xdist, :func:`run` hands it the session's items, the other tests first; under xdist each
worker's loop is handed the items its controller sends it (:mod:`.xdist_lanes`).

When the sweep stops (an interrupt, ``-x``, ``--maxfail``), no model starts any more, and
those going stop at once, without a row (:mod:`.pipeline.stopping`), as a model interrupted
without lanes has none; a model whose lane had ended is reported still, its row journaled and
its junit case written: nothing finished is lost.

Lanes share the process: its plan runs one model at a time (a zoo model's build is seeded),
its phase files say what each lane runs (:class:`~pytest_neuronsupport.progress.PhaseMarks`),
and the warnings filters are shared (:class:`~pytest_neuronsupport.runners.lib.warned.
SharedFilters`).
"""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import pytest

from pytest_neuronsupport.collect import ModelItem
from pytest_neuronsupport.pipeline.stopping import Stopped
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.runners.lib.warned import FILTERS

#: The mark of a model reported while lanes run: pytest swaps the process's warnings filters
#: for each report (its ``filterwarnings`` ini key, ``-W``), and a lane's library call meanwhile
#: meets them: the mark, applied last, makes every warning shown there, never raised.
SHOWN = pytest.mark.filterwarnings("default")


def refused(lanes: int, config: pytest.Config) -> str | None:
    """Why ``lanes`` cannot be used with the session's options (None: they can)."""
    dist = getattr(config.option, "dist", "no")
    if lanes > 1 and dist == "worksteal":
        return (
            f"--neuron-lanes {lanes} with --dist worksteal: an idle xdist worker asks another "
            "for the back half of the models it was sent, which that worker's lanes may be "
            "running already; it refuses, and xdist asks again at once, over and over. Use "
            "--dist load (the default) with lanes"
        )
    return None


def run(session: pytest.Session, sweep: Sweep) -> None:
    """pytest's test loop (``pytest_runtestloop``) with the models in lanes (the module's
    docstring): the session's other tests first, then its models, in the session's order."""
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        s = "s" if session.testsfailed != 1 else ""
        raise session.Interrupted(f"{session.testsfailed} error{s} during collection")
    if session.config.option.collectonly:
        return
    loop = Loop(session, sweep)
    models = [isinstance(item, ModelItem) for item in session.items]
    loop.hand([i for i, model in enumerate(models) if not model])
    loop.hand([i for i, model in enumerate(models) if model])
    loop.end()
    loop.run()
    if session.shouldfail:  # as pytest's own loop: -x, --maxfail or a plugin asked to stop
        raise session.Failed(session.shouldfail)
    if session.shouldstop:
        raise session.Interrupted(session.shouldstop)


class Loop:
    """Runs the session's items handed to it (:meth:`hand`), until it is told the end
    (:meth:`end`) and all has been reported, or the session stops (the module's docstring).

    ``before(index)`` is called before each item's report, ``done(index, seconds)`` after it,
    with the seconds since it started (xdist's worker tells its controller so)."""

    def __init__(
        self,
        session: pytest.Session,
        sweep: Sweep,
        before: Callable[[int], None] = lambda index: None,
        done: Callable[[int, float], None] = lambda index, seconds: None,
    ) -> None:
        self.session, self.sweep, self.before, self.done = session, sweep, before, done
        self.lanes = sweep.settings.lanes
        #: What comes, from any thread: ("item", index), ("end", None), ("steal", (indices,
        #: answer)), ("ended", future). Only the loop's thread reads it.
        self.events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.waiting: deque[int] = deque()
        #: Each lane's model: its future, its index and when it started.
        self.running: dict[Future[None], tuple[int, float]] = {}
        self.ending = False
        #: The filters shared while lanes run (:class:`SharedFilters`), closed when none does.
        self.shared_filters = ExitStack()

    # --- fed from any thread -------------------------------------------------------------------

    def hand(self, indices: Iterable[int]) -> None:
        """Items to run, by index in the session, in this order."""
        for index in indices:
            self.events.put(("item", index))

    def end(self) -> None:
        """No item comes after those handed."""
        self.events.put(("end", None))

    def steal(self, indices: list[int], answer: Callable[[list[int]], None]) -> None:
        """Give back those of ``indices`` not started yet: ``answer`` gets them."""
        self.events.put(("steal", (indices, answer)))

    # --- the loop's thread ---------------------------------------------------------------------

    def run(self) -> None:
        """Run what is handed until the end, or until the session stops; then stop the lanes,
        and report each model whose lane had ended (the module's docstring)."""
        shared(self.sweep)
        pool = ThreadPoolExecutor(self.lanes, thread_name_prefix="neuronsupport-lane")
        try:
            while not (self.ending and not self.waiting and not self.running):
                self.step(pool)
                if self.session.shouldfail or self.session.shouldstop:
                    break
        finally:
            self.sweep.stopping.set()  # no model starts now; those going stop
            pool.shutdown(wait=True, cancel_futures=True)
            self.shared_filters.close()
            for future in sorted(self.running, key=lambda f: self.running[f][0]):
                if finished(future):
                    self.report(future)

    def step(self, pool: ThreadPoolExecutor) -> None:
        """An item that is no model runs, once no lane does; else the free lanes take the
        models waiting, and the loop takes what comes next (an item, a lane that ended...)."""
        first = self.waiting[0] if self.waiting else None
        if first is not None and not isinstance(self.session.items[first], ModelItem):
            if not self.running:  # alone, with the session's filters
                self.shared_filters.close()
                self.protocol(self.waiting.popleft(), time.monotonic(), self.next_other())
                return
        else:
            while self.waiting and len(self.running) < self.lanes:
                if not isinstance(self.session.items[self.waiting[0]], ModelItem):
                    break
                self.start(pool, self.waiting.popleft())
        self.take(*self.events.get())

    def start(self, pool: ThreadPoolExecutor, index: int) -> None:
        item = self.session.items[index]
        assert isinstance(item, ModelItem)
        if not FILTERS.shared:  # while lanes run, the filters show in every thread
            self.shared_filters.enter_context(FILTERS.among_threads())
        item.add_marker(SHOWN)  # its report shows the lanes' warnings (SharedFilters)
        item.ahead = pool.submit(item.run_modes)
        self.running[item.ahead] = (index, time.monotonic())
        item.ahead.add_done_callback(lambda future: self.events.put(("ended", future)))

    def take(self, what: str, value: Any) -> None:
        if what == "item":
            self.waiting.append(value)
        elif what == "end":
            self.ending = True
        elif what == "steal":
            indices, answer = value
            asked = set(indices)
            stolen = [index for index in self.waiting if index in asked]
            self.waiting = deque(index for index in self.waiting if index not in stolen)
            answer(stolen)
        elif what == "ended":
            self.report(value)

    def report(self, future: Future[None]) -> None:
        """pytest's protocol for a model its lane has run: its setup, its report (the lane's
        outcomes), its teardown."""
        self.protocol(*self.running.pop(future))

    def next_other(self) -> pytest.Item | None:
        """The item after the first one waiting, if it is known and no model."""
        after = self.session.items[self.waiting[0]] if self.waiting else None
        return None if isinstance(after, ModelItem) else after

    def protocol(self, index: int, started: float, nextitem: pytest.Item | None = None) -> None:
        """pytest's protocol for the item. What comes after a model is not known (the next
        lane to end): pytest tears its collectors down, which a model's test never sets
        anything up in."""
        self.before(index)
        item = self.session.items[index]
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        self.done(index, time.monotonic() - started)


def finished(future: Future[None]) -> bool:
    """Whether a lane's model came to its end (its outcomes, or an error of its own to
    report), not stopped with the sweep nor never started."""
    return not future.cancelled() and not isinstance(future.exception(), Stopped)


def shared(sweep: Sweep) -> Any:
    """What the lanes share, made once here before they start (a ``cached_property`` is not
    made once under threads since Python 3.12)."""
    return sweep.phases, sweep.allocator, sweep.host_memory, sweep.budget, sweep.compiler
