"""The ``neuronsupport`` command: ``--version`` and the tiny-model zoo.

neuronsupport zoo list                 the bundled tiny models
neuronsupport zoo build [NAME...]      build them into the cache (all by default)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_neuronsupport import __version__, options, zoo


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neuronsupport", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    zoo_parser = sub.add_parser("zoo", help="the offline tiny-model zoo")
    zoo_sub = zoo_parser.add_subparsers(dest="zoo_command", required=True)
    zoo_sub.add_parser("list", help="list the tiny models")
    build = zoo_sub.add_parser("build", help="build tiny models into the cache")
    build.add_argument("names", nargs="*", metavar="NAME", help="models to build (default: all)")
    options.add_options(build.add_argument, ["cache"], prefix="--")  # as --neuron-cache
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "zoo" and args.zoo_command == "list":
        for name in zoo.names():
            model = zoo.get(name)
            print(f"zoo:{name:<18} {model.architecture:<36} {model.task:<22} {model.description}")
        return 0
    if args.command == "zoo" and args.zoo_command == "build":
        cache = (Path(args.cache) if args.cache else options.default_cache()).resolve()
        names = args.names or zoo.names()
        unknown = [n for n in names if n not in zoo.names()]
        if unknown:
            print(
                f"neuronsupport: unknown zoo model(s): {', '.join(unknown)} "
                f"(known: {', '.join(zoo.names())})",
                file=sys.stderr,
            )
            return 2
        for name in names:
            print(f"zoo:{name}  {zoo.ensure_built(name, cache)}")
        return 0
    return 2  # pragma: no cover - argparse requires a command


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
