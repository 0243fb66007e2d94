"""pytest-xdist plumbing, asked by everyone and by nothing else: who is a worker, how many
share the items and how they are sent, the sweep's id, and the hooks that exist only with xdist
(among them, with ``--neuron-lanes``, the scheduler that keeps each worker's lanes busy:
:class:`LaneScheduling`).

Data goes to workers through ``pytest_configure_node`` → ``node.workerinput``, as xdist's own
plugins do, filled in one place (:meth:`XdistHooks.pytest_configure_node`): the sweep's id
(for the shared ``--neuron-limit`` count and the sweep's folder) and the controller's
scheduling (a worker's own options say ``--dist no``). This module imports nothing of the
sweep: the session it serves is a :class:`Session` (:class:`~.session.SweepSession`).
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

import pytest
from xdist.scheduler import LoadScheduling

from pytest_neuronsupport.runners.lib.processes import die_with_parent

#: The keys of a worker's ``workerinput`` that this plugin fills.
SWEEP_ID_KEY = "neuronsupport_sweep_id"
SCHEDULING_KEY = "neuronsupport_scheduling"
DEVICE_KEY = "neuronsupport_device"
#: The xdist schedulers that send items one by one, whose start the order can set.
DEALT = ("load", "worksteal")


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker (not the controller, nor a run without xdist)."""
    return hasattr(config, "workerinput")


def worker_count(config: pytest.Config) -> int:
    """How many xdist workers share the session's items (1 without xdist, and in the
    controller)."""
    return int(getattr(config, "workerinput", {}).get("workercount", 1))


def scheduling(config: pytest.Config) -> tuple[int, int | None, str]:
    """The workers that share out the items one by one (xdist's ``load`` or ``worksteal``
    scheduler), the controller's ``--maxschedchunk``, and its ``--dist`` (1 worker without
    xdist, or under another scheduler)."""
    if not is_worker(config):
        return 1, None, "no"
    dist, most = config.workerinput.get(SCHEDULING_KEY) or ("load", None)  # type: ignore[attr-defined]
    if dist not in DEALT:
        return 1, None, dist
    return worker_count(config), most, dist


def is_controller(config: pytest.Config) -> bool:
    """Whether this process hands the items to xdist workers (``-n``, ``--tx``), running none."""
    return getattr(config.option, "dist", "no") != "no" and not is_worker(config)


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


def device(config: pytest.Config) -> str | None:
    """The device the controller resolved (``--neuron-device auto`` included), in a worker:
    one sweep is one device (None: not a worker)."""
    return getattr(config, "workerinput", {}).get(DEVICE_KEY)


def handed(config: pytest.Config, sweep: str, device: str) -> dict[str, Any]:
    """What the controller hands each worker in its ``workerinput``: the sweep's id, its
    device (a worker does not resolve ``auto`` again: every row of a sweep is of one device)
    and the controller's scheduling (its ``--dist`` and ``--maxschedchunk``)."""
    option = config.option
    scheduled = (getattr(option, "dist", "load"), getattr(option, "maxschedchunk", None))
    return {SWEEP_ID_KEY: sweep, DEVICE_KEY: device, SCHEDULING_KEY: scheduled}


class Session(Protocol):
    """What the xdist hooks need of the sweep session."""

    @property
    def sweep_id(self) -> str: ...
    @property
    def lanes(self) -> int: ...
    @property
    def device_name(self) -> str: ...
    def start_prefetch(self, models: list[str]) -> None: ...
    def worker_died(self, nodeid: str, why: str, report: pytest.TestReport) -> None: ...


class Display(Protocol):
    """What the xdist hooks need of the progress display (:mod:`.display`)."""

    def start(self, models: list[str]) -> None: ...


class XdistHooks:
    """Hooks that exist only with pytest-xdist."""

    def __init__(self, config: pytest.Config, session: Session, display: Display) -> None:
        self.config = config
        self.session = session
        self.display = display
        self.collected = False

    def pytest_configure_node(self, node: Any) -> None:
        """Hand each worker the sweep's id, its device and the controller's scheduling."""
        session = self.session
        node.workerinput.update(handed(self.config, session.sweep_id, session.device_name))

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller collects nothing: the first worker's collection is the sweep's."""
        if not self.collected:
            self.collected = True
            models = [nodeid.rsplit("::", 1)[-1] for nodeid in ids]
            self.session.start_prefetch(models)
            self.display.start(models)

    @pytest.hookimpl(wrapper=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """With lanes, xdist's ``load`` made to keep each worker's lanes busy
        (:class:`LaneScheduling`); another scheduler as it was made."""
        made = yield
        if self.session.lanes > 1 and type(made) is LoadScheduling:
            return LaneScheduling(config, log, lanes=self.session.lanes)
        return made

    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A worker died while running a model: the session puts that model's row on the
        report."""
        why = f"the xdist worker running it died ({report.longrepr})".replace("\n", " ")
        self.session.worker_died(crashitem, why, report)


class LaneScheduling(LoadScheduling):  # type: ignore[misc]
    """xdist's ``load`` scheduler, each worker kept one item beyond its ``lanes``: xdist's own
    sends a worker more only once fewer than two of its items are unfinished, which would leave
    all its lanes but two idle (:mod:`.xdist_lanes` runs a worker's items in lanes)."""

    def __init__(self, config: pytest.Config, log: Any = None, *, lanes: int) -> None:
        super().__init__(config, log)
        self.lanes = lanes

    def schedule(self) -> None:
        super().schedule()
        for node in self.nodes:
            self.top_up(node)

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        super().check_schedule(node, duration)
        self.top_up(node)

    def top_up(self, node: Any) -> None:
        """Send ``node`` what it lacks to keep its lanes busy and one item waiting."""
        short = self.lanes + 1 - len(self.node2pending[node])
        if short > 0 and self.pending and not node.shutting_down:
            self._send_tests(node, short)
