"""The offline tiny-model zoo: deterministic tiny Hugging Face checkpoints built on first use.

Every entry is a real ``transformers`` architecture with a small config (hidden size 64, two
layers, four heads; ``llama-2core`` is larger on purpose), random weights drawn from a fixed
per-model seed, and a real byte-level BPE tokenizer trained with the ``tokenizers`` library on the
English corpus embedded below (``llava`` also gets a processor: a PIL-backed CLIP image processor
and a chat template). The checkpoints exercise the whole pipeline (``from_pretrained``,
``torch.compile``, ``generate`` or a forward pass) without network access; in model lists they
are named ``zoo:<name>``.

Checkpoints are built into ``<cache_dir>/zoo/v<ZOO_VERSION>-transformers-<version>/<name>`` by
:func:`ensure_built` and never committed. With the same library versions every file is
byte-identical on every build. Byte-level BPE is the only tokenizer model used because WordPiece
and Unigram training in ``tokenizers`` is not reproducible (same vocabulary, different ids).

This module is imported during test collection, so it imports nothing heavy at module level:
``torch``, ``transformers`` and ``tokenizers`` are imported inside the functions that build.
Building ``llava`` (and running its image processor) needs Pillow: ``transformers`` has no image
processor without it, and its torchvision-backed ones are not used here (see ``_llava_processor``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedConfig

__all__ = ["ZOO_VERSION", "ZooModel", "build", "ensure_built", "get", "names", "zoo_root"]

ZOO_VERSION = "1"
"""Bump whenever a model definition (corpus, tokenizer, config, seed, sharpening) changes."""

_LOG = logging.getLogger(__name__)

# How long ensure_built waits for another process that is building the same model.
_LOCK_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class ZooModel:
    """One tiny model of the zoo; its model id in model lists is ``f"zoo:{name}"``."""

    name: str
    """Short name, e.g. ``"llama"``."""
    architecture: str
    """The ``transformers`` class named in config.json ``architectures``."""
    task: str
    """The Hub pipeline tag, e.g. ``"text-generation"``."""
    description: str
    """One line for ``neuronsupport zoo list``."""


_MODELS: tuple[ZooModel, ...] = (
    ZooModel(
        "llama",
        "LlamaForCausalLM",
        "text-generation",
        "tiny Llama decoder (RMSNorm, RoPE, GQA, SwiGLU); <s> bos, </s> eos, no chat template",
    ),
    ZooModel(
        "qwen3",
        "Qwen3ForCausalLM",
        "text-generation",
        "tiny Qwen3 decoder (q/k norm, GQA) with a ChatML chat template; eos <|im_end|>",
    ),
    ZooModel(
        "gpt2",
        "GPT2LMHeadModel",
        "text-generation",
        "tiny GPT-2 decoder (learned positions, Conv1D); <|endoftext|> bos/eos",
    ),
    ZooModel(
        "bert-mlm",
        "BertForMaskedLM",
        "fill-mask",
        "tiny BERT masked LM; [CLS] A [SEP] B [SEP] with token_type_ids, [MASK] absorbs its space",
    ),
    ZooModel(
        "roberta-qa",
        "RobertaForQuestionAnswering",
        "question-answering",
        "tiny RoBERTa extractive QA head; <s> A </s></s> B </s>",
    ),
    ZooModel(
        "deberta-v2-ner",
        "DebertaV2ForTokenClassification",
        "token-classification",
        "tiny DeBERTa-v2 (relative attention) NER head: O, B-PER, I-PER, B-LOC, I-LOC",
    ),
    ZooModel(
        "distilbert-sst",
        "DistilBertForSequenceClassification",
        "text-classification",
        "tiny DistilBERT sentiment head: NEGATIVE, NEUTRAL, POSITIVE",
    ),
    ZooModel(
        "bert-reranker",
        "BertForSequenceClassification",
        "text-ranking",
        "tiny BERT cross-encoder: one relevance score for a (query, passage) pair",
    ),
    ZooModel(
        "bert",
        "BertModel",
        "feature-extraction",
        "tiny BERT encoder without a head (last hidden state and pooler output)",
    ),
    ZooModel(
        "t5",
        "T5ForConditionalGeneration",
        "text2text-generation",
        "tiny T5 v1.1-style encoder-decoder (gated GELU, untied head); </s> eos, <pad> starts",
    ),
    ZooModel(
        "bart",
        "BartForConditionalGeneration",
        "summarization",
        "tiny BART encoder-decoder; <s> A </s>, decoding starts at </s> as in BART",
    ),
    ZooModel(
        "llava",
        "LlavaForConditionalGeneration",
        "image-text-to-text",
        "tiny LLaVA (CLIP vision tower 32px/8px patches, Llama text) with a processor and <image>",
    ),
    ZooModel(
        "mixtral",
        "MixtralForCausalLM",
        "text-generation",
        "tiny Mixtral mixture-of-experts decoder: 4 experts, top-2 routing",
    ),
    ZooModel(
        "llama-2core",
        "LlamaForCausalLM",
        "text-generation",
        "larger Llama (hidden 256, 4 layers, 8 heads), stored in bf16; splits over 2 cores",
    ),
)
_BY_NAME: dict[str, ZooModel] = {m.name: m for m in _MODELS}


def names() -> list[str]:
    """Return the names of all zoo models, in a fixed order."""
    return [m.name for m in _MODELS]


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


def zoo_root(cache_dir: Path) -> Path:
    """Return the directory that holds this zoo version's checkpoints under *cache_dir*.

    The path names both :data:`ZOO_VERSION` and the installed ``transformers`` version, because
    the files (and the random weights) depend on both.
    """
    from importlib.metadata import version

    return Path(cache_dir) / "zoo" / f"v{ZOO_VERSION}-transformers-{version('transformers')}"


def ensure_built(name: str, cache_dir: Path) -> Path:
    """Return the checkpoint directory of zoo model *name*, building it first if it is absent.

    The directory can be passed to ``from_pretrained`` of ``AutoConfig``, ``AutoTokenizer`` and
    the model classes. Safe when several processes (e.g. pytest-xdist workers) call it at once:
    the build runs under a :class:`filelock.FileLock` on ``<name>.lock`` beside the checkpoint,
    goes into a temporary sibling directory and is renamed into place, so a half-built directory
    is never visible at the returned path. Once built, a call only checks that the directory
    exists.
    """
    get(name)  # fail early, with the list of known names
    root = zoo_root(cache_dir)
    final = root / name
    if final.is_dir():
        return final

    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    _LOG.debug("waiting for the build lock of zoo model %s", name)
    with FileLock(str(root / f"{name}.lock"), timeout=_LOCK_TIMEOUT_S):
        if final.is_dir():  # another process built it while we waited for the lock
            return final
        # Only lock holders build, so leftovers of a build that crashed can be removed.
        for stale in root.glob(f".{name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
        try:
            _LOG.info("building zoo model %s into %s", name, final)
            build(name, tmp)
            tmp.chmod(0o755)  # mkdtemp creates it 0o700
            try:
                os.replace(tmp, final)  # atomic: the directory appears complete or not at all
            except OSError:
                # Only if a builder that ignores the lock (a filesystem where locks do not
                # work) got there first; its checkpoint is as good as ours.
                if not final.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def build(name: str, dest: Path) -> None:
    """Write the checkpoint files of zoo model *name* (config, weights, tokenizer) into *dest*.

    Models with a processor (``llava``) also get its files (``processor_config.json``,
    ``chat_template.jinja``). *dest* is created if needed. With the same library versions the
    files are byte-identical on every call. Global state touched on the way (torch's RNG and
    default dtype, the transformers progress bar and log level, ``TOKENIZERS_PARALLELISM``) is
    restored before returning.
    """
    spec = _SPECS[get(name).name]
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with _quiet_deterministic_build():
        tokenizer = _make_tokenizer(spec.family, spec.token_type_ids)
        if spec.make_processor is None:
            tokenizer.save_pretrained(str(dest))
        else:  # saves the tokenizer too (its config then names the processor class)
            spec.make_processor(tokenizer).save_pretrained(str(dest))
        config = spec.make_config(_family_ids(tokenizer, spec.family))
        special_ids = set(tokenizer.convert_tokens_to_ids(list(_FAMILY_SPECIALS[spec.family])))
        model = _make_model(name, config, special_ids)
        model.save_pretrained(str(dest))


# --------------------------------------------------------------------------------------------
# Corpus and tokenizers
# --------------------------------------------------------------------------------------------

# Plain English written for this zoo. The tokenizers are trained on it, so words of the test
# prompts must be frequent enough to become single tokens (" Berlin", " Wolfgang", " future").
_CORPUS = """\
The future of AI is a question that people ask at dinner tables, in classrooms and in the \
offices of large companies. Some say the future of AI is bright, others say it is uncertain, \
and most admit that nobody really knows. What is clear is that small models can be tested \
quickly, and that careful testing makes every system more reliable.

My name is Wolfgang and I live in Berlin. I work as an engineer at a small company near the \
river, and every morning I ride my bicycle along the water to the office. Berlin is a large \
city with many parks, old buildings, new buildings, museums, markets and quiet streets. When \
friends visit, I show them the old wall, the tower on the square and the long green park where \
children play football in the summer.

Where do I live? I live in Berlin, a city in Germany. Where does my sister live? She lives in \
Paris, and my brother lives in London. Our parents live in a small town in the mountains, where \
the winters are long and cold and the summers are short and warm. We meet there every year in \
December, when the snow covers the roofs and the lakes turn to ice.

Machine learning models learn patterns from data. A language model reads a sequence of tokens \
and predicts the next token, one step at a time. A classifier reads a sentence and decides \
whether it is positive, negative or neutral. A question answering model reads a question and a \
passage of text and points to the answer inside the passage. A named entity model marks the \
names of people, places and organizations in a sentence.

The weather today is cold and grey, but the forecast says that the sun will return tomorrow. \
In the spring the trees in the park turn green again, the birds come back from the south and \
people sit outside in the cafes. In the autumn the leaves turn red, yellow and brown, and the \
wind carries them across the streets and into the river.

A good test is small, fast and honest. It checks one thing, it fails for one reason, and when \
it fails it tells you what went wrong. Engineers write tests before they change the code, run \
them after every change, and keep them running on every machine. A compiler turns a program \
into instructions for the hardware; a good compiler makes the program faster without changing \
what it computes.

I love reading books about history, science and travel. My favourite book tells the story of a \
ship that sailed around the world, through storms and calm seas, to islands that no map had \
shown before. The captain kept a journal, and every evening he wrote down the wind, the stars, \
the fish they caught and the songs the sailors sang.

The market opens early on Saturday morning. Farmers bring apples, pears, potatoes, carrots, \
bread, cheese, eggs and honey, and the whole square smells of coffee and fresh bread. I buy \
vegetables for the week, flowers for the kitchen table and a warm pretzel for the walk home.

This movie was wonderful, and I would watch it again. This movie was terrible, and I want my \
money back. The food was fine, the service was slow, and the room was quiet. The concert was \
amazing, the music was loud and the crowd was happy. The book was boring and far too long.

Hello, how are you? I am fine, thank you, and you? Can you help me with a question? Of course, \
what would you like to know? Please tell me the way to the station. Go straight ahead, turn \
left at the bank, and the station is on your right, next to the old hotel.

Numbers and dates appear in every kind of text: 1, 2, 3, 10, 20, 100, 2024, the first of May, \
the 3rd of October, half past seven, twenty minutes, three hours, forty years. Symbols appear \
too: the price is $5.99, the score was 3:1, the file is called model.safetensors, and the \
address is example@example.com.

Every city has its own rhythm. In the early morning the bakers light their ovens, the buses \
start their routes and the first trains leave the central station. By noon the streets are \
full of workers looking for lunch, tourists looking at maps and students hurrying between \
lectures. In the evening the lights come on in the windows, the restaurants fill up and the \
theatres open their doors. Late at night only the taxis, the cleaners and a few musicians are \
still awake.

The history of computing is a history of people who wanted to calculate faster. Early \
machines used gears and levers, later machines used relays and vacuum tubes, and modern \
machines use billions of tiny transistors printed on silicon. Each generation was smaller, \
cheaper and more powerful than the last. Today a phone in your pocket is stronger than the \
computers that guided the first rockets to the moon.

Learning a new language takes patience. At first every sentence is a puzzle: you search for \
words, you forget the grammar, and you speak slowly. After a few months you begin to \
understand the radio, to read the newspaper and to dream in the new language. Teachers say \
that the secret is to practise a little every day, to listen carefully and to never be afraid \
of making mistakes.

Our garden is small but full of life. There are roses along the fence, tomatoes and beans in \
the beds, and an old cherry tree that gives shade in the afternoon. Bees visit the flowers, \
a family of sparrows lives under the roof, and sometimes a hedgehog crosses the lawn at \
night. My grandmother planted the cherry tree when she was young, and it still carries fruit \
every July.

Scientists study the ocean, the forests, the deserts and the ice at the poles. They measure \
the temperature of the water, count the animals, collect samples of soil and record the \
movement of glaciers. Their reports help governments plan for floods, storms and dry seasons, \
and they remind everyone that the health of the planet depends on the choices we make today.

The team met on Monday to plan the next release. Anna will update the documentation, Peter \
will fix the slow tests, and Maria will review the new features. Everyone agreed to keep the \
changes small, to measure the performance before and after, and to write down every decision \
so that new members can understand why the project looks the way it does.

A recipe for a simple soup: cut two onions, three carrots and a few potatoes into small \
pieces. Warm some oil in a large pot, add the onions and cook them until they are soft. Add \
the carrots, the potatoes and a litre of water, season with salt and pepper, and let the soup \
simmer for thirty minutes. Serve it hot with fresh bread and a little butter.

The train was late again, so we waited on the platform and watched the clouds. A man played \
the guitar, a child fed the pigeons, and two old friends argued about football. When the \
train finally arrived, it was crowded and warm, but the journey through the valley was \
beautiful: rivers, villages, vineyards and castles passed by the window like pictures in a \
book.

Good software is written for people as much as for machines. Clear names, short functions \
and honest comments help the next reader understand the intent. Version control records \
every change, reviews catch mistakes early, and automated builds make sure that the program \
still works on every supported platform. Simple designs are easier to test, to explain and to \
maintain.

Questions and answers: Who wrote the letter? The teacher wrote the letter. When did the \
meeting start? It started at nine. Why is the sky blue? Because the air scatters blue light \
more than red light. How many people live in the village? About two thousand. Which road \
leads to the harbour? The narrow road on the left, past the church and the lighthouse.
"""

_KEY_SENTENCES = (
    "The future of AI is",
    "My name is Wolfgang and I live in Berlin.",
    "Where do I live?",
    "My name is Wolfgang and I live in [MASK].",
    "My name is Sarah and I live in London.",
    "My name is Clara and I live in Paris.",
)
_KEY_REPEATS = 24
_VOCAB_SIZE = 1024
_MIN_FREQUENCY = 1
_MODEL_MAX_LENGTH = 512

# Special tokens of each tokenizer family, in id order (they take ids 0, 1, 2, ...).
_FAMILY_SPECIALS: dict[str, tuple[str, ...]] = {
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


def _corpus_lines() -> list[str]:
    """Return the training corpus: the paragraphs, then the key sentences many times."""
    paragraphs = [p.strip() for p in _CORPUS.split("\n\n") if p.strip()]
    return paragraphs + [s for _ in range(_KEY_REPEATS) for s in _KEY_SENTENCES]


def _train_bpe(family: str) -> Tokenizer:
    """Train the byte-level BPE ``tokenizers.Tokenizer`` of *family* (deterministic)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from tokenizers.trainers import BpeTrainer

    specials = _FAMILY_SPECIALS[family]
    unk = {
        "llama": "<unk>",
        "bert": "[UNK]",
        "roberta": "<unk>",
        "t5": "<unk>",
        "llava": "<unk>",
    }.get(family)
    tok = Tokenizer(models.BPE(unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        min_frequency=_MIN_FREQUENCY,
        show_progress=False,
        # Specials go through the trainer so that they take the first ids and count towards
        # vocab_size (adding them afterwards could push the vocabulary past it).
        special_tokens=[
            AddedToken(s, special=True, normalized=False, lstrip=s in _LSTRIP_SPECIALS)
            for s in specials
        ],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus_lines(), trainer=trainer)

    ids: dict[str, int] = {}
    for s in specials:
        token_id = tok.token_to_id(s)
        if token_id is None:  # pragma: no cover - the trainer always adds them
            raise RuntimeError(f"special token {s!r} missing after training")
        ids[s] = token_id
    # Decoders keep the raw offsets; encoders trim spaces off them (for QA / NER spans).
    byte_level = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=family in ("bert", "roberta")
    )
    if family in ("llama", "llava"):
        template = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", ids["<s>"])]
        )
        tok.post_processor = processors.Sequence([byte_level, template])
    elif family == "t5":  # T5 has no bos; every sequence ends with </s>
        template = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", ids["</s>"])]
        )
        tok.post_processor = processors.Sequence([byte_level, template])
    elif family == "bert":
        template = processors.TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0",
            pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
        )
        tok.post_processor = processors.Sequence([byte_level, template])
    elif family == "roberta":
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", ids["</s>"]), ("<s>", ids["<s>"]), trim_offsets=True, add_prefix_space=False
        )
    else:
        tok.post_processor = byte_level
    return tok


def _make_tokenizer(family: str, token_type_ids: bool) -> Any:
    """Return the trained tokenizer of *family* wrapped as a ``PreTrainedTokenizerFast``.

    *token_type_ids* says whether the model takes ``token_type_ids`` (BERT, DeBERTa) or not
    (decoders, RoBERTa, DistilBERT); it sets the tokenizer's ``model_input_names``.
    """
    import transformers
    from tokenizers import AddedToken

    # TokenizersBackend in transformers 5.x; the old name still imports. Untyped, hence Any.
    fast_tokenizer_cls: Any = transformers.PreTrainedTokenizerFast

    def special(s: str) -> AddedToken:
        return AddedToken(s, special=True, normalized=False, lstrip=s in _LSTRIP_SPECIALS)

    kwargs: dict[str, Any]
    if family == "llama":
        kwargs = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    elif family == "qwen":
        kwargs = {
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "extra_special_tokens": ["<|im_start|>"],
            "chat_template": _CHATML_TEMPLATE,
        }
    elif family == "gpt2":
        kwargs = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    elif family == "t5":
        kwargs = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    elif family == "llava":
        kwargs = {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
            # a named extra special token: tokenizer.image_token / image_token_id
            "extra_special_tokens": {"image_token": "<image>"},
        }
    elif family == "bert":
        kwargs = {
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "mask_token": special("[MASK]"),
        }
    else:
        kwargs = {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "sep_token": "</s>",
            "cls_token": "<s>",
            "pad_token": "<pad>",
            "mask_token": special("<mask>"),
        }
    decoder = family in ("llama", "qwen", "gpt2", "llava")
    input_names = ["input_ids", "token_type_ids", "attention_mask"]
    if not token_type_ids:
        input_names.remove("token_type_ids")
    return fast_tokenizer_cls(
        tokenizer_object=_train_bpe(family),
        model_max_length=_MODEL_MAX_LENGTH,
        padding_side="left" if decoder else "right",
        model_input_names=input_names,
        clean_up_tokenization_spaces=False,
        **kwargs,
    )


def _family_ids(tokenizer: Any, family: str) -> dict[str, Any]:
    """Return the config keyword arguments tied to the tokenizer: vocab size, special ids."""
    ids: dict[str, Any] = {"vocab_size": len(tokenizer)}
    for key in ("pad", "bos", "eos"):
        ids[f"{key}_token_id"] = getattr(tokenizer, f"{key}_token_id")
    if family == "qwen":  # Qwen3 checkpoints name <|endoftext|> as bos
        ids["bos_token_id"] = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    if family == "llava":
        ids["image_token_id"] = tokenizer.convert_tokens_to_ids("<image>")
    return ids


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------

_HIDDEN = 64
_LAYERS = 2
_HEADS = 4
_INTERMEDIATE = 128
_MAX_POSITIONS = 512

_NER_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
_SST_LABELS = ("NEGATIVE", "NEUTRAL", "POSITIVE")

# llava's vision tower: 32x32 images in 8x8 patches, i.e. 16 patch tokens (+ CLS, which the
# "default" feature selection drops), so one image is 16 <image> tokens in the prompt.
_IMAGE_SIZE = 32
_PATCH_SIZE = 8
_IMAGE_TOKENS = (_IMAGE_SIZE // _PATCH_SIZE) ** 2

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

# The llava-1.5 prompt format: "USER: <image>\n<text> ASSISTANT:". Images come first; the
# processor expands each <image> into _IMAGE_TOKENS of them.
_LLAVA_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- message['role'].upper() + ': ' }}"
    "{%- if message['content'] is string %}"
    "{{- message['content'] + ' ' }}"
    "{%- else %}"
    "{%- for item in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{- '<image>\\n' }}"
    "{%- endfor %}"
    "{%- for item in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{- item['text'] + ' ' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- 'ASSISTANT:' }}"
    "{%- endif %}"
)


@dataclass(frozen=True)
class _Spec:
    """How to build one zoo model (private: the public face is :class:`ZooModel`)."""

    family: str
    """Tokenizer family, a key of ``_FAMILY_SPECIALS``."""
    seed: int
    """``torch.manual_seed`` for the random weights (and the sharpening's permutation)."""
    make_config: Callable[[dict[str, Any]], PreTrainedConfig]
    """Config factory; gets the tokenizer-derived ``vocab_size`` and special token ids."""
    sharpen: Callable[[Any, set[int]], None]
    """Rewrites the output layer in place; gets the model and the special token ids."""
    token_type_ids: bool = False
    """Whether the tokenizer returns ``token_type_ids`` (only models with segment embeddings)."""
    dtype: str = "float32"
    """The dtype the weights are stored in, a ``torch`` attribute name (``config.json`` says it)."""
    make_processor: Callable[[Any], Any] | None = None
    """Processor factory (gets the tokenizer), for models that take more than text."""


def _labels(labels: tuple[str, ...]) -> dict[str, Any]:
    return {
        "id2label": dict(enumerate(labels)),
        "label2id": {label: i for i, label in enumerate(labels)},
    }


def _llama_config(ids: dict[str, Any]) -> PreTrainedConfig:
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


def _qwen3_config(ids: dict[str, Any]) -> PreTrainedConfig:
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


def _gpt2_config(ids: dict[str, Any]) -> PreTrainedConfig:
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


def _llama_2core_config(ids: dict[str, Any]) -> PreTrainedConfig:
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


def _mixtral_config(ids: dict[str, Any]) -> PreTrainedConfig:
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


def _t5_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import T5Config

    # Not constructor parameters of T5Config, but read from the keyword arguments.
    v1_1_style: dict[str, Any] = {
        # T5 v1.1 / FLAN-T5: the decoder output is not rescaled before the head, which has its
        # own weight (transformers 5 reads this as scale_decoder_outputs=False, see _untie_head).
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


def _bart_config(ids: dict[str, Any]) -> PreTrainedConfig:
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
        # Untied, so that the head can be sharpened (see _share_bart_embeddings).
        tie_word_embeddings=False,
        decoder_start_token_id=ids["eos_token_id"],
        # BART's default forces </s> as the last token allowed by max_length; without it greedy
        # decoding is pure argmax, as for every other zoo decoder.
        forced_eos_token_id=None,
        **ids,
    )


def _llava_config(ids: dict[str, Any]) -> PreTrainedConfig:
    from transformers import CLIPVisionConfig, LlavaConfig

    ids = dict(ids)
    image_token_id = ids.pop("image_token_id")
    vision = CLIPVisionConfig(
        hidden_size=_HIDDEN,
        intermediate_size=_INTERMEDIATE,
        num_hidden_layers=_LAYERS,
        num_attention_heads=_HEADS,
        image_size=_IMAGE_SIZE,
        patch_size=_PATCH_SIZE,
        projection_dim=_HIDDEN,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=_llama_config(ids),
        image_token_index=image_token_id,
        image_seq_length=_IMAGE_TOKENS,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        tie_word_embeddings=False,
    )


def _llava_processor(tokenizer: Any) -> Any:
    """Return llava's ``LlavaProcessor``: a PIL-backed CLIP image processor and the tokenizer.

    ``CLIPImageProcessorPil`` rather than ``CLIPImageProcessor``: in transformers 5 the latter is
    the torchvision backend, and torchvision is not a dependency (the PyPI build does not import
    beside a CPU torch wheel of another release). The saved ``image_processor_type`` names the
    PIL class; ``AutoProcessor`` takes the backend from what is installed (torchvision if it
    imports, else PIL), and the two give the same pixel values for 32x32 inputs (no resampling).
    """
    from transformers import CLIPImageProcessorPil, LlavaProcessor

    processor_cls: Any = LlavaProcessor  # untyped
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": _IMAGE_SIZE},
        crop_size={"height": _IMAGE_SIZE, "width": _IMAGE_SIZE},
    )
    return processor_cls(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=_PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's CLS token
        chat_template=_LLAVA_TEMPLATE,
    )


def _bert_config(ids: dict[str, Any], **extra: Any) -> PreTrainedConfig:
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


def _roberta_qa_config(ids: dict[str, Any]) -> PreTrainedConfig:
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


def _deberta_v2_ner_config(ids: dict[str, Any]) -> PreTrainedConfig:
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


def _distilbert_sst_config(ids: dict[str, Any]) -> PreTrainedConfig:
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


# Sharpening. Random tiny models have flat output distributions: top-1/top-2 logit gaps of ~1e-3
# where bf16 changes logits by ~5e-3, so bf16 and fp32 greedy decoding part ways at a near-tie
# (measured before sharpening, 64 prompts x 32 greedy tokens: bf16 == fp32 for only 37-45 of 64
# sequences). Scaling the output layer alone does not fix that: logits and bf16 error scale
# together (a 50x lm_head gives logit std 8 and still 5 of 8 prompts diverge). What separates
# top-1 from top-2 is a readout *aligned* with the hidden state:
#
# - decoders: lm_head row j is the unit-norm input embedding of token pred(j), times
#   _READOUT_SCALE, where pred is a random permutation of the non-special tokens (drawn from
#   the model's seed) and the rows of special tokens are zero. The residual stream is dominated
#   by the current token's embedding, so the logit of its successor is far above the others
#   (logit std ~6, top-1/top-2 gap >= 3.9 over 64 prompts x 32 greedy steps; bf16 == fp32
#   for 64/64). GPT-2's learned position embeddings are as large as its token embeddings and blur
#   the readout, so its token embeddings are doubled first (embedding_gain). Trade-off, by
#   design: the greedy token is always the fixed successor of the previous token. The layers
#   still move every logit (so logit comparisons see attention and KV-cache bugs), but token
#   comparisons do not; weaker embeddings bring context into the argmax and the near-ties back
#   (measured: a 0.4x gain lets context pick 35% of tokens and 12 of 48 prompts diverge in bf16).
#   The model never emits a special token (generation always runs to max_new_tokens), and
#   lm_head is untied (tie_word_embeddings=False) so from_pretrained reproduces it exactly.
#   mixtral and llava (its Llama part) take the readout as it is (gap >= 9.3 and >= 16.0 over
#   64 prompts). llama-2core's wider layers (an MLP of 4 x 256) outweigh its embeddings, and
#   T5's layers are scaled to its unit-variance embeddings: at gain 1 the gaps were 0.008 and
#   0.04 (8 and 10 of 12 prompts bf16 == fp32), so their embeddings get gains of 4 and 2
#   (gap >= 14.9 and >= 4.5 over 64 prompts; bf16 == fp32 for 64/64, as for every decoder).
# - encoder-decoders (t5, bart) get the same readout in the decoder, plus a successor for the
#   decoder start token (from_start); their head is untied first (see _untie_head and
#   _share_bart_embeddings); bart needs no gain (gap >= 8.2 over 64 prompts). The greedy tokens
#   then depend on the start token only, not on the encoder input: the encoder shows in the
#   logits (cross-attention), not in the tokens. Likewise llava's image.
# - encoders: the MLM / QA / token-classification output weights are multiplied by a constant
#   chosen so that logits have a standard deviation of about 6-8 on ordinary sentences (for
#   bert-mlm the decoder is untied from the word embeddings first); these heads read each
#   token's own state, which differs from token to token.
# - sequence classifiers read the first token only, and with initializer_range=0.02 an
#   attention block has a gain of ~0.02^2 * 64 = 0.03: the first token's state hardly depends
#   on the sentence, every input gets nearly the same logits, and a near-tie between two labels
#   (measured: NEUTRAL 0.49 vs POSITIVE 0.47) is then a near-tie for every input. So the
#   attention output projections are also multiplied by _ATTENTION_GAIN (a gain of ~0.8, as in
#   trained models) before the classifier is scaled.
_READOUT_SCALE = 6.0
_ATTENTION_GAIN = 30.0


def _successor_readout(
    embedding_gain: float = 1.0, *, from_start: bool = False
) -> Callable[[Any, set[int]], None]:
    """Return a sharpener making the LM head predict a fixed successor of the current token.

    *embedding_gain* multiplies the input embeddings first (see the comment above). With
    *from_start* (encoder-decoders), the first decoding step reads the decoder start token, a
    special token that is nobody's predecessor: the head row of one random regular token also
    gets the start token's unit embedding, so that step has a clear winner too.
    """

    def sharpen(model: Any, special_ids: set[int]) -> None:
        import torch

        embeddings = model.get_input_embeddings().weight
        head = model.get_output_embeddings()
        if head is None or head.weight is embeddings:  # pragma: no cover - config error
            raise RuntimeError(f"{type(model).__name__}: lm_head must be untied")
        vocab = embeddings.shape[0]
        regular = torch.tensor([i for i in range(vocab) if i not in special_ids])
        # pred[k] is the token whose successor is regular[k]
        pred = regular[torch.randperm(len(regular))]
        with torch.no_grad():
            embeddings.mul_(embedding_gain)
            rows = embeddings[pred]
            rows = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-6)
            head.weight.zero_()
            head.weight[regular] = rows * _READOUT_SCALE
            if from_start:
                start = model.config.decoder_start_token_id
                first = regular[torch.randint(len(regular), ())]
                row = embeddings[start] / embeddings[start].norm().clamp_min(1e-6)
                head.weight[first] += row * _READOUT_SCALE

    return sharpen


def _untie_head(model: Any, special_ids: set[int]) -> None:
    """Give the LM head a weight of its own (T5: transformers 5 ties it whatever the config says).

    A checkpoint that stores both ``shared.weight`` and a different ``lm_head.weight`` loads
    untied, as FLAN-T5 checkpoints do (transformers logs that it will not tie them).
    """
    import torch

    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.detach().clone())


def _share_bart_embeddings(model: Any, special_ids: set[int]) -> None:
    """Copy BART's shared embedding into the encoder's and decoder's own copies.

    With ``tie_word_embeddings=False`` (needed for an untied head) transformers 5 unties the
    encoder and decoder embeddings from ``shared`` too; equal values keep BART's one
    vocabulary embedding, and the checkpoint loads without any tying or warning.
    """
    import torch

    shared = model.get_input_embeddings().weight
    with torch.no_grad():
        for stack in (model.get_encoder(), model.get_decoder()):
            stack.embed_tokens.weight.copy_(shared)


def _chain(*steps: Callable[[Any, set[int]], None]) -> Callable[[Any, set[int]], None]:
    """Return a sharpener running *steps* in order."""

    def sharpen(model: Any, special_ids: set[int]) -> None:
        for step in steps:
            step(model, special_ids)

    return sharpen


def _scale(*factors: tuple[str, float]) -> Callable[[Any, set[int]], None]:
    """Return a sharpener multiplying the weight of each submodule matching a pattern by a factor.

    Patterns are ``fnmatch`` patterns over ``named_modules()`` names; each must match.
    """

    def sharpen(model: Any, special_ids: set[int]) -> None:
        import torch

        modules = dict(model.named_modules())
        for pattern, factor in factors:
            matched = [m for name, m in modules.items() if fnmatch.fnmatchcase(name, pattern)]
            if not matched:  # pragma: no cover - spec error
                raise RuntimeError(f"no submodule of {type(model).__name__} matches {pattern!r}")
            with torch.no_grad():
                for module in matched:
                    module.weight.mul_(factor)

    return sharpen


def _no_sharpening(model: Any, special_ids: set[int]) -> None:
    """Leave the model as initialised (feature extraction has no output layer to sharpen)."""


_SPECS: dict[str, _Spec] = {
    "llama": _Spec("llama", 1001, _llama_config, _successor_readout()),
    "qwen3": _Spec("qwen", 1002, _qwen3_config, _successor_readout()),
    "gpt2": _Spec("gpt2", 1003, _gpt2_config, _successor_readout(embedding_gain=2.0)),
    "bert-mlm": _Spec(
        "bert",
        1004,
        lambda ids: _bert_config(ids, tie_word_embeddings=False),
        _scale(("cls.predictions.decoder", 50.0)),
        token_type_ids=True,
    ),
    "roberta-qa": _Spec("roberta", 1005, _roberta_qa_config, _scale(("qa_outputs", 50.0))),
    "deberta-v2-ner": _Spec(
        "bert", 1006, _deberta_v2_ner_config, _scale(("classifier", 50.0)), token_type_ids=True
    ),
    "distilbert-sst": _Spec(
        "bert",
        1007,
        _distilbert_sst_config,
        _scale(
            ("distilbert.transformer.layer.*.attention.out_lin", _ATTENTION_GAIN),
            ("classifier", 800.0),
        ),
    ),
    "bert-reranker": _Spec(
        "bert",
        1008,
        lambda ids: _bert_config(ids, num_labels=1),
        _scale(
            ("bert.encoder.layer.*.attention.output.dense", _ATTENTION_GAIN),
            ("classifier", 1000.0),
        ),
        token_type_ids=True,
    ),
    "bert": _Spec("bert", 1009, _bert_config, _no_sharpening, token_type_ids=True),
    "t5": _Spec(
        "t5",
        1010,
        _t5_config,
        _chain(_untie_head, _successor_readout(embedding_gain=2.0, from_start=True)),
    ),
    "bart": _Spec(
        "roberta",
        1011,
        _bart_config,
        _chain(_successor_readout(from_start=True), _share_bart_embeddings),
    ),
    "llava": _Spec(
        "llava", 1012, _llava_config, _successor_readout(), make_processor=_llava_processor
    ),
    "mixtral": _Spec("llama", 1013, _mixtral_config, _successor_readout()),
    "llama-2core": _Spec(
        "llama",
        1014,
        _llama_2core_config,
        _successor_readout(embedding_gain=4.0),
        dtype="bfloat16",
    ),
}


def _make_model(name: str, config: PreTrainedConfig, special_ids: set[int]) -> Any:
    """Instantiate zoo model *name* with seeded random weights and a sharpened output layer."""
    import torch
    import transformers

    spec = _SPECS[name]
    cls = getattr(transformers, get(name).architecture)
    torch.manual_seed(spec.seed)
    model = cls(config)
    model.eval()
    spec.sharpen(model, special_ids)
    if spec.dtype != "float32":
        model.to(getattr(torch, spec.dtype))
    return model


@contextlib.contextmanager
def _quiet_deterministic_build() -> Iterator[None]:
    """Make a build deterministic and quiet, restoring the global state touched afterwards.

    Forks torch's CPU RNG (the per-model seed must not leak into the caller), pins the default
    dtype to float32, turns off ``tokenizers`` parallelism (no fork warning later, and a
    single-threaded trainer) and silences transformers' progress bars and info logs.
    """
    import torch
    from transformers.utils import logging as transformers_logging

    hf_logging: Any = transformers_logging  # untyped module

    bar_was_enabled = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    dtype = torch.get_default_dtype()
    parallelism = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_default_dtype(dtype)
        hf_logging.set_verbosity(verbosity)
        if bar_was_enabled:
            hf_logging.enable_progress_bar()
        if parallelism is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = parallelism
