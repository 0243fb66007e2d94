"""What every command of ``neuronsupport`` is made of: a :class:`Command` (its words, its
one-line usage, its help, its arguments and what it runs) and the helpers commands share: the
sweep's options as flags, and a results store opened from ``--results`` (one call,
:func:`~pytest_neuronsupport.dataset.stores.open_store`, as a sweep opens it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_neuronsupport import options

if TYPE_CHECKING:
    from pytest_neuronsupport.dataset.stores import Results

__all__ = ["Command", "CommandError", "own_folder", "pair", "read", "results_dir", "store"]


class CommandError(Exception):
    """A command cannot do what was asked; the message says why (exit status 2)."""


@dataclass(frozen=True)
class Command:
    """One command: ``neuronsupport <words>``, listed in ``neuronsupport --help`` by its
    :attr:`lines`; its parser gets :attr:`help`, :attr:`description` and :attr:`arguments`;
    :attr:`run` does it and returns its exit status."""

    #: The command's words: ``("lookup",)``, ``("zoo", "build")``.
    words: tuple[str, ...]
    #: Its lines in ``neuronsupport --help``: what follows ``neuronsupport``, and what it does.
    lines: tuple[tuple[str, str], ...]
    #: The help argparse shows for it (its line in its group's list of commands).
    help: str
    run: Callable[[argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    #: The parser's description (argparse's default: none).
    description: str | None = None


def sweep_options(parser: argparse.ArgumentParser, *names: str) -> None:
    """The sweep's options named, as ``--<name>``, with their declared defaults."""
    options.add_options(parser.add_argument, names, prefix="--", defaults=True)


def results(parser: argparse.ArgumentParser) -> None:
    """``--results``: the sweep's ``--neuron-results``."""
    sweep_options(parser, "results")


def pair(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--pair", metavar="PAIR", help=help)


def store(uri: str) -> Results:
    """The results store ``--results`` names: a folder, or a shared dataset (``s3://...``,
    ``hf://datasets/...``) through its local copy in the cache, as a sweep opens it."""
    from pytest_neuronsupport.dataset.stores import ResultsError, open_store

    try:
        return open_store(uri, options.default_cache())
    except ResultsError as exc:
        raise CommandError(str(exc)) from None


def read(uri: str) -> Path:
    """The local folder to read ``--results`` from, whatever store it names (the store's
    :meth:`~pytest_neuronsupport.dataset.stores.Results.readable`)."""
    from pytest_neuronsupport.dataset.stores import ResultsError

    try:
        return store(uri).readable()
    except ResultsError as exc:
        raise CommandError(str(exc)) from None


def results_dir(args: argparse.Namespace) -> Path:
    """The folder holding ``--results``'s dataset, read as it is now; none is an error."""
    from pytest_neuronsupport.dataset.layout import DATA, is_shared

    uri = str(args.results)
    found = read(uri)
    if not (found / DATA).is_dir():
        where = f"{uri}, read into {found}" if is_shared(uri) else str(found)
        raise CommandError(f"no results dataset at {where} (no {found / DATA} folder)")
    return found


def own_folder(args: argparse.Namespace, writes: str) -> Path:
    """The results folder of a command that writes into it (``writes`` says what): a shared
    dataset is refused, its local copy being no place to leave files."""
    from pytest_neuronsupport.dataset.layout import is_shared

    if is_shared(str(args.results)):
        raise CommandError(
            f"{args.command} {writes}: --results must be a folder, not {args.results}"
        )
    return results_dir(args)
