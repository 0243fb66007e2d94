"""What every generating runner shares: 32 greedy tokens from ``"The future of AI is"`` with a
static cache, compiled, and their check.

A runner (dense, dense_ep, seq2seq, multimodal) describes its model in a :class:`Generation` and
calls :func:`generate_and_check` on one core: the tokens are held against a CPU fp32 run's. On
several cores each rank calls :func:`generate_on_ranks` with its share of the model, and rank 0
holds the tokens against the same single-process CPU fp32 run when the host's memory holds the
model in fp32 (``PARAMS["cpu_reference"]``, decided by the sweep). Where the CPU comparison
does not run (a host too small, a CPU run that cannot complete), the verdict says so, and the
English judge (:mod:`~pytest_neuronsupport.runners.lib.judge`) decides when one is set.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from pytest_neuronsupport.runners.lib.compare import compare_tokens
from pytest_neuronsupport.runners.lib.models import (
    compile_forward,
    load_pretrained,
    step,
    torch_dtype,
)
from pytest_neuronsupport.runners.lib.protocol import Result, phase
from pytest_neuronsupport.runners.lib.reference import (
    cached_reference,
    exact_reference,
    reference_only,
    reference_pass,
)

PROMPT = "The future of AI is"
NEW_TOKENS = 32


@dataclass
class Generation:
    """One generating model: its class, its inputs (CPU tensors), the tokenizer of its tokens."""

    model_class: Any
    inputs: dict[str, torch.Tensor]
    tokenizer: Any
    extra_compiled: Callable[[Any], list[Any]] = lambda model: []  # e.g. a seq2seq's encoder
    prefill_chunk: int | None = None  # None: prefill in one pass


def generate_and_check(params: dict[str, Any], ops: Any, gen: Generation) -> dict[str, Any]:
    """One core: load, compile, generate; then hold the tokens against the CPU's."""
    if reference_only():  # the CPU reference alone, before the device's run
        return reference_pass(params, functools.partial(cpu_reference, params, gen))
    device = params["device"]
    load = functools.partial(load_pretrained, gen.model_class, params, params["dtype"], device)
    return checked(params, gen, generate(params, ops, gen, load, device))


def checked(params: dict[str, Any], gen: Generation, verdict: dict[str, Any]) -> dict[str, Any]:
    """The verdict with its tokens held against the CPU fp32 run's (computed, or cached); at a
    divergence, against the float64 scores and the noise of eager's."""
    gc.collect()  # the device's copy of the model is gone: room for the CPU's
    phase("reference")
    try:
        computed = functools.partial(cpu_reference, params, gen)
        ref, verdict["reference_cached"] = cached_reference(params, computed)
    except Exception as exc:
        return unchecked(verdict, f"the CPU run failed: {exc!r}"[:500])
    verdict.update(ref["info"])
    if not ref["info"]["reference_reproducible"]:
        return unchecked(verdict, "the CPU reference is not reproducible")
    check = compare_tokens(ref, (verdict["tokens"], verdict.pop("scores")), params["dtype"])
    return {**verdict, **vars(check), "result": Result.PASS if check.passed else Result.FAIL_OUTPUT}


def generate_on_ranks(params: dict[str, Any], ops: Any, gen: Generation, sharding: Any) -> Any:
    """Several cores, in each rank: load this rank's shard, compile, generate; on rank 0 the
    tokens held against the CPU fp32 run where the host's memory holds the model in fp32
    (else the English judge, if one is set, decides), None on the others."""
    if reference_only():  # one process, before the ranks' run: no rank is set up
        return reference_pass(params, functools.partial(cpu_reference, params, gen))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ops.setup_rank(rank, world)
    load = functools.partial(load_sharded, gen.model_class, params, sharding)
    verdict = generate(params, ops, gen, load, ops.rank_device(rank))
    if rank == 0 and not params.get("cpu_reference"):
        return unchecked(verdict, f"the run used {world} cores; the host cannot hold it in fp32")
    return checked(params, gen, verdict) if rank == 0 else None


def generate(params: dict[str, Any], ops: Any, gen: Generation, load: Any, device: str) -> Any:
    """Load (peak memory counted), compile and generate: the verdict so far."""
    ops.reset_peak()
    with step("load", Result.FAIL_LOAD):
        model = load()
    with step("gen", Result.FAIL_GEN):
        compile_forward(params, model, *gen.extra_compiled(model))
        tokens, scores = greedy(model, gen, device)
    ops.synchronize()
    text = gen.tokenizer.decode(tokens, skip_special_tokens=True)
    verdict = {"result": Result.PASS, "hbm_peak_gb": ops.peak_gb(), "tokens": tokens}
    return {**verdict, "notes": text[:300], "text": text, "scores": scores}  # scores: the check's


def greedy(model: Any, gen: Generation, device: str) -> tuple[list[int], torch.Tensor]:
    """32 greedy new tokens with a static cache, and the scores each was chosen from (with
    ``disable_compile``: forward was compiled already, with the run's backend)."""
    dtype, items = next(model.parameters()).dtype, gen.inputs.items()
    inputs = {k: v.to(device, dtype if v.is_floating_point() else v.dtype) for k, v in items}
    chunked = gen.prefill_chunk and inputs["input_ids"].shape[-1] > gen.prefill_chunk
    chunking = {"prefill_chunk_size": gen.prefill_chunk} if chunked else {}  # RWKV: no cache
    with torch.no_grad():  # not inference_mode: sharded (DTensor) weights need version counters
        out = model.generate(
            **inputs, max_new_tokens=NEW_TOKENS, do_sample=False, cache_implementation="static",
            disable_compile=True, return_dict_in_generate=True,  # we compiled forward ourselves
            output_scores=True, pad_token_id=gen.tokenizer.pad_token_id, **chunking,
        )  # fmt: skip
    scores = torch.stack([s[0] for s in out.scores]).double().cpu()
    return out.sequences[0, out.sequences.shape[1] - len(scores) :].tolist(), scores


def cpu_reference(params: dict[str, Any], gen: Generation) -> dict[str, Any]:
    """The CPU fp32 eager run, twice: tokens, scores, and whether the two runs agreed; and the
    same greedy run in float64 and eagerly in the run's dtype (:func:`exact_reference`).

    Generated greedily, not teacher-forced: the same code path as the device's run (static
    cache, chunked prefill) for any model that generates, and at each position the scores of
    a teacher-forced pass wherever its tokens before it are the reference's (which the check
    verifies; else the fixed rule decides)."""
    model = load_pretrained(gen.model_class, params, "float32", "cpu")
    (tokens, scores), (again, scores_again) = (greedy(model, gen, "cpu") for _ in range(2))
    model = None  # freed: the eager run (bf16 and its float64 copy) and float64's need the room
    same_shape = scores.shape == scores_again.shape
    difference = float((scores - scores_again).abs().nan_to_num().max()) if same_shape else None
    info = {"reference_reproducible": tokens == again, "reference_max_score_difference": difference}
    runs, outputs = {"float32": (tokens, scores)}, lambda m: greedy(m, gen, "cpu")
    exact = exact_reference(params, gen.model_class, outputs, runs, info)
    return {"tokens": tokens, "scores": scores, "info": info, **exact}


def load_sharded(model_class: Any, params: dict[str, Any], sharding: dict[str, Any]) -> Any:
    """This rank's share of the model (``DistributedConfig(**sharding)``), in the run's dtype."""
    from transformers.distributed import DistributedConfig  # type: ignore[attr-defined]

    options = dict(revision=params.get("revision"), dtype=torch_dtype(params["dtype"]))
    sharded = dict(distributed_config=DistributedConfig(**sharding), trust_remote_code=False)
    return model_class.from_pretrained(params["checkpoint"], **options, **sharded).eval()


def unchecked(verdict: dict[str, Any], why: str) -> dict[str, Any]:
    """The CPU comparison did not run (``why``): an English judge, if one is set, decides."""
    verdict.pop("scores", None)  # the device's scores: only the CPU comparison reads them
    judge = "none configured: the output check could not run"
    return {**verdict, "check": {"rule": "english", "cpu_comparison": why, "judge": judge}}
