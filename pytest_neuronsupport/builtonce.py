"""A folder of the cache made once, whole: built under a lock into a temporary sibling and
renamed into place, so that no process ever sees a part of it, and several processes (xdist
workers, the shards of a sweep on one machine) asking at once build it once.

Light at import (the zoo imports it during collection): ``filelock`` is imported when a folder
is built.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

#: How long a process waits for another one that builds the same folder.
LOCK_TIMEOUT_S = 900.0


def built_once(
    final: Path, build: Callable[[Path], None], timeout_s: float = LOCK_TIMEOUT_S
) -> Path:
    """``final``, built by ``build(folder)`` into a fresh folder first if it is absent.

    The lock is ``<final>.lock`` beside it; leftovers of a build that was killed are removed
    by the next lock holder. Once built, a call only checks that the folder exists."""
    if final.is_dir():  # only complete folders are ever renamed into place
        return final
    from filelock import FileLock

    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{final}.lock", timeout=timeout_s):
        if final.is_dir():  # another process built it while this one waited
            return final
        for stale in final.parent.glob(f".{final.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        building = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            build(building)
            building.chmod(0o755)  # mkdtemp makes it 0o700
            try:
                os.replace(building, final)  # atomic: whole or absent
            except OSError:  # a builder that ignored the lock (no locks on this filesystem)
                if not final.is_dir():
                    raise
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return final
