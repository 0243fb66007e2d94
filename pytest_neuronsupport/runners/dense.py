"""``run_dense``: a decoder (``AutoModelForCausalLM``) generates 32 tokens greedily.

The prompt ``"The future of AI is"`` goes through the chat template for chat models (a
tokenizer with one), as a user message. Generation uses a static cache, compiled with the chosen
backend on the chosen device; the CPU fp32 run of the same checkpoint is the reference.

Standalone: pasted into ``run.py`` after ``compare.py`` and ``runners/common.py``.
"""

from __future__ import annotations

import gc
from typing import Any

import torch
import transformers

# script: drop-begin (package form only: in run.py these names are defined above)
from pytest_neuronsupport.compare import compare_tokens
from pytest_neuronsupport.runners.common import (
    Stopwatch,
    cached_reference,
    check_fields,
    compile_model,
    device_ops,
    guarded,
    load_pretrained,
    load_tokenizer,
    phase,
)

# script: drop-end

PROMPT = "The future of AI is"
NEW_TOKENS = 32


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


def greedy(
    model: Any, inputs: dict[str, torch.Tensor], tokenizer: Any, device: str
) -> tuple[list[int], torch.Tensor]:
    """32 greedy new tokens with a static cache, and the scores each was chosen from."""
    with torch.inference_mode():
        out = model.generate(
            **{k: v.to(device) for k, v in inputs.items()},
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            cache_implementation="static",
            disable_compile=True,  # we compiled forward ourselves, with the chosen backend
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tokenizer.pad_token_id,
        )
    prompt_length = inputs["input_ids"].shape[1]
    tokens = out.sequences[0, prompt_length:].tolist()
    scores = torch.stack([s[0] for s in out.scores]).float().cpu()
    return tokens, scores


def reference(
    params: dict[str, Any], inputs: dict[str, torch.Tensor], tokenizer: Any
) -> dict[str, Any]:
    """The CPU fp32 eager run, twice: tokens, scores, and whether the two runs agreed."""
    model = load_pretrained(transformers.AutoModelForCausalLM, params, "float32", "cpu")
    tokens, scores = greedy(model, inputs, tokenizer, "cpu")
    again, scores_again = greedy(model, inputs, tokenizer, "cpu")
    same_shape = scores.shape == scores_again.shape
    info = {
        "reference_reproducible": tokens == again,
        "reference_max_score_difference": (
            float((scores - scores_again).abs().nan_to_num().max()) if same_shape else None
        ),
    }
    return {"tokens": tokens, "scores": scores, "info": info}


def run(params: dict[str, Any]) -> dict[str, Any]:
    ops = device_ops(params["device"])
    dtype = params["dtype"]
    phase("load")
    tokenizer = guarded("FAIL(load)", lambda: load_tokenizer(params))
    inputs = encode_prompt(tokenizer)
    watch = Stopwatch()
    ops.reset_peak()
    model = guarded(
        "FAIL(load)",
        lambda: load_pretrained(transformers.AutoModelForCausalLM, params, dtype, params["device"]),
    )
    phase("gen")
    guarded("FAIL(gen)", lambda: compile_model(model, params))
    tokens, _ = guarded("FAIL(gen)", lambda: greedy(model, inputs, tokenizer, params["device"]))
    ops.synchronize()
    verdict: dict[str, Any] = {
        "result": "PASS",
        "wall_s": watch.seconds(),
        "hbm_peak_gb": ops.peak_gb(),
        "notes": tokenizer.decode(tokens, skip_special_tokens=True)[:300],
        "tokens": tokens,
    }
    model = None  # free the device copy before the CPU reference loads
    gc.collect()
    phase("reference")
    key = {"input_ids": inputs["input_ids"].tolist(), "new_tokens": NEW_TOKENS}
    try:
        ref, verdict["reference_cached"] = cached_reference(
            params, key, lambda: reference(params, inputs, tokenizer)
        )
    except Exception as exc:
        verdict["check"] = {"rule": "tokens", "skipped": f"CPU run failed: {exc!r}"[:500]}
        return verdict
    ref_tokens, ref_scores, info = ref["tokens"], ref["scores"], ref["info"]
    verdict.update(info)
    if not info["reference_reproducible"]:
        verdict["check"] = {"rule": "tokens", "skipped": "CPU reference not reproducible", **info}
        return verdict
    check = compare_tokens(ref_tokens, ref_scores, tokens, dtype)
    verdict.update(check_fields(check))
    verdict["check"]["reference_tokens"] = ref_tokens
    if not check.passed:
        verdict["result"] = "FAIL(output)"
    return verdict
