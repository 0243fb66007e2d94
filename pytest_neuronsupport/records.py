"""Plain records that travel between the sweep's parts: built of plain types, importing
nothing of the package, so that every module may depend on them and they on nothing.

:class:`ModeOutcome` is what one mode's test of a model came to: made by the mode loop
(:mod:`pytest_neuronsupport.modes`), carried on a test report across xdist
(:mod:`pytest_neuronsupport.outcomes`), journaled by the session, shown by the display and
summed up by the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ModeOutcome"]


@dataclass(frozen=True)
class ModeOutcome:
    """What one mode's test of a model came to: its table's rows (validated, JSON form), or why
    it ran nothing. Built of plain types, so that it travels on a test report under xdist
    (:meth:`to_dict`, :meth:`from_dict`)."""

    #: The table's name (:attr:`~pytest_neuronsupport.dataset.table.Table.name`).
    table: str
    model_id: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: Nothing ran: its script is the one recorded (the recorded row stands).
    unchanged: bool = False
    #: Why nothing ran (unchanged, or ``--neuron-limit`` reached).
    reason: str | None = None
    #: The script the rows came from, for the failure text.
    run_py: str | None = None
    #: An environment fault (:mod:`~pytest_neuronsupport.faults`) that stopped the test before
    #: any verdict: no row (a recorded one stays); the model's test is an error naming it.
    fault: str | None = None

    @property
    def ran(self) -> bool:
        """Whether the mode's test made rows."""
        return self.reason is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModeOutcome:
        return cls(**data)
