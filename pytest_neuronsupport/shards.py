"""Shards: one sweep split over N machines, each running a disjoint part of the lists.

The shard a machine runs comes from ``--neuron-shard I/N`` (1-based), else from the engine
that started it: a Kubernetes Indexed Job's ``JOB_COMPLETION_INDEX`` (0-based; the count from
``--neuron-shards N``), or an AWS Batch array job's ``AWS_BATCH_JOB_ARRAY_INDEX`` (0-based) and
``AWS_BATCH_JOB_ARRAY_SIZE``.

Shards are balanced by expected cost, as pytest-split balances by recorded durations: a model's
cost is its last recorded ``wall_s`` on the pair, else the mean of the known costs. Models go,
most expensive first, to the shard with the least expected time so far (the longest-processing
-time rule: no shard ends more than a third above the best split). The split is written once
under the results folder (``shards/<key>.json``, created atomically by whichever machine comes
first), and every machine, a retried one included, reads the same file: the union of the
shards is the whole list, each model in exactly one, whatever the dataset holds by then.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from pytest_neuronsupport.dataset.layout import SHARDS

__all__ = [
    "Shard",
    "ShardError",
    "from_environment",
    "load_or_write",
    "mine",
    "parse",
    "partition",
    "read_split",
    "split_document",
]

_INDEXED_JOB: Final = "JOB_COMPLETION_INDEX"
_BATCH_INDEX: Final = "AWS_BATCH_JOB_ARRAY_INDEX"
_BATCH_SIZE: Final = "AWS_BATCH_JOB_ARRAY_SIZE"


class ShardError(ValueError):
    """A shard that cannot be: the message says which option or variable is wrong."""


@dataclass(frozen=True)
class Shard:
    """The ``index``-th (1-based) of ``count`` shards."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise ShardError(f"shard {self.index}/{self.count}: expected 1 <= I <= N")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse(text: str) -> Shard:
    """``"2/3"`` → ``Shard(2, 3)``."""
    index, _, count = text.partition("/")
    try:
        return Shard(int(index), int(count))
    except ValueError:
        raise ShardError(f"--neuron-shard {text!r}: expected I/N, like 2/3") from None


def _number(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ShardError(f"{name}={env[name]!r} is not a number") from None


def from_environment(env: Mapping[str, str], shards: int | None) -> Shard | None:
    """The shard an engine's variables name (None: no engine variable set).

    Raises:
        ShardError: an index without a count, or out of range.
    """
    if _BATCH_INDEX in env:
        count = _number(env, _BATCH_SIZE) if _BATCH_SIZE in env else shards
        if count is None:
            raise ShardError(f"{_BATCH_INDEX} is set without {_BATCH_SIZE} or --neuron-shards")
        return Shard(_number(env, _BATCH_INDEX) + 1, count)
    if _INDEXED_JOB in env:
        if shards is None:
            raise ShardError(f"{_INDEXED_JOB} is set: --neuron-shards N must say how many")
        return Shard(_number(env, _INDEXED_JOB) + 1, shards)
    return None


def partition(models: Sequence[str], costs: Mapping[str, float], count: int) -> list[list[str]]:
    """Split ``models`` into ``count`` parts of close expected cost, each in list order.

    Models without a cost get the mean of the known ones (1.0 when none is known). The most
    expensive go first (ties by list position), each to the part whose total is least (ties:
    the lowest part), so the split is the same on every machine for the same costs.
    """
    known = [costs[m] for m in models if m in costs]
    mean = sum(known) / len(known) if known else 1.0
    position = {model: n for n, model in enumerate(models)}
    totals = [0.0] * count
    parts: list[list[str]] = [[] for _ in range(count)]
    for model in sorted(models, key=lambda m: (-costs.get(m, mean), position[m])):
        lightest = min(range(count), key=lambda i: (totals[i], i))
        parts[lightest].append(model)
        totals[lightest] += costs.get(model, mean)
    return [sorted(part, key=position.__getitem__) for part in parts]


def _key(models: Sequence[str], count: int) -> str:
    digest = hashlib.sha256(json.dumps([list(models), count]).encode("utf-8"))
    return digest.hexdigest()[:20]


def split_document(
    models: Sequence[str], costs: Mapping[str, float], count: int
) -> tuple[str, str]:
    """``(name, text)`` of the split of ``models`` in ``count``: its file name (a key of the
    models and the count) and its JSON, with the costs it was made from."""
    parts = partition(models, costs, count)
    text = json.dumps({"count": count, "parts": parts, "costs": dict(costs)}, indent=1)
    return f"{_key(models, count)}.json", text


def read_split(text: str, models: Sequence[str], count: int, where: str) -> list[list[str]]:
    """The parts of a split document, checked to split exactly ``models`` in ``count``."""
    data = json.loads(text)
    parts = data["parts"]
    if data.get("count") != count or sorted(m for p in parts for m in p) != sorted(models):
        raise ShardError(f"{where} does not split these models in {count}: remove it")
    return [list(part) for part in parts]


def load_or_write(
    folder: Path, models: Sequence[str], costs: Mapping[str, float], count: int
) -> list[list[str]]:
    """The split of ``models`` into ``count`` shards: the one written under ``folder`` for
    these models and this count if any machine wrote it, else this one's, written for the
    others (atomically: a complete file appears, or nothing)."""
    from pytest_neuronsupport.dataset.durable import write_once  # pyarrow: only for a sweep

    name, text = split_document(models, costs, count)
    target = folder / name
    return read_split(write_once(target, text), models, count, str(target))


class SplitStore(Protocol):
    """Where the split is written once for every machine (a results store)."""

    def write_once(self, name: str, text: str) -> tuple[str, str]: ...


def mine(
    models: Sequence[str], costs: Mapping[str, float], shard: Shard, store: SplitStore
) -> set[str]:
    """The models of ``shard``: its part of the split of ``models`` that ``store`` holds for
    every machine (written by whichever came first)."""
    name, text = split_document(models, costs, shard.count)
    where, text = store.write_once(f"{SHARDS}/{name}", text)
    return set(read_split(text, models, shard.count, where)[shard.index - 1])
