"""What every generating runner shares: 32 greedy tokens from ``"The future of AI is"`` with a
static cache, compiled; the CPU fp32 reference and the token check on one core; the English
judge when the CPU comparison does not run (several cores, or the CPU run cannot complete).

A runner (dense, dense_ep, seq2seq, multimodal) describes its model in a :class:`Generation`
and calls :func:`run_generation`. On several cores the same code runs in each rank
(``RANK``/``WORLD_SIZE`` set by :func:`common.launch_ranks`); rank 0 reports.

Standalone: pasted into ``run.py`` after ``compare.py`` and ``runners/common.py``.
"""

from __future__ import annotations

import gc
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

# script: drop-begin (package form only: in run.py these names are defined above)
from pytest_neuronsupport.compare import compare_tokens
from pytest_neuronsupport.runners.common import (
    DTYPES,
    Stopwatch,
    cached_reference,
    check_fields,
    compile_model,
    device_ops,
    guarded,
    load_pretrained,
    phase,
)
from pytest_neuronsupport.runners.judge import judge_english

# script: drop-end

PROMPT = "The future of AI is"
NEW_TOKENS = 32


@dataclass
class Generation:
    """One generating model: its class, its inputs (CPU tensors), how to read its tokens."""

    model_class: Any
    inputs: dict[str, torch.Tensor]
    pad_token_id: int | None
    decode: Callable[[list[int]], str]
    #: Parts compiled besides the model's forward (e.g. an encoder-decoder's encoder).
    extra_compiled: Callable[[Any], list[Any]] = lambda model: []
    #: from_pretrained(distributed_config=...) arguments for several ranks, by world size.
    distributed: Callable[[int], dict[str, Any]] | None = None
    #: Prefill in chunks of this many tokens (None: one pass).
    prefill_chunk: int | None = None
    #: Anything the reference depends on besides the inputs (the reference cache's key).
    key: dict[str, Any] = field(default_factory=dict)


def tensor_digest(tensor: torch.Tensor) -> str:
    """A tensor's dtype, shape and bytes, hashed (for the reference cache's key)."""
    data = tensor.detach().cpu().contiguous()
    digest = hashlib.sha256(f"{data.dtype}{tuple(data.shape)}".encode())
    digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()


def rank_and_world() -> tuple[int, int]:
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def greedy(model: Any, gen: Generation, device: str) -> tuple[list[int], torch.Tensor]:
    """32 greedy new tokens with a static cache, and the scores each was chosen from."""
    dtype = next(model.parameters()).dtype
    inputs = {
        k: v.to(device, dtype) if v.is_floating_point() else v.to(device)
        for k, v in gen.inputs.items()
    }
    kwargs: dict[str, Any] = {}
    if gen.prefill_chunk:
        kwargs["prefill_chunk_size"] = gen.prefill_chunk
    with torch.no_grad():  # not inference_mode: sharded (DTensor) weights need version counters
        out = model.generate(
            **inputs,
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            cache_implementation="static",
            disable_compile=True,  # we compiled forward ourselves, with the chosen backend
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=gen.pad_token_id,
            **kwargs,
        )
    steps = len(out.scores)
    tokens = out.sequences[0, out.sequences.shape[1] - steps :].tolist()
    scores = torch.stack([s[0] for s in out.scores]).float().cpu()
    return tokens, scores


def reference(params: dict[str, Any], gen: Generation) -> dict[str, Any]:
    """The CPU fp32 eager run, twice: tokens, scores, and whether the two runs agreed."""
    model = load_pretrained(gen.model_class, params, "float32", "cpu")
    tokens, scores = greedy(model, gen, "cpu")
    again, scores_again = greedy(model, gen, "cpu")
    same_shape = scores.shape == scores_again.shape
    info = {
        "reference_reproducible": tokens == again,
        "reference_max_score_difference": (
            float((scores - scores_again).abs().nan_to_num().max()) if same_shape else None
        ),
    }
    return {"tokens": tokens, "scores": scores, "info": info}


def load_device_model(params: dict[str, Any], gen: Generation, world: int) -> Any:
    """The model on the device, in the run's dtype; sharded over the ranks on several cores."""
    if world == 1:
        return load_pretrained(gen.model_class, params, params["dtype"], params["device"])
    assert gen.distributed is not None
    from transformers.distributed import DistributedConfig  # type: ignore[attr-defined]

    model = gen.model_class.from_pretrained(
        params["checkpoint"],
        revision=params.get("revision"),
        dtype=DTYPES[params["dtype"]],
        trust_remote_code=False,
        distributed_config=DistributedConfig(**gen.distributed(world)),
    )
    return model.eval()


def judged(verdict: dict[str, Any], params: dict[str, Any], text: str, why: str) -> None:
    """The CPU comparison did not run (``why``): the English judge decides, if there is one."""
    verdict["check"] = {"rule": "english", "cpu_comparison": why}
    if not params.get("judge"):
        verdict["check"]["judge"] = "none configured: the output check could not run"
        return
    phase("judge")
    try:
        decision = judge_english(params["judge"], text)
    except Exception as exc:
        verdict["check"]["judge"] = f"the judge could not run: {exc!r}"[:500]
        return
    verdict["english"] = decision["english"]
    verdict["check"]["judge"] = decision
    if decision["english"] != "Y":
        verdict["result"] = "FAIL(output)"


def run_generation(params: dict[str, Any], gen: Generation) -> dict[str, Any] | None:
    """Load, compile, generate; then check against the CPU (one core) or the judge.

    Returns the verdict on rank 0, None on the other ranks.
    """
    rank, world = rank_and_world()
    ops = device_ops(params["device"])
    ops.setup_rank(rank, world)
    phase("load")
    watch = Stopwatch()
    ops.reset_peak()
    model = guarded("FAIL(load)", lambda: load_device_model(params, gen, world))
    phase("gen")

    def compile_parts() -> None:
        compile_model(model, params)
        for part in gen.extra_compiled(model):
            compile_model(part, params)

    guarded("FAIL(gen)", compile_parts)
    tokens, _ = guarded("FAIL(gen)", lambda: greedy(model, gen, ops.rank_device(rank, world)))
    ops.synchronize()
    if rank != 0:
        return None
    text = gen.decode(tokens)
    verdict: dict[str, Any] = {
        "result": "PASS",
        "wall_s": watch.seconds(),
        "hbm_peak_gb": ops.peak_gb(),
        "notes": text[:300],
        "tokens": tokens,
    }
    model = None  # free the device copy before the CPU reference loads
    gc.collect()
    if world > 1:
        judged(verdict, params, text, f"the run used {world} cores")
        return verdict
    phase("reference")
    key = {"inputs": {k: tensor_digest(v) for k, v in sorted(gen.inputs.items())}, **gen.key}
    key["new_tokens"] = NEW_TOKENS
    try:
        ref, verdict["reference_cached"] = cached_reference(
            params, key, lambda: reference(params, gen)
        )
    except Exception as exc:
        judged(verdict, params, text, f"the CPU run failed: {exc!r}"[:500])
        return verdict
    ref_tokens, ref_scores, info = ref["tokens"], ref["scores"], ref["info"]
    verdict.update(info)
    if not info["reference_reproducible"]:
        judged(verdict, params, text, "the CPU reference is not reproducible")
        return verdict
    check = compare_tokens(ref_tokens, ref_scores, tokens, params["dtype"])
    verdict.update(check_fields(check))
    verdict["check"]["reference_tokens"] = ref_tokens
    if not check.passed:
        verdict["result"] = "FAIL(output)"
    return verdict
