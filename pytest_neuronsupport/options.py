"""The options of a sweep, defined once: pytest's flags and ini keys, the ``neuronsupport``
command's flags, and the :class:`Settings` they resolve to.

Each :class:`Option` of :data:`OPTIONS` is ``--neuron-<name>`` and the ini key
``neuron_<name>`` in pytest, and ``--<name>`` for the commands of ``neuronsupport`` that take it
(as pytest-benchmark shares its option builders with its command). A flag wins over the ini key,
which wins over the default. Paths given as flags are relative to the folder pytest runs in; as
ini keys, to the ini file's folder.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import devices
from pytest_neuronsupport.dataset.layout import is_shared
from pytest_neuronsupport.devices import Device
from pytest_neuronsupport.modellist import (
    ModelListError,
    default_lists,
    parse_io,
    parse_sizes,
    resolve_paths,
)
from pytest_neuronsupport.pricing import PRICES
from pytest_neuronsupport.runners.lib.protocol import DTYPES
from pytest_neuronsupport.shards import Shard, ShardError, from_environment
from pytest_neuronsupport.shards import parse as parse_shard

ISOLATIONS = ("fork", "fresh")
#: The English judge unless told otherwise: a small instruct model, pinned to one commit.
DEFAULT_JUDGE = "Qwen/Qwen2.5-0.5B-Instruct@7ae557604adf67be50417f59c2c2f167def9a775"


@dataclass(frozen=True)
class Option:
    """One option: ``--neuron-<name>`` / ``neuron_<name>`` (pytest), ``--<name>`` (command)."""

    name: str
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    #: "text", "int", "float" (positive numbers), "size" (a count, 0 allowed), "path", "flag".
    kind: str = "text"
    default: Any = None

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option("sweep", "run the model sweep: one test per model of the model lists", kind="flag"),
    Option(
        "models",
        "model list files (TOML); default: the bundled tiny.toml",
        metavar="PATH",
        kind="paths",
    ),
    Option(
        "device",
        "auto|neuron|cuda|cpu; auto: neuron if present, else cuda, else cpu",
        choices=devices.CHOICES,
        default="auto",
    ),
    Option("backend", "torch.compile backend name, or package.module:callable", metavar="NAME"),
    Option(
        "dtype",
        "dtype of the device run; auto: bf16 on accelerators, fp32 on cpu",
        choices=("auto", *DTYPES),
        default="auto",
    ),
    Option(
        "results",
        "results folder (default results/), or s3://bucket/prefix shared by a sweep's shards",
        "DIR|URI",
        kind="path",
        default="results",
    ),
    Option(
        "timeout", "seconds one model may run (default 1800)", "SECONDS", kind="float", default=1800
    ),
    Option(
        "cache",
        "cache: tiny models, references, compile caches (~/.cache/pytest-neuronsupport)",
        "DIR",
        kind="path",
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
        "seconds the minifier may take for one model (default 600)",
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
        "max-cores",
        "largest number of cores a model may get (default 16)",
        "N",
        kind="int",
        default=16,
    ),
    Option(
        "core-memory",
        "memory of one core for sizing models (default: the device's)",
        "GB",
        kind="float",
    ),
    Option(
        "prefill-chunk",
        "decoders prefill in chunks of N tokens (default 32; 0: one pass)",
        "N",
        kind="size",
        default=32,
    ),
    Option(
        "judge",
        "English judge when the CPU comparison does not run: a Hub id[@revision], a local path, "
        f"zoo:<name>, or none (default {DEFAULT_JUDGE})",
        "MODEL",
        default=DEFAULT_JUDGE,
    ),
    Option(
        "baseline",
        "expected results (TOML from `neuronsupport baseline update`): a regression, or an "
        "improvement not yet in it, fails the session",
        "FILE",
        kind="path",
    ),
    Option(
        "baseline-allow-improvements",
        "models better than their baseline are listed but do not fail the session",
        kind="flag",
    ),
    Option(
        "shard",
        "run the I-th of N disjoint, cost-balanced parts of the lists (default: from "
        "JOB_COMPLETION_INDEX or AWS_BATCH_JOB_ARRAY_INDEX when set)",
        "I/N",
    ),
    Option("shards", "how many shards there are, where the engine does not say", "N", kind="int"),
    Option(
        "leases",
        "folder of this machine's core leases, shared by every sweep on it whatever its cache "
        "(default: <tmp>/pytest-neuronsupport-leases, or $NEURONSUPPORT_LEASES)",
        "DIR",
        kind="path",
    ),
    Option(
        "train",
        "training sweep: does each model train, and the largest batch that fits, native and "
        "compiled (rows in <results>/train; default list: the bundled train.toml)",
        kind="flag",
    ),
    Option(
        "train-max-batch",
        "largest batch size a training batch search tries (default 256)",
        "N",
        kind="int",
        default=256,
    ),
    Option(
        "bench",
        "after each model's support run, benchmark it: throughput, latency percentiles, TTFT "
        "and TPOT, compiled and eager (rows in <results>/perf; `neuronsupport perf` prints them)",
        kind="flag",
    ),
    Option("bench-batch", "batch sizes to benchmark, e.g. 1,16 (default 1)", "B[,B...]"),
    Option("bench-seq-len", "encoders' sequence lengths (default 128)", "N[,N...]", default="128"),
    Option(
        "bench-io",
        "generation's input/output lengths, e.g. 128/128,2048/128 (default 128/128)",
        "IN/OUT[,...]",
        default="128/128",
    ),
    Option("bench-rounds", "timed rounds per configuration (default 10)", "N", kind="int"),
    Option("bench-warmup", "untimed warm-up rounds after compiling (default 2)", "N", kind="size"),
    Option(
        "bench-replicas",
        "data parallel: replicas of a one-core model run at the same time, one per leased "
        "core (default 1)",
        "N",
        kind="int",
    ),
    Option(
        "price-per-hour", "hourly price of the machine, for the cost per 1M", "USD", kind="float"
    ),
    Option(
        "instance",
        "instance type whose on-demand price (README's table) gives the cost per 1M",
        choices=tuple(PRICES),
    ),
    Option(
        "isolation",
        "fork: runs forked from a warm server (default); fresh: a new python",
        choices=ISOLATIONS,
        default="fork",
    ),
)
BY_NAME = {option.name: option for option in OPTIONS}


def default_leases() -> Path:
    """One folder per machine: every sweep on it, whatever its cache, leases cores there."""
    folder = os.path.join(tempfile.gettempdir(), "pytest-neuronsupport-leases")
    return Path(os.environ.get("NEURONSUPPORT_LEASES", folder))


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.environ.get("NEURONSUPPORT_CACHE", os.path.join(base, "pytest-neuronsupport")))


def add_options(
    addoption: Callable[..., Any], names: Sequence[str] | None = None, prefix: str = "--neuron-"
) -> None:
    """Add the options named (all by default) through ``addoption``: a pytest option group's,
    or an ``argparse`` parser's ``add_argument`` (with ``prefix="--"``)."""
    for option in OPTIONS if names is None else [BY_NAME[n] for n in names]:
        flag = f"{prefix}{option.name}"
        if option.kind == "flag":
            addoption(flag, action="store_true", default=False, help=option.help)
        elif option.kind == "paths":
            addoption(flag, nargs="+", metavar=option.metavar, default=None, help=option.help)
        else:
            addoption(
                flag,
                metavar=option.metavar,
                default=None,
                choices=option.choices,
                help=option.help,
                dest=f"{'neuron_' if prefix == '--neuron-' else ''}{option.dest}",
            )


def add_ini(parser: pytest.Parser) -> None:
    """The ini key of every valued option."""
    for option in OPTIONS:
        if option.kind == "paths":
            parser.addini(f"neuron_{option.dest}", f"{option.help}; one per line", type="paths")
        elif option.kind != "flag":
            parser.addini(f"neuron_{option.dest}", option.help, default=None)


@dataclass(frozen=True)
class Settings:
    """The resolved options of one sweep."""

    lists: tuple[Path, ...]
    device: Device
    backend: str
    dtype: str
    results: Path
    cache: Path
    timeout_s: float
    #: Where runs start (their working directory): the folder pytest was invoked from.
    workdir: Path
    isolation: str = "fork"
    limit: int | None = None
    rerun: bool = False
    #: On a failure, shrink the failing graph into repro.py (within ``minify_timeout_s``).
    minify: bool = False
    minify_timeout_s: float = 600
    max_memory_gb: float | None = None
    max_cores: int = 16
    #: Memory of one core for sizing; None: the device's own figure.
    core_memory_gb: float | None = None
    #: Generating runners prefill in chunks of this many tokens (None: in one pass).
    prefill_chunk: int | None = 32
    #: The English judge: a Hub id (``id@revision`` pins it), a local checkpoint or a zoo
    #: model (None: no judge).
    judge: str | None = None
    #: Expected results to hold the sweep against (None: no check).
    baseline: Path | None = None
    baseline_allow_improvements: bool = False
    #: The shared dataset (``s3://...``) that ``results``, then a local copy, stands for.
    shared: str | None = None
    #: The part of the lists this machine runs (None: all of it).
    shard: Shard | None = None
    #: Where this machine's core leases live (one folder for every sweep on the machine).
    leases: Path = field(default_factory=default_leases)
    #: Every entry is a training test (``--neuron-train``).
    train: bool = False
    #: The training batch search's cap.
    train_max_batch: int = 256
    #: Benchmark each model after its support run (``--neuron-bench``), and how.
    bench: bool = False
    bench_batch: tuple[int, ...] = (1,)
    bench_seq_len: tuple[int, ...] = (128,)
    bench_io: tuple[tuple[int, int], ...] = ((128, 128),)
    bench_rounds: int = 10
    bench_warmup: int = 2
    bench_replicas: int = 1
    #: The machine's hourly price (``--neuron-price-per-hour``, or the instance's), and which.
    price_per_hour: float | None = None
    instance: str | None = None

    @property
    def core_capacity_gb(self) -> float:
        return self.core_memory_gb or self.device.core_capacity_gb()


class _Values:
    """Reads one option's value from a pytest config: its flag, else its ini key."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def text(self, name: str) -> str | None:
        option = BY_NAME[name]
        value = self.config.getoption(f"neuron_{option.dest}")
        if value is None:
            value = self.config.getini(f"neuron_{option.dest}") or None
        if value is None:
            value = option.default
        if value is not None and option.choices and str(value) not in option.choices:
            raise pytest.UsageError(
                f"neuronsupport: neuron_{option.dest} = {value!r}: choose from "
                f"{', '.join(option.choices)}"
            )
        return None if value is None else str(value)

    def number(self, name: str) -> float | None:
        """A positive number (int or float by the option's kind); a size may be 0."""
        text, option = self.text(name), BY_NAME[name]
        if text is None:
            return None
        try:
            value = int(text) if option.kind in ("int", "size") else float(text)
        except ValueError:
            raise pytest.UsageError(
                f"neuronsupport: --neuron-{name} {text!r} is not a number"
            ) from None
        if value < 0 or (value == 0 and option.kind != "size"):
            raise pytest.UsageError(f"neuronsupport: --neuron-{name} must be positive, not {text}")
        return value

    def path(self, name: str, default: Path) -> Path:
        """Flags are relative to the invocation folder, ini keys to the ini file's folder."""
        return self.optional_path(name) or default.resolve()

    def optional_path(self, name: str) -> Path | None:
        """The option's path, or None when neither its flag nor its ini key is given."""
        option = BY_NAME[name]
        flag = self.config.getoption(f"neuron_{option.dest}")
        if flag is not None:
            return (self.config.invocation_params.dir / str(flag)).resolve()
        ini = self.config.getini(f"neuron_{option.dest}")
        if ini:
            base = self.config.inipath.parent if self.config.inipath else self.config.rootpath
            return (base / str(ini)).resolve()
        return None

    def lists(self) -> list[Path]:
        flag = self.config.getoption("neuron_models")
        if flag:
            return resolve_paths(flag, self.config.invocation_params.dir)
        ini = [str(p) for p in self.config.getini("neuron_models")]
        train = bool(self.config.getoption("neuron_train"))
        return resolve_paths(ini, self.config.rootpath) if ini else default_lists(train)


def settings_from(config: pytest.Config) -> Settings:
    """The settings of a sweep from pytest's flags and ini keys; a bad value is a UsageError."""
    values = _Values(config)
    try:
        device = devices.resolve(values.text("device") or "auto")
        lists = values.lists()
    except (ModelListError, ValueError) as exc:
        raise pytest.UsageError(f"neuronsupport: {exc}") from None
    dtype = values.text("dtype") or "auto"
    invoked = config.invocation_params.dir
    limit, max_cores, chunk = (values.number(n) for n in ("limit", "max-cores", "prefill-chunk"))
    shard_count = values.number("shards")
    try:
        shard_text = values.text("shard")
        count = None if shard_count is None else int(shard_count)
        shard = parse_shard(shard_text) if shard_text else from_environment(os.environ, count)
    except ShardError as exc:
        raise pytest.UsageError(f"neuronsupport: {exc}") from None
    cache = values.path("cache", default_cache())
    results = values.path("results", invoked / BY_NAME["results"].default)
    shared = values.text("results")
    if shared is not None and is_shared(shared):
        # the sweep works on a local copy of the shared dataset, one per URI, in its cache
        results = cache / "shared" / hashlib.sha256(shared.encode()).hexdigest()[:16]
    else:
        shared = None
    return Settings(
        lists=tuple(lists),
        device=device,
        backend=values.text("backend") or device.default_backend,
        dtype=device.default_dtype if dtype == "auto" else dtype,
        results=results,
        cache=cache,
        shared=shared,
        timeout_s=float(values.number("timeout") or BY_NAME["timeout"].default),
        workdir=invoked,
        isolation=values.text("isolation") or "fork",
        limit=None if limit is None else int(limit),
        rerun=bool(config.getoption("neuron_rerun")),
        minify=bool(config.getoption("neuron_minify")),
        minify_timeout_s=float(
            values.number("minify-timeout") or BY_NAME["minify-timeout"].default
        ),
        max_memory_gb=values.number("max-memory"),
        max_cores=int(max_cores or BY_NAME["max-cores"].default),
        core_memory_gb=values.number("core-memory"),
        prefill_chunk=int(chunk) if chunk else None,
        judge=None if (judge := values.text("judge")) in (None, "none") else judge,
        baseline=values.optional_path("baseline"),
        baseline_allow_improvements=bool(config.getoption("neuron_baseline_allow_improvements")),
        shard=shard,
        leases=values.path("leases", default_leases()),
        train=bool(config.getoption("neuron_train")),
        train_max_batch=int(values.number("train-max-batch") or BY_NAME["train-max-batch"].default),
        **bench_settings(values),
    )


def bench_settings(values: _Values) -> dict[str, Any]:
    """The benchmark's settings (``--neuron-bench*``, the price)."""
    try:
        batch = parse_sizes(values.text("bench-batch") or "1")
        seq_len = parse_sizes(values.text("bench-seq-len") or "128")
        io = parse_io(values.text("bench-io") or "128/128")
    except ValueError as exc:
        raise pytest.UsageError(f"neuronsupport: {exc}") from None
    rounds, warmup = values.number("bench-rounds"), values.number("bench-warmup")
    return {
        "bench": bool(values.config.getoption("neuron_bench")),
        "bench_batch": batch,
        "bench_seq_len": seq_len,
        "bench_io": io,
        "bench_rounds": int(rounds or 10),
        "bench_warmup": 2 if warmup is None else int(warmup),
        "bench_replicas": int(values.number("bench-replicas") or 1),
        "price_per_hour": values.number("price-per-hour"),
        "instance": values.text("instance"),
    }
