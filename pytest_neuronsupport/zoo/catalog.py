"""The catalog: one :class:`ZooModel` per zoo model, what it is and how it is built.

:data:`MODELS` is the only table of the zoo; :func:`names` and :func:`get` read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_neuronsupport.zoo.configs import (
    bart_config,
    bert_config,
    deberta_v2_ner_config,
    distilbert_sst_config,
    gpt2_config,
    llama_2core_config,
    llama_config,
    llava_config,
    mixtral_config,
    qwen3_config,
    roberta_qa_config,
    t5_config,
)
from pytest_neuronsupport.zoo.processor import llava_processor
from pytest_neuronsupport.zoo.sharpen import (
    ATTENTION_GAIN,
    chain,
    no_sharpening,
    scale,
    share_bart_embeddings,
    successor_readout,
    untie_head,
)

#: A zoo name that starts with this names a tiny architecture: ``arch/LlamaForCausalLM``.
ARCHITECTURE_PREFIX = "arch/"

if TYPE_CHECKING:
    from transformers import PreTrainedConfig

ZOO_VERSION = "1"
"""Bump whenever a model definition (corpus, tokenizer, config, seed, sharpening) changes."""


@dataclass(frozen=True)
class ZooModel:
    """One tiny model of the zoo; its model id in model lists is ``f"zoo:{name}"``.

    The first four fields describe the model; the others say how :func:`build` makes it (they
    are left out of the ``repr``).
    """

    name: str
    """Short name, e.g. ``"llama"``."""
    architecture: str
    """The ``transformers`` class named in config.json ``architectures``."""
    task: str
    """The Hub pipeline tag, e.g. ``"text-generation"``."""
    description: str
    """One line for ``neuronsupport zoo list``."""
    family: str = field(repr=False)
    """Tokenizer family, a key of :data:`~pytest_neuronsupport.zoo.tokenizer.FAMILY_SPECIALS`."""
    seed: int = field(repr=False)
    """``torch.manual_seed`` for the random weights (and the sharpening's permutation)."""
    make_config: Callable[[dict[str, Any]], PreTrainedConfig] = field(repr=False)
    """Config factory; gets the tokenizer-derived ``vocab_size`` and special token ids."""
    sharpen: Callable[[Any, set[int]], None] = field(repr=False)
    """Rewrites the output layer in place; gets the model and the special token ids."""
    token_type_ids: bool = field(default=False, repr=False)
    """Whether the tokenizer returns ``token_type_ids`` (only models with segment embeddings)."""
    dtype: str = field(default="float32", repr=False)
    """The dtype the weights are stored in, a ``torch`` attribute name (``config.json`` says it)."""
    make_processor: Callable[[Any], Any] | None = field(default=None, repr=False)
    """Processor factory (gets the tokenizer), for models that take more than text."""


MODELS: tuple[ZooModel, ...] = (
    ZooModel(
        "llama",
        "LlamaForCausalLM",
        "text-generation",
        "tiny Llama decoder (RMSNorm, RoPE, GQA, SwiGLU); <s> bos, </s> eos, no chat template",
        family="llama",
        seed=1001,
        make_config=llama_config,
        sharpen=successor_readout(),
    ),
    ZooModel(
        "qwen3",
        "Qwen3ForCausalLM",
        "text-generation",
        "tiny Qwen3 decoder (q/k norm, GQA) with a ChatML chat template; eos <|im_end|>",
        family="qwen",
        seed=1002,
        make_config=qwen3_config,
        sharpen=successor_readout(),
    ),
    ZooModel(
        "gpt2",
        "GPT2LMHeadModel",
        "text-generation",
        "tiny GPT-2 decoder (learned positions, Conv1D); <|endoftext|> bos/eos",
        family="gpt2",
        seed=1003,
        make_config=gpt2_config,
        sharpen=successor_readout(embedding_gain=2.0),
    ),
    ZooModel(
        "bert-mlm",
        "BertForMaskedLM",
        "fill-mask",
        "tiny BERT masked LM; [CLS] A [SEP] B [SEP] with token_type_ids, [MASK] absorbs its space",
        family="bert",
        seed=1004,
        make_config=lambda ids: bert_config(ids, tie_word_embeddings=False),
        sharpen=scale(("cls.predictions.decoder", 50.0)),
        token_type_ids=True,
    ),
    ZooModel(
        "roberta-qa",
        "RobertaForQuestionAnswering",
        "question-answering",
        "tiny RoBERTa extractive QA head; <s> A </s></s> B </s>",
        family="roberta",
        seed=1005,
        make_config=roberta_qa_config,
        sharpen=scale(("qa_outputs", 50.0)),
    ),
    ZooModel(
        "deberta-v2-ner",
        "DebertaV2ForTokenClassification",
        "token-classification",
        "tiny DeBERTa-v2 (relative attention) NER head: O, B-PER, I-PER, B-LOC, I-LOC",
        family="bert",
        seed=1006,
        make_config=deberta_v2_ner_config,
        sharpen=scale(("classifier", 50.0)),
        token_type_ids=True,
    ),
    ZooModel(
        "distilbert-sst",
        "DistilBertForSequenceClassification",
        "text-classification",
        "tiny DistilBERT sentiment head: NEGATIVE, NEUTRAL, POSITIVE",
        family="bert",
        seed=1007,
        make_config=distilbert_sst_config,
        sharpen=scale(
            ("distilbert.transformer.layer.*.attention.out_lin", ATTENTION_GAIN),
            ("classifier", 800.0),
        ),
    ),
    ZooModel(
        "bert-reranker",
        "BertForSequenceClassification",
        "text-ranking",
        "tiny BERT cross-encoder: one relevance score for a (query, passage) pair",
        family="bert",
        seed=1008,
        make_config=lambda ids: bert_config(ids, num_labels=1),
        sharpen=scale(
            ("bert.encoder.layer.*.attention.output.dense", ATTENTION_GAIN),
            ("classifier", 1000.0),
        ),
        token_type_ids=True,
    ),
    ZooModel(
        "bert",
        "BertModel",
        "feature-extraction",
        "tiny BERT encoder without a head (last hidden state and pooler output)",
        family="bert",
        seed=1009,
        make_config=bert_config,
        sharpen=no_sharpening,
        token_type_ids=True,
    ),
    ZooModel(
        "t5",
        "T5ForConditionalGeneration",
        "text2text-generation",
        "tiny T5 v1.1-style encoder-decoder (gated GELU, untied head); </s> eos, <pad> starts",
        family="t5",
        seed=1010,
        make_config=t5_config,
        sharpen=chain(untie_head, successor_readout(embedding_gain=2.0, from_start=True)),
    ),
    ZooModel(
        "bart",
        "BartForConditionalGeneration",
        "summarization",
        "tiny BART encoder-decoder; <s> A </s>, decoding starts at </s> as in BART",
        family="roberta",
        seed=1011,
        make_config=bart_config,
        sharpen=chain(successor_readout(from_start=True), share_bart_embeddings),
    ),
    ZooModel(
        "llava",
        "LlavaForConditionalGeneration",
        "image-text-to-text",
        "tiny LLaVA (CLIP vision tower 32px/8px patches, Llama text) with a processor and <image>",
        family="llava",
        seed=1012,
        make_config=llava_config,
        sharpen=successor_readout(),
        make_processor=llava_processor,
    ),
    ZooModel(
        "mixtral",
        "MixtralForCausalLM",
        "text-generation",
        "tiny Mixtral mixture-of-experts decoder: 4 experts, top-2 routing",
        family="llama",
        seed=1013,
        make_config=mixtral_config,
        sharpen=successor_readout(),
    ),
    ZooModel(
        "llama-2core",
        "LlamaForCausalLM",
        "text-generation",
        "larger Llama (hidden 256, 4 layers, 8 heads), stored in bf16; splits over 2 cores",
        family="llama",
        seed=1014,
        make_config=llama_2core_config,
        sharpen=successor_readout(embedding_gain=4.0),
        dtype="bfloat16",
    ),
)
_BY_NAME: dict[str, ZooModel] = {m.name: m for m in MODELS}


def names() -> list[str]:
    """Return the names of all zoo models, in a fixed order."""
    return [m.name for m in MODELS]


def get(name: str) -> ZooModel:
    """Return the zoo model called *name* (without the ``zoo:`` prefix).

    Raises:
        ValueError: *name* is not a zoo model; the message lists the known names.
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(names())
        raise ValueError(f"unknown zoo model {name!r}; known zoo models: {known}") from None
