"""Choosing the models the way the dataset card does: Hub rankings, exclusions, pinned revisions.

``neuronsupport select`` asks the Hub (through ``huggingface_hub``, at the endpoint that
``HF_ENDPOINT`` names) for each task of the card and each order (downloads, trending score)
the first ``depth`` transformers models. A model's **position** is its best position over
the rankings it appears in; ties go to more downloads, then to the id. The **selection**
(``selection_rank`` 1..top) is the eligible ``text-generation`` and ``image-text-to-text``
models in order of position; **the rest** of the list is every other model of the card's tasks
in order of position, without a rank. Models excluded from the Hub's metadata alone (no
weights downloaded) stay in the list with their category and reason, so the sweep records an
``EXCLUDED`` row; they take no rank. Every entry is pinned to the repo's commit.

The list written (by ``tomlkit``) is the TOML the sweep reads
(:mod:`pytest_neuronsupport.modellist`). At a sweep's end, :func:`apply_ranks` rewrites the
ranks of the pair's rows: ``selection_rank`` always means the latest selection.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pytest_neuronsupport.runners import Runners

__all__ = [
    "CARD_TASKS",
    "EXPAND",
    "RANKINGS",
    "SELECTED_TASKS",
    "Candidate",
    "Entry",
    "Limits",
    "apply_ranks",
    "candidates",
    "exclusion",
    "list_text",
    "select",
]

CARD_TASKS: Final = (
    "text-generation",
    "image-text-to-text",
    "translation",
    "summarization",
    "fill-mask",
    "token-classification",
    "text-classification",
    "question-answering",
    "zero-shot-classification",
    "feature-extraction",
    "sentence-similarity",
    "text-ranking",
)
"""The tasks the card's sweep ranks, in its order."""
SELECTED_TASKS: Final = ("text-generation", "image-text-to-text")
"""The tasks whose models make the selection (``selection_rank``)."""
RANKINGS: Final = ("downloads", "trending_score")
"""The rankings of each task, as ``list_models(sort=...)`` names them."""
EXPAND: Final = [
    "sha",
    "downloads",
    "trendingScore",
    "pipeline_tag",
    "tags",
    "gated",
    "config",
    "safetensors",
    "transformersInfo",
    "gguf",
    "library_name",
]
"""What the listing returns of each model: all the exclusions need, in one request per page."""
BYTES_PER_PARAMETER: Final = 2  # bf16, as the sweep runs them


@dataclass(frozen=True)
class Candidate:
    """A model seen in the rankings, with what its exclusion is decided by."""

    id: str
    sha: str | None
    task: str
    downloads: int
    #: Best (smallest, 1-based) position over the rankings it appears in.
    position: int
    tags: tuple[str, ...] = ()
    gated: bool | str = False
    config: Mapping[str, Any] = field(default_factory=dict)
    parameters: int | None = None
    custom_class: str | None = None
    gguf: bool = False

    @classmethod
    def from_info(cls, info: Any, task: str, position: int) -> Candidate:
        """From a ``huggingface_hub.ModelInfo`` of the listing."""
        safetensors = getattr(info, "safetensors", None)
        transformers_info = getattr(info, "transformers_info", None)
        return cls(
            id=info.id,
            sha=info.sha,
            task=task,
            downloads=int(info.downloads or 0),
            position=position,
            tags=tuple(info.tags or ()),
            gated=info.gated or False,
            config=info.config or {},
            parameters=getattr(safetensors, "total", None) if safetensors else None,
            custom_class=getattr(transformers_info, "custom_class", None),
            gguf=bool(getattr(info, "gguf", None)) or "gguf" in (info.tags or ()),
        )

    def key(self) -> tuple[int, int, str]:
        """Order of the list: position, then more downloads, then the id."""
        return (self.position, -self.downloads, self.id)


def candidates(
    api: Any, tasks: Sequence[str] = CARD_TASKS, depth: int = 1000
) -> dict[str, Candidate]:
    """Every model of the rankings (each task and order, ``depth`` deep), once, at its best
    position. ``api`` is a ``huggingface_hub.HfApi``; the client pages the Hub's listing."""
    found: dict[str, Candidate] = {}
    for task in tasks:
        for ranking in RANKINGS:
            listing = api.list_models(
                filter="transformers", pipeline_tag=task, sort=ranking, limit=depth, expand=EXPAND
            )
            for position, info in enumerate(listing, start=1):
                seen = found.get(info.id)
                if seen is None or position < seen.position:
                    found[info.id] = Candidate.from_info(info, task, position)
    return found


@dataclass(frozen=True)
class Limits:
    """What decides ``too-large`` and ``gated``."""

    max_cores: int = 16
    core_memory_gb: float = 24.0
    has_token: bool = False

    @property
    def max_bytes(self) -> float:
        return self.max_cores * self.core_memory_gb * 1e9


def exclusion(model: Candidate, limits: Limits) -> tuple[str, str] | None:
    """``(category, reason)`` when the Hub's metadata alone excludes the model, else None."""
    quantization = model.config.get("quantization_config")
    if quantization:
        method = (
            quantization.get("quant_method", "unknown") if isinstance(quantization, dict) else ""
        )
        return "quantized", f"quantized checkpoint (quant_method {method or 'unknown'})"
    if model.gguf:
        return "quantized", "a GGUF repository"
    if "custom_code" in model.tags:
        return "trust-remote-code", "tagged custom_code: needs trust_remote_code, never enabled"
    if model.config.get("auto_map"):
        return "trust-remote-code", "config auto_map: needs trust_remote_code, never enabled"
    if model.custom_class:
        why = f"custom class {model.custom_class}: needs trust_remote_code, never enabled"
        return "trust-remote-code", why
    if model.parameters is not None:
        size = model.parameters * BYTES_PER_PARAMETER
        if size > limits.max_bytes:
            return "too-large", (
                f"{model.parameters:,} parameters: {size / 1e9:.1f} GB in bf16 is more than "
                f"{limits.max_cores} cores of {limits.core_memory_gb:g} GB hold"
            )
    if model.gated and not limits.has_token:
        return "gated", f"gated repository ({model.gated}) and no Hugging Face token configured"
    return None


@dataclass(frozen=True)
class Entry:
    """One entry of the list written."""

    id: str
    revision: str | None
    task: str
    selection_rank: int | None = None
    exclusion: str | None = None
    notes: str | None = None
    #: Its parameter count, where the Hub's listing says it (orders the sweep's starts).
    parameters: int | None = None


def select(found: Mapping[str, Candidate], top: int, limits: Limits) -> list[Entry]:
    """The list: the selection (ranked), then the rest in order of position."""
    selection: list[Entry] = []
    rest: list[Entry] = []
    for model in sorted(found.values(), key=Candidate.key):
        excluded = exclusion(model, limits)
        if excluded is not None:
            rest.append(Entry(model.id, model.sha, model.task, None, *excluded, model.parameters))
        elif model.task in SELECTED_TASKS and len(selection) < top:
            rank = len(selection) + 1
            selection.append(
                Entry(model.id, model.sha, model.task, rank, parameters=model.parameters)
            )
        else:
            rest.append(Entry(model.id, model.sha, model.task, parameters=model.parameters))
    return selection + rest


def _comment(text: str) -> str:
    """``text`` on one comment line: TOML's comments hold no newline or other control
    character but the tab."""
    return "".join(c if c == "\t" or (" " <= c != "\x7f") else " " for c in text)


def list_text(entries: Sequence[Entry], header: Mapping[str, object]) -> str:
    """The model list's TOML: a commented header (endpoint, time, options), then the entries."""
    import tomlkit

    selected = sum(e.selection_rank is not None for e in entries)
    excluded = sum(e.exclusion is not None for e in entries)
    document = tomlkit.document()
    document.add(tomlkit.comment("Written by `neuronsupport select`."))
    for name, value in header.items():
        document.add(tomlkit.comment(_comment(f"{name}: {value}")))
    document.add(
        tomlkit.comment(f"{len(entries)} models: {selected} selected, {excluded} excluded")
    )
    models = tomlkit.aot()
    for entry in entries:
        model = tomlkit.table()
        model.add("id", entry.id)
        if entry.revision:
            model.add("revision", entry.revision)
        model.add("task", entry.task)
        if entry.selection_rank is not None:
            model.add("selection_rank", entry.selection_rank)
        if entry.exclusion is not None:
            model.add("exclusion", entry.exclusion)
            model.add("notes", entry.notes or "")
        if entry.parameters:
            model.add("parameters", entry.parameters)
        models.append(model)
    if entries:
        document.add("model", models)
    return tomlkit.dumps(document)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def apply_ranks(lists: Iterable[Path], runners: Runners, target: Path) -> str | None:
    """When the ``lists`` carry a selection, ``selection_rank`` means the latest one: every
    row of the pair file ``target`` gets its model's rank in these lists, or null if it has
    none. Returns the problem to report when the file could not be read (None: done, or no
    selection, or a list that collection has already said is wrong)."""
    from pytest_neuronsupport.dataset.files import UnreadableResultsError, set_selection
    from pytest_neuronsupport.modellist import ModelListError, parse

    try:
        specs = [spec for path in lists for spec in parse(path, runners)]
    except ModelListError:
        return None  # collection has said what is wrong with the list
    ranks = {s.id: s.selection_rank for s in specs if s.selection_rank is not None}
    if not ranks:
        return None
    try:
        set_selection(target, ranks)
    except UnreadableResultsError as exc:
        return f"{target}: selection ranks not updated ({exc.reason})"
    return None
