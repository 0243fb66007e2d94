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

Repos are model repos only, built from a local folder and/or a mapping of files, with a linear
history (:meth:`MiniHub.add_model`, :meth:`MiniHub.add_commit`); ``main`` and any commit sha (or
a unique prefix of at least 7 hex digits) are valid revisions. Served endpoints:

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

This module uses only the standard library (and pytest, for the fixture); it never imports torch,
and imports ``huggingface_hub`` only inside the fixture, if installed.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import http.server
import json
import math
import mimetypes
import os
import re
import socket
import socketserver
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import pytest

__all__ = ["MiniHub", "minihub"]

_DEFAULT_CREATED_AT = datetime(2024, 1, 1, tzinfo=UTC)

# Files the Hub's default .gitattributes sends to LFS (and GGUF), matched on the file name.
_LFS_PATTERNS = (
    "*.7z *.arrow *.bin *.bz2 *.ckpt *.ftz *.gz *.h5 *.joblib *.lfs.* *.mlmodel *.model *.msgpack"
    " *.npy *.npz *.onnx *.ot *.parquet *.pb *.pickle *.pkl *.pt *.pth *.rar *.safetensors *.tar"
    " *.tar.* *.tflite *.tgz *.wasm *.xz *.zip *.zst *tfevents* *.gguf"
).split()
_LFS_MIN_SIZE = 10 * 1000 * 1000  # the Hub refuses larger regular git files

# The fields `expand` may name (huggingface_hub's ExpandModelProperty_T); others answer 400.
_EXPANDABLE = frozenset(
    {
        "author",
        "baseModels",
        "cardData",
        "childrenModelCount",
        "config",
        "createdAt",
        "disabled",
        "downloads",
        "downloadsAllTime",
        "evalResults",
        "gated",
        "gguf",
        "inference",
        "inferenceProviderMapping",
        "lastModified",
        "library_name",
        "likes",
        "mask_token",
        "model-index",
        "pipeline_tag",
        "private",
        "resourceGroup",
        "safetensors",
        "sha",
        "siblings",
        "spaces",
        "tags",
        "transformersInfo",
        "trendingScore",
        "usedStorage",
        "widgetData",
    }
)
_LIST_DEFAULT_FIELDS = (
    "likes",
    "trendingScore",
    "private",
    "downloads",
    "tags",
    "pipeline_tag",
    "library_name",
    "createdAt",
)
_LIST_FULL_FIELDS = ("author", "sha", "lastModified", "gated", "disabled", "siblings")
_INFO_FIELDS = (
    "author",
    "sha",
    "lastModified",
    "private",
    "gated",
    "disabled",
    "downloads",
    "downloadsAllTime",
    "likes",
    "trendingScore",
    "tags",
    "pipeline_tag",
    "library_name",
    "config",
    "transformersInfo",
    "safetensors",
    "gguf",
    "siblings",
    "spaces",
    "createdAt",
    "usedStorage",
)
_SORT_KEYS = ("downloads", "trendingScore", "likes", "createdAt", "lastModified")
_SORT_ALIASES = {
    "trending_score": "trendingScore",
    "created_at": "createdAt",
    "last_modified": "lastModified",
}

# Keys of config.json / tokenizer_config.json that the Hub exposes in the `config` field.
_HUB_CONFIG_KEYS = ("architectures", "model_type", "auto_map", "quantization_config")
_HUB_TOKENIZER_KEYS = (
    "bos_token",
    "eos_token",
    "pad_token",
    "unk_token",
    "sep_token",
    "cls_token",
    "mask_token",
    "chat_template",
    "use_default_system_prompt",
)
# Architecture suffix -> transformers auto class, for the derived `transformersInfo`.
_AUTO_MODELS = (
    ("ForCausalLM", "AutoModelForCausalLM"),
    ("LMHeadModel", "AutoModelForCausalLM"),
    ("ForMaskedLM", "AutoModelForMaskedLM"),
    ("ForSequenceClassification", "AutoModelForSequenceClassification"),
    ("ForTokenClassification", "AutoModelForTokenClassification"),
    ("ForQuestionAnswering", "AutoModelForQuestionAnswering"),
    ("ForImageClassification", "AutoModelForImageClassification"),
    ("ForSpeechSeq2Seq", "AutoModelForSpeechSeq2Seq"),
)
_CONDITIONAL_GENERATION = {
    "image-text-to-text": "AutoModelForImageTextToText",
    "automatic-speech-recognition": "AutoModelForSpeechSeq2Seq",
}
_TRUE = {"1", "true", "yes", "on"}
_HEX = re.compile(r"[0-9a-f]{7,40}")
_SUBPATHS = {"revision", "tree", "paths-info", "refs", "resolve", "commits"}

_FULL_SHA = re.compile(r"[0-9a-f]{40}")


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _as_datetime(value: str | datetime) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _git_oid(data: bytes) -> str:
    """The git blob id of *data* (what the Hub reports as a regular file's oid and ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _is_lfs(path: str, size: int) -> bool:
    name = path.rsplit("/", 1)[-1]
    return size >= _LFS_MIN_SIZE or any(fnmatch.fnmatch(name, p) for p in _LFS_PATTERNS)


@dataclass(frozen=True)
class _Blob:
    """One file's content and the ids the Hub derives from it."""

    data: bytes
    oid: str  # git blob id (of the LFS pointer file for LFS files)
    sha256: str | None  # LFS files only
    pointer_size: int

    @classmethod
    def of(cls, path: str, data: bytes) -> _Blob:
        if not _is_lfs(path, len(data)):
            return cls(data, _git_oid(data), None, 0)
        sha256 = hashlib.sha256(data).hexdigest()
        pointer = (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(data)}\n"
        ).encode()
        return cls(data, _git_oid(pointer), sha256, len(pointer))

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def etag(self) -> str:
        return self.sha256 or self.oid


@dataclass
class _Commit:
    sha: str
    parent: _Commit | None
    files: dict[str, _Blob]
    date: datetime
    title: str
    meta: dict[str, Any] = field(default_factory=dict)  # derived card fields at this commit


@dataclass
class _Repo:
    repo_id: str
    pipeline_tag: str | None
    tags: tuple[str, ...]
    downloads: int
    trending_score: int
    likes: int
    gated: bool | str
    library_name: str | None
    created_at: datetime
    # explicit overrides of fields otherwise derived from the files (None: derive)
    config: dict[str, Any] | None
    safetensors_parameters: int | None
    transformers_info: dict[str, Any] | None
    gguf: dict[str, Any] | None
    commits: list[_Commit] = field(default_factory=list)
    order: int = 0

    @property
    def head(self) -> _Commit:
        return self.commits[-1]

    def resolve(self, revision: str) -> _Commit | None:
        if revision in ("main", "refs/heads/main"):
            return self.head
        if _HEX.fullmatch(revision):
            found = [c for c in self.commits if c.sha.startswith(revision)]
            if len(found) == 1:
                return found[0]
        return None


def _read_folder(folder: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".cache"))
        for name in sorted(filenames):
            path = Path(dirpath, name)
            files[path.relative_to(folder).as_posix()] = path.read_bytes()
    return files


def _safetensors_counts(data: bytes) -> dict[str, int]:
    """Element counts per dtype from a safetensors header (8-byte LE length, then JSON)."""
    if len(data) < 8:
        return {}
    length = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8 : 8 + length])
    except ValueError:
        return {}
    counts: dict[str, int] = {}
    if not isinstance(header, dict):
        return counts
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        dtype = str(info.get("dtype", "F32"))
        counts[dtype] = counts.get(dtype, 0) + math.prod(int(d) for d in info.get("shape", []))
    return counts


def _json_file(files: Mapping[str, _Blob], path: str) -> dict[str, Any] | None:
    blob = files.get(path)
    if blob is None:
        return None
    try:
        value = json.loads(blob.data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _derive(repo: _Repo, files: Mapping[str, _Blob]) -> dict[str, Any]:
    """The card fields the Hub computes from a commit's files, unless given explicitly."""
    config: dict[str, Any] | None
    if repo.config is not None:
        config = dict(repo.config)
    else:
        raw = _json_file(files, "config.json")
        config = None if raw is None else {k: raw[k] for k in _HUB_CONFIG_KEYS if k in raw}
        tokenizer = _json_file(files, "tokenizer_config.json")
        if tokenizer is not None:
            config = config or {}
            config["tokenizer_config"] = {
                k: tokenizer[k] for k in _HUB_TOKENIZER_KEYS if k in tokenizer
            }

    safetensors: dict[str, Any] | None = None
    if repo.safetensors_parameters is not None:
        n = repo.safetensors_parameters
        safetensors = {"parameters": {"BF16": n}, "total": n}
    else:
        counts: dict[str, int] = {}
        for path, blob in sorted(files.items()):
            if path.endswith(".safetensors"):
                for dtype, n in _safetensors_counts(blob.data).items():
                    counts[dtype] = counts.get(dtype, 0) + n
        if counts:
            safetensors = {"parameters": counts, "total": sum(counts.values())}

    transformers_info = repo.transformers_info
    if transformers_info is None and repo.library_name == "transformers" and config:
        transformers_info = _derive_transformers_info(config, files, repo.pipeline_tag)

    tags: list[str] = []
    if repo.library_name:
        tags.append(repo.library_name)
    if safetensors is not None or any(p.endswith(".safetensors") for p in files):
        tags.append("safetensors")
    if repo.gguf is not None or any(p.endswith(".gguf") for p in files):
        tags.append("gguf")
    if config and isinstance(config.get("model_type"), str):
        tags.append(config["model_type"])
    if repo.pipeline_tag:
        tags.append(repo.pipeline_tag)
    tags.extend(repo.tags)
    if config and config.get("auto_map"):
        tags.append("custom_code")
    return {
        "config": config,
        "safetensors": safetensors,
        "transformersInfo": transformers_info,
        "gguf": repo.gguf,
        "tags": list(dict.fromkeys(tags)),
    }


def _derive_transformers_info(
    config: Mapping[str, Any], files: Mapping[str, _Blob], pipeline_tag: str | None
) -> dict[str, Any] | None:
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures:
        return None
    arch = str(architectures[0])
    auto_model = "AutoModel"
    for suffix, name in _AUTO_MODELS:
        if arch.endswith(suffix):
            auto_model = name
            break
    else:
        if arch.endswith("ForConditionalGeneration"):
            auto_model = _CONDITIONAL_GENERATION.get(pipeline_tag or "", "AutoModelForSeq2SeqLM")
    info: dict[str, Any] = {"auto_model": auto_model}
    auto_map = config.get("auto_map")
    if isinstance(auto_map, dict) and isinstance(auto_map.get(auto_model), str):
        info["custom_class"] = auto_map[auto_model].split("--")[-1]
    if pipeline_tag:
        info["pipeline_tag"] = pipeline_tag
    tokenizer = any(p in files for p in ("tokenizer.json", "tokenizer_config.json"))
    images = any(p in files for p in ("preprocessor_config.json", "processor_config.json"))
    if images:
        info["processor"] = "AutoProcessor" if tokenizer else "AutoImageProcessor"
    elif tokenizer:
        info["processor"] = "AutoTokenizer"
    return info


def _parse_size(text: str) -> float:
    """``7B`` -> 7e9 (suffixes K, M, B, T), for ``num_parameters=min:1B,max:8B``."""
    text = text.strip().upper()
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(text[-1:], 1.0)
    try:
        return float(text[:-1] if scale != 1.0 else text) * scale
    except ValueError:
        raise _Reply(400, f"Invalid num_parameters value: {text}", "BadRequest") from None


class _Server(http.server.ThreadingHTTPServer):
    """A threading server that remembers its open connections, to close them on stop."""

    daemon_threads = True

    def __init__(self, hub: MiniHub) -> None:
        self.hub = hub
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (socket.getfqdn), which can be slow.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "127.0.0.1"
        self.server_port = self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="minihub-connection",
            daemon=True,
        )
        with self._connections_lock:
            self._connections[request] = thread
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.hub.verbose:
            super().handle_error(request, client_address)

    def close_connections(self, timeout: float) -> None:
        with self._connections_lock:
            connections = list(self._connections.items())
        for sock, _ in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a handler blocked reading a keep-alive
            except OSError:
                pass
        for _, thread in connections:
            thread.join(timeout)


class _Reply(Exception):
    """An error answer: raised inside handlers, written by the dispatcher."""

    def __init__(
        self, status: int, message: str, code: str | None = None, commit: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.commit = commit


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    # -- plumbing --------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.hub.verbose:
            sys.stderr.write(f"minihub: {format % args}\n")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_OPTIONS(self) -> None:
        self._dispatch("OPTIONS")

    def _dispatch(self, method: str) -> None:
        hub = self.server.hub
        hub._record(method, self.path, {k.lower(): v for k, v in self.headers.items()})
        self._method = method
        try:
            length = self.headers.get("Content-Length") or "0"
            if not length.isdigit():
                raise _Reply(400, f"Invalid Content-Length: {length}", "BadRequest")
            self._body = self.rfile.read(int(length)) if int(length) else b""
            self._route(method)
        except _Reply as reply:
            self._send_error(reply)
        except OSError:  # the client went away (or an interrupt() cut it): nothing to answer
            self.close_connection = True
        except Exception as error:
            # A bug of the hub: answer 500 (the client will retry it) and keep it for the test.
            hub.errors.append(f"{method} {self.path}: {traceback.format_exc()}")
            self._send_error(_Reply(500, f"minihub internal error: {error!r}"))
            self.close_connection = True

    def _send_json(
        self, value: Any, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, text in (headers or {}).items():
            self.send_header(name, text)
        self.end_headers()
        if self._method != "HEAD":
            self.wfile.write(body)

    def _send_error(self, reply: _Reply) -> None:
        headers = {"X-Error-Message": reply.message}
        if reply.code:
            headers["X-Error-Code"] = reply.code
        if reply.commit:
            headers["X-Repo-Commit"] = reply.commit
        self._send_json({"error": reply.message}, reply.status, headers)

    def _authorized(self) -> bool:
        return bool(self.headers.get("Authorization"))

    # -- routing ---------------------------------------------------------------------------------

    def _route(self, method: str) -> None:
        split = urlsplit(self.path)
        query = parse_qsl(split.query, keep_blank_values=True)
        segments = split.path.strip("/").split("/")
        if segments[:2] == ["api", "models"]:
            rest = segments[2:]
            if not rest and method in ("GET", "HEAD"):
                return self._list_models(query)
            if rest:
                return self._model_api(method, rest, query)
        elif "resolve" in segments[1:3] and method in ("GET", "HEAD"):
            at = segments.index("resolve", 1)
            if len(segments) > at + 2:
                repo_id = unquote("/".join(segments[:at]))
                revision = unquote(segments[at + 1])
                filename = unquote("/".join(segments[at + 2 :]))
                return self._resolve(repo_id, revision, filename)
        raise _Reply(404, f"Not found: {method} {split.path}")

    def _split_repo(self, rest: list[str]) -> tuple[str, list[str]]:
        hub = self.server.hub
        if len(rest) >= 2 and unquote(f"{rest[0]}/{rest[1]}") in hub._repos:
            return unquote(f"{rest[0]}/{rest[1]}"), rest[2:]
        if unquote(rest[0]) in hub._repos:
            return unquote(rest[0]), rest[1:]
        if len(rest) >= 2 and rest[1] not in _SUBPATHS:
            return unquote(f"{rest[0]}/{rest[1]}"), rest[2:]
        return unquote(rest[0]), rest[1:]

    def _repo(self, repo_id: str) -> _Repo:
        repo = self.server.hub._repos.get(repo_id)
        if repo is None:
            raise _Reply(
                404 if self._authorized() else 401,
                "Repository not found",
                "RepoNotFound",
            )
        return repo

    @staticmethod
    def _commit(repo: _Repo, revision: str) -> _Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise _Reply(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    def _model_api(self, method: str, rest: list[str], query: list[tuple[str, str]]) -> None:
        hub = self.server.hub
        with hub._lock:
            repo_id, sub = self._split_repo(rest)
            repo = self._repo(repo_id)
            if method in ("GET", "HEAD") and not sub:
                return self._model_info(repo, repo.head, query)
            if method in ("GET", "HEAD") and len(sub) == 2 and sub[0] == "revision":
                return self._model_info(repo, self._commit(repo, unquote(sub[1])), query)
            if method in ("GET", "HEAD") and len(sub) >= 2 and sub[0] == "tree":
                commit = self._commit(repo, unquote(sub[1]))
                return self._tree(repo, commit, unquote("/".join(sub[2:])), query)
            if method == "POST" and len(sub) == 2 and sub[0] == "paths-info":
                return self._paths_info(repo, self._commit(repo, unquote(sub[1])))
            if method in ("GET", "HEAD") and sub == ["refs"]:
                ref = {"name": "main", "ref": "refs/heads/main", "targetCommit": repo.head.sha}
                return self._send_json({"branches": [ref], "converts": [], "tags": []})
        raise _Reply(404, f"Not found: {method} {self.path}")

    # -- listings ----------------------------------------------------------------------------------

    def _fields(
        self, repo: _Repo, commit: _Commit, names: Iterable[str], blobs: bool = False
    ) -> dict[str, Any]:
        namespace, _, _ = repo.repo_id.rpartition("/")
        meta = commit.meta
        siblings: list[dict[str, Any]] = []
        for path, blob in sorted(commit.files.items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling.update(size=blob.size, blobId=blob.oid)
                if blob.sha256 is not None:
                    sibling["lfs"] = {
                        "size": blob.size,
                        "sha256": blob.sha256,
                        "pointerSize": blob.pointer_size,
                    }
            siblings.append(sibling)
        stored = {b.etag: b.size for c in repo.commits for b in c.files.values()}
        values: dict[str, Any] = {
            "author": namespace or None,
            "sha": commit.sha,
            "lastModified": _iso(commit.date),
            "createdAt": _iso(repo.created_at),
            "private": False,
            "disabled": False,
            "gated": ("auto" if repo.gated is True else repo.gated),
            "downloads": repo.downloads,
            "downloadsAllTime": repo.downloads,
            "likes": repo.likes,
            "trendingScore": repo.trending_score,
            "tags": meta["tags"],
            "pipeline_tag": repo.pipeline_tag,
            "library_name": repo.library_name,
            "config": meta["config"],
            "transformersInfo": meta["transformersInfo"],
            "safetensors": meta["safetensors"],
            "gguf": meta["gguf"],
            "siblings": siblings,
            "spaces": [],
            "usedStorage": sum(stored.values()),
        }
        item: dict[str, Any] = {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
        }
        for name in names:
            if values.get(name) is not None:
                item[name] = values[name]
        return item

    @staticmethod
    def _expand(query: list[tuple[str, str]]) -> list[str] | None:
        expand = [v for k, v in query if k in ("expand", "expand[]")]
        if not expand:
            return None
        invalid = [name for name in expand if name not in _EXPANDABLE]
        if invalid:
            raise _Reply(400, f"Invalid expand value(s): {', '.join(invalid)}", "BadRequest")
        return expand

    def _model_info(self, repo: _Repo, commit: _Commit, query: list[tuple[str, str]]) -> None:
        params = dict(query)
        expand = self._expand(query)
        blobs = params.get("blobs", "").lower() in _TRUE
        item = self._fields(repo, commit, expand or _INFO_FIELDS, blobs=blobs)
        if expand is None:
            item["modelId"] = repo.repo_id
            if params.get("securityStatus", "").lower() in _TRUE:
                item["securityRepoStatus"] = {"scansDone": True, "filesWithIssues": []}
        self._send_json(item)

    def _list_models(self, query: list[tuple[str, str]]) -> None:
        hub = self.server.hub
        params = dict(query)  # last value wins; repeatable keys are read from `query`
        filters = [v for k, v in query if k in ("filter", "filter[]")]
        expand = self._expand(query)
        sort = params.get("sort")
        sort = _SORT_ALIASES.get(sort, sort) if sort else None
        if sort is not None and sort not in _SORT_KEYS:
            raise _Reply(400, f"Invalid sort: {sort}", "BadRequest")
        try:
            limit = int(params["limit"]) if params.get("limit") else None
            offset = self._cursor(params.get("cursor"))
        except ValueError as error:
            raise _Reply(400, str(error), "BadRequest") from None

        with hub._lock:
            repos = sorted(hub._repos.values(), key=lambda r: r.order)
            rows: list[tuple[_Repo, dict[str, Any]]] = []
            for repo in repos:
                item = self._fields(repo, repo.head, _INFO_FIELDS)
                if self._matches(repo, item, params, filters):
                    rows.append((repo, item))
            if sort is not None:
                rows.sort(key=lambda row: row[0].repo_id)
                descending = params.get("direction", "-1") != "1"
                rows.sort(key=lambda row: self._sort_value(row[0], sort), reverse=descending)
            size = hub.page_size if limit is None else max(1, min(hub.page_size, limit))
            page = rows[offset : offset + size]
            if expand is not None:
                names: Iterable[str] = expand
            else:
                names = list(_LIST_DEFAULT_FIELDS)
                if params.get("full", "").lower() in _TRUE:
                    names = [*names, *_LIST_FULL_FIELDS]
                if params.get("config", "").lower() in _TRUE:
                    names = [*names, "config"]
            items = []
            for repo, _ in page:
                item = self._fields(repo, repo.head, names)
                if expand is None:
                    item["modelId"] = repo.repo_id
                items.append(item)
        headers = {}
        if offset + size < len(rows):
            headers["Link"] = f'<{self._next_url(query, offset + size)}>; rel="next"'
        self._send_json(items, headers=headers)

    @staticmethod
    def _sort_value(repo: _Repo, sort: str) -> Any:
        return {
            "downloads": repo.downloads,
            "trendingScore": repo.trending_score,
            "likes": repo.likes,
            "createdAt": repo.created_at,
            "lastModified": repo.head.date,
        }[sort]

    @staticmethod
    def _matches(
        repo: _Repo, item: Mapping[str, Any], params: Mapping[str, str], filters: list[str]
    ) -> bool:
        labels = {*item.get("tags", []), repo.library_name}
        if any(f not in labels for f in filters):
            return False
        search = params.get("search")
        if search and search.lower() not in repo.repo_id.lower():
            return False
        author = params.get("author")
        if author and not repo.repo_id.startswith(f"{author}/"):
            return False
        pipeline_tag = params.get("pipeline_tag")
        if pipeline_tag and repo.pipeline_tag != pipeline_tag:
            return False
        gated = params.get("gated")
        if gated and (gated.lower() in _TRUE) != (repo.gated is not False):
            return False
        bounds = params.get("num_parameters")
        if bounds:
            total = (item.get("safetensors") or {}).get("total")
            for bound in bounds.split(","):
                kind, _, value = bound.partition(":")
                if total is None:
                    return False
                if kind == "min" and total < _parse_size(value):
                    return False
                if kind == "max" and total > _parse_size(value):
                    return False
        return True

    @staticmethod
    def _cursor(cursor: str | None) -> int:
        if not cursor:
            return 0
        try:
            data = json.loads(base64.urlsafe_b64decode(cursor.encode()))
            offset = int(data["offset"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise ValueError(f"Invalid cursor: {cursor}") from None
        if offset < 0:
            raise ValueError(f"Invalid cursor: {cursor}")
        return offset

    def _next_url(self, query: list[tuple[str, str]], offset: int) -> str:
        cursor = base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()
        kept = [(k, v) for k, v in query if k != "cursor"] + [("cursor", cursor)]
        path = urlsplit(self.path).path
        return f"{self.server.hub.url}{path}?{urlencode(kept)}"

    # -- files -------------------------------------------------------------------------------------

    @staticmethod
    def _entries(
        commit: _Commit, path: str, recursive: bool
    ) -> list[tuple[str, _Blob | None]] | None:
        """Entries under *path* (a folder, or ''): (path, blob) for files, (path, None) for
        folders. None when *path* is not a folder; [(path, blob)] when it is a file."""
        if path in commit.files:
            return [(path, commit.files[path])]
        prefix = f"{path}/" if path else ""
        if prefix and not any(p.startswith(prefix) for p in commit.files):
            return None
        entries: dict[str, _Blob | None] = {}
        for file_path, blob in commit.files.items():
            if not file_path.startswith(prefix):
                continue
            parts = file_path[len(prefix) :].split("/")
            for depth in range(1, len(parts)):
                if depth > 1 and not recursive:
                    break
                entries.setdefault(prefix + "/".join(parts[:depth]), None)
            if recursive or len(parts) == 1:
                entries[file_path] = blob
        return sorted(entries.items())

    @staticmethod
    def _last_commit(commit: _Commit, path: str) -> _Commit:
        def state(c: _Commit) -> tuple[tuple[str, str], ...]:
            return tuple(
                (p, b.oid)
                for p, b in sorted(c.files.items())
                if p == path or p.startswith(path + "/")
            )

        current = commit
        while current.parent is not None and state(current.parent) == state(current):
            current = current.parent
        return current

    def _entry_json(
        self, commit: _Commit, path: str, blob: _Blob | None, expand: bool
    ) -> dict[str, Any]:
        entry: dict[str, Any]
        if blob is None:
            inside = sorted((p, b.oid) for p, b in commit.files.items() if p.startswith(path + "/"))
            oid = hashlib.sha1(json.dumps(inside).encode()).hexdigest()
            entry = {"type": "directory", "oid": oid, "size": 0, "path": path}
        else:
            entry = {"type": "file", "oid": blob.oid, "size": blob.size, "path": path}
            if blob.sha256 is not None:
                entry["lfs"] = {
                    "oid": blob.sha256,
                    "size": blob.size,
                    "pointerSize": blob.pointer_size,
                }
        if expand:
            last = self._last_commit(commit, path)
            entry["lastCommit"] = {"id": last.sha, "title": last.title, "date": _iso(last.date)}
            if blob is not None:
                entry["securityFileStatus"] = {
                    "status": "safe",
                    "avScan": {"virusFound": False, "virusNames": None},
                    "pickleImportScan": None,
                }
        return entry

    def _tree(self, repo: _Repo, commit: _Commit, path: str, query: list[tuple[str, str]]) -> None:
        params = dict(query)
        recursive = params.get("recursive", "").lower() in _TRUE
        expand = params.get("expand", "").lower() in _TRUE
        entries = self._entries(commit, path.strip("/"), recursive)
        if entries is None:
            raise _Reply(404, "Entry not found", "EntryNotFound", commit.sha)
        try:
            offset = self._cursor(params.get("cursor"))
        except ValueError as error:
            raise _Reply(400, str(error), "BadRequest") from None
        size = self.server.hub.page_size
        page = [self._entry_json(commit, p, b, expand) for p, b in entries[offset : offset + size]]
        headers = {}
        if offset + size < len(entries):
            headers["Link"] = f'<{self._next_url(query, offset + size)}>; rel="next"'
        self._send_json(page, headers=headers)

    def _paths_info(self, repo: _Repo, commit: _Commit) -> None:
        content_type = self.headers.get("Content-Type", "")
        if "json" in content_type:
            try:
                body = json.loads(self._body or b"{}")
                paths = [str(p) for p in body.get("paths", [])]
                expand = bool(body.get("expand", False))
            except (ValueError, AttributeError, TypeError):
                raise _Reply(400, "Invalid JSON body", "BadRequest") from None
        else:
            form = parse_qsl(self._body.decode(), keep_blank_values=True)
            paths = [v for k, v in form if k in ("paths", "paths[]")]
            expand = dict(form).get("expand", "").lower() in _TRUE
        result = []
        for path in paths:
            path = path.strip("/")
            if path in commit.files:
                result.append(self._entry_json(commit, path, commit.files[path], expand))
            elif path and any(p.startswith(path + "/") for p in commit.files):
                result.append(self._entry_json(commit, path, None, expand))
        self._send_json(result)

    def _resolve(self, repo_id: str, revision: str, filename: str) -> None:
        hub = self.server.hub
        with hub._lock:
            repo = self._repo(repo_id)
            if repo.gated is not False and not self._authorized():
                raise _Reply(
                    401,
                    f"Access to model {repo_id} is restricted. You must have access to it and be"
                    " authenticated to access it. Please log in.",
                    "GatedRepo",
                )
            commit = self._commit(repo, revision)
            blob = commit.files.get(filename)
            if blob is None:
                raise _Reply(404, "Entry not found", "EntryNotFound", commit.sha)
            cut = hub._take_interrupt(repo_id, filename) if self._method == "GET" else None

        start, end, status = 0, blob.size, 200
        try:
            parsed = _parse_range(self.headers.get("Range") or "", blob.size)
        except ValueError:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{blob.size}")
            self.send_header("Content-Length", "0")
            self.send_header("X-Repo-Commit", commit.sha)
            self.end_headers()
            return
        if parsed is not None:
            (start, end), status = parsed, 206
        self.send_response(status)
        content_type = mimetypes.guess_type(filename)[0] or "application/octet-stream"
        if content_type.startswith("text/") or content_type == "application/json":
            content_type += "; charset=utf-8"
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{blob.etag}"')
        self.send_header("X-Repo-Commit", commit.sha)
        if blob.sha256 is not None:
            self.send_header("X-Linked-Etag", f'"{blob.sha256}"')
            self.send_header("X-Linked-Size", str(blob.size))
            name = filename.rsplit("/", 1)[-1]
            self.send_header("Content-Disposition", f'inline; filename="{name}";')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{blob.size}")
        if cut is not None:
            self.send_header("Connection", "close")
        self.end_headers()
        if self._method == "HEAD":
            return
        body = memoryview(blob.data)[start:end]
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        for offset in range(0, len(body), 1 << 20):
            self.wfile.write(body[offset : offset + (1 << 20)])


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """(start, end-exclusive) of a single ``bytes=`` range; None for a header to ignore (several
    ranges, or malformed: the whole file is sent, as HTTP allows). ValueError if unsatisfiable."""
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if match is None or not (match.group(1) or match.group(2)):
        return None
    first, last = match.groups()
    if not first:  # suffix range: the last N bytes
        if int(last) == 0 or size == 0:
            raise ValueError(header)
        return (max(0, size - int(last)), size)
    start = int(first)
    end = min(int(last) + 1, size) if last else size
    if start >= size or end <= start:
        raise ValueError(header)
    return (start, end)


class MiniHub:
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
        self.page_size = page_size
        self.verbose = verbose
        self.requests: list[tuple[str, str]] = []
        self.request_headers: list[dict[str, str]] = []
        self.errors: list[str] = []
        self._lock = threading.RLock()
        self._repos: dict[str, _Repo] = {}
        self._interrupts: dict[tuple[str, str], list[list[int]]] = {}
        self._order = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> MiniHub:
        """Bind ``127.0.0.1`` on a free port and serve from a daemon thread."""
        if self._server is not None:
            raise RuntimeError("MiniHub is already started")
        self._server = _Server(self)
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

    def __enter__(self) -> MiniHub:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, the value for ``HF_ENDPOINT`` / ``endpoint=``."""
        if self._server is None:
            raise RuntimeError("MiniHub is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

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
        created = _as_datetime(created_at)
        with self._lock:
            if repo_id in self._repos:
                raise ValueError(f"repo {repo_id} exists: use add_commit, or remove_model first")
            self._order += 1
            repo = _Repo(
                repo_id=repo_id,
                pipeline_tag=pipeline_tag,
                tags=tuple(tags),
                downloads=downloads,
                trending_score=trending_score,
                likes=likes,
                gated=gated,
                library_name=library_name,
                created_at=created,
                config=config,
                safetensors_parameters=safetensors_parameters,
                transformers_info=transformers_info,
                gguf=gguf,
                order=self._order,
            )
            commit = self._make_commit(repo, None, content, created, title, sha)
            self._repos[repo_id] = repo
            repo.commits.append(commit)
            return commit.sha

    def add_commit(
        self,
        repo_id: str,
        folder: Path | str | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        delete: Iterable[str] = (),
        title: str = "update",
        date: str | datetime | None = None,
    ) -> str:
        """Commit *folder*/*files* on top of ``main`` of *repo_id* (added or overwritten; paths
        in *delete* are removed); return the new sha. ``main`` moves to it; older shas stay
        resolvable. The date defaults to one second after the parent's."""
        content = self._content(folder, files)
        with self._lock:
            repo = self._repos.get(repo_id)
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

    # -- internals -------------------------------------------------------------------------------

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
    ) -> _Commit:
        if sha is not None and not _FULL_SHA.fullmatch(sha):
            raise ValueError(f"sha must be 40 lowercase hex digits, not {sha!r}")
        blobs = {path: _Blob.of(path, data) for path, data in sorted(content.items())}
        digest = hashlib.sha1(f"{repo.repo_id}\n{parent.sha if parent else ''}\n{title}\n".encode())
        digest.update(_iso(when).encode())
        for path, blob in blobs.items():
            digest.update(f"\n{path} {blob.oid}".encode())
        commit = _Commit(sha or digest.hexdigest(), parent, blobs, when, title)
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
