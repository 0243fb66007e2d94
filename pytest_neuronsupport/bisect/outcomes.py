"""What one run of a bisection comes to, against the failure being bisected.

* **good**: the run PASSed;
* **bad**: it failed the same way as the bad end: the same result class and the same
  :class:`Signature`, the exception type and where it was raised (the innermost frame inside
  the compiler, the op, or the phase; as ``neuronsupport failures`` groups causes:
  :func:`~pytest_neuronsupport.views.failures.cause_of`), or for a wrong output the output
  check's rule;
* **fails otherwise**: another failure (another result, another exception or place): reported,
  and bisected as bad only when asked;
* **skip**: the candidate could not be installed or imported; no run.

Plugin side: no torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pytest_neuronsupport.pipeline.classify import why_failed
from pytest_neuronsupport.runners.lib.protocol import Result, first_line
from pytest_neuronsupport.views.failures import cause_of


class Outcome(StrEnum):
    """A run's outcome in a bisection (the module's docstring)."""

    GOOD = "good"
    BAD = "bad"
    OTHERWISE = "fails otherwise"
    SKIP = "skip"


@dataclass(frozen=True)
class Signature:
    """How a run failed: its result class, its exception, and where (``site ...``, ``op ...``,
    ``rule tokens``...)."""

    result: str
    exception: str
    where: str

    @property
    def text(self) -> str:
        """``FAIL(gen) TorchRuntimeError in torch._subclasses...:f``: as people read it."""
        return f"{self.result} {self.exception}" + (f" {self.where}" if self.where else "")

    def to_dict(self) -> dict[str, str]:
        return {"result": self.result, "exception": self.exception, "where": self.where}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signature:
        return cls(str(data["result"]), str(data["exception"]), str(data["where"]))


def _rule(fields: Mapping[str, Any]) -> str:
    """The output check's rule of a row (``tokens``, ``predictions``, ``english``...)."""
    check = fields.get("check")
    try:
        details = json.loads(check) if isinstance(check, str) else dict(check or {})
    except (TypeError, ValueError):
        return ""
    return str(details.get("rule") or "")


def signature(fields: Mapping[str, Any]) -> Signature | None:
    """The signature of a run's row fields; None for a PASS (or no result at all)."""
    result = fields.get("result")
    if not isinstance(result, str) or result in (Result.PASS, Result.EXCLUDED):
        return None
    if result == Result.FAIL_OUTPUT and not fields.get("error"):
        return Signature(result, "wrong output", f"rule {_rule(fields) or '?'}")
    cause = cause_of({"model_id": "", **fields})
    where = f"{cause.where} {cause.place}".strip() if cause.place else cause.where
    return Signature(result, cause.exception, where)


def judge(fields: Mapping[str, Any], target: Signature | None) -> Outcome:
    """``fields`` (a run's row fields) against the failure bisected (``target``: the bad end's
    signature; None: any failure is bad, the bad end's own run)."""
    if fields.get("result") == Result.PASS:
        return Outcome.GOOD
    found = signature(fields)
    if target is None or found == target:
        return Outcome.BAD
    return Outcome.OTHERWISE


def error_line(fields: Mapping[str, Any]) -> str:
    """The first line of what a run's failure says (its error, or its output check's); empty
    for a PASS."""
    if fields.get("result") == Result.PASS:
        return ""
    said = why_failed(fields) or fields.get("notes") or ""  # the backend's own exception first
    return first_line(str(said), 200)
