"""Model lists: TOML files of ``[[model]]`` entries, parsed into :class:`ModelSpec`.

A list looks like::

    [[model]]
    id = "Qwen/Qwen3-0.6B"        # a Hub repo id, or "zoo:<name>" for a bundled tiny model
                                  # ("zoo:arch/<class>": a tiny model of that architecture)
    runner = "dense"              # optional: inferred from config.json "architectures"
                                  # (the dataset card's spelling, run_dense, is accepted too)
    task = "text-generation"      # optional
    revision = "main"             # optional: a Hub revision
    path = "checkpoints/qwen3"    # optional: a local checkpoint loaded instead of the Hub
    selection_rank = 1            # optional: rank in the sweep's selection
    cores = 2                     # optional: force the number of cores
    parameters = 751632384        # optional: its parameter count (the Hub's metadata, written by
                                  #   `neuronsupport select`): orders the starts by cost
    packages = ["sentencepiece"]  # optional: Python packages the model needs beyond ours
    exclusion = "quantized"       # optional: decided ahead (`neuronsupport select`): EXCLUDED,
    notes = "quantization_config" #   with this reason, and nothing runs
    mode = "train"                # optional: a training test (default "inference"; every
                                  #   entry is one under --neuron-train)
    seq_len = 512                 # optional: tokens per training sample (default 128)
    perf_batch = [1, 16]         # optional, with --neuron-perf: its configurations, instead
    perf_seq_len = [128]         #   of the options' (--neuron-perf-batch, -seq-len, -io)
    perf_io = ["128/128"]

Every problem of a list is found at once: a :class:`ModelListError` holds them all, each naming
the file, the line and the entry, and the sweep stops with them before it starts (a usage
error: :func:`parse_lists`, called as the sweep is configured). This module imports only the
standard library and ``huggingface_hub``'s validator (cheap): parsing a 1000-entry list must
cost next to nothing.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id  # type: ignore[attr-defined]

from pytest_neuronsupport import zoo
from pytest_neuronsupport.bundled import bundled_dir
from pytest_neuronsupport.runners import Runners

ZOO_PREFIX = "zoo:"
PACKAGE_PREFIX = "package:"

#: The list keys' former names (the performance mode's were ``bench_*``), still taken.
FORMERLY_OF = {"perf_batch": "bench_batch", "perf_seq_len": "bench_seq_len", "perf_io": "bench_io"}
FORMERLY = tuple(FORMERLY_OF.values())

_KEYS = {
    "id",
    "path",
    "runner",
    "task",
    "revision",
    "selection_rank",
    "cores",
    "parameters",
    "packages",
    "exclusion",
    "notes",
    "mode",
    "seq_len",
    "perf_batch",
    "perf_seq_len",
    "perf_io",
    *FORMERLY,
}
MODES = ("inference", "train")
#: Tokens per training sample unless the entry says.
DEFAULT_SEQ_LEN = 128
#: A package as pip names it, with an optional version: never a URL, a path or an option.
_PACKAGE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?([<>=!~]=?[A-Za-z0-9.*+!_-]+)?"
)
_HEADER = re.compile(r"^\s*\[\[\s*model\s*\]\]\s*(#.*)?$")


class ModelListError(Exception):
    """A model list is malformed: each of its :attr:`problems` names the file, line and entry
    (the message is all of them, one a line)."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class ModelSpec:
    """One entry of a model list, validated."""

    id: str
    source: Path
    line: int
    path: str | None = None
    runner: str | None = None
    task: str | None = None
    revision: str | None = None
    selection_rank: int | None = None
    cores: int | None = None
    #: The parameter count the list says (from the Hub's metadata; nothing is downloaded to
    #: know it): the size :mod:`~pytest_neuronsupport.order` orders by before any row exists.
    parameters: int | None = None
    #: Packages installed (into an overlay, never the sweep's environment) for its run.
    packages: tuple[str, ...] = ()
    #: An exclusion decided ahead (its category), and its reason.
    exclusion: str | None = None
    notes: str | None = None
    #: ``"train"``: a training test (:mod:`~pytest_neuronsupport.modes.train`).
    mode: str = "inference"
    #: Tokens per training sample (None: :data:`DEFAULT_SEQ_LEN`).
    seq_len: int | None = None
    #: Benchmark configurations of this model (None: the options').
    perf_batch: tuple[int, ...] | None = None
    perf_seq_len: tuple[int, ...] | None = None
    perf_io: tuple[tuple[int, int], ...] | None = None

    @property
    def is_zoo(self) -> bool:
        return self.id.startswith(ZOO_PREFIX)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def _header_lines(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), start=1) if _HEADER.match(line)]


def _where(source: Path, line: int | None, entry: str, problem: str) -> str:
    """A problem of an entry, named by its file, its line (where known) and the entry."""
    where = f"{source}:{line}" if line else str(source)
    return f"{where}: {entry}: {problem}"


def check_model_id(model_id: str) -> str | None:
    """Return why ``model_id`` is not a valid list id, or None when it is."""
    if model_id.startswith(ZOO_PREFIX):
        return zoo.problem(model_id.removeprefix(ZOO_PREFIX))
    try:
        validate_repo_id(model_id)
    except HFValidationError as exc:
        return f"{model_id!r} is not a valid Hub repo id: {exc}"
    return None


def _entry(raw: Any, source: Path, line: int | None, index: int, runners: Runners) -> ModelSpec:
    """One ``[[model]]`` table, validated: a :class:`ModelSpec`, or an error naming the file,
    the line and the entry, with every problem of the entry."""
    label = f"entry {index}"
    if isinstance(raw, dict) and isinstance(raw.get("id"), str):
        label = f"entry {index} ({raw['id']!r})"
    problems = _value_problems(raw)
    made: dict[str, Any] = {}
    if not problems:  # what needs the plain values right: the path, the runner, perf sizes
        steps: dict[str, Callable[[], Any]] = {
            "path": partial(_local_path, raw.get("path"), source),
            "runner": partial(_runner, raw.get("runner"), runners),
            "perf": partial(_perf_sizes, raw),
        }
        for key, step in steps.items():
            try:
                made[key] = step()
            except ValueError as exc:
                problems.append(str(exc))
    if problems:
        raise ModelListError(*(_where(source, line, label, problem) for problem in problems))
    return ModelSpec(
        id=raw["id"],
        source=source,
        line=line or 0,
        path=made["path"],
        runner=made["runner"],
        task=raw.get("task"),
        revision=raw.get("revision"),
        selection_rank=raw.get("selection_rank"),
        cores=raw.get("cores"),
        parameters=raw.get("parameters"),
        packages=tuple(sorted(set(raw.get("packages", [])))),
        exclusion=raw.get("exclusion"),
        notes=raw.get("notes"),
        mode=raw.get("mode", "inference"),
        seq_len=raw.get("seq_len"),
        **made["perf"],
    )


def _value_problems(raw: Any) -> list[str]:
    """What is wrong with an entry's keys and plain values: every problem, each a sentence."""
    if not isinstance(raw, dict):
        return ["each [[model]] entry must be a table"]
    problems = []
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        problems.append(f"unknown key(s) {', '.join(unknown)}{_meant(unknown)}")
    if "id" not in raw:
        problems.append("missing 'id'")
    for key in ("id", "path", "runner", "task", "revision", "exclusion", "notes"):
        if key in raw and not (isinstance(raw[key], str) and raw[key].strip()):
            problems.append(f"'{key}' must be a non-empty string")
    if raw.get("mode", "inference") not in MODES:
        problems.append(f"'mode' must be one of {MODES}, not {raw['mode']!r}")
    for key in ("selection_rank", "cores", "parameters", "seq_len"):
        value = raw.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            problems.append(f"'{key}' must be a positive integer, not {value!r}")
        elif key == "cores" and value is not None and value & (value - 1):
            problems.append(f"'cores' must be a power of two, not {value}")
    problem = check_model_id(raw["id"]) if isinstance(raw.get("id"), str) else None
    problems += [problem] if problem else []
    packages = raw.get("packages", [])
    if not isinstance(packages, list) or not all(
        isinstance(p, str) and _PACKAGE.fullmatch(p) for p in packages
    ):
        problems.append(
            "'packages' must be a list of package names, each with an optional version "
            f'(like "sentencepiece" or "tiktoken>=0.7"), not {packages!r}'
        )
    return problems


def _meant(unknown: list[str]) -> str:
    """What the unknown keys of an entry were likely meant to be, and the keys allowed (its
    former names, still taken, aside)."""
    known = sorted(_KEYS - set(FORMERLY))
    meant = [
        repr(close[0]) for key in unknown if (close := difflib.get_close_matches(key, known, 1))
    ]
    return (
        f" (did you mean {', '.join(meant)}?)" if meant else ""
    ) + f"; allowed: {', '.join(known)}"


def _perf_sizes(raw: dict[str, Any]) -> dict[str, Any]:
    """The entry's own benchmark sizes (``perf_batch``, ``perf_seq_len``, ``perf_io``; or their
    former keys, :data:`FORMERLY`)."""
    bench: dict[str, Any] = {}
    for key in ("perf_batch", "perf_seq_len", "perf_io"):
        value = raw.get(key, raw.get(FORMERLY_OF[key]))
        if value is None:
            continue
        if not (isinstance(value, list) and value):
            raise ValueError(f"'{key}' must be a non-empty list")
        text = ",".join(str(v) for v in value if not isinstance(v, bool))
        if key == "perf_io":
            bench[key] = parse_io(text)
        else:
            bench[key] = parse_sizes(text) if all(isinstance(v, int) for v in value) else ()
        if not bench[key] or len(bench[key]) != len(value):
            raise ValueError(f"'{key}' = {value!r}: not a list of positive sizes")
    return bench


def _runner(name: str | None, runners: Runners) -> str | None:
    if name is None:
        return None
    try:
        return runners.get(name).name
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None


def _local_path(path: str | None, source: Path) -> str | None:
    """A local ``path``, resolved against the list's folder: a checkpoint folder, or a GGUF
    file (:mod:`~pytest_neuronsupport.pipeline.gguf`); a ``package:`` path as it is."""
    if path is None or path.startswith(PACKAGE_PREFIX):
        return path
    resolved = (source.parent / path).resolve()
    if not (resolved.is_dir() or (resolved.suffix == ".gguf" and resolved.is_file())):
        raise ValueError(f"path {path!r} is not a directory nor a .gguf file ({resolved})")
    return str(resolved)


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"1,16"`` → ``(1, 16)``: positive integers, comma-separated.

    Raises:
        ValueError: something else.
    """
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"{text!r}: expected positive integers like 1,16") from None
    if any(size < 1 for size in sizes):
        raise ValueError(f"{text!r}: sizes must be positive")
    return sizes


def parse_io(text: str) -> tuple[tuple[int, int], ...]:
    """``"128/128,2048/128"`` → ``((128, 128), (2048, 128))``: input/output token lengths; the
    output is at least 2 tokens (TPOT needs two).

    Raises:
        ValueError: something else.
    """
    pairs = []
    for part in text.split(","):
        first, slash, second = part.strip().partition("/")
        if not slash:
            raise ValueError(f"{part!r}: expected INPUT/OUTPUT lengths like 128/128")
        pair = parse_sizes(first)[0], parse_sizes(second)[0]
        if pair[1] < 2:
            raise ValueError(f"{part!r}: at least 2 output tokens (TPOT needs two)")
        pairs.append(pair)
    return tuple(pairs)


def parse(source: Path, runners: Runners | None = None, text: str | None = None) -> list[ModelSpec]:
    """Parse one model list file into specs, in file order; ``runner`` names one of
    ``runners`` (default: the built-in ones).

    Raises:
        ModelListError: with every problem of the list (of each entry, and each id listed twice).
    """
    runners = runners or Runners.builtin()
    entries, lines = _entries(source, text)
    specs: list[ModelSpec] = []
    problems: list[str] = []
    seen: dict[str, ModelSpec] = {}
    for index, raw in enumerate(entries, start=1):
        line = lines[index - 1] if len(lines) == len(entries) else None
        try:
            spec = _entry(raw, source, line, index, runners)
        except ModelListError as exc:
            problems += exc.problems
            continue
        if spec.id in seen:
            label, first = f"entry {index} ({spec.id!r})", seen[spec.id]
            problems.append(_where(source, line, label, f"duplicate id (first at {first.where})"))
            continue
        seen[spec.id] = spec
        specs.append(spec)
    if problems:
        raise ModelListError(*problems)
    return specs


def _entries(source: Path, text: str | None) -> tuple[list[Any], list[int]]:
    """The ``[[model]]`` tables of a list (its ``text``, else its file's), and the line of
    each table's header."""
    if text is None:
        try:
            text = source.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelListError(f"{source}: cannot read model list: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelListError(toml_problem(source, "invalid TOML", exc)) from None
    unknown = sorted(set(data) - {"model"})
    if unknown:
        raise ModelListError(
            f"{source}: unknown top-level key(s) {', '.join(unknown)}: "
            "a model list holds only [[model]] entries"
        )
    entries = data.get("model", [])
    if not isinstance(entries, list):
        raise ModelListError(f"{source}: 'model' must be an array of tables ([[model]])")
    return entries, _header_lines(text)


def toml_problem(source: Path, what: str, exc: tomllib.TOMLDecodeError) -> str:
    """A TOML file's syntax error as ``<file>:<line>: <what>: <error> (column C)``."""
    found = re.fullmatch(r"(.*) \(at line (\d+), column (\d+)\)", str(exc), re.DOTALL)
    if found is None:
        return f"{source}: {what}: {exc}"
    return f"{source}:{found[2]}: {what}: {found[1]} (column {found[3]})"


def check_unique(specs: Iterable[ModelSpec], seen: dict[str, ModelSpec] | None = None) -> None:
    """Refuse a model listed twice (in two files): its rows would overwrite each other.

    ``seen`` carries the specs of the files already checked, and is updated.

    Raises:
        ModelListError: each model listed twice, once a problem.
    """
    seen = {} if seen is None else seen
    problems = []
    for spec in specs:
        first = seen.get(spec.id)
        if first is not None and first.where != spec.where:  # the same file named again is fine
            problems.append(
                f"{spec.where}: {spec.id!r}: duplicate id (also listed at {first.where})"
            )
        seen.setdefault(spec.id, spec)
    if problems:
        raise ModelListError(*problems)


def parse_lists(paths: Iterable[Path], runners: Runners) -> dict[Path, list[ModelSpec]]:
    """The specs of each list (:func:`parse`), none listed in two.

    Raises:
        ModelListError: with every problem of every list.
    """
    lists: dict[Path, list[ModelSpec]] = {}
    problems: list[str] = []
    for path in paths:
        try:
            lists[path] = parse(path, runners)
        except ModelListError as exc:
            problems += exc.problems
    try:
        check_unique(spec for specs in lists.values() for spec in specs)
    except ModelListError as exc:
        problems += exc.problems
    if problems:
        raise ModelListError(*problems)
    return lists


def default_lists(train: bool = False) -> list[Path]:
    """The bundled tiny-model list (``train.toml`` for a training sweep)."""
    return [bundled_dir() / ("train.toml" if train else "tiny.toml")]


def bundled(name: str) -> Path | None:
    """A bundled list by its name (``architectures`` or ``architectures.toml``), if there is one."""
    if "/" in name or "\\" in name:
        return None
    path = bundled_dir() / (name if name.endswith(".toml") else f"{name}.toml")
    return path if path.is_file() else None


def bundled_names() -> list[str]:
    """The names of the bundled lists (``tiny``, ``architectures``...)."""
    data = ("-expected", "-built")  # a baseline and the architecture table: not lists
    return sorted(p.stem for p in bundled_dir().glob("*.toml") if not p.stem.endswith(data))


def resolve_paths(values: Sequence[str], base: Path) -> list[Path]:
    """Model list paths as given (relative to ``base``), each checked to exist; a value that is
    no file there but names a bundled list (``architectures``) is that list."""
    paths: list[Path] = []
    for value in values:
        path = Path(value)
        if not path.is_absolute():
            path = base / path
        if not path.is_file():
            found = bundled(value)
            if found is None:
                raise ModelListError(
                    f"model list {value!r} not found ({path}), and no bundled list has that "
                    f"name (bundled: {', '.join(bundled_names())})"
                )
            path = found
        paths.append(path.resolve())
    return paths
