"""``run_dense_ep``: a mixture-of-experts decoder without a tensor-parallel plan runs
expert-parallel: on several cores each rank holds a share of the experts. Otherwise it is
``run_dense`` (same prompt, generation and checks).

Standalone: pasted into ``run.py`` after ``runners/dense.py``.
"""

from __future__ import annotations

from typing import Any

# script: drop-begin (package form only: in run.py these names are defined above)
from pytest_neuronsupport.runners.dense import decoder_generation
from pytest_neuronsupport.runners.generation import run_generation

# script: drop-end


def expert_parallel(world: int) -> dict[str, Any]:
    """Sharding over ``world`` ranks: the experts split among them (``ep_size`` must divide
    ``fsdp_size * tp_size`` in transformers, and there is no tensor-parallel plan to use)."""
    return {"ep_size": world, "fsdp_size": world}


def run(params: dict[str, Any]) -> dict[str, Any] | None:
    return run_generation(params, decoder_generation(params, expert_parallel))
