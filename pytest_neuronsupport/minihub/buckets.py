"""The mini-hub's Storage Buckets, as ``huggingface_hub`` (1.5 and later: ``create_bucket``,
``bucket_info``, ``list_bucket_tree``, ``get_bucket_paths_info``, ``batch_bucket_files``,
``download_bucket_files``, ``sync_bucket``) drives the Hub's.

A bucket is a flat map of paths to files, no git and no commits. Its metadata is JSON under
``/api/buckets/{namespace}/{name}``: ``POST`` creates it, ``GET`` describes it, ``GET .../tree
[/{prefix}]`` lists it (``recursive``; paged), ``POST .../paths-info`` describes some paths,
``POST .../batch`` applies NDJSON lines ``addFile``/``copyFile``/``deleteFile`` (each file by its
Xet hash), and ``GET .../xet-read-token``/``xet-write-token`` hand the client a Xet access
token. ``HEAD /buckets/{id}/resolve/{path}`` gives a file's ``X-Xet-Hash``, ``X-Linked-Size``
and ``X-Xet-Refresh-Route`` (where its read token comes from).

Contents never pass through this server: they travel through Xet, and the token endpoints name
an on-disk content store, ``local://<folder>`` (:attr:`MiniHub.cas
<pytest_neuronsupport.minihub.MiniHub.cas>`), that ``hf_xet`` (1.8) reads and writes itself:
the answer ``{"accessToken", "exp", "casUrl"}`` its token refresh expects, with the same three
as ``X-Xet-*`` headers for the Python side. So no Xet server is needed.

Who may do what, as for repos: reading a public bucket needs nothing, a private one a token of
its namespace; creating one, a batch and a write token need a write token of the namespace (no
token 401, an unknown one 401, a read token 403); a bucket that does not exist answers
``RepoNotFound`` (404 with a token, 401 without), which the client raises as
``BucketNotFoundError``.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from pytest_neuronsupport.minihub.models import TRUE, cursor_offset
from pytest_neuronsupport.minihub.state import Bucket, BucketFile
from pytest_neuronsupport.minihub.writes import (
    Handler,
    _known_namespace,
    _Reply,
    _Request,
    authorize,
)

_XET_HASH = re.compile(r"[0-9a-f]{64}")
#: How long a Xet token handed out lives (the client refreshes it a minute before).
TOKEN_LIFETIME_S = 3600


def bucket_of(request: _Request, bucket_id: str, authorized: bool) -> Bucket:
    """The bucket *bucket_id*, if the request may read it (a private one: a token of its
    namespace); else ``RepoNotFound``, as the Hub answers for what one may not see."""
    bucket = request.hub._buckets.get(bucket_id)
    if bucket is not None and bucket.private:
        try:
            authorize(request, bucket_id.partition("/")[0], "read", write=False)
        except _Reply:
            bucket = None
    if bucket is None:
        raise _Reply(404 if authorized else 401, "Bucket not found", "RepoNotFound")
    return bucket


def create(request: _Request, bucket_id: str) -> tuple[int, dict[str, Any]]:
    """``POST /api/buckets/{namespace}/{name}``: ``{"visibility"?: "public"|"private"}``;
    409 when it exists (``create_bucket(exist_ok=True)`` takes that as done)."""
    hub = request.hub
    namespace, _, name = bucket_id.partition("/")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise _Reply(400, f"Invalid bucket name: {name!r}", "BadRequest")
    body = request.json()
    url = f"{hub.url}/buckets/{bucket_id}"
    with hub._lock:
        if not _known_namespace(hub, namespace):
            raise _Reply(404, f"Namespace {namespace} not found")
        authorize(request, namespace, "create a bucket")
        if bucket_id in hub._buckets:
            return 409, {"error": "You already created this bucket", "url": url}
        private = body.get("visibility") == "private" or bool(body.get("private"))
        now = datetime.now(UTC).replace(microsecond=0)
        hub._buckets[bucket_id] = Bucket(bucket_id, private, now)
    return 200, {"url": url, "name": bucket_id, "id": bucket_id}


def xet_token(
    request: _Request, bucket: Bucket, write: bool
) -> tuple[dict[str, Any], dict[str, str]]:
    """``GET .../xet-{read,write}-token``: the body hf_xet's token refresh reads, and the
    headers ``huggingface_hub`` reads, naming the hub's local content store."""
    if write:
        authorize(request, bucket.bucket_id.partition("/")[0], f"write to {bucket.bucket_id}")
    store = request.hub.cas
    assert store is not None, "the hub is not started"
    cas = f"local://{store.view(write)}"
    expires = int(time.time()) + TOKEN_LIFETIME_S
    token = f"minihub-{'write' if write else 'read'}"
    headers = {
        "X-Xet-Endpoint": cas,
        "X-Xet-Access-Token": token,
        "X-Xet-Expiration": str(expires),
    }
    return {"accessToken": token, "exp": expires, "casUrl": cas}, headers


def paths_info(request: _Request, bucket: Bucket) -> list[dict[str, Any]]:
    """``POST .../paths-info``: ``{"paths": [...]}``; the files among them (others left out)."""
    paths = request.json().get("paths")
    if not isinstance(paths, list):
        raise _Reply(400, "Invalid paths-info body: no paths", "BadRequest")
    with request.hub._lock:
        found = (bucket.files.get(str(p).strip("/")) for p in paths)
        return [f.json() for f in found if f is not None]


def batch(request: _Request, bucket: Bucket) -> dict[str, Any]:
    """``POST .../batch``, NDJSON: ``addFile`` (``path``, ``xetHash``, ``mtime``,
    ``contentType``), ``copyFile`` (the same, a hash the hub has seen), ``deleteFile``
    (``path``). Applied line by line under the hub's lock, so that each file appears whole and
    at once; the lines that cannot be applied are answered in ``failed``."""
    hub = request.hub
    authorize(request, bucket.bucket_id.partition("/")[0], f"write to {bucket.bucket_id}")
    try:
        lines = [json.loads(line) for line in request.body.splitlines() if line.strip()]
    except ValueError:
        raise _Reply(400, "Invalid NDJSON body", "BadRequest") from None
    failed: list[dict[str, str]] = []
    now = datetime.now(UTC)
    with hub._lock:
        sizes = {f.xet_hash: f.size for b in hub._buckets.values() for f in b.files.values()}
    assert hub.cas is not None, "the hub is not started"
    added = [str(line.get("xetHash") or "") for line in lines if line.get("type") == "addFile"]
    # each added file whole in the hub's store first (outside its lock)
    sizes.update(hub.cas.sizes([h for h in added if _XET_HASH.fullmatch(h) and h not in sizes]))
    with hub._lock:
        for line in lines:
            error = _apply(bucket, line, now, sizes)
            if error is not None:
                failed.append({"path": str(line.get("path")), "error": error})
    return {"failed": failed}


def _apply(
    bucket: Bucket, line: dict[str, Any], now: datetime, sizes: dict[str, int]
) -> str | None:
    kind, path = line.get("type"), str(line.get("path") or "").strip("/")
    if not path:
        return f"a {kind} line without a path"
    if kind == "deleteFile":
        return None if bucket.files.pop(path, None) is not None else "Entry not found"
    if kind not in ("addFile", "copyFile"):
        return f"unknown operation {kind!r}"
    xet_hash = str(line.get("xetHash") or "")
    if not _XET_HASH.fullmatch(xet_hash):
        return f"invalid xetHash {xet_hash!r}"
    size = sizes.get(xet_hash)
    if size is None:
        return f"xetHash {xet_hash} was never uploaded (its size is unknown to the hub)"
    mtime = int(line.get("mtime") or now.timestamp() * 1000)
    bucket.files[path] = BucketFile(path, size, xet_hash, mtime, now, line.get("contentType"))
    return None


def serve(handler: Handler, method: str, segments: list[str], query: list[tuple[str, str]]) -> bool:
    """Answer a request for a bucket (``/api/buckets/...`` or ``/buckets/.../resolve/...``);
    False when the path is not a bucket's."""
    if segments[:2] == ["api", "buckets"] and len(segments) >= 4:
        bucket_id, rest = f"{unquote(segments[2])}/{unquote(segments[3])}", segments[4:]
        _api(handler, method, bucket_id, rest, query)
        return True
    if segments[:1] == ["buckets"] and len(segments) >= 5 and segments[3] == "resolve":
        bucket_id = f"{unquote(segments[1])}/{unquote(segments[2])}"
        _resolve(handler, method, bucket_id, unquote("/".join(segments[4:])))
        return True
    return False


def _api(
    handler: Handler, method: str, bucket_id: str, rest: list[str], query: list[tuple[str, str]]
) -> None:
    request, authorized = handler._request(), handler._authorized()
    if method == "POST" and not rest:
        status, answer = create(request, bucket_id)
        return handler._send_json(answer, status)
    with request.hub._lock:
        bucket = bucket_of(request, bucket_id, authorized)
    if method in ("GET", "HEAD") and not rest:
        return handler._send_json(bucket.info())
    if method in ("GET", "HEAD") and rest[:1] == ["tree"]:
        return _tree(handler, bucket, unquote("/".join(rest[1:])), query)
    if method == "POST" and rest == ["paths-info"]:
        return handler._send_json(paths_info(request, bucket))
    if method == "POST" and rest == ["batch"]:
        return handler._send_json(batch(request, bucket))
    if method == "GET" and rest in (["xet-read-token"], ["xet-write-token"]):
        answer, headers = xet_token(request, bucket, write=rest[0] == "xet-write-token")
        return handler._send_json(answer, headers=headers)
    raise _Reply(404, f"Not found: {method} {handler.path}")


def _tree(handler: Handler, bucket: Bucket, prefix: str, query: list[tuple[str, str]]) -> None:
    params = dict(query)
    recursive = params.get("recursive", "").lower() in TRUE
    try:
        offset = cursor_offset(params.get("cursor"))
    except ValueError as error:
        raise _Reply(400, str(error), "BadRequest") from None
    with handler.server.hub._lock:
        entries = bucket.listing(prefix, recursive)
    size = handler.server.hub.page_size
    headers = {}
    if offset + size < len(entries):
        headers["Link"] = f'<{handler._next_url(query, offset + size)}>; rel="next"'
    handler._send_json(entries[offset : offset + size], headers=headers)


def _resolve(handler: Handler, method: str, bucket_id: str, path: str) -> None:
    """``HEAD /buckets/{id}/resolve/{path}``: the file's Xet hash, size and read-token route.
    A ``GET`` is refused: contents are served only through Xet."""
    hub = handler.server.hub
    with hub._lock:
        bucket = bucket_of(handler._request(), bucket_id, handler._authorized())
        file = bucket.files.get(path)
    if file is None:
        raise _Reply(404, "Entry not found", "EntryNotFound")
    if method != "HEAD":
        raise _Reply(404, "The mini-hub serves a bucket's contents only through Xet")
    route = f"{hub.url}/api/buckets/{bucket_id}/xet-read-token"
    handler.send_response(200)
    handler.send_header("Content-Length", str(file.size))
    handler.send_header("ETag", f'"{file.xet_hash}"')
    handler.send_header("X-Xet-Hash", file.xet_hash)
    handler.send_header("X-Linked-Size", str(file.size))
    handler.send_header("X-Xet-Refresh-Route", route)
    handler.end_headers()
