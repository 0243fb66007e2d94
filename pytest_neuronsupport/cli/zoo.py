"""``neuronsupport zoo``: the offline tiny-model zoo, listed and built."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_neuronsupport import zoo
from pytest_neuronsupport.cli.command import Command, CommandError, sweep_options

HELP = "the offline tiny-model zoo"
"""The ``zoo`` group's line in ``neuronsupport --help``'s list of commands."""


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--architectures",
        action="store_true",
        help="print the model list of every tiny architecture that builds instead (the text of "
        "the bundled model_lists/architectures.toml)",
    )


def _list(args: argparse.Namespace) -> int:
    if args.architectures:
        from pytest_neuronsupport.zoo import architectures

        print(architectures.model_list(), end="")
        return 0
    for name in zoo.names():
        model = zoo.get(name)
        print(f"zoo:{name:<18} {model.architecture:<36} {model.task:<22} {model.description}")
    return 0


def _build_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="models to build (default: all)")
    parser.add_argument(
        "--architectures",
        action="store_true",
        help="build a tiny model of every architecture transformers maps for the card's text "
        "tasks instead (NAMEs are then classes: default, all that build)",
    )
    sweep_options(parser, "cache")  # as --neuron-cache


def _build(args: argparse.Namespace) -> int:
    cache = Path(args.cache).resolve()
    if args.architectures:
        return _build_architectures(args.names, cache)
    names = args.names or zoo.names()
    unknown = [n for n in names if n not in zoo.names()]
    if unknown:
        raise CommandError(
            f"unknown zoo model(s): {', '.join(unknown)} (known: {', '.join(zoo.names())})"
        )
    for name in names:
        print(f"zoo:{name}  {zoo.ensure_built(name, cache)}")
    return 0


def _build_architectures(names: list[str], cache: Path) -> int:
    from pytest_neuronsupport.zoo import architectures, table

    mapped = {cls for _, cls, _ in architectures.mapped()}
    unknown = sorted(set(names) - mapped)
    if unknown:
        raise CommandError(f"not a class transformers maps for the card's tasks: {unknown}")
    for cls in names or sorted(table.built() & mapped):
        why = table.not_buildable().get(cls)
        if why:
            print(f"{cls}  not buildable: {why}")
        else:
            print(f"{cls}  {architectures.ensure_built(cls, cache)}")
    return 0


COMMANDS = (
    Command(
        ("zoo", "list"),
        (
            ("zoo list", "the bundled tiny models"),
            ("zoo list --architectures", "the architecture list (model_lists/architectures.toml)"),
        ),
        "list the tiny models",
        _list,
        _list_arguments,
    ),
    Command(
        ("zoo", "build"),
        (
            ("zoo build [NAME...]", "build them into the cache (all by default)"),
            (
                "zoo build --architectures [CLASS...]",
                "a tiny model of every mapped architecture",
            ),
        ),
        "build tiny models into the cache",
        _build,
        _build_arguments,
    ),
)
