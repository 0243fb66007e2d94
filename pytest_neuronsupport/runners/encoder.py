"""``run_encoder``: one compiled forward pass of the checkpoint's head class on ``SENTENCE`` (128
tokens; ``Berlin`` masked, or after ``QUESTION``), held to float64 within CPU eager's noise."""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import transformers

from pytest_neuronsupport.runners import Runner
from pytest_neuronsupport.runners.lib.compare import (
    Check,
    compare_hidden,
    compare_predictions,
    compare_scores,
    held_to_noise,
)
from pytest_neuronsupport.runners.lib.models import (
    compile_forward,
    load_pretrained,
    load_tokenizer,
    step,
)
from pytest_neuronsupport.runners.lib.protocol import Result, phase
from pytest_neuronsupport.runners.lib.reference import (
    cached_reference,
    exact_reference,
    reference_only,
    reference_pass,
)
from pytest_neuronsupport.runners.lib.rounding import eager_outputs

RUNNER = Runner(
    name="encoder",
    load_class="the head class its checkpoint declares, or AutoModel",
    generates=False,
    mappings=(
        "masked_lm",
        "question_answering",
        "token_classification",
        "sequence_classification",
        "multiple_choice",
        "text_encoding",
        "base",
    ),
    tasks=(
        "fill-mask",
        "token-classification",
        "text-classification",
        "question-answering",
        "zero-shot-classification",
        "feature-extraction",
        "sentence-similarity",
        "text-ranking",
    ),
    entries=(
        ("masked_lm", "run_masked_lm"),
        ("question_answering", "run_question_answering"),
        ("token_classification[one-label]", "run_score"),
        ("token_classification", "run_token_classification"),
        ("sequence_classification[one-label]", "run_score"),
        ("sequence_classification", "run_sequence_classification"),
    ),
    entry="run_hidden_states",
)

SENTENCE = "My name is Wolfgang and I live in Berlin."
QUESTION = "Where do I live?"
MASKED_WORD = "Berlin"


@dataclass
class Head:
    """What a kind of head is given, which of its outputs are checked, and by which rule."""

    kind: str  # the rule's name in the row: mask, span, token, class, score or hidden
    auto_class: Any  # loaded when the checkpoint declares no class transformers defines
    encode: Callable[[Any], dict[str, torch.Tensor]]  # tokenizer → padded inputs
    outputs: Callable[[Any], torch.Tensor]  # the model's output → what is held to float64
    rows: Callable[[torch.Tensor, dict[str, torch.Tensor], Any], torch.Tensor]  # → fixed rule's
    describe: Callable[[torch.Tensor, Any, Any, dict[str, torch.Tensor]], str]  # → notes
    check: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, str], Check]  # fp32, bf16, dev

    def forward(self, model: Any, encoded: Any, tokenizer: Any, device: str = "cpu") -> Any:
        """One forward pass; the outputs held to float64 (every position, padding too: a wrong
        number anywhere is the compiler's), on the CPU in float64. The fixed rule and the notes
        read the head's ``rows`` of them (the mask, the tokens, the span, the class)."""
        takes = inspect.signature(type(model).forward).parameters  # DistilBERT: no token_type_ids
        inputs = {k: v.to(device) for k, v in encoded.items() if k in takes}  # rows see all: FNet
        with torch.no_grad():  # not inference_mode: dynamo trips a guard (BigBird, FACTS.md)
            return self.outputs(model(**inputs)).double().cpu()


def run_masked_lm(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    """Fill-mask: the word predicted for the masked ``Berlin``."""
    return forward_and_check(params, ops, MASKED_LM)


MASKED_LM = Head(
    kind="mask",
    auto_class=transformers.AutoModelForMaskedLM,
    encode=lambda tok: encode(tok, SENTENCE.replace(MASKED_WORD, tok.mask_token)),
    outputs=lambda out: out.logits[0],
    rows=lambda values, enc, tok: values[enc["input_ids"][0] == tok.mask_token_id],
    describe=lambda values, tok, config, enc: (
        "mask: " + repr(tok.decode(values.argmax(-1).tolist()))
    ),
    check=functools.partial(compare_predictions, "mask"),
)


def run_question_answering(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    """Question answering: the answer span's start and end in the sentence."""
    return forward_and_check(params, ops, QUESTION_ANSWERING)


def describe_answer(values: torch.Tensor, tok: Any, config: Any, enc: dict[str, Any]) -> str:
    start, end = (int(i) for i in values.argmax(-1))
    ids = enc["input_ids"][0][enc["attention_mask"][0].bool()]
    return "answer: " + repr(tok.decode(ids[start : end + 1].tolist()))


QUESTION_ANSWERING = Head(
    kind="span",
    auto_class=transformers.AutoModelForQuestionAnswering,
    encode=lambda tok: encode(tok, QUESTION, SENTENCE),
    outputs=lambda out: torch.stack([out.start_logits[0], out.end_logits[0]]),
    rows=lambda values, enc, tok: values[:, enc["attention_mask"][0].bool()],
    describe=describe_answer,
    check=functools.partial(compare_predictions, "span"),
)


def run_token_classification(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    """Token classification: each token's label."""
    return forward_and_check(params, ops, TOKEN_CLASSIFICATION)


TOKEN_CLASSIFICATION = Head(
    kind="token",
    auto_class=transformers.AutoModelForTokenClassification,
    encode=lambda tok: encode(tok, SENTENCE),
    outputs=lambda out: out.logits[0],
    rows=lambda values, enc, tok: values[enc["attention_mask"][0].bool()],
    describe=lambda values, tok, config, enc: (
        "labels: " + " ".join(str(config.id2label.get(i, i)) for i in values.argmax(-1).tolist())
    ),
    check=functools.partial(compare_predictions, "token"),
)


def run_sequence_classification(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    """Sequence classification: the sentence's class."""
    return forward_and_check(params, ops, SEQUENCE_CLASSIFICATION)


SEQUENCE_CLASSIFICATION = Head(
    kind="class",
    auto_class=transformers.AutoModelForSequenceClassification,
    encode=lambda tok: encode(tok, SENTENCE),
    outputs=lambda out: out.logits[0:1],
    rows=lambda values, enc, tok: values,
    describe=lambda values, tok, config, enc: (
        "class: " + str(config.id2label.get(int(values.argmax(-1)[0]), int(values.argmax(-1)[0])))
    ),
    check=functools.partial(compare_predictions, "class"),
)


def run_score(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    """A head with one output (a reranker's relevance score): the score."""
    return forward_and_check(params, ops, SCORE)


SCORE = Head(
    kind="score",
    auto_class=transformers.AutoModelForSequenceClassification,
    encode=lambda tok: encode(tok, SENTENCE),
    outputs=lambda out: out.logits[0:1],
    rows=lambda values, enc, tok: values,
    describe=lambda values, tok, config, enc: f"score: {float(values.flatten()[0]):.4f}",
    check=lambda fp32, bf16, dev, dtype: compare_scores(fp32, bf16, dev),
)


def run_hidden_states(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    """No head: each token's last hidden state."""
    return forward_and_check(params, ops, HIDDEN_STATES)


HIDDEN_STATES = Head(
    kind="hidden",
    auto_class=transformers.AutoModel,
    encode=lambda tok: encode(tok, SENTENCE),
    outputs=lambda out: (out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0])[0],
    rows=lambda values, enc, tok: values[enc["attention_mask"][0].bool()],
    describe=lambda values, tok, config, enc: (
        f"hidden states: {values.shape[0]} tokens x {values.shape[1]}"
    ),
    check=lambda fp32, bf16, dev, dtype: compare_hidden(fp32, bf16, dev),
)


def forward_and_check(params: dict[str, Any], ops: Any, head: Head) -> dict[str, Any]:
    """Load, compile, one forward pass; then hold its outputs to the CPU's."""
    with step("load", Result.FAIL_LOAD):
        tokenizer, (cls, config) = load_tokenizer(params), head_class(params, head.auto_class)
        encoded = head.encode(tokenizer)
        forward = functools.partial(head.forward, encoded=encoded, tokenizer=tokenizer)
    reference = functools.partial(cpu_reference, params, cls, forward)
    if reference_only():  # the CPU reference alone, before the device's run
        return reference_pass(params, reference)
    with step("load", Result.FAIL_LOAD):
        ops.reset_peak()
        model = load_pretrained(cls, params, params["dtype"], params["device"])
    with step("forward", Result.FAIL_FORWARD):
        compile_forward(params, model)
        values, model = forward(model, device=params["device"]), None  # the device's copy freed
    ops.synchronize()
    verdict = {"result": Result.PASS, "hbm_peak_gb": ops.peak_gb()}
    shown = head.rows(values, encoded, tokenizer)  # what the notes and the fixed rule read
    verdict.update(head=cls.__name__, notes=head.describe(shown, tokenizer, config, encoded)[:300])
    gc.collect()  # room for the CPU's copies
    phase("reference")
    try:
        ref, verdict["reference_cached"] = cached_reference(params, reference)
        verdict.update(ref["info"])
        skipped = None if verdict["reference_reproducible"] else "CPU reference not reproducible"
    except Exception as exc:
        skipped = f"CPU run failed: {exc!r}"[:500]
    if skipped:
        return {**verdict, "check": {"rule": head.kind, "skipped": skipped}}
    fp32, bf16 = (head.rows(ref[k], encoded, tokenizer) for k in ("fp32", "bf16"))
    check = head.check(fp32, bf16, shown, params["dtype"])  # the fixed rule, without float64
    check = held_to_noise(check, values, ref, params["dtype"])  # every position, to float64
    return {**verdict, **vars(check), "result": Result.PASS if check.passed else Result.FAIL_OUTPUT}


def head_class(params: dict[str, Any], default: Any) -> tuple[Any, Any]:
    """The transformers class the checkpoint declares in ``architectures`` (else ``default``),
    and the checkpoint's config."""
    options = dict(revision=params.get("revision"), trust_remote_code=False)
    config = transformers.AutoConfig.from_pretrained(params["checkpoint"], **options)
    name = (getattr(config, "architectures", None) or [""])[0]
    cls = getattr(transformers, name, None) if name.isidentifier() else None
    ours = isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)
    return (cls if ours else default), config  # never a class of the checkpoint's own code


def encode(tokenizer: Any, *texts: str) -> dict[str, torch.Tensor]:
    """The text (or text pair), padded to 128 tokens."""
    padding = {"padding": "max_length", "max_length": 128, "truncation": True}
    return dict(tokenizer(*texts, return_tensors="pt", **padding))


def cpu_reference(params: dict[str, Any], cls: Any, forward: Any) -> dict[str, Any]:
    """The CPU's outputs (``forward(model)``, on the CPU) in fp32 (twice: are they
    reproducible?), in bf16 (rounded as the dtype defines it, the same on every host:
    :func:`eager_outputs`; where it fails, ``cpu_bf16_failed`` says why: the device is held to
    fp32 alone), and in float64 and eagerly in the run's dtype (:func:`exact_reference`)."""
    model = load_pretrained(cls, params, "float32", "cpu")
    fp32, again = (forward(model) for _ in range(2))
    info: dict[str, Any] = {"reference_reproducible": bool(torch.equal(fp32, again))}
    info["reference_max_difference"] = float((fp32 - again).abs().max()) if fp32.numel() else 0.0
    have, model = {"float32": fp32}, None
    try:  # optional: a model that cannot run in bf16 on the CPU (DeBERTa v1) is held to fp32
        bf16_model = load_pretrained(cls, params, "bfloat16", "cpu")
        bf16, info["eager_native_ops"] = eager_outputs(forward, bf16_model, "bfloat16")
        have["bfloat16"] = bf16
    except Exception as exc:
        bf16, info["cpu_bf16_failed"] = fp32, f"held to fp32 alone: {exc!r}"[:300]
    exact = exact_reference(params, cls, forward, have, info)
    return {"fp32": fp32, "bf16": bf16, "info": info, **exact}
