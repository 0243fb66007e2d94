"""Candidate environments: the sweep's environment with one package moved to another version.

A candidate is the environment the sweep runs in, plus an *overlay*: a folder put first on the
run's ``PYTHONPATH`` that holds the package at the candidate's version (``pip install --no-deps
--target``: nothing of the environment is uninstalled, and the package's dependencies stay the
environment's), and the stack packages pinned to another row's versions where asked. The
version the environment has needs no overlay: its candidate is the environment itself.

Each overlay is made once (:func:`~pytest_neuronsupport.builtonce.built_once`: complete or
absent) under ``<cache>/bisect/environments/``, named by the package, its version, the pins and
the environment they complete (:func:`~pytest_neuronsupport.pipeline.packages.key`), so a second
bisection of the same range costs the runs only. Making one ends with an import check in a
fresh interpreter: the package's top-level modules must import from the overlay at the
candidate's version. A candidate pip cannot install (its answer: no such file, a broken wheel)
or that does not import beside the environment is a *skip*, remembered in the overlay's
manifest with pip's or Python's reason; an index pip cannot reach is a
:class:`~pytest_neuronsupport.faults.Fault`, remembered nowhere.

Plugin side: no torch (the import check runs in its own interpreter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from packaging.version import InvalidVersion, Version

from pytest_neuronsupport.builtonce import built_once
from pytest_neuronsupport.pipeline import packages

#: Where candidate environments go, under the cache.
ENVIRONMENTS: Final = Path("bisect") / "environments"
#: How long the import check may take, in seconds.
IMPORT_TIMEOUT_S: Final = 600.0
#: The import check (standard library only; its arguments: the distribution, its version and
#: the overlay): the distribution found is the overlay's, at that version, and each of its
#: top-level modules imports from there.
IMPORT_CHECK: Final = """\
import importlib, importlib.metadata as metadata, os, sys
name, version, folder = sys.argv[1:4]
dist = metadata.distribution(name)
if dist.version != version:
    raise SystemExit(f"{name} {dist.version} is imported, not {version}")
tops = (dist.read_text("top_level.txt") or "").split()
if not tops:
    parts = {str(f).split("/")[0] for f in dist.files or ()}
    tops = sorted(p.removesuffix(".py") for p in parts if p.removesuffix(".py").isidentifier())
for top in tops:
    module = importlib.import_module(top)
    where = os.path.realpath(getattr(module, "__file__", None) or folder)
    if not where.startswith(os.path.realpath(folder)):
        raise SystemExit(f"{top} is imported from {where}, not from the overlay")
print("imported", " ".join(tops))
"""


@dataclass(frozen=True)
class Environment:
    """One candidate: the package at a version, in an overlay (or the environment itself)."""

    package: str
    version: str
    #: The overlay to put first on the run's ``PYTHONPATH``; None: the environment itself.
    folder: Path | None = None
    #: Other packages pinned in the overlay (``accelerate==1.2.0``).
    pins: tuple[str, ...] = ()
    #: Why it cannot be tried (pip's reason, the import's error): a skip; None: it can.
    skip: str | None = None
    #: Its overlay was there already (made by an earlier bisection).
    cached: bool = False

    @property
    def said(self) -> str:
        """Where it comes from, in a few words."""
        if self.folder is None:
            return "the environment's own"
        return f"{'cached' if self.cached else 'made'} in {self.folder}"

    @property
    def requirements(self) -> tuple[str, ...]:
        """What its overlay holds, as pip requirements."""
        return (f"{self.package}=={self.version}", *self.pins)


def same_version(a: str | None, b: str) -> bool:
    """Whether two version texts name the same release (``5.24`` is ``5.24.0``)."""
    if a is None:
        return False
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def candidate(
    package: str,
    version: str,
    cache: Path,
    pins: Sequence[str] = (),
    timeout_s: float = packages.PIP_TIMEOUT_S,
) -> Environment:
    """The candidate of ``package`` at ``version`` (with ``pins``), made on first use.

    Raises:
        ~pytest_neuronsupport.faults.Fault: pip's index could not be reached.
    """
    installed = packages.environment()
    if not pins and same_version(installed.get(packages.canonical(package)), version):
        return Environment(package, version)
    wanted = (f"{package}=={version}", *pins)
    name = f"{packages.canonical(package)}-{version}-{packages.key(wanted, installed)[:16]}"
    final = cache / ENVIRONMENTS / name

    def made(building: Path) -> None:
        manifest: dict[str, object] = {"requirements": list(wanted), "python": sys.executable}
        into = ["--no-deps", "--no-compile", "--target", str(building)]
        try:
            packages.pip(["install", "--quiet", *into, "--", *wanted], wanted, timeout_s)
        except packages.PackageError as exc:
            manifest["skip"] = f"pip cannot install it: {exc.reason}"
        else:
            manifest["skip"] = import_problem(package, version, building)
        (building / packages.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")

    cached = final.is_dir()
    folder = built_once(final, made)
    manifest = json.loads((folder / packages.MANIFEST).read_text("utf-8"))
    return Environment(package, version, folder, tuple(pins), manifest.get("skip"), cached)


def import_problem(package: str, version: str, folder: Path) -> str | None:
    """Why ``package`` at ``version`` does not import from ``folder`` beside the environment
    (the last line of the error), in a fresh interpreter; None when it does."""
    inherited = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), inherited]))}
    command = [sys.executable, "-c", IMPORT_CHECK, package, version, str(folder)]
    try:
        done = subprocess.run(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=IMPORT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"importing it did not finish in {IMPORT_TIMEOUT_S:g} s"
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return f"it does not import here: {lines[-1].strip() if lines else done.returncode}"
