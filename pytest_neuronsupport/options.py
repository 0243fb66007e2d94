"""The options of a sweep, defined once: pytest's flags and ini keys, the ``neuronsupport``
command's flags, and their reference page (the :class:`~pytest_neuronsupport.settings.Settings`
they resolve to are in :mod:`pytest_neuronsupport.settings`).

Each :class:`Option` of :data:`OPTIONS` is ``--neuron-<name>`` and the ini key
``neuron_<name>`` in pytest, and ``--<name>`` for the commands of ``neuronsupport`` that take it
(as pytest-benchmark shares its option builders with its command). A flag wins over the ini key,
which wins over the default. Paths given as flags are relative to the folder pytest runs in; as
ini keys, to the ini file's folder.

An option's default is its declaration's, and only there: the help texts, the ini keys, the
command's flags, the ``Settings`` fields and the reference page
(``python -m pytest_neuronsupport.options > docs/options.md``) all read it from
:data:`OPTIONS`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import devices
from pytest_neuronsupport.compilecache import bucket_uri
from pytest_neuronsupport.modellist import parse_io, parse_sizes
from pytest_neuronsupport.pricing import INSTANCES, parse_instance
from pytest_neuronsupport.runners.lib.protocol import DTYPES

ISOLATIONS = ("fork", "fresh")
#: The orders models start in (``--neuron-order``): by predicted cost, largest first
#: (:mod:`pytest_neuronsupport.order`), or the lists' order.
START_ORDERS = ("cost", "list")
#: The English judge unless told otherwise: a small instruct model, pinned to one commit.
DEFAULT_JUDGE = "Qwen/Qwen2.5-0.5B-Instruct@7ae557604adf67be50417f59c2c2f167def9a775"
#: The kinds of option: a switch, text, positive numbers ("int", "float"), a count that may be
#: 0 ("size"), a path, and paths.
KINDS = ("flag", "text", "int", "float", "size", "path", "paths")


def default_leases() -> Path:
    """One folder per machine: every sweep on it, whatever its cache, leases cores there."""
    folder = os.path.join(tempfile.gettempdir(), "pytest-neuronsupport-leases")
    return Path(os.environ.get("NEURONSUPPORT_LEASES", folder))


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.environ.get("NEURONSUPPORT_CACHE", os.path.join(base, "pytest-neuronsupport")))


@dataclass(frozen=True)
class Option:
    """One option: ``--neuron-<name>`` / ``neuron_<name>`` (pytest), ``--<name>`` (command)."""

    name: str
    #: What it does, without its default (``help_text`` adds it).
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    #: One of :data:`KINDS`.
    kind: str = "text"
    #: The value when neither the flag nor the ini key is given (None: none), as its text would
    #: be given; or a function of no arguments for a default computed when the options are
    #: resolved (``described`` then says it in words).
    default: Any = None
    #: The default in words, where it is not a plain value: a computed one, or the device's.
    described: str | None = None
    #: Reads a "text" option's value (given or default) into what ``Settings`` holds.
    parse: Callable[[str], Any] | None = None
    #: Its former name, still taken as a flag and an ini key (scripts and ini files have it).
    formerly: str | None = None

    @property
    def flags(self) -> tuple[str, ...]:
        """Its names as a flag's ``--neuron-<name>`` would be written, the former one last."""
        return (self.name,) if self.formerly is None else (self.name, self.formerly)

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def default_text(self) -> str | None:
        """The default as the help and the reference say it (None: the option has none)."""
        if self.described is not None:
            return self.described
        if self.kind == "flag" or self.default is None:
            return None
        return str(self.default)

    def help_text(self, more: str = "") -> str:
        """The help, then ``more``, then the default: ``"seconds one model may run (default
        1800)"``."""
        default = self.default_text
        if default is None:
            return f"{self.help}{more}"
        return f"{self.help}{more} (default{':' if self.described else ''} {default})"

    def default_value(self) -> Any:
        """The default as ``Settings`` holds it (computed, parsed); None: no default."""
        if self.kind == "flag":
            return False
        default = self.default() if callable(self.default) else self.default
        if default is None or self.kind in ("path", "paths"):
            return default
        return parsed_value(self, str(default))


OPTIONS: tuple[Option, ...] = (
    Option("sweep", "run the model sweep: one test per model of the model lists", kind="flag"),
    Option(
        "models",
        "model list files (TOML)",
        metavar="PATH",
        kind="paths",
        described="the bundled tiny.toml, or train.toml with --neuron-train",
    ),
    Option(
        "device",
        "auto|neuron|cuda|cpu; auto: neuron if present, else cuda, else cpu",
        choices=devices.CHOICES,
        default="auto",
    ),
    Option(
        "backend",
        "torch.compile backend name, or package.module:callable",
        metavar="NAME",
        described="the device's: neuron on neuron, inductor on cuda and cpu",
    ),
    Option(
        "dtype",
        "dtype of the device run; auto: bf16 on accelerators, fp32 on cpu",
        choices=("auto", *DTYPES),
        default="auto",
    ),
    Option(
        "results",
        "results folder, or the dataset a sweep's shards share: s3://bucket/prefix, or a "
        "Hugging Face Hub dataset repo hf://datasets/ORG/NAME",
        "DIR|URI",
        kind="path",
        default="results",
    ),
    Option("timeout", "seconds one model may run", "SECONDS", kind="float", default=1800),
    Option(
        "cache",
        "cache: tiny models, references, compile caches",
        "DIR",
        kind="path",
        default=default_cache,
        described="$NEURONSUPPORT_CACHE, else $XDG_CACHE_HOME/pytest-neuronsupport, else "
        "~/.cache/pytest-neuronsupport",
    ),
    Option(
        "compile-cache",
        "share the compile cache through a Hub Storage Bucket, hf://buckets/NAMESPACE/NAME: "
        "its folder for the compiler (neuronxcc-<version>/) seeds the local cache before the "
        "first run, and what the sweep compiled is published there after it, each shard after "
        "its own part (publishing, and making a missing bucket, need a token that may write "
        "there; a read-only one seeds). The neuron device's NEFF cache",
        "URI",
        parse=bucket_uri,
    ),
    Option("limit", "run at most N models, going down the lists in order", "N", kind="int"),
    Option("rerun", "run models again even when their run.py is the one recorded", kind="flag"),
    Option(
        "minify",
        "on a compile, run or output failure, shrink the failing graph with PyTorch's minifier "
        "into a standalone repro.py beside run.py",
        kind="flag",
    ),
    Option(
        "minify-timeout",
        "seconds the minifier may take for one model",
        "SECONDS",
        kind="float",
        default=600,
    ),
    Option(
        "max-memory",
        "resident memory one model's run may use before it is stopped",
        "GB",
        kind="float",
    ),
    Option(
        "hub-cache-max",
        "keep the Hub's cache within this size: the checkpoints this sweep downloaded are "
        "evicted after their model's runs, least recently used first (never a model still to "
        "run, nor the judge); without it, once the disk holding the cache has less free than "
        "a quarter of its size, at most 25 GB",
        "GB",
        kind="float",
    ),
    Option(
        "prefetch-gb",
        "download the files of the models to come while others run, up to this much not yet "
        "run (no more than --neuron-hub-cache-max); 0: only each model's own, before its "
        "cores are leased",
        "GB",
        kind="float",
        default=50,
    ),
    Option("max-cores", "largest number of cores a model may get", "N", kind="int", default=16),
    Option(
        "core-memory",
        "memory of one core for sizing models",
        "GB",
        kind="float",
        described="the device's",
    ),
    Option(
        "prefill-chunk",
        "decoders prefill in chunks of N tokens; 0: in one pass",
        "N",
        kind="size",
        default=32,
    ),
    Option(
        "judge",
        "English judge when the CPU comparison does not run: a Hub id[@revision], a local path, "
        "zoo:<name>, or none",
        "MODEL",
        default=DEFAULT_JUDGE,
    ),
    Option(
        "baseline",
        "expected results (TOML from `neuronsupport baseline update`; a path, or a file of a "
        "Hub dataset repo, hf://datasets/ORG/NAME/PATH): a regression, or an improvement not "
        "yet in it, fails the session",
        "FILE",
        kind="path",
    ),
    Option(
        "baseline-allow-improvements",
        "models better than their baseline are listed but do not fail the session",
        kind="flag",
    ),
    Option(
        "bisect",
        "after the sweep, bisect each model that newly fails (it PASSed in the baseline, or "
        "without one in the dataset's previous pair) across the releases of the package that "
        "moved: which release broke it (rows in <results>/bisect; `neuronsupport bisect` does "
        "one model)",
        kind="flag",
    ),
    Option(
        "bisect-max-runs",
        "the most runs of models a bisection takes (a sweep's, --neuron-bisect: all its "
        "bisections together, and a model it does not reach is not bisected), both ends and "
        "the boundary's re-runs included",
        "N",
        kind="int",
        default=50,
    ),
    Option(
        "bisect-package",
        "the package --neuron-bisect bisects and its good version, NAME==VERSION (NAME alone "
        "for the library or the compiler's package, at the version the compared pair names)",
        "NAME[==GOOD]",
        described="the library (transformers) where the compared pair names another version of "
        "it, else the compiler's package (torch, neuronx-cc)",
    ),
    Option(
        "require-check",
        "a PASS whose output was compared with nothing (checked_by none: no CPU reference, no "
        "judge) fails the session; its test and row stay PASS",
        kind="flag",
    ),
    Option(
        "shard",
        "run the I-th of N disjoint, cost-balanced parts of the lists",
        "I/N",
        described="from JOB_COMPLETION_INDEX or AWS_BATCH_JOB_ARRAY_INDEX when set, else all "
        "of the lists",
    ),
    Option("shards", "how many shards there are, where the engine does not say", "N", kind="int"),
    Option(
        "leases",
        "folder of this machine's core leases, shared by every sweep on it whatever its cache",
        "DIR",
        kind="path",
        default=default_leases,
        described="$NEURONSUPPORT_LEASES, else <tmp>/pytest-neuronsupport-leases",
    ),
    Option(
        "train",
        "training sweep: does each model train, and the largest batch that fits, native and "
        "compiled (rows in <results>/train; default list: the bundled train.toml)",
        kind="flag",
    ),
    Option(
        "train-max-batch",
        "largest batch size a training batch search tries",
        "N",
        kind="int",
        default=256,
    ),
    Option(
        "perf",
        "after each model's support run, benchmark it: throughput, latency percentiles, TTFT "
        "and TPOT, compiled and eager (rows in <results>/perf; `neuronsupport perf` prints them)",
        kind="flag",
        formerly="bench",
    ),
    Option(
        "perf-batch",
        "batch sizes to benchmark, e.g. 1,16",
        "B[,B...]",
        default="1",
        parse=parse_sizes,
        formerly="bench-batch",
    ),
    Option(
        "perf-seq-len",
        "encoders' sequence lengths",
        "N[,N...]",
        default="128",
        parse=parse_sizes,
        formerly="bench-seq-len",
    ),
    Option(
        "perf-io",
        "generation's input/output lengths, e.g. 128/128,2048/128",
        "IN/OUT[,...]",
        default="128/128",
        parse=parse_io,
        formerly="bench-io",
    ),
    Option(
        "perf-rounds",
        "fewest timed rounds per configuration (compiled, and eager)",
        "N",
        kind="int",
        default=10,
        formerly="bench-rounds",
    ),
    Option(
        "perf-min-seconds",
        "fewest seconds of timed rounds per configuration: rounds go on until both this and "
        "--neuron-perf-rounds are reached",
        "SECONDS",
        kind="float",
        default=2.0,
        formerly="bench-min-seconds",
    ),
    Option(
        "perf-max-rounds",
        "most timed rounds per configuration, whatever --neuron-perf-min-seconds asks",
        "N",
        kind="int",
        default=1000,
        formerly="bench-max-rounds",
    ),
    Option(
        "perf-warmup",
        "untimed warm-up rounds after compiling",
        "N",
        kind="size",
        default=2,
        formerly="bench-warmup",
    ),
    Option(
        "perf-replicas",
        "data parallel: replicas of a one-core model run at the same time, one per leased core",
        "N",
        kind="int",
        default=1,
        formerly="bench-replicas",
    ),
    Option(
        "price-per-hour", "hourly price of the machine, for the cost per 1M", "USD", kind="float"
    ),
    Option(
        "instance",
        "instance type (docs/performance.md): its documented per-core peaks make the roofline, "
        "its on-demand price, where one is sourced (trn1), the cost per 1M; one of "
        + ", ".join(f"`{name}`" for name in INSTANCES)
        + ", or any `trn3.<size>`",
        "TYPE",
        parse=parse_instance,
    ),
    Option(
        "isolation",
        "fork: runs forked from a warm server; fresh: a new python",
        choices=ISOLATIONS,
        default="fork",
    ),
    Option(
        "order",
        "under several xdist workers or lanes, the order models start in: cost, largest first (the "
        "predicted core-seconds: a recorded row's wall time x cores, else its size); list, "
        "the lists' order. Rows, junit and the summary keep the lists' order either way",
        choices=START_ORDERS,
        default="cost",
    ),
    Option(
        "lanes",
        "models one pytest process runs at once, each waiting for its own cores: one process "
        "can then keep a device of many cores busy with small models (under xdist's -n, each "
        "worker runs its own lanes; the models start in --neuron-order)",
        "N",
        kind="int",
        default=1,
    ),
)
BY_NAME = {option.name: option for option in OPTIONS}


def parsed_value(option: Option, text: str) -> Any:
    """The value of ``text`` given for ``option`` (a flag, an ini key or its default).

    Raises:
        pytest.UsageError: not one of its choices, not a positive number (a size may be 0), or
            refused by its ``parse``.
    """
    if option.choices and text not in option.choices:
        raise pytest.UsageError(
            f"neuronsupport: neuron_{option.dest} = {text!r}: choose from "
            f"{', '.join(option.choices)}"
        )
    if option.kind in ("int", "size", "float"):
        try:
            value: float = int(text) if option.kind in ("int", "size") else float(text)
        except ValueError:
            raise pytest.UsageError(
                f"neuronsupport: --neuron-{option.name} {text!r} is not a number"
            ) from None
        if value < 0 or (value == 0 and option.kind != "size"):
            raise pytest.UsageError(
                f"neuronsupport: --neuron-{option.name} must be positive, not {text}"
            )
        return value
    if option.parse is not None:
        try:
            return option.parse(text)
        except ValueError as exc:
            raise pytest.UsageError(f"neuronsupport: {exc}") from None
    return text


def declared(name: str) -> Any:
    """Option ``name``'s default, as ``Settings`` holds it."""
    return BY_NAME[name].default_value()


def add_options(
    addoption: Callable[..., Any],
    names: Sequence[str] | None = None,
    prefix: str = "--neuron-",
    *,
    defaults: bool = False,
) -> None:
    """Add the options named (all by default) through ``addoption``: a pytest option group's,
    or an ``argparse`` parser's ``add_argument`` (with ``prefix="--"``).

    Their values default to None, so that an ini key can stand in for a flag not given; with
    ``defaults`` (a command, which has no ini file), to the declared defaults.
    """
    for option in OPTIONS if names is None else [BY_NAME[n] for n in names]:
        flags = [f"{prefix}{name}" for name in option.flags]
        help = option.help_text().replace("%", "%%")  # argparse formats help with %
        dest = f"{'neuron_' if prefix == '--neuron-' else ''}{option.dest}"
        if option.kind == "flag":
            addoption(*flags, action="store_true", default=False, help=help, dest=dest)
            continue
        default = None
        if defaults:
            default = option.default() if callable(option.default) else option.default
        if option.kind == "paths":
            addoption(*flags, nargs="+", metavar=option.metavar, default=default, help=help)
        else:
            addoption(
                *flags,
                metavar=option.metavar,
                default=default,
                choices=option.choices,
                help=help,
                dest=dest,
            )


def add_ini(parser: pytest.Parser) -> None:
    """The ini key of every valued option (and its former key, read where it is the only one
    given: :func:`ini_keys`)."""
    for option in OPTIONS:
        if option.kind == "paths":
            parser.addini(f"neuron_{option.dest}", option.help_text("; one per line"), type="paths")
        elif option.kind != "flag":
            for key in ini_keys(option):
                parser.addini(key, option.help_text(), default=None)


def ini_keys(option: Option) -> list[str]:
    """An option's ini keys, its own first: ``neuron_<name>``, then its former name's."""
    return [f"neuron_{name.replace('-', '_')}" for name in option.flags]


#: The page ``reference_markdown`` writes, and the command that writes it.
REFERENCE_PAGE = "docs/options.md"
REFERENCE_COMMAND = f"python -m pytest_neuronsupport.options > {REFERENCE_PAGE}"


def _markdown(text: str) -> str:
    """Plain text as Markdown: `code` spans kept, what Markdown or a table reads otherwise
    escaped (a code span never holds a pipe: tables split cells on it in some renderers)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside the code spans
        escaped = "".join(f"\\{c}" if c in "\\*_[]|#" else c for c in parts[i])
        parts[i] = escaped.replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _code(text: str) -> str:
    return f"`{text}`" if "|" not in text and "`" not in text else _markdown(text)


def reference_markdown() -> str:
    """The options' reference page (Markdown), from :data:`OPTIONS`."""
    lines = [
        "# Options",
        "",
        f"<!-- Generated from pytest_neuronsupport/options.py by `{REFERENCE_COMMAND}`. -->",
        "",
        "Each option is a pytest flag, `--neuron-<name>`, and, when it takes a value, an ini "
        "key, `neuron_<name>`; the `neuronsupport` commands that take one spell it "
        "`--<name>`. A flag wins over the ini key, which wins over the default. Paths given "
        "as flags are relative to the folder pytest runs in; as ini keys, to the ini file's "
        "folder.",
        "",
        "| Flag | Ini key | Default | Meaning |",
        "| --- | --- | --- | --- |",
    ]
    for option in OPTIONS:
        flag = _code(f"--neuron-{option.name}")
        if option.metavar:
            flag += f" {_markdown(option.metavar)}"
        ini = "" if option.kind == "flag" else _code(f"neuron_{option.dest}")
        if option.kind == "flag":
            default = "off"
        elif option.described is not None:
            default = _markdown(option.described)
        elif option.default is not None:
            default = _code(str(option.default))
        else:
            default = "none"
        meaning = _markdown(option.help)
        if option.kind == "paths":
            meaning += " (in the ini key, one per line)"
        if option.choices:
            meaning += f"; one of {', '.join(_code(choice) for choice in option.choices)}"
        if option.formerly is not None:
            meaning += f" (formerly {_code('--neuron-' + option.formerly)}, still taken)"
        lines.append(f"| {flag} | {ini} | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
