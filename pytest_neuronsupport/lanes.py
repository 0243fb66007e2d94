"""Several models at once in one pytest process: ``--neuron-lanes N``.

Without it a process runs one model at a time, and a sweep fills a device of 64 cores with
small models only through as many xdist workers (``-n 64``), each a pytest process with its
own imports and its own fork server. With ``N`` lanes the one process runs up to ``N`` models
at once, each in a thread of its own (a *lane*) down the same path as ever (its plan, its
script, its reference before its lease, its own cores waited for, its isolated run): what
bounds the models running at once is then the device's cores, not the processes.

The lanes take the models in the session's order (``--neuron-order cost``: largest first) and
pytest reports each as its lane ends it: its report, its rows journaled, its line, in the order
they end, not the lists' (the dataset's rows are kept by model, the summary in the lists'
order). Other tests of the session run first, as pytest would run them. When the sweep stops
(an interrupt, ``-x``, ``--maxfail``), no model starts any more, and those going stop at once,
without a row (:mod:`.pipeline.stopping`), as a model interrupted without lanes has none.

Lanes share the process: its plan runs one model at a time (a zoo model's build is seeded),
its phase files say what each lane runs (:class:`~pytest_neuronsupport.progress.PhaseMarks`),
and the warnings filters are shared (:class:`~pytest_neuronsupport.runners.lib.warned.
SharedFilters`). Lanes are for a process that runs the whole sweep: under xdist each worker's
items come from the controller one by one, so ``-n`` with lanes is refused.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import pytest

from pytest_neuronsupport import xdist
from pytest_neuronsupport.collect import ModelItem
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.runners.lib.warned import FILTERS

#: The mark of a model reported while lanes run: pytest swaps the process's warnings filters
#: for each report (its ``filterwarnings`` ini key, ``-W``), and a lane's library call meanwhile
#: meets them: the mark, applied last, makes every warning shown there, never raised.
SHOWN = pytest.mark.filterwarnings("default")


def refused(lanes: int, config: pytest.Config) -> str | None:
    """Why ``lanes`` cannot be used with the session's options (None: they can)."""
    numprocesses = getattr(config.option, "numprocesses", None)
    if lanes > 1 and (numprocesses or xdist.is_worker(config)):
        return (
            f"--neuron-lanes {lanes} runs the models of one process at once: use it without "
            "xdist's -n (or with -n 0), or -n without lanes"
        )
    return None


def run(session: pytest.Session, sweep: Sweep) -> None:
    """pytest's test loop (``pytest_runtestloop``) with the models in lanes (the module's
    docstring)."""
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        s = "s" if session.testsfailed != 1 else ""
        raise session.Interrupted(f"{session.testsfailed} error{s} during collection")
    if session.config.option.collectonly:
        return
    items = session.items
    others = [item for item in items if not isinstance(item, ModelItem)]
    for i, item in enumerate(others):
        after = others[i + 1] if i + 1 < len(others) else None
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=after)
        stop_if_asked(session)
    models = [item for item in items if isinstance(item, ModelItem)]
    if models:
        in_lanes(session, sweep, models)


def in_lanes(session: pytest.Session, sweep: Sweep, models: list[ModelItem]) -> None:
    """Run ``models`` in the sweep's lanes, each reported as it ends."""
    lanes = ThreadPoolExecutor(sweep.settings.lanes, thread_name_prefix="neuronsupport-lane")
    started: dict[Future[None], ModelItem] = {}
    place = {item.nodeid: i for i, item in enumerate(models)}
    shared(sweep)
    try:
        with FILTERS.among_threads():
            for item in models:  # in the session's order: the pool starts them so
                item.add_marker(SHOWN)  # its report shows the lanes' warnings (SharedFilters)
                item.ahead = lanes.submit(item.run_modes)
                started[item.ahead] = item
            going = set(started)
            while going:
                ended, going = wait(going, return_when=FIRST_COMPLETED)
                for future in sorted(ended, key=lambda f: place[started[f].nodeid]):
                    report(started[future])
                    stop_if_asked(session)
    finally:
        sweep.stopping.set()  # no model starts now; those going stop
        lanes.shutdown(wait=True, cancel_futures=True)


def report(item: ModelItem) -> None:
    """pytest's protocol for a model its lane has run: its setup, its report (the lane's
    outcomes), its teardown. What comes after it is not known (the next lane to end): pytest
    tears its collectors down, which a model's test never sets anything up in."""
    item.config.hook.pytest_runtest_protocol(item=item, nextitem=None)


def shared(sweep: Sweep) -> Any:
    """What the lanes share, made once here before they start (a ``cached_property`` is not
    made once under threads since Python 3.12)."""
    return sweep.phases, sweep.allocator, sweep.host_memory, sweep.budget, sweep.compiler


def stop_if_asked(session: pytest.Session) -> None:
    """As pytest's own loop: ``-x``, ``--maxfail`` or a plugin asked the session to stop."""
    if session.shouldfail:
        raise session.Failed(session.shouldfail)
    if session.shouldstop:
        raise session.Interrupted(session.shouldstop)
