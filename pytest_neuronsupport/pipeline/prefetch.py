"""Prefetch: a Hub model's files are in the local cache before its cores are leased.

A list entry whose checkpoint is a Hub id (not the zoo, not a local folder, package or GGUF
file) has the files ``from_pretrained`` reads downloaded into the Hugging Face cache through
``huggingface_hub.snapshot_download`` before its run leases cores (:func:`before_lease`, from
the mode loop, after the unchanged check: a model not run again downloads nothing): every file
at the repo's root but weights (its config, tokenizer, generation and processor files, chat
templates; ``additional_chat_templates/`` too), and the weights in the one format transformers
picks, in its order (``model.safetensors``, its sharded index and the shards it names,
``pytorch_model.bin``, its index and shards: :func:`chosen`). The run then reads them from the
cache offline (:data:`RUN_ENV`, every leased run's environment): ``run.py`` still names the Hub
id and the revision the plan resolved, so its text, the row's ``checkpoint`` and ``revision``,
and the CPU reference's key (the snapshot's commit) do not depend on where the cache is. A copy
of ``run.py`` run by hand downloads as before.

Ahead of that, :class:`Prefetcher` (one thread, in the sweep's controller, the process that
also evicts done models' checkpoints: ``--neuron-hub-cache-max``) downloads the next models in
start order while others run, within ``--neuron-prefetch-gb`` (and the cache's own bound, and
never into the disk's free floor of :func:`pytest_neuronsupport.hub.free_floor`); what it
downloaded counts against that budget until the model's test ends. It evicts nothing: a
model's files leave the cache only after its runs, by the cache's bound. A model it cannot
fetch is left to the model's own fetch, whose failure is the model's row: ``FAIL(load)`` with
the Hub's error, or a :class:`~pytest_neuronsupport.hub.HubFault` (5xx, a timeout, no
connection) that records no row.

With ``HF_HUB_OFFLINE`` set, nothing is asked of the Hub here: the runs read the cache as the
plan did.
"""

from __future__ import annotations

import glob
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport import faults, hub
from pytest_neuronsupport.modellist import PACKAGE_PREFIX, ZOO_PREFIX, ModelSpec
from pytest_neuronsupport.runners.lib.protocol import first_line
from pytest_neuronsupport.runners.lib.warned import library_warnings
from pytest_neuronsupport.units import GB

__all__ = [
    "RUN_ENV",
    "Fetched",
    "Files",
    "Prefetcher",
    "before_lease",
    "chosen",
    "fetch",
    "files",
    "upcoming",
]

#: What every leased run's environment has: its files were fetched before the lease, so it asks
#: the Hub for nothing.
RUN_ENV: Final = {"HF_HUB_OFFLINE": "1"}

#: The weights transformers' ``from_pretrained`` looks for, in its order (no variant).
WEIGHTS: Final = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
#: Files at the root that ``from_pretrained`` never reads: other weight formats, archives.
NOT_READ: Final = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".h5",
    ".msgpack",
    ".onnx",
    ".onnx_data",
    ".gguf",
    ".tflite",
    ".ot",
    ".pb",
    ".npz",
    ".pkl",
    ".zip",
    ".tar",
    ".gz",
    ".mlmodel",
)
#: Folders whose files a tokenizer reads.
FOLDERS: Final = ("additional_chat_templates/",)


def chosen(sizes: Mapping[str, int], shards: Callable[[str], Iterable[str]]) -> dict[str, int]:
    """Of a repo's files (name → bytes), those ``from_pretrained`` reads: the root's but other
    weights, and the first weights of :data:`WEIGHTS` it has (an index: with the shards
    ``shards(index)`` names)."""
    kept = {
        name: size
        for name, size in sizes.items()
        if ("/" not in name and not name.endswith(NOT_READ)) or name.startswith(FOLDERS)
    }
    weights = next((name for name in WEIGHTS if name in sizes), None)
    if weights is not None:
        kept[weights] = sizes[weights]
        if weights.endswith(".index.json"):
            kept.update({shard: sizes.get(shard, 0) for shard in shards(weights)})
    return kept


@dataclass(frozen=True)
class Files:
    """What one repo's fetch downloads: its files at one commit, with their sizes."""

    repo_id: str
    commit: str
    sizes: dict[str, int]

    def missing(self, cache_dir: str | Path | None = None) -> int:
        """Bytes of these files not yet in the cache."""
        from huggingface_hub import try_to_load_from_cache

        return sum(
            size
            for name, size in self.sizes.items()
            if not isinstance(
                try_to_load_from_cache(self.repo_id, name, cache_dir, self.commit), str
            )
        )


def files(
    repo_id: str,
    revision: str | None,
    cache_dir: str | Path | None = None,
    endpoint: str | None = None,
) -> Files:
    """The files of ``repo_id`` at ``revision`` that its fetch downloads (:func:`chosen`): one
    request for the listing (with sizes), and the download of a sharded index."""
    from huggingface_hub import HfApi, hf_hub_download

    info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True)
    assert info.sha is not None
    commit = info.sha
    sizes = {s.rfilename: s.size or 0 for s in info.siblings or []}

    def shards(index: str) -> set[str]:
        path = hf_hub_download(
            repo_id, index, revision=commit, cache_dir=cache_dir, endpoint=endpoint
        )
        weight_map = json.loads(Path(path).read_text(encoding="utf-8")).get("weight_map") or {}
        return {str(name) for name in weight_map.values()}

    return Files(repo_id, commit, chosen(sizes, shards))


def fetch(found: Files, cache_dir: str | Path | None = None, endpoint: str | None = None) -> Path:
    """Download ``found``'s files into the cache (those there already are not fetched again):
    the snapshot's folder."""
    from huggingface_hub import snapshot_download

    patterns = [glob.escape(name) for name in found.sizes]
    folder = snapshot_download(
        found.repo_id,
        revision=found.commit,
        allow_patterns=patterns or ["config.json"],
        cache_dir=cache_dir,
        endpoint=endpoint,
    )
    return Path(folder)


def offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def fault_of(exc: BaseException, endpoint: str | None = None) -> faults.Fault | None:
    """The environment's fault a failed download is (a full disk; the Hub answering 5xx, not in
    time, or not at all: :class:`~pytest_neuronsupport.hub.HubFault`), or None: the model's."""
    found = faults.of(exc)
    if found is not None:
        return found
    kinds = {kind.__name__ for kind in type(exc).__mro__}
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    where = endpoint or hub.endpoint()
    if isinstance(status, int) and status >= 500:
        why = first_line(hub.without_hints(str(exc)), limit=1000)
        return hub.HubFault(f"the Hub at {where} answered {status} while downloading: {why}")
    if kinds & {"TimeoutException", "TransportError", "LocalEntryNotFoundError"}:
        why = first_line(f"{type(exc).__name__}: {exc}", limit=1000)
        return hub.HubFault(f"the Hub at {where} failed a download: {why}")
    return None


@dataclass(frozen=True)
class Fetched:
    """What fetching a model's files before its lease came to."""

    #: Seconds it took (None: nothing to fetch: a local checkpoint, or offline).
    download_s: float | None = None
    #: The model's ``FAIL(load)``: the Hub's error (its repo or a file missing, gated...).
    error: str | None = None
    #: The environment's fault: no row.
    fault: str | None = None

    @property
    def columns(self) -> dict[str, Any]:
        """The row's ``download_s``, where something was fetched."""
        return {} if self.download_s is None else {"download_s": self.download_s}


def is_hub(spec: ModelSpec) -> bool:
    """Whether the entry's checkpoint is a Hub repo (not the zoo, a folder, a package or a
    GGUF file)."""
    return not spec.id.startswith(ZOO_PREFIX) and not spec.path


def before_lease(
    checkpoint: str,
    revision: str | None,
    hub_checkpoint: bool,
    cache_dir: str | Path | None = None,
    endpoint: str | None = None,
) -> Fetched:
    """Fetch a planned checkpoint's files (``hub_checkpoint``: a Hub id) before its lease."""
    if not hub_checkpoint or offline():
        return Fetched()
    started = time.monotonic()
    try:
        with library_warnings():  # huggingface_hub's warning is not the model's FAIL(load)
            fetch(files(checkpoint, revision, cache_dir, endpoint), cache_dir, endpoint)
    except Exception as exc:
        took = round(time.monotonic() - started, 3)
        if (fault := fault_of(exc, endpoint)) is not None:
            return Fetched(took, fault=str(fault))
        why = first_line(hub.without_hints(f"{type(exc).__name__}: {exc}"), limit=1000)
        return Fetched(took, error=f"cannot download its files: {why}")
    return Fetched(round(time.monotonic() - started, 3))


def fetch_judge(judge: str, cache_dir: str | Path | None = None) -> None:
    """The English judge's files (a Hub ``id@revision``), once, before any run needs them:
    runs are offline. A failure is left to the run that loads it."""
    repo_id, _, revision = judge.partition("@")
    if Path(judge).is_dir() or judge.startswith((ZOO_PREFIX, PACKAGE_PREFIX)) or offline():
        return
    try:
        with library_warnings():
            fetch(files(repo_id, revision or None, cache_dir), cache_dir)
    except Exception:
        return


def upcoming(
    specs: Sequence[ModelSpec],
    recorded: Callable[[str], object | None],
    rerun: bool,
    limit: int | None,
) -> list[ModelSpec]:
    """The entries a sweep will likely download, in start order: Hub entries not excluded
    ahead, without a recorded row (one with a row likely runs the script recorded, and is not
    run again) unless ``rerun``; at most ``limit`` of them (``--neuron-limit``)."""
    wanted = [
        spec
        for spec in specs
        if is_hub(spec) and spec.exclusion is None and (rerun or recorded(spec.id) is None)
    ]
    return wanted if limit is None else wanted[:limit]


@dataclass
class Prefetcher:
    """Downloads upcoming models' files in one background thread (see the module's
    docstring): in order, each once, while what it downloaded for models not yet done fits
    ``budget`` bytes; a model that alone does not fit, or would leave the disk less than its
    free floor, is left to its own fetch before its lease."""

    budget: int
    cache_dir: str | Path | None = None
    endpoint: str | None = None
    #: Bytes it downloaded for each model not yet done.
    held: dict[str, int] = field(default_factory=dict)
    #: The models it downloaded, in order.
    fetched: list[str] = field(default_factory=list)
    _done: set[str] = field(default_factory=set)
    _stopped: bool = False
    _waiting: bool = False
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _settled: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, models: Sequence[tuple[str, str | None]]) -> None:
        """Start downloading ``models`` (repo id, revision), in this order."""
        self._thread = threading.Thread(
            target=self._run, args=(list(models),), name="neuronsupport-prefetch", daemon=True
        )
        self._thread.start()

    def done(self, model_id: str) -> None:
        """The model's test ended: what was downloaded for it leaves the budget."""
        with self._changed:
            self._done.add(model_id)
            self.held.pop(model_id, None)
            if self._waiting:  # it goes on: not settled until it waits again, or ends
                self._settled.clear()
            self._changed.notify_all()

    def stop(self) -> None:
        """Stop after the download under way (the thread is a daemon: the sweep never waits)."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def settled(self, timeout_s: float) -> bool:
        """Wait until it waits for room or has gone through its list (for tests)."""
        return self._settled.wait(timeout_s)

    def _run(self, models: list[tuple[str, str | None]]) -> None:
        for repo_id, revision in models:
            with self._changed:
                if self._stopped:
                    break
                if repo_id in self._done:
                    continue
            self._prefetch(repo_id, revision)
        self._settled.set()

    def _prefetch(self, repo_id: str, revision: str | None) -> None:
        try:
            found = files(repo_id, revision, self.cache_dir, self.endpoint)
            need = found.missing(self.cache_dir)
        except Exception:  # its own fetch meets it, and makes its row
            return
        if need == 0 or need > self.budget or need > self.room():
            return
        with self._changed:
            while sum(self.held.values()) + need > self.budget and not self._stopped:
                self._waiting = True  # for a model to end
                self._settled.set()
                self._changed.wait()
            self._waiting = False
            if self._stopped or repo_id in self._done:
                return
        try:
            fetch(found, self.cache_dir, self.endpoint)
        except Exception:
            return
        with self._changed:
            if repo_id not in self._done:
                self.held[repo_id] = need
            self.fetched.append(repo_id)

    def room(self) -> int:
        """Bytes the cache's disk may take before its free floor."""
        from huggingface_hub import constants

        folder = Path(self.cache_dir or constants.HF_HUB_CACHE)
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        usage = shutil.disk_usage(folder)
        return usage.free - hub.free_floor(usage.total)


def ahead_budget(prefetch_gb: float, hub_cache_max_gb: float | None) -> int:
    """The prefetcher's budget in bytes: ``--neuron-prefetch-gb``, no more than the cache's
    bound (``--neuron-hub-cache-max``) where there is one."""
    gb = prefetch_gb if hub_cache_max_gb is None else min(prefetch_gb, hub_cache_max_gb)
    return max(0, int(gb * GB))


def ahead(
    specs: Sequence[ModelSpec],
    recorded: Callable[[str], Any],
    *,
    prefetch_gb: float,
    hub_cache_max_gb: float | None,
    rerun: bool,
    limit: int | None,
) -> Prefetcher | None:
    """The download ahead of a sweep's models (``specs``, in start order), started: those that
    will run (:func:`upcoming`), within the budget (:func:`ahead_budget`); None when there is
    no budget or the Hub is offline."""
    budget = ahead_budget(prefetch_gb, hub_cache_max_gb)
    if not specs or budget <= 0 or offline():
        return None
    prefetcher = Prefetcher(budget)
    prefetcher.start([(s.id, s.revision) for s in upcoming(specs, recorded, rerun, limit)])
    return prefetcher
