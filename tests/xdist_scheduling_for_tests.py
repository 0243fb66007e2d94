"""xdist's own ``load`` and ``worksteal`` schedulers, driven without workers: test doubles of
pytest's options and of the worker nodes they send entries to (what each is sent at the start
is what is asserted)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from xdist.scheduler import LoadScheduling, WorkStealingScheduling


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


def scheduled(
    ids: list[str], workers: int, most: int | None = None, dist: str = "load"
) -> list[WorkerForTests]:
    """What xdist's own ``load`` (or ``worksteal``) scheduler sends each worker at the start."""
    kind = WorkStealingScheduling if dist == "worksteal" else LoadScheduling
    scheduler: Any = kind(OptionsForTests(workers, most))
    nodes = [WorkerForTests(f"gw{k}") for k in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, ids)
    scheduler.schedule()
    return nodes
