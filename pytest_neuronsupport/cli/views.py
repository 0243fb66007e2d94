"""The commands that answer from a results dataset (:mod:`pytest_neuronsupport.views`): a
model's rows, two pairs compared, failures and operators, the support matrix, the page, the
card, the training and performance tables, the dashboard."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from pytest_neuronsupport.cli.command import (
    Command,
    own_folder,
    pair,
    read,
    results,
    results_dir,
)
from pytest_neuronsupport.cli.results import upgrade_files


def _lookup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a model id, or part of one (any case)")
    results(parser)


def _lookup(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.lookup import lookup

    lines = lookup(results_dir(args), args.model)
    print("\n".join(lines))
    return 0 if not lines[0].startswith("no model matching") else 1


def _diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pair_a", metavar="PAIR_A", help="e.g. inductor-2.12.0/transformers-5.24.0")
    parser.add_argument("pair_b", metavar="PAIR_B", help="e.g. inductor-2.13.0/transformers-5.24.0")
    parser.add_argument("--format", choices=("text", "csv", "json"), default="text")
    results(parser)


def _diff(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.lookup import diff, format_changes

    found = diff(results_dir(args), args.pair_a, args.pair_b)
    sys.stdout.write(format_changes(found, args.pair_a, args.pair_b, args.format))
    if found.warning and args.format != "text":  # the text says it; a table's reader is told
        print(found.warning, file=sys.stderr)
    return 0


def _grouped_arguments(what: str) -> Callable[[argparse.ArgumentParser], None]:
    """A command's arguments: ``--pair`` (``what`` it does with it), ``--format``,
    ``--results``."""

    def arguments(parser: argparse.ArgumentParser) -> None:
        pair(parser, f"the pair to {what} (default: the newest compiler's)")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        results(parser)

    return arguments


def _failures(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.failures import format_groups, pair_failures

    found, groups = pair_failures(results_dir(args), args.pair)
    sys.stdout.write(format_groups(groups, found, args.format))
    return 0


def _operators(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.operators import format_operators, pair_operators

    found, ranked, tracked = pair_operators(results_dir(args), args.pair)
    sys.stdout.write(format_operators(ranked, found, tracked, args.format))
    return 0


def _coverage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pair",
        metavar="PAIR",
        action="append",
        default=[],
        help="a pair to show, e.g. inductor-2.13.0/transformers-5.24.0 (repeat it for "
        "several; default: every pair)",
    )
    results(parser)


def _coverage(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.coverage import coverage_report

    lines = coverage_report(results_dir(args), args.pair)
    print("\n".join(lines))
    return 0 if not lines[0].startswith("no row names its architecture") else 1


def _page_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", required=True, help="folder for index.html")
    results(parser)


def _page(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.page import write_page

    print(write_page(results_dir(args), Path(args.out)))
    return 0


def _card(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.card import write_card

    folder = own_folder(args, "writes <results>/README.md")
    if upgrade_files(folder):  # the card's configs load only files of one schema
        return 1
    print(write_card(folder))
    return 0


def _train_report(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.train import train_report

    lines = train_report(read(str(args.results)))
    print("\n".join(lines))
    return 0 if not lines[0].startswith("no training results") else 1


def _perf(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.perf import WIDTH, perf_report

    width = shutil.get_terminal_size((WIDTH, 24)).columns
    lines = perf_report(read(str(args.results)), width)
    print("\n".join(lines))
    return 0 if not lines[0].startswith("no performance results") else 1


def _dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("text", "json"), default="text")
    results(parser)


def _dashboard(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.dashboard import dashboard_report

    sys.stdout.write(dashboard_report(results_dir(args), args.format))
    return 0


LOOKUP = Command(
    ("lookup",),
    (("lookup MODEL", "a model's rows over every pair"),),
    "every recorded row of a model, one line per pair",
    _lookup,
    _lookup_arguments,
)
DIFF = Command(
    ("diff",),
    (("diff PAIR_A PAIR_B", "result changes over the models in both pairs"),),
    "the models whose result differs between two pairs, over the models in both; those with a "
    "row in one pair only are listed apart",
    _diff,
    _diff_arguments,
)
FAILURES = Command(
    ("failures",),
    (("failures [--pair PAIR]", "a pair's failures grouped by cause, with a repro"),),
    "a pair's failed models grouped by cause, most models first",
    _failures,
    _grouped_arguments("group"),
)
OPERATORS = Command(
    ("operators",),
    (("operators [--pair PAIR]", "the operators that block models or run on the CPU"),),
    "the ATen operators ranked by the models they block or run on the CPU in",
    _operators,
    _grouped_arguments("rank"),
    description="The operators a pair's failures name (FAIL(gen), FAIL(forward)) and those "
    "that ran on the CPU (cpu_ops), ranked by how many models they block, then by how many "
    "they fall back on: what a compiler team should implement first.",
)
COVERAGE = Command(
    ("coverage",),
    (("coverage [--pair PAIR]...", "the support matrix by architecture, over pairs"),),
    "the support matrix by architecture: one line per model type and head class",
    _coverage,
    _coverage_arguments,
    description="One line per model type and head class (the rows' model_type and "
    "architecture, from each checkpoint's config): the result in each pair (oldest "
    "version first), the runner, cores, graph breaks, the cause of its failures as "
    "'neuronsupport failures' groups them, and the models it covers.",
)
PAGE = Command(
    ("page",),
    (("page --out DIR", "a static page to browse the results"),),
    "write a static page of the results (opens from file://)",
    _page,
    _page_arguments,
)
CARD = Command(
    ("card",),
    (("card", "the dataset's README.md card"),),
    "write <results>/README.md, the dataset's card",
    _card,
    results,
)
TRAIN_REPORT = Command(
    ("train-report",),
    (("train-report", "the training table, per model"),),
    "the training table: largest batch native and compiled, per model",
    _train_report,
    results,
)
PERF = Command(
    ("perf",),
    (("perf", "the performance tables"),),
    "the performance tables (encoders, decoders, encoder-decoders)",
    _perf,
    results,
)
DASHBOARD = Command(
    ("dashboard",),
    (("dashboard", "each pair against the previous one, at a glance"),),
    "one column per pair: pass rate, speedup, compile time, memory, graph breaks, each against "
    "the previous pair, and the worst models",
    _dashboard,
    _dashboard_arguments,
)
