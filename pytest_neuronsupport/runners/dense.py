"""``run_dense``: a decoder (``AutoModelForCausalLM``) generates 32 tokens greedily from
``"The future of AI is"`` (a user message, through a chat model's template), compiled, with a
static cache and chunked prefill; the tokens must be the CPU's in fp32, or first differ at a
near-tie. On several cores each rank holds its share (``tp_plan="auto"``), and a judge checks."""

from __future__ import annotations

from typing import Any

import transformers

from pytest_neuronsupport.runners import Runner
from pytest_neuronsupport.runners.lib.generation import (
    PROMPT,
    Generation,
    generate_and_check,
    generate_on_ranks,
)
from pytest_neuronsupport.runners.lib.models import load_tokenizer, step, user_message
from pytest_neuronsupport.runners.lib.protocol import Result

RUNNER = Runner(
    name="dense",
    load_class="AutoModelForCausalLM",
    generates=True,
    shards=True,
    mappings=("causal_lm",),
    tasks=("text-generation",),
)


def run(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    return generate_and_check(params, ops, decoder(params))


def run_ranks(params: dict[str, Any], ops: Any) -> Any:  # None on ranks but 0
    """Several cores: each rank holds its share of every layer (its tensor-parallel plan)."""
    return generate_on_ranks(params, ops, decoder(params), {"tp_plan": "auto"})


def decoder(params: dict[str, Any]) -> Generation:
    """The prompt as a user message, for a causal LM."""
    with step("load", Result.FAIL_LOAD):
        tokenizer = load_tokenizer(params)
    causal_lm, inputs = transformers.AutoModelForCausalLM, user_message(tokenizer, PROMPT)
    return Generation(causal_lm, inputs, tokenizer, prefill_chunk=params.get("prefill_chunk"))
