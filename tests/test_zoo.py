"""Tests of the offline tiny-model zoo (:mod:`pytest_neuronsupport.zoo`): real builds, no mocks."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import zoo

EXPECTED = {
    "llama": ("LlamaForCausalLM", "text-generation"),
    "qwen3": ("Qwen3ForCausalLM", "text-generation"),
    "gpt2": ("GPT2LMHeadModel", "text-generation"),
    "bert-mlm": ("BertForMaskedLM", "fill-mask"),
    "roberta-qa": ("RobertaForQuestionAnswering", "question-answering"),
    "deberta-v2-ner": ("DebertaV2ForTokenClassification", "token-classification"),
    "distilbert-sst": ("DistilBertForSequenceClassification", "text-classification"),
    "bert-reranker": ("BertForSequenceClassification", "text-ranking"),
    "bert": ("BertModel", "feature-extraction"),
    "t5": ("T5ForConditionalGeneration", "text2text-generation"),
    "bart": ("BartForConditionalGeneration", "summarization"),
    "llava": ("LlavaForConditionalGeneration", "image-text-to-text"),
    "mixtral": ("MixtralForCausalLM", "text-generation"),
    "llama-2core": ("LlamaForCausalLM", "text-generation"),
}
DECODERS = ["llama", "qwen3", "gpt2", "mixtral", "llama-2core"]
SEQ2SEQ = ["t5", "bart"]
ENCODERS = [
    "bert-mlm",
    "roberta-qa",
    "deberta-v2-ner",
    "distilbert-sst",
    "bert-reranker",
    "bert",
]
# Checkpoint size limits (all files); the default covers the hidden-size-64 models.
SIZE_LIMITS = {"bart": 2_500_000, "llama-2core": 10_000_000}
# llama-2core's bf16 weights (sum of numel * 2): 4,458,752 parameters, 8,917,504 bytes.
TWO_CORE_BF16_BYTES = (8_000_000, 9_500_000)
# The smallest top-1/top-2 logit gap accepted over 32 greedy steps of the newer decoders
# (measured over 64 prompts: >= 4.5), far above bf16 logit noise.
MIN_GAP = 1.0

PROMPT = "The future of AI is"
SENTENCE = "My name is Wolfgang and I live in Berlin."
MASKED = "My name is Wolfgang and I live in [MASK]."
QUESTION = "Where do I live?"


def _hashes(directory: Path) -> dict[str, str]:
    """Return sha256 of every file under *directory*, keyed by relative path."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def _subprocess_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="session")
def zoo_built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory with every zoo model built once for the session."""
    cache = tmp_path_factory.mktemp("zoo-test-cache")
    for name in zoo.names():
        zoo.ensure_built(name, cache)
    return cache


def _load(name: str, cache: Path, dtype: Any = None) -> tuple[Any, Any, Any]:
    """Load config, tokenizer and model of *name* the way a user would (offline)."""
    import transformers

    path = zoo.ensure_built(name, cache)
    config = transformers.AutoConfig.from_pretrained(path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model_cls = getattr(transformers, config.architectures[0])
    kwargs = {} if dtype is None else {"dtype": dtype}
    model = model_cls.from_pretrained(path, **kwargs).eval()
    return config, tokenizer, model


# --- registry -----------------------------------------------------------------------------


def test_names_and_metadata() -> None:
    assert zoo.names() == list(EXPECTED)
    for name, (architecture, task) in EXPECTED.items():
        model = zoo.get(name)
        assert (model.name, model.architecture, model.task) == (name, architecture, task)
        assert model.description and "\n" not in model.description


def test_unknown_name_lists_known_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'nope'") as excinfo:
        zoo.get("nope")
    for name in zoo.names():
        assert name in str(excinfo.value)
    with pytest.raises(ValueError, match="unknown zoo model"):
        zoo.ensure_built("zoo:llama", tmp_path)
    assert not (tmp_path / "zoo").exists()


def test_zoo_root_names_versions(tmp_path: Path) -> None:
    import transformers

    expected = f"v{zoo.ZOO_VERSION}-transformers-{transformers.__version__}"
    assert zoo.zoo_root(tmp_path) == tmp_path / "zoo" / expected


def test_import_does_not_import_heavy_modules() -> None:
    code = (
        "import json, sys; import pytest_neuronsupport.zoo; "
        "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'tokenizers', "
        "'safetensors', 'filelock') if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_subprocess_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == []


# --- building -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", zoo.names())
def test_builds_are_byte_identical(name: str, tmp_path: Path, zoo_built: Path) -> None:
    first, second = tmp_path / "a" / name, tmp_path / "b" / name
    zoo.build(name, first)
    zoo.build(name, second)
    hashes = _hashes(first)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(hashes), name
    if name == "llava":
        assert {"processor_config.json", "chat_template.jinja"} <= set(hashes)
    assert hashes == _hashes(second), name
    assert hashes == _hashes(zoo.zoo_root(zoo_built) / name), name
    size = sum((first / f).stat().st_size for f in hashes)
    assert size < SIZE_LIMITS.get(name, 2_000_000), (name, size)


def test_build_restores_global_state(tmp_path: Path) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    before = (
        torch.random.get_rng_state(),
        torch.get_default_dtype(),
        hf_logging.is_progress_bar_enabled(),
        hf_logging.get_verbosity(),
        os.environ.get("TOKENIZERS_PARALLELISM"),
    )
    zoo.build("gpt2", tmp_path / "gpt2")
    after = (
        torch.random.get_rng_state(),
        torch.get_default_dtype(),
        hf_logging.is_progress_bar_enabled(),
        hf_logging.get_verbosity(),
        os.environ.get("TOKENIZERS_PARALLELISM"),
    )
    assert torch.equal(before[0], after[0])
    assert before[1:] == after[1:]


_RACER = textwrap.dedent(
    """
    import logging, sys
    from pathlib import Path
    from pytest_neuronsupport import zoo

    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(name)s %(message)s")
    print("ready", flush=True)
    sys.stdin.readline()  # start line: the parent releases all racers at once
    print(zoo.ensure_built("gpt2", Path(sys.argv[1])), flush=True)
    """
)


def test_ensure_built_concurrently(tmp_path: Path, zoo_built: Path) -> None:
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(tmp_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_subprocess_env(),
        )
        for _ in range(3)
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready"
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()

        final = zoo.zoo_root(tmp_path) / "gpt2"
        reference = _hashes(zoo.zoo_root(zoo_built) / "gpt2")
        # The first moment the directory is visible, it is already complete.
        deadline = time.monotonic() + 120
        while not final.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert sorted(p.name for p in final.iterdir()) == sorted(reference)

        results = [racer.communicate(timeout=120) for racer in racers]
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.communicate()
    assert [racer.returncode for racer in racers] == [0, 0, 0], results
    assert {stdout.strip() for stdout, _ in results} == {str(final)}
    # All three found no checkpoint and queued for the lock; exactly one of them built.
    waits = sum(
        stderr.count("waiting for the build lock of zoo model gpt2") for _, stderr in results
    )
    builds = sum(stderr.count("building zoo model gpt2") for _, stderr in results)
    assert (waits, builds) == (3, 1), results
    # Built in another process, byte-identical to this session's build.
    assert _hashes(final) == reference
    assert [p.name for p in final.parent.iterdir() if p.name.startswith(".")] == []


def test_ensure_built_again_does_not_rebuild(
    zoo_built: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = zoo.zoo_root(zoo_built) / "llama"
    stamps = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in path.iterdir()}
    caplog.set_level(logging.INFO, logger=zoo.__name__)
    assert zoo.ensure_built("llama", zoo_built) == path
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in path.iterdir()} == stamps
    assert "building" not in caplog.text


# --- loading and running ------------------------------------------------------------------


@pytest.mark.parametrize("name", zoo.names())
def test_config_and_tokenizer(name: str, zoo_built: Path) -> None:
    import transformers

    path = zoo.ensure_built(name, zoo_built)
    config = transformers.AutoConfig.from_pretrained(path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    assert config.architectures == [zoo.get(name).architecture]
    # The generic backend, not a model-specific class rebuilding the tokenizer.
    assert type(tokenizer).__name__ == "TokenizersBackend"
    text_config = config.get_text_config()  # llava: the Llama part; the config itself elsewhere
    assert text_config.vocab_size == len(tokenizer)
    assert 900 <= len(tokenizer) <= 1100
    hidden = 256 if name == "llama-2core" else 64
    assert (
        text_config.hidden_size == hidden
        if hasattr(text_config, "hidden_size")
        else text_config.dim == hidden
    )
    if name == "gpt2":
        assert config.n_positions >= 256
    elif name != "t5":  # T5 has relative positions only
        assert text_config.max_position_embeddings >= 256
    assert tokenizer.model_max_length >= 256
    # Every id decodes.
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    assert None not in tokens and len(set(tokens)) == len(tokens)
    assert all(
        isinstance(t, str) for t in tokenizer.batch_decode([[i] for i in range(len(tokens))])
    )
    for key in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, key) is not None:
            assert getattr(text_config, key) == getattr(tokenizer, key), key
    # Test words are single tokens.
    for word in (" Berlin", " Wolfgang", " future", " live"):
        assert len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1, word


@pytest.mark.parametrize("name", zoo.names())
def test_from_pretrained_reproduces_checkpoint(name: str, zoo_built: Path, tmp_path: Path) -> None:
    """Nothing is re-initialised or re-tied on load: the sharpened weights come back exactly."""
    import torch
    import transformers
    from safetensors.torch import load_file

    path = zoo.ensure_built(name, zoo_built)
    model_cls = getattr(transformers, zoo.get(name).architecture)
    model, info = model_cls.from_pretrained(path, output_loading_info=True)
    assert {key: value for key, value in info.items() if value} == {}
    stored = load_file(str(path / "model.safetensors"))
    # Saved again, the loaded model writes the same tensors under the same names. (Files keep the
    # Hub's key layout, which transformers converts on load and back on save: llava's older
    # names, mixtral's experts one tensor each, fused into gate_up_proj / down_proj in memory.)
    model.save_pretrained(str(tmp_path))
    resaved = load_file(str(tmp_path / "model.safetensors"))
    assert set(resaved) == set(stored)
    assert [key for key in stored if not torch.equal(stored[key], resaved[key])] == []
    if name in ("llava", "mixtral"):
        return
    loaded = model.state_dict()
    # A module's key missing from the file is tied to one in it (t5: the encoder and decoder
    # embeddings are the shared one); the sharpened, untied heads are stored and loaded as such.
    tied = {key: model.all_tied_weights_keys.get(key) for key in set(loaded) - set(stored)}
    assert {key: source for key, source in tied.items() if source not in stored} == {}
    assert set(stored) <= set(loaded)
    assert [key for key in stored if not torch.equal(stored[key], loaded[key])] == []
    param = model.get_parameter
    assert [key for key, source in tied.items() if param(key) is not param(source)] == []


@pytest.mark.parametrize("name", DECODERS)
def test_decoder_generates(name: str, zoo_built: Path) -> None:
    import torch

    _, tokenizer, model = _load(name, zoo_built, dtype=torch.float32)
    assert tokenizer.eos_token is not None
    if name == "qwen3":
        assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=False
        )
        assert text == f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n"
        inputs = tokenizer(text, return_tensors="pt")
        chat = tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPT}], add_generation_prompt=True
        )
        assert chat["input_ids"] == inputs["input_ids"][0].tolist()
        assert "<|im_start|>" in tokenizer.all_special_tokens
    else:
        assert tokenizer.chat_template is None
        inputs = tokenizer(PROMPT, return_tensors="pt")
    ids = inputs["input_ids"][0].tolist()
    pad_id = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    if name == "llama":
        assert ids[0] == tokenizer.bos_token_id == tokenizer.convert_tokens_to_ids("<s>")
        assert tokenizer.eos_token == "</s>" and tokenizer.unk_token == "<unk>"
    if name == "gpt2":
        assert tokenizer.bos_token == tokenizer.eos_token == "<|endoftext|>"
        assert tokenizer.bos_token_id not in ids
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=32,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=pad_id,
        )
    new = out.sequences[0, len(ids) :].tolist()
    # The sharpened head never predicts a special token, so generation runs to the limit.
    assert len(new) == 32
    assert isinstance(tokenizer.decode(new), str)
    scores = torch.stack(out.scores)[:, 0]
    top2 = scores.topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).min() > 0.1  # far above bf16 logit noise

    _, _, bf16 = _load(name, zoo_built, dtype=torch.bfloat16)
    with torch.no_grad():
        out16 = bf16.generate(
            **inputs,
            max_new_tokens=32,
            do_sample=False,
            pad_token_id=pad_id,
        )
    assert out16[0].tolist() == out.sequences[0].tolist()


def _encode(name: str, tokenizer: Any) -> Any:
    kwargs: dict[str, Any] = {"padding": "max_length", "max_length": 128, "return_tensors": "pt"}
    if name == "roberta-qa":
        return tokenizer(QUESTION, SENTENCE, **kwargs)
    if name == "bert-reranker":
        return tokenizer(QUESTION, SENTENCE, **kwargs)
    if name == "bert-mlm":
        return tokenizer(MASKED, **kwargs)
    return tokenizer(SENTENCE, **kwargs)


@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_forward(name: str, zoo_built: Path) -> None:
    import torch

    _, tokenizer, model = _load(name, zoo_built)
    inputs = _encode(name, tokenizer)
    assert inputs["input_ids"].shape == (1, 128)
    assert inputs["attention_mask"].sum() < 128
    has_types = name in ("bert-mlm", "deberta-v2-ner", "bert-reranker", "bert")
    assert ("token_type_ids" in inputs) == has_types
    with torch.no_grad():
        out = model(**inputs)
    if name == "bert":
        assert out.last_hidden_state.shape == (1, 128, 64)
        assert out.pooler_output.shape == (1, 64)
        return
    logits = out.start_logits if name == "roberta-qa" else out.logits
    assert torch.isfinite(logits).all()
    expected_shape = {
        "bert-mlm": (1, 128, len(tokenizer)),
        "roberta-qa": (1, 128),
        "deberta-v2-ner": (1, 128, 5),
        "distilbert-sst": (1, 3),
        "bert-reranker": (1, 1),
    }[name]
    assert tuple(logits.shape) == expected_shape
    if name == "roberta-qa":
        assert out.end_logits.shape == (1, 128)
    # Sharpened heads: logits well spread over the real (unpadded) tokens / the labels.
    real = inputs["attention_mask"][0].bool()
    if name != "bert-reranker":
        spread = logits[0] if name == "distilbert-sst" else logits[0][real]
        assert spread.std() > 2.0


def test_bert_special_tokens(zoo_built: Path) -> None:
    _, tokenizer, _ = _load("bert-mlm", zoo_built)
    ids = tokenizer(MASKED)["input_ids"]
    assert ids.count(tokenizer.mask_token_id) == 1
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    mask_at = tokens.index("[MASK]")
    assert tokens[mask_at - 1 : mask_at + 2] == ["Ġin", "[MASK]", "."]
    pair = tokenizer("Hello", "Where do I live?")
    tokens = tokenizer.convert_ids_to_tokens(pair["input_ids"])
    assert tokens.count("[SEP]") == 2 and tokens[0] == "[CLS]"
    first_sep = tokens.index("[SEP]")
    assert pair["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
    assert tokenizer.pad_token == "[PAD]" and tokenizer.unk_token == "[UNK]"


def test_bert_mlm_predicts_at_mask(zoo_built: Path) -> None:
    import torch

    _, tokenizer, model = _load("bert-mlm", zoo_built)
    inputs = tokenizer(MASKED, return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits[0]
    at_mask = logits[inputs["input_ids"][0] == tokenizer.mask_token_id][0]
    top2 = at_mask.topk(2).values
    assert top2[0] - top2[1] > 0.1


def test_roberta_pair_template(zoo_built: Path) -> None:
    _, tokenizer, _ = _load("roberta-qa", zoo_built)
    ids = tokenizer(QUESTION, SENTENCE)["input_ids"]
    question = tokenizer(QUESTION, add_special_tokens=False)["input_ids"]
    sentence = tokenizer(SENTENCE, add_special_tokens=False)["input_ids"]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    assert ids == [bos, *question, eos, eos, *sentence, eos]
    assert tokenizer.convert_ids_to_tokens([bos, eos]) == ["<s>", "</s>"]
    assert (tokenizer.pad_token, tokenizer.unk_token, tokenizer.mask_token) == (
        "<pad>",
        "<unk>",
        "<mask>",
    )
    masked = tokenizer("I live in <mask>.")["input_ids"]
    assert masked.count(tokenizer.mask_token_id) == 1


def test_classifier_labels(zoo_built: Path) -> None:
    import transformers

    ner = transformers.AutoConfig.from_pretrained(zoo.ensure_built("deberta-v2-ner", zoo_built))
    assert ner.id2label == {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
    assert ner.label2id == {v: k for k, v in ner.id2label.items()}
    sst = transformers.AutoConfig.from_pretrained(zoo.ensure_built("distilbert-sst", zoo_built))
    assert sst.id2label == {0: "NEGATIVE", 1: "NEUTRAL", 2: "POSITIVE"}
    reranker = transformers.AutoConfig.from_pretrained(zoo.ensure_built("bert-reranker", zoo_built))
    assert reranker.num_labels == 1


# --- encoder-decoders, llava, mixtral, llama-2core ---------------------------------------------


def _greedy(model: Any, inputs: Any, **kwargs: Any) -> tuple[list[int], float]:
    """Return the 32 greedy tokens *model* appends and the smallest top-1/top-2 logit gap."""
    import torch

    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=32,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            **kwargs,
        )
    top2 = torch.stack(out.scores)[:, 0].topk(2, dim=-1).values
    new = out.sequences[0, -len(out.scores) :].tolist()
    return new, float((top2[:, 0] - top2[:, 1]).min())


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_seq2seq_generates(name: str, zoo_built: Path) -> None:
    import torch

    config, tokenizer, model = _load(name, zoo_built, dtype=torch.float32)
    assert config.is_encoder_decoder
    inputs = tokenizer(PROMPT, return_tensors="pt")
    ids = inputs["input_ids"][0].tolist()
    prompt_ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    assert tokenizer.eos_token == "</s>" and tokenizer.unk_token == "<unk>"
    assert tokenizer.pad_token == "<pad>"
    if name == "t5":
        assert tokenizer.bos_token is None
        assert ids == [*prompt_ids, tokenizer.eos_token_id]
        assert config.decoder_start_token_id == tokenizer.pad_token_id == 0
    else:
        assert (tokenizer.bos_token, tokenizer.mask_token) == ("<s>", "<mask>")
        assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3, 4]) == [
            "<s>",
            "<pad>",
            "</s>",
            "<unk>",
            "<mask>",
        ]
        assert ids == [tokenizer.bos_token_id, *prompt_ids, tokenizer.eos_token_id]
        assert config.decoder_start_token_id == tokenizer.eos_token_id == 2
    assert model.generation_config.decoder_start_token_id == config.decoder_start_token_id

    new, gap = _greedy(model, inputs)
    # The sharpened head never predicts a special token: no early </s>, 32 new tokens.
    assert len(new) == 32 and tokenizer.eos_token_id not in new
    assert isinstance(tokenizer.decode(new), str)
    assert gap > MIN_GAP

    _, _, bf16 = _load(name, zoo_built, dtype=torch.bfloat16)
    assert _greedy(bf16, inputs)[0] == new


def _gradient_image() -> Any:
    """A 32x32 RGB test image made in code: horizontal and vertical gradients, flat blue."""
    from PIL import Image

    gradient = Image.linear_gradient("L").resize((32, 32))
    blue = Image.new("L", (32, 32), 128)
    return Image.merge("RGB", (gradient, gradient.transpose(Image.Transpose.ROTATE_90), blue))


def test_llava_processor_and_generate(zoo_built: Path) -> None:
    import importlib.util

    import torch
    import transformers

    path = zoo.ensure_built("llava", zoo_built)
    auto_processor: Any = transformers.AutoProcessor  # untyped
    llava_cls: Any = transformers.LlavaForConditionalGeneration
    processor = auto_processor.from_pretrained(path)
    assert type(processor).__name__ == "LlavaProcessor"
    # transformers picks the image processor's backend by what is installed.
    has_torchvision = importlib.util.find_spec("torchvision") is not None
    expected = "CLIPImageProcessor" if has_torchvision else "CLIPImageProcessorPil"
    assert type(processor.image_processor).__name__ == expected
    tokenizer = processor.tokenizer
    assert tokenizer.image_token == "<image>" and "<image>" in tokenizer.all_special_tokens
    assert tokenizer.convert_ids_to_tokens(tokenizer("<image>")["input_ids"]) == ["<s>", "<image>"]

    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    assert prompt == f"USER: <image>\n{PROMPT} ASSISTANT:"
    inputs = processor(images=_gradient_image(), text=prompt, return_tensors="pt")
    assert inputs["pixel_values"].shape == (1, 3, 32, 32)
    ids = inputs["input_ids"][0].tolist()
    config = transformers.AutoConfig.from_pretrained(path)
    assert ids[0] == tokenizer.bos_token_id
    # One image is 16 patch tokens (CLIP's CLS token is dropped), in one run.
    image_id = tokenizer.image_token_id
    assert image_id == config.image_token_id and ids.count(image_id) == 16
    assert ids[ids.index(image_id) : ids.index(image_id) + 16] == [image_id] * 16

    model = llava_cls.from_pretrained(path).eval()
    new, gap = _greedy(model, inputs)
    assert len(new) == 32 and image_id not in new and tokenizer.eos_token_id not in new
    assert isinstance(processor.decode(new), str)
    assert gap > MIN_GAP
    bf16 = llava_cls.from_pretrained(path, dtype=torch.bfloat16).eval()
    assert _greedy(bf16, inputs)[0] == new


def test_mixtral_is_a_mixture_of_experts(zoo_built: Path) -> None:
    import torch

    config, tokenizer, model = _load("mixtral", zoo_built, dtype=torch.float32)
    assert (config.num_local_experts, config.num_experts_per_tok) == (4, 2)
    assert config.base_model_tp_plan  # transformers' tensor-parallel plan for the experts
    inputs = tokenizer(PROMPT, return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs, output_router_logits=True)
    tokens = inputs["input_ids"].shape[1]
    assert [tuple(r.shape) for r in out.router_logits] == [(tokens, 4)] * 2
    # The router spreads the tokens over more than two experts.
    chosen = torch.cat([r.topk(2, dim=-1).indices.flatten() for r in out.router_logits])
    assert len(set(chosen.tolist())) > 2


def test_llama_2core_size(zoo_built: Path) -> None:
    import torch

    config, _, model = _load("llama-2core", zoo_built)
    assert model.dtype == torch.bfloat16  # stored in bf16; from_pretrained keeps it
    assert (config.hidden_size, config.num_hidden_layers) == (256, 4)
    # Heads split evenly over 2 tensor-parallel ranks.
    assert config.num_attention_heads % 2 == 0 and config.num_key_value_heads % 2 == 0
    bf16_bytes = sum(p.numel() * 2 for p in model.parameters())
    low, high = TWO_CORE_BF16_BYTES
    assert low <= bf16_bytes <= high, bf16_bytes
    tiny = sum(p.numel() for p in _load("llama", zoo_built)[2].parameters())
    assert bf16_bytes > 4 * tiny * 2  # far larger than the other decoders
