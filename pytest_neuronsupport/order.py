"""Cost-ordered starts (``--neuron-order cost``): under several xdist workers, or several lanes
(``--neuron-lanes``, which take the models in the session's order), the models start largest
first, so that the sweep ends when its work does, not with a 16-core model started last.

A model's cost is its predicted core-seconds:

* **recorded**: its row on the sweep's pair, ``wall_s`` x ``neuron_cores`` (an excluded row has
  no cost);
* else **estimated from its size**, :func:`estimate_core_s`: ``cores x 60 s + 20 s a GB`` of
  its bf16 weights, the cores the sizing would give them (:func:`.sizing.cores_needed`). The
  size is what is known without downloading: the list entry's ``parameters`` (the Hub's
  metadata, written by ``neuronsupport select``), else a local checkpoint's safetensors headers
  (its ``path``, or a zoo model already built in the cache). Where models have both a row and a
  size, the estimates are scaled by the median ratio of the two, so that both speak in this
  machine's seconds;
* else **unknown**: the mean of the others' costs (all unknown: list order).

The order is largest first, ties in list order. pytest-xdist's ``load`` scheduler hands each
worker a chunk of consecutive items at the start, so the sorted order is then **dealt**
(:func:`dealt`): the k-th largest goes first in worker k's chunk, the (n+k)-th second, and the
rest follow in order, taken from the front as workers free up. Its ``worksteal`` scheduler
hands each worker an equal part of consecutive items at the start and lets idle workers take
the back half of the longest queue: the order is then dealt into those parts
(:func:`dealt_evenly`), each worker's part largest first, so that what is stolen is the small.
Other schedulers (``loadscope``, ``loadfile``, ``loadgroup``) keep the list's order: they send
items by group, not one by one. Every worker must collect the
same items in the same order, and a checkpoint may appear in the cache while they collect: the
first worker to order the sweep writes the order once (:func:`shared_order`, in the sweep's
folder), the others read it. The dataset's rows, junit and the reports do not follow the
start order: rows are merged by model, the summary lists models in list order.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset.durable import write_once
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.pipeline import sizing
from pytest_neuronsupport.runners.lib.warned import library_warnings
from pytest_neuronsupport.units import GB
from pytest_neuronsupport.zoo.builder import zoo_root

#: The size estimate of a model's core-seconds: a fixed part a core (the compile's and the
#: run's start), and seconds a GB of bf16 weights (compiling and loading them), as the fleet
#: benchmark's phase model states them (benchmarks/fleet.py).
FIXED_S_A_CORE = 60.0
S_PER_GB = 20.0
#: The file of a sweep's order, in its folder (``<results>/.sweeps/<sweep-id>``): a dot-file,
#: which the progress's reader of phase files passes over.
ORDER_FILE = ".order.json"


def recorded_core_s(row: Mapping[str, Any] | None) -> float | None:
    """A recorded row's core-seconds: ``wall_s`` x ``neuron_cores`` (one core when the row
    says none), or None (no row, an excluded one, or no wall time)."""
    if row is None or row.get("wall_s") is None or str(row.get("result")) == "EXCLUDED":
        return None
    return float(row["wall_s"]) * int(row.get("neuron_cores") or 1)


def estimate_core_s(weight_bytes: int, core_gb: float, max_cores: int) -> float:
    """Core-seconds from the size of the bf16 weights (see the module's docstring)."""
    cores = min(sizing.cores_needed(weight_bytes, core_gb), max(1, max_cores))
    return cores * FIXED_S_A_CORE + S_PER_GB * weight_bytes / GB


def weight_bytes(spec: ModelSpec, cache: Path) -> int | None:
    """The bf16 bytes of a model's weights known without downloading anything, or None."""
    if spec.parameters is not None:
        return spec.parameters * sizing.BF16_BYTES
    folder = local_folder(spec, cache)
    if folder is None:
        return None
    try:
        with library_warnings():
            count = sizing.checkpoint_parameters(folder)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None if count is None else count * sizing.BF16_BYTES


def local_folder(spec: ModelSpec, cache: Path) -> Path | None:
    """A checkpoint folder already on this machine: the entry's ``path``, or its zoo model's
    if built (never built here)."""
    if spec.path is not None:
        path = Path(spec.path)
        return path if path.is_dir() else None
    if spec.is_zoo and "/" not in spec.id:  # not a tiny architecture (zoo:arch/...)
        folder = zoo_root(cache) / spec.id.removeprefix("zoo:")
        return folder if folder.is_dir() else None
    return None


def predicted(
    models: Sequence[str],
    recorded: Mapping[str, float],
    estimated: Mapping[str, float],
) -> dict[str, float]:
    """Each model's predicted core-seconds: its recorded cost, else its size's estimate scaled
    by the median ratio of recorded to estimated over the models with both (1 when none has
    both); the models with neither are left out."""
    both = [recorded[m] / estimated[m] for m in models if m in recorded and estimated.get(m)]
    scale = statistics.median(both) if both else 1.0
    costs = {m: estimated[m] * scale for m in models if m in estimated}
    costs.update({m: recorded[m] for m in models if m in recorded})
    return costs


def by_cost(models: Sequence[str], costs: Mapping[str, float]) -> list[str]:
    """``models`` largest first; a model without a cost counts as the mean of the known ones;
    ties (and all unknown) in list order."""
    known = [costs[m] for m in models if m in costs]
    mean = statistics.fmean(known) if known else 0.0
    position = {m: i for i, m in enumerate(models)}
    return sorted(models, key=lambda m: (-costs.get(m, mean), position[m]))


def first_chunk(total: int, workers: int, most: int | None = None) -> int:
    """How many consecutive items pytest-xdist's ``load`` scheduler (3.x) first hands each
    worker: a quarter of its share (at most ``most``: ``--maxschedchunk``), at least 2; 1
    (the items round the workers) with fewer than 2 a worker."""
    if total < 2 * workers:
        return 1
    return max(min(total // workers // 4, most or total), 2)


def dealt(ordered: Sequence[str], workers: int, most: int | None = None) -> list[str]:
    """``ordered`` (largest first) placed so that xdist's ``load`` scheduler starts it in that
    order: the first chunk of worker k holds the items k, k + n, k + 2n... (n workers), and
    the rest follow in order, for the workers to take from the front as they free up."""
    if workers <= 1:
        return list(ordered)
    chunk = first_chunk(len(ordered), workers, most)
    out = list(ordered)
    for rank in range(min(len(ordered), chunk * workers)):
        out[(rank % workers) * chunk + rank // workers] = ordered[rank]
    return out


def even_parts(total: int, workers: int) -> list[int]:
    """How many consecutive items pytest-xdist's ``worksteal`` scheduler (3.x) first hands each
    worker: in turn, what is left over the workers left."""
    sizes, left = [], total
    for k in range(workers):
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    return sizes


def dealt_evenly(ordered: Sequence[str], workers: int) -> list[str]:
    """``ordered`` (largest first) placed so that xdist's ``worksteal`` scheduler starts it in
    that order: worker k's part holds the items k, k + n, k + 2n... (n workers; a full part is
    passed over), largest first, and a steal takes the smallest of the longest queue."""
    if workers <= 1:
        return list(ordered)
    sizes = even_parts(len(ordered), workers)
    parts: list[list[str]] = [[] for _ in sizes]
    turn = 0
    for model in ordered:
        while len(parts[turn % workers]) >= sizes[turn % workers]:
            turn += 1
        parts[turn % workers].append(model)
        turn += 1
    return [model for part in parts for model in part]


def start_order(
    specs: Sequence[ModelSpec],
    find_row: Callable[[str], Mapping[str, Any] | None],
    *,
    cache: Path,
    core_gb: float,
    max_cores: int,
    workers: int,
    most: int | None = None,
    dist: str = "load",
) -> list[str]:
    """The models of ``specs`` in the order they are to be collected: by cost, dealt to
    ``workers`` as xdist's ``dist`` scheduler sends them (``most``: its ``--maxschedchunk``)."""
    ids = [spec.id for spec in specs]
    recorded = {m: c for m in ids if (c := recorded_core_s(find_row(m))) is not None}
    estimated: dict[str, float] = {}
    for spec in specs:
        size = weight_bytes(spec, cache)  # a recorded model's too: the scale between the two
        if size is not None:
            estimated[spec.id] = estimate_core_s(size, core_gb, max_cores)
    ranked = by_cost(ids, predicted(ids, recorded, estimated))
    return dealt_evenly(ranked, workers) if dist == "worksteal" else dealt(ranked, workers, most)


def shared_order(folder: Path | None, order: list[str]) -> list[str]:
    """The sweep's order: ``order``, written once into ``folder`` (None: this process alone
    collects); the first writer's if another process of the sweep wrote it first, provided it
    orders the same models."""
    if folder is None:
        return order
    kept = json.loads(write_once(folder / ORDER_FILE, json.dumps(order)))
    return kept if sorted(kept) == sorted(order) else order


def reorder(items: list[Any], order: Sequence[str], key: Callable[[Any], str | None]) -> None:
    """Put ``items`` in place in ``order`` (by ``key``; an item whose key is None or not in
    ``order`` keeps its place at the end, in its order)."""
    rank = {m: i for i, m in enumerate(order)}
    items.sort(key=lambda item: rank.get(key(item) or "", len(rank)))
