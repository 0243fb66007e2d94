"""The mini-hub's Storage Buckets, driven by the real ``huggingface_hub`` client (2.4) and its
``hf_xet`` (1.8): buckets created and described, files added, listed and read back through Xet
(an on-disk ``local://`` store the token endpoints name), and who may do what."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from huggingface_hub import HfApi, get_session, hf_raise_for_status
from huggingface_hub.errors import BucketNotFoundError, HfHubHTTPError
from huggingface_hub.utils._headers import build_hf_headers

from pytest_neuronsupport.minihub import MiniHub

pytest_plugins = ["pytest_neuronsupport.minihub"]


@pytest.fixture
def api(minihub: MiniHub) -> HfApi:
    minihub.add_user("alice", "hf_alice", orgs=("team",))
    minihub.add_user("reader", "hf_reader", write=False, orgs=("team",))
    minihub.add_user("mallory", "hf_mallory")
    return HfApi(endpoint=minihub.url, token="hf_alice")


def _folder(root: Path, files: dict[str, bytes]) -> Path:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


def _read(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_create_describe_and_who_may(minihub: MiniHub, api: HfApi) -> None:
    url = api.create_bucket("team/cache")
    assert (url.bucket_id, url.url) == ("team/cache", f"{minihub.url}/buckets/team/cache")
    assert api.create_bucket("team/cache", exist_ok=True).bucket_id == "team/cache"
    with pytest.raises(HfHubHTTPError) as info:
        api.create_bucket("team/cache")
    assert info.value.response.status_code == 409
    found = api.bucket_info("team/cache")
    assert (found.id, found.private, found.size, found.total_files) == ("team/cache", False, 0, 0)
    with pytest.raises(BucketNotFoundError):
        api.bucket_info("team/nothing")
    reader = HfApi(endpoint=minihub.url, token="hf_reader")
    with pytest.raises(HfHubHTTPError) as info:  # a read token creates nothing, even exist_ok
        reader.create_bucket("team/other", exist_ok=True)
    assert info.value.response.status_code == 403
    assert reader.create_bucket("team/cache", exist_ok=True).bucket_id == "team/cache"
    with pytest.raises(HfHubHTTPError) as info:
        HfApi(endpoint=minihub.url, token="hf_mallory").create_bucket("team/mine")
    assert info.value.response.status_code == 403
    api.create_bucket("team/secret", private=True)
    assert api.bucket_info("team/secret").private is True
    with pytest.raises(BucketNotFoundError):
        HfApi(endpoint=minihub.url, token="hf_mallory").bucket_info("team/secret")


def test_files_travel_through_xet_both_ways(minihub: MiniHub, api: HfApi, tmp_path: Path) -> None:
    api.create_bucket("team/cache")
    files = {"ab/cd/abcd.neff": b"NEFF" * 3000, "ef/01/ef01.neff": bytes(range(256)) * 7}
    local = _folder(tmp_path / "up", {**files, "ab/tmp123.tmp": b"half"})
    plan = api.sync_bucket(
        str(local),
        "hf://buckets/team/cache/v1",
        include=["*.neff"],
        ignore_existing=True,
    )
    assert plan.summary()["uploads"] == 2
    held = minihub.bucket_files("team/cache")
    assert sorted(held) == ["v1/ab/cd/abcd.neff", "v1/ef/01/ef01.neff"]
    assert held["v1/ab/cd/abcd.neff"].size == 12000
    tokens = [p for _, p in minihub.requests if "xet-" in p]
    assert tokens == ["/api/buckets/team/cache/xet-write-token"]
    again = api.sync_bucket(str(local), "hf://buckets/team/cache/v1", ignore_existing=True,
                            include=["*.neff"])  # fmt: skip
    assert again.summary()["uploads"] == 0  # what the bucket holds is not sent again

    down = tmp_path / "down"
    other = HfApi(endpoint=minihub.url, token=False)  # a public bucket needs no token
    other.sync_bucket("hf://buckets/team/cache/v1", str(down))
    assert _read(down) == files
    info = other.get_bucket_file_metadata("team/cache", "v1/ef/01/ef01.neff")
    assert info.size == 256 * 7 and info.xet_file_data.refresh_route.endswith("xet-read-token")
    assert {f.path for f in other.get_bucket_paths_info("team/cache", ["v1/ef/01/ef01.neff",
            "v1/none.neff"])} == {"v1/ef/01/ef01.neff"}  # fmt: skip


def test_the_tree_lists_folders_and_pages(minihub: MiniHub, api: HfApi) -> None:
    api.create_bucket("team/cache")
    api.batch_bucket_files(
        "team/cache",
        add=[(b"a" * 10, "v1/ab/a.neff"), (b"b" * 20, "v1/cd/b.neff"), (b"c" * 30, "v2/c.neff")],
    )
    top = {(e.type, e.path) for e in api.list_bucket_tree("team/cache")}
    assert top == {("directory", "v1"), ("directory", "v2")}
    inside = {(e.type, e.path) for e in api.list_bucket_tree("team/cache", prefix="v1")}
    assert inside == {("directory", "v1/ab"), ("directory", "v1/cd")}
    minihub.page_size = 2
    every = [e.path for e in api.list_bucket_tree("team/cache", recursive=True)]
    assert every == ["v1/ab/a.neff", "v1/cd/b.neff", "v2/c.neff"]
    assert list(api.list_bucket_tree("team/cache", prefix="v9", recursive=True)) == []
    api.batch_bucket_files("team/cache", delete=["v2/c.neff"])
    assert api.bucket_info("team/cache").total_files == 2


def test_a_read_token_reads_and_may_not_write(minihub: MiniHub, api: HfApi, tmp_path: Path) -> None:
    api.create_bucket("team/cache")
    api.batch_bucket_files("team/cache", add=[(b"x" * 100, "v1/x.neff")])
    reader = HfApi(endpoint=minihub.url, token="hf_reader")
    reader.sync_bucket("hf://buckets/team/cache", str(tmp_path / "down"))
    assert _read(tmp_path / "down") == {"v1/x.neff": b"x" * 100}
    local = _folder(tmp_path / "up", {"y.neff": b"y" * 100})
    with pytest.raises(ConnectionError, match="403 Forbidden"):  # from hf_xet's token refresh
        reader.sync_bucket(str(local), "hf://buckets/team/cache/v1")
    token = f"{minihub.url}/api/buckets/team/cache/xet-write-token"
    with pytest.raises(HfHubHTTPError, match="read-only") as info:  # asked in Python: says why
        hf_raise_for_status(get_session().get(token, headers=build_hf_headers(token="hf_reader")))
    assert info.value.response.status_code == 403
    assert sorted(minihub.bucket_files("team/cache")) == ["v1/x.neff"]


def test_a_batch_naming_content_never_uploaded_fails_that_file(
    minihub: MiniHub, api: HfApi
) -> None:
    """What a client that skipped its upload would send: the file is refused, not added."""
    api.create_bucket("team/cache")
    line = {"type": "addFile", "path": "x.neff", "xetHash": "0" * 64, "mtime": 1}
    request = urllib.request.Request(
        f"{minihub.url}/api/buckets/team/cache/batch",
        data=json.dumps(line).encode() + b"\n",
        headers={"Authorization": "Bearer hf_alice", "Content-Type": "application/x-ndjson"},
    )
    with urllib.request.urlopen(request) as response:
        failed = json.loads(response.read())["failed"]
    assert [f["path"] for f in failed] == ["x.neff"] and "never uploaded" in failed[0]["error"]
    assert minihub.bucket_files("team/cache") == {}
