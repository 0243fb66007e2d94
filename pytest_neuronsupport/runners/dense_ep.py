"""``run_dense_ep``: a mixture-of-experts decoder without a tensor-parallel plan runs
expert-parallel: on several cores each rank holds a share of the experts. Otherwise it is
``run_dense``: 32 greedy tokens from ``"The future of AI is"``, static cache, compiled, checked
against a CPU fp32 run on one core and by the English judge on several."""

from __future__ import annotations

import os
from typing import Any

from pytest_neuronsupport.runners import Runner
from pytest_neuronsupport.runners.dense import decoder
from pytest_neuronsupport.runners.lib.generation import generate_and_check, generate_on_ranks

RUNNER = Runner(
    name="dense_ep",
    load_class="AutoModelForCausalLM",
    generates=True,
    shards=True,
    mappings=("causal_lm[experts-without-tp-plan]",),
)


def run(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    return generate_and_check(params, ops, decoder(params))


def run_ranks(params: dict[str, Any], ops: Any) -> Any:  # None on ranks but 0
    """Several cores: each rank holds its share of the experts, every other weight whole
    (transformers' expert plan alone: no FSDP, whose hooks dynamo does not trace)."""
    world = int(os.environ["WORLD_SIZE"])
    sharding = {"tp_size": world, "tp_plan": {}, "ep_size": world}
    return generate_on_ranks(params, ops, decoder(params), sharding)
