"""A tiny random checkpoint of every architecture transformers maps for the card's text tasks,
and of the image-text-to-text families of :data:`VISION_TYPES`.

One checkpoint per (model type, head class) of the installed transformers' auto mappings
(:mod:`pytest_neuronsupport.automap`) for the kinds in :data:`KINDS`: the model type's config
class with its sizes shrunk (hidden size, layers, heads, experts, feed-forward, vocabulary; the
same keys in every nested config), as transformers' ``utils/create_dummy_models.py`` does,
random weights from a seed derived from the class name, and the zoo's byte-level BPE tokenizer
(the ``roberta`` family: every special token a head needs), whose size is the vocabulary.
An image-text-to-text class of :data:`VISION_TYPES` is built as one (its vision tower shrunk
too, for 32x32 images in 8x8 patches), with its family's image processor on the PIL backend
in its family's processor (or one that takes the same inputs without a video processor), chat
template and image tokens (:data:`~.processor.VISION`), for the multimodal runner.

What cannot be built is listed in the architecture table (:mod:`.table`), each class with its
reason; the coverage test (``tests/test_architectures.py``) fails when transformers maps a class
that is in neither that table's built nor its not-buildable list. Nothing here imports anything
heavy at module level.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from pytest_neuronsupport import automap
from pytest_neuronsupport.builtonce import built_once
from pytest_neuronsupport.zoo.builder import _quiet_deterministic_build, zoo_root
from pytest_neuronsupport.zoo.catalog import ARCHITECTURE_PREFIX
from pytest_neuronsupport.zoo.tokenizer import family_ids, make_tokenizer

#: The kinds of mapping of the card's text tasks.
KINDS = (
    "causal_lm",
    "seq2seq_lm",
    "masked_lm",
    "question_answering",
    "token_classification",
    "sequence_classification",
)
FAMILY = "roberta"
#: The image-text-to-text model types the zoo builds with a processor (those of
#: :data:`~.processor.VISION`), or lists with why it cannot (the architecture table): their
#: classes of that mapping are built as image-text-to-text models, not as text ones.
VISION_TYPES = (
    "llava",
    "llava_next",
    "llava_onevision",
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "gemma3",
    "paligemma",
    "idefics3",
    "smolvlm",
    "mistral3",
)
#: The cache's folder of the checkpoints, named by the version of how they are built (2: a
#: hybrid keeps an attention layer, an encoder-decoder without a start token starts from pad;
#: 3: latent attention, rotary, expert-group and per-model-type sizes that run in eager;
#: 4: the image-text-to-text classes of VISION_TYPES with their processor).
BUILD_VERSION = 4
FOLDER = f"architectures-v{BUILD_VERSION}"
#: Config keys shrunk wherever they appear (nested configs too), to these values.
SIZES: dict[str, int] = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "n_embed"), 64),
    **dict.fromkeys(("embedding_size", "word_embed_proj_dim", "projection_dim", "emb_dim"), 64),
    **dict.fromkeys(
        ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers"), 2
    ),
    **dict.fromkeys(("decoder_layers", "num_decoder_layers", "num_encoder_layers"), 2),
    **dict.fromkeys(("num_attention_heads", "n_head", "n_heads", "num_heads"), 4),
    **dict.fromkeys(("encoder_attention_heads", "decoder_attention_heads"), 4),
    **dict.fromkeys(("num_key_value_heads", "n_kv_heads", "num_kv_heads"), 2),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "d_ff", "n_inner", "hidden_dim"), 128),
    **dict.fromkeys(("encoder_ffn_dim", "decoder_ffn_dim", "moe_intermediate_size"), 128),
    **dict.fromkeys(("shared_expert_intermediate_size", "expert_intermediate_size"), 128),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts"), 4),
    **dict.fromkeys(("moe_num_experts",), 4),
    **dict.fromkeys(("num_experts_per_tok", "moe_topk", "top_k", "moe_k"), 2),
    **dict.fromkeys(("num_experts_per_token",), 2),
    "head_dim": 16,
    "d_kv": 16,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    # rotary dims of a head of 16 (GPT-J, CodeGen: 64 by default, over the head)
    **dict.fromkeys(("rotary_dim",), 8),
    # expert groups: one group of the shrunk experts (DeepSeek V3: 8 groups of 4 experts)
    **dict.fromkeys(("n_group", "topk_group", "num_expert_group"), 1),
    **dict.fromkeys(("index_head_dim",), 16),
    **dict.fromkeys(("index_n_heads",), 4),
}
#: Per-layer lists cut to the shrunk number of layers.
LAYER_LISTS = ("layer_types", "mlp_layer_types", "attention_layer_types", "block_types")
LAYERS = 2
#: Layer types that attend (a cut list of a hybrid's layer types keeps one).
ATTENTION_LAYERS = ("full_attention", "sliding_attention", "attention")
#: A model type's own keyword arguments, where shrinking its sizes is not enough.
OVERRIDES: dict[str, dict[str, Any]] = {
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    "reformer": {"axial_pos_embds_dim": [32, 32]},
    # its attention layer is every 8th from the 5th: the second of two layers instead
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1},
    # its default routes to no expert (top_k None): DeepSeek-V2-Lite's 6 of 64 -> 2 of 4
    "deepseek_v2": {"num_experts_per_tok": 2},
    # hybrids whose default is all Mamba layers: the second of two attends
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    # its cache rounds the query size up to 64 / heads and its layers do not: full-width queries
    "xlstm": {"embedding_dim": 64, "num_blocks": 2, "qk_dim_factor": 1.0},
    # its layout embeddings are six sixths of the hidden size: 64 is not divisible by 6
    "lilt": {"hidden_size": 48},
    # the four box coordinates and two sizes embedded side by side: 4 x 12 + 2 x 8 = 64
    "layoutlmv3": {"coordinate_size": 12, "shape_size": 8},
    # an adapter is chosen by language: the first (and only) one
    "xmod": {"default_language": "en_XX"},
    # its indexer's heads are those of one key head at most: 2 of the shrunk 4 / 2
    "kolibri1_1": {"index_num_heads": 2},
}
#: Model types whose cut layer types keep a full-attention layer (T5Gemma 2's masks and static
#: cache expect one; its first five of six layers slide).
FULL = ("t5gemma2",)
#: Model types whose default config has no pad token but whose model needs one (ESM counts its
#: positions from it): they get the tokenizer's.
PADDED = ("esm",)
#: The kinds whose head gets three labels (question answering keeps its start and end).
LABELLED = ("token_classification", "sequence_classification")


def mapped() -> list[tuple[str, str, str]]:
    """(model type, class, kind) of every class the installed transformers maps for
    :data:`KINDS`, and as ``image_text_to_text`` for the model types of :data:`VISION_TYPES`,
    each class once, under the first kind that maps it (image-text-to-text first)."""
    seen: dict[str, tuple[str, str, str]] = {}
    for model_type, classes in automap.table(VISION).items():
        for cls in classes if model_type in VISION_TYPES else ():
            seen.setdefault(cls, (model_type, cls, VISION))
    for kind in KINDS:
        for model_type, classes in automap.table(kind).items():
            for cls in classes:
                seen.setdefault(cls, (model_type, cls, kind))
    return sorted(seen.values(), key=lambda t: t[1])


#: The kind of mapping of the classes of VISION_TYPES.
VISION = "image_text_to_text"
#: The task a list entry names for a class that is also an image-text-to-text model, built as
#: a text model (so the mappings route it by what it was built as).
TEXT_TASKS = {"causal_lm": "text-generation", "seq2seq_lm": "text2text-generation"}
#: The bundled list of every tiny architecture that builds (``model_list()`` writes it).
LIST_NAME = "architectures.toml"
_LIST_HEADER = """\
# Every architecture transformers maps for the card's text tasks, and the image-text-to-text
# families the zoo builds with a processor: a tiny random model of each class that builds
# (`neuronsupport zoo build --architectures`), built on first use into the cache. Generated:
# `neuronsupport zoo list --architectures > model_lists/architectures.toml`
# (tests/test_architectures.py fails when this file differs). Not part of the default sweep:
# `pytest --neuron-sweep --neuron-models architectures`. Its expected results on the CPU with
# aot_eager: architectures-expected.toml (`--neuron-baseline`). transformers {version}.
"""


def model_list() -> str:
    """The text of the bundled list: one ``zoo:arch/<class>`` entry per class that builds, the
    runner left to the mappings, as for any checkpoint; the task too, but for a class that is
    also image-text-to-text (Gemma 3), built as the text model it is first in :data:`KINDS`."""
    import tomlkit

    from pytest_neuronsupport.zoo import table

    built = {cls: (t, kind) for t, cls, kind in mapped() if cls in table.built()}
    models = tomlkit.aot()
    for cls in sorted(built):
        model = tomlkit.table()
        model.add("id", f"zoo:{ARCHITECTURE_PREFIX}{cls}")
        model_type, kind = built[cls]
        first = automap.kinds_of(cls, {"model_type": model_type})[0]
        if first == "image_text_to_text" and kind != first:  # built with no image processor
            task = tomlkit.item(TEXT_TASKS[kind])
            task.comment(f"built as a {kind}, with a tokenizer only")
            task.trivia.comment_ws = "  "
            model.add("task", task)
        models.append(model)
    document = tomlkit.document()
    document.add("model", models)
    header = _LIST_HEADER.format(version=automap.transformers_version())
    return f"{header}\n{tomlkit.dumps(document)}"


def name_of(cls: str) -> str:
    """A checkpoint's folder name: its class."""
    return cls


def seed_of(cls: str) -> int:
    return int.from_bytes(hashlib.sha256(cls.encode()).digest()[:4], "big")


def shrunk(values: dict[str, Any], ids: dict[str, Any], full: bool = False) -> dict[str, Any]:
    """The config's keyword arguments with every size key shrunk, nested configs too (with
    ``full``, a cut list of layer types keeps a full-attention layer, see :data:`FULL`)."""
    out: dict[str, Any] = {}
    layers = None
    for key, value in values.items():
        if isinstance(value, dict) and "model_type" in value:
            out[key] = {**value, **shrunk(value, ids, full)}
        elif key in SIZES and isinstance(value, int) and not isinstance(value, bool):
            out[key] = min(value, SIZES[key]) if value else value
            if SIZES[key] == LAYERS:
                layers = LAYERS
        elif key in ("vocab_size", "unpadded_vocab_size"):  # Inkling 2 pads to the first
            out[key] = ids["vocab_size"]
        elif key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            out[key] = ids.get(key, ids["eos_token_id"]) if value is not None else None
    if "qk_rope_head_dim" in out:
        # latent attention: the config derives its head sizes from the shrunk parts, and
        # every head has its own key and value (no grouped-query attention)
        for key in ("head_dim", "qk_head_dim"):
            out.pop(key, None)
        if "num_key_value_heads" in out and "num_attention_heads" in out:
            out["num_key_value_heads"] = out["num_attention_heads"]
    for key in LAYER_LISTS:
        if isinstance(values.get(key), list) and layers:
            out[key] = values[key][:layers]
            # a hybrid keeps one attention layer (Qwen3-Next: three linear ones first)
            attention = [t for t in values[key] if t in ATTENTION_LAYERS]
            if attention and not set(out[key]) & set(ATTENTION_LAYERS):
                out[key][-1] = attention[0]
            if full and "full_attention" in values[key] and "full_attention" not in out[key]:
                out[key][-1] = "full_attention"
    if values.get("is_encoder_decoder") and values.get("decoder_start_token_id") is None:
        if values.get("bos_token_id") is None:  # T5: generation starts from the pad token
            out["decoder_start_token_id"] = ids.get("pad_token_id", ids["eos_token_id"])
    return out


def merged(values: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """``values`` with ``more`` set over them, nested dicts merged key by key."""
    out = dict(values)
    for key, value in more.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if nested else value
    return out


def make_config(
    model_type: str, kind: str, ids: dict[str, Any], more: dict[str, Any] | None = None
) -> Any:
    """The model type's config, its sizes shrunk (three labels for a classifier), ``more``
    set over them (an image-text-to-text model's tower and image tokens)."""
    from transformers import CONFIG_MAPPING

    config_cls = CONFIG_MAPPING[model_type]
    values = shrunk(config_cls().to_dict(), ids, model_type in FULL)
    kwargs = merged({**values, **OVERRIDES.get(model_type, {})}, more or {})
    if kind in LABELLED:
        kwargs["num_labels"] = 3
    if model_type in PADDED:
        kwargs["pad_token_id"] = ids["pad_token_id"]
    return config_cls(**kwargs)


def build(cls: str, model_type: str, kind: str, dest: Path) -> None:
    """Write the tiny checkpoint of one class (config, weights, tokenizer; an image-text-to-text
    model's processor too) into ``dest``."""
    import torch
    import transformers

    from pytest_neuronsupport.zoo.processor import VISION as RECIPES

    dest.mkdir(parents=True, exist_ok=True)
    with _quiet_deterministic_build():
        recipe = RECIPES[model_type] if kind == VISION else None
        tokenizer = make_tokenizer(FAMILY, False, named=recipe.tokens if recipe else None)
        # a processor may add tokens (PaliGemma's): the vocabulary is counted after it
        processor = recipe.processor(tokenizer) if recipe else tokenizer
        more = recipe.config(tokenizer) if recipe else None
        config = make_config(model_type, kind, family_ids(tokenizer, FAMILY), more)
        torch.manual_seed(seed_of(cls))
        model = getattr(transformers, cls)(config).eval()
        processor.save_pretrained(str(dest))  # a processor saves its tokenizer too
        model.save_pretrained(str(dest))


def ensure_built(cls: str, cache_dir: Path) -> Path:
    """The checkpoint folder of one mapped class, built into the zoo's cache if absent."""
    found = next(((t, k) for t, c, k in mapped() if c == cls), None)
    if found is None:
        raise KeyError(f"{cls}: transformers maps no such class for {', '.join(KINDS)}")
    final = zoo_root(cache_dir) / FOLDER / name_of(cls)
    return built_once(final, functools.partial(build, cls, *found))
