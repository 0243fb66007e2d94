"""pytest-xdist plumbing: who is a worker, the sweep's id handed to the workers, and the row of
a model whose worker died.

Registered only when xdist is installed (its hooks exist only then). Data goes to workers
through ``pytest_configure_node`` → ``node.workerinput``, as xdist's own plugins do.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pytest

from pytest_neuronsupport import modes as modes_
from pytest_neuronsupport.modellist import ModelSpec, parse
from pytest_neuronsupport.modes import Mode
from pytest_neuronsupport.outcomes import carry
from pytest_neuronsupport.pipeline.sweep import Sweep
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
    def sweep(self) -> Sweep: ...
    @property
    def modes(self) -> list[Mode]: ...
    def start_prefetch(self, models: list[str]) -> None: ...


class Display(Protocol):
    """What the xdist hooks need of the progress display (:mod:`.display`)."""

    def start(self, models: list[str]) -> None: ...


class XdistHooks:
    """Hooks that exist only with pytest-xdist."""

    def __init__(self, session: Session, display: Display) -> None:
        self.session = session
        self.display = display

    def pytest_configure_node(self, node: Any) -> None:
        """Hand the sweep's id to each worker (for the shared --neuron-limit count)."""
        node.workerinput[SWEEP_ID_KEY] = self.session.sweep.sweep_id

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller collects nothing: the first worker's collection is the sweep's."""
        if not getattr(self, "_collected", False):
            self._collected = True
            models = [nodeid.rsplit("::", 1)[-1] for nodeid in ids]
            self.session.start_prefetch(models)
            self.display.start(models)

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A worker died while running a model: its report carries that model's row,
        FAIL(other) (:func:`.outcomes.carry`)."""
        why = f"the xdist worker running it died ({report.longrepr})".replace("\n", " ")
        carry(report, crashed(crashitem, why, self.session.sweep, self.session.modes))


def crashed(nodeid: str, why: str, sweep: Sweep, modes: Sequence[Mode]) -> list[dict[str, Any]]:
    """The outcomes of a model whose xdist worker died while running it: its first mode's
    row, FAIL(other) (plain types, as a report carries them)."""
    model_id = nodeid.rsplit("::", 1)[-1]
    lists = sweep.settings.lists
    specs = {s.id: s for path in lists for s in parse(path, sweep.runners)}
    spec = specs.get(model_id) or ModelSpec(id=model_id, source=Path(nodeid), line=0)
    first = (modes_.modes_for(spec, modes, sweep.settings) or modes)[0]
    return [modes_.crashed(first, sweep, spec, why).to_dict()]
