"""A tiny model of every architecture transformers maps for the card's text tasks, and of the
image-text-to-text families the zoo builds with a processor."""

from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.bundled import bundled_dir
from pytest_neuronsupport.modellist import parse
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.zoo import architectures, processor, table

BUILT = table.built()
NOT_BUILDABLE = table.not_buildable()

MAPPED = {cls: (model_type, kind) for model_type, cls, kind in architectures.mapped()}
#: The image-text-to-text classes built with their processor.
VISION = sorted(c for c, (_, kind) in MAPPED.items() if kind == architectures.VISION and c in BUILT)
#: One class of each kind, for the slow build.
SAMPLE = (
    "MistralForCausalLM",
    "PegasusForConditionalGeneration",
    "ElectraForMaskedLM",
    "AlbertForQuestionAnswering",
    "XLMRobertaForTokenClassification",
)


def test_every_mapped_class_is_built_or_listed_with_its_reason() -> None:
    """The coverage gate (vLLM's test_hf_registry_coverage): a class transformers starts to
    map for the card's tasks fails here until it builds or says why it cannot."""
    assert len(MAPPED) > 500
    assert sorted(set(MAPPED) - BUILT - set(NOT_BUILDABLE)) == []
    assert BUILT & set(NOT_BUILDABLE) == set()
    assert all(reason.strip() for reason in NOT_BUILDABLE.values())
    text = {cls for cls, (_, kind) in MAPPED.items() if kind != architectures.VISION}
    assert len(BUILT & text) >= 0.9 * len(text)


def test_the_tables_name_only_classes_transformers_maps() -> None:
    assert sorted((BUILT | set(NOT_BUILDABLE)) - set(MAPPED)) == []


def test_every_built_architecture_has_a_runner_or_takes_no_text() -> None:
    runners = Runners.builtin()
    unrouted = []
    for cls in sorted(BUILT):
        choice = runners.choose({"architectures": [cls], "model_type": MAPPED[cls][0]}, None)
        if choice.runner is None and "speech-to-text" not in choice.reason:
            if "beside the text, which no runner feeds" not in choice.reason:
                unrouted.append((cls, choice.reason))
    assert unrouted == []


@pytest.mark.parametrize(
    ("cls", "needs"),
    [("BrosForTokenClassification", "bbox"), ("LxmertForQuestionAnswering", "visual_feats")],
)
def test_a_class_that_needs_an_input_beside_the_text_is_excluded(cls: str, needs: str) -> None:
    """Its tiny model builds, but its forward raises without an input no runner feeds: it is
    excluded, naming the input, not held as a failure of the compiler."""
    choice = Runners.builtin().choose({"architectures": [cls], "model_type": MAPPED[cls][0]}, None)
    assert choice.runner is None
    assert needs in choice.reason and cls in choice.reason


def test_the_bundled_list_is_the_one_generated_from_the_table() -> None:
    """``neuronsupport zoo list --architectures > model_lists/architectures.toml`` refreshes it."""
    path = bundled_dir() / architectures.LIST_NAME
    assert path.read_text(encoding="utf-8") == architectures.model_list()
    ids = [spec.id for spec in parse(path)]
    assert ids == [f"zoo:arch/{cls}" for cls in sorted(BUILT)]
    specs = parse(path)
    assert all(spec.runner is None for spec in specs)  # the mappings choose, as for any model
    # a task only where the class is image-text-to-text first, but built as a text model
    tasked = {spec.id.removeprefix("zoo:arch/"): spec.task for spec in specs if spec.task}
    assert "FuyuForCausalLM" in tasked
    assert set(tasked.values()) == {"text-generation"}
    assert not set(tasked) & set(VISION)  # built with a processor: the mappings route them


def test_every_image_text_to_text_family_builds_with_a_processor() -> None:
    """The families of VISION_TYPES: each class of theirs is built as image-text-to-text, with
    a processor (its family's, or one that takes the same inputs without torchvision)."""
    families = {MAPPED[cls][0]: cls for cls in MAPPED if MAPPED[cls][1] == architectures.VISION}
    assert set(families) == set(architectures.VISION_TYPES) == set(processor.VISION)
    assert {MAPPED[cls][0] for cls in VISION} == set(processor.VISION)
    runners = Runners.builtin()
    for cls in VISION:
        choice = runners.choose({"architectures": [cls], "model_type": MAPPED[cls][0]}, None)
        assert choice.runner is not None and choice.runner.name == "multimodal"


# PaliGemma's processor makes its labels with np.array of a tensor (transformers' own warning)
@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
@pytest.mark.parametrize("cls", VISION)
def test_an_image_text_to_text_family_builds_and_its_processor_round_trips(
    cls: str, tmp_path: Path
) -> None:
    """``AutoProcessor`` of the saved folder gives the multimodal runner's inputs (the image's
    pixels, its tokens in the prompt), and the model takes them."""
    import torch
    import transformers

    from pytest_neuronsupport.runners import multimodal

    architectures.build(cls, *MAPPED[cls], tmp_path)
    loaded = multimodal.load_processor({"checkpoint": str(tmp_path)})
    inputs = multimodal.encode(loaded)
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    assert config.architectures == [cls]
    assert inputs["pixel_values"].is_floating_point()
    assert int((inputs["input_ids"] == config.image_token_id).sum()) >= 4
    # nothing it loads needs torchvision: no video processor (transformers' need it)
    assert "video_processor" not in type(loaded).get_attributes()
    assert len(loaded.tokenizer) <= config.get_text_config().vocab_size
    model: Any = transformers.AutoModelForImageTextToText.from_pretrained(tmp_path)
    model.eval()
    assert type(model).__name__ == cls
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    with torch.no_grad():  # the image's features fill exactly its tokens
        logits = model(**inputs).logits
    assert logits.shape[:2] == inputs["input_ids"].shape


def test_the_sample_covers_every_kind() -> None:
    assert {MAPPED[cls][1] for cls in SAMPLE} == set(architectures.KINDS) - {
        "sequence_classification"
    }
    assert set(SAMPLE) <= BUILT


@pytest.mark.slow
def test_a_sample_of_architectures_builds_deterministically_and_loads(tmp_path: Path) -> None:
    import transformers

    for cls in SAMPLE:
        path = architectures.ensure_built(cls, tmp_path)
        config = transformers.AutoConfig.from_pretrained(path)
        tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        assert config.architectures == [cls]
        assert len(tokenizer) <= config.vocab_size
        model = getattr(transformers, cls).from_pretrained(path)
        assert sum(p.numel() for p in model.parameters()) < 5_000_000
    again = tmp_path / "again"
    architectures.build(SAMPLE[0], *MAPPED[SAMPLE[0]], again)
    first = architectures.ensure_built(SAMPLE[0], tmp_path)
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    assert filecmp.cmpfiles(first, again, names, shallow=False)[0] == names


def _config(model_type: str, kind: str = "causal_lm") -> object:
    from pytest_neuronsupport.zoo.tokenizer import family_ids, make_tokenizer

    ids = family_ids(make_tokenizer(architectures.FAMILY, token_type_ids=False), "roberta")
    return architectures.make_config(model_type, kind, ids)


@pytest.mark.parametrize("model_type", ["deepseek_v3", "axk1", "glm4_moe_lite", "mistral4"])
def test_a_latent_attention_config_keeps_its_head_sizes_consistent(model_type: str) -> None:
    """Once failed in eager transformers (rotary of 16 on a rope part of 8; grouped keys)."""
    config: Any = _config(model_type)
    assert config.qk_head_dim == config.qk_nope_head_dim + config.qk_rope_head_dim
    assert config.num_key_value_heads == config.num_attention_heads
    assert getattr(config, "n_group", None) in (None, 1)


def test_the_shrunk_configs_fit_the_shrunk_model() -> None:
    """What once failed in eager transformers: rotary wider than a head (GPT-J), a hybrid of
    Mamba layers only (Bamba), no pad token to count positions from (ESM), top-k over more
    experts than there are (Kimi Linear), sliding layers only (T5Gemma 2)."""
    gptj: Any = _config("gptj")
    assert gptj.rotary_dim <= gptj.n_embd // gptj.n_head
    assert "full_attention" in _config("bamba").layers_block_type  # type: ignore[attr-defined]
    esm: Any = _config("esm", "masked_lm")
    assert esm.pad_token_id is not None
    kimi: Any = _config("kimi_linear")
    assert kimi.num_experts_per_token <= kimi.num_experts
    t5gemma2: Any = _config("t5gemma2", "seq2seq_lm")  # its static cache needs a full layer
    assert t5gemma2.decoder.layer_types == ["sliding_attention", "full_attention"]


def test_the_table_file_is_the_text_its_writer_makes_of_it() -> None:
    """The table is data (``model_lists/architectures-built.toml``) written by
    :func:`~pytest_neuronsupport.zoo.table.table_text`, as ``python -m
    pytest_neuronsupport.zoo.measure`` writes it: nothing in it was edited by hand."""
    measured: dict[str, str | None] = {cls: None for cls in BUILT}
    measured.update(NOT_BUILDABLE)
    version = 'transformers = "'
    written = [line for line in table.table_text(measured).splitlines() if version not in line]
    stored = table.table_path().read_text(encoding="utf-8").splitlines()
    assert [line for line in stored if version not in line] == written


@pytest.mark.slow
def test_the_table_is_regenerated_by_building_each_class() -> None:
    """``python -m pytest_neuronsupport.zoo.measure --classes ...`` builds each class in a
    worker: one that builds, and one whose build raises (listed with its exception)."""
    from pytest_neuronsupport.zoo import measure

    found = measure.measure(["LlamaForCausalLM", "NemotronForCausalLM"])
    assert found == {
        "LlamaForCausalLM": None,
        "NemotronForCausalLM": NOT_BUILDABLE["NemotronForCausalLM"],
    }
    said = found["NemotronForCausalLM"]
    assert said is not None and said.startswith("TypeError: ")
