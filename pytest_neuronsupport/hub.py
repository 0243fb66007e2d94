"""The Hugging Face Hub as the plugin meets it: is its endpoint answering, and answering well?

``huggingface_hub`` retries a refused connection with backoff (about 25 s for a listing or a
file download) before it says anything; a sweep would wait that long per model, twice (its
config, then its weights in ``run.py``). One request through the client's own session, without
retries, tells at once, and the error names the endpoint. :func:`bound_cache` keeps the Hub's
cache within ``--neuron-hub-cache-max``, or without it within what the disk holds
(:func:`default_bound`: a floor of free space kept); :class:`CacheBound` applies it over a
sweep, as each model's runs end. Before a model's run,
:func:`check_checkpoint` asks the Hub for its ``config.json`` (a HEAD, through the client): an
answer 5xx, no answer in time or no connection is an environment fault
(:class:`HubFault`, a :class:`~pytest_neuronsupport.faults.Fault`), not the model's
``FAIL(load)``; a repo missing, gated or a revision gone is the model's, left to the load.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pytest_neuronsupport.faults import Fault
from pytest_neuronsupport.runners.lib.protocol import first_line
from pytest_neuronsupport.units import GB

__all__ = [
    "HubFault",
    "bound_cache",
    "check_checkpoint",
    "check_reachable",
    "default_bound",
    "endpoint",
    "eviction_line",
    "without_hints",
]

TIMEOUT_S: Final = 10.0

#: huggingface_hub's hints in a repo-not-found error about ``repo_type``, an argument no list
#: entry has (a sweep's repos are models): taken out, and what they replace.
_REPO_TYPE_HINTS: Final = (
    (re.compile(r"\s*Use `repo_type` argument if needed\.?"), ""),
    (re.compile(r"`repo_id` and `repo_type`"), "`repo_id`"),
)


class HubFault(Fault):
    """The Hub failed (no answer, a 5xx, a timeout); the message names the endpoint."""


def endpoint() -> str:
    """The endpoint the client uses (``HF_ENDPOINT``, read when it was imported)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def without_hints(text: str) -> str:
    """A Hub error's text without huggingface_hub's irrelevant ``repo_type`` hint."""
    for hint, instead in _REPO_TYPE_HINTS:
        text = hint.sub(instead, text)
    return text


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def check_reachable(url: str | None = None, timeout_s: float = TIMEOUT_S) -> None:
    """Raise unless ``url`` (default: :func:`endpoint`) answers one request; any HTTP status
    is an answer. In offline mode (``HF_HUB_OFFLINE``) nothing is asked and nothing raised:
    the client reads its cache.

    Raises:
        HubFault: a connection error or a timeout.
    """
    from huggingface_hub import get_session

    if _offline():
        return
    url = url or endpoint()
    try:
        get_session().get(f"{url}/api/models", params={"limit": 1}, timeout=timeout_s)
    except Exception as exc:  # httpx's connection errors and timeouts, a malformed URL
        raise HubFault(f"the Hub at {url} is unreachable: {type(exc).__name__}: {exc}") from None


def check_checkpoint(
    repo_id: str,
    revision: str | None = None,
    url: str | None = None,
    timeout_s: float = TIMEOUT_S,
) -> None:
    """Ask the Hub at ``url`` (default: :func:`endpoint`) for ``repo_id``'s ``config.json`` at
    ``revision`` (a HEAD through ``huggingface_hub``, without its retries). Nothing in offline
    mode. Returns when the Hub answered, even that the repo is missing or gated (the model's
    failure, which its load meets and says).

    Raises:
        HubFault: no connection, no answer within ``timeout_s``, or an answer 5xx.
    """
    from urllib.parse import quote

    from huggingface_hub import get_hf_file_metadata
    from huggingface_hub.errors import HfHubHTTPError

    if _offline():
        return
    url = url or endpoint()
    # hf_hub_url's address, built here: its template holds the endpoint read at import
    file_url = f"{url}/{repo_id}/resolve/{quote(revision or 'main', safe='')}/config.json"
    try:
        get_hf_file_metadata(file_url, timeout=timeout_s, endpoint=url)
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status is not None and status >= 500:
            why = first_line(without_hints(str(exc)), limit=1000) or str(exc)
            raise HubFault(f"the Hub at {url} answered {status} for {repo_id}: {why}") from None
    except Exception as exc:  # the client's transport errors (httpx's, or its fork httpx2's)
        kinds = {kind.__name__ for kind in type(exc).__mro__}
        if "TimeoutException" in kinds:
            raise HubFault(
                f"the Hub at {url} did not answer within {timeout_s:g} s (config.json of {repo_id})"
            ) from None
        if kinds & {"TransportError", "OSError"}:
            why = f"{type(exc).__name__}: {exc}"
            raise HubFault(f"the Hub at {url} is unreachable: {why}") from None
        raise


def bound_cache(
    max_bytes: int, done: Iterable[str], cache_dir: str | Path | None = None
) -> list[tuple[str, int]]:
    """Keep the Hub's cache (``cache_dir``, default: the client's) within ``max_bytes``: the
    checkpoints of ``done`` (the sweep's models whose runs ended), least recently used first,
    are deleted through ``huggingface_hub``'s own cache API (scan the cache, delete
    revisions) until it fits, or none of them is left. Nothing else is touched (a model still
    to run, the judge, repos the sweep did not download). Returns ``(repo id, bytes)`` of each
    evicted, in order."""
    from huggingface_hub import constants, scan_cache_dir

    done = set(done)
    if not done:
        return []
    try:  # the client's cache as now set (scan_cache_dir's own default is the one at import)
        info = scan_cache_dir(cache_dir or constants.HF_HUB_CACHE)
    except Exception:  # no cache yet (CacheNotFound), or one being written: next time
        return []
    size = info.size_on_disk
    ours = [r for r in info.repos if r.repo_type == "model" and r.repo_id in done]
    evicted: list[tuple[str, int]] = []
    commits: list[str] = []
    for repo in sorted(ours, key=lambda r: r.last_accessed):
        if size <= max_bytes:
            break
        commits.extend(revision.commit_hash for revision in repo.revisions)
        evicted.append((repo.repo_id, repo.size_on_disk))
        size -= repo.size_on_disk
    if commits:
        info.delete_revisions(*commits).execute()
    return evicted


#: Without ``--neuron-hub-cache-max``, the checkpoints of models done are evicted once the
#: disk holding the Hub's cache has less free than a quarter of its size, at most 25 GB (room
#: for the next checkpoint of a few billion parameters, on a small disk a quarter of it).
FREE_FLOOR_GB: Final = 25
FREE_FLOOR_FRACTION: Final = 0.25


def default_bound(cache_dir: str | Path | None = None) -> int | None:
    """The cache's bound in bytes when the sweep names none: what it holds now and the disk's
    free space, less the free floor; None while the disk has that floor free (nothing to
    evict, and no scan of the cache)."""
    from huggingface_hub import constants, scan_cache_dir

    path = Path(cache_dir or constants.HF_HUB_CACHE)
    if not path.is_dir():
        return None
    usage = shutil.disk_usage(path)
    if free_floor(usage.total) <= usage.free:
        return None
    try:
        held = scan_cache_dir(path).size_on_disk
    except Exception:  # a cache being written: next time
        return None
    return bound_for(held, usage.free, usage.total)


def free_floor(total: int) -> int:
    """The free space kept on a disk of ``total`` bytes: a quarter of it, at most 25 GB."""
    return min(FREE_FLOOR_GB * GB, int(total * FREE_FLOOR_FRACTION))


def bound_for(held: int, free: int, total: int) -> int:
    """The cache's bound that leaves the free floor: it may hold what it holds (``held``) and
    the free space above the floor, and no less than nothing."""
    return max(0, held + free - free_floor(total))


def eviction_line(evicted: Sequence[tuple[str, int]], max_bytes: int | None) -> str | None:
    """The summary's line of what :func:`bound_cache` evicted over a sweep (None: nothing);
    ``max_bytes`` None: the default bound evicted them."""
    if not evicted:
        return None
    total = sum(size for _, size in evicted)
    names = ", ".join(repo_id for repo_id, _ in evicted)
    count = f"{len(evicted)} checkpoint{'s' if len(evicted) != 1 else ''}"
    bound = (
        f"--neuron-hub-cache-max {max_bytes / GB:g} GB"
        if max_bytes is not None
        else f"the disk's free floor (min({FREE_FLOOR_GB} GB, a quarter of the disk))"
    )
    return f"hub cache: evicted {count}, {_size(total)}, after their runs to stay within " + (
        f"{bound}: {names}"
    )


@dataclass
class CacheBound:
    """The Hub cache's bound over a sweep: once a model's runs end (:meth:`done`), the
    checkpoints of the models done may be evicted (:func:`bound_cache`) to stay within
    ``max_gb`` (``--neuron-hub-cache-max``; None: :func:`default_bound`), never the judge's;
    what was evicted makes the summary's line (:meth:`notes`)."""

    max_gb: float | None = None
    #: The judge model (``repo[@revision]``), whose checkpoint every check needs again.
    judge: str | None = None
    models_done: set[str] = field(default_factory=set)
    #: ``(repo id, bytes)`` of each checkpoint evicted, in order.
    evicted: list[tuple[str, int]] = field(default_factory=list)
    #: The Hub's cache (None: the client's).
    cache_dir: Path | None = None

    @property
    def max_bytes(self) -> int | None:
        return None if self.max_gb is None else int(self.max_gb * GB)

    def done(self, model_id: str) -> None:
        """The model's runs ended: evict what the bound asks of the models done."""
        self.models_done.add(model_id)
        limit = default_bound(self.cache_dir) if self.max_bytes is None else self.max_bytes
        if limit is not None:
            judge = (self.judge or "").partition("@")[0]
            self.evicted.extend(bound_cache(limit, self.models_done - {judge}, self.cache_dir))

    def notes(self) -> list[str]:
        """The summary's line of what was evicted (none: nothing was)."""
        line = eviction_line(self.evicted, self.max_bytes)
        return [] if line is None else [line]


def _size(count: int) -> str:
    return f"{count / GB:.2f} GB" if count >= GB // 10 else f"{count / 10**6:.1f} MB"
