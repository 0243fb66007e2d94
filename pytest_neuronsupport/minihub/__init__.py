"""A miniature Hugging Face Hub on ``127.0.0.1``, for tests that must not reach the real one.

:class:`MiniHub` is a real HTTP server (``http.server.ThreadingHTTPServer`` on port 0, served
from a daemon thread) that speaks enough of the Hub's HTTP API for the unmodified
``huggingface_hub`` client (``HfApi.list_models``, ``model_info``, ``list_repo_tree``,
``get_paths_info``, ``hf_hub_download``, ``snapshot_download``) and ``transformers``
``from_pretrained`` to work against it when ``HF_ENDPOINT`` is its :attr:`MiniHub.url`::

    with MiniHub() as hub:
        sha = hub.add_model("org/tiny", folder, pipeline_tag="text-generation", downloads=10)
        api = HfApi(endpoint=hub.url)
        [m.id for m in api.list_models(filter="transformers", sort="downloads")]
        hf_hub_download("org/tiny", "config.json", revision=sha, endpoint=hub.url, cache_dir=tmp)

Model repos are built from a local folder and/or a mapping of files, with a linear history
(:meth:`MiniHub.add_model`, :meth:`MiniHub.add_commit`); dataset and space repos
(:meth:`MiniHub.add_repo`) are served by the same read endpoints under ``/api/datasets/``,
``/api/spaces/``, ``/datasets/{repo}/resolve/...`` and ``/spaces/{repo}/resolve/...``. ``main``
and any commit sha (or a unique prefix of at least 7 hex digits) are valid revisions.

**The write side** (:mod:`.writes`) is what ``HfApi.create_repo``, ``create_commit`` and
``upload_file`` send: ``POST /api/repos/create`` (every repo type; a space needs its ``sdk``;
409 with the repo's ``url`` when it exists), ``POST /api/validate-yaml``, the pre-upload, the
git-LFS batch API (``basic`` transfer; nothing advertises Xet, and the client takes this path
when ``HF_HUB_DISABLE_XET=1`` or when it uploads file objects), commits as NDJSON with
``parentCommit`` (412 when it is not the head) and ``GET /api/{type}s/{repo}/commits/{rev}``.
Writes need a write token of the repo's namespace (:meth:`MiniHub.add_user`): no token 401,
an unknown one 401, a read token or another's namespace 403, an unknown organization 404.
:meth:`MiniHub.files` and :meth:`MiniHub.commits` show what landed. Served endpoints:

- ``GET /api/models``: ``search``, ``author``, ``filter`` (repeatable, all must match a tag or
  the library name), ``pipeline_tag``, ``gated``, ``num_parameters`` (``min:1B,max:8B``),
  ``sort`` (``downloads``, ``trendingScore``, ``likes``, ``createdAt``, ``lastModified``;
  descending, ties by id; ``direction=1`` ascends; no sort: insertion order), ``limit``,
  ``expand``/``expand[]`` (repeatable), ``full``, ``config``. At most :attr:`MiniHub.page_size`
  items per response (and at most ``limit``), with ``Link: <next>; rel="next"`` carrying a cursor,
  like the Hub (the client's ``paginate`` follows it).
- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` (``expand``, ``blobs``,
  ``securityStatus``), ``GET /api/models/{repo}/tree/{rev}[/{path}]`` (``recursive``, ``expand``;
  paged), ``POST /api/models/{repo}/paths-info/{rev}``, ``GET /api/models/{repo}/refs``.
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit``, a quoted ``ETag`` (git blob
  sha1; for LFS-like files, ``*.safetensors``, ``*.bin``, ``*.gguf``... or over 10 MB, the
  sha256, also in ``X-Linked-Etag`` with ``X-Linked-Size``, which is what ``get_hf_file_metadata``
  reads), ``Content-Length``, ``Accept-Ranges: bytes``; a single range (``Range: bytes=N-``,
  ``N-M`` or ``-N``) answers 206, an unsatisfiable one 416. Files are served directly (no CDN
  redirect, no Xet headers, so the client downloads over plain HTTP).
  :meth:`MiniHub.interrupt` cuts the next GETs of a file after some bytes. huggingface_hub 2.4.0
  then retries within the same ``hf_hub_download`` call (after sleeping 1 s), resuming with
  ``Range`` from the last full 10 MiB chunk it wrote (``DOWNLOAD_CHUNK_SIZE``): a file cut before
  its first 10 MiB is fetched again from byte 0.
- Errors carry ``X-Error-Code`` as on the Hub, which the client maps to its exceptions:
  ``RepoNotFound`` (401 without an ``Authorization`` header, 404 with one),
  ``RevisionNotFound`` (404), ``EntryNotFound`` (404, with ``X-Repo-Commit``), ``GatedRepo``
  (401 on resolve URLs of a gated repo without ``Authorization``; metadata stays public, as on
  the Hub). Invalid ``expand``/``sort``/``cursor`` values: 400. Anything else is a 404 JSON
  ``{"error": ...}``. A bug of the hub answers 500 and is kept in :attr:`MiniHub.errors`.

**Storage Buckets** (:mod:`.buckets`): :meth:`MiniHub.add_bucket`, or ``create_bucket`` through
the client; ``/api/buckets/{id}`` (create, info, ``tree``, ``paths-info``, ``batch``,
``xet-read-token``/``xet-write-token``) and ``HEAD /buckets/{id}/resolve/{path}``. Their files
travel through Xet into an on-disk store that ``hf_xet`` itself reads and writes
(``local://<folder>``, :mod:`.xetstore`); :meth:`MiniHub.bucket_files` shows what landed.

The pytest fixture :func:`minihub` (enable it with ``-p pytest_neuronsupport.minihub``, or
``pytest_plugins = ["pytest_neuronsupport.minihub"]``) starts a hub and, through ``monkeypatch``,
sets ``HF_ENDPOINT`` to its url, unsets ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``/``HF_TOKEN``,
points ``HF_HOME``/``HF_HUB_CACHE`` at a temporary folder and sets
``HF_HUB_DISABLE_TELEMETRY=1``. **Subprocesses** see that environment and need nothing more.
**In-process** callers do not: ``huggingface_hub.constants`` reads the environment once, at
import, so they must pass ``endpoint=hub.url`` (``HfApi(endpoint=hub.url)``,
``hf_hub_download(..., endpoint=hub.url)``) and should pass ``cache_dir``. The fixture patches
the import-time constants that would otherwise block or leak in-process calls when
``huggingface_hub`` is installed: ``constants.HF_HUB_OFFLINE`` (the client checks it through
``constants.is_offline_mode()`` on every request, so with ``HF_HUB_OFFLINE=1`` exported, as in
CI, every in-process request would raise ``OfflineModeIsEnabled``), ``HF_HUB_CACHE`` (so that
calls without ``cache_dir`` land in the temporary folder) and ``HF_HUB_DISABLE_TELEMETRY``. It
does not patch ``constants.ENDPOINT``: objects created earlier (``transformers`` keeps a shared
``HfApi``) would still point at the old endpoint. ``transformers`` ``from_pretrained`` takes no
endpoint, so run it in a subprocess. At teardown the fixture fails the test if the hub recorded
errors.

This package uses only the standard library (and pytest, for the fixture); it never imports torch,
and imports ``huggingface_hub`` only inside the fixture, if installed, and ``hf_xet`` only when a
bucket's batch names a file.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.minihub.repos import (
    _DEFAULT_CREATED_AT,
    GITATTRIBUTES,
    _as_datetime,
    _Repo,
)
from pytest_neuronsupport.minihub.server import _Server
from pytest_neuronsupport.minihub.state import Bucket, BucketFile, HubState
from pytest_neuronsupport.minihub.xetstore import XetStore

__all__ = ["MiniHub", "minihub"]


class MiniHub(HubState):
    """A small Hugging Face Hub serving model repos over HTTP on ``127.0.0.1``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. All methods are
    thread-safe; repos may be added or changed while the server runs.

    Attributes:
        page_size: the most items one listing response holds (``/api/models`` and ``/tree``);
            the rest is behind a ``Link: rel="next"`` header. Settable (e.g. 3, to test paging).
        requests: every request seen, as ``(method, path with query)``, in arrival order.
            Appended to from the server's threads: copy it (``list(hub.requests)``) before
            iterating while requests may be in flight; ``hub.requests.clear()`` resets it.
        request_headers: the headers of each request of :attr:`requests` (same order, names
            lower-cased), e.g. to see the ``range`` of a resumed download.
        errors: tracebacks of requests the hub failed to handle (bugs of the hub, answered with
            a 500); the :func:`minihub` fixture fails the test at teardown if any.
        verbose: log requests and handler errors to stderr (off by default).
    """

    def __init__(self, *, page_size: int = 1000, verbose: bool = False) -> None:
        super().__init__(page_size=page_size, verbose=verbose)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> MiniHub:
        """Bind ``127.0.0.1`` on a free port and serve from a daemon thread."""
        if self._server is not None:
            raise RuntimeError("MiniHub is already started")
        self.cas = XetStore(Path(tempfile.mkdtemp(prefix="minihub-cas-")))
        self._server = _Server(self)
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="minihub",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close open connections and the socket. Does nothing if not started."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        thread.join()
        server.close_connections(timeout=5)
        server.server_close()
        self._server = self._thread = None
        self._port = None
        if self.cas is not None:
            shutil.rmtree(self.cas.folder, ignore_errors=True)
            self.cas = None

    def __enter__(self) -> MiniHub:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- repos ---------------------------------------------------------------------------------

    def add_model(
        self,
        repo_id: str,
        folder: Path | str | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        pipeline_tag: str | None = None,
        tags: Iterable[str] = (),
        downloads: int = 0,
        trending_score: int = 0,
        likes: int = 0,
        gated: bool | str = False,
        library_name: str | None = "transformers",
        config: dict[str, Any] | None = None,
        safetensors_parameters: int | None = None,
        transformers_info: dict[str, Any] | None = None,
        gguf: dict[str, Any] | None = None,
        created_at: str | datetime = _DEFAULT_CREATED_AT,
        title: str = "initial commit",
        sha: str | None = None,
    ) -> str:
        """Create model repo *repo_id* from *folder* (read recursively, ``.git``/``.cache``
        skipped) and/or *files* (path -> content; overrides the folder's); return its commit sha.

        The Hub's card fields are derived from the files unless given: ``config`` from
        ``config.json`` (the keys the Hub exposes: architectures, model_type, auto_map,
        quantization_config) plus ``tokenizer_config`` from ``tokenizer_config.json``;
        ``safetensors`` from the ``.safetensors`` headers (element counts per dtype; an explicit
        *safetensors_parameters* n gives ``{"parameters": {"BF16": n}, "total": n}``);
        ``transformersInfo`` (for ``library_name="transformers"``) from the architecture;
        ``tags``: library name, ``safetensors``/``gguf``, model_type, pipeline tag, then *tags*,
        then ``custom_code`` when the config has an ``auto_map``. *gated*: False, True (=
        ``"auto"``), ``"auto"`` or ``"manual"``. The first commit's date is *created_at*; its
        sha is *sha* when given (to serve a repo at a commit the code pins), else derived.
        """
        if gated not in (False, True, "auto", "manual"):
            raise ValueError(f"gated must be False, True, 'auto' or 'manual', not {gated!r}")
        content = self._content(folder, files)
        repo = _Repo(
            repo_id=repo_id,
            pipeline_tag=pipeline_tag,
            tags=tuple(tags),
            downloads=downloads,
            trending_score=trending_score,
            likes=likes,
            gated=gated,
            library_name=library_name,
            created_at=_as_datetime(created_at),
            config=config,
            safetensors_parameters=safetensors_parameters,
            transformers_info=transformers_info,
            gguf=gguf,
        )
        return self._add_model_repo(repo, content, title, sha)

    def _add_model_repo(
        self, repo: _Repo, content: dict[str, bytes], title: str, sha: str | None
    ) -> str:
        """Serve the new model repo *repo*, its first commit dated its creation; its sha."""
        with self._lock:
            if repo.repo_id in self._repos:
                raise ValueError(
                    f"repo {repo.repo_id} exists: use add_commit, or remove_model first"
                )
            self._order += 1
            repo.order = self._order
            commit = self._make_commit(repo, None, content, repo.created_at, title, sha)
            self._repos[repo.repo_id] = repo
            repo.commits.append(commit)
            return commit.sha

    def add_repo(
        self,
        repo_id: str,
        repo_type: str,
        files: Mapping[str, bytes] | None = None,
        *,
        sdk: str | None = None,
        title: str = "initial commit",
    ) -> str:
        """Create a dataset or space repo (a space with its *sdk*) holding the Hub's default
        ``.gitattributes`` and *files*, as ``POST /api/repos/create`` then a commit would;
        return its commit sha. (Model repos: :meth:`add_model`.)"""
        if repo_type not in ("dataset", "space"):
            raise ValueError(f"repo_type must be 'dataset' or 'space', not {repo_type!r}")
        if (repo_type == "space") != (sdk is not None):
            raise ValueError("a space needs an sdk, and only a space has one")
        with self._lock:
            repo = self._create(repo_id, repo_type, sdk)
            content = {".gitattributes": GITATTRIBUTES.encode(), **self._content(None, files)}
            commit = self._make_commit(repo, None, content, repo.created_at, title)
            repo.commits.append(commit)
            return commit.sha

    def add_user(
        self, name: str, token: str, *, write: bool = True, orgs: Iterable[str] = ()
    ) -> None:
        """Register user *name*, member of *orgs*, and its *token* (a write token, or a read
        one with ``write=False``). Writes (creating repos, uploads, commits) need a write token
        of the repo's namespace: the user's own, or one of its organizations'."""
        with self._lock:
            self._users.setdefault(name, set()).update(orgs)
            self._tokens[token] = (name, write)

    def add_token(self, name: str, token: str, *, write: bool = True) -> None:
        """Give registered user *name* one more token."""
        with self._lock:
            if name not in self._users:
                raise KeyError(f"no user {name}")
            self._tokens[token] = (name, write)

    def add_bucket(self, bucket_id: str, *, private: bool = False) -> None:
        """Create the empty bucket *bucket_id* (``namespace/name``), as ``create_bucket`` would."""
        with self._lock:
            if bucket_id in self._buckets:
                raise ValueError(f"bucket {bucket_id} exists")
            now = datetime.now(UTC).replace(microsecond=0)
            self._buckets[bucket_id] = Bucket(bucket_id, private, now)

    def bucket_files(self, bucket_id: str) -> dict[str, BucketFile]:
        """The files of bucket *bucket_id* by path (KeyError: no such bucket); their contents
        are in :attr:`cas`, read back through the client (``download_bucket_files``)."""
        with self._lock:
            return dict(self._buckets[bucket_id].files)

    def files(
        self, repo_id: str, repo_type: str = "model", revision: str = "main"
    ) -> dict[str, bytes]:
        """The files of *repo_id* at *revision* (KeyError: no such repo or revision)."""
        with self._lock:
            commit = self._repos_of[repo_type][repo_id].resolve(revision)
            if commit is None:
                raise KeyError(f"no revision {revision} of {repo_id}")
            return {path: blob.data for path, blob in commit.files.items()}

    def commits(self, repo_id: str, repo_type: str = "model") -> list[tuple[str, str]]:
        """``(sha, title)`` of each commit of *repo_id*, oldest first."""
        with self._lock:
            return [(c.sha, c.title) for c in self._repos_of[repo_type][repo_id].commits]

    def add_commit(
        self,
        repo_id: str,
        folder: Path | str | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        delete: Iterable[str] = (),
        title: str = "update",
        date: str | datetime | None = None,
        repo_type: str = "model",
    ) -> str:
        """Commit *folder*/*files* on top of ``main`` of *repo_id* (added or overwritten; paths
        in *delete* are removed); return the new sha. ``main`` moves to it; older shas stay
        resolvable. The date defaults to one second after the parent's."""
        content = self._content(folder, files)
        with self._lock:
            repo = self._repos_of[repo_type].get(repo_id)
            if repo is None:
                raise KeyError(f"no repo {repo_id}")
            parent = repo.head
            merged = {path: blob.data for path, blob in parent.files.items()}
            merged.update(content)
            for path in delete:
                if merged.pop(path, None) is None:
                    raise KeyError(f"{path} is not in {repo_id}")
            when = parent.date + timedelta(seconds=1) if date is None else _as_datetime(date)
            commit = self._make_commit(repo, parent, merged, when, title)
            repo.commits.append(commit)
            return commit.sha

    def remove_model(self, repo_id: str) -> None:
        """Delete *repo_id* (KeyError if absent)."""
        with self._lock:
            del self._repos[repo_id]
            for key in [k for k in self._interrupts if k[0] == repo_id]:
                del self._interrupts[key]

    def interrupt(self, repo_id: str, filename: str, after_bytes: int, times: int = 1) -> None:
        """Make the next *times* GETs of *filename* in *repo_id* (any revision, ranged or not)
        send their headers and *after_bytes* bytes of the body, then close the connection."""
        if after_bytes < 0 or times < 1:
            raise ValueError("after_bytes must be >= 0 and times >= 1")
        with self._lock:
            self._interrupts.setdefault((repo_id, filename), []).append([after_bytes, times])

    def fail_with(self, status: int, *, paths: str = "") -> None:
        """Answer every request whose path holds ``paths`` (every one by default) with the
        error ``status`` (a 503, say) until :meth:`heal`."""
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error (4xx, 5xx), not {status}")
        with self._lock:
            self._failing = (paths, status)

    def stall(self, seconds: float, *, paths: str = "") -> None:
        """Wait ``seconds`` before answering every request whose path holds ``paths`` (a
        client's timeout shorter than that sees a Hub that does not answer) until
        :meth:`heal`."""
        if seconds <= 0:
            raise ValueError("seconds must be positive")
        with self._lock:
            self._stalling = (paths, float(seconds))

    def heal(self) -> None:
        """Undo :meth:`fail_with` and :meth:`stall`."""
        with self._lock:
            self._failing = self._stalling = None


@pytest.fixture
def minihub(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MiniHub]:
    """A started :class:`MiniHub`, with the environment pointing the Hub client at it.

    Sets ``HF_ENDPOINT``, ``HF_HOME``/``HF_HUB_CACHE`` (a temporary folder) and
    ``HF_HUB_DISABLE_TELEMETRY=1``; unsets ``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE`` and
    ``HF_TOKEN``. In-process, ``huggingface_hub.constants`` (read at import) gets
    ``HF_HUB_OFFLINE=False``, ``HF_HUB_CACHE`` and ``HF_HUB_DISABLE_TELEMETRY=True``, but not
    the endpoint: pass ``endpoint=hub.url`` (see the module docstring).
    """
    home = tmp_path_factory.mktemp("minihub-hf-home")
    with MiniHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(home))
        monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        try:
            from huggingface_hub import constants
        except ImportError:
            pass
        else:
            monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
            monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
            monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
        yield hub
    if hub.errors:
        pytest.fail("minihub failed to handle requests:\n" + "\n".join(hub.errors))
