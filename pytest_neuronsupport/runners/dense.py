"""``run_dense``: a decoder (``AutoModelForCausalLM``) generates 32 tokens greedily.

The prompt ``"The future of AI is"`` goes through the chat template for chat models (a
tokenizer with one), as a user message. Generation uses a static cache and chunked prefill,
compiled with the chosen backend on the chosen device. On several cores ``run.py`` launches one
rank per core and loads the model sharded with ``tp_plan="auto"``.

Standalone: pasted into ``run.py`` after ``runners/generation.py``.
"""

from __future__ import annotations

from typing import Any

import transformers

# script: drop-begin (package form only: in run.py these names are defined above)
from pytest_neuronsupport.runners.common import guarded, load_tokenizer, user_message
from pytest_neuronsupport.runners.generation import PROMPT, Generation, run_generation

# script: drop-end


def tensor_parallel(world: int) -> dict[str, Any]:
    """Sharding over ``world`` ranks: the model's own tensor-parallel plan."""
    return {"tp_plan": "auto"}


def decoder_generation(params: dict[str, Any], distributed: Any) -> Generation:
    tokenizer = guarded("FAIL(load)", lambda: load_tokenizer(params))
    return Generation(
        model_class=transformers.AutoModelForCausalLM,
        inputs=user_message(tokenizer, PROMPT),
        pad_token_id=tokenizer.pad_token_id,
        decode=lambda tokens: tokenizer.decode(tokens, skip_special_tokens=True),
        distributed=distributed,
        prefill_chunk=params.get("prefill_chunk"),
    )


def run(params: dict[str, Any]) -> dict[str, Any] | None:
    return run_generation(params, decoder_generation(params, tensor_parallel))
