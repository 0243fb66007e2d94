"""pytest-xdist plumbing: who is a worker, the sweep's id handed to the workers, and the row of
a model whose worker died.

Registered only when xdist is installed (its hooks exist only then). Data goes to workers
through ``pytest_configure_node`` → ``node.workerinput``, as xdist's own plugins do.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

import pytest

from pytest_neuronsupport.runners.lib.processes import die_with_parent

SWEEP_ID_KEY = "neuronsupport_sweep_id"


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def tie_to_controller(config: pytest.Config) -> None:
    """A worker dies with its controller, as a run dies with the worker watching it (and the
    worker's fork server, whose pipe then closes, with it): a controller killed outright leaves
    nothing running whose row nobody would record."""
    if is_worker(config):
        die_with_parent()


def sweep_id(config: pytest.Config) -> str:
    """The sweep's id: the controller's, in every worker."""
    workerinput = getattr(config, "workerinput", {})
    return str(workerinput.get(SWEEP_ID_KEY) or uuid.uuid4().hex)


class Session(Protocol):
    """What the xdist hooks need of the sweep session."""

    @property
    def sweep_id(self) -> str: ...
    def crashed(self, nodeid: str, why: str) -> list[dict[str, Any]]: ...
    def start_progress(self, models: list[str]) -> None: ...


#: The report attribute that carries a model's outcomes (see :mod:`.session`).
OUTCOMES_ATTRIBUTE = "neuronsupport_outcomes"


class XdistHooks:
    """Hooks that exist only with pytest-xdist."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def pytest_configure_node(self, node: Any) -> None:
        """Hand the sweep's id to each worker (for the shared --neuron-limit count)."""
        node.workerinput[SWEEP_ID_KEY] = self.session.sweep_id

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller collects nothing: the first worker's collection is the sweep's."""
        if not getattr(self, "_collected", False):
            self._collected = True
            self.session.start_progress([nodeid.rsplit("::", 1)[-1] for nodeid in ids])

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A worker died while running a model: that model's row is FAIL(other)."""
        why = f"the xdist worker running it died ({report.longrepr})".replace("\n", " ")
        setattr(report, OUTCOMES_ATTRIBUTE, self.session.crashed(crashitem, why))
