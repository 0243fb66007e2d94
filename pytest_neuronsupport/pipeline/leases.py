"""Step 4, lease: the device's cores, shared by every run on this machine.

The cores are one shared resource between the workers of a sweep (and the sweeps of a machine
that share a cache). A :class:`CoreAllocator` keeps the leases in a small JSON file guarded by a
``filelock``: each lease is a contiguous range aligned to its size (a 2-core model gets 0-1 or
2-3, never 1-2), and names the processes holding it. A lease whose processes are all dead is
reclaimed, so a killed worker or run never keeps its cores.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import filelock


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped) holds nothing
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


@dataclass(frozen=True)
class Lease:
    start: int
    count: int
    pids: tuple[int, ...]
    token: str

    @property
    def cores(self) -> list[int]:
        return list(range(self.start, self.start + self.count))

    def alive(self) -> bool:
        return any(pid_alive(p) for p in self.pids)


class CoreAllocator:
    """Leases of a device's cores, shared by every process that uses the same ``path``."""

    def __init__(self, path: Path, total: int, poll_s: float = 0.2) -> None:
        if total < 1:
            raise ValueError("a device has at least one core")
        self.path = path
        self.total = total
        self.poll_s = poll_s
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = filelock.FileLock(str(path) + ".lock")

    def _read(self) -> list[Lease]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [Lease(d["start"], d["count"], tuple(d["pids"]), d["token"]) for d in data]

    def _write(self, leases: Iterable[Lease]) -> None:
        tmp = self.path.with_suffix(".tmp")
        data = [
            {"start": x.start, "count": x.count, "pids": list(x.pids), "token": x.token}
            for x in leases
        ]
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, self.path)

    def leases(self) -> list[Lease]:
        """The live leases (reclaiming dead ones)."""
        with self._lock:
            live = [x for x in self._read() if x.alive()]
            self._write(live)
            return live

    def try_acquire(self, count: int, pid: int | None = None) -> Lease | None:
        """A free aligned range of ``count`` cores, or None if none is free now."""
        if count > self.total or count < 1 or count & (count - 1):
            raise ValueError(f"cannot lease {count} of {self.total} cores")
        with self._lock:
            live = [x for x in self._read() if x.alive()]
            taken = {c for x in live for c in x.cores}
            for start in range(0, self.total - count + 1, count):
                if taken.isdisjoint(range(start, start + count)):
                    lease = Lease(start, count, (pid or os.getpid(),), os.urandom(8).hex())
                    self._write([*live, lease])
                    return lease
            self._write(live)
            return None

    def acquire(self, count: int, timeout_s: float | None = None) -> Lease:
        """Wait for an aligned range of ``count`` cores."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            lease = self.try_acquire(count)
            if lease is not None:
                return lease
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no {count} free cores of {self.total} in {timeout_s} s")
            time.sleep(self.poll_s)

    def add_pid(self, lease: Lease, pid: int) -> Lease:
        """Name one more process (the run itself) as a holder of ``lease``."""
        with self._lock:
            leases = self._read()
            updated = Lease(lease.start, lease.count, (*lease.pids, pid), lease.token)
            self._write([updated if x.token == lease.token else x for x in leases])
            return updated

    def release(self, lease: Lease) -> None:
        with self._lock:
            self._write([x for x in self._read() if x.token != lease.token])

    @contextmanager
    def lease(self, count: int) -> Iterator[Lease]:
        held = self.acquire(count)
        try:
            yield held
        finally:
            self.release(held)
