"""The neuronsupport command: the tiny-model zoo, and answers read from a results dataset.

neuronsupport zoo list                       the bundled tiny models
neuronsupport zoo list --architectures       the architecture list (model_lists/architectures.toml)
neuronsupport zoo build [NAME...]            build them into the cache (all by default)
neuronsupport zoo build --architectures [CLASS...]  a tiny model of every mapped architecture
neuronsupport select --out FILE              a model list from the Hub, as the dataset card's
neuronsupport lookup MODEL                   a model's rows over every pair
neuronsupport diff PAIR_A PAIR_B             result changes over the models in both pairs
neuronsupport failures [--pair PAIR]         a pair's failures grouped by cause, with a repro
neuronsupport operators [--pair PAIR]        the operators that block models or run on the CPU
neuronsupport coverage [--pair PAIR]...      the support matrix by architecture, over pairs
neuronsupport baseline update --out FILE     expected results from a dataset
neuronsupport check --baseline FILE          a dataset held against expected results
neuronsupport page --out DIR                 a static page to browse the results
neuronsupport card                           the dataset's README.md card
neuronsupport upgrade                        rewrite files of an older schema to the current one
neuronsupport merge                          fold journals (a folder) or shards' rows (s3://) in
neuronsupport push --repo ORG/NAME           the dataset to a Hub dataset repo (--space: the page)
neuronsupport train-report                   the training table, per model
neuronsupport perf                           the performance tables
neuronsupport dashboard                      each pair against the previous one, at a glance
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_neuronsupport import __version__, baseline, options, zoo
from pytest_neuronsupport.dataset.files import UnreadableResultsError

if TYPE_CHECKING:
    from pytest_neuronsupport.dataset.stores import Results


class CommandError(Exception):
    """A command cannot do what was asked; the message says why (exit status 2)."""


def _options(parser: argparse.ArgumentParser, *names: str) -> None:
    """The sweep's options named, as ``--<name>``, with their declared defaults."""
    options.add_options(parser.add_argument, names, prefix="--", defaults=True)


def _results(parser: argparse.ArgumentParser) -> None:
    _options(parser, "results")  # as --neuron-results


def _pair(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--pair", metavar="PAIR", help=help)


def _epilog() -> str:
    """The command's help after its options: the commands, then what ``--results`` may name."""
    results_default = options.BY_NAME["results"].default_text
    return "\n".join(
        [
            *__doc__.splitlines()[2:],
            "",
            f"Commands that read results take --results DIR (default {results_default}).",
            "It may name a shared dataset too: s3://BUCKET/PREFIX (read through its local",
            "copy in the cache, pulled first), or a Hub dataset repo (at HF_ENDPOINT),",
            "hf://datasets/ORG/NAME (its files at its head).",
        ]
    )


_Commands = argparse._SubParsersAction  # the parsers of a command's subcommands


def _zoo_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    zoo_parser = sub.add_parser("zoo", help="the offline tiny-model zoo")
    zoo_sub = zoo_parser.add_subparsers(dest="zoo_command", required=True)
    zoo_list = zoo_sub.add_parser("list", help="list the tiny models")
    zoo_list.add_argument(
        "--architectures",
        action="store_true",
        help="print the model list of every tiny architecture that builds instead (the text of "
        "the bundled model_lists/architectures.toml)",
    )
    build = zoo_sub.add_parser("build", help="build tiny models into the cache")
    build.add_argument("names", nargs="*", metavar="NAME", help="models to build (default: all)")
    build.add_argument(
        "--architectures",
        action="store_true",
        help="build a tiny model of every architecture transformers maps for the card's text "
        "tasks instead (NAMEs are then classes: default, all that build)",
    )
    _options(build, "cache")  # as --neuron-cache


def _select_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    select = sub.add_parser(
        "select", help="write a model list from the Hub's rankings (at HF_ENDPOINT), pinned"
    )
    select.add_argument("--out", metavar="FILE", required=True, help="the model list (TOML)")
    select.add_argument(
        "--top", type=int, default=100, help="models in the selection (default %(default)s)"
    )
    select.add_argument(
        "--depth", type=int, default=1000, help="models per ranking (default %(default)s)"
    )
    select.add_argument(
        "--tasks", nargs="+", metavar="TASK", help="pipeline tags to rank (the card's by default)"
    )
    _options(select, "device", "max-cores", "core-memory")


def _lookup_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    lookup = sub.add_parser("lookup", help="every recorded row of a model, one line per pair")
    lookup.add_argument("model", metavar="MODEL", help="a model id, or part of one (any case)")
    _results(lookup)


def _diff_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    diff = sub.add_parser(
        "diff",
        help="the models whose result differs between two pairs, over the models in both; "
        "those with a row in one pair only are listed apart",
    )
    diff.add_argument("pair_a", metavar="PAIR_A", help="e.g. inductor-2.12.0/transformers-5.24.0")
    diff.add_argument("pair_b", metavar="PAIR_B", help="e.g. inductor-2.13.0/transformers-5.24.0")
    diff.add_argument("--format", choices=("text", "csv", "json"), default="text")
    _results(diff)


def _failures_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    failures = sub.add_parser(
        "failures", help="a pair's failed models grouped by cause, most models first"
    )
    _pair(failures, "the pair to group (default: the newest compiler's)")
    failures.add_argument("--format", choices=("text", "json"), default="text")
    _results(failures)


def _operators_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    ops = sub.add_parser(
        "operators",
        help="the ATen operators ranked by the models they block or run on the CPU in",
        description="The operators a pair's failures name (FAIL(gen), FAIL(forward)) and those "
        "that ran on the CPU (cpu_ops), ranked by how many models they block, then by how many "
        "they fall back on: what a compiler team should implement first.",
    )
    _pair(ops, "the pair to rank (default: the newest compiler's)")
    ops.add_argument("--format", choices=("text", "json"), default="text")
    _results(ops)


def _coverage_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    cover = sub.add_parser(
        "coverage",
        help="the support matrix by architecture: one line per model type and head class",
        description="One line per model type and head class (the rows' model_type and "
        "architecture, from each checkpoint's config): the result in each pair (oldest "
        "version first), the runner, cores, graph breaks, the cause of its failures as "
        "'neuronsupport failures' groups them, and the models it covers.",
    )
    cover.add_argument(
        "--pair",
        metavar="PAIR",
        action="append",
        default=[],
        help="a pair to show, e.g. inductor-2.13.0/transformers-5.24.0 (repeat it for "
        "several; default: every pair)",
    )
    _results(cover)


def _baseline_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    base = sub.add_parser("baseline", help="expected results per model, for a CI check")
    base_sub = base.add_subparsers(dest="baseline_command", required=True)
    update = base_sub.add_parser("update", help="write (or refresh) a baseline from a dataset")
    update.add_argument("--out", metavar="FILE", required=True, help="the baseline file (TOML)")
    _results(update)
    _pair(update, "the pair to take (default: the dataset's only pair)")


def _check_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    check = sub.add_parser("check", help="hold a dataset against a baseline; exit 1 if it fails")
    check.add_argument("--baseline", metavar="FILE", required=True, help="the baseline file")
    check.add_argument(
        "--allow-improvements", action="store_true", help="improvements do not fail the check"
    )
    _results(check)
    _pair(check, "the pair to hold against it (default: the baseline's)")


def _page_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    page = sub.add_parser("page", help="write a static page of the results (opens from file://)")
    page.add_argument("--out", metavar="DIR", required=True, help="folder for index.html")
    _results(page)


def _push_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    push = sub.add_parser(
        "push",
        help="publish the results to a Hub dataset repo (merged with its rows; one commit) "
        "and/or the page as a static Space",
    )
    push.add_argument("--repo", metavar="ORG/NAME", help="the dataset repo (made if absent)")
    push.add_argument("--space", metavar="ORG/NAME", help="the static Space for the page")
    _results(push)


def _dashboard_arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
    board = sub.add_parser(
        "dashboard",
        help="one column per pair: pass rate, speedup, compile time, memory, graph breaks, "
        "each against the previous pair, and the worst models",
    )
    board.add_argument("--format", choices=("text", "json"), default="text")
    _results(board)


def _reads(name: str, help: str) -> Callable[[_Commands[argparse.ArgumentParser]], None]:
    """A command whose only option is ``--results``."""

    def arguments(sub: _Commands[argparse.ArgumentParser]) -> None:
        _results(sub.add_parser(name, help=help))

    return arguments


_COMMAND_ARGUMENTS: tuple[Callable[[_Commands[argparse.ArgumentParser]], None], ...] = (
    _zoo_arguments,
    _select_arguments,
    _lookup_arguments,
    _diff_arguments,
    _failures_arguments,
    _operators_arguments,
    _coverage_arguments,
    _baseline_arguments,
    _check_arguments,
    _page_arguments,
    _reads("card", "write <results>/README.md, the dataset's card"),
    _reads("upgrade", "rewrite data files of an older schema in place"),
    _reads("merge", "fold the rows the shards published (s3://) or left in journals (a folder)"),
    _push_arguments,
    _reads("train-report", "the training table: largest batch native and compiled, per model"),
    _reads("perf", "the performance tables (encoders, decoders, encoder-decoders)"),
    _dashboard_arguments,
)
"""Each command's arguments, in the order ``--help`` lists the commands."""


def parser() -> argparse.ArgumentParser:
    """The ``neuronsupport`` command's parser, each command's arguments from
    :data:`_COMMAND_ARGUMENTS`."""
    p = argparse.ArgumentParser(
        prog="neuronsupport",
        description=__doc__.splitlines()[0],
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for arguments in _COMMAND_ARGUMENTS:
        arguments(sub)
    return p


def _results_dir(args: argparse.Namespace) -> Path:
    from pytest_neuronsupport.dataset.layout import DATA, is_shared

    uri = str(args.results)
    results = _read(uri)
    if not (results / DATA).is_dir():
        where = f"{uri}, read into {results}" if is_shared(uri) else str(results)
        raise CommandError(f"no results dataset at {where} (no {results / DATA} folder)")
    return results


def _own_folder(args: argparse.Namespace, writes: str) -> Path:
    """The results folder of a command that writes into it (``writes`` says what): a shared
    dataset is refused, its local copy being no place to leave files."""
    from pytest_neuronsupport.dataset.layout import is_shared

    if is_shared(str(args.results)):
        raise CommandError(
            f"{args.command} {writes}: --results must be a folder, not {args.results}"
        )
    return _results_dir(args)


def _store(uri: str) -> Results:
    """The results store ``--results`` names: a folder, or a shared dataset (``s3://...``,
    ``hf://datasets/...``) through its local copy in the cache, as a sweep opens it."""
    from pytest_neuronsupport.dataset.stores import ResultsError, open_store

    try:
        return open_store(uri, options.default_cache())
    except ResultsError as exc:
        raise CommandError(str(exc)) from None


def _read(uri: str) -> Path:
    """The local folder to read ``--results`` from, whatever store it names (the store's
    :meth:`~pytest_neuronsupport.dataset.stores.Results.readable`)."""
    from pytest_neuronsupport.dataset.stores import ResultsError

    try:
        return _store(uri).readable()
    except ResultsError as exc:
        raise CommandError(str(exc)) from None


def _zoo_list(args: argparse.Namespace) -> int:
    if args.architectures:
        from pytest_neuronsupport.zoo import architectures

        print(architectures.model_list(), end="")
        return 0
    for name in zoo.names():
        model = zoo.get(name)
        print(f"zoo:{name:<18} {model.architecture:<36} {model.task:<22} {model.description}")
    return 0


def _zoo_build(args: argparse.Namespace) -> int:
    cache = Path(args.cache).resolve()
    if args.architectures:
        return _zoo_build_architectures(args.names, cache)
    names = args.names or zoo.names()
    unknown = [n for n in names if n not in zoo.names()]
    if unknown:
        raise CommandError(
            f"unknown zoo model(s): {', '.join(unknown)} (known: {', '.join(zoo.names())})"
        )
    for name in names:
        print(f"zoo:{name}  {zoo.ensure_built(name, cache)}")
    return 0


def _zoo_build_architectures(names: list[str], cache: Path) -> int:
    from pytest_neuronsupport.zoo import architecture_table, architectures

    mapped = {cls for _, cls, _ in architectures.mapped()}
    unknown = sorted(set(names) - mapped)
    if unknown:
        raise CommandError(f"not a class transformers maps for the card's tasks: {unknown}")
    for cls in names or sorted(architecture_table.BUILT & mapped):
        why = architecture_table.NOT_BUILDABLE.get(cls)
        if why:
            print(f"{cls}  not buildable: {why}")
        else:
            print(f"{cls}  {architectures.ensure_built(cls, cache)}")
    return 0


def _select(args: argparse.Namespace) -> int:
    from huggingface_hub import HfApi, get_token

    from pytest_neuronsupport import devices, hub, selection
    from pytest_neuronsupport.dataset.durable import atomic_write_text

    if args.top < 1 or args.depth < 1:
        raise CommandError("--top and --depth must be positive")
    device = devices.resolve(args.device)
    limits = selection.Limits(
        max_cores=int(args.max_cores),
        core_memory_gb=float(args.core_memory or device.core_capacity_gb()),
        has_token=get_token() is not None,
    )
    tasks = tuple(args.tasks or selection.CARD_TASKS)
    api = HfApi()
    try:
        hub.check_reachable(api.endpoint)
        found = selection.candidates(api, tasks, args.depth)
    except hub.HubFault as exc:
        raise CommandError(str(exc)) from None
    except Exception as exc:  # the client raises httpx's, its own and OSError's
        raise CommandError(
            f"cannot list the models of {api.endpoint}: {type(exc).__name__}: {exc}"
        ) from None
    entries = selection.select(found, args.top, limits)
    header = {
        "endpoint": api.endpoint,
        "at": selection.now(),
        "options": f"--top {args.top} --depth {args.depth} --tasks {' '.join(tasks)} "
        f"--max-cores {limits.max_cores} --core-memory {limits.core_memory_gb:g} "
        f"(device {device.name})",
    }
    out = Path(args.out)
    atomic_write_text(out, selection.list_text(entries, header))
    ranked = sum(e.selection_rank is not None for e in entries)
    excluded = sum(e.exclusion is not None for e in entries)
    print(f"{out}: {len(entries)} models of {api.endpoint}: {ranked} selected, {excluded} excluded")
    return 0


def _lookup(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.lookup import lookup

    lines = lookup(_results_dir(args), args.model)
    print("\n".join(lines))
    return 0 if not lines[0].startswith("no model matching") else 1


def _diff(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.lookup import diff, format_changes

    found = diff(_results_dir(args), args.pair_a, args.pair_b)
    sys.stdout.write(format_changes(found, args.pair_a, args.pair_b, args.format))
    return 0


def _failures(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.failures import format_groups, pair_failures

    pair, groups = pair_failures(_results_dir(args), args.pair)
    sys.stdout.write(format_groups(groups, pair, args.format))
    return 0


def _operators(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.operators import format_operators, pair_operators

    pair, found, tracked = pair_operators(_results_dir(args), args.pair)
    sys.stdout.write(format_operators(found, pair, tracked, args.format))
    return 0


def _coverage(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.coverage import coverage_report

    lines = coverage_report(_results_dir(args), args.pair)
    print("\n".join(lines))
    return 0 if not lines[0].startswith("no row names its architecture") else 1


def _pair_results(results: Path, pair: str) -> tuple[dict[str, str], dict[str, int | None]]:
    """Each model's latest result in the pair, and its graph breaks (None: not recorded)."""
    from pytest_neuronsupport.views.lookup import latest_rows, resolve_pair

    rows = latest_rows(results, resolve_pair(results, pair))
    return (
        {model_id: str(row["result"]) for model_id, row in rows.items()},
        {model_id: row.get("graph_breaks") for model_id, row in rows.items()},
    )


def _baseline_update(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.lookup import pairs

    results, out = _results_dir(args), Path(args.out)
    pair = args.pair
    if pair is None:
        known = pairs(results)
        if len(known) != 1:
            raise CommandError(f"--pair is needed: the dataset has {len(known)} ({known})")
        pair = known[0]
    previous = baseline.read(out) if out.is_file() else None
    pair_results, breaks = _pair_results(results, pair)
    pair = pair.removeprefix("data/").removesuffix(".parquet")
    new = baseline.Baseline.from_results(pair, pair_results, previous, breaks)
    baseline.write(out, new)
    flaky = sum(e.flaky for e in new.expected.values())
    print(f"{out}: {len(new.expected)} model(s) of {pair}" + (f", {flaky} flaky" if flaky else ""))
    return 0


def _check(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.dataset.layout import run_py_path
    from pytest_neuronsupport.views.lookup import latest_rows, resolve_pair

    results = _results_dir(args)
    expected = baseline.read(_baseline_file(args.baseline))
    pair = resolve_pair(results, args.pair or expected.pair)
    rows = list(latest_rows(results, pair).values())
    scripts = {r["model_id"]: run_py_path(results, pair, r["model_id"]) for r in rows}
    comparison = baseline.compare(
        expected, rows, run_py=scripts, allow_improvements=args.allow_improvements
    )
    if pair.removesuffix(".parquet") != expected.pair:
        print(f"(held {pair.removesuffix('.parquet')} against a baseline of {expected.pair})")
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


def _page(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.page import write_page

    print(write_page(_results_dir(args), Path(args.out)))
    return 0


def _card(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.card import write_card

    results = _own_folder(args, "writes <results>/README.md")
    if _upgrade_files(results):  # the card's configs load only files of one schema
        return 1
    print(write_card(results))
    return 0


def _upgrade_files(results: Path) -> int:
    """Upgrade the dataset's files; print what was rewritten and what could not be read."""
    from pytest_neuronsupport.dataset.files import upgrade_dataset

    unreadable: list[tuple[Path, str]] = []
    for path in upgrade_dataset(results, unreadable=unreadable):
        print(f"upgraded {path}")
    for path, why in unreadable:
        print(f"neuronsupport: {path} was left as it is: {why}", file=sys.stderr)
    return len(unreadable)


def _upgrade(args: argparse.Namespace) -> int:
    return 1 if _upgrade_files(_own_folder(args, "rewrites the files in place")) else 0


def _merge(args: argparse.Namespace) -> int:
    """The store ``--results`` names folds in what sweeps left on their way to it."""
    from pytest_neuronsupport.dataset.layout import is_shared

    uri = str(args.results)
    if not is_shared(uri):
        _results_dir(args)  # a folder without a dataset: said, not made
    merged = _store(uri).merge()
    for line in merged.lines:
        print(line)
    for problem in merged.problems:
        print(f"neuronsupport merge: {problem}", file=sys.stderr)
    return 1 if merged.problems else 0


def _push(args: argparse.Namespace) -> int:
    import tempfile

    from pytest_neuronsupport.dataset.stores.hub import HubDataset, HubError, push_space
    from pytest_neuronsupport.views.page import write_page

    if not args.repo and not args.space:
        raise CommandError("say where: --repo ORG/NAME (the dataset), --space ORG/NAME (the page)")
    results = _results_dir(args)
    with tempfile.TemporaryDirectory(prefix="neuronsupport-push-") as tmp:
        pushed, source = results, None
        try:
            if args.repo:
                dataset = HubDataset(f"hf://datasets/{args.repo}")
                pushed, source = Path(tmp) / "pushed", dataset.uri
                summary = dataset.push(results, merged=pushed)
                print("\n".join(summary.lines()))
                if summary.retried:
                    print(f"  ({summary.retried} commit(s) refused: another push came first)")
            if args.space:
                page = write_page(pushed, Path(tmp) / "page").parent
                print(push_space(args.space, page, source))
        except (HubError, ValueError) as exc:
            raise CommandError(str(exc)) from None
    return 0


def _train_report(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.train import train_report

    results = _read(str(args.results))
    lines = train_report(results)
    print("\n".join(lines))
    return 0 if not lines[0].startswith("no training results") else 1


def _perf(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.perf import WIDTH, perf_report

    results = _read(str(args.results))
    lines = perf_report(results, shutil.get_terminal_size((WIDTH, 24)).columns)
    print("\n".join(lines))
    return 0 if not lines[0].startswith("no performance results") else 1


def _dashboard(args: argparse.Namespace) -> int:
    from pytest_neuronsupport.views.dashboard import dashboard_report

    sys.stdout.write(dashboard_report(_results_dir(args), args.format))
    return 0


_COMMANDS: dict[tuple[str, str | None], Callable[[argparse.Namespace], int]] = {
    ("zoo", "list"): _zoo_list,
    ("zoo", "build"): _zoo_build,
    ("select", None): _select,
    ("lookup", None): _lookup,
    ("diff", None): _diff,
    ("failures", None): _failures,
    ("operators", None): _operators,
    ("coverage", None): _coverage,
    ("baseline", "update"): _baseline_update,
    ("check", None): _check,
    ("page", None): _page,
    ("card", None): _card,
    ("upgrade", None): _upgrade,
    ("merge", None): _merge,
    ("push", None): _push,
    ("train-report", None): _train_report,
    ("perf", None): _perf,
    ("dashboard", None): _dashboard,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    sub = getattr(args, f"{args.command}_command", None)
    try:
        return _COMMANDS[(args.command, sub)](args)
    except (CommandError, baseline.BaselineError, UnreadableResultsError, ValueError) as exc:
        print(f"neuronsupport {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
