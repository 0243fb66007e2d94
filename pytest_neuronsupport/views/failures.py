"""``neuronsupport failures``: a pair's failed rows grouped by cause, the list a compiler team
works down.

A failed row is one whose result is ``FAIL(...)`` (PASS and EXCLUDED are not failures). Its
:class:`Cause` is the exception type plus where it happened:

* **The exception type** is read from ``error``, whose first line is ``Type: message`` (the
  dotted module path of a type is dropped). Wrappers are unwrapped and kept only as context:
  dynamo's ``BackendCompilerFailed: backend='...' raised:`` (the next line is the backend's own
  exception), inductor's ``InductorError: Inner: ...`` and ``LoweringException: Inner: ...``
  (whose ``target:`` line names the op). A prefix ``rank N of M`` is dropped; a Python
  traceback counts by its last exception line. A run that ended without a verdict
  (FAIL(other)) has the way it ended as its type: ``killed by SIGKILL``, ``timed out``,
  ``exited with status N`` (the exception it printed, if any, counts instead, the exit as
  context), ``exceeded the memory limit``, ``xdist worker died``. A FAIL(output) without an
  error has ``wrong output``.
* **Where**, the first of:

  1. the failing op: the last op of the row's minified repro (``repro_ops``), which is its only
     op when it shrank to one (the minifier cuts every op after the failing one: the op whose
     compilation raised or whose output differs is the last it keeps); else the ``target:``
     of an inductor lowering failure;
  2. ``error_site``, the first frame inside the compiler (not for dynamo's ``Unsupported``, a
     graph break: dynamo raises every break from the same frames, so its reason, the message,
     says where);
  3. for a run that ended without a verdict, its phase (``during gen``);
  4. the message's first line, normalised so that the same bug in two models reads the same:
     the model's id (and its last part) become ``<model>``, quoted and absolute paths
     ``<path>``, hex addresses ``<hex>``, numbers (not those inside a name like ``float32``)
     ``<n>``, and sizes (``2.00 GiB``, ``512 MiB``) ``<size>``.

Within a pair, a row without a repro whose cause is at its ``error_site`` joins the op of the
rows with the same exception and ``error_site`` when they all name one op (a minifier that ran
out of time must not split a group). Groups come most models first (ties: by cause text); each
names a representative repro: the group's row with a ``repro_py`` and the fewest
``repro_ops_after`` (ties: by model id), at ``<run dir>/repro.py`` when that file exists.

Plugin side: this module never imports torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from packaging.version import InvalidVersion, Version

from pytest_neuronsupport.dataset.layout import DATA, run_dir
from pytest_neuronsupport.runners.lib.protocol import RANK_PREFIX, Result, first_line
from pytest_neuronsupport.views.bisections import (
    Bisections,
    by_release,
    pair_bisections,
    release_of,
    said_of,
)
from pytest_neuronsupport.views.lookup import PairError, latest_rows, pairs, resolve_pair

__all__ = [
    "Cause",
    "FailedModel",
    "FailureGroup",
    "Repro",
    "cause_of",
    "format_groups",
    "group_failures",
    "is_failure",
    "newest_pair",
    "normalise_message",
    "pair_failures",
]

Where = Literal["op", "site", "phase", "message", ""]

NO_REPRO: Final = "no repro: rerun with --neuron-minify"
"""What a group without any repro says instead of one."""

_MESSAGE_LIMIT: Final = 200
_PARQUET: Final = ".parquet"
_TYPE: Final = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$", re.DOTALL)
_TYPE_SUFFIXES: Final = ("Error", "Exception", "Interrupt", "Exit", "Failed")
_BACKEND: Final = re.compile(r"^(backend=.*?) raised:\s*$")
_TARGET: Final = re.compile(r"^\s*target:\s*(\S+)", re.MULTILINE)
_GRAPH_BREAKS: Final = frozenset({"Unsupported"})
_WRAPPERS: Final = frozenset({"InductorError", "LoweringException"})
_OPERATOR_ISSUES: Final = frozenset(
    {"LoweringException", "MissingOperatorWithoutDecomp", "MissingOperatorWithDecomp"}
)
_KILLED: Final = re.compile(r"^(?:was )?killed by (?P<signal>\S+)")
_EXITED: Final = re.compile(r"^(?:exited with status|exit status) (?P<code>-?\d+)")
_PHASE: Final = re.compile(r" during (?P<phase>[\w.-]+)")
_ENDINGS: Final = (
    (re.compile(r"^timed out after\b"), "timed out"),
    (re.compile(r"^exceeded the memory limit\b"), "exceeded the memory limit"),
    (re.compile(r"^the xdist worker running it died\b"), "xdist worker died"),
)
_OURS: Final = "pytest-neuronsupport could not run it: "
_QUOTED_PATH: Final = re.compile(r"""(['"])[^'"\n]*[/\\][^'"\n]*\1""")
_PATH: Final = re.compile(r"(?<![\w.])(?:[A-Za-z]:\\|~?/)[\w.+@~-]+(?:[/\\][\w.+@~-]*)+")
_HEX: Final = re.compile(r"\b0x[0-9a-fA-F]+\b")
_NUMBER: Final = re.compile(r"(?<![\w<])\d+(?:\.\d+)*(?:[eE][-+]?\d+)?")
_SIZE: Final = re.compile(r"<n> ?(?:[KMGTP]i?B|bytes|B)\b")
_SPACES: Final = re.compile(r"\s+")


@dataclass(frozen=True)
class Cause:
    """Why a row failed: the exception type (or how the run ended) and where.

    Two causes are equal when their :attr:`key` is; ``context`` (the wrapper the exception came
    through, e.g. ``BackendCompilerFailed backend='neuron'``) is shown but not compared.
    """

    exception: str
    where: Where = ""
    place: str = ""
    context: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        """A stable identity of the cause: ``exception|where|place``."""
        return f"{self.exception}|{self.where}|{self.place}"

    @property
    def text(self) -> str:
        """How people read it: ``NotImplementedError at op torch._C._nn.linear``..."""
        if self.where == "op":
            text = f"{self.exception} at op {self.place}"
        elif self.where == "site":
            text = f"{self.exception} in {self.place}"
        elif self.where == "phase":
            text = f"{self.exception} during {self.place}"
        elif self.where == "message" and self.place:
            text = f"{self.exception}: {self.place}"
        else:
            text = self.exception
        return f"{text} (through {self.context})" if self.context else text


@dataclass(frozen=True)
class FailedModel:
    """One failed model of a group."""

    model_id: str
    result: str
    notes: str
    #: What bisecting it found (``broke in transformers 5.25.0 (last passing 5.24.0)``), and
    #: the release that broke it (``transformers 5.25.0``); empty: not bisected.
    broke_in: str = ""
    release: str = ""


@dataclass(frozen=True)
class Repro:
    """A group's representative reproducer: whose it is, its ops, where it is on disk (None:
    not there, the row's ``repro_py`` holds its text)."""

    model_id: str
    ops: int | None
    path: Path | None


@dataclass(frozen=True)
class FailureGroup:
    """The failed models of one pair that share a cause, and a repro for them (or None)."""

    cause: Cause
    models: tuple[FailedModel, ...]
    repro: Repro | None

    def as_json(self) -> dict[str, Any]:
        """A plain dict for JSON: the cause (text, key, parts), the models, the repro."""
        repro = self.repro
        return {
            "cause": self.cause.text,
            "key": self.cause.key,
            "exception": self.cause.exception,
            "where": self.cause.where,
            "place": self.cause.place,
            "context": self.cause.context,
            "count": len(self.models),
            "models": [dataclasses.asdict(model) for model in self.models],
            "repro": None
            if repro is None
            else {
                "model_id": repro.model_id,
                "ops": repro.ops,
                "path": None if repro.path is None else str(repro.path),
            },
        }


def is_failure(result: object) -> bool:
    """Whether a row's result is a failure (``FAIL(...)``)."""
    return isinstance(result, str) and result.startswith("FAIL")


def normalise_message(text: str, model_id: str = "") -> str:
    """The first line of ``text``, with what differs between models of one bug replaced.

    The model's id and its last part (after ``/`` or ``:``, 3 characters or more) become
    ``<model>``, quoted paths and absolute paths ``<path>``, hex addresses ``<hex>``, numbers
    that are not part of a name ``<n>`` and sizes (``2.00 GiB``) ``<size>``; spaces are
    collapsed and the line cut to 200 characters.
    """
    line = first_line(text, 10_000)
    names = {model_id, re.split(r"[/:]", model_id)[-1]} if model_id else set()
    for name in sorted((n for n in names if len(n) >= 3), key=len, reverse=True):
        pattern = rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])"
        line = re.sub(pattern, "<model>", line)
    line = _QUOTED_PATH.sub(r"\1<path>\1", line)
    line = _PATH.sub("<path>", line)
    line = _HEX.sub("<hex>", line)
    line = _SIZE.sub("<size>", _NUMBER.sub("<n>", line))
    return first_line(_SPACES.sub(" ", line).strip(), _MESSAGE_LIMIT)


def _exception_line(text: str) -> tuple[str, str] | None:
    """``(type, message)`` of ``Type: message`` (the message may span lines), else None."""
    match = _TYPE.match(text)
    if match is None:
        return None
    name, message = match["type"].rsplit(".", 1)[-1], match["message"]
    if not name[:1].isupper() or (message is None and not name.endswith(_TYPE_SUFFIXES)):
        return None
    return name, message or ""


def _last_traceback_line(text: str) -> str:
    """The exception line of a Python traceback: its last line not indented."""
    lines = [line for line in text.splitlines()[1:] if line and not line[0].isspace()]
    return lines[-1] if lines else text


@dataclass(frozen=True)
class _Parsed:
    exception: str
    message: str
    context: tuple[str, ...] = ()
    lowering: str = ""
    phase: str = ""
    ending: bool = False


def _unwrap(name: str, message: str, context: tuple[str, ...]) -> _Parsed:
    """The innermost exception of dynamo's and inductor's wrappers, the wrappers as context;
    the op of inductor's ``target:`` line, at any level."""
    lowering = ""
    while True:
        target = _TARGET.search(message) if name in _OPERATOR_ISSUES else None
        lowering = lowering or (target[1] if target else "")
        if name == "BackendCompilerFailed":
            head, _, rest = message.partition("\n")
            backend = _BACKEND.match(head.strip())
            if backend is None:
                break
            context, inner_text = (*context, f"BackendCompilerFailed {backend[1]}"), rest.strip()
        elif name in _WRAPPERS:
            context, inner_text = (*context, name), message.strip()
        else:
            break
        inner = _exception_line(inner_text)
        if inner is None:
            break
        name, message = inner
    return _Parsed(name, message, context, lowering)


def _parse_error(text: str) -> _Parsed | None:
    """The exception (or the way the run ended) an ``error`` text names; None: neither."""
    text = text.strip()
    if rank := RANK_PREFIX.match(text):
        text = text[rank.end() :]
    context: tuple[str, ...] = ()
    if text.startswith(_OURS):
        text, context = text.removeprefix(_OURS), ("pytest-neuronsupport",)
    if text.startswith("Traceback (most recent call last)"):
        text = _last_traceback_line(text)
    head = first_line(text, 10_000)
    phase = _PHASE.search(head.split(": ", 1)[0])
    during = phase["phase"] if phase else ""
    killed, exited = _KILLED.match(head), _EXITED.match(head)
    if killed:
        return _Parsed(f"killed by {killed['signal']}", "", context, phase=during, ending=True)
    if exited:
        ending = f"exited with status {exited['code']}"
        printed = head.split(": ", 1)[1] if ": " in head else ""
        found = _exception_line(printed) if printed else None
        if found:
            return _unwrap(*found, (*context, ending))
        return _Parsed(ending, "", context, phase=during, ending=True)
    for pattern, name in _ENDINGS:
        if pattern.match(head):
            return _Parsed(name, "", context, phase=during, ending=True)
    found = _exception_line(text)
    return None if found is None else _unwrap(*found, context)


def _repro_op(row: Mapping[str, Any]) -> str:
    ops = row.get("repro_ops") or []
    return str(ops[-1]) if row.get("repro_py") and ops else ""


def cause_of(row: Mapping[str, Any]) -> Cause:
    """The cause of one failed row (see the module's documentation for the rules)."""
    model_id = str(row.get("model_id") or "")
    error = row.get("error") or ""
    parsed = _parse_error(error) if error else None
    if parsed and str(row.get("notes") or "").startswith(_OURS) and not parsed.context:
        parsed = dataclasses.replace(parsed, context=("pytest-neuronsupport",))
    if parsed is None and row.get("result") == Result.FAIL_OUTPUT:
        english = row.get("english") == "N"
        why = row.get("cpu_match") or ("the judge: not English" if english else row.get("notes"))
        parsed = _Parsed("wrong output", str(why or ""))
    elif parsed is None:
        parsed = _Parsed("error", str(error or row.get("notes") or ""))
    context = "; ".join(parsed.context)
    op = _repro_op(row) or parsed.lowering
    site = row.get("error_site") or ""
    if op:
        return Cause(parsed.exception, "op", op, context)
    if site and parsed.exception not in _GRAPH_BREAKS:
        return Cause(parsed.exception, "site", str(site), context)
    if parsed.ending:
        return Cause(parsed.exception, "phase" if parsed.phase else "", parsed.phase, context)
    message = normalise_message(parsed.message, model_id)
    return Cause(parsed.exception, "message" if message else "", message, context)


def _repro(
    rows: Sequence[Mapping[str, Any]], results: Path | None, pair: str | None
) -> Repro | None:
    """The row with a ``repro_py`` and the fewest ops left (ties: by model id), as a Repro."""
    with_repro = [row for row in rows if row.get("repro_py")]
    if not with_repro:
        return None

    def fewest(row: Mapping[str, Any]) -> tuple[float, str]:
        ops = row.get("repro_ops_after")
        return (math.inf if ops is None else float(ops), str(row["model_id"]))

    best = min(with_repro, key=fewest)
    path = None
    if results is not None and pair is not None:
        candidate = run_dir(results, pair, str(best["model_id"])) / "repro.py"
        path = candidate if candidate.is_file() else None
    return Repro(str(best["model_id"]), best.get("repro_ops_after"), path)


def group_failures(
    rows: Iterable[Mapping[str, Any]],
    results: Path | None = None,
    pair: str | None = None,
    bisections: Bisections | None = None,
) -> list[FailureGroup]:
    """The failed rows among ``rows`` (one pair's, one per model) grouped by :func:`cause_of`.

    Most models first, ties by cause text; in a group, models by id. With ``results`` and
    ``pair`` (``compiler-v/library-v.parquet``), a repro's path is looked up on disk; with
    ``bisections`` (the pair's), each model says what bisecting it found.
    """
    found = bisections or {}
    failed = sorted(
        (row for row in rows if is_failure(row.get("result"))), key=lambda r: str(r["model_id"])
    )
    causes = [cause_of(row) for row in failed]
    ops_at: dict[tuple[str, str], set[str]] = {}
    for row, cause in zip(failed, causes, strict=True):
        if cause.where == "op" and row.get("error_site"):
            ops_at.setdefault((cause.exception, str(row["error_site"])), set()).add(cause.place)
    for i, cause in enumerate(causes):
        ops = ops_at.get((cause.exception, cause.place), set()) if cause.where == "site" else set()
        if len(ops) == 1:
            causes[i] = dataclasses.replace(cause, where="op", place=next(iter(ops)))
    grouped: dict[str, tuple[Cause, list[Mapping[str, Any]]]] = {}
    for row, cause in zip(failed, causes, strict=True):
        grouped.setdefault(cause.key, (cause, []))[1].append(row)
    groups = [
        FailureGroup(
            cause,
            tuple(
                FailedModel(
                    str(r["model_id"]),
                    str(r["result"]),
                    first_line(r.get("notes"), 200),
                    said_of(found.get(str(r["model_id"]), [])),
                    release_of(found.get(str(r["model_id"]), [])),
                )
                for r in members
            ),
            _repro(members, results, pair),
        )
        for cause, members in grouped.values()
    ]
    return sorted(groups, key=lambda g: (-len(g.models), g.cause.text, g.cause.key))


def _version_key(text: str) -> tuple[int, Any]:
    try:
        return (1, Version(text))
    except InvalidVersion:
        return (0, text)


def _name_and_version(part: str) -> tuple[str, str]:
    """``inductor-2.13.0`` → ``("inductor", "2.13.0")``: the version starts at the first
    ``-`` followed by a digit."""
    match = re.match(r"^(.*?)-(\d.*)$", part)
    return (match[1], match[2]) if match else (part, "")


def newest_pair(results: Path) -> str:
    """The pair (``.../x.parquet`` relative to ``data/``) of the newest compiler version, then
    library version, as ``lookup`` orders pairs (ties: by name).

    Raises:
        PairError: the dataset has no pair.
    """
    known = pairs(results)
    if not known:
        raise PairError(f"no pair in {Path(results) / DATA}: the dataset has no data file")

    def newest(pair: str) -> tuple[Any, ...]:
        compiler, library = (_name_and_version(part)[1] for part in pair.split("/"))
        return (_version_key(compiler), _version_key(library), pair)

    return max(known, key=newest) + _PARQUET


def pair_failures(results: Path, pair: str | None = None) -> tuple[str, list[FailureGroup]]:
    """The failure groups of a pair's latest rows (default: :func:`newest_pair`), with the pair.

    Raises:
        PairError: no such pair (the message lists those there are), or no pair at all.
    """
    resolved = newest_pair(results) if pair is None else resolve_pair(results, pair)
    rows = latest_rows(results, resolved).values()
    bisections = pair_bisections(results, resolved)
    return resolved, group_failures(rows, results, resolved, bisections)


def _repro_line(repro: Repro | None) -> str:
    if repro is None:
        return NO_REPRO
    ops = "" if repro.ops is None else f", {repro.ops} op{'' if repro.ops == 1 else 's'}"
    if repro.path is None:
        return f"repro: in the row of {repro.model_id} (repro_py{ops}); no repro.py here"
    return f"repro: {repro.path}  ({repro.model_id}{ops})"


def format_groups(groups: Sequence[FailureGroup], pair: str, fmt: str = "text") -> str:
    """``json`` (a list of groups, :meth:`FailureGroup.as_json`) or ``text``: a header, then
    one block per group: ``N models  <cause>``, the models with their results, the repro."""
    if fmt == "json":
        return json.dumps([group.as_json() for group in groups], indent=2) + "\n"
    name = pair.removesuffix(_PARQUET)
    failed = sum(len(group.models) for group in groups)
    if not groups:
        return f"no failures in {name}\n"
    lines = [f"{failed} failed model(s) of {name} in {len(groups)} group(s), most models first"]
    for group in groups:
        count = len(group.models)
        lines.append("")
        lines.append(f"{count} model{'' if count == 1 else 's'}  {group.cause.text}")
        width = max(len(model.model_id) for model in group.models)
        lines.extend(
            f"    {m.model_id:<{width}}  {m.result}" + (f"  {m.broke_in}" if m.broke_in else "")
            for m in group.models
        )
        lines.append(f"  {_repro_line(group.repro)}")
    releases = {m.model_id: m.release for group in groups for m in group.models}
    if any(releases.values()):
        lines += ["", "new failures by the release that broke them (neuronsupport bisect):"]
        lines += [f"  {release}: {', '.join(models)}" for release, models in by_release(releases)]
    return "\n".join(lines) + "\n"
