"""``run_dense``: a decoder (``AutoModelForCausalLM``) generates 32 tokens greedily.

The prompt ``"The future of AI is"`` goes through the chat template for chat models (a
tokenizer with one), as a user message. Generation uses a static cache and chunked prefill,
compiled with the chosen backend on the chosen device. On several cores ``run.py`` launches one
rank per core and loads the model sharded with ``tp_plan="auto"``.

Standalone: pasted into ``run.py`` after ``runners/generation.py``.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers

# script: drop-begin (package form only: in run.py these names are defined above)
from pytest_neuronsupport.runners.common import guarded, load_tokenizer
from pytest_neuronsupport.runners.generation import PROMPT, Generation, run_generation

# script: drop-end


def encode_prompt(tokenizer: Any) -> dict[str, torch.Tensor]:
    """The prompt's input ids: as a user message through the chat template, if there is one."""
    if getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPT}],
            add_generation_prompt=True,
            return_dict=True,
            return_tensors="pt",
        )
    else:
        encoded = tokenizer(PROMPT, return_tensors="pt")
    return {k: encoded[k] for k in ("input_ids", "attention_mask") if k in encoded}


def tensor_parallel(world: int) -> dict[str, Any]:
    """Sharding over ``world`` ranks: the model's own tensor-parallel plan."""
    return {"tp_plan": "auto"}


def decoder_generation(params: dict[str, Any], distributed: Any) -> Generation:
    tokenizer = guarded("FAIL(load)", lambda: load_tokenizer(params))
    return Generation(
        model_class=transformers.AutoModelForCausalLM,
        inputs=encode_prompt(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        decode=lambda tokens: tokenizer.decode(tokens, skip_special_tokens=True),
        distributed=distributed,
        prefill_chunk=params.get("prefill_chunk"),
    )


def run(params: dict[str, Any]) -> dict[str, Any] | None:
    return run_generation(params, decoder_generation(params, tensor_parallel))
