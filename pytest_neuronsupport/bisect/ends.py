"""The ends of a bisection, from the dataset: the good version and the bad one, their rows, and
the model's script to run at each candidate.

A row says which version of a package it ran with where the package is of its stack (a column
of its own: ``transformers``, ``accelerate``, ``torch``, ``neuronx_cc``...) or its library
(``library_version``). By default the good end is the newest version whose row PASSed, the bad
end the oldest later one whose row failed, among rows that differ in nothing else that names
their pair (the device, the backend, the dtype, and the compiler's version, or the library's,
whichever is not the package's); ``good`` and ``bad`` override either. Each candidate runs the
model's recorded ``run.py`` (the bad end's, else the good end's, else its newest row's), as a
sweep ran it.

The rest of the good end's stack is kept where an overlay can move it (:data:`PINNABLE`); a
difference an overlay cannot move (torch, Python) is said. Plugin side: no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from packaging.version import InvalidVersion, Version

from pytest_neuronsupport.bisect.environments import same_version
from pytest_neuronsupport.dataset.table import STACK_COLUMNS
from pytest_neuronsupport.pipeline import packages
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.lookup import latest_rows, pairs

#: Stack packages an overlay may pin to the good end's versions (pure Python, small).
PINNABLE: Final = ("transformers", "accelerate")
#: What a row says of the pair beside the package's version: rows that differ in it are not
#: compared.
_CONTEXT: Final = ("device", "backend", "dtype", "compiler")


class EndsError(ValueError):
    """No ends can be found (or those given cannot be used); the message says why."""


@dataclass(frozen=True)
class Ends:
    """Where a bisection starts and ends, and what it runs."""

    model_id: str
    package: str
    good: str
    bad: str
    #: The rows of each end (None: the dataset has none at that version).
    good_row: dict[str, Any] | None
    bad_row: dict[str, Any] | None
    #: The script each candidate runs, the pair file of the row it is from, and its cores.
    script: str
    pair: str
    cores: int = 1
    #: Other stack packages pinned to the good end's versions (``accelerate==1.2.0``).
    pins: tuple[str, ...] = ()
    #: How the ends were chosen, and what differs from the good end's stack that no overlay
    #: moves.
    said: tuple[str, ...] = field(default=())
    #: The row whose script runs (what the model is: its architecture, its type).
    source: dict[str, Any] | None = None


def column_of(package: str) -> str:
    """The stack column that holds ``package``'s version (``torch-neuronx`` → ``torch_neuronx``)."""
    return packages.canonical(package).replace("-", "_")


def version_in(row: Mapping[str, Any], package: str) -> str | None:
    """The version of ``package`` a row ran with; None where the row does not say."""
    column = column_of(package)
    if column in STACK_COLUMNS and column != "library_version" and row.get(column):
        return str(row[column])
    if row.get("library") and packages.canonical(str(row["library"])) == packages.canonical(
        package
    ):
        return str(row.get("library_version") or "") or None
    return None


def _order(text: str) -> tuple[int, Any]:
    try:
        return (1, Version(text))
    except InvalidVersion:
        return (0, text)


def _public(text: str | None) -> str | None:
    try:
        return Version(text or "").public
    except InvalidVersion:
        return text


def context(row: Mapping[str, Any], package: str) -> tuple[Any, ...]:
    """What a row's pair says beside ``package``'s version: rows are compared only within one."""
    mine = _public(version_in(row, package))
    compiler = None if _public(row.get("compiler_version")) == mine else row.get("compiler_version")
    library = (
        None
        if row.get("library_version") == version_in(row, package)
        else row.get("library_version")
    )
    return (*(row.get(name) for name in _CONTEXT), compiler, library)


def model_rows(results: Path, model_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The model's latest row in each pair of the dataset: (pair file, row)."""
    found = []
    for pair in pairs(results):
        row = latest_rows(results, f"{pair}.parquet").get(model_id)
        if row is not None:
            found.append((f"{pair}.parquet", row))
    return found


_Member = tuple[str, dict[str, Any]]


def _failed(row: Mapping[str, Any]) -> bool:
    return str(row.get("result") or "").startswith("FAIL")


def _at(members: list[_Member], package: str, wanted: str) -> _Member | None:
    """The member whose version of ``package`` is ``wanted`` (the newest such row)."""
    found = [m for m in members if same_version(version_in(m[1], package), wanted)]
    return max(found, key=lambda m: str(m[1].get("tested_at") or "")) if found else None


def _pick(
    members: list[_Member], package: str, good: str | None, bad: str | None
) -> tuple[str, _Member | None, str, _Member | None] | None:
    """The ends among one context's rows: (good version, its row, bad version, its row);
    None where this context has no such ends."""

    def v(m: _Member) -> tuple[int, Any]:
        return _order(version_in(m[1], package) or "")

    if good is None:
        passing = [m for m in members if m[1].get("result") == Result.PASS]
        if bad is not None:
            passing = [m for m in passing if v(m) < _order(bad)]
        good_member = max(passing, key=v, default=None)
        if good_member is None:
            return None
        good = str(version_in(good_member[1], package))
    else:
        good_member = _at(members, package, good)
    if bad is None:
        failing = [m for m in members if _failed(m[1]) and v(m) > _order(good)]
        bad_member = min(failing, key=v, default=None)
        if bad_member is None:
            return None
        bad = str(version_in(bad_member[1], package))
    else:
        bad_member = _at(members, package, bad)
    return good, good_member, bad, bad_member


def _rows_said(rows: list[_Member], package: str) -> str:
    return "; ".join(
        f"{pair.removesuffix('.parquet')} {row.get('result')} ({package} "
        f"{version_in(row, package) or 'not recorded'})"
        for pair, row in rows
    )


def find_ends(
    results: Path, model_id: str, package: str, good: str | None = None, bad: str | None = None
) -> Ends:
    """The ends of bisecting ``model_id`` over ``package`` (the module's docstring).

    Raises:
        EndsError: the dataset has no row of the model, or no ends can be found in it.
    """
    rows = model_rows(results, model_id)
    if not rows:
        raise EndsError(f"no row of {model_id} in {Path(results) / 'data'}: sweep it first")
    groups: dict[tuple[Any, ...], list[_Member]] = {}
    for member in rows:
        if version_in(member[1], package) is not None:
            groups.setdefault(context(member[1], package), []).append(member)
    picks = [p for p in (_pick(m, package, good, bad) for m in groups.values()) if p is not None]

    def fit(pick: tuple[str, _Member | None, str, _Member | None]) -> tuple[bool, bool, str]:
        """Rows that fail at the bad end first, then pass at the good end, then the newest."""
        good_member, bad_member = pick[1], pick[3]
        member = bad_member or good_member
        return (
            bad_member is not None and _failed(bad_member[1]),
            good_member is not None and good_member[1].get("result") == Result.PASS,
            str(member and member[1].get("tested_at")),
        )

    if picks:
        good, good_member, bad, bad_member = max(picks, key=fit)
    elif good is not None and bad is not None:
        good_member = bad_member = None
    else:
        raise EndsError(
            f"{model_id}: no {package} version where it passed followed by one where it fails "
            f"(its rows: {_rows_said(rows, package)}); give --good and --bad"
        )
    return _ends(model_id, package, good, bad, good_member, bad_member, rows)


def _ends(
    model_id: str,
    package: str,
    good: str,
    bad: str,
    good_member: _Member | None,
    bad_member: _Member | None,
    rows: list[_Member],
) -> Ends:
    """The :class:`Ends` of the versions and rows chosen: the script, its pair, the pins."""
    newest = max(rows, key=lambda m: str(m[1].get("tested_at") or ""))
    source = next(
        m for m in (bad_member, good_member, newest) if m is not None and m[1].get("run_py")
    )
    if source is None:  # pragma: no cover - every recorded run has its script
        raise EndsError(f"{model_id}: no row of it keeps its run.py")
    said = [
        f"{end} end {version}: "
        + (f"{m[0].removesuffix('.parquet')} {m[1].get('result')}" if m else "no row at it")
        for end, version, m in (("good", good, good_member), ("bad", bad, bad_member))
    ]
    said.append(f"each candidate runs the run.py of {source[0].removesuffix('.parquet')}")
    pins, differences = _stack_against(good_member[1] if good_member else None, package)
    return Ends(
        model_id,
        package,
        good,
        bad,
        good_member[1] if good_member else None,
        bad_member[1] if bad_member else None,
        str(source[1]["run_py"]),
        source[0],
        int(source[1].get("neuron_cores") or 1),
        pins,
        tuple([*said, *differences]),
        source[1],
    )


def _stack_against(
    good_row: Mapping[str, Any] | None, package: str
) -> tuple[tuple[str, ...], list[str]]:
    """What keeps the rest of the good end's stack: the pins (:data:`PINNABLE` packages at its
    versions), and the differences from this environment that no overlay moves."""
    if good_row is None:
        return (), []
    from pytest_neuronsupport.stack import installed_stack

    here = installed_stack()
    pins: list[str] = []
    differences: list[str] = []
    for column in STACK_COLUMNS:
        then, now = good_row.get(column), here.get(column)
        if column in ("library_version", column_of(package)) or not then or then == now:
            continue
        if column in PINNABLE:
            pins.append(f"{column}=={then}")
        else:
            differences.append(
                f"the good end ran {column} {then}, this environment has {now or 'none'}: not moved"
            )
    python = good_row.get("python")
    if python and python != here.get("python"):
        differences.append(f"the good end ran Python {python}, this is {here.get('python')}")
    return tuple(pins), differences
