"""``neuronsupport operators``: the ATen operators that keep a pair's models off the device,
ranked: what a compiler team should implement first.

Two ways an operator costs a model, each counted once per model (its latest row in the pair):

* it **blocks** the model: the model failed to compile or run (``FAIL(gen)``, ``FAIL(forward)``,
  ``FAIL(train)``) and its failure names the operator: the ``aten::name`` (or ``aten.name``) of
  its ``error`` or ``notes``, or the op its minified repro ends with (``repro_ops``);
* it **falls back** on the model: the operator ran on the CPU during the model's run
  (``cpu_ops``, TorchNeuron's ``get_fallback_ops()``), whatever its result.

Operators are named without their overload (``aten::add.Tensor`` counts as ``aten::add``, and
``aten.add.Tensor`` as ``aten::add`` too), and ranked by the models they block, then the
models they fall back on, then by name. Plugin side: this module never imports torch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.failures import newest_pair
from pytest_neuronsupport.views.lookup import latest_rows, resolve_pair

__all__ = ["Operator", "format_operators", "operators", "pair_operators"]

#: The results of a model that did not get through compiling or running.
BLOCKED: Final = (Result.FAIL_GEN, Result.FAIL_FORWARD, Result.FAIL_TRAIN)
#: An ATen operator in a message: ``aten::gelu``, ``aten::add.Tensor``, ``aten.gelu.default``
#: (an FX graph's spelling), ``torch.ops.aten.gelu.default``.
NAMED: Final = re.compile(r"\baten(?:::|\.)([A-Za-z_][A-Za-z0-9_]*)")


def operator_name(name: str) -> str:
    """``aten::add.Tensor`` → ``aten::add``; ``aten.gelu.default`` → ``aten::gelu``."""
    found = NAMED.search(name)
    return f"aten::{found.group(1)}" if found else name.split(".")[0]


@dataclass
class Operator:
    """One operator, and the models it blocks or falls back on."""

    name: str
    blocks: list[str] = field(default_factory=list)
    falls_back: list[str] = field(default_factory=list)

    def rank(self) -> tuple[int, int, str]:
        return (-len(self.blocks), -len(self.falls_back), self.name)


def named_in(row: Mapping[str, Any]) -> set[str]:
    """The operators a failed row's failure names (its error, notes and repro's last op)."""
    texts = [str(row.get(key) or "") for key in ("error", "notes")]
    repro = row.get("repro_ops") or []
    texts += [str(repro[-1])] if repro else []
    return {f"aten::{m.group(1)}" for text in texts for m in NAMED.finditer(text)}


def operators(rows: Iterable[Mapping[str, Any]]) -> list[Operator]:
    """The operators of ``rows`` (one per model), most blocking first."""
    found: dict[str, Operator] = {}
    for row in rows:
        model = str(row["model_id"])
        if row.get("result") in BLOCKED:
            for name in sorted(named_in(row)):
                found.setdefault(name, Operator(name)).blocks.append(model)
        for name in sorted({operator_name(op) for op in row.get("cpu_ops") or []}):
            found.setdefault(name, Operator(name)).falls_back.append(model)
    for op in found.values():
        op.blocks.sort()
        op.falls_back.sort()
    return sorted(found.values(), key=Operator.rank)


def pair_operators(results: Path, pair: str | None = None) -> tuple[str, list[Operator], int]:
    """The ranked operators of a pair's latest rows (default: the newest compiler's pair), the
    pair, and how many of its rows say what ran on the CPU (``cpu_ops`` not null).

    Raises:
        PairError: no such pair, or no pair at all.
    """
    resolved = newest_pair(results) if pair is None else resolve_pair(results, pair)
    rows = list(latest_rows(results, resolved).values())
    tracked = sum(row.get("cpu_ops") is not None for row in rows)
    return resolved, operators(rows), tracked


def _models(models: list[str]) -> str:
    return ", ".join(models) if models else "-"


def format_operators(found: list[Operator], pair: str, tracked: int, fmt: str = "text") -> str:
    """``json`` (a list of operators with their models) or ``text``: a header, then a line per
    operator: the models it blocks, and those it falls back on."""
    if fmt == "json":
        return json.dumps([asdict(op) for op in found], indent=2) + "\n"
    name = pair.removesuffix(".parquet")
    lines = [
        f"{len(found)} operator(s) keep models of {name} off the device, most blocking first "
        f"({tracked} row(s) say what ran on the CPU)"
    ]
    if not found:
        return f"no operator blocks or falls back on a model of {name} ({tracked} tracked)\n"
    width = max(len(op.name) for op in found)
    for op in found:
        lines.append(
            f"{op.name:<{width}}  blocks {len(op.blocks)}, on the CPU in {len(op.falls_back)}"
        )
        if op.blocks:
            lines.append(f"  blocks: {_models(op.blocks)}")
        if op.falls_back:
            lines.append(f"  on the CPU: {_models(op.falls_back)}")
    return "\n".join(lines) + "\n"
