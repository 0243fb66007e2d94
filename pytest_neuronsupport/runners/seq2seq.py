"""``run_seq2seq``: an encoder-decoder (``AutoModelForSeq2SeqLM``, T5 and BART families) runs
its encoder once on ``"The future of AI is"``, then generates 32 tokens greedily from its
decoder with a static cache, on one core; encoder and decoder are both compiled. Compared with
the CPU like a decoder.

Standalone: pasted into ``run.py`` after ``runners/generation.py``.
"""

from __future__ import annotations

from typing import Any

import transformers

# script: drop-begin (package form only: in run.py these names are defined above)
from pytest_neuronsupport.runners.common import guarded, load_tokenizer
from pytest_neuronsupport.runners.generation import PROMPT, Generation, run_generation

# script: drop-end


def encoder_of(model: Any) -> list[Any]:
    """The encoder, compiled too: generate() calls it once, outside the model's forward."""
    return [model.get_encoder()]


def run(params: dict[str, Any]) -> dict[str, Any] | None:
    tokenizer = guarded("FAIL(load)", lambda: load_tokenizer(params))
    encoded = tokenizer(PROMPT, return_tensors="pt")
    gen = Generation(
        model_class=transformers.AutoModelForSeq2SeqLM,
        inputs={k: encoded[k] for k in ("input_ids", "attention_mask") if k in encoded},
        pad_token_id=tokenizer.pad_token_id,
        decode=lambda tokens: tokenizer.decode(tokens, skip_special_tokens=True),
        extra_compiled=encoder_of,
    )
    return run_generation(params, gen)
