"""``run_seq2seq``: an encoder-decoder (``AutoModelForSeq2SeqLM``, T5 and BART families) runs its
encoder once on ``"The future of AI is"``, then generates 32 tokens greedily from its decoder
with a static cache, on one core; encoder and decoder are both compiled. The tokens are checked
against a CPU fp32 run."""

from __future__ import annotations

from typing import Any

import transformers

from pytest_neuronsupport.runners import Runner
from pytest_neuronsupport.runners.lib.generation import PROMPT, Generation, generate_and_check
from pytest_neuronsupport.runners.lib.models import load_tokenizer, step
from pytest_neuronsupport.runners.lib.protocol import Result

RUNNER = Runner(
    name="seq2seq",
    load_class="AutoModelForSeq2SeqLM",
    generates=True,
    mappings=("seq2seq_lm",),
    tasks=("translation", "summarization", "text2text-generation"),
)


def run(params: dict[str, Any], ops: Any) -> dict[str, Any] | None:
    with step("load", Result.FAIL_LOAD):
        tokenizer = load_tokenizer(params)
    encoded = tokenizer(PROMPT, return_tensors="pt")
    inputs = {k: encoded[k] for k in ("input_ids", "attention_mask") if k in encoded}
    gen = Generation(transformers.AutoModelForSeq2SeqLM, inputs, tokenizer, encoder_of)
    return generate_and_check(params, ops, gen)


def encoder_of(model: Any) -> list[Any]:
    """The encoder, compiled too: generate() calls it once, outside the model's forward."""
    return [model.get_encoder()]
