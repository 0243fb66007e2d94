"""The mini-hub's HTTP API: what ``huggingface_hub`` and ``transformers`` ask of the Hub (the
listing, model info, trees, paths-info, resolve with ranges), answered from its repos."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import mimetypes
import re
import socket
import socketserver
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from pytest_neuronsupport.minihub import buckets, writes
from pytest_neuronsupport.minihub.models import (
    EXPANDABLE,
    INFO_FIELDS,
    LIST_DEFAULT_FIELDS,
    LIST_FULL_FIELDS,
    REPO_FIELDS,
    SORT_ALIASES,
    SORT_KEYS,
    TRUE,
    cursor_offset,
    matches,
    model_fields,
    sort_value,
)
from pytest_neuronsupport.minihub.repos import _Blob, _Commit, _iso, _Repo
from pytest_neuronsupport.minihub.state import HubState
from pytest_neuronsupport.minihub.writes import LFS_CONTENT_TYPE, _Reply, _Request

_SUBPATHS = {"revision", "tree", "paths-info", "refs", "resolve", "commits", "preupload", "commit"}
_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_LFS_BATCH = ("info", "lfs", "objects", "batch")
_LFS_VERIFY = ("info", "lfs", "objects", "verify")


class _Server(http.server.ThreadingHTTPServer):
    """A threading server that remembers its open connections, to close them on stop."""

    daemon_threads = True

    def __init__(self, hub: HubState) -> None:
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
            self._body = self._read_body()
            status, wait_s = hub._fault_for(self.path)
            if wait_s:
                time.sleep(wait_s)
            if status is not None:
                raise _Reply(status, f"minihub told to fail with {status}")
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

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(body)
                body += self.rfile.read(size)
                self.rfile.readline()
        length = self.headers.get("Content-Length") or "0"
        if not length.isdigit():
            raise _Reply(400, f"Invalid Content-Length: {length}", "BadRequest")
        return self.rfile.read(int(length)) if int(length) else b""

    def _request(self) -> _Request:
        return _Request(self.server.hub, self._body, self.headers.get("Authorization"))

    def _send_json(
        self, value: Any, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        body = json.dumps(value).encode()
        self.send_response(status)
        headers = dict(headers or {})
        content_type = headers.pop("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, text in headers.items():
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
        if segments[:1] == ["api"] and len(segments) >= 2 and segments[1] in _TYPES:
            repo_type, rest = _TYPES[segments[1]], segments[2:]
            if not rest and method in ("GET", "HEAD") and repo_type == "model":
                return self._list_models(query)
            if rest:
                return self._repo_api(repo_type, method, rest, query)
        elif segments == ["api", "repos", "create"] and method == "POST":
            status, answer = writes.create_repo(self._request())
            return self._send_json(answer, status)
        elif buckets.serve(self, method, segments, query):
            return None
        elif segments == ["api", "validate-yaml"] and method == "POST":
            return self._send_json(writes.validate_yaml(self._request()))
        elif len(segments) == 2 and segments[0] == "__lfs" and method == "PUT":
            writes.lfs_put(self._request(), segments[1])
            return self._send_json({})
        elif len(segments) >= 5 and tuple(segments[-4:]) in (_LFS_BATCH, _LFS_VERIFY):
            return self._lfs(method, segments)
        repo_type, at = "model", 0
        if segments[0] in ("datasets", "spaces"):
            repo_type, at = _TYPES[segments[0]], 1
        if "resolve" in segments[at + 1 : at + 3] and method in ("GET", "HEAD"):
            where = segments.index("resolve", at + 1)
            if len(segments) > where + 2:
                repo_id = unquote("/".join(segments[at:where]))
                revision = unquote(segments[where + 1])
                filename = unquote("/".join(segments[where + 2 :]))
                return self._resolve(repo_type, repo_id, revision, filename)
        raise _Reply(404, f"Not found: {method} {split.path}")

    def _lfs(self, method: str, segments: list[str]) -> None:
        if method != "POST":
            raise _Reply(404, f"Not found: {method} {self.path}")
        repo_type, names = "model", segments[:-4]
        if names[0] in ("datasets", "spaces"):
            repo_type, names = _TYPES[names[0]], names[1:]
        repo_id = unquote("/".join(names)).removesuffix(".git")
        with self.server.hub._lock:
            repo = self._repo(repo_id, repo_type)
        if segments[-1] == "batch":
            answer = writes.lfs_batch(self._request(), repo)
        else:
            answer = writes.lfs_verify(self._request(), repo)
        self._send_json(answer, headers={"Content-Type": LFS_CONTENT_TYPE})

    def _split_repo(self, rest: list[str], repos: Mapping[str, _Repo]) -> tuple[str, list[str]]:
        if len(rest) >= 2 and unquote(f"{rest[0]}/{rest[1]}") in repos:
            return unquote(f"{rest[0]}/{rest[1]}"), rest[2:]
        if unquote(rest[0]) in repos:
            return unquote(rest[0]), rest[1:]
        if len(rest) >= 2 and rest[1] not in _SUBPATHS:
            return unquote(f"{rest[0]}/{rest[1]}"), rest[2:]
        return unquote(rest[0]), rest[1:]

    def _repo(self, repo_id: str, repo_type: str = "model") -> _Repo:
        repo = self.server.hub._repos_of[repo_type].get(repo_id)
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

    def _repo_api(
        self, repo_type: str, method: str, rest: list[str], query: list[tuple[str, str]]
    ) -> None:
        hub = self.server.hub
        read = method in ("GET", "HEAD")
        with hub._lock:
            repo_id, sub = self._split_repo(rest, hub._repos_of[repo_type])
            repo = self._repo(repo_id, repo_type)
            if read and not sub:
                return self._info(repo, repo.head, query)
            if read and len(sub) == 2 and sub[0] == "revision":
                return self._info(repo, self._commit(repo, unquote(sub[1])), query)
            if read and len(sub) >= 2 and sub[0] == "tree":
                commit = self._commit(repo, unquote(sub[1]))
                return self._tree(repo, commit, unquote("/".join(sub[2:])), query)
            if method == "POST" and len(sub) == 2 and sub[0] == "paths-info":
                return self._paths_info(repo, self._commit(repo, unquote(sub[1])))
            if read and sub == ["refs"]:
                ref = {"name": "main", "ref": "refs/heads/main", "targetCommit": repo.head.sha}
                return self._send_json({"branches": [ref], "converts": [], "tags": []})
            if read and len(sub) == 2 and sub[0] == "commits":
                return self._commits(self._commit(repo, unquote(sub[1])))
        if method == "POST" and len(sub) == 2 and sub[0] == "preupload":
            return self._send_json(writes.preupload(self._request(), repo, unquote(sub[1])))
        if method == "POST" and len(sub) == 2 and sub[0] == "commit":
            create_pr = dict(query).get("create_pr", "").lower() in TRUE
            answer = writes.commit(self._request(), repo, unquote(sub[1]), create_pr)
            return self._send_json(answer)
        raise _Reply(404, f"Not found: {method} {self.path}")

    def _commits(self, commit: _Commit) -> None:
        entries = []
        current: _Commit | None = commit
        while current is not None:
            entries.append(
                {
                    "id": current.sha,
                    "title": current.title,
                    "message": current.description,
                    "authors": [],
                    "date": _iso(current.date),
                }
            )
            current = current.parent
        self._send_json(entries)

    # -- listings ----------------------------------------------------------------------------------

    @staticmethod
    def _expand(query: list[tuple[str, str]]) -> list[str] | None:
        expand = [v for k, v in query if k in ("expand", "expand[]")]
        if not expand:
            return None
        invalid = [name for name in expand if name not in EXPANDABLE]
        if invalid:
            raise _Reply(400, f"Invalid expand value(s): {', '.join(invalid)}", "BadRequest")
        return expand

    def _info(self, repo: _Repo, commit: _Commit, query: list[tuple[str, str]]) -> None:
        params = dict(query)
        blobs = params.get("blobs", "").lower() in TRUE
        if repo.repo_type != "model":
            item = model_fields(repo, commit, REPO_FIELDS, blobs=blobs)
            if repo.sdk is not None:
                item["sdk"] = repo.sdk
            return self._send_json(item)
        expand = self._expand(query)
        item = model_fields(repo, commit, expand or INFO_FIELDS, blobs=blobs)
        if expand is None:
            item["modelId"] = repo.repo_id
            if params.get("securityStatus", "").lower() in TRUE:
                item["securityRepoStatus"] = {"scansDone": True, "filesWithIssues": []}
        self._send_json(item)

    def _list_models(self, query: list[tuple[str, str]]) -> None:
        hub = self.server.hub
        params = dict(query)  # last value wins; repeatable keys are read from `query`
        filters = [v for k, v in query if k in ("filter", "filter[]")]
        expand = self._expand(query)
        sort = params.get("sort")
        sort = SORT_ALIASES.get(sort, sort) if sort else None
        if sort is not None and sort not in SORT_KEYS:
            raise _Reply(400, f"Invalid sort: {sort}", "BadRequest")
        try:
            limit = int(params["limit"]) if params.get("limit") else None
            offset = cursor_offset(params.get("cursor"))
        except ValueError as error:
            raise _Reply(400, str(error), "BadRequest") from None

        with hub._lock:
            repos = sorted(hub._repos.values(), key=lambda r: r.order)
            rows: list[tuple[_Repo, dict[str, Any]]] = []
            for repo in repos:
                item = model_fields(repo, repo.head, INFO_FIELDS)
                try:
                    kept = matches(repo, item, params, filters)
                except ValueError as error:
                    raise _Reply(400, str(error), "BadRequest") from None
                if kept:
                    rows.append((repo, item))
            if sort is not None:
                rows.sort(key=lambda row: row[0].repo_id)
                descending = params.get("direction", "-1") != "1"
                rows.sort(key=lambda row: sort_value(row[0], sort), reverse=descending)
            size = hub.page_size if limit is None else max(1, min(hub.page_size, limit))
            page = rows[offset : offset + size]
            if expand is not None:
                names: Iterable[str] = expand
            else:
                names = list(LIST_DEFAULT_FIELDS)
                if params.get("full", "").lower() in TRUE:
                    names = [*names, *LIST_FULL_FIELDS]
                if params.get("config", "").lower() in TRUE:
                    names = [*names, "config"]
            items = []
            for repo, _ in page:
                item = model_fields(repo, repo.head, names)
                if expand is None:
                    item["modelId"] = repo.repo_id
                items.append(item)
        headers = {}
        if offset + size < len(rows):
            headers["Link"] = f'<{self._next_url(query, offset + size)}>; rel="next"'
        self._send_json(items, headers=headers)

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
        recursive = params.get("recursive", "").lower() in TRUE
        expand = params.get("expand", "").lower() in TRUE
        entries = self._entries(commit, path.strip("/"), recursive)
        if entries is None:
            raise _Reply(404, "Entry not found", "EntryNotFound", commit.sha)
        try:
            offset = cursor_offset(params.get("cursor"))
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
            expand = dict(form).get("expand", "").lower() in TRUE
        result = []
        for path in paths:
            path = path.strip("/")
            if path in commit.files:
                result.append(self._entry_json(commit, path, commit.files[path], expand))
            elif path and any(p.startswith(path + "/") for p in commit.files):
                result.append(self._entry_json(commit, path, None, expand))
        self._send_json(result)

    def _resolve(self, repo_type: str, repo_id: str, revision: str, filename: str) -> None:
        hub = self.server.hub
        with hub._lock:
            repo = self._repo(repo_id, repo_type)
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
