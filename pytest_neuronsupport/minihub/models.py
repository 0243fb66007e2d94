"""What the mini-hub says about a model repo, as the Hub does: the fields of model info and
of a listing (and those ``expand`` may ask for), the listing's sort keys and filters, and its
paging cursor; plain functions of the repos, which the HTTP API (:mod:`.server`) answers with."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pytest_neuronsupport.minihub.repos import _Commit, _iso, _Repo

EXPANDABLE = frozenset(
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

LIST_DEFAULT_FIELDS = (
    "likes",
    "trendingScore",
    "private",
    "downloads",
    "tags",
    "pipeline_tag",
    "library_name",
    "createdAt",
)

#: What dataset and space info carry (no model card fields).
REPO_FIELDS = (
    "author",
    "sha",
    "lastModified",
    "createdAt",
    "private",
    "gated",
    "disabled",
    "downloads",
    "likes",
    "tags",
    "siblings",
    "usedStorage",
)

LIST_FULL_FIELDS = ("author", "sha", "lastModified", "gated", "disabled", "siblings")

INFO_FIELDS = (
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

SORT_KEYS = ("downloads", "trendingScore", "likes", "createdAt", "lastModified")

SORT_ALIASES = {
    "trending_score": "trendingScore",
    "created_at": "createdAt",
    "last_modified": "lastModified",
}

TRUE = {"1", "true", "yes", "on"}


def parse_size(text: str) -> float:
    """``7B`` -> 7e9 (suffixes K, M, B, T), for ``num_parameters=min:1B,max:8B``."""
    text = text.strip().upper()
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(text[-1:], 1.0)
    try:
        return float(text[:-1] if scale != 1.0 else text) * scale
    except ValueError:
        raise ValueError(f"Invalid num_parameters value: {text}") from None


def model_fields(
    repo: _Repo, commit: _Commit, names: Iterable[str], blobs: bool = False
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
        "private": repo.private,
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


def sort_value(repo: _Repo, sort: str) -> Any:
    return {
        "downloads": repo.downloads,
        "trendingScore": repo.trending_score,
        "likes": repo.likes,
        "createdAt": repo.created_at,
        "lastModified": repo.head.date,
    }[sort]


def matches(
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
    if gated and (gated.lower() in TRUE) != (repo.gated is not False):
        return False
    bounds = params.get("num_parameters")
    if bounds:
        total = (item.get("safetensors") or {}).get("total")
        for bound in bounds.split(","):
            kind, _, value = bound.partition(":")
            if total is None:
                return False
            if kind == "min" and total < parse_size(value):
                return False
            if kind == "max" and total > parse_size(value):
                return False
    return True


def cursor_offset(cursor: str | None) -> int:
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
