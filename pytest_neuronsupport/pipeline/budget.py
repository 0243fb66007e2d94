"""``--neuron-limit N``: how many models a sweep may still run, shared by its xdist workers.

The count lives in a small file under a ``filelock`` named by the sweep's id (the controller
hands the id to its workers), so "at most N models" holds across processes.
"""

from __future__ import annotations

import os
from pathlib import Path

import filelock


class Budget:
    """At most ``limit`` runs in a sweep (no limit when ``limit`` is None)."""

    def __init__(self, limit: int | None, folder: Path, sweep_id: str) -> None:
        self.limit = limit
        self.path = folder / f"{sweep_id}.count"
        if limit is not None:
            folder.mkdir(parents=True, exist_ok=True)
        self._lock = filelock.FileLock(str(self.path) + ".lock")

    def _read(self) -> int:
        try:
            return int(self.path.read_text(encoding="ascii") or 0)
        except (OSError, ValueError):
            return 0

    def used(self) -> int:
        if self.limit is None:
            return 0
        with self._lock:
            return self._read()

    def exhausted(self) -> bool:
        return self.limit is not None and self.used() >= self.limit

    def take(self) -> bool:
        """Count one more run, if the limit allows it."""
        if self.limit is None:
            return True
        with self._lock:
            used = self._read()
            if used >= self.limit:
                return False
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(str(used + 1), encoding="ascii")
            os.replace(tmp, self.path)
            return True

    def remove(self) -> None:
        """Forget the count (the controller, at the end of the sweep)."""
        for path in (self.path, Path(str(self.path) + ".lock")):
            path.unlink(missing_ok=True)
