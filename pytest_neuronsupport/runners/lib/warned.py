"""A library's warning is not the model's failure.

A user's ``filterwarnings = error`` (or ``-W error``, ``PYTHONWARNINGS=error``) is meant for the
user's code. Without this, it also turns what torch and transformers warn while a model is
built, loaded or run (``UserWarning: Initializing zero-element tensors is a no-op`` from a tiny
MobileBERT's build) into an exception, and so into a FAIL(load) or FAIL(gen) the backend has
nothing to do with. The model's work is done with every filter that raises made one that shows
the warning instead (``default``: once per place), so the verdict is the same whatever the
filters, and the warnings are still seen: in pytest's warnings summary for what the plugin does
in its own process, in the run's output for a run.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def shown_not_raised() -> None:
    """From now on, every warnings filter that raises shows instead (the others are kept)."""
    kept: list[Any] = [("default", *f[1:]) if f[0] == "error" else f for f in warnings.filters]
    warnings.resetwarnings()  # and the filters' version moves on: no stale registry
    vars(warnings)["filters"].extend(kept)  # the list itself (typeshed says Sequence)


class SharedFilters:
    """The process's warnings filters while models run in threads (``--neuron-lanes``).

    ``catch_warnings`` swaps the filters of the whole process, and two threads that swap them
    in turn restore each other's: a lane's library call could then meet the user's ``error``
    filter. So while lanes run (:meth:`among_threads`, in the main thread) the filters are made
    to show, once, for every thread, and a lane's :func:`library_warnings` changes nothing. The
    main thread alone swaps them meanwhile, in turn, to report each model (pytest's own
    ``catch_warnings``), where the model's ``filterwarnings("default")`` mark shows every
    warning too (:mod:`pytest_neuronsupport.lanes`)."""

    def __init__(self) -> None:
        self.shared = False

    @contextmanager
    def among_threads(self) -> Iterator[None]:
        """While lanes run: the filters show, never raise, in every thread."""
        with warnings.catch_warnings():
            shown_not_raised()
            self.shared = True
            try:
                yield
            finally:
                self.shared = False


#: The process's filters, shared by its lanes (:class:`SharedFilters`).
FILTERS = SharedFilters()


@contextmanager
def library_warnings() -> Iterator[None]:
    """Within: warnings are shown, never raised (:func:`shown_not_raised`); the filters as
    they were afterwards. In a lane (another thread while :attr:`FILTERS` is shared): nothing
    to do, the filters show already. Not for other threads:
    ``catch_warnings`` swaps the process's filters, so a thread's use would undo pytest's (the
    prefetch thread's failures are met again by the model's own fetch, which is wrapped)."""
    if FILTERS.shared and threading.current_thread() is not threading.main_thread():
        yield
        return
    with warnings.catch_warnings():
        shown_not_raised()
        yield
