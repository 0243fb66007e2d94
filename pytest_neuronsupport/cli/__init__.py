"""The ``neuronsupport`` command: the tiny-model zoo, and answers read from a results dataset.

One table, :data:`COMMANDS`, names every command once: its words, its lines in ``--help``,
its arguments and what it runs (a :class:`~.command.Command`, declared in the module of its
group: :mod:`.zoo`, :mod:`.hub`, :mod:`.views`, :mod:`.results`, :mod:`.bisect`). :func:`parser` and
:func:`main` are made of that table.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pytest_neuronsupport import __version__, baseline, options
from pytest_neuronsupport.cli import bisect, hub, results, views, zoo
from pytest_neuronsupport.cli.command import Command, CommandError
from pytest_neuronsupport.dataset.files import UnreadableResultsError

__all__ = ["COMMANDS", "Command", "CommandError", "main", "parser"]

SUMMARY = "The neuronsupport command: the tiny-model zoo, and answers read from a results dataset."

COMMANDS: tuple[Command, ...] = (
    *zoo.COMMANDS,
    hub.SELECT,
    views.LOOKUP,
    views.DIFF,
    views.FAILURES,
    views.OPERATORS,
    views.COVERAGE,
    results.BASELINE_UPDATE,
    results.CHECK,
    views.PAGE,
    views.CARD,
    results.UPGRADE,
    results.MERGE,
    hub.PUSH,
    views.TRAIN_REPORT,
    views.PERF,
    views.DASHBOARD,
    bisect.BISECT,
)
"""Every command, in the order ``--help`` lists them."""

GROUPS = {"zoo": zoo.HELP, "baseline": results.BASELINE_HELP}
"""The help of each command that has subcommands (``neuronsupport zoo list``)."""


def usage_lines() -> list[str]:
    """Each command's lines in ``--help``: ``neuronsupport <usage>`` and what it does."""
    lines = []
    for command in COMMANDS:
        for usage, summary in command.lines:
            line = f"neuronsupport {usage}"
            lines.append(f"{line}{' ' * max(2, 45 - len(line))}{summary}")
    return lines


def _epilog() -> str:
    """The command's help after its options: the commands, then what ``--results`` may name."""
    results_default = options.BY_NAME["results"].default_text
    return "\n".join(
        [
            *usage_lines(),
            "",
            f"Commands that read results take --results DIR (default {results_default}).",
            "It may name a shared dataset too: s3://BUCKET/PREFIX (read through its local",
            "copy in the cache, pulled first), or a Hub dataset repo (at HF_ENDPOINT),",
            "hf://datasets/ORG/NAME (its files at its head).",
        ]
    )


def parser() -> argparse.ArgumentParser:
    """The ``neuronsupport`` command's parser, made of :data:`COMMANDS`."""
    p = argparse.ArgumentParser(
        prog="neuronsupport",
        description=SUMMARY,
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    top = p.add_subparsers(dest="command", required=True)
    groups: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}
    for command in COMMANDS:
        first, *rest = command.words
        if not rest:
            sub = top.add_parser(first, help=command.help, description=command.description)
        else:
            if first not in groups:
                group = top.add_parser(first, help=GROUPS[first])
                groups[first] = group.add_subparsers(dest=f"{first}_command", required=True)
            sub = groups[first].add_parser(
                rest[0], help=command.help, description=command.description
            )
        command.arguments(sub)
        sub.set_defaults(run=command.run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (CommandError, baseline.BaselineError, UnreadableResultsError, ValueError) as exc:
        print(f"neuronsupport {args.command}: {exc}", file=sys.stderr)
        return 2
