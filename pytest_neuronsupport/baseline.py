"""Expected results: a baseline file per pair, and each model's result held against it (what
that makes of a model's pytest outcome: :func:`pytest_neuronsupport.outcomes.baseline_outcome`).

As PyTorch's dynamo CI holds each model against its expected-accuracy CSV: a model that passed
and now fails, or fails in another phase, is a **regression**; one that now passes where it
did not is an **improvement**, which also fails a check until the baseline is updated (unless
improvements are allowed), so the baseline never silently goes stale. A model marked flaky is
reported but never fails a check. As dynamo's CI also holds each model's graph breaks, a model
whose graph breaks grow with the same result is a regression too, and one whose breaks shrink an
improvement. The file is TOML, one line per model, so that a reviewer reads a change of
expectations in a diff::

    # Expected results of pytest-neuronsupport ...
    pair = "inductor-2.13.0/transformers-5.24.0"

    [expected]
    "zoo:bert-mlm" = "PASS"
    "zoo:llava" = {result = "PASS", graph_breaks = 2}
    "zoo:t5" = "FAIL(gen)"
    "org/sometimes" = {result = "FAIL(output)", flaky = true}

A model without ``graph_breaks`` (a row without the count, or a baseline written before it was
recorded) is held by its result only.

It is read with the standard library only (``tomllib``; no torch): the plugin, its workers
and the command all read it. It is written with ``tomlkit``, which updates an existing file in
place: ``neuronsupport baseline update`` keeps its comments and the entries that did not
change.
"""

from __future__ import annotations

import contextlib
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pytest_neuronsupport.dataset.durable import atomic_write_text
from pytest_neuronsupport.modellist import toml_problem
from pytest_neuronsupport.pipeline.classify import why_failed
from pytest_neuronsupport.runners.lib.protocol import Result, first_line

if TYPE_CHECKING:
    from tomlkit.items import Comment, Item, SingleKey, Whitespace

__all__ = [
    "Baseline",
    "BaselineError",
    "Comparison",
    "Entry",
    "Expected",
    "Kind",
    "decide",
    "load",
    "read",
    "write",
]

_RESULTS: Final = tuple(member.value for member in Result)


class BaselineError(ValueError):
    """A baseline that cannot be read: each of its :attr:`problems` names the file (and the
    line); the message is all of them, one a line."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


class Kind(StrEnum):
    """How a model's result stands against its expected one."""

    SAME = "same"
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    #: EXCLUDED became FAIL(...), or the other way round: the baseline is stale.
    CHANGED = "changed"
    #: Differs, but the baseline marks the model flaky.
    FLAKY = "flaky"
    #: In the baseline, no result in this sweep (or dataset).
    NOT_RUN = "not run"
    #: A result, not in the baseline.
    NEW = "new"


@dataclass(frozen=True)
class Expected:
    """A model's expected result."""

    result: str
    flaky: bool = False
    #: The graph breaks dynamo took (None: not held).
    graph_breaks: int | None = None


@dataclass(frozen=True)
class Baseline:
    """The expected results of one pair: model id → :class:`Expected`."""

    pair: str
    expected: dict[str, Expected] = field(default_factory=dict)

    @classmethod
    def from_results(
        cls,
        pair: str,
        results: Mapping[str, str],
        previous: Baseline | None = None,
        graph_breaks: Mapping[str, int | None] | None = None,
    ) -> Baseline:
        """The baseline of ``results`` (model → result) and their ``graph_breaks`` (model →
        count, where known), keeping ``previous``'s flaky marks."""
        flaky = {m for m, e in previous.expected.items() if e.flaky} if previous else set()
        breaks = graph_breaks or {}
        return cls(
            pair,
            {m: Expected(r, m in flaky, breaks.get(m)) for m, r in sorted(results.items())},
        )


_HEADER: Final = (
    "Expected results of a pytest-neuronsupport sweep, one line per model.",
    "Written by `neuronsupport baseline update`; a model marked flaky never fails a check:",
    '  "org/model" = {result = "FAIL(gen)", flaky = true}',
)


def _key(model_id: str) -> SingleKey:
    """A model id as the file's key: always quoted, as ids with a ``/`` or ``:`` must be."""
    from tomlkit.items import KeyType, SingleKey

    return SingleKey(model_id, KeyType.Basic)


def _value(expected: Expected) -> Item:
    """``"PASS"``, or ``{result = "PASS", graph_breaks = 2, flaky = true}``."""
    import tomlkit

    if expected.graph_breaks is None and not expected.flaky:
        return tomlkit.string(expected.result)
    table = tomlkit.inline_table()
    table.append("result", expected.result)
    if expected.graph_breaks is not None:
        table.append("graph_breaks", expected.graph_breaks)
    if expected.flaky:
        table.append("flaky", True)
    return table


def text(baseline: Baseline, existing: str | None = None) -> str:
    """The file's text: a header, the pair, then one line per model in id order.

    Given ``existing``, the text of a baseline file, that file updated instead: its comments
    kept, its entries that did not change kept as they are where they are, changed ones
    replaced in place, new ones inserted (before the first entry whose id sorts after theirs)
    and those no longer in ``baseline`` removed. A file that cannot be updated so (not TOML, or
    not only ``pair`` and an ``[expected]`` table of entries) is written afresh.
    """
    import tomlkit

    updated = None if existing is None else _updated(existing, baseline)
    if updated is not None:
        return updated
    document = tomlkit.document()
    for line in _HEADER:
        document.add(tomlkit.comment(line))
    document.add("pair", baseline.pair)
    document.add(tomlkit.nl())
    expected = tomlkit.table()
    for model_id in sorted(baseline.expected):
        expected.add(_key(model_id), _value(baseline.expected[model_id]))
    document.add("expected", expected)
    return tomlkit.dumps(document)


def _updated(existing: str, baseline: Baseline) -> str | None:
    """``existing`` updated to ``baseline`` (see :func:`text`); None: it cannot be."""
    import tomlkit
    import tomlkit.exceptions
    from tomlkit.container import Container
    from tomlkit.items import Comment, InlineTable, String, Table, Whitespace

    try:
        document = tomlkit.parse(existing)
    except tomlkit.exceptions.ParseError:
        return None
    old = document.get("expected", tomlkit.table())
    if set(document) - {"pair", "expected"} or not isinstance(old, Table):
        return None
    body = old.value.body
    if any(k is not None and not isinstance(v, String | InlineTable) for k, v in body):
        return None  # sub-tables ([expected."org/model"]): written afresh
    if document.get("pair") != baseline.pair:
        document["pair"] = baseline.pair
    new = sorted(set(baseline.expected) - {k.key for k, _ in body if k is not None})
    expected = Table(Container(), replace(old.trivia), False)
    waiting: list[Comment | Whitespace] = []  # kept above the entry below them
    for key, item in body:
        if key is None:
            if not isinstance(item, Comment | Whitespace):
                return None
            waiting.append(item)
            continue
        while new and new[0] < key.key:
            model_id = new.pop(0)
            expected.add(_key(model_id), _value(baseline.expected[model_id]))
        for kept in waiting:
            expected.add(kept)
        waiting = []
        wanted = baseline.expected.get(key.key)
        if wanted is None:
            continue  # no longer in the results
        try:
            same = _expected(key.key, item.unwrap()) == wanted
        except BaselineError:
            same = False
        if same:
            expected.add(key, item)
        else:
            replaced = _value(wanted)
            replaced.trivia.comment_ws = item.trivia.comment_ws  # its comment on the line
            replaced.trivia.comment = item.trivia.comment
            expected.add(key, replaced)
    for model_id in new:
        expected.add(_key(model_id), _value(baseline.expected[model_id]))
    for kept in waiting:
        expected.add(kept)
    if "expected" in document:
        document["expected"] = expected
    else:
        document.add("expected", expected)
    return tomlkit.dumps(document)


def write(path: Path, baseline: Baseline) -> None:
    """Write the baseline to ``path`` atomically; an existing file there is updated (its
    comments and unchanged entries kept, see :func:`text`)."""
    path = Path(path)
    try:
        existing: str | None = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        existing = None
    atomic_write_text(path, text(baseline, existing))


def _expected(where: str, value: object) -> Expected:
    """One entry of ``[expected]`` (``where``: its file, line and model), or every problem of
    it."""
    problems = []
    if isinstance(value, dict):
        unknown = set(value) - {"result", "flaky", "graph_breaks"}
        if unknown:
            problems.append(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        flaky = value.get("flaky", False)
        if not isinstance(flaky, bool):
            problems.append(f"{where}: flaky must be true or false, not {flaky!r}")
        breaks = value.get("graph_breaks")
        if breaks is not None and (type(breaks) is not int or breaks < 0):
            problems.append(f"{where}: graph_breaks must be a count, not {breaks!r}")
        result: object = value.get("result")
    else:
        result, flaky, breaks = value, False, None
    if result not in _RESULTS:
        problems.append(f"{where}: result must be one of {', '.join(_RESULTS)}, not {result!r}")
    if problems:
        raise BaselineError(*problems)
    return Expected(str(result), flaky, breaks)


#: A line that sets a key (``"org/model" = ...``) or opens its table (``[expected."org/model"]``).
_KEY_LINE = re.compile(
    r"""\s*(?:\[\s*expected\s*\.\s*)?("(?:[^"\\]|\\.)*"|'[^']*'|[\w-]+)\s*[=\]]"""
)


def _key_lines(text: str) -> dict[str, int]:
    """The line each key of a TOML text is first set (or its table opened) on."""
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        found = _KEY_LINE.match(line)
        if found:
            with contextlib.suppress(tomllib.TOMLDecodeError):  # the key as TOML reads it
                lines.setdefault(next(iter(tomllib.loads(f"{found[1]} = 0"))), number)
    return lines


def read(path: Path) -> Baseline:
    """Read a baseline file.

    Raises:
        BaselineError: missing, not TOML, or with entries that are not results: every problem
            of the file, each naming the file and the line.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data: dict[str, Any] = tomllib.loads(text)
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read the baseline: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise BaselineError(f"{path}: not a baseline file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BaselineError(toml_problem(path, "not a baseline file", exc)) from None
    pair, expected = data.get("pair"), data.get("expected", {})
    if not isinstance(pair, str) or not isinstance(expected, dict):
        raise BaselineError(f'{path}: expected `pair = "..."` and an [expected] table')
    unknown = set(data) - {"pair", "expected"}
    if unknown:
        raise BaselineError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    lines, entries, problems = _key_lines(text), {}, []
    for model, value in expected.items():
        where = f"{path}:{lines[model]}" if model in lines else str(path)
        try:
            entries[model] = _expected(f"{where}: [expected] {model!r}", value)
        except BaselineError as exc:
            problems += exc.problems
    if problems:
        raise BaselineError(*problems)
    return Baseline(pair, entries)


def _failed(result: str) -> bool:
    return result.startswith("FAIL")


def decide(expected: Expected | None, actual: str | None, graph_breaks: int | None = None) -> Kind:
    """How ``actual`` (a result, or None: not run) and its ``graph_breaks`` stand against
    ``expected``: with the same result, more breaks than expected is a regression and fewer
    an improvement (where both counts are known)."""
    if expected is None:
        return Kind.NEW
    if actual is None:
        return Kind.NOT_RUN
    if actual == expected.result:
        known = None not in (expected.graph_breaks, graph_breaks)
        if not known or graph_breaks == expected.graph_breaks:
            return Kind.SAME
        if expected.flaky:
            return Kind.FLAKY
        more = (graph_breaks or 0) > (expected.graph_breaks or 0)
        return Kind.REGRESSION if more else Kind.IMPROVEMENT
    if expected.flaky:
        return Kind.FLAKY
    if actual == Result.PASS:
        return Kind.IMPROVEMENT
    if expected.result == Result.PASS or (_failed(expected.result) and _failed(actual)):
        return Kind.REGRESSION
    return Kind.CHANGED


#: Kinds that fail a check always, and unless improvements are allowed.
FAILING: Final = frozenset({Kind.REGRESSION})
STALE: Final = frozenset({Kind.IMPROVEMENT, Kind.CHANGED})


@dataclass(frozen=True)
class Entry:
    """One model held against the baseline."""

    model_id: str
    expected: str | None
    actual: str | None
    kind: Kind
    #: The first line of the model's error (empty when none).
    error: str = ""
    #: Where the model's run.py is (None when it did not run).
    run_py: Path | None = None
    #: Graph breaks expected and taken, where they changed: ``"graph breaks 0 -> 2"``.
    breaks: str = ""


@dataclass(frozen=True)
class Comparison:
    """Every model of a baseline and of a set of results, and how each stands."""

    baseline: Baseline
    entries: tuple[Entry, ...]
    allow_improvements: bool = False

    def of(self, *kinds: Kind) -> list[Entry]:
        return [entry for entry in self.entries if entry.kind in kinds]

    @property
    def failing(self) -> list[Entry]:
        """The entries that fail the check."""
        kinds = FAILING if self.allow_improvements else FAILING | STALE
        return [entry for entry in self.entries if entry.kind in kinds]

    @property
    def ok(self) -> bool:
        return not self.failing

    def counts(self) -> dict[str, int]:
        """Number of entries of each kind present, in :class:`Kind` order."""
        counts = {kind.value: len(self.of(kind)) for kind in Kind}
        return {kind: count for kind, count in counts.items() if count}

    def lines(self) -> list[str]:
        """The report: a count line, then one line per model that is not the same."""
        verdict = "FAILED" if self.failing else "ok"
        counts = ", ".join(f"{n} {kind}" for kind, n in self.counts().items()) or "empty"
        lines = [f"baseline {self.baseline.pair}: {verdict} ({counts})"]
        for kind in Kind:
            if kind is Kind.SAME:
                continue
            for entry in self.of(kind):
                expected, actual = entry.expected or "-", entry.actual or "not run"
                failing = "  [fails the check]" if entry in self.failing else ""
                line = f"{kind.value:<12} {entry.model_id}: expected {expected}, got {actual}"
                lines.append(line + (f" ({entry.breaks})" if entry.breaks else "") + failing)
                if entry.error:
                    lines.append(f"{'':<12}   {entry.error}")
                if entry.run_py is not None:
                    lines.append(f"{'':<12}   run.py: {entry.run_py}")
        return lines


def compare(
    baseline: Baseline,
    rows: Iterable[Mapping[str, Any]],
    *,
    run_py: Mapping[str, Path] | None = None,
    allow_improvements: bool = False,
) -> Comparison:
    """Hold rows (one per model: ``model_id``, ``result``, ``error``, ``graph_breaks``)
    against ``baseline``.

    Models of the baseline without a row are :attr:`Kind.NOT_RUN`; rows of models not in it
    are :attr:`Kind.NEW`. ``run_py`` maps model ids to their run.py.
    """
    by_model = {str(row["model_id"]): row for row in rows}
    entries = []
    for model_id in sorted(set(by_model) | set(baseline.expected)):
        expected, row = baseline.expected.get(model_id), by_model.get(model_id)
        actual = None if row is None else str(row["result"])
        error = "" if row is None else first_line(why_failed(row), 200)
        breaks = None if row is None else row.get("graph_breaks")
        entries.append(
            Entry(
                model_id,
                expected.result if expected else None,
                actual,
                decide(expected, actual, breaks),
                error if actual is not None and _failed(actual) else "",
                (run_py or {}).get(model_id),
                breaks_change(expected, breaks),
            )
        )
    return Comparison(baseline, tuple(entries), allow_improvements)


def breaks_change(expected: Expected | None, graph_breaks: int | None) -> str:
    """``"graph breaks 0 -> 2"`` when both counts are known and differ, else ``""``."""
    if expected is None or None in (expected.graph_breaks, graph_breaks):
        return ""
    if expected.graph_breaks == graph_breaks:
        return ""
    return f"graph breaks {expected.graph_breaks} -> {graph_breaks}"


def load(path: Path | None, uri: str | None = None) -> Baseline | None:
    """The baseline a sweep is held against: the file at ``uri`` (``hf://...``, downloaded
    through the Hub's client) if given, else at ``path``; None when neither is. Raises
    :class:`BaselineError` when it cannot be read, or downloaded."""
    if uri is not None:
        from pytest_neuronsupport.dataset.stores.hub import HubError, download_file

        try:
            path = download_file(uri)
        except (HubError, ValueError) as exc:
            raise BaselineError(f"--neuron-baseline: {exc}") from None
    return None if path is None else read(path)
