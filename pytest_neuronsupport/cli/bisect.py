"""``neuronsupport bisect``: which release broke a model that newly fails, or where inside the
compiler its compile breaks (the engine: :mod:`pytest_neuronsupport.bisect`)."""

from __future__ import annotations

import argparse

from pytest_neuronsupport.cli.command import Command, own_folder


def _arguments(parser: argparse.ArgumentParser) -> None:
    from pytest_neuronsupport.bisect.command import add_arguments

    add_arguments(parser)


def _bisect(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.bisect.command import asked_from, bisect_command

    own_folder(args, "records its rows in <results>/bisect")
    return bisect_command(asked_from(args))


BISECT = Command(
    ("bisect",),
    (
        ("bisect MODEL --package NAME", "which release of NAME broke the model"),
        ("bisect MODEL --compiler", "where inside the compiler its compile breaks"),
    ),
    "which release of a package broke a model that newly fails (--compiler: where inside "
    "the compiler)",
    _bisect,
    _arguments,
    "Bisect a model across the releases of a package, from the version where it passed to the "
    "one where it fails, running its run.py at each candidate with only that package moved; or "
    "narrow its failure inside the compiler. Progress goes to stderr, the answer to stdout; "
    "the row to <results>/bisect. Exit status 0: found; 1: not found; 2: cannot run.",
)
