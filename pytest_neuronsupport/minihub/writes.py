"""The mini-hub's write side, as ``huggingface_hub`` drives the Hub's: tokens and namespaces,
``POST /api/repos/create``, ``POST /api/validate-yaml``, the pre-upload
(``/api/{type}s/{repo}/preupload/{rev}``), the git-LFS batch API with its upload and verify
URLs (the ``basic`` transfer only: nothing here speaks Xet), and commits
(``/api/{type}s/{repo}/commit/{rev}``, NDJSON) with their ``parentCommit`` check.

Each is a function of the hub and the request that returns the JSON to answer or raises
:class:`_Reply`; :mod:`.server` routes and sends. A write needs ``Authorization: Bearer
<token>`` of a write token (:meth:`~pytest_neuronsupport.minihub.MiniHub.add_user`) whose user
is the repo's namespace or one of its organizations: none answers 401, an unknown token 401
``Invalid credentials in Authorization header``, a read token or another namespace 403."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pytest_neuronsupport.minihub.repos import (
    GITATTRIBUTES,
    REPO_TYPES,
    SPACE_SDKS,
    _is_lfs,
    _Repo,
)
from pytest_neuronsupport.minihub.state import HubState

LFS_CONTENT_TYPE = "application/vnd.git-lfs+json"


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


@dataclass(frozen=True)
class _Request:
    hub: HubState
    body: bytes
    authorization: str | None

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"{}")
        except ValueError:
            raise _Reply(400, "Invalid JSON body", "BadRequest") from None


class Served(Protocol):
    """The server a request handler belongs to: the hub it serves."""

    hub: HubState


class Handler(Protocol):
    """What a route of the hub asks of the request handler
    (:class:`~pytest_neuronsupport.minihub.server._Handler`)."""

    path: str

    @property
    def server(self) -> Served: ...
    def _request(self) -> _Request: ...
    def _authorized(self) -> bool: ...
    def _next_url(self, query: list[tuple[str, str]], offset: int) -> str: ...
    def _send_json(
        self, value: Any, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> None: ...
    def send_response(self, code: int, message: str | None = None) -> None: ...
    def send_header(self, keyword: str, value: str) -> None: ...
    def end_headers(self) -> None: ...


def authorize(request: _Request, namespace: str, what: str, *, write: bool = True) -> str:
    """The user whose write token the request carries, if it may write in *namespace* (with
    ``write=False``: any token of the namespace, to read what is private to it)."""
    hub = request.hub
    header = request.authorization or ""
    if not header:
        raise _Reply(401, "Invalid username or password.")
    token = header.removeprefix("Bearer ").strip()
    found = hub._tokens.get(token)
    if found is None:
        raise _Reply(401, "Invalid credentials in Authorization header")
    user, may_write = found
    if write and not may_write:
        raise _Reply(403, f"You don't have the rights to {what}: this token is read-only")
    if namespace != user and namespace not in hub._users.get(user, set()):
        raise _Reply(403, f'You don\'t have the rights to {what} under the namespace "{namespace}"')
    return user


def _known_namespace(hub: HubState, namespace: str) -> bool:
    return namespace in hub._users or any(namespace in orgs for orgs in hub._users.values())


def create_repo(request: _Request) -> tuple[int, dict[str, Any]]:
    """``POST /api/repos/create``: ``{"name", "organization", "type", "sdk", ...}``."""
    hub = request.hub
    body = request.json()
    name, organization = body.get("name"), body.get("organization")
    repo_type = body.get("type") or "model"
    if not isinstance(name, str) or not name or "/" in name:
        raise _Reply(400, f"Invalid repo name: {name!r}", "BadRequest")
    if repo_type not in REPO_TYPES:
        raise _Reply(400, f"Invalid repo type: {repo_type!r}", "BadRequest")
    sdk = body.get("sdk")
    if repo_type == "space" and sdk not in SPACE_SDKS:
        raise _Reply(400, f"Invalid sdk for a space: {sdk!r}", "BadRequest")
    with hub._lock:
        if organization is None:
            header = (request.authorization or "").removeprefix("Bearer ").strip()
            organization = hub._tokens.get(header, (None, False))[0]
        if organization is not None and not _known_namespace(hub, organization):
            raise _Reply(404, f"Organization {organization} not found")
        user = authorize(request, organization or "", f"create a {repo_type}")
        repo_id = f"{organization or user}/{name}"
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        url = f"{hub.url}/{prefix}{repo_id}"
        if repo_id in hub._repos_of[repo_type]:
            return 409, {"error": f"You already created this {repo_type} repo", "url": url}
        repo = hub._create(repo_id, repo_type, sdk if repo_type == "space" else None)
        repo.private = bool(body.get("private") or body.get("visibility") == "private")
        content = {".gitattributes": GITATTRIBUTES.encode()}
        first = hub._make_commit(repo, None, content, repo.created_at, "initial commit")
        repo.commits.append(first)
    return 200, {"url": url, "name": repo_id, "id": repo_id}


def validate_yaml(request: _Request) -> dict[str, Any]:
    """``POST /api/validate-yaml``: a README's metadata block must be a YAML mapping."""
    content = request.json().get("content", "")
    if not isinstance(content, str) or not content.startswith("---"):
        return {"errors": [], "warnings": []}
    block, ends, _ = content[3:].partition("\n---")
    if not ends:
        raise _Reply(400, "Invalid metadata: the YAML block is not closed", "BadRequest")
    try:
        import yaml
    except ImportError:  # the block is taken as it is
        return {"errors": [], "warnings": []}
    try:
        metadata = yaml.safe_load(block)
    except yaml.YAMLError as exc:
        raise _Reply(400, f"Invalid metadata in README.md: {exc}", "BadRequest") from None
    if metadata is not None and not isinstance(metadata, dict):
        raise _Reply(400, "Invalid metadata in README.md: not a mapping", "BadRequest")
    return {"errors": [], "warnings": []}


def _namespace(repo: _Repo) -> str:
    return repo.repo_id.partition("/")[0]


def _on_main(revision: str) -> None:
    if revision not in ("main", "refs/heads/main", "refs%2Fheads%2Fmain"):
        raise _Reply(404, f"Invalid rev id: {revision}", "RevisionNotFound")


def preupload(request: _Request, repo: _Repo, revision: str) -> dict[str, Any]:
    """``POST .../preupload/{rev}``: each file's upload mode, and the oid of the file at that
    path now (the client leaves out of its commit a file whose oid is unchanged)."""
    authorize(request, _namespace(repo), f"write to {repo.repo_id}")
    _on_main(revision)
    files = request.json().get("files")
    if not isinstance(files, list):
        raise _Reply(400, "Invalid preupload body: no files", "BadRequest")
    answer = []
    for item in files:
        path, size = str(item.get("path", "")).strip("/"), item.get("size")
        if not path or not isinstance(size, int):
            raise _Reply(400, f"Invalid preupload entry: {item!r}", "BadRequest")
        entry: dict[str, Any] = {
            "path": path,
            "uploadMode": "lfs" if _is_lfs(path, size) else "regular",
            "shouldIgnore": False,
        }
        blob = repo.head.files.get(path)
        if blob is not None:
            entry["oid"] = blob.etag
        answer.append(entry)
    return {"files": answer, "commitOid": repo.head.sha}


def _lfs_known(hub: HubState, oid: str) -> bytes | None:
    if oid in hub._lfs:
        return hub._lfs[oid]
    for repos in hub._repos_of.values():
        for repo in repos.values():
            for commit in repo.commits:
                for blob in commit.files.values():
                    if blob.sha256 == oid:
                        return blob.data
    return None


def lfs_batch(request: _Request, repo: _Repo) -> dict[str, Any]:
    """``POST /{prefix}{repo}.git/info/lfs/objects/batch``: where to upload each object
    (``basic`` transfer: a PUT of the bytes, then a verify), none for an object held already."""
    hub = request.hub
    authorize(request, _namespace(repo), f"write to {repo.repo_id}")
    body = request.json()
    if body.get("operation") != "upload":
        raise _Reply(400, "Only the upload operation is served", "BadRequest")
    if "basic" not in body.get("transfers", ["basic"]):
        raise _Reply(400, "Only the basic transfer is served", "BadRequest")
    objects = []
    for item in body.get("objects", []):
        oid, size = item.get("oid"), item.get("size")
        if not isinstance(oid, str) or not isinstance(size, int):
            raise _Reply(400, f"Invalid LFS object: {item!r}", "BadRequest")
        entry: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
        with hub._lock:
            held = _lfs_known(hub, oid)
        if held is None:
            verify = f"{hub.url}/{repo.prefix}{repo.repo_id}.git/info/lfs/objects/verify"
            entry["actions"] = {
                "upload": {"href": f"{hub.url}/__lfs/{oid}?size={size}", "expires_in": 900},
                "verify": {"href": verify, "expires_in": 900},
            }
        objects.append(entry)
    return {"transfer": "basic", "objects": objects, "hash_algo": "sha256"}


def lfs_put(request: _Request, oid: str) -> None:
    """``PUT /__lfs/{oid}``: the object store's presigned upload URL (no token, as S3's)."""
    if hashlib.sha256(request.body).hexdigest() != oid:
        raise _Reply(400, f"The uploaded content does not match its oid {oid}", "BadRequest")
    with request.hub._lock:
        request.hub._lfs[oid] = request.body


def lfs_verify(request: _Request, repo: _Repo) -> dict[str, Any]:
    """``POST .../info/lfs/objects/verify``: ``{"oid", "size"}`` of an uploaded object."""
    authorize(request, _namespace(repo), f"write to {repo.repo_id}")
    body = request.json()
    with request.hub._lock:
        data = _lfs_known(request.hub, str(body.get("oid")))
    if data is None or len(data) != body.get("size"):
        raise _Reply(404, f"LFS object {body.get('oid')} not found (or of another size)")
    return {"success": True}


def commit(request: _Request, repo: _Repo, revision: str, create_pr: bool) -> dict[str, Any]:
    """``POST .../commit/{rev}``: NDJSON lines ``header`` (``summary``, ``description``,
    ``parentCommit``), then ``file`` (base64), ``lfsFile`` (an uploaded object),
    ``deletedFile``, ``deletedFolder``. All or nothing: 412 when ``parentCommit`` is not the
    head any more, 400 for an object never uploaded, 404 for a path to delete that is not
    there."""
    hub = request.hub
    authorize(request, _namespace(repo), f"write to {repo.repo_id}")
    _on_main(revision)
    if create_pr:
        raise _Reply(400, "Pull requests are not served by the mini-hub", "BadRequest")
    try:
        lines = [json.loads(line) for line in request.body.splitlines() if line.strip()]
    except ValueError:
        raise _Reply(400, "Invalid NDJSON body", "BadRequest") from None
    if not lines or lines[0].get("key") != "header":
        raise _Reply(400, "The first line must be the header", "BadRequest")
    header = lines[0].get("value") or {}
    summary = str(header.get("summary") or "").strip()
    if not summary:
        raise _Reply(400, "A commit needs a summary", "BadRequest")
    parent = header.get("parentCommit")
    with hub._lock:
        head = repo.head
        if parent is not None and not (len(parent) >= 7 and head.sha.startswith(parent)):
            raise _Reply(412, "A commit has happened since. Please refresh and try again.")
        files = {path: blob.data for path, blob in head.files.items()}
        for line in lines[1:]:
            _apply(hub, files, str(line.get("key")), line.get("value") or {})
        now = datetime.now(UTC).replace(microsecond=0)
        when = max(now, head.date + timedelta(seconds=1))
        description = str(header.get("description") or "")
        made = hub._make_commit(repo, head, files, when, summary, description=description)
        repo.commits.append(made)
    url = f"{hub.url}/{repo.prefix}{repo.repo_id}/commit/{made.sha}"
    return {"success": True, "commitOid": made.sha, "commitUrl": url, "pullRequestUrl": None}


def _apply(hub: HubState, files: dict[str, bytes], key: str, value: dict[str, Any]) -> None:
    path = str(value.get("path", "")).strip("/")
    if not path:
        raise _Reply(400, f"A {key} line without a path", "BadRequest")
    if key == "file":
        if value.get("encoding", "base64") != "base64":
            raise _Reply(400, f"Unknown encoding {value.get('encoding')!r}", "BadRequest")
        files[path] = base64.b64decode(str(value.get("content", "")))
    elif key == "lfsFile":
        data = _lfs_known(hub, str(value.get("oid")))
        if data is None or len(data) != value.get("size"):
            raise _Reply(400, f"{path}: LFS object {value.get('oid')} was never uploaded")
        files[path] = data
    elif key == "deletedFile":
        if files.pop(path, None) is None:
            raise _Reply(404, f"{path}: Entry not found", "EntryNotFound")
    elif key == "deletedFolder":
        inside = [p for p in files if p.startswith(path + "/")]
        if not inside:
            raise _Reply(404, f"{path}: Entry not found", "EntryNotFound")
        for p in inside:
            del files[p]
    else:
        raise _Reply(400, f"Unknown commit line {key!r}", "BadRequest")
