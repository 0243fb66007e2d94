"""The sweep stops: what is waiting or running for a model ends at once.

A sweep whose models run in lanes (``--neuron-lanes``) stops them when it stops (an interrupt,
``-x``, ``--maxfail``): the session sets the sweep's event
(:attr:`~pytest_neuronsupport.pipeline.sweep.Sweep.stopping`), and each wait (for cores, for host
memory) and each run watched (:mod:`.isolate`) raises :class:`Stopped` on seeing it.
"""

from __future__ import annotations

import threading
import time


class Stopped(BaseException):
    """The sweep stopped while a model waited or ran: nothing it came to is the model's. A
    ``BaseException``, as ``KeyboardInterrupt`` is, so that no handler of "a bug of ours" makes
    it a row."""


def check(stop: threading.Event | None, what: str) -> None:
    """Raise :class:`Stopped` if the sweep has stopped (``what``: what was to go on)."""
    if stop is not None and stop.is_set():
        raise Stopped(f"the sweep stopped: {what}")


def pause(stop: threading.Event | None, seconds: float, what: str) -> None:
    """Sleep ``seconds`` between two looks at what is awaited, unless the sweep stops."""
    if stop is None:
        time.sleep(seconds)
    elif stop.wait(seconds):
        raise Stopped(f"the sweep stopped: {what}")
