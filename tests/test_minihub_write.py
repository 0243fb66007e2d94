"""The mini-hub's write side, driven by the real ``huggingface_hub`` client: repos of every
type created, files committed through the pre-upload and plain LFS paths (with hf_xet
installed and not disabled: the client must still take LFS for file objects), commits refused
on a stale parent, and tokens that may not write."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError

from pytest_neuronsupport.minihub import MiniHub

pytest_plugins = ["pytest_neuronsupport.minihub"]

PARQUET = b"PAR1" + bytes(range(256)) * 40 + b"PAR1"  # an LFS path by its name


@pytest.fixture
def api(minihub: MiniHub) -> HfApi:
    minihub.add_user("alice", "hf_alice", orgs=("team",))
    minihub.add_user("reader", "hf_reader", write=False, orgs=("team",))
    return HfApi(endpoint=minihub.url, token="hf_alice")


def _adds(files: dict[str, bytes]) -> list[CommitOperationAdd]:
    return [CommitOperationAdd(path, io.BytesIO(data)) for path, data in files.items()]


def test_create_and_commit_a_dataset_through_lfs(
    minihub: MiniHub, api: HfApi, tmp_path: Path
) -> None:
    url = api.create_repo("team/results", repo_type="dataset", exist_ok=True)
    assert url == f"{minihub.url}/datasets/team/results"
    assert api.create_repo("team/results", repo_type="dataset", exist_ok=True) == url
    with pytest.raises(HfHubHTTPError) as info:
        api.create_repo("team/results", repo_type="dataset")
    assert info.value.response.status_code == 409
    head = api.dataset_info("team/results").sha
    assert head is not None
    files = {"README.md": b"---\nconfigs: []\n---\n# hi\n", "data/a/b.parquet": PARQUET}
    minihub.requests.clear()
    commit = api.create_commit(
        "team/results",
        _adds(files),
        commit_message="two files",
        repo_type="dataset",
        parent_commit=head,
    )
    paths = [path for _, path in minihub.requests]
    assert any(p.endswith("/preupload/main") for p in paths)
    assert any(p.endswith("team/results.git/info/lfs/objects/batch") for p in paths)
    assert any(p.startswith("/__lfs/") for p in paths)
    assert not any("xet" in p for p in paths)
    assert minihub.files("team/results", "dataset") == {
        ".gitattributes": minihub.files("team/results", "dataset")[".gitattributes"],
        **files,
    }
    assert minihub.commits("team/results", "dataset")[-1] == (commit.oid, "two files")
    got = hf_hub_download(
        "team/results",
        "data/a/b.parquet",
        repo_type="dataset",
        endpoint=minihub.url,
        cache_dir=tmp_path,
    )
    assert Path(got).read_bytes() == PARQUET
    titles = [c.title for c in api.list_repo_commits("team/results", repo_type="dataset")]
    assert titles == ["two files", "initial commit"]

    # the same content again: the client sees the oids unchanged and makes no commit
    again = api.create_commit(
        "team/results", _adds(files), commit_message="same", repo_type="dataset"
    )
    assert again.oid == commit.oid
    assert len(minihub.commits("team/results", "dataset")) == 2

    # a stale parent is refused, and nothing of it lands
    with pytest.raises(HfHubHTTPError) as info:
        api.create_commit(
            "team/results",
            _adds({"new.txt": b"x"}),
            commit_message="late",
            repo_type="dataset",
            parent_commit=head,
        )
    assert info.value.response.status_code == 412
    assert "new.txt" not in minihub.files("team/results", "dataset")
    api.create_commit(
        "team/results",
        [CommitOperationDelete("data/")],
        commit_message="drop the data",
        repo_type="dataset",
    )
    assert set(minihub.files("team/results", "dataset")) == {".gitattributes", "README.md"}


def test_a_static_space(minihub: MiniHub, api: HfApi) -> None:
    api.create_repo("alice/page", repo_type="space", space_sdk="static", exist_ok=True)
    api.upload_file(
        path_or_fileobj=b"<html></html>",
        path_in_repo="index.html",
        repo_id="alice/page",
        repo_type="space",
    )
    assert api.space_info("alice/page").sdk == "static"
    assert minihub.files("alice/page", "space")["index.html"] == b"<html></html>"


def test_tokens_that_may_not_write(minihub: MiniHub, api: HfApi) -> None:
    api.create_repo("team/results", repo_type="dataset")
    reader = HfApi(endpoint=minihub.url, token="hf_reader")
    with pytest.raises(HfHubHTTPError) as info:
        reader.create_repo("team/other", repo_type="dataset", exist_ok=True)
    assert info.value.response.status_code == 403
    with pytest.raises(HfHubHTTPError) as info:
        reader.create_commit(
            "team/results", _adds({"x.parquet": PARQUET}), commit_message="x", repo_type="dataset"
        )
    assert info.value.response.status_code == 403
    with pytest.raises(HfHubHTTPError) as info:
        api.create_repo("nobody/results", repo_type="dataset", exist_ok=True)
    assert info.value.response.status_code == 404
    assert "nobody" in str(info.value)
    with pytest.raises(HfHubHTTPError) as info:
        HfApi(endpoint=minihub.url, token="hf_unknown").create_repo("team/x", repo_type="dataset")
    assert info.value.response.status_code == 401
    assert set(minihub.files("team/results", "dataset")) == {".gitattributes"}
    assert minihub._lfs == {}
