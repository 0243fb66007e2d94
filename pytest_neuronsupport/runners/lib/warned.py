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

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def shown_not_raised() -> None:
    """From now on, every warnings filter that raises shows instead (the others are kept)."""
    kept: list[Any] = [("default", *f[1:]) if f[0] == "error" else f for f in warnings.filters]
    warnings.resetwarnings()  # and the filters' version moves on: no stale registry
    vars(warnings)["filters"].extend(kept)  # the list itself (typeshed says Sequence)


@contextmanager
def library_warnings() -> Iterator[None]:
    """Within: warnings are shown, never raised (:func:`shown_not_raised`); the filters as
    they were afterwards. In the sweep's main thread only: ``catch_warnings`` swaps the
    process's filters, so a thread's use would undo pytest's (the prefetch thread's failures are
    met again by the model's own fetch, which is wrapped)."""
    with warnings.catch_warnings():
        shown_not_raised()
        yield
