"""Packages a model needs beyond the sweep's environment, installed into an overlay for its run.

A list entry may name packages (``packages = ["sentencepiece"]``); a load that fails because
transformers says a library it needs is missing is retried once with that library
(:func:`missing_library`). Packages are never installed into the sweep's own environment: pip
puts them into an *overlay*, a folder the run imports from before the environment
(``PYTHONPATH``), cached in ``<cache>/packages/<key>/`` and reused by every later run that needs
the same set.

How an overlay is made (:func:`overlay`), with the sweep's own interpreter and pip:

1. ``pip install --dry-run --report`` resolves the set against the sweep's environment: what the
   environment already has satisfies a dependency and is neither downloaded nor installed
   again. Nothing is installed or uninstalled by this step.
2. A distribution the resolution would *replace* in the environment (another version of numpy,
   of torch...) is refused: the overlay would shadow it, and the run would no longer test the
   stack it is recorded under. The model is ``FAIL(other)`` saying which.
3. ``pip install --target <temporary folder> --no-deps`` installs exactly the resolved versions
   of what the environment lacks (``--target`` never uninstalls anything from the environment,
   unlike ``--prefix``), and the folder is renamed into place: an overlay is complete or absent.

All of it happens under a file lock per overlay, so two workers never install the same set at
once; the second finds the first's overlay. pip's settings (index, find-links, ``PIP_NO_INDEX``,
certificates...) come from its environment variables and configuration files, as for any pip;
only the ones saying *where* to install are dropped. Its command line is a list, never a shell
string, and the names in it are the list's, validated (:mod:`~pytest_neuronsupport.modellist`),
or ones read from transformers' own table of libraries. A set pip cannot install raises
:class:`PackageError` with pip's reason (its ``ERROR:`` lines); an index it could not reach,
as its output or its debug log (``--log``: with no retry, only the log says it) tells, raises
a :class:`~pytest_neuronsupport.faults.Fault` instead.

The key of an overlay is the hash of the package set, the interpreter and the distributions of
the environment it complements: what the overlay leaves to the environment is only right for
that environment, so installing or upgrading anything in the environment makes new overlays.

This module imports neither torch nor transformers: transformers' table of the libraries it may
ask for is read from its source.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from pytest_neuronsupport import faults
from pytest_neuronsupport.builtonce import built_once

#: Where overlays go, under the cache.
OVERLAYS = "packages"
#: A description of an overlay, written inside it.
MANIFEST = "overlay.json"
#: The stack under test: never installed into an overlay, never retried with.
STACK = frozenset({"torch", "transformers"})
#: pip's settings that say where to install: the overlay decides that.
PIP_WHERE = ("PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_USER", "PIP_EDITABLE")
#: The default limit of one pip command, in seconds.
PIP_TIMEOUT_S = 1800.0
#: How much of pip's output an error keeps.
OUTPUT_CHARS = 2000


class PackageError(Exception):
    """pip could not install a package set; ``reason`` is pip's (its ``ERROR:`` lines)."""

    def __init__(self, packages: Sequence[str], reason: str, output: str = "") -> None:
        super().__init__(f"could not install {' '.join(packages)}: {reason}")
        self.packages = tuple(packages)
        self.reason = reason
        self.output = output

    @property
    def error(self) -> str:
        """The row's ``error``: the reason, then the tail of pip's output."""
        tail = self.output.strip()[-OUTPUT_CHARS:]
        return f"{self}\n--- pip's output ---\n{tail}" if tail else str(self)


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def base_name(requirement: str) -> str:
    """``tiktoken`` of ``tiktoken>=0.7``, ``transformers`` of ``transformers[audio]``."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    return canonical(match.group(0) if match else requirement)


def environment() -> dict[str, str]:
    """The sweep's environment: each installed distribution's version, by canonical name."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonical(name), dist.version)
    return found


def key(packages: Iterable[str], installed: Mapping[str, str]) -> str:
    """An overlay's key: the package set, the interpreter and the environment it complements."""
    blob = json.dumps(
        {
            "packages": sorted(set(packages)),
            "python": [sys.version, sys.prefix],
            "environment": sorted(f"{n}=={v}" for n, v in installed.items()),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


def overlay(packages: Sequence[str], cache: Path, timeout_s: float = PIP_TIMEOUT_S) -> Path:
    """The folder holding ``packages`` (and what they need that the environment lacks),
    installed on first use, reused after; a folder to put first on the run's ``PYTHONPATH``.

    Raises :class:`PackageError` with pip's reason when the set cannot be installed."""
    wanted = sorted(set(packages))
    installed = environment()
    final = cache / OVERLAYS / key(wanted, installed)

    def installed_into(building: Path) -> None:
        pinned = install(wanted, building, installed, timeout_s)
        manifest = {"packages": wanted, "installed": pinned, "python": sys.executable}
        (building / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")

    return built_once(final, installed_into)


def install(
    packages: Sequence[str], target: Path, installed: Mapping[str, str], timeout_s: float
) -> list[str]:
    """Resolve ``packages`` against the environment, then install what it lacks into
    ``target``; the ``name==version`` installed."""
    report_path = target / "pip-report.json"
    pip(
        ["install", "--dry-run", "--quiet", "--report", str(report_path), "--", *packages],
        packages,
        timeout_s,
    )
    report = json.loads(report_path.read_text("utf-8"))
    report_path.unlink()
    pinned, replaced = [], []
    for item in report.get("install", []):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        have = installed.get(canonical(name))
        if have is None:
            pinned.append(f"{name}=={version}")
        elif have != version:  # a reinstall of the same version (a pip setting) is skipped
            replaced.append(f"{name} {version} (the environment has {have})")
    if replaced:
        raise PackageError(
            packages,
            "they need other versions of packages of the sweep's environment, which an overlay"
            f" would shadow: {', '.join(replaced)}",
        )
    if pinned:
        into = ["--no-deps", "--no-compile", "--target", str(target)]
        pip(["install", "--quiet", *into, "--", *pinned], packages, timeout_s)
    return pinned


def pip(args: list[str], packages: Sequence[str], timeout_s: float) -> str:
    """Run the sweep's own pip; its output, or :class:`PackageError` with its reason, or the
    :class:`~pytest_neuronsupport.faults.Fault` of an index it could not reach."""
    env = {k: v for k, v in os.environ.items() if k not in PIP_WHERE}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="neuronsupport-pip-") as tmp:
        log = Path(tmp) / "pip.log"  # pip's debug log: what it met at each index, said there
        command = [sys.executable, "-m", "pip", "--log", str(log), *args]
        proc = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,  # stopped with whatever it started (a build backend)
        )
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            raise PackageError(packages, f"pip did not finish in {timeout_s:g} s", output) from None
        if proc.returncode == 0:
            return output
        said = log.read_text("utf-8", errors="replace") if log.is_file() else ""
    unreachable = index_unreachable(output, said)
    if unreachable is not None:  # the environment's fault, not the model's
        raise faults.Fault(unreachable)
    raise PackageError(packages, reason(output, proc.returncode), output)


#: What pip says (a warning for each retry, an error when it gives up) when its index gives
#: no answer: no connection, a timeout, a 5xx.
_UNREACHABLE: Final = re.compile(
    r"^(?:WARNING|ERROR): (?:Retrying \(|Could not fetch URL|.*(?:NewConnectionError|"
    r"Max retries exceeded|Read timed out|ConnectTimeoutError|ProxyError)).*$",
    re.MULTILINE,
)
#: What pip's debug log says of an index page it could not fetch for want of an answer (with
#: no retry, pip itself says nothing of it: the package is then "not found"): no connection,
#: a timeout, retries spent, a 5xx, a certificate refused. Not a 404: the index answered.
_NOT_FETCHED: Final = re.compile(
    r"Could not fetch URL \S+: (?:connection error|timed out|There was a problem confirming"
    r"|[^\n]*(?:Max retries exceeded|\b5\d\d Server Error))[^\n]*"
)


def index_unreachable(output: str, log: str = "") -> str | None:
    """The fault pip's failed ``output`` (or its debug ``log``) says: its index (the one it or
    ``PIP_INDEX_URL`` names) unreachable, with pip's first line about it; None when pip was
    answered (then it is a :class:`PackageError`)."""
    found = _UNREACHABLE.search(output) or _NOT_FETCHED.search(log)
    if found is None:
        return None
    looked = re.search(r"Looking in indexes: ([^\n]+)", f"{output}\n{log}")  # not if default
    index = looked.group(1).strip() if looked else os.environ.get("PIP_INDEX_URL", "")
    where = f" {index}" if index else ""
    return f"the package index{where} is unreachable (pip): {found.group(0)[:300]}"


def reason(output: str, returncode: int) -> str:
    """pip's reason for a failure: its ``ERROR:`` lines, else its last lines."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
    return "; ".join(errors or lines[-3:]) or f"pip exited with status {returncode}"


# --- the library a failed load asks for ----------------------------------------------------------

#: "... Install it with `pip install tiktoken`." and the like, in an error of transformers.
_PIP_INSTALL = re.compile(
    r"pip install (?:(?:-U|--upgrade)\s+)*`?([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
    r"(?=$|[\s`'\".,;:)])"
)


def _words(text: str) -> str:
    return " ".join(text.split())


@functools.cache
def transformers_libraries() -> tuple[tuple[str, str], ...]:
    """What transformers says when a library it needs is missing, and that library's pip name:
    ``("requires the SentencePiece library but it was not found in your environment",
    "sentencepiece")``..., read from its own table of backends (``BACKENDS_MAPPING`` in
    ``transformers/utils/import_utils.py``: a backend's name and its message), without
    importing it. The pip name is the one the message tells to ``pip install``, else the
    backend's name; a message telling to install something else (``transformers[audio]``)
    names none."""
    spec = importlib.util.find_spec("transformers")  # finds it; imports nothing
    if spec is None or spec.origin is None:
        return ()
    try:
        tree = ast.parse((Path(spec.origin).parent / "utils" / "import_utils.py").read_bytes())
    except (OSError, SyntaxError, ValueError):
        return ()
    messages: dict[str, str] = {}
    mapping: ast.expr | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if not isinstance(target, ast.Name):
                continue
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                messages[target.id] = node.value.value
            elif target.id == "BACKENDS_MAPPING":
                mapping = node.value
    found: list[tuple[str, str]] = []
    for entry in ast.walk(mapping) if mapping is not None else ():
        if not (isinstance(entry, ast.Tuple) and len(entry.elts) == 2):
            continue
        backend, pair = entry.elts
        if not (
            isinstance(backend, ast.Constant)
            and isinstance(backend.value, str)
            and isinstance(pair, ast.Tuple)
            and len(pair.elts) == 2
            and isinstance(pair.elts[1], ast.Name)
        ):
            continue
        template = _words(messages.get(pair.elts[1].id, ""))
        # "{0} requires the X library but it was not found in your environment. ..."
        phrase = re.split(r"[.{]", template.partition("{0}")[2], maxsplit=1)[0].strip()
        told = _PIP_INSTALL.search(template)
        if told is None and "pip install" in template:
            continue  # what it tells to install is no package name (`transformers[audio]`)
        name = told.group(1) if told else backend.value
        if len(phrase) > 20 and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            found.append((phrase, name))
    return tuple(found)


def missing_library(
    error: str | None, have: Iterable[str] = (), installed: Mapping[str, str] | None = None
) -> str | None:
    """The pip name of a library that ``error`` (a failed load's) says transformers needs and
    did not find, when installing it could help: not one of the stack, not already among the
    run's packages (``have``), not installed in the environment (then transformers found it
    and wants something else of it). None otherwise.

    Two kinds of messages name it: those of transformers' table of backends
    (:func:`transformers_libraries`), and errors that tell to ``pip install`` a package."""
    if not error:
        return None
    text = _words(error)
    candidates = [name for phrase, name in transformers_libraries() if phrase in text]
    candidates += _PIP_INSTALL.findall(text)
    if not candidates:
        return None
    excluded = STACK | {base_name(p) for p in have}
    present = environment() if installed is None else installed
    for name in candidates:
        if canonical(name) not in excluded and canonical(name) not in present:
            return name
    return None
