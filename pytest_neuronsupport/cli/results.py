"""The commands that keep a results dataset: expected results written and held
(``baseline update``, ``check``), files upgraded to the current schema, journals and shards'
rows merged in."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_neuronsupport import baseline
from pytest_neuronsupport.cli.command import (
    Command,
    CommandError,
    own_folder,
    pair,
    results,
    results_dir,
    store,
)

BASELINE_HELP = "expected results per model, for a CI check"
"""The ``baseline`` group's line in ``neuronsupport --help``'s list of commands."""


def _update_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="FILE", required=True, help="the baseline file (TOML)")
    results(parser)
    pair(parser, "the pair to take (default: the dataset's only pair)")


def _pair_results(folder: Path, name: str) -> tuple[dict[str, str], dict[str, int | None]]:
    """Each model's latest result in the pair, and its graph breaks (None: not recorded)."""
    from pytest_neuronsupport.views.lookup import latest_rows, resolve_pair

    rows = latest_rows(folder, resolve_pair(folder, name))
    return (
        {model_id: str(row["result"]) for model_id, row in rows.items()},
        {model_id: row.get("graph_breaks") for model_id, row in rows.items()},
    )


def _update(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.lookup import pairs

    folder, out = results_dir(args), Path(args.out)
    name = args.pair
    if name is None:
        known = pairs(folder)
        if len(known) != 1:
            raise CommandError(f"--pair is needed: the dataset has {len(known)} ({known})")
        name = known[0]
    previous = baseline.read(out) if out.is_file() else None
    pair_results, breaks = _pair_results(folder, name)
    name = name.removeprefix("data/").removesuffix(".parquet")
    new = baseline.Baseline.from_results(name, pair_results, previous, breaks)
    baseline.write(out, new)
    flaky = sum(e.flaky for e in new.expected.values())
    print(f"{out}: {len(new.expected)} model(s) of {name}" + (f", {flaky} flaky" if flaky else ""))
    return 0


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", metavar="FILE", required=True, help="the baseline file")
    parser.add_argument(
        "--allow-improvements", action="store_true", help="improvements do not fail the check"
    )
    results(parser)
    pair(parser, "the pair to hold against it (default: the baseline's)")


def _check(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.dataset.layout import run_py_path
    from pytest_neuronsupport.views.lookup import latest_rows, resolve_pair

    folder = results_dir(args)
    expected = baseline.read(_baseline_file(args.baseline))
    held = resolve_pair(folder, args.pair or expected.pair)
    rows = list(latest_rows(folder, held).values())
    scripts = {r["model_id"]: run_py_path(folder, held, r["model_id"]) for r in rows}
    comparison = baseline.compare(
        expected, rows, run_py=scripts, allow_improvements=args.allow_improvements
    )
    if held.removesuffix(".parquet") != expected.pair:
        print(f"(held {held.removesuffix('.parquet')} against a baseline of {expected.pair})")
    print("\n".join(comparison.lines()))
    return 0 if comparison.ok else 1


def _baseline_file(name: str) -> Path:
    """A baseline file: a path, or ``hf://datasets/ORG/NAME/PATH`` (downloaded)."""
    from pytest_neuronsupport.dataset.layout import is_hub

    if not is_hub(name):
        return Path(name)
    from pytest_neuronsupport.dataset.stores.hub import HubError, download_file

    try:
        return download_file(name)
    except HubError as exc:
        raise CommandError(str(exc)) from None


def upgrade_files(folder: Path) -> int:
    """Upgrade the dataset's files; print what was rewritten and what could not be read (how
    many: the exit status of a command that needs them all)."""
    from pytest_neuronsupport.dataset.files import upgrade_dataset

    unreadable: list[tuple[Path, str]] = []
    for path in upgrade_dataset(folder, unreadable=unreadable):
        print(f"upgraded {path}")
    for path, why in unreadable:
        print(f"neuronsupport: {path} was left as it is: {why}", file=sys.stderr)
    return len(unreadable)


def _upgrade(args: argparse.Namespace) -> int:
    return 1 if upgrade_files(own_folder(args, "rewrites the files in place")) else 0


def _merge(args: argparse.Namespace) -> int:
    """The store ``--results`` names folds in what sweeps left on their way to it."""
    from pytest_neuronsupport.dataset.layout import is_shared

    uri = str(args.results)
    if not is_shared(uri):
        results_dir(args)  # a folder without a dataset: said, not made
    merged = store(uri).merge()
    for line in merged.lines:
        print(line)
    for problem in merged.problems:
        print(f"neuronsupport merge: {problem}", file=sys.stderr)
    return 1 if merged.problems else 0


BASELINE_UPDATE = Command(
    ("baseline", "update"),
    (("baseline update --out FILE", "expected results from a dataset"),),
    "write (or refresh) a baseline from a dataset",
    _update,
    _update_arguments,
)
CHECK = Command(
    ("check",),
    (("check --baseline FILE", "a dataset held against expected results"),),
    "hold a dataset against a baseline; exit 1 if it fails",
    _check,
    _check_arguments,
)
UPGRADE = Command(
    ("upgrade",),
    (("upgrade", "rewrite files of an older schema to the current one"),),
    "rewrite data files of an older schema in place",
    _upgrade,
    results,
)
MERGE = Command(
    ("merge",),
    (("merge", "fold journals (a folder) or shards' rows (s3://) in"),),
    "fold the rows the shards published (s3://) or left in journals (a folder)",
    _merge,
    results,
)
