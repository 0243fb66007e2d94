"""The releases of a package between two versions, from the package index pip is configured
with.

pip's own ``pip index versions NAME`` asks the index (``PIP_INDEX_URL``, ``--find-links``, a
configuration file: whatever pip reads) and keeps what could install here: a wheel or source
of a version for this Python (``Requires-Python``) and this platform (the wheel's tags), not
yanked, no pre-release unless asked. So the candidates a bisection tries are those pip could
install; one that still cannot (a broken file, a dependency it cannot import) is a *skip* when
its environment is made (:mod:`.environments`). An index pip cannot reach is a
:class:`~pytest_neuronsupport.faults.Fault`, as for a model's packages.

Plugin side: no torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from pytest_neuronsupport.pipeline import packages

#: The line of ``pip index versions`` that lists them, newest first.
_AVAILABLE = re.compile(r"^Available versions:\s*(?P<versions>.*)$", re.MULTILINE)
#: How long asking the index may take, in seconds.
INDEX_TIMEOUT_S = 300.0


class VersionsError(ValueError):
    """The ends cannot be bisected: not versions, in the wrong order, or not on the index."""


@dataclass(frozen=True)
class Releases:
    """The releases from the good end to the bad one, oldest first (both ends included)."""

    package: str
    versions: tuple[str, ...]

    @property
    def between(self) -> int:
        """How many releases lie strictly between the ends."""
        return max(0, len(self.versions) - 2)


def parse_listing(output: str) -> list[str]:
    """The versions ``pip index versions`` printed (its ``Available versions:`` line)."""
    found = _AVAILABLE.search(output)
    if found is None:
        return []
    return [v.strip() for v in found["versions"].split(",") if v.strip()]


def version(text: str) -> Version:
    """``text`` as a version.

    Raises:
        VersionsError: it is none.
    """
    try:
        return Version(text)
    except InvalidVersion:
        raise VersionsError(f"{text!r} is not a version") from None


def available(package: str, pre: bool = False, timeout_s: float = INDEX_TIMEOUT_S) -> list[str]:
    """Every version of ``package`` that pip's index offers for this Python and platform.

    Raises:
        ~pytest_neuronsupport.pipeline.packages.PackageError: the index has none.
        ~pytest_neuronsupport.faults.Fault: the index could not be reached.
    """
    args = ["index", "versions", *(["--pre"] if pre else []), "--", package]
    return parse_listing(packages.pip(args, [package], timeout_s))


def between(package: str, listed: Iterable[str], good: str, bad: str) -> Releases:
    """The releases of ``listed`` from ``good`` to ``bad``, oldest first, both ends included
    whether the index lists them or not (an end that cannot install is found so when it runs).

    Raises:
        VersionsError: an end is no version, or the good end is not older than the bad one.
    """
    low, high = version(good), version(bad)
    if not low < high:
        raise VersionsError(
            f"{package}: the good end {good} must be older than the bad end {bad} (a release "
            "that broke the model comes after one where it worked)"
        )
    inside: dict[Version, str] = {}
    for text in listed:
        try:
            parsed = Version(text)
        except InvalidVersion:
            continue
        if low < parsed < high:
            inside.setdefault(parsed, text)
    ordered = [inside[v] for v in sorted(inside)]
    return Releases(package, (good, *ordered, bad))


def releases(package: str, good: str, bad: str, timeout_s: float = INDEX_TIMEOUT_S) -> Releases:
    """The releases of ``package`` from ``good`` to ``bad`` that pip's index offers here
    (pre-releases only where an end is one).

    Raises:
        VersionsError: as :func:`between`.
        ~pytest_neuronsupport.faults.Fault: the index could not be reached.
    """
    pre = version(good).is_prerelease or version(bad).is_prerelease
    try:
        listed = available(package, pre, timeout_s)
    except packages.PackageError as exc:
        raise VersionsError(
            f"{package}: the package index has no release of it: {exc.reason}"
        ) from None
    return between(package, listed, good, bad)
