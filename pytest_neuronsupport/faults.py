"""Environment faults: what stops a model's test that is not the model's doing.

The Hub unreachable, answering 5xx or not answering in time, an object store down, a pip index
unreachable, a full disk: a :class:`Fault`. Such a test records no row (the row recorded before,
if any, stays, so the dataset never says a healthy model fails), it is reported as a pytest
*error* whose text names the fault (:func:`pytest_neuronsupport.report.fault_text`), and the
session exits non-zero. A model's own failures (its repo missing, gated, a revision gone) are
not faults: they stay ``FAIL(load)`` rows.

One name for the idea: the plan's ``Plan.fault``, the mode's ``ModeOutcome.fault``, this
module's :class:`Fault`, :func:`of`, which tells whether an exception is one, and
:func:`in_run`, whether a run's row says one (its disk full, the Hub failing its download).
"""

from __future__ import annotations

import errno
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["DISK_FULL", "Fault", "in_run", "of"]

#: The errors of a full disk (or quota), as ``OSError.errno`` says them.
DISK_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


class Fault(Exception):
    """An environment fault; its message names what failed and where (an endpoint, a path)."""


def of(exc: BaseException) -> Fault | None:
    """The fault ``exc`` is (itself if it is a :class:`Fault`, a full disk's ``OSError``), or
    None when it is not one (then it is the model's failure, or a bug of ours)."""
    if isinstance(exc, Fault):
        return exc
    if isinstance(exc, OSError) and exc.errno in DISK_FULL:
        where = f" writing {exc.filename}" if exc.filename else ""
        return Fault(f"the disk is full{where}: {exc.strerror or exc}")
    return None


#: What a run's error says when its disk filled up (its ``OSError``, as Python prints it).
_RUN_DISK_FULL: Final = re.compile(
    r"\[Errno (?:28|122)\] (?:No space left on device|Disk quota exceeded)[^\n]*"
)
#: What a run's failed load says when the Hub failed it mid-download: an answer 5xx, a timeout
#: or a lost connection of the client (httpx's, or its fork httpx2's, through huggingface_hub).
_RUN_HUB_FAILED: Final = re.compile(
    r"Server error '5\d\d [^'\n]*' for url '[^'\n]*'|\b5\d\d Server Error\b[^\n]*"
    r"|\b(?:ReadTimeout|ConnectTimeout|ConnectError|RemoteProtocolError)\b: [^\n]*"
)


def in_run(row: Mapping[str, Any]) -> Fault | None:
    """The fault a run's row says in its ``error`` (its traceback's text, from ``run.py``): a
    full disk while it downloaded or wrote, or, for a failed load (``FAIL(load)``), the Hub
    failing the download (5xx, a timeout, the connection lost); None when it says none."""
    error = row.get("error")
    if not isinstance(error, str):
        return None
    if (full := _RUN_DISK_FULL.search(error)) is not None:
        return Fault(f"the disk is full (in the run): {full.group(0)}")
    failed = _RUN_HUB_FAILED.search(error) if row.get("result") == "FAIL(load)" else None
    return (
        None if failed is None else Fault(f"the Hub failed the run's download: {failed.group(0)}")
    )
