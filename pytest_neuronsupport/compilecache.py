"""A sweep's compile cache shared through a Hub Storage Bucket (``--neuron-compile-cache
hf://buckets/NS/NAME``), as the public model-support dataset shares its NEFF cache: one folder
per compiler version (``neuronxcc-<version>/``), seeded into the local cache before the first
run, what the sweep compiled published after it (each shard after its own part).

Everything goes through ``huggingface_hub``'s bucket API at the endpoint ``HF_ENDPOINT`` names,
with the token it finds (``HF_TOKEN``, or ``hf auth login``):

- **When the sweep is configured** (:func:`open_cache`, by the controller): ``bucket_info``; a
  bucket that does not exist is made (``create_bucket(exist_ok=True)``) only where the token
  may write, else the sweep stops with a usage error before any test. Whether the token may
  publish is asked once, as the client itself asks before an upload (``GET
  /api/buckets/{id}/xet-write-token``): a read-only token seeds, and the sweep says at its
  start why it will not publish.
- **Seeding** (:func:`seed`): ``list_bucket_tree`` of the compiler's folder, and
  ``download_bucket_files`` of the ``*.neff`` files the local cache lacks into a staging folder
  beside it; each file is then renamed into place. hf_xet (1.8) writes a download in place as
  it arrives, so a download cut short never sits in the cache under a NEFF's name, and a run
  reading the cache meanwhile finds a whole file or none.
- **Publishing** (:func:`publish`): ``sync_bucket(local, bucket folder, ignore_existing=True,
  include=["*.neff"])``: only files the bucket lacks are uploaded (a seeded file is not sent
  back, whatever its mtime), never a file TorchNeuron is still writing (it writes a temporary
  ``*.tmp`` file and renames it), and nothing is deleted. In a bucket a file appears whole: its
  content is uploaded through Xet first, then added by name in a batch. Files are
  content-addressed (a NEFF's name is the hash of the graph and compiler it was compiled
  from), so shards publishing one key at once publish the same graph, and none loses another's.

Plugin side: never imports torch; ``huggingface_hub`` only when a bucket is used.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

BUCKETS: Final = "hf://buckets/"
#: What is shared: TorchNeuron's NEFF files (never the ``*.tmp`` files it renames them from).
NEFF: Final = "*.neff"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


#: A bucket folder as rows name it (``hf://buckets/NS/NAME[/FOLDER]/neuronxcc-<version>``):
#: nothing a shell line could misread.
SHARED_FOLDER: Final = re.compile(r"hf://buckets(/[A-Za-z0-9][A-Za-z0-9._+-]*){3,}")


class CompileCacheError(Exception):
    """The bucket cannot be used; the message names it and says why."""


def bucket_uri(text: str) -> str:
    """``hf://buckets/NS/NAME`` (or a folder in it, ``.../PREFIX``), checked.

    Raises:
        ValueError: not a bucket's URI.
    """
    parts = text.removeprefix(BUCKETS).strip("/").split("/")
    if not text.startswith(BUCKETS) or len(parts) < 2 or not all(map(_NAME.fullmatch, parts)):
        raise ValueError(
            f"--neuron-compile-cache {text!r}: expected a Hub Storage Bucket, "
            "hf://buckets/NAMESPACE/NAME (or a folder in it, hf://buckets/NAMESPACE/NAME/FOLDER)"
        )
    return BUCKETS + "/".join(parts)


@dataclass(frozen=True)
class SharedCache:
    """The local compile cache and the bucket folder it is shared through."""

    #: The bucket, ``NS/NAME``; the folder in it for this compiler (``[PREFIX/]neuronxcc-V``).
    bucket_id: str
    folder: str
    #: The cache folder the runs use (``TORCH_NEURONX_NEFF_CACHE_DIR``).
    local: Path
    #: Why this sweep will not publish (None: it will).
    read_only: str | None = None
    #: Whether this sweep made the bucket.
    created: bool = False

    @classmethod
    def of(cls, uri: str, folder: str, local: Path) -> SharedCache:
        """The cache of bucket URI ``uri`` (:func:`bucket_uri`) for the compiler ``folder``."""
        parts = bucket_uri(uri).removeprefix(BUCKETS).split("/")
        return cls("/".join(parts[:2]), "/".join([*parts[2:], folder]), local)

    @property
    def remote(self) -> str:
        return f"{BUCKETS}{self.bucket_id}/{self.folder}"


@dataclass(frozen=True)
class Seeded:
    """What seeding did: files copied into the local cache, and those it had already."""

    files: int
    size: int
    already: int
    created: bool

    def line(self, cache: SharedCache) -> str:
        made = " (the bucket was created)" if self.created else ""
        return (
            f"compile cache: seeded {self.files} graph(s) ({self.size / 1e6:.1f} MB) from "
            f"{cache.remote} into {cache.local}, {self.already} there already{made}"
        )


def _api() -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The client's plan summaries and progress bars kept off pytest's terminal (unless the
    environment decides the bars: ``HF_HUB_DISABLE_PROGRESS_BARS``)."""
    from huggingface_hub import constants
    from huggingface_hub.utils.tqdm import disable_progress_bars

    with contextlib.redirect_stdout(io.StringIO()), contextlib.ExitStack() as stack:
        if constants.HF_HUB_DISABLE_PROGRESS_BARS is None:
            stack.enter_context(disable_progress_bars())
        yield


def _said(exc: Exception) -> str:
    """What the Hub said (or the transport: then with its error's name), in one line."""
    from huggingface_hub.errors import HfHubHTTPError

    said = getattr(exc, "server_message", None) or (str(exc).strip().splitlines() or [""])[0]
    return said if isinstance(exc, HfHubHTTPError) else f"{type(exc).__name__}: {said}"


def read_only(api: Any, bucket_id: str) -> str | None:
    """Why this token may not add files to the bucket (None: it may), asked as the client asks
    before an upload: for a Xet write token."""
    from huggingface_hub import get_session, hf_raise_for_status
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # lazy

    url = f"{api.endpoint}/api/buckets/{bucket_id}/xet-write-token"
    try:
        hf_raise_for_status(get_session().get(url, headers=build_hf_headers(token=api.token)))
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status == 401:
            return f"no token that may write there (HF_TOKEN, or `hf auth login`): {_said(exc)}"
        if status == 403:
            return f"this token may not write there: {_said(exc)}"
        raise
    return None


def open_cache(uri: str, folder: str, local: Path) -> SharedCache:
    """The shared cache, its bucket made if it is missing and the token may make it.

    Raises:
        CompileCacheError: the bucket does not exist and this token may not make it, or the
            Hub does not answer.
    """
    from huggingface_hub.errors import BucketNotFoundError, HfHubHTTPError

    cache, api, created = SharedCache.of(uri, folder, local), _api(), False
    try:
        try:
            api.bucket_info(cache.bucket_id)
        except BucketNotFoundError:
            try:
                api.create_bucket(cache.bucket_id, exist_ok=True)
            except HfHubHTTPError as exc:
                raise CompileCacheError(
                    f"{BUCKETS}{cache.bucket_id} does not exist, and this token may not create "
                    f"it ({_said(exc)}): create it (`hf buckets create {cache.bucket_id}`), or "
                    "give the sweep a token that may write to its namespace (HF_TOKEN)"
                ) from None
            created = True
        why = read_only(api, cache.bucket_id)
    except CompileCacheError:
        raise
    except Exception as exc:  # the endpoint down, or refusing: the transport's errors
        where = f"{BUCKETS}{cache.bucket_id} at {api.endpoint}"
        raise CompileCacheError(f"{where}: {_said(exc)}") from None
    return SharedCache(cache.bucket_id, cache.folder, local, why, created)


def _relative(path: str, folder: str) -> str | None:
    """A bucket file's path in the local cache: under ``folder``, a NEFF, and staying inside."""
    rel = PurePosixPath(path[len(folder) + 1 :]) if path.startswith(f"{folder}/") else None
    if rel is None or rel.suffix != ".neff" or any(p in ("", ".", "..") for p in rel.parts):
        return None
    return rel.as_posix()


def seed(cache: SharedCache) -> Seeded:
    """Copy into the local cache the NEFFs of the bucket's folder that it lacks, each renamed
    into place once whole (see the module's docstring).

    Raises:
        CompileCacheError: the bucket could not be listed or read.
    """
    from huggingface_hub import BucketFile
    from huggingface_hub.errors import EntryNotFoundError

    api, wanted, already = _api(), [], 0
    cache.local.mkdir(parents=True, exist_ok=True)
    try:
        listed = list(api.list_bucket_tree(cache.bucket_id, cache.folder, recursive=True))
    except EntryNotFoundError:  # no folder for this compiler yet
        listed = []
    except Exception as exc:
        raise CompileCacheError(f"{cache.remote}: listing it: {_said(exc)}") from None
    for file in listed:
        rel = _relative(file.path, cache.folder) if isinstance(file, BucketFile) else None
        if rel is not None and (cache.local / rel).exists():
            already += 1
        elif rel is not None:
            wanted.append((file, rel))
    staging = Path(tempfile.mkdtemp(dir=cache.local.parent, prefix=f".{cache.local.name}.seed-"))
    try:
        with _quiet():
            api.download_bucket_files(cache.bucket_id, [(f, staging / r) for f, r in wanted])
        for _, rel in wanted:
            (cache.local / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, cache.local / rel)  # whole, at once
    except Exception as exc:
        raise CompileCacheError(f"{cache.remote}: downloading it: {_said(exc)}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Seeded(len(wanted), sum(f.size for f, _ in wanted), already, cache.created)


def publish(cache: SharedCache) -> str:
    """Upload the local cache's NEFFs the bucket's folder lacks; a line saying what was sent.

    Raises:
        CompileCacheError: the token may not write there, or the upload failed.
    """
    if cache.read_only is not None:
        raise CompileCacheError(f"not published to {cache.remote}: {cache.read_only}")
    cache.local.mkdir(parents=True, exist_ok=True)
    try:
        with _quiet():
            plan = _api().sync_bucket(
                str(cache.local), cache.remote, ignore_existing=True, include=[NEFF]
            )
    except Exception as exc:
        raise CompileCacheError(f"publishing to {cache.remote}: {_said(exc)}") from None
    sent = [op for op in plan.operations if op.action == "upload"]
    if not sent:
        return f"compile cache: nothing new to publish to {cache.remote}"
    size = sum(op.size or 0 for op in sent) / 1e6
    return f"compile cache: published {len(sent)} graph(s) ({size:.1f} MB) to {cache.remote}"


def start(cache: SharedCache) -> list[str]:
    """The sweep's start: the local cache seeded; the lines that say so, and why nothing will
    be published where it will not.

    Raises:
        CompileCacheError: as :func:`seed`.
    """
    lines = [seed(cache).line(cache)]
    if cache.read_only is not None:
        why = cache.read_only
        lines.append(f"compile cache: this sweep will not publish to {cache.remote}: {why}")
    return lines


def finish(cache: SharedCache) -> tuple[str, bool]:
    """The sweep's end: what it compiled published; the line that says so, and whether it went
    as it should (a read-only token's sweep publishes nothing, as it said at its start)."""
    try:
        return publish(cache), True
    except CompileCacheError as exc:
        return f"compile cache: {exc}", cache.read_only is not None
