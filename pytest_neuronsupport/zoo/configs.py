"""The config factories of the zoo models and the sizes they share.

Each factory gets the tokenizer-derived keyword arguments (``vocab_size`` and the special
token ids, see :func:`~pytest_neuronsupport.zoo.tokenizer.family_ids`) and returns a
``transformers`` config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedConfig

_HIDDEN = 64
_LAYERS = 2
_HEADS = 4
_INTERMEDIATE = 128
_MAX_POSITIONS = 512

_NER_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
_SST_LABELS = ("NEGATIVE", "NEUTRAL", "POSITIVE")

# llava's vision tower: 32x32 images in 8x8 patches, i.e. 16 patch tokens (+ CLS, which the
# "default" feature selection drops), so one image is 16 <image> tokens in the prompt.
IMAGE_SIZE = 32
PATCH_SIZE = 8
_IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2

# mixtral's experts.
_EXPERTS = 4
_EXPERTS_PER_TOKEN = 2

# llama-2core: big enough to need two cores under a small per-core memory budget (4.46 M
# parameters, 8.9 MB in bf16), with head counts that split evenly over 2 tensor-parallel ranks.
_2CORE_HIDDEN = 256
_2CORE_LAYERS = 4
_2CORE_HEADS = 8
_2CORE_KV_HEADS = 4
_2CORE_INTERMEDIATE = 1024


def _labels(labels: tuple[str, ...]) -> dict[str, Any]:
    return {
        "id2label": dict(enumerate(labels)),
        "label2id": {label: i for i, label in enumerate(labels)},
    }


def llama_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=_HIDDEN,
        intermediate_size=_INTERMEDIATE,
        num_hidden_layers=_LAYERS,
        num_attention_heads=_HEADS,
        num_key_value_heads=2,
        max_position_embeddings=_MAX_POSITIONS,
        tie_word_embeddings=False,
        **ids,
    )


def qwen3_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import Qwen3Config

    return Qwen3Config(
        hidden_size=_HIDDEN,
        intermediate_size=_INTERMEDIATE,
        num_hidden_layers=_LAYERS,
        num_attention_heads=_HEADS,
        num_key_value_heads=2,
        head_dim=_HIDDEN // _HEADS,
        max_position_embeddings=_MAX_POSITIONS,
        max_window_layers=_LAYERS,
        tie_word_embeddings=False,
        **ids,
    )


def gpt2_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import GPT2Config

    return GPT2Config(
        n_embd=_HIDDEN,
        n_inner=_INTERMEDIATE,
        n_layer=_LAYERS,
        n_head=_HEADS,
        n_positions=_MAX_POSITIONS,
        tie_word_embeddings=False,
        **ids,
    )


def llama_2core_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=_2CORE_HIDDEN,
        intermediate_size=_2CORE_INTERMEDIATE,
        num_hidden_layers=_2CORE_LAYERS,
        num_attention_heads=_2CORE_HEADS,
        num_key_value_heads=_2CORE_KV_HEADS,
        max_position_embeddings=_MAX_POSITIONS,
        tie_word_embeddings=False,
        **ids,
    )


def mixtral_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import MixtralConfig

    return MixtralConfig(
        hidden_size=_HIDDEN,
        intermediate_size=_INTERMEDIATE,
        num_hidden_layers=_LAYERS,
        num_attention_heads=_HEADS,
        num_key_value_heads=2,
        num_local_experts=_EXPERTS,
        num_experts_per_tok=_EXPERTS_PER_TOKEN,
        max_position_embeddings=_MAX_POSITIONS,
        tie_word_embeddings=False,
        **ids,
    )


def t5_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import T5Config

    # Not constructor parameters of T5Config, but read from the keyword arguments.
    v1_1_style: dict[str, Any] = {
        # T5 v1.1 / FLAN-T5: the decoder output is not rescaled before the head, which has its
        # own weight (transformers 5 reads this as scale_decoder_outputs=False, see
        # sharpen.untie_head).
        "tie_word_embeddings": False,
        "decoder_start_token_id": ids["pad_token_id"],
    }
    return T5Config(
        d_model=_HIDDEN,
        d_kv=_HIDDEN // _HEADS,
        d_ff=_INTERMEDIATE,
        num_layers=_LAYERS,
        num_decoder_layers=_LAYERS,
        num_heads=_HEADS,
        feed_forward_proj="gated-gelu",
        **v1_1_style,
        **ids,
    )


def bart_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import BartConfig

    return BartConfig(
        d_model=_HIDDEN,
        encoder_layers=_LAYERS,
        decoder_layers=_LAYERS,
        encoder_attention_heads=_HEADS,
        decoder_attention_heads=_HEADS,
        encoder_ffn_dim=_INTERMEDIATE,
        decoder_ffn_dim=_INTERMEDIATE,
        max_position_embeddings=_MAX_POSITIONS,
        # Untied, so that the head can be sharpened (see sharpen.share_bart_embeddings).
        tie_word_embeddings=False,
        decoder_start_token_id=ids["eos_token_id"],
        # BART's default forces </s> as the last token allowed by max_length; without it greedy
        # decoding is pure argmax, as for every other zoo decoder.
        forced_eos_token_id=None,
        **ids,
    )


def llava_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import CLIPVisionConfig, LlavaConfig

    ids = dict(ids)
    image_token_id = ids.pop("image_token_id")
    vision = CLIPVisionConfig(
        hidden_size=_HIDDEN,
        intermediate_size=_INTERMEDIATE,
        num_hidden_layers=_LAYERS,
        num_attention_heads=_HEADS,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        projection_dim=_HIDDEN,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=llama_config(ids),
        image_token_index=image_token_id,
        image_seq_length=_IMAGE_TOKENS,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        tie_word_embeddings=False,
    )


def bert_config(ids: dict[str, Any], **extra: Any) -> PreTrainedConfig:
    from transformers import BertConfig

    return BertConfig(
        hidden_size=_HIDDEN,
        intermediate_size=_INTERMEDIATE,
        num_hidden_layers=_LAYERS,
        num_attention_heads=_HEADS,
        max_position_embeddings=_MAX_POSITIONS,
        type_vocab_size=2,
        **ids,
        **extra,
    )


def roberta_qa_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import RobertaConfig

    return RobertaConfig(
        hidden_size=_HIDDEN,
        intermediate_size=_INTERMEDIATE,
        num_hidden_layers=_LAYERS,
        num_attention_heads=_HEADS,
        # RoBERTa positions start after the padding index, hence the +2 (as in roberta-base).
        max_position_embeddings=_MAX_POSITIONS + 2,
        type_vocab_size=1,
        **ids,
    )


def deberta_v2_ner_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import DebertaV2Config

    # DeBERTa-v3 style: disentangled relative attention, log buckets, shared keys. Some of
    # these are not constructor parameters but are read from the config by the model.
    v3_style: dict[str, Any] = {
        "position_buckets": 64,
        "norm_rel_ebd": "layer_norm",
        "share_att_key": True,
    }
    return DebertaV2Config(
        hidden_size=_HIDDEN,
        intermediate_size=_INTERMEDIATE,
        num_hidden_layers=_LAYERS,
        num_attention_heads=_HEADS,
        max_position_embeddings=_MAX_POSITIONS,
        relative_attention=True,
        max_relative_positions=-1,
        pos_att_type=["p2c", "c2p"],
        position_biased_input=False,
        type_vocab_size=0,
        **v3_style,
        **_labels(_NER_LABELS),
        **ids,
    )


def distilbert_sst_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import DistilBertConfig

    ids = {k: v for k, v in ids.items() if k in ("vocab_size", "pad_token_id")}
    return DistilBertConfig(
        dim=_HIDDEN,
        hidden_dim=_INTERMEDIATE,
        n_layers=_LAYERS,
        n_heads=_HEADS,
        max_position_embeddings=_MAX_POSITIONS,
        **_labels(_SST_LABELS),
        **ids,
    )
