"""The commands that talk to the Hugging Face Hub (at ``HF_ENDPOINT``): ``select`` writes a
model list from its rankings, ``push`` publishes the results and the page."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_neuronsupport.cli.command import (
    Command,
    CommandError,
    results,
    results_dir,
    sweep_options,
)


def _select_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="FILE", required=True, help="the model list (TOML)")
    parser.add_argument(
        "--top", type=int, default=100, help="models in the selection (default %(default)s)"
    )
    parser.add_argument(
        "--depth", type=int, default=1000, help="models per ranking (default %(default)s)"
    )
    parser.add_argument(
        "--tasks", nargs="+", metavar="TASK", help="pipeline tags to rank (the card's by default)"
    )
    sweep_options(parser, "device", "max-cores", "core-memory")


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


def _push_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", metavar="ORG/NAME", help="the dataset repo (made if absent)")
    parser.add_argument("--space", metavar="ORG/NAME", help="the static Space for the page")
    results(parser)


def _push(args: argparse.Namespace) -> int:
    import tempfile

    from pytest_neuronsupport.dataset.stores.hub import HubDataset, HubError, push_space
    from pytest_neuronsupport.views.page import write_page

    if not args.repo and not args.space:
        raise CommandError("say where: --repo ORG/NAME (the dataset), --space ORG/NAME (the page)")
    folder = results_dir(args)
    with tempfile.TemporaryDirectory(prefix="neuronsupport-push-") as tmp:
        pushed, source = folder, None
        try:
            if args.repo:
                dataset = HubDataset(f"hf://datasets/{args.repo}")
                pushed, source = Path(tmp) / "pushed", dataset.uri
                summary = dataset.push(folder, merged=pushed)
                print("\n".join(summary.lines()))
                if summary.retried:
                    print(f"  ({summary.retried} commit(s) refused: another push came first)")
            if args.space:
                page = write_page(pushed, Path(tmp) / "page").parent
                print(push_space(args.space, page, source))
        except (HubError, ValueError) as exc:
            raise CommandError(str(exc)) from None
    return 0


SELECT = Command(
    ("select",),
    (("select --out FILE", "a model list from the Hub, as the dataset card's"),),
    "write a model list from the Hub's rankings (at HF_ENDPOINT), pinned",
    _select,
    _select_arguments,
)
PUSH = Command(
    ("push",),
    (("push --repo ORG/NAME", "the dataset to a Hub dataset repo (--space: the page)"),),
    "publish the results to a Hub dataset repo (merged with its rows; one commit) and/or the "
    "page as a static Space",
    _push,
    _push_arguments,
)
