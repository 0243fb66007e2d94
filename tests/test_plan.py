"""Planning one entry: runner inference, exclusion rules, checkpoint resolution."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.pipeline.plan import Plan, config_columns, exclusion_for
from pytest_neuronsupport.pipeline.plan import plan as plan_with
from pytest_neuronsupport.runners import Runners

RUNNERS = Runners.builtin()


def infer_runner(config: dict[str, Any], task: str | None) -> str | None:
    runner = RUNNERS.infer(config, task)
    return None if runner is None else runner.name


def plan(spec: ModelSpec, cache: Path) -> Plan:
    return plan_with(spec, cache, RUNNERS)


@pytest.mark.parametrize(
    ("config", "task", "runner"),
    [
        ({"architectures": ["LlamaForCausalLM"]}, None, "dense"),
        ({"architectures": ["GPT2LMHeadModel"]}, None, "dense"),
        (
            {"architectures": ["T5ForConditionalGeneration"], "is_encoder_decoder": True},
            None,
            "seq2seq",
        ),
        (
            {"architectures": ["LlavaForConditionalGeneration"], "vision_config": {}},
            None,
            "multimodal",
        ),
        ({"architectures": ["BertForMaskedLM"]}, None, "encoder"),
        ({"architectures": ["DebertaV2ForTokenClassification"]}, None, "encoder"),
        ({"architectures": ["BertModel"]}, None, "encoder"),
        ({}, "text-generation", "dense"),
        ({}, "sentence-similarity", "encoder"),
        ({}, None, None),
        ({"architectures": ["Mystery"]}, "weird-task", None),
    ],
)
def test_runner_from_architectures_then_task(
    config: dict[str, Any], task: str | None, runner: str | None
) -> None:
    assert infer_runner(config, task) == runner


def test_exclusion_rules() -> None:
    quant = exclusion_for({"quantization_config": {"quant_method": "awq"}})
    assert quant is not None and quant.category == "quantized" and "awq" in quant.reason
    remote = exclusion_for({"auto_map": {"AutoModel": "x.Y"}})
    assert remote is not None and remote.category == "trust-remote-code"
    assert exclusion_for({"architectures": ["LlamaForCausalLM"]}) is None


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"architectures": ["T5ForConditionalGeneration", "T5Model"], "model_type": "t5"},
            ("T5ForConditionalGeneration", "t5"),  # the first class: the head it declares
        ),
        ({"model_type": "bert"}, (None, "bert")),
        ({"architectures": [], "model_type": ""}, (None, None)),
        ({"architectures": "LlamaForCausalLM", "model_type": 3}, (None, None)),  # not a list
        (None, (None, None)),
    ],
)
def test_the_row_names_the_configs_first_architecture_and_model_type(
    config: dict[str, Any] | None, expected: tuple[str | None, str | None]
) -> None:
    columns = config_columns(config)
    assert (columns["architecture"], columns["model_type"]) == expected


def spec(tmp_path: Path, **kwargs: object) -> ModelSpec:
    return ModelSpec(source=tmp_path / "models.toml", line=1, **kwargs)  # type: ignore[arg-type]


def test_a_local_checkpoint_is_planned_from_its_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"]}))
    planned = plan(spec(tmp_path, id="acme/bert", path=str(tmp_path)), tmp_path)
    assert planned.runner is not None and planned.runner.name == "encoder"
    assert (planned.exclusion, planned.load_error) == (None, None)
    assert planned.checkpoint == str(tmp_path)
    assert planned.columns == {"architecture": "BertForMaskedLM", "model_type": None}


def test_a_model_no_runner_can_run_is_excluded_not_failed(tmp_path: Path) -> None:
    config = {"architectures": ["WhisperForAudioClassification"], "model_type": "whisper"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    planned = plan(spec(tmp_path, id="acme/whisper", path=str(tmp_path)), tmp_path)
    assert planned.exclusion is not None and planned.exclusion.category == "no-runner"


def test_a_mixture_of_experts_without_a_tensor_parallel_plan_runs_expert_parallel() -> None:
    moe = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4}
    assert infer_runner(moe, None) == "dense"  # transformers has a TP plan for Mixtral
    no_plan = {**moe, "model_type": "acme-moe"}  # a model type transformers has no plan for
    assert infer_runner(no_plan, None) == "dense_ep"
    assert infer_runner({**no_plan, "num_local_experts": 1}, None) == "dense"


def test_a_missing_package_checkpoint_is_a_load_error(tmp_path: Path) -> None:
    planned = plan(spec(tmp_path, id="acme/x", path="package:no_such_package_here/model"), tmp_path)
    assert planned.load_error is not None and "no_such_package_here" in planned.load_error


def test_a_hub_id_with_its_runner_given_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    planned = plan(spec(tmp_path, id="acme/not-here", runner="dense"), tmp_path)
    assert planned.load_error is None and planned.runner is not None
    assert planned.runner.name == "dense"
    assert planned.checkpoint == "acme/not-here"  # from_pretrained meets the problem in run.py
