"""``neuronsupport lookup`` and ``diff``: a model's rows over every pair, and two pairs' changes.

Pairs are named as their file under ``<results>/data`` (``inductor-2.13.0/transformers-5.24.0``,
with or without ``.parquet``, with or without a leading ``data/`` or results folder). Two pairs
are compared like with like: ``diff`` sets results against each other over the models with a row
in both, and lists the models of one pair only apart (:func:`split_models`, which the dashboard
uses too); and it says when the two pairs' CPU references came from different kinds of host
(:func:`host_kind`: the CPU and oneDNN's ISA), a change of host and not of compiler.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from pytest_neuronsupport.dataset.files import latest_positions, read_table
from pytest_neuronsupport.dataset.layout import DATA, check_relpath, data_files, run_py_path
from pytest_neuronsupport.dataset.support import HOST_KIND
from pytest_neuronsupport.pipeline.classify import (
    own_error,
    result_text,
    unchecked_kind,
    why_failed,
)
from pytest_neuronsupport.progress import duration
from pytest_neuronsupport.runners.lib.protocol import Result, first_line
from pytest_neuronsupport.views.bisections import bisected, bisected_range, said

__all__ = [
    "Change",
    "Diff",
    "PairError",
    "Split",
    "diff",
    "format_changes",
    "fullgraph_of",
    "fullgraph_warning",
    "host_kind",
    "hosts_apart",
    "hosts_text",
    "latest_rows",
    "lookup",
    "natural_key",
    "pairs",
    "resolve_pair",
    "split_models",
]

_PARQUET = ".parquet"


class PairError(ValueError):
    """A pair that names no data file; the message lists the pairs there are."""


def pairs(results: Path) -> list[str]:
    """The pairs of a dataset: ``compiler-version/library-version``, sorted."""
    data = Path(results) / DATA
    return [
        path.relative_to(data).as_posix().removesuffix(_PARQUET) for path in data_files(results)
    ]


def resolve_pair(results: Path, name: str) -> str:
    """The pair path (``.../x.parquet`` relative to ``data/``) that ``name`` means.

    Raises:
        PairError: no such pair in the dataset (the message lists those there are).
    """
    text = name.replace("\\", "/").strip("/")
    for prefix in (Path(results).as_posix().strip("/") + "/", "data/"):
        text = text.removeprefix(prefix)
    text = text if text.endswith(_PARQUET) else text + _PARQUET
    known = pairs(results)
    try:
        check_relpath(text)
    except ValueError:
        pass
    else:
        if text.removesuffix(_PARQUET) in known:
            return text
    raise PairError(
        f"no pair {name!r} in {Path(results) / DATA}; pairs there: {', '.join(known) or 'none'}"
    )


def latest_rows(results: Path, pair: str) -> dict[str, dict[str, Any]]:
    """model_id → its latest row in one pair's file."""
    table = read_table(Path(results) / DATA / pair)
    rows = table.to_pylist()
    return {model: rows[position] for model, position in latest_positions(table).items()}


def natural_key(text: str) -> list[str | int]:
    """Sort key that orders version numbers as numbers (``2.9`` before ``2.13``): the order
    of pairs on the page and in ``coverage``, compiler by compiler, oldest version first."""
    return [int(part) if i % 2 else part.lower() for i, part in enumerate(re.split(r"(\d+)", text))]


def _version_key(text: str | None) -> tuple[int, Any]:
    try:
        return (1, Version(text or ""))
    except InvalidVersion:
        return (0, text or "")


def phases_line(row: Mapping[str, Any]) -> str | None:
    """Where a row's time went: its phase times (seconds, one decimal) and what its compile
    cache did (``2 cached, 0 compiled``); None for a row without them."""
    names = ("load_s", "compile_s", "generate_s", "forward_s", "reference_s")
    parts = [f"{n.removesuffix('_s')} {row[n]:.1f}s" for n in names if row.get(n) is not None]
    if not parts:
        return None
    cached, fresh = row.get("graphs_cached"), row.get("graphs_compiled")
    if cached is not None or fresh is not None:
        known = ("?" if v is None else str(v) for v in (cached, fresh))
        parts.append("graphs: {} cached, {} compiled".format(*known))
    return "time: " + ", ".join(parts)


def _memory(row: Mapping[str, Any]) -> str:
    peak, capacity = row.get("hbm_peak_gb"), row.get("hbm_capacity_gb")
    if peak is None:
        return "-"
    return f"{peak:.2f}/{capacity:.0f} GB" if capacity else f"{peak:.2f} GB"


def lookup(results: Path, model: str) -> list[str]:
    """Every recorded row of the models whose id contains ``model`` (case-insensitive).

    One block per model; in it one line per pair, newest compiler first: pair, result, cores,
    wall time, peak memory against capacity, the start of ``notes`` or ``error``, and where
    the run.py is; a PASS whose output was compared with nothing is ``PASS unchecked``, with
    why, one whose run compiled no graph ``PASS compiled nothing``, and one that ran operators
    on the CPU ``PASS, 3 operators on the CPU`` (named on a line of their own), and what a
    bisection found of it there (``bisected: broke in transformers 5.25.0 (last passing
    5.24.0)``, :mod:`.bisections`). No match gives a single line saying so.
    """
    needle = model.lower()
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for pair in pairs(results):
        for model_id, row in latest_rows(results, pair + _PARQUET).items():
            if needle in model_id.lower():
                found.setdefault(model_id, []).append((pair, row))
    if not found:
        return [f"no model matching {model!r} in {Path(results) / DATA}"]
    bisections = bisected(results)
    lines: list[str] = []
    for model_id in sorted(found):
        lines.append(model_id)
        entries = sorted(
            found[model_id],
            key=lambda e: (
                _version_key(e[1].get("compiler_version")),
                _version_key(e[1].get("library_version")),
                e[0],
            ),
            reverse=True,
        )
        for pair, row in entries:
            wall = "-" if row.get("wall_s") is None else duration(row["wall_s"])
            why = first_line(own_error(row.get("error")) or row.get("notes"), 100)
            result, kind = result_text(row), unchecked_kind(row)
            if kind is not None and result.startswith(f"{Result.PASS} unchecked"):
                why = f"({kind}) {why or ''}".rstrip()
            lines.append(
                f"  {pair:<40} {result:<13} cores={row.get('neuron_cores') or '-'} "
                f"wall={wall} mem={_memory(row)}" + (f"  {why}" if why else "")
            )
            if (times := phases_line(row)) is not None:
                lines.append(f"  {'':<40} {times}")
            if row.get("cpu_ops"):
                lines.append(f"  {'':<40} on the CPU: {', '.join(row['cpu_ops'])}")
            for done in bisections.get(pair + _PARQUET, {}).get(model_id, []):
                lines.append(f"  {'':<40} bisected {bisected_range(done)}: {said(done)}")
            script = run_py_path(results, pair + _PARQUET, model_id)
            lines.append(f"  {'':<40} run.py: {script if script.is_file() else '(not here)'}")
    return lines


@dataclass(frozen=True)
class Split:
    """Two pairs' models, set apart: those in both, those only in the first (``a``), those only
    in the second (``b``); each sorted as the page sorts them (:func:`natural_key`)."""

    both: list[str]
    only_a: list[str]
    only_b: list[str]


def split_models(a: Iterable[str], b: Iterable[str]) -> Split:
    """The models of two pairs in both and in one only: what a like-with-like comparison of
    two pairs is made over (``both``), and what it lists apart."""
    set_a, set_b = set(a), set(b)
    return Split(
        both=sorted(set_a & set_b, key=natural_key),
        only_a=sorted(set_a - set_b, key=natural_key),
        only_b=sorted(set_b - set_a, key=natural_key),
    )


@dataclass(frozen=True)
class Change:
    """A model whose result differs between two pairs, or that has a row in only one of them
    (None: no row in that pair; ``only_in``: ``a`` or ``b`` for such a model, else None)."""

    model_id: str
    result_a: str | None
    result_b: str | None
    error_a: str
    error_b: str
    only_in: str | None = None
    #: Which side of the float64 check moved between the two rows (:func:`moved`).
    moved: str = ""
    #: The kinds of host of the two rows' references, where they differ (``a -> b``).
    reference_hosts: str = ""


#: A float64 error that changed by more than this factor between two rows has moved.
MOVED_FACTOR = 1.5


def moved(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """Which side of the float64 check moved from row ``a`` to row ``b`` of one model: the
    reference (the CPU eager run's error in the device's dtype, the noise the device is held
    to: a new dtype, library or reference), the device's error, or both; by more than
    :data:`MOVED_FACTOR` either way. Empty where a row has no float64 numbers, or neither moved."""
    said, sides = [], (("fp64_error_eager", "the reference"), ("fp64_error_device", "the device"))
    for column, side in sides:
        before, after = a.get(column), b.get(column)
        if before is None or after is None:
            return ""
        if max(before, after) > MOVED_FACTOR * min(before, after):
            way = "grew" if after > before else "shrank"
            said.append(f"{side}'s error to fp64 {way}, {before:.3g} -> {after:.3g}")
    return "; ".join(said)


def fullgraph_of(rows: Iterable[Mapping[str, Any]]) -> bool | None:
    """A pair's ``fullgraph`` policy: the one value its rows record (None: none records one,
    as files written before the column existed, or they differ)."""
    said = {row.get("fullgraph") for row in rows} - {None}
    return bool(said.pop()) if len(said) == 1 else None


def fullgraph_warning(policies: Mapping[str, bool | None]) -> str | None:
    """A warning when pairs (label → its :func:`fullgraph_of`) compiled under different
    ``fullgraph`` policies (a Neuron pair against a CPU or CUDA one): a graph break fails a
    model under ``True`` and passes under ``False``, so a change between them may be the
    policy's, not the compiler's. None when they agree, or where a pair does not say."""
    known = {label: policy for label, policy in policies.items() if policy is not None}
    if len(set(known.values())) < 2:
        return None
    under = {
        flag: ", ".join(p for p, policy in known.items() if policy is flag)
        for flag in known.values()
    }
    return (
        f"warning: the pairs compiled under different fullgraph policies (fullgraph=True: "
        f"{under[True]}; fullgraph=False: {under[False]}): a graph break fails a model under "
        "fullgraph=True (FAIL(gen), FAIL(forward)) and passes under False, so a change between "
        "them may be the policy's, not the compiler's"
    )


def host_kind(row: Mapping[str, Any]) -> str | None:
    """The kind of host that computed a row's CPU reference: its CPU and oneDNN's ISA there
    (``AMD EPYC, Intel AVX2``); None for a row without them (no reference, an older file)."""
    parts = [str(row[column]) for column in HOST_KIND if row.get(column)]
    return ", ".join(parts) or None


def hosts_apart(a: Iterable[str | None], b: Iterable[str | None]) -> str:
    """Empty when two sets of rows' references (each row's :func:`host_kind`) came from the
    same kinds of host (rows without one aside); else each side's kinds, with how many rows
    each: ``a: X (12). b: Y (10)``."""
    kinds = [Counter(kind for kind in side if kind is not None) for side in (a, b)]
    if not all(kinds) or set(kinds[0]) == set(kinds[1]):
        return ""
    return "a: {}. b: {}".format(*(hosts_text(found) for found in kinds))


def hosts_text(kinds: Mapping[str, int]) -> str:
    """Kinds of host with how many rows each: ``AMD EPYC, Intel AVX2 (12); ...``."""
    return "; ".join(f"{kind} ({n})" for kind, n in sorted(kinds.items()))


@dataclass(frozen=True)
class Diff:
    """Two pairs compared like with like: the result changes over the models with a row in both
    (:attr:`in_both` of them), and the models with a row in only one, listed apart; and a
    :attr:`warning` when the two compiled under different ``fullgraph`` policies."""

    in_both: int
    changes: list[Change]
    only_a: list[Change]
    only_b: list[Change]
    warning: str | None = None
    #: The kinds of host the two pairs' references came from, where they differ over the
    #: models in both (:func:`hosts_apart`).
    reference_hosts: str = ""

    def records(self) -> list[dict[str, Any]]:
        """Every entry as a record: the changes, then the models only in a, then only in b;
        each with ``only_in`` and ``in_both`` (the models the changes are taken over)."""
        entries = [*self.changes, *self.only_a, *self.only_b]
        both = {"in_both": self.in_both, "pair_reference_hosts": self.reference_hosts}
        return [{**asdict(entry), **both} for entry in entries]


def _change(model_id: str, a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> Change:
    result_a, result_b = (None if r is None else str(r["result"]) for r in (a, b))
    error_a, error_b = (first_line(why_failed(r or {}), 200) for r in (a, b))
    only_in = "a" if b is None else "b" if a is None else None
    shift = moved(a, b) if a is not None and b is not None else ""
    hosts = hosts_apart([host_kind(a)], [host_kind(b)]) if a is not None and b is not None else ""
    return Change(model_id, result_a, result_b, error_a, error_b, only_in, shift, hosts)


def diff(results: Path, pair_a: str, pair_b: str) -> Diff:
    """The models whose result differs between two pairs, over the models with a row in both
    (an ``EXCLUDED`` row is a row: a change to or from it is a change), by model id; the models
    with a row in only one pair are listed apart, never as a change.

    Raises:
        PairError: a pair that names no data file.
    """
    rows_a = latest_rows(results, resolve_pair(results, pair_a))
    rows_b = latest_rows(results, resolve_pair(results, pair_b))
    split = split_models(rows_a, rows_b)
    changes = [_change(m, rows_a[m], rows_b[m]) for m in split.both]
    policies = {pair_a: fullgraph_of(rows_a.values()), pair_b: fullgraph_of(rows_b.values())}
    return Diff(
        in_both=len(split.both),
        changes=[c for c in changes if c.result_a != c.result_b],
        only_a=[_change(m, rows_a[m], None) for m in split.only_a],
        only_b=[_change(m, None, rows_b[m]) for m in split.only_b],
        warning=fullgraph_warning(policies) if pair_a != pair_b else None,
        reference_hosts=hosts_apart(
            (host_kind(rows_a[m]) for m in split.both), (host_kind(rows_b[m]) for m in split.both)
        ),
    )


_CSV_FIELDS = (
    "model_id", "result_a", "result_b", "error_a", "error_b", "only_in", "moved",
    "reference_hosts", "in_both", "pair_reference_hosts",
)  # fmt: skip


def format_changes(found: Diff, pair_a: str, pair_b: str, fmt: str) -> str:
    """``text`` (the changes, then the models in one pair only, apart), ``csv`` (a header, then
    one row each) or ``json`` (a list): both with ``only_in`` (``a``, ``b``, or empty/null for a
    change) and ``in_both`` on every record."""
    if fmt == "json":
        return json.dumps(found.records(), indent=2) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, _CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        for record in found.records():
            writer.writerow({k: "" if v is None else v for k, v in record.items()})
        return out.getvalue()
    lines = [
        f"{len(found.changes)} model(s) differ between {pair_a} (a) and {pair_b} (b), "
        f"over the {found.in_both} model(s) in both",
        *([found.warning] if found.warning else []),
    ]
    if found.reference_hosts:
        lines.append(
            f"their CPU references came from different kinds of host: {found.reference_hosts}"
        )
    for c in found.changes:
        lines.append(f"{c.model_id}: {c.result_a} -> {c.result_b}")
        for side, error in (("a", c.error_a), ("b", c.error_b)):
            if error:
                lines.append(f"  {side}: {error}")
        if c.moved:
            lines.append(f"  moved: {c.moved}")
        if c.reference_hosts:
            lines.append(f"  reference hosts: {c.reference_hosts}")
    for side, only in (("a", found.only_a), ("b", found.only_b)):
        if only:
            lines.append(f"{len(only)} model(s) only in {side}, not compared:")
            lines += [f"  {c.model_id}: {c.result_a or c.result_b}" for c in only]
    return "\n".join(lines) + "\n"
