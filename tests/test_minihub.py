"""MiniHub served to the real ``huggingface_hub`` client and ``transformers`` (no mocks)."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder

from pytest_neuronsupport import zoo
from pytest_neuronsupport.minihub import MiniHub

_DTYPE_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8}


def _safetensors(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """A valid safetensors file: 8-byte little-endian header length, JSON header, zeros."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * _DTYPE_SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + bytes(offset)


def _config(**extra: object) -> bytes:
    return json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **extra}
    ).encode()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


def _populate(hub: MiniHub) -> dict[str, str]:
    """Eight text-generation transformers models plus two that filters must leave out."""
    shas = {}
    for i in range(8):
        files = {
            "config.json": _config(),
            "model.safetensors": _safetensors({"w": ("BF16", [4, i + 1]), "b": ("F32", [3])}),
        }
        shas[f"org/m{i}"] = hub.add_model(
            f"org/m{i}",
            files=files,
            pipeline_tag="text-generation",
            downloads=[50, 10, 80, 30, 70, 20, 60, 40][i],
            trending_score=[1, 8, 2, 7, 3, 6, 4, 5][i],
        )
    hub.add_model("org/classifier", files={"config.json": _config()}, pipeline_tag="fill-mask")
    hub.add_model(
        "org/pipe", files={"model_index.json": b"{}"}, library_name="diffusers", downloads=999
    )
    return shas


def test_list_models_pages_sorts_and_filters(minihub: MiniHub) -> None:
    minihub.page_size = 3
    _populate(minihub)
    api = HfApi(endpoint=minihub.url)

    by_downloads = api.list_models(
        filter="transformers", pipeline_tag="text-generation", sort="downloads"
    )
    assert [m.id for m in by_downloads] == [f"org/m{i}" for i in (2, 4, 6, 0, 7, 3, 5, 1)]
    listing = [path for method, path in minihub.requests if path.startswith("/api/models?")]
    assert len(listing) == 3  # 3 + 3 + 2 items, following Link: rel="next"
    assert "cursor=" not in listing[0] and all("cursor=" in path for path in listing[1:])

    minihub.requests.clear()
    top = list(
        api.list_models(
            filter="transformers", pipeline_tag="text-generation", sort="trending_score", limit=4
        )
    )
    assert [m.id for m in top] == ["org/m1", "org/m3", "org/m5", "org/m7"]
    assert len(minihub.requests) == 2  # the client stops once it has `limit` items

    assert [m.id for m in api.list_models(filter="diffusers")] == ["org/pipe"]
    assert [m.id for m in api.list_models(search="CLASS")] == ["org/classifier"]
    assert len(list(api.list_models(author="org"))) == 10
    assert list(api.list_models(author="other")) == []


def test_list_models_expand_fields(minihub: MiniHub) -> None:
    minihub.page_size = 3
    shas = _populate(minihub)
    quantized = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    custom = {
        "AutoConfig": "configuration_x.XConfig",
        "AutoModelForCausalLM": "modeling_x.XForCausalLM",
    }
    shas["org/special"] = minihub.add_model(
        "org/special",
        files={
            "config.json": _config(quantization_config=quantized, auto_map=custom),
            "model-00001-of-00002.safetensors": _safetensors({"a": ("BF16", [1000, 1000])}),
            "model-00002-of-00002.safetensors": _safetensors({"b": ("BF16", [10, 100])}),
            "tokenizer_config.json": json.dumps(
                {"eos_token": "</s>", "model_max_length": 9}
            ).encode(),
        },
        pipeline_tag="text-generation",
        downloads=1000,
        gated="manual",
    )
    api = HfApi(endpoint=minihub.url)
    expand = ["safetensors", "config", "tags", "transformersInfo", "gated", "sha", "downloads"]
    models = list(
        api.list_models(
            filter="transformers",
            pipeline_tag="text-generation",
            sort="downloads",
            limit=5,
            expand=expand,  # type: ignore[arg-type]
        )
    )
    assert [m.id for m in models] == ["org/special", "org/m2", "org/m4", "org/m6", "org/m0"]
    special, m2 = models[0], models[1]
    assert special.sha == shas["org/special"] and m2.sha == shas["org/m2"]
    assert special.safetensors is not None and special.safetensors.total == 1_001_000
    assert special.safetensors.parameters == {"BF16": 1_001_000}
    assert m2.safetensors is not None and m2.safetensors.parameters == {"BF16": 12, "F32": 3}
    assert special.config is not None and special.config["quantization_config"] == quantized
    assert special.config["tokenizer_config"] == {"eos_token": "</s>"}
    assert special.tags is not None and "custom_code" in special.tags
    assert m2.tags == ["transformers", "safetensors", "llama", "text-generation"]
    info = special.transformers_info
    assert info is not None and info.auto_model == "AutoModelForCausalLM"
    assert info.custom_class == "modeling_x.XForCausalLM"
    assert special.gated == "manual" and m2.gated is False
    assert special.downloads == 1000
    assert special.likes is None  # not expanded: only id + the expanded fields come back

    default = next(iter(api.list_models(search="m2")))
    assert default.likes == 0 and default.tags is not None and default.sha is None
    full = next(iter(api.list_models(search="m2", full=True, fetch_config=True)))
    assert full.sha == shas["org/m2"] and full.config == {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
    }
    assert full.siblings is not None
    assert sorted(s.rfilename for s in full.siblings) == ["config.json", "model.safetensors"]


def test_model_info_at_revisions(minihub: MiniHub) -> None:
    first = minihub.add_model(
        "org/tiny",
        files={"config.json": _config(), "weights/model.safetensors": b"x" * 64},
        safetensors_parameters=7,
        likes=3,
    )
    second = minihub.add_commit(
        "org/tiny", files={"README.md": b"# tiny\n"}, delete=["weights/model.safetensors"]
    )
    assert first != second and len(second) == 40
    api = HfApi(endpoint=minihub.url)

    old = api.model_info("org/tiny", revision=first, files_metadata=True)
    assert old.sha == first
    assert old.siblings is not None
    assert [s.rfilename for s in old.siblings] == ["config.json", "weights/model.safetensors"]
    lfs = old.siblings[1].lfs
    assert lfs is not None and lfs.size == 64 and len(lfs.sha256) == 64
    assert old.safetensors is not None and old.safetensors.total == 7
    assert api.model_info("org/tiny", revision=first[:7]).sha == first

    new = api.model_info("org/tiny")
    assert new.sha == second and new.likes == 3 and new.gated is False
    assert new.last_modified is not None and new.created_at is not None
    assert new.last_modified > new.created_at
    assert new.siblings is not None
    assert [s.rfilename for s in new.siblings] == ["README.md", "config.json"]
    only = api.model_info("org/tiny", expand=["sha"])
    assert only.sha == second and only.siblings is None


def test_tree_and_paths_info(minihub: MiniHub) -> None:
    minihub.page_size = 2
    files = {f"dir/sub/f{i}.txt": b"%d" % i for i in range(3)}
    sha = minihub.add_model("org/tree", files={"a.json": b"{}", **files})
    api = HfApi(endpoint=minihub.url)

    entries = list(api.list_repo_tree("org/tree", recursive=True))
    assert [e.path for e in entries] == ["a.json", "dir", "dir/sub", *sorted(files)]
    assert sum(1 for _, path in minihub.requests if "/tree/" in path) == 3  # 6 entries, pages of 2
    top = list(api.list_repo_tree("org/tree"))
    assert [(type(e), e.path) for e in top] == [(RepoFile, "a.json"), (RepoFolder, "dir")]
    sub = list(api.list_repo_tree("org/tree", "dir/sub", revision=sha, expand=True))
    assert [e.path for e in sub] == sorted(files)
    assert isinstance(sub[0], RepoFile) and sub[0].last_commit is not None
    assert sub[0].last_commit.oid == sha
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree("org/tree", "missing"))

    info = api.get_paths_info("org/tree", ["a.json", "dir", "nope"])
    assert [(type(e), e.path) for e in info] == [(RepoFile, "a.json"), (RepoFolder, "dir")]


def test_raw_http(minihub: MiniHub) -> None:
    minihub.page_size = 1
    data = bytes(range(256)) * 4
    sha = minihub.add_model("org/raw", files={"model.safetensors": data, "notes.txt": b"hi"})
    minihub.add_model("org/raw2", files={"notes.txt": b"hi"})

    status, headers, body = _get(f"{minihub.url}/api/models")
    assert status == 200 and len(json.loads(body)) == 1
    assert headers["Link"].startswith(f"<{minihub.url}/api/models?cursor=")
    assert headers["Link"].endswith('>; rel="next"')

    url = f"{minihub.url}/org/raw/resolve/main/model.safetensors"
    status, headers, body = _get(url, {"Range": "bytes=1000-"})
    assert (status, body) == (206, data[1000:])
    assert headers["Content-Range"] == "bytes 1000-1023/1024"
    assert headers["X-Repo-Commit"] == sha and headers["Accept-Ranges"] == "bytes"
    assert headers["X-Linked-Size"] == "1024" and headers["X-Linked-Etag"] == headers["ETag"]
    status, headers, body = _get(url, {"Range": "bytes=0-"})
    assert (status, headers["Content-Range"], body) == (206, "bytes 0-1023/1024", data)
    status, headers, body = _get(url, {"Range": "bytes=-4"})
    assert (status, body) == (206, data[-4:])
    status, headers, _ = _get(url, {"Range": "bytes=5000-"})
    assert (status, headers["Content-Range"]) == (416, "bytes */1024")
    status, headers, body = _get(url, {"Range": "bytes=0-1,5-6"})  # several ranges: ignored
    assert (status, body) == (200, data)

    status, headers, body = _get(f"{minihub.url}/org/raw/resolve/main/notes.txt")
    assert (status, body) == (200, b"hi")
    assert headers["ETag"] == '"32f95c0d1244a78b2be1bab8de17906fabb2c4a8"'  # git blob id
    assert "X-Linked-Etag" not in headers

    status, headers, body = _get(f"{minihub.url}/api/spaces")
    assert status == 404 and "error" in json.loads(body)
    status, headers, _ = _get(f"{minihub.url}/nobody/nothing/resolve/main/x")
    assert (status, headers["X-Error-Code"]) == (401, "RepoNotFound")
    status, headers, _ = _get(
        f"{minihub.url}/nobody/nothing/resolve/main/x", {"Authorization": "Bearer hf_x"}
    )
    assert (status, headers["X-Error-Code"]) == (404, "RepoNotFound")
    status, headers, _ = _get(f"{minihub.url}/api/models?expand=bogus")
    assert status == 400


def test_hf_hub_download_is_byte_identical(minihub: MiniHub, tmp_path: Path) -> None:
    weights = _safetensors({"w": ("F32", [32, 32])})
    folder = tmp_path / "src"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_bytes(_config())
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "sub" / "notes.txt").write_text("sub folder file\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    sha = minihub.add_model("org/dl", folder)
    cache = tmp_path / "cache"

    for name in ("config.json", "model.safetensors", "sub/notes.txt"):
        path = hf_hub_download("org/dl", name, endpoint=minihub.url, cache_dir=cache)
        assert Path(path).read_bytes() == (folder / name).read_bytes()
        assert f"/snapshots/{sha}/" in path
    blobs = {p.name for p in (cache / "models--org--dl" / "blobs").iterdir()}
    assert len(blobs) == 3 and any(len(name) == 64 for name in blobs)  # LFS: sha256 etag
    assert (cache / "models--org--dl" / "refs" / "main").read_text() == sha
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("org/dl", ".git/HEAD", endpoint=minihub.url, cache_dir=cache)


def test_snapshot_download_of_revisions(minihub: MiniHub, tmp_path: Path) -> None:
    first = minihub.add_model("org/snap", files={"config.json": _config(), "a.txt": b"one"})
    second = minihub.add_commit("org/snap", files={"a.txt": b"two", "b/c.txt": b"new"})
    cache = tmp_path / "cache"

    old = Path(snapshot_download("org/snap", revision=first, endpoint=minihub.url, cache_dir=cache))
    assert old.name == first
    assert sorted(p.relative_to(old).as_posix() for p in old.rglob("*") if p.is_file()) == [
        "a.txt",
        "config.json",
    ]
    assert (old / "a.txt").read_bytes() == b"one"

    new = Path(snapshot_download("org/snap", endpoint=minihub.url, cache_dir=cache))
    assert new.name == second
    assert (new / "a.txt").read_bytes() == b"two" and (new / "b" / "c.txt").read_bytes() == b"new"
    assert (old / "a.txt").read_bytes() == b"one"  # the old snapshot is untouched


def test_errors_map_to_client_exceptions(minihub: MiniHub, tmp_path: Path) -> None:
    sha = minihub.add_model("org/there", files={"config.json": _config()})
    minihub.add_model("org/gated", files={"config.json": _config()}, gated=True)
    api = HfApi(endpoint=minihub.url)
    cache = tmp_path / "cache"

    with pytest.raises(RepositoryNotFoundError):
        api.model_info("org/missing")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("org/missing", "config.json", endpoint=minihub.url, cache_dir=cache)
    with pytest.raises(RevisionNotFoundError):
        api.model_info("org/there", revision="f" * 40)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(
            "org/there", "config.json", revision="dev", endpoint=minihub.url, cache_dir=cache
        )
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("org/there", "nope.bin", endpoint=minihub.url, cache_dir=cache)
    assert (cache / "models--org--there" / ".no_exist" / sha / "nope.bin").exists()

    assert api.model_info("org/gated").gated == "auto"  # metadata stays public
    with pytest.raises(GatedRepoError, match="restricted"):
        hf_hub_download(
            "org/gated", "config.json", endpoint=minihub.url, cache_dir=cache, token=False
        )
    path = hf_hub_download(
        "org/gated", "config.json", endpoint=minihub.url, cache_dir=cache, token="hf_anything"
    )
    assert Path(path).read_bytes() == _config()

    minihub.remove_model("org/there")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("org/there")


def _download_gets(hub: MiniHub, name: str, cache: Path) -> tuple[bytes, list[str | None]]:
    """Download *name* of org/flaky; return its bytes and the Range header of each GET."""
    hub.requests.clear()
    hub.request_headers.clear()
    path = hf_hub_download("org/flaky", name, endpoint=hub.url, cache_dir=cache)
    gets = [
        h.get("range")
        for (m, _), h in zip(hub.requests, hub.request_headers, strict=True)
        if m == "GET"
    ]
    return Path(path).read_bytes(), gets


def test_interrupted_download_recovers_in_one_call(minihub: MiniHub, tmp_path: Path) -> None:
    data = random.Random(0).randbytes(6000)
    minihub.add_model("org/flaky", files={"weights.bin": data, "vocab.txt": data[:4000]})
    minihub.interrupt("org/flaky", "weights.bin", after_bytes=100)
    minihub.interrupt("org/flaky", "vocab.txt", after_bytes=100)
    cache = tmp_path / "cache"

    # http_get catches the truncated body (httpx2.RemoteProtocolError), sleeps 1 s and tries
    # again within the same call. It reads the body with iter_bytes(chunk_size=10 MiB), so the
    # 100 bytes never reached the file: the retry asks for the whole file again, without Range.
    for name, content in (("weights.bin", data), ("vocab.txt", data[:4000])):
        assert _download_gets(minihub, name, cache) == (content, [None, None])
    assert not list(cache.rglob("*.incomplete"))


def test_interrupted_large_download_resumes_with_range(minihub: MiniHub, tmp_path: Path) -> None:
    chunk = constants.DOWNLOAD_CHUNK_SIZE  # 10 MiB: what the client writes at a time
    data = random.Random(1).randbytes(chunk + chunk // 4)
    minihub.add_model("org/flaky", files={"model.safetensors": data})
    minihub.interrupt("org/flaky", "model.safetensors", after_bytes=chunk + 1000)
    cache = tmp_path / "cache"

    # One full chunk reached the file before the cut: the retry resumes after it (206).
    assert _download_gets(minihub, "model.safetensors", cache) == (data, [None, f"bytes={chunk}-"])
    assert not list(cache.rglob("*.incomplete"))


def test_fixture_through_pytester(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as CI exports it
    offline_before = constants.HF_HUB_OFFLINE
    pytester.makepyfile(
        """
        import os
        from pathlib import Path

        from huggingface_hub import HfApi, constants, hf_hub_download

        def test_hub(minihub, tmp_path):
            assert os.environ["HF_ENDPOINT"] == minihub.url
            assert "HF_HUB_OFFLINE" not in os.environ
            assert os.environ["HF_HUB_DISABLE_TELEMETRY"] == "1"
            assert Path(os.environ["HF_HUB_CACHE"]).parent == Path(os.environ["HF_HOME"])
            assert constants.HF_HUB_OFFLINE is False
            sha = minihub.add_model("me/model", files={"f.txt": b"x"})
            assert HfApi(endpoint=minihub.url).model_info("me/model").sha == sha
            path = hf_hub_download("me/model", "f.txt", endpoint=minihub.url)
            assert path.startswith(os.environ["HF_HUB_CACHE"])

        def test_hub_bug_fails_at_teardown(minihub, monkeypatch):
            def boom(*args):
                raise RuntimeError("boom")

            minihub.add_model("me/model", files={"f.txt": b"x"})
            monkeypatch.setattr(minihub, "_take_interrupt", boom)
            try:
                hf_hub_download("me/model", "f.txt", endpoint=minihub.url, etag_timeout=1)
            except Exception:
                pass
        """
    )
    result = pytester.runpytest("-p", "pytest_neuronsupport.minihub", "-W", "error")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*minihub failed to handle requests:*", "*RuntimeError: boom*"])
    assert constants.HF_HUB_OFFLINE == offline_before


@pytest.mark.slow
def test_transformers_from_pretrained_in_a_subprocess(
    minihub: MiniHub, zoo_cache: Path, tmp_path: Path
) -> None:
    folder = zoo.ensure_built("llama", zoo_cache)
    sha = minihub.add_model("zoo/tiny-llama", folder, pipeline_tag="text-generation")
    minihub.add_commit("zoo/tiny-llama", files={"README.md": b"moved on\n"})
    code = textwrap.dedent(
        """
        import json, os, sys
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        repo, sha = sys.argv[1], sys.argv[2]
        config = AutoConfig.from_pretrained(repo, revision=sha)
        tokenizer = AutoTokenizer.from_pretrained(repo, revision=sha)
        model = AutoModelForCausalLM.from_pretrained(repo, revision=sha)
        print(json.dumps({
            "model_type": config.model_type,
            "ids": tokenizer("hello world")["input_ids"],
            "parameters": model.num_parameters(),
            "offline": os.environ.get("HF_HUB_OFFLINE"),
        }))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "zoo/tiny-llama", sha],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["model_type"] == "llama" and out["ids"] and out["offline"] is None
    info = HfApi(endpoint=minihub.url).model_info("zoo/tiny-llama", revision=sha)
    assert info.safetensors is not None and info.safetensors.total == out["parameters"]
    fetched = {path.rsplit("/", 1)[-1] for method, path in minihub.requests if method == "GET"}
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= fetched
    assert not any(sha not in path for _, path in minihub.requests if "/resolve/" in path)
    snapshot = Path(os.environ["HF_HUB_CACHE"]) / "models--zoo--tiny-llama" / "snapshots" / sha
    assert (snapshot / "model.safetensors").read_bytes() == (
        folder / "model.safetensors"
    ).read_bytes()
