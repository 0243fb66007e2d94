"""Modes: what a sweep does with each model, one table each.

A mode is one kind of test of a model and the table its rows go to: support (:mod:`.support`:
does it load, compile and generate or run, and match the CPU), performance (:mod:`.perf`,
``--neuron-perf``), training (:mod:`.train`, ``--neuron-train``), or a user's own, added
through the ``pytest_neuronsupport_modes`` hook. What a mode implements, and the one loop that
drives them all, are in :mod:`.mode`; what a mode's test comes to, :class:`ModeOutcome`, is a
plain record of :mod:`pytest_neuronsupport.records`. This package's face names them.
"""

from __future__ import annotations

from pytest_neuronsupport.modes.mode import (
    Mode,
    Script,
    common_row,
    modes_for,
    test,
    test_entry,
    trains,
    worker_died,
)
from pytest_neuronsupport.modes.perf import Perf
from pytest_neuronsupport.modes.support import Support
from pytest_neuronsupport.modes.train import Train
from pytest_neuronsupport.records import ModeOutcome

__all__ = [
    "Mode",
    "ModeOutcome",
    "Script",
    "builtin_modes",
    "common_row",
    "modes_for",
    "test",
    "test_entry",
    "trains",
    "worker_died",
]


def builtin_modes() -> list[Mode]:
    """The plugin's own modes, in the order they run for an entry."""
    return [Support(), Perf(), Train()]
