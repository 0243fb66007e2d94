"""transformers' own auto mappings (model type -> class name), read without importing it.

``transformers.models.auto.modeling_auto`` imports torch, which the plugin side must not, so
its ``MODEL_FOR_*_MAPPING_NAMES`` tables are read from the installed package's source with
:mod:`ast` (literal entries, and ``*list(OTHER.items())`` spreads), once a process.

A **kind** is the short name of one table a runner may take (``causal_lm`` is
``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``). :data:`KINDS` lists the kinds runners take, in the
order that settles a class several tables map (:func:`kinds_of`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

#: The kinds runners take, by the table each names. **The order settles a class in several
#: tables** (after the entry's task, see :func:`kinds_of`): an encoder-decoder's LM (BART is
#: also a masked LM) before an image-text-to-text model (T5Gemma2 is also seq2seq) before a
#: masked LM (XLM's ``XLMWithLMHeadModel`` is also a causal LM; its checkpoints are mostly
#: masked-LM ones) before a causal LM (Gemma 3 is also image-text-to-text) before the encoder
#: heads (question answering, token, sequence classification, multiple choice) before the
#: encoders and base models (Llama 4's base is also image-text-to-text).
KINDS: dict[str, str] = {
    "seq2seq_lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "image_text_to_text": "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "masked_lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "causal_lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "question_answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "token_classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "sequence_classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "multiple_choice": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
    "text_encoding": "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES",
    "base": "MODEL_MAPPING_NAMES",
}
#: The kind a Hub task asks for first, when the class is in its table.
TASK_KINDS: dict[str, str] = {
    "text-generation": "causal_lm",
    "text2text-generation": "seq2seq_lm",
    "translation": "seq2seq_lm",
    "summarization": "seq2seq_lm",
    "image-text-to-text": "image_text_to_text",
    "fill-mask": "masked_lm",
    "question-answering": "question_answering",
    "token-classification": "token_classification",
    "text-classification": "sequence_classification",
    "zero-shot-classification": "sequence_classification",
    "text-ranking": "sequence_classification",
    "feature-extraction": "base",
    "sentence-similarity": "base",
}
MODULE = "models/auto/modeling_auto.py"
#: The table of speech-to-text models: their encoder takes audio features, which no runner feeds
#: (the seq2seq runner feeds its encoder text), so a class it maps is never run, nor the base
#: model of a model type it maps (``WhisperModel``).
SPEECH_SEQ2SEQ = "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"
#: Model types whose text models need an input beside the text that no runner feeds, each with
#: it: their forward raises without it (transformers has no table of these; read from their
#: ``forward``). Bros: the words' boxes of a scanned page; LXMERT: an image's region features.
OTHER_INPUTS = {
    "bros": "bbox (the boxes of the words on a scanned page)",
    "lxmert": "visual_feats and visual_pos (an image's region features and boxes)",
}
#: Tables whose models take text, beside the kinds' (but the base models'). Every other table
#: but :data:`NEUTRAL_TABLES` maps models of other inputs: images, video, audio, time series...
TEXT_TABLES = (
    "MODEL_FOR_RETRIEVAL_MAPPING_NAMES",
    "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
    "MODEL_FOR_TABLE_QUESTION_ANSWERING_MAPPING_NAMES",
    "MODEL_FOR_NEXT_SENTENCE_PREDICTION_MAPPING_NAMES",
)
#: Tables that say nothing of a model's inputs (BERT's and wav2vec2's pretraining heads alike).
NEUTRAL_TABLES = ("MODEL_MAPPING_NAMES", "MODEL_FOR_PRETRAINING_MAPPING_NAMES")


def transformers_dir() -> Path:
    """The installed transformers package's folder (found, not imported)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("transformers is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def transformers_version() -> str:
    try:
        return version("transformers")
    except PackageNotFoundError:
        return "not installed"


def read_tables(source: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """Every ``NAME = OrderedDict([...])`` of a module's source: model type -> class names."""
    tables: dict[str, dict[str, tuple[str, ...]]] = {}
    for node in ast.parse(source).body:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "OrderedDict"
            and len(node.value.args) == 1
            and isinstance(node.value.args[0], ast.List)
        ):
            continue
        table: dict[str, tuple[str, ...]] = {}
        for item in node.value.args[0].elts:
            if isinstance(item, ast.Starred):  # *list(OTHER.items())
                for name in ast.walk(item.value):
                    if isinstance(name, ast.Name) and name.id in tables:
                        table.update(tables[name.id])
                continue
            try:
                model_type, names = ast.literal_eval(item)
            except ValueError:
                continue
            table[model_type] = (names,) if isinstance(names, str) else tuple(names)
        tables[node.targets[0].id] = table
    return tables


@functools.cache
def tables() -> dict[str, dict[str, tuple[str, ...]]]:
    """The installed transformers' auto mapping tables, by name (empty without transformers)."""
    try:
        path = transformers_dir() / MODULE
    except ModuleNotFoundError:
        return {}
    return read_tables(path.read_text(encoding="utf-8"))


def table(kind: str) -> dict[str, tuple[str, ...]]:
    """One kind's table: model type -> its class names."""
    return tables().get(KINDS[kind], {})


@functools.cache
def _kinds_by_class() -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for kind in KINDS:
        for names in table(kind).values():
            for name in names:
                if kind not in found.setdefault(name, []):
                    found[name].append(kind)
    return {name: tuple(kinds) for name, kinds in found.items()}


@functools.cache
def _tables_by_class() -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for name, entries in tables().items():
        for names in entries.values():
            for cls in names:
                if name not in found.setdefault(cls, []):
                    found[cls].append(name)
    return {cls: tuple(names) for cls, names in found.items()}


def kinds_of(architecture: str, config: Mapping[str, Any], task: str | None = None) -> list[str]:
    """The kinds whose table maps this class, the one the entry's task asks for first, then in
    :data:`KINDS` order. A base model of an encoder-decoder config (``T5Model``) whose model type
    has a seq2seq LM is that seq2seq LM first: its runner loads the model type's LM class."""
    kinds = list(_kinds_by_class().get(architecture, ()))
    model_type = config.get("model_type")
    if (
        kinds
        and kinds[0] in ("text_encoding", "base")
        and config.get("is_encoder_decoder")
        and model_type in table("seq2seq_lm")
    ):
        kinds.insert(0, "seq2seq_lm")
    wanted = TASK_KINDS.get(task or "")
    if wanted in kinds:
        kinds.remove(wanted)
        kinds.insert(0, wanted)
    return kinds


def other_tables(architecture: str) -> tuple[str, ...]:
    """Every table of the installed transformers that maps this class (for an exclusion's
    reason: ``MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES``...)."""
    return _tables_by_class().get(architecture, ())


def _text_tables() -> set[str]:
    return {KINDS[k] for k in KINDS if k != "base"} | set(TEXT_TABLES)


def media_tables(model_type: str | None = None, architecture: str | None = None) -> list[str]:
    """The tables of inputs other than text (images, audio...) that map this model type or
    this class."""
    known = _text_tables() | set(NEUTRAL_TABLES)
    return [
        name
        for name, entries in tables().items()
        if name not in known
        and (model_type in entries or any(architecture in c for c in entries.values()))
    ]


def not_text(architecture: str, config: Mapping[str, Any], task: str | None = None) -> str:
    """Why no runner may take this class although a kind maps it ('' when one may), decided by
    transformers' own tables but for the first reason:

    - a model that needs another input beside the text (:data:`OTHER_INPUTS`: Bros's boxes);
    - a speech-to-text model (:data:`SPEECH_SEQ2SEQ` maps it): its encoder takes audio
      features, which no runner feeds (``VoxtralForConditionalGeneration``, also a seq2seq LM);
    - a base model (its first kind is ``base``) whose inputs are not text: a table of other
      inputs maps the class itself (``CLIPModel``: zero-shot image classification), or its
      model type is a speech-to-text one (``WhisperModel``), or only tables of other inputs
      map its model type (``ViTModel``, ``Wav2Vec2Model``)."""
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in OTHER_INPUTS:
        return (
            f"{architecture} needs {OTHER_INPUTS[model_type]} beside the text, which no runner "
            "feeds"
        )
    if SPEECH_SEQ2SEQ in other_tables(architecture):
        return (
            f"{architecture} is a speech-to-text model ({SPEECH_SEQ2SEQ}): its encoder takes "
            "audio features, and no runner feeds audio (not a task of the card)"
        )
    kinds = kinds_of(architecture, config, task)
    if not kinds or kinds[0] != "base":
        return ""
    model_type = model_type if isinstance(model_type, str) else None
    if model_type is None:  # the model type whose base model it is
        model_type = next((t for t, c in table("base").items() if architecture in c), None)
    own = media_tables(architecture=architecture)
    typed = media_tables(model_type) if model_type else []
    texts = [n for n in _text_tables() if model_type in tables().get(n, {})]
    if own:
        why = f"transformers maps it by {', '.join(own)}"
    elif SPEECH_SEQ2SEQ in typed:
        why = f"its model type {model_type!r} is a speech-to-text one ({SPEECH_SEQ2SEQ})"
    elif typed and not texts:
        why = f"transformers maps its model type {model_type!r} only by {', '.join(typed)}"
    else:
        return ""
    return (
        f"{architecture} is a base model whose inputs are not text ({why}): not a task of the "
        "card, and no runner feeds it"
    )[:500]
