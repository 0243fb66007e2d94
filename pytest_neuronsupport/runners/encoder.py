"""``run_encoder``: a text encoder runs one compiled forward pass.

Input: ``"My name is Wolfgang and I live in Berlin."`` padded to 128 tokens, with ``Berlin``
masked for a masked language model, after the question ``"Where do I live?"`` for question
answering. The model loads with the head class its checkpoint declares, or ``AutoModel``.

The CPU runs the same pass in fp32 (the reference, twice) and in bf16 (how far bf16 alone
drifts); the device is held to what the CPU achieves in bf16 (see ``compare.py``).

Standalone: pasted into ``run.py`` after ``compare.py`` and ``runners/common.py``.
"""

from __future__ import annotations

import gc
import inspect
from typing import Any

import torch
import transformers

# script: drop-begin (package form only: in run.py these names are defined above)
from pytest_neuronsupport.compare import (
    Check,
    compare_hidden,
    compare_predictions,
    compare_scores,
)
from pytest_neuronsupport.runners.common import (
    Stopwatch,
    cached_reference,
    check_fields,
    compile_model,
    device_ops,
    guarded,
    head_class,
    load_pretrained,
    load_tokenizer,
    phase,
)

# script: drop-end

SENTENCE = "My name is Wolfgang and I live in Berlin."
QUESTION = "Where do I live?"
MASKED_WORD = "Berlin"
SEQUENCE_LENGTH = 128

#: What a head predicts, by the suffix of its class name; anything else without logits is
#: checked on its hidden states.
HEAD_KINDS = (
    ("ForMaskedLM", "mask"),
    ("ForQuestionAnswering", "span"),
    ("ForTokenClassification", "token"),
    ("ForSequenceClassification", "class"),
)


def head_kind(cls: Any, config: Any) -> str:
    """``mask``, ``span``, ``token``, ``class``, ``score`` (one output) or ``hidden`` (no head)."""
    for suffix, kind in HEAD_KINDS:
        if cls.__name__.endswith(suffix):
            if kind in ("class", "token") and getattr(config, "num_labels", 2) == 1:
                return "score"
            return kind
    return "hidden"


def encode(tokenizer: Any, kind: str) -> dict[str, torch.Tensor]:
    padding = {"padding": "max_length", "max_length": SEQUENCE_LENGTH, "truncation": True}
    if kind == "mask":
        text = SENTENCE.replace(MASKED_WORD, tokenizer.mask_token)
        return dict(tokenizer(text, return_tensors="pt", **padding))
    if kind == "span":
        return dict(tokenizer(QUESTION, SENTENCE, return_tensors="pt", **padding))
    return dict(tokenizer(SENTENCE, return_tensors="pt", **padding))


def model_inputs(model: Any, encoded: dict[str, torch.Tensor], device: str) -> dict[str, Any]:
    """The encoded tensors the model's forward accepts (DistilBERT takes no token_type_ids)."""
    accepted = inspect.signature(type(model).forward).parameters
    return {k: v.to(device) for k, v in encoded.items() if k in accepted}


def outputs_of(kind: str, out: Any, encoded: dict[str, torch.Tensor], tokenizer: Any) -> Any:
    """The tensor the check compares, on the CPU in fp32: rows of scores, or hidden states."""
    valid = encoded["attention_mask"][0].bool()
    if kind == "mask":
        positions = encoded["input_ids"][0] == tokenizer.mask_token_id
        return out.logits[0][positions.to(out.logits.device)].float().cpu()
    if kind == "span":
        rows = torch.stack([out.start_logits[0], out.end_logits[0]])
        return rows[:, valid.to(rows.device)].float().cpu()
    if kind == "token":
        return out.logits[0][valid.to(out.logits.device)].float().cpu()
    if kind in ("class", "score"):
        return out.logits[0:1].float().cpu()
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    return hidden[0][valid.to(hidden.device)].float().cpu()


def forward(model: Any, encoded: dict[str, torch.Tensor], device: str) -> Any:
    with torch.inference_mode():
        return model(**model_inputs(model, encoded, device))


def describe(kind: str, values: torch.Tensor, tokenizer: Any, config: Any, encoded: Any) -> str:
    """The prediction in words, for the row's notes."""
    if kind == "mask":
        return "mask: " + repr(tokenizer.decode(values.argmax(-1).tolist()))
    if kind == "span":
        start, end = (int(i) for i in values.argmax(-1))
        ids = encoded["input_ids"][0][encoded["attention_mask"][0].bool()]
        return "answer: " + repr(tokenizer.decode(ids[start : end + 1].tolist()))
    labels = getattr(config, "id2label", None) or {}
    if kind == "token":
        return "labels: " + " ".join(str(labels.get(i, i)) for i in values.argmax(-1).tolist())
    if kind == "class":
        index = int(values.argmax(-1)[0])
        return f"class: {labels.get(index, index)}"
    if kind == "score":
        return f"score: {float(values.flatten()[0]):.4f}"
    return f"hidden states: {values.shape[0]} tokens x {values.shape[1]}"


def check(kind: str, fp32: Any, bf16: Any, device: Any, dtype: str) -> Check:
    if kind == "score":
        return compare_scores(fp32, bf16, device)
    if kind == "hidden":
        return compare_hidden(fp32, bf16, device)
    labels = ["start", "end"] if kind == "span" else None
    return compare_predictions(kind, fp32, bf16, device, dtype, labels)


def reference(
    cls: Any, params: dict[str, Any], kind: str, encoded: Any, tokenizer: Any
) -> dict[str, Any]:
    """CPU fp32 (twice, for reproducibility) and CPU bf16 outputs."""
    model = load_pretrained(cls, params, "float32", "cpu")
    fp32 = outputs_of(kind, forward(model, encoded, "cpu"), encoded, tokenizer)
    again = outputs_of(kind, forward(model, encoded, "cpu"), encoded, tokenizer)
    del model
    gc.collect()
    model = load_pretrained(cls, params, "bfloat16", "cpu")
    bf16 = outputs_of(kind, forward(model, encoded, "cpu"), encoded, tokenizer)
    info = {
        "reference_reproducible": bool(torch.equal(fp32, again)),
        "reference_max_difference": float((fp32 - again).abs().max()) if fp32.numel() else 0.0,
    }
    return {"fp32": fp32, "bf16": bf16, "info": info}


def run(params: dict[str, Any]) -> dict[str, Any]:
    ops = device_ops(params["device"])
    dtype = params["dtype"]
    phase("load")
    tokenizer = guarded("FAIL(load)", lambda: load_tokenizer(params))
    config = guarded(
        "FAIL(load)",
        lambda: transformers.AutoConfig.from_pretrained(
            params["checkpoint"], revision=params.get("revision"), trust_remote_code=False
        ),
    )
    cls = head_class(config, transformers.AutoModel)
    kind = head_kind(cls, config)
    encoded = guarded("FAIL(load)", lambda: encode(tokenizer, kind))
    watch = Stopwatch()
    ops.reset_peak()
    model = guarded("FAIL(load)", lambda: load_pretrained(cls, params, dtype, params["device"]))
    phase("forward")
    guarded("FAIL(forward)", lambda: compile_model(model, params))
    out = guarded("FAIL(forward)", lambda: forward(model, encoded, params["device"]))
    values = outputs_of(kind, out, encoded, tokenizer)
    ops.synchronize()
    verdict: dict[str, Any] = {
        "result": "PASS",
        "wall_s": watch.seconds(),
        "hbm_peak_gb": ops.peak_gb(),
        "notes": describe(kind, values, tokenizer, config, encoded)[:300],
        "head": cls.__name__,
    }
    model = out = None  # free the device copy before the CPU reference loads
    gc.collect()
    phase("reference")
    key = {
        "head": cls.__name__,
        "kind": kind,
        "encoded": {k: v.tolist() for k, v in sorted(encoded.items())},
    }
    try:
        ref, verdict["reference_cached"] = cached_reference(
            params, key, lambda: reference(cls, params, kind, encoded, tokenizer)
        )
    except Exception as exc:
        verdict["check"] = {"rule": kind, "skipped": f"CPU run failed: {exc!r}"[:500]}
        return verdict
    fp32, bf16, info = ref["fp32"], ref["bf16"], ref["info"]
    verdict.update(info)
    if not info["reference_reproducible"]:
        verdict["check"] = {"rule": kind, "skipped": "CPU reference not reproducible", **info}
        return verdict
    result = check(kind, fp32, bf16, values, dtype)
    verdict.update(check_fields(result))
    if not result.passed:
        verdict["result"] = "FAIL(output)"
    return verdict
