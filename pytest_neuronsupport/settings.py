"""The resolved options of one sweep: :class:`Settings`, read from pytest's flags and ini keys
(:func:`settings_from`) by the declarations of :mod:`pytest_neuronsupport.options`, whose
defaults they keep."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import devices, xdist
from pytest_neuronsupport.dataset.layout import is_hub, is_shared
from pytest_neuronsupport.dataset.stores import local_copy
from pytest_neuronsupport.devices import Device
from pytest_neuronsupport.modellist import ModelListError, default_lists, resolve_paths
from pytest_neuronsupport.options import BY_NAME, OPTIONS, declared, ini_keys, parsed_value
from pytest_neuronsupport.shards import Shard, ShardError, from_environment
from pytest_neuronsupport.shards import parse as parse_shard


@dataclass(frozen=True)
class Settings:
    """The resolved options of one sweep (the defaults are the options' declared ones)."""

    lists: tuple[Path, ...]
    device: Device
    backend: str
    dtype: str
    results: Path
    cache: Path
    timeout_s: float
    #: Where runs start (their working directory): the folder pytest was invoked from.
    workdir: Path
    isolation: str = declared("isolation")
    #: The order models start in under several xdist workers: ``cost`` (largest first,
    #: :mod:`pytest_neuronsupport.order`) or ``list``.
    order: str = declared("order")
    #: The Hub Storage Bucket the compile cache is shared through (``hf://buckets/NS/NAME``).
    compile_cache: str | None = declared("compile-cache")
    limit: int | None = declared("limit")
    rerun: bool = declared("rerun")
    #: On a failure, shrink the failing graph into repro.py (within ``minify_timeout_s``).
    minify: bool = declared("minify")
    minify_timeout_s: float = declared("minify-timeout")
    max_memory_gb: float | None = declared("max-memory")
    #: The Hub cache's bound, in GB (None: none): see :func:`pytest_neuronsupport.hub.bound_cache`.
    hub_cache_max_gb: float | None = declared("hub-cache-max")
    #: What may be downloaded ahead of the models' runs, in GB: see :mod:`.pipeline.prefetch`.
    prefetch_gb: float = declared("prefetch-gb")
    max_cores: int = declared("max-cores")
    #: Memory of one core for sizing; None: the device's own figure.
    core_memory_gb: float | None = declared("core-memory")
    #: Generating runners prefill in chunks of this many tokens (None: in one pass).
    prefill_chunk: int | None = declared("prefill-chunk")
    #: The English judge: a Hub id (``id@revision`` pins it), a local checkpoint or a zoo
    #: model (None: no judge).
    judge: str | None = declared("judge")
    #: Expected results to hold the sweep against (None: no check).
    baseline: Path | None = declared("baseline")  # noqa: RUF009 (None: Path is immutable anyway)
    baseline_allow_improvements: bool = declared("baseline-allow-improvements")
    #: An unchecked PASS fails the session (``--neuron-require-check``).
    require_check: bool = declared("require-check")
    #: After the sweep, bisect each model that newly fails (:mod:`pytest_neuronsupport.bisect.
    #: aftersweep`), within this many runs; the package (and its good version) if given.
    bisect: bool = declared("bisect")
    bisect_max_runs: int = declared("bisect-max-runs")
    bisect_package: str | None = declared("bisect-package")
    #: The shared dataset (``s3://...``, ``hf://datasets/...``) that ``results``, then a local
    #: copy, stands for.
    shared: str | None = None
    #: The baseline as a file of a Hub dataset repo (``hf://datasets/ORG/NAME/PATH``), read
    #: instead of ``baseline``.
    baseline_uri: str | None = None
    #: The part of the lists this machine runs (None: all of it).
    shard: Shard | None = None
    #: The sweep's xdist workers (1: none), whose runs share the host's CPUs
    #: (:func:`~pytest_neuronsupport.devices.host_threads`).
    workers: int = 1
    #: The models one process runs at once (``--neuron-lanes``: :mod:`pytest_neuronsupport.lanes`).
    lanes: int = declared("lanes")
    #: Where this machine's core leases live (one folder for every sweep on the machine).
    leases: Path = field(default_factory=lambda: declared("leases"))
    #: Every entry is a training test (``--neuron-train``).
    train: bool = declared("train")
    #: The training batch search's cap.
    train_max_batch: int = declared("train-max-batch")
    #: Benchmark each model after its support run (``--neuron-perf``), and how.
    perf: bool = declared("perf")
    perf_batch: tuple[int, ...] = declared("perf-batch")
    perf_seq_len: tuple[int, ...] = declared("perf-seq-len")
    perf_io: tuple[tuple[int, int], ...] = declared("perf-io")
    perf_rounds: int = declared("perf-rounds")
    perf_min_seconds: float = declared("perf-min-seconds")
    perf_max_rounds: int = declared("perf-max-rounds")
    perf_warmup: int = declared("perf-warmup")
    perf_replicas: int = declared("perf-replicas")
    #: The machine's hourly price (``--neuron-price-per-hour``, or the instance's), and which.
    price_per_hour: float | None = declared("price-per-hour")
    instance: str | None = declared("instance")

    @property
    def at_once(self) -> int:
        """The most models the sweep runs at once on this host: its workers' lanes."""
        return self.workers * self.lanes

    @property
    def core_capacity_gb(self) -> float:
        return self.core_memory_gb or self.device.core_capacity_gb()


#: The :class:`Settings` field of each option whose field is not named after it.
SETTING_OF = {
    "models": "lists",
    "timeout": "timeout_s",
    "minify-timeout": "minify_timeout_s",
    "max-memory": "max_memory_gb",
    "core-memory": "core_memory_gb",
    "hub-cache-max": "hub_cache_max_gb",
}


class _Values:
    """Reads options' values from a pytest config: the flag, else the ini key, else the
    declared default."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def given(self, name: str) -> tuple[Any, Path]:
        """The option's flag, else its ini key (None: neither is given), and the folder a path
        in it is relative to."""
        option = BY_NAME[name]
        flag = self.config.getoption(f"neuron_{option.dest}")
        if flag is not None:
            return flag, self.config.invocation_params.dir
        given = (self.config.getini(key) for key in ini_keys(option))
        ini = next((value for value in given if value), None)  # its own key, else the former
        base = self.config.inipath.parent if self.config.inipath else self.config.rootpath
        return ini, base

    def get(self, name: str) -> Any:
        """The option's value, as :class:`Settings` holds it (None: none, and no default)."""
        option = BY_NAME[name]
        if option.kind == "flag":
            return bool(self.config.getoption(f"neuron_{option.dest}"))
        if option.kind == "paths":
            return self.lists()
        value, base = self.given(name)
        if value is None:
            default = option.default_value()
            if option.kind == "path" and default is not None:
                # a declared path is relative to the invocation folder, a computed one as it is
                base = Path() if callable(option.default) else self.config.invocation_params.dir
                return (base / default).resolve()
            return default
        if option.kind == "path":
            return (base / str(value)).resolve()
        return parsed_value(option, str(value))

    def text(self, name: str) -> str | None:
        """The option's text as given (None: neither its flag nor its ini key)."""
        value = self.given(name)[0]
        return None if value is None else str(value)

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
    get = values.get
    try:
        device = devices.resolve(xdist.device(config) or get("device"))  # the controller's
        lists = values.lists()
    except (ModelListError, ValueError) as exc:
        raise pytest.UsageError(f"neuronsupport: {exc}") from None
    dtype = get("dtype")
    limit, max_cores, chunk = (get(n) for n in ("limit", "max-cores", "prefill-chunk"))
    shard_count = get("shards")
    try:
        shard_text = values.text("shard")
        shard = parse_shard(shard_text) if shard_text else from_environment(os.environ, shard_count)
    except ShardError as exc:
        raise pytest.UsageError(f"neuronsupport: {exc}") from None
    cache, results = get("cache"), get("results")
    shared = values.text("results")
    if shared is not None and is_shared(shared):
        results = local_copy(cache, shared)
    else:
        shared = None
    baseline_text = values.text("baseline")
    hub_baseline = baseline_text if baseline_text and is_hub(baseline_text) else None
    return Settings(
        lists=tuple(lists),
        device=device,
        backend=get("backend") or device.default_backend,
        dtype=device.default_dtype if dtype == "auto" else dtype,
        results=results,
        cache=cache,
        shared=shared,
        timeout_s=get("timeout"),
        workdir=config.invocation_params.dir,
        isolation=get("isolation"),
        order=get("order"),
        limit=limit,
        **named(values, "compile-cache", "rerun", "bisect", "bisect-max-runs", "bisect-package"),
        minify=get("minify"),
        minify_timeout_s=get("minify-timeout"),
        max_memory_gb=get("max-memory"),
        hub_cache_max_gb=get("hub-cache-max"),
        prefetch_gb=get("prefetch-gb"),
        max_cores=max_cores,
        core_memory_gb=get("core-memory"),
        prefill_chunk=chunk or None,
        judge=None if (judge := get("judge")) in (None, "none") else judge,
        baseline=None if hub_baseline else get("baseline"),
        baseline_uri=hub_baseline,
        baseline_allow_improvements=get("baseline-allow-improvements"),
        require_check=get("require-check"),
        shard=shard,
        leases=get("leases"),
        workers=xdist.worker_count(config),
        lanes=get("lanes"),
        train=get("train"),
        train_max_batch=get("train-max-batch"),
        **perf_settings(values),
    )


def named(values: _Values, *names: str) -> dict[str, Any]:
    """The settings of the options ``names``, whose fields are named after them."""
    return {BY_NAME[name].dest: values.get(name) for name in names}


def perf_settings(values: _Values) -> dict[str, Any]:
    """The benchmark's settings (``--neuron-perf*``, the price)."""
    names = [*(o.name for o in OPTIONS if o.name.startswith("perf")), "price-per-hour", "instance"]
    return named(values, *names)
