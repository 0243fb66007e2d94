"""xdist's own ``load`` scheduler, driven without workers: test doubles of pytest's options and
of the worker nodes it sends entries to (what it sends each at the start is what is asserted)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from xdist.scheduler import LoadScheduling


class OptionsForTests:
    """What xdist's scheduler reads of pytest's configuration."""

    def __init__(self, workers: int, most: int | None = None) -> None:
        self.workers, self.most = workers, most

    def getvalue(self, name: str) -> Any:
        if name == "maxschedchunk":
            return self.most
        return [f"{self.workers}*popen"] if name == "tx" else None

    getoption = getvalue


class WorkerForTests:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduled(ids: list[str], workers: int, most: int | None = None) -> list[WorkerForTests]:
    """What xdist's own ``load`` scheduler sends each worker at the start."""
    scheduler = LoadScheduling(OptionsForTests(workers, most))  # type: ignore[arg-type]
    nodes = [WorkerForTests(f"gw{k}") for k in range(workers)]
    for node in nodes:
        scheduler.add_node(node)  # type: ignore[arg-type]
    for node in nodes:
        scheduler.add_node_collection(node, ids)  # type: ignore[arg-type]
    scheduler.schedule()
    return nodes
