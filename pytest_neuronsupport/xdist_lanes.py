"""Lanes under pytest-xdist (``-n N --neuron-lanes M``): each worker runs its models in lanes.

An xdist worker runs the items its controller sends it one at a time: its loop (xdist's
``WorkerInteractor.pytest_runtestloop``, in ``xdist.remote``) takes the next index from its
queue, runs pytest's protocol for that item, and tells the controller
``runtest_protocol_complete``; the controller's scheduler keeps each worker a few items ahead.
A worker with lanes runs :func:`run` in that loop's place: the commands of its controller
(``runtests``, ``runtests_all``, ``shutdown``, ``steal``: xdist's own protocol between the two)
hand the items to a :class:`~pytest_neuronsupport.lanes.Loop`, which runs the models in lanes
and reports each as it ends; the worker tells its controller what xdist's loop would (the
item's index on its report, ``runtest_protocol_complete`` after it, the items asked back that
have not started). Reports, and the rows they carry, travel to the controller as ever.

The controller's scheduler: xdist's ``load`` sends a worker more only once fewer than two of
its items are unfinished, which would leave all its lanes but two idle:
:class:`~pytest_neuronsupport.xdist.LaneScheduling` (``load`` otherwise) keeps each worker one
item beyond its lanes. ``loadscope``, ``loadfile``,
``loadgroup`` and ``each`` send whole groups (all of a list's models, or all), which the worker
runs in lanes as they come. ``--dist worksteal`` is refused (:func:`.lanes.refused`): its idle
worker asks another for the back half of what it was sent, which that worker's lanes may be
running already, is refused, and asks again at once, over and over.

When the sweep stops (``-x``, ``--maxfail``), a worker's loop stops as xdist's does (its lanes
stopped, each model whose lane had ended reported), and tells its controller through
``workeroutput`` as ever. A worker that dies with several models running: xdist names the
first of its unfinished items as the one it crashed on (a ``FAIL(other)`` row,
:func:`.session.died_outcomes`), and sends the others to another worker, where they run again.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_neuronsupport.lanes import Loop
from pytest_neuronsupport.pipeline.sweep import Sweep

#: What the worker's channel hands its callback when it closes (the controller is gone).
CLOSED = "neuronsupport: the controller's channel closed"


def run(session: pytest.Session, sweep: Sweep) -> None:
    """An xdist worker's test loop with its models in lanes (the module's docstring)."""
    worker = interactor(session.config)

    def before(index: int) -> None:  # xdist's report of the item names it by its index
        worker.item_index = index

    def done(index: int, seconds: float) -> None:
        worker.sendevent("runtest_protocol_complete", item_index=index, duration=seconds)

    loop = Loop(session, sweep, before, done)

    def command(message: Any) -> None:  # in execnet's receiver thread
        name, kwargs = ("shutdown", {}) if message == CLOSED else message
        if name == "runtests":
            loop.hand(kwargs["indices"])
        elif name == "runtests_all":
            loop.hand(range(len(session.items)))
        elif name == "steal":
            loop.steal(kwargs["indices"], lambda got: worker.sendevent("unscheduled", indices=got))
        elif name == "shutdown":
            loop.end()

    worker.channel.setcallback(command, endmarker=CLOSED)
    loop.run()


def interactor(config: pytest.Config) -> Any:
    """The worker's side of xdist (its ``WorkerInteractor``, a plugin without a name): its
    channel to the controller, its events, the index of the item it reports."""
    for plugin in config.pluginmanager.get_plugins():
        if all(hasattr(plugin, name) for name in ("channel", "sendevent", "torun")):
            return plugin
    raise RuntimeError("neuronsupport: lanes in an xdist worker found no xdist worker plugin")
