"""Runners: how a model of one kind is run, each declared once, in one module.

A runner is a module that declares itself, with literal values only (``dense.py``: a decoder
generating tokens, sharded over several cores, taking the classes transformers maps as causal
LMs)::

    RUNNER = Runner(name="...", load_class="...", generates=..., shards=...,
                    mappings=("causal_lm",), tasks=("...",))

and defines ``run(params, ops)``, and ``run_ranks(params, ops)`` if it shards: the run-side code
its ``run.py`` is made of (standard library, torch, transformers and
:mod:`pytest_neuronsupport.runners.lib`). ``run`` returns the verdict, a dict whose ``result`` is a
:class:`~pytest_neuronsupport.runners.lib.protocol.Result`.

The built-in runners are the modules of this package. Their code imports torch, which a pytest
collection must not wait for, so :func:`builtin_runners` reads their ``RUNNER`` declarations from
their source without importing them. Third-party runners are :class:`Runner` objects returned by
the ``pytest_neuronsupport_runners`` hook or named by an entry point of the group
``pytest_neuronsupport.runners``; their ``module`` is any importable module.

**Choosing a runner** for a checkpoint that names none (:meth:`Runners.choose`), from its
config's ``architectures``, the first entry one of these takes:

1. A runner's ``architectures`` patterns (a user's runner): class-name suffixes, each optionally
   followed by a condition on the config in brackets (``"ForCausalLM[experts-without-tp-plan]"``,
   see :data:`CONDITIONS`). The longest matching suffix wins; at equal length a pattern with a
   condition that holds beats one without, and then the runner registered last (a user's).
2. transformers' own auto mappings (:mod:`pytest_neuronsupport.automap`): the kinds of table
   that map the class (``causal_lm``, ``seq2seq_lm``, ``masked_lm``...), the one the entry's task
   asks for first, then in :data:`~pytest_neuronsupport.automap.KINDS` order; the first kind a
   runner's ``mappings`` take wins, a runner whose condition holds over one without, then the
   runner registered last.

Before the mappings, a class whose inputs are not text is excluded (``no-runner``, the reason
from :func:`~pytest_neuronsupport.automap.not_text`): a speech-to-text model, which the seq2seq
runner cannot feed, or a base model of images or audio, which the encoder runner would fail to
load for lack of a tokenizer. A class neither takes is excluded (``no-runner``). A config
without ``architectures`` goes by its entry's task: the runner that lists it in ``tasks``.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

from pytest_neuronsupport import automap

#: The entry-point group of third-party runners (each entry point loads a :class:`Runner`).
ENTRY_POINT_GROUP = "pytest_neuronsupport.runners"
_PATTERN = re.compile(r"(?P<suffix>[A-Za-z0-9_]+)(?:\[(?P<condition>[a-z-]+)\])?")
#: Config keys that count a mixture-of-experts model's experts.
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def is_mixture_of_experts(config: Mapping[str, Any]) -> bool:
    return any(isinstance(config.get(k), int) and config[k] > 1 for k in EXPERT_KEYS)


def has_tensor_parallel_plan(config: Mapping[str, Any]) -> bool:
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


#: Conditions an architecture pattern may put on the config, by name.
CONDITIONS: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "encoder-decoder": lambda config: bool(config.get("is_encoder_decoder")),
    "vision": lambda config: "vision_config" in config,
    "experts-without-tp-plan": lambda config: (
        is_mixture_of_experts(config) and not has_tensor_parallel_plan(config)
    ),
    "one-label": lambda config: (
        config.get("num_labels") == 1 or len(config.get("id2label") or "xx") == 1
    ),
}


@dataclass(frozen=True)
class Runner:
    """One way of running a model: what it loads and does, and where its run code is."""

    #: The name lists and options use (``runner = "dense"``).
    name: str
    #: The transformers class it loads with (for people: README, ``--help``).
    load_class: str
    #: Whether it generates tokens (prefill chunking and the English judge apply).
    generates: bool
    #: Whether it shards a model over several cores (one rank per core); else one core.
    shards: bool = False
    #: Class-name suffixes of the architectures it takes, each optionally ``[condition]``: a
    #: user's runner may name them; they win over transformers' mappings.
    architectures: tuple[str, ...] = ()
    #: The kinds of transformers' auto mappings it takes (:data:`automap.KINDS`), each
    #: optionally ``[condition]``.
    mappings: tuple[str, ...] = ()
    #: Hub tasks it takes when a config names no architecture it knows.
    tasks: tuple[str, ...] = ()
    #: The dataset card's spelling, the row's ``runner`` column (default ``run_<name>``).
    card: str = ""
    #: The importable module of its run code (set by the registry for the built-in ones).
    module: str = ""
    #: The run code's entry in ``module``: ``run(params, ops) -> verdict`` on one core...
    entry: str = "run"
    #: ...or another entry for some architectures: ``(pattern, entry)`` pairs, the first
    #: matching one wins (so a script holds only the code of its kind of model); a pattern is a
    #: class-name suffix or a kind of :data:`automap.KINDS` it was chosen for...
    entries: tuple[tuple[str, str], ...] = ()
    #: ...and, for a runner that shards, in each rank of a several-core run (None in ranks
    #: other than 0).
    ranks_entry: str = "run_ranks"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name) or self.name.startswith("run_"):
            raise ValueError(f"runner name {self.name!r}: lower case letters, digits and _")
        for pattern in (*self.architectures, *(p for p, _ in self.entries)):
            match = _PATTERN.fullmatch(pattern)
            if match is None or (match["condition"] or "") not in ("", *CONDITIONS):
                raise ValueError(
                    f"runner {self.name!r}: architecture pattern {pattern!r} is not "
                    f"Suffix or Suffix[condition] with a condition of {sorted(CONDITIONS)}"
                )
        for pattern in self.mappings:
            match = _PATTERN.fullmatch(pattern)
            if (
                match is None
                or match["suffix"] not in automap.KINDS
                or (match["condition"] or "") not in ("", *CONDITIONS)
            ):
                raise ValueError(
                    f"runner {self.name!r}: mapping {pattern!r} is not kind or kind[condition] "
                    f"with a kind of {list(automap.KINDS)} and a condition of {sorted(CONDITIONS)}"
                )

    @property
    def column(self) -> str:
        """The row's ``runner`` value: the dataset card's spelling."""
        return self.card or f"run_{self.name}"

    def entry_for(
        self, config: Mapping[str, Any] | None, cores: int, task: str | None = None
    ) -> str:
        """The function a run calls: by the number of cores, then by the architecture (its
        class name, or the kind of mapping this runner takes it as)."""
        if cores > 1:
            return self.ranks_entry
        config = config or {}
        architectures = [a for a in config.get("architectures") or [] if isinstance(a, str)]
        if not architectures:
            return self.entry
        kind = self.kind_for(architectures[0], config, task)
        for pattern, entry in self.entries:
            suffix, _, _ = pattern.partition("[")
            if suffix in automap.KINDS:
                if suffix == kind and matches(pattern, suffix, config):
                    return entry
            elif matches(pattern, architectures[0], config):
                return entry
        return self.entry

    def kind_for(self, architecture: str, config: Mapping[str, Any], task: str | None) -> str:
        """The first kind of mapping this class is in that this runner takes ('' if none)."""
        return next(
            (k for k in automap.kinds_of(architecture, config, task) if self.takes(k, config)), ""
        )

    def takes(self, kind: str, config: Mapping[str, Any]) -> int:
        """Whether it takes this kind of mapping: 2 by a pattern whose condition holds, 1 by one
        without a condition, 0 not."""
        best = 0
        for pattern in self.mappings:
            suffix, _, condition = pattern.partition("[")
            if suffix == kind and matches(pattern, kind, config):
                best = max(best, 2 if condition else 1)
        return best


@dataclass(frozen=True)
class Choice:
    """The runner chosen for a checkpoint, the kind of mapping it was chosen by, and why none
    was (the exclusion's reason)."""

    runner: Runner | None
    kind: str = ""
    reason: str = ""


def matches(pattern: str, architecture: str, config: Mapping[str, Any]) -> bool:
    """Whether ``architecture`` ends with the pattern's suffix and the config meets its
    condition."""
    match = _PATTERN.fullmatch(pattern)
    assert match is not None  # checked when the runner was made
    if not architecture.endswith(match["suffix"]):
        return False
    return not match["condition"] or CONDITIONS[match["condition"]](config)


@functools.cache
def builtin_runners() -> tuple[Runner, ...]:
    """The runners of this package, read from each module's ``RUNNER = Runner(...)``."""
    found = []
    for entry in sorted(files(__name__).iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".py") or entry.name.startswith("_"):
            continue
        module = f"{__name__}.{entry.name.removesuffix('.py')}"
        found.append(read_declaration(module, entry.read_text(encoding="utf-8")))
    return tuple(found)


def entry_point_runners() -> list[Runner]:
    """The runners that installed packages name in entry points of ENTRY_POINT_GROUP."""
    from importlib.metadata import entry_points

    return [entry.load() for entry in entry_points(group=ENTRY_POINT_GROUP)]


def read_declaration(module: str, source: str) -> Runner:
    """The ``RUNNER = Runner(...)`` of a module's source, evaluated as literals."""
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["RUNNER"]
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "Runner"
            and not node.value.args
        ):
            try:
                values = {kw.arg: ast.literal_eval(kw.value) for kw in node.value.keywords}
            except ValueError:
                raise ValueError(f"{module}: RUNNER is declared with literal values only") from None
            return Runner(**{"module": module, **values})  # type: ignore[arg-type]
    raise ValueError(f"{module}: no RUNNER = Runner(...) declaration")


@dataclass
class Runners:
    """The runners of a sweep: the built-in ones and those users add."""

    by_name: dict[str, Runner] = field(default_factory=dict)

    @classmethod
    def builtin(cls) -> Runners:
        return cls().extended(builtin_runners())

    def extended(self, runners: Iterable[Runner]) -> Runners:
        """These runners and ``runners``; a name (or card spelling) taken twice is an error."""
        by_name = dict(self.by_name)
        for runner in runners:
            if not isinstance(runner, Runner):
                raise TypeError(f"not a Runner: {runner!r}")
            if not runner.module:
                raise ValueError(f"runner {runner.name!r}: no module holds its run code")
            taken = {r.column for r in by_name.values()} | set(by_name)
            if runner.name in taken or runner.column in taken:
                raise ValueError(f"runner {runner.name!r} ({runner.column}) is defined twice")
            by_name[runner.name] = runner
        return Runners(by_name)

    def names(self) -> list[str]:
        return list(self.by_name)

    def get(self, name: str) -> Runner:
        """A runner by its name or its card spelling (``dense`` or ``run_dense``)."""
        for runner in self.by_name.values():
            if name in (runner.name, runner.column):
                return runner
        raise KeyError(f"unknown runner {name!r} (known: {', '.join(self.by_name)})")

    def infer(self, config: Mapping[str, Any] | None, task: str | None) -> Runner | None:
        """The runner for a checkpoint (see :meth:`choose`)."""
        return self.choose(config, task).runner

    def choose(self, config: Mapping[str, Any] | None, task: str | None) -> Choice:
        """The runner for a checkpoint: by its architecture's patterns, then by transformers'
        mappings, else (no architecture named) by its task (see the module's docstring)."""
        config = config or {}
        architectures = [a for a in config.get("architectures") or [] if isinstance(a, str)]
        media: list[str] = []
        for architecture in architectures:
            chosen = self._by_architecture(architecture, config)
            if chosen is not None:
                return Choice(chosen)
            why = automap.not_text(architecture, config, task)
            if why:  # a speech-to-text model, or a base model of images or audio
                media.append(why)
                continue
            for kind in automap.kinds_of(architecture, config, task):
                ranked = [
                    (r.takes(kind, config), i, r) for i, r in enumerate(self.by_name.values())
                ]
                rank, _, runner = max(ranked, key=lambda t: t[:2], default=(0, 0, None))
                if rank and runner is not None:
                    return Choice(runner, kind)
        if architectures:
            return Choice(None, reason="; ".join(media)[:500] or unrouted(architectures))
        by_task = next((r for r in reversed(self.by_name.values()) if task in r.tasks), None)
        why = f"config.json names no architectures and no runner takes the task {task!r}"
        return Choice(by_task, reason="" if by_task else why)

    def _by_architecture(self, architecture: str, config: Mapping[str, Any]) -> Runner | None:
        best: tuple[int, bool, int] | None = None
        chosen = None
        for order, runner in enumerate(self.by_name.values()):
            for pattern in runner.architectures:
                if not matches(pattern, architecture, config):
                    continue
                suffix, _, condition = pattern.partition("[")
                rank = (len(suffix), bool(condition), order)
                if best is None or rank > best:
                    best, chosen = rank, runner
        return chosen


def unrouted(architectures: list[str]) -> str:
    """Why no runner takes these classes: what was checked, and where transformers maps them."""
    parts = []
    for name in architectures:
        elsewhere = automap.other_tables(name)
        where = f"mapped only by {', '.join(elsewhere)}" if elsewhere else "in no auto mapping"
        parts.append(f"{name} ({where})")
    kinds = ", ".join(automap.KINDS)
    return (
        f"no runner for {'; '.join(parts)}: checked the runners' architecture patterns and "
        f"transformers {automap.transformers_version()}'s auto mappings of {kinds}"
    )[:500]
