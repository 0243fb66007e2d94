"""The zoo's tokenizers: byte-level BPE trained on the corpus, one family per special-token set.

A family (``llama``, ``qwen``, ``gpt2``, ``bert``, ``roberta``, ``t5``, ``llava``) fixes the
special tokens and their ids, the post-processor template, the ``transformers`` wrapper's
special-token roles and chat template, and the config ids derived from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_neuronsupport.zoo.corpus import corpus_lines

if TYPE_CHECKING:
    from tokenizers import AddedToken, Tokenizer

_VOCAB_SIZE = 1024
_MIN_FREQUENCY = 1
_MODEL_MAX_LENGTH = 512

# Special tokens of each tokenizer family, in id order (they take ids 0, 1, 2, ...).
FAMILY_SPECIALS: dict[str, tuple[str, ...]] = {
    "llama": ("<unk>", "<s>", "</s>"),
    "qwen": ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    "gpt2": ("<|endoftext|>",),
    "bert": ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    "roberta": ("<s>", "<pad>", "</s>", "<unk>", "<mask>"),
    "t5": ("<pad>", "</s>", "<unk>"),
    "llava": ("<unk>", "<s>", "</s>", "<image>", "<pad>"),
}
# Mask tokens swallow the space before them, so "in [MASK]." is " in", mask, ".".
_LSTRIP_SPECIALS = frozenset({"[MASK]", "<mask>"})

_CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)


def _special(token: str) -> AddedToken:
    """A special token as the zoo's tokenizers hold it (a mask token swallows the space
    before it)."""
    from tokenizers import AddedToken

    return AddedToken(token, special=True, normalized=False, lstrip=token in _LSTRIP_SPECIALS)


# The unknown token of the families that have one.
_UNK = {"llama": "<unk>", "bert": "[UNK]", "roberta": "<unk>", "t5": "<unk>", "llava": "<unk>"}


def _train_bpe(family: str) -> Tokenizer:
    """Train the byte-level BPE ``tokenizers.Tokenizer`` of *family* (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.trainers import BpeTrainer

    specials = FAMILY_SPECIALS[family]
    tok = Tokenizer(models.BPE(unk_token=_UNK.get(family)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        min_frequency=_MIN_FREQUENCY,
        show_progress=False,
        # Specials go through the trainer so that they take the first ids and count towards
        # vocab_size (adding them afterwards could push the vocabulary past it).
        special_tokens=[_special(s) for s in specials],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    tok.post_processor = _post_processor(family, _special_ids(tok, specials))
    return tok


def _special_ids(tok: Tokenizer, specials: tuple[str, ...]) -> dict[str, int]:
    """The ids a trained tokenizer gave its special tokens."""
    ids: dict[str, int] = {}
    for s in specials:
        token_id = tok.token_to_id(s)
        if token_id is None:  # pragma: no cover - the trainer always adds them
            raise RuntimeError(f"special token {s!r} missing after training")
        ids[s] = token_id
    return ids


def _post_processor(family: str, ids: dict[str, int]) -> Any:
    """The post-processor of *family*: byte-level offsets, then its template of special tokens
    (``ids``: their ids)."""
    from tokenizers import processors

    # Decoders keep the raw offsets; encoders trim spaces off them (for QA / NER spans).
    byte_level = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=family in ("bert", "roberta")
    )
    if family in ("llama", "llava"):
        template = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", ids["<s>"])]
        )
    elif family == "t5":  # T5 has no bos; every sequence ends with </s>
        template = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", ids["</s>"])]
        )
    elif family == "bert":
        template = processors.TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0",
            pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
        )
    elif family == "roberta":
        return processors.RobertaProcessing(
            ("</s>", ids["</s>"]), ("<s>", ids["<s>"]), trim_offsets=True, add_prefix_space=False
        )
    else:
        return byte_level
    return processors.Sequence([byte_level, template])


def _special_roles(family: str) -> dict[str, Any]:
    """The ``transformers`` wrapper's special-token roles of *family* (and qwen's chat
    template)."""
    if family == "llama":
        return {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    if family == "qwen":
        return {
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "extra_special_tokens": ["<|im_start|>"],
            "chat_template": _CHATML_TEMPLATE,
        }
    if family == "gpt2":
        return {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    if family == "t5":
        return {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    if family == "llava":
        return {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
            # a named extra special token: tokenizer.image_token / image_token_id
            "extra_special_tokens": {"image_token": "<image>"},
        }
    if family == "bert":
        return {
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "mask_token": _special("[MASK]"),
        }
    return {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "sep_token": "</s>",
        "cls_token": "<s>",
        "pad_token": "<pad>",
        "mask_token": _special("<mask>"),
    }


def make_tokenizer(family: str, token_type_ids: bool, named: dict[str, str] | None = None) -> Any:
    """Return the trained tokenizer of *family* wrapped as a ``PreTrainedTokenizerFast``.

    *token_type_ids* says whether the model takes ``token_type_ids`` (BERT, DeBERTa) or not
    (decoders, RoBERTa, DistilBERT); it sets the tokenizer's ``model_input_names``. *named*:
    more special tokens, each by its role (``{"image_token": "<image>"}``: the tokenizer's
    ``image_token`` and ``image_token_id``), added after the trained vocabulary.
    """
    import transformers

    # TokenizersBackend in transformers 5.x; the old name still imports. Untyped, hence Any.
    fast_tokenizer_cls: Any = transformers.PreTrainedTokenizerFast
    kwargs = _special_roles(family)
    decoder = family in ("llama", "qwen", "gpt2", "llava")
    input_names = ["input_ids", "token_type_ids", "attention_mask"]
    if not token_type_ids:
        input_names.remove("token_type_ids")
    if named:
        kwargs["extra_special_tokens"] = {**kwargs.get("extra_special_tokens", {}), **named}
    return fast_tokenizer_cls(
        tokenizer_object=_train_bpe(family),
        model_max_length=_MODEL_MAX_LENGTH,
        padding_side="left" if decoder else "right",
        model_input_names=input_names,
        clean_up_tokenization_spaces=False,
        **kwargs,
    )


def family_ids(tokenizer: Any, family: str) -> dict[str, Any]:
    """Return the config keyword arguments tied to the tokenizer: vocab size, special ids."""
    ids: dict[str, Any] = {"vocab_size": len(tokenizer)}
    for key in ("pad", "bos", "eos"):
        ids[f"{key}_token_id"] = getattr(tokenizer, f"{key}_token_id")
    if family == "qwen":  # Qwen3 checkpoints name <|endoftext|> as bos
        ids["bos_token_id"] = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    if family == "llava":
        ids["image_token_id"] = tokenizer.convert_tokens_to_ids("<image>")
    return ids
