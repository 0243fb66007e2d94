"""The runner of a checkpoint follows transformers' own auto mappings for its class and config."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_neuronsupport import automap
from pytest_neuronsupport.runners import Runner, Runners

RUNNERS = Runners.builtin()
#: The documented order (README, ``automap.KINDS``): the first of these tables that maps a class
#: decides its runner, and the encoder's entry.
ORDER = [
    ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "seq2seq", "run"),
    ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "multimodal", "run"),
    ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "encoder", "run_masked_lm"),
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "dense", "run"),
    ("MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES", "encoder", "run_question_answering"),
    ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES", "encoder", "run_token_classification"),
    ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "encoder", "run_sequence_classification"),
    ("MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES", "encoder", "run_hidden_states"),
    ("MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES", "encoder", "run_hidden_states"),
    ("MODEL_MAPPING_NAMES", "encoder", "run_hidden_states"),
]


def installed_tables() -> dict[str, dict[str, Any]]:
    """The mappings as transformers itself builds them (imported: the test side may)."""
    from transformers.models.auto import modeling_auto

    return {name: dict(getattr(modeling_auto, name)) for name, _, _ in ORDER}


def every_table() -> dict[str, dict[str, tuple[str, ...]]]:
    """Every ``MODEL_*_NAMES`` table transformers builds, class names as tuples."""
    from transformers.models.auto import modeling_auto

    return {
        name: {
            t: (c,) if isinstance(c, str) else tuple(c)
            for t, c in getattr(modeling_auto, name).items()
        }
        for name in dir(modeling_auto)
        if name.startswith("MODEL_") and name.endswith("_NAMES")
    }


def takes_no_text(cls: str, model_type: str, first: str) -> bool:
    """Whether this class takes no text, from the tables transformers builds: a speech-to-text
    class, or a base model (``first`` table MODEL_MAPPING_NAMES) that a table of other inputs
    maps, or whose model type is a speech-to-text one, or whose model type only such map; or a
    class of a model type that needs an input beside the text (automap.OTHER_INPUTS)."""
    if model_type in automap.OTHER_INPUTS:  # text with another input (Bros: word boxes)
        return True
    tables = every_table()
    text = {n for n, _, _ in ORDER if n != "MODEL_MAPPING_NAMES"} | set(automap.TEXT_TABLES)
    media = set(tables) - text - set(automap.NEUTRAL_TABLES)
    if any(cls in c for c in tables[automap.SPEECH_SEQ2SEQ].values()):
        return True
    if first != "MODEL_MAPPING_NAMES":
        return False
    if any(cls in c for n in media for c in tables[n].values()):
        return True
    typed = {n for n in media if model_type in tables[n]}
    return automap.SPEECH_SEQ2SEQ in typed or (
        bool(typed) and not any(model_type in tables[n] for n in text)
    )


def every_mapped_class() -> list[tuple[str, str, str | None, str]]:
    """(class, model type, runner, entry) for every class of the installed mappings, the
    runner and entry being those of the first table in ORDER that maps it; (None, "") for a
    class that takes no text (:func:`takes_no_text`)."""
    expected: dict[str, tuple[str, str, str | None, str]] = {}
    for name, table in installed_tables().items():
        runner, entry = next((r, e) for n, r, e in ORDER if n == name)
        for model_type, classes in table.items():
            for cls in (classes,) if isinstance(classes, str) else classes:
                if cls not in expected and takes_no_text(cls, model_type, name):
                    expected[cls] = (cls, model_type, None, "")
                expected.setdefault(cls, (cls, model_type, runner, entry))
    return sorted(expected.values(), key=lambda case: case[0])


def chosen(config: dict[str, Any], task: str | None = None) -> tuple[str | None, str]:
    choice = RUNNERS.choose(config, task)
    if choice.runner is None:
        return None, choice.reason
    return choice.runner.name, choice.runner.entry_for(config, 1, task)


def test_the_tables_read_from_source_are_those_transformers_builds() -> None:
    for name, table in installed_tables().items():
        kind = next(k for k, n in automap.KINDS.items() if n == name)
        built = {t: (c,) if isinstance(c, str) else tuple(c) for t, c in table.items()}
        assert automap.table(kind) == built, name


def test_every_mapped_class_gets_the_runner_its_mapping_implies() -> None:
    cases = every_mapped_class()
    assert len(cases) > 800  # every class of ten tables, not a hand list
    wrong: list[tuple[Any, ...]] = []
    for cls, model_type, runner, entry in cases:
        got = chosen({"architectures": [cls], "model_type": model_type})
        if runner is None:  # excluded, naming what it is
            if got[0] is not None or "no runner feeds" not in got[1]:
                wrong.append((cls, got, (runner, entry)))
        elif got != (runner, entry):
            wrong.append((cls, got, (runner, entry)))
    assert wrong == []
    excluded = [case for case in cases if case[2] is None]
    assert 100 < len(excluded) < len(cases) / 3  # vision, audio and speech, not the text models


@pytest.mark.parametrize(
    ("cls", "model_type", "why"),
    [
        # Speech to text: the seq2seq runner would feed its encoder text (or a tokenizer-less
        # load would fail), even where the class is also a seq2seq LM.
        ("WhisperForConditionalGeneration", "whisper", "speech-to-text model"),
        ("VoxtralForConditionalGeneration", "voxtral", "speech-to-text model"),
        ("WhisperModel", "whisper", "model type 'whisper' is a speech-to-text one"),
        # Base models of images or audio: once the encoder runner, FAIL(load) for a tokenizer.
        ("ViTModel", "vit", "MODEL_FOR_IMAGE_MAPPING_NAMES"),
        ("CLIPModel", "clip", "ZERO_SHOT_IMAGE_CLASSIFICATION"),
        ("Wav2Vec2Model", "wav2vec2", "model type 'wav2vec2' only by"),
    ],
)
def test_a_model_that_takes_no_text_is_excluded_saying_so(
    cls: str, model_type: str, why: str
) -> None:
    runner, reason = chosen({"architectures": [cls], "model_type": model_type})
    assert runner is None
    assert cls in reason and why in reason and "not a task of the card" in reason


def test_text_base_models_keep_the_encoder() -> None:
    for cls, model_type in [
        ("BertModel", "bert"),
        ("LlavaModel", "llava"),
        ("LayoutLMModel", "layoutlm"),
    ]:
        assert chosen({"architectures": [cls], "model_type": model_type}) == (
            "encoder",
            "run_hidden_states",
        )


@pytest.mark.parametrize(
    ("config", "task", "runner", "entry"),
    [
        # Once the encoder's bare "Model" suffix: an encoder-decoder of the seq2seq mapping.
        ({"architectures": ["MarianMTModel"], "is_encoder_decoder": True}, None, "seq2seq", "run"),
        ({"architectures": ["EncoderDecoderModel"]}, None, "seq2seq", "run"),
        # Once the decoder's "LMHeadModel" suffix: masked-LM heads.
        ({"architectures": ["XLMWithLMHeadModel"]}, None, "encoder", "run_masked_lm"),
        ({"architectures": ["FlaubertWithLMHeadModel"]}, None, "encoder", "run_masked_lm"),
        # ...unless the entry's task asks for the other table that maps it.
        ({"architectures": ["XLMWithLMHeadModel"]}, "text-generation", "dense", "run"),
        # Once no runner at all.
        (
            {"architectures": ["XLMForQuestionAnsweringSimple"]},
            None,
            "encoder",
            "run_question_answering",
        ),
        (
            {"architectures": ["XLNetForQuestionAnsweringSimple"]},
            None,
            "encoder",
            "run_question_answering",
        ),
        ({"architectures": ["ReformerModelWithLMHead"]}, None, "dense", "run"),
        ({"architectures": ["BertGenerationDecoder"]}, None, "dense", "run"),
        ({"architectures": ["VisionEncoderDecoderModel"]}, None, "multimodal", "run"),
        # BART is also a masked LM: seq2seq first, but a fill-mask entry gets its mask filled.
        ({"architectures": ["BartForConditionalGeneration"]}, None, "seq2seq", "run"),
        (
            {"architectures": ["BartForConditionalGeneration"]},
            "fill-mask",
            "encoder",
            "run_masked_lm",
        ),
        ({"architectures": ["Gemma3ForConditionalGeneration"]}, None, "multimodal", "run"),
        # A base model of an encoder-decoder runs as its model type's seq2seq LM...
        (
            {"architectures": ["T5Model"], "model_type": "t5", "is_encoder_decoder": True},
            None,
            "seq2seq",
            "run",
        ),
        # ...and encoders' base models give their hidden states.
        (
            {"architectures": ["T5EncoderModel"], "model_type": "t5"},
            None,
            "encoder",
            "run_hidden_states",
        ),
        (
            {"architectures": ["BertModel"], "model_type": "bert"},
            None,
            "encoder",
            "run_hidden_states",
        ),
        (
            {"architectures": ["DebertaV2ForSequenceClassification"], "num_labels": 1},
            None,
            "encoder",
            "run_score",
        ),
    ],
)
def test_the_classes_suffixes_routed_wrongly(
    config: dict[str, Any], task: str | None, runner: str, entry: str
) -> None:
    assert chosen(config, task) == (runner, entry)


def test_a_class_nothing_takes_is_excluded_naming_it_and_what_was_checked() -> None:
    runner, reason = chosen({"architectures": ["WhisperForAudioClassification"]})  # not a base
    assert runner is None
    assert "WhisperForAudioClassification" in reason
    assert "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES" in reason  # where transformers has it
    assert "causal_lm" in reason and automap.transformers_version() in reason
    runner, reason = chosen({"architectures": ["AcmeForMagic"]}, "text-generation")
    assert runner is None and "AcmeForMagic (in no auto mapping)" in reason


def test_a_users_runner_declaring_an_architecture_wins_over_the_mapping() -> None:
    mine = Runner(
        name="mine",
        module="my_runner",
        load_class="AutoModelForCausalLM",
        generates=False,
        architectures=("LlamaForCausalLM",),
    )
    runners = RUNNERS.extended([mine])
    assert runners.infer({"architectures": ["LlamaForCausalLM"]}, None) == mine
    mistral = runners.infer({"architectures": ["MistralForCausalLM"]}, None)
    assert mistral is not None and mistral.name == "dense"  # the mapping decides the others


def test_a_users_runner_may_take_a_kind_of_mapping_from_a_builtin_one() -> None:
    mine = Runner(
        name="mine",
        module="my_runner",
        load_class="AutoModelForMaskedLM",
        generates=False,
        mappings=("masked_lm",),
    )
    chosen = RUNNERS.extended([mine]).infer({"architectures": ["BertForMaskedLM"]}, None)
    assert chosen == mine  # the runner registered last


def test_a_mapping_that_is_no_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="mapping 'causal' is not kind"):
        Runner(name="bad", module="m", load_class="X", generates=False, mappings=("causal",))


def test_the_mappings_are_read_without_importing_transformers() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from pytest_neuronsupport import automap\n"
        "assert len(automap.table('causal_lm')) > 100\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
