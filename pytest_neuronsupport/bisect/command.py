"""``neuronsupport bisect``: a model's bisection, asked from the command line.

:func:`bisect_command` is what the command runs (its arguments are the command table's): it
finds the ends in the dataset (:mod:`.ends`), makes a sweep's services to run the model's script
with (:func:`standalone_sweep`: the device, backend and dtype of the model's row, the cache and
the leases every sweep of this machine uses), bisects across the package's releases
(:mod:`.release`) or inside the compiler (:mod:`.compiler`), prints the one-screen answer (or
the JSON report) while progress goes to stderr, and records the row in the results' ``bisect/``
table (:func:`record`). Its exit status: 0 when it found where the model broke, 1 when it did
not (an end that does not hold, a flaky boundary, the budget spent), 2 when it cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pytest_neuronsupport import devices, faults, options
from pytest_neuronsupport.bisect import compiler
from pytest_neuronsupport.bisect.ends import EndsError, find_ends
from pytest_neuronsupport.bisect.release import Search, base_of, bisect_release
from pytest_neuronsupport.bisect.search import ANSWERED
from pytest_neuronsupport.dataset.bisect import BISECT
from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.merge import merge_journals
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.settings import Settings
from pytest_neuronsupport.stack import installed_stack


class BisectError(ValueError):
    """A bisection that cannot run; the message says why (the command's exit status 2)."""


@dataclass(frozen=True)
class Asked:
    """What the command was asked."""

    model: str
    results: Path
    cache: Path
    package: str | None = None
    good: str | None = None
    bad: str | None = None
    compiler: bool = False
    #: How ``compiler`` narrows: :data:`~pytest_neuronsupport.bisect.compiler.METHODS`.
    method: str = "auto"
    otherwise_bad: bool = False
    max_runs: int | None = None
    fmt: str = "text"
    device: str = "auto"
    timeout_s: float = options.declared("timeout")
    isolation: str = options.declared("isolation")
    leases: Path | None = None
    #: Where runs start: a backend of one's own is imported from there.
    workdir: Path = Path()


def standalone_sweep(asked: Asked, row: Mapping[str, Any]) -> Sweep:
    """A sweep's services for runs outside a sweep: the device, backend and dtype of ``row``
    (the model's), the command's cache, timeout and isolation, this machine's leases."""
    name = asked.device if asked.device != "auto" else str(row.get("device") or "auto")
    try:
        device = devices.resolve(name)
    except ValueError as exc:
        raise BisectError(str(exc)) from None
    settings = Settings(
        lists=(),
        device=device,
        backend=str(row.get("backend") or device.default_backend),
        dtype=str(row.get("dtype") or device.default_dtype),
        results=asked.results,
        cache=asked.cache,
        timeout_s=asked.timeout_s,
        workdir=asked.workdir.resolve(),
        isolation=asked.isolation,
        judge=None,
        leases=asked.leases or options.declared("leases"),
    )
    sweep_id = f"bisect-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return Sweep(settings, Runners.builtin(), installed_stack(), sweep_id)


def record(results: Path, pair: str, rows: Sequence[dict[str, Any]]) -> None:
    """Journal ``rows`` of the ``bisect/`` table for ``pair``, then merge them in."""
    with Journal(results) as journal:
        for row in rows:
            journal.append(pair, row, BISECT)
    merge_journals(results, include=[journal.path])


def stderr_say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def bisect_command(
    asked: Asked, out: TextIO = sys.stdout, say: Callable[[str], None] = stderr_say
) -> int:
    """Run the bisection ``asked`` (the module's docstring); its exit status.

    Raises:
        BisectError: it cannot run (no such rows, no such versions, an index out of reach).
    """
    try:
        if asked.compiler:
            return _compiler(asked, out, say)
        if not asked.package:
            raise BisectError("say what to bisect: --package NAME, or --compiler")
        ends = find_ends(asked.results, asked.model, asked.package, asked.good, asked.bad)
        sweep = standalone_sweep(asked, ends.bad_row or ends.source or {})
        how = Search(asked.otherwise_bad, asked.max_runs)
        report = bisect_release(sweep, ends, how, say)
    except (EndsError, compiler.CompilerError, faults.Fault) as exc:
        raise BisectError(str(exc)) from None
    record(asked.results, ends.pair, [report.row(sweep.stack, base_of(ends.bad_row, sweep))])
    if asked.fmt == "json":
        out.write(json.dumps(report.to_json(), indent=1, default=str) + "\n")
    else:
        out.write("\n".join(report.lines()) + "\n")
    return 0 if report.found.status in ANSWERED and not report.found.flaky else 1


def _compiler(asked: Asked, out: TextIO, say: Callable[[str], None]) -> int:
    """``--compiler``: the model's failing row, narrowed inside its compiler."""
    pair, row = compiler.failing_row(asked.results, asked.model)
    sweep = standalone_sweep(asked, row)
    report = compiler.bisect_compiler(sweep, pair, row, say, asked.method)
    record(asked.results, pair, [report.row(sweep.stack, base_of(row, sweep))])
    if asked.fmt == "json":
        out.write(json.dumps(report.to_json(), indent=1, default=str) + "\n")
    else:
        out.write("\n".join(report.lines()) + "\n")
    return 0 if report.found else 1


#: The sweep's options the command takes, as ``--<name>`` (the option table's).
OPTIONS = ("results", "cache", "device", "timeout", "isolation", "leases", "bisect-max-runs")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments (its parser is the command table's)."""
    parser.add_argument("model", metavar="MODEL", help="the model's id, as its rows have it")
    parser.add_argument(
        "--package",
        metavar="NAME",
        help="the package whose releases to bisect (transformers, accelerate, torch...)",
    )
    parser.add_argument(
        "--good",
        metavar="VERSION",
        help="a version where the model passed (default: the newest whose row PASSed)",
    )
    parser.add_argument(
        "--bad",
        metavar="VERSION",
        help="a later version where it fails (default: the oldest such row after the good one)",
    )
    parser.add_argument(
        "--compiler",
        action="store_true",
        help="narrow its newest failing row inside the compiler instead: PyTorch's "
        "CompilerBisector on inductor (stage, subsystem, application), the minifier on Neuron",
    )
    parser.add_argument(
        "--compiler-method",
        choices=compiler.METHODS,
        default="auto",
        help="with --compiler: auto (the minifier on Neuron, else the bisector), or either",
    )
    parser.add_argument(
        "--otherwise-bad",
        action="store_true",
        help="a failure of another kind than the bad end's counts as bad (default: set aside)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    options.add_options(parser.add_argument, OPTIONS, prefix="--", defaults=True)


def asked_from(args: argparse.Namespace) -> Asked:
    """What the parsed arguments ask."""
    return Asked(
        model=args.model,
        results=Path(args.results).resolve(),
        cache=Path(args.cache).resolve(),
        package=args.package,
        good=args.good,
        bad=args.bad,
        compiler=args.compiler,
        method=args.compiler_method,
        otherwise_bad=args.otherwise_bad,
        max_runs=int(args.bisect_max_runs),
        fmt=args.format,
        device=args.device,
        timeout_s=float(args.timeout),
        isolation=args.isolation,
        leases=Path(args.leases).resolve(),
        workdir=Path.cwd(),
    )
