"""What the hub holds, and what its request handlers read and change: :class:`HubState`
(repos, users and tokens, LFS objects, buckets, the faults it is told to make, the requests it
saw), the records of its buckets, and :class:`Handler`, what a route asks of the request
handler. The face, :class:`~pytest_neuronsupport.minihub.MiniHub`, is a :class:`HubState` that
serves (its lifecycle, and the methods tests call); the server and the routes
(:mod:`.server`, :mod:`.writes`, :mod:`.buckets`) see it as a :class:`HubState`, so that none
of them imports the face.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_neuronsupport.minihub.repos import (
    _FULL_SHA,
    _Blob,
    _Commit,
    _derive,
    _iso,
    _read_folder,
    _Repo,
)
from pytest_neuronsupport.minihub.xetstore import XetStore


@dataclass(frozen=True)
class BucketFile:
    """A file of a bucket: its size and Xet hash (its content is in the content store), the
    mtime the client sent (ms since the epoch) and when it was added."""

    path: str
    size: int
    xet_hash: str
    mtime_ms: int
    uploaded_at: datetime
    content_type: str | None = None

    def json(self) -> dict[str, Any]:
        mtime = datetime.fromtimestamp(self.mtime_ms / 1000, UTC)
        return {
            "type": "file",
            "path": self.path,
            "size": self.size,
            "xetHash": self.xet_hash,
            "mtime": mtime.isoformat().replace("+00:00", "Z"),
            "uploadedAt": _iso(self.uploaded_at),
        }


@dataclass
class Bucket:
    """A bucket: its id, visibility, creation date and files by path."""

    bucket_id: str
    private: bool
    created_at: datetime
    files: dict[str, BucketFile] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        return {
            "id": self.bucket_id,
            "private": self.private,
            "createdAt": _iso(self.created_at),
            "size": sum(f.size for f in self.files.values()),
            "totalFiles": len(self.files),
        }

    def listing(self, prefix: str, recursive: bool) -> list[dict[str, Any]]:
        """What ``tree/{prefix}`` lists: every file under it (a path prefix, as the Hub
        matches it) when recursive, else the files and folders right inside folder *prefix*."""
        if recursive:
            return [f.json() for p, f in sorted(self.files.items()) if p.startswith(prefix)]
        inside = f"{prefix.rstrip('/')}/" if prefix else ""
        entries: dict[str, dict[str, Any]] = {}
        for path, file in sorted(self.files.items()):
            if not path.startswith(inside):
                continue
            head, slash, _ = path[len(inside) :].partition("/")
            if slash:
                folder = inside + head
                entries.setdefault(folder, {"type": "directory", "path": folder})
                entries[folder]["uploadedAt"] = _iso(file.uploaded_at)
            else:
                entries[path] = file.json()
        return list(entries.values())


class HubState:
    """The hub's state and the helpers its handlers share (see the module's docstring);
    every change under :attr:`_lock`."""

    def __init__(self, *, page_size: int = 1000, verbose: bool = False) -> None:
        self.page_size = page_size
        self.verbose = verbose
        self.requests: list[tuple[str, str]] = []
        self.request_headers: list[dict[str, str]] = []
        self.errors: list[str] = []
        self._lock = threading.RLock()
        self._repos: dict[str, _Repo] = {}  # the model repos
        self._repos_of: dict[str, dict[str, _Repo]] = {
            "model": self._repos,
            "dataset": {},
            "space": {},
        }
        self._users: dict[str, set[str]] = {}  # user -> the organizations it belongs to
        self._tokens: dict[str, tuple[str, bool]] = {}  # token -> (user, may write)
        self._lfs: dict[str, bytes] = {}  # LFS objects uploaded, by sha256
        self._buckets: dict[str, Bucket] = {}
        #: The Xet content store of the buckets' files (``local://`` for hf_xet), while started.
        self.cas: XetStore | None = None
        self._interrupts: dict[tuple[str, str], list[list[int]]] = {}
        #: Set by :meth:`fail_with` / :meth:`stall`: (what the path holds, status or seconds).
        self._failing: tuple[str, int] | None = None
        self._stalling: tuple[str, float] | None = None
        self._order = 0
        #: The port it serves on, while started.
        self._port: int | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, the value for ``HF_ENDPOINT`` / ``endpoint=``."""
        if self._port is None:
            raise RuntimeError("MiniHub is not started")
        return f"http://127.0.0.1:{self._port}"

    # -- internals -------------------------------------------------------------------------------

    def _fault_for(self, path: str) -> tuple[int | None, float]:
        """The error status and the wait :meth:`fail_with` and :meth:`stall` set for ``path``."""
        with self._lock:
            failing, stalling = self._failing, self._stalling
        status = failing[1] if failing and failing[0] in path else None
        return status, stalling[1] if stalling and stalling[0] in path else 0.0

    def _create(self, repo_id: str, repo_type: str, sdk: str | None) -> _Repo:
        """A new, empty repo of *repo_type* (under the lock; ValueError if it exists)."""
        repos = self._repos_of[repo_type]
        if repo_id in repos:
            raise ValueError(f"{repo_type} repo {repo_id} exists")
        self._order += 1
        repo = _Repo(
            repo_id=repo_id,
            pipeline_tag=None,
            tags=(),
            downloads=0,
            trending_score=0,
            likes=0,
            gated=False,
            library_name=None,
            created_at=datetime.now(UTC).replace(microsecond=0),
            config=None,
            safetensors_parameters=None,
            transformers_info=None,
            gguf=None,
            order=self._order,
            repo_type=repo_type,
            sdk=sdk,
        )
        repos[repo_id] = repo
        return repo

    @staticmethod
    def _content(folder: Path | str | None, files: Mapping[str, bytes] | None) -> dict[str, bytes]:
        content = _read_folder(Path(folder)) if folder is not None else {}
        for path, data in (files or {}).items():
            content[path.strip("/")] = bytes(data)
        return content

    @staticmethod
    def _make_commit(
        repo: _Repo,
        parent: _Commit | None,
        content: Mapping[str, bytes],
        when: datetime,
        title: str,
        sha: str | None = None,
        description: str = "",
    ) -> _Commit:
        if sha is not None and not _FULL_SHA.fullmatch(sha):
            raise ValueError(f"sha must be 40 lowercase hex digits, not {sha!r}")
        blobs = {path: _Blob.of(path, data) for path, data in sorted(content.items())}
        digest = hashlib.sha1(f"{repo.repo_id}\n{parent.sha if parent else ''}\n{title}\n".encode())
        digest.update(_iso(when).encode())
        for path, blob in blobs.items():
            digest.update(f"\n{path} {blob.oid}".encode())
        commit = _Commit(sha or digest.hexdigest(), parent, blobs, when, title, {}, description)
        commit.meta = _derive(repo, blobs)
        return commit

    def _record(self, method: str, path: str, headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append((method, path))
            self.request_headers.append(headers)

    def _take_interrupt(self, repo_id: str, filename: str) -> int | None:
        pending = self._interrupts.get((repo_id, filename))
        if not pending:
            return None
        after_bytes = pending[0][0]
        pending[0][1] -= 1
        if pending[0][1] == 0:
            pending.pop(0)
        return after_bytes
