"""Prefetch (:mod:`pytest_neuronsupport.pipeline.prefetch`): a Hub model's files in the cache
before its lease, and the next models' downloaded while others run, within a budget; against
the loopback mini-hub (in-process: the client's endpoint and cache are passed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_neuronsupport import zoo
from pytest_neuronsupport.minihub import MiniHub
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.pipeline import prefetch
from pytest_neuronsupport.pipeline.prefetch import Prefetcher, chosen, fetch, files
from tests.sweeping import SweepRunner

CONFIG = json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}).encode()


def cached(cache: Path, repo_id: str) -> set[str]:
    """The files of ``repo_id`` in the cache's snapshots."""
    folder = cache / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return {str(p.relative_to(s)) for s in folder.iterdir() for p in s.rglob("*") if p.is_file()}


def gets(hub: MiniHub, repo_id: str) -> list[str]:
    """The files of ``repo_id`` the hub served (GET)."""
    marker = f"/{repo_id}/resolve/"
    return [
        p.split(marker, 1)[1].split("/", 1)[1]
        for m, p in hub.requests
        if m == "GET" and marker in p
    ]


def test_the_weights_are_those_from_pretrained_picks_in_its_order() -> None:
    sizes = {
        "config.json": 1,
        "tokenizer.json": 2,
        "chat_template.jinja": 3,
        "additional_chat_templates/tool.jinja": 4,
        "model.safetensors": 100,
        "pytorch_model.bin": 100,
        "consolidated.safetensors": 100,
        "onnx/model.onnx": 100,
        "onnx/config.json": 1,
        "flax_model.msgpack": 100,
    }
    assert set(chosen(sizes, lambda index: ())) == {
        "config.json",
        "tokenizer.json",
        "chat_template.jinja",
        "additional_chat_templates/tool.jinja",
        "model.safetensors",
    }
    sharded = {"config.json": 1, "model.safetensors.index.json": 2, "a.safetensors": 5}
    sharded |= {"b.safetensors": 5, "pytorch_model.bin": 9, "unused.safetensors": 7}
    picked = chosen(sharded, lambda index: {"a.safetensors", "b.safetensors"})
    assert picked == {
        "config.json": 1,
        "model.safetensors.index.json": 2,
        "a.safetensors": 5,
        "b.safetensors": 5,
    }
    assert set(chosen({"config.json": 1, "pytorch_model.bin": 9}, lambda i: ())) == {
        "config.json",
        "pytorch_model.bin",
    }
    assert set(chosen({"config.json": 1}, lambda i: ())) == {"config.json"}  # the run says


def test_a_fetch_downloads_the_files_from_pretrained_reads(
    minihub: MiniHub, tmp_path: Path
) -> None:
    index = {"weight_map": {"w1": "model-1.safetensors", "w2": "model-2.safetensors"}}
    sha = minihub.add_model(
        "org/sharded",
        files={
            "config.json": CONFIG,
            "tokenizer.json": b"{}",
            "README.md": b"# card",
            "model.safetensors.index.json": json.dumps(index).encode(),
            "model-1.safetensors": b"1" * 100,
            "model-2.safetensors": b"2" * 100,
            "pytorch_model.bin": b"b" * 300,
            "onnx/model.onnx": b"o" * 300,
        },
    )
    found = files("org/sharded", None, tmp_path, minihub.url)
    assert found.commit == sha
    index_bytes = found.sizes["model.safetensors.index.json"]  # read for its shards' names
    assert found.missing(tmp_path) == sum(found.sizes.values()) - index_bytes
    folder = fetch(found, tmp_path, minihub.url)
    assert folder.name == sha
    assert cached(tmp_path, "org/sharded") == {
        "config.json",
        "tokenizer.json",
        "README.md",
        "model.safetensors.index.json",
        "model-1.safetensors",
        "model-2.safetensors",
    }
    assert found.missing(tmp_path) == 0
    assert not {"pytorch_model.bin", "onnx/model.onnx"} & set(gets(minihub, "org/sharded"))
    minihub.requests.clear()
    fetch(found, tmp_path, minihub.url)  # all there: nothing downloaded again
    assert gets(minihub, "org/sharded") == []


def test_what_is_fetched_ahead_stays_within_its_budget_until_models_end(
    minihub: MiniHub, tmp_path: Path
) -> None:
    for name in ("a", "b", "c"):
        minihub.add_model(
            f"org/{name}", files={"config.json": CONFIG, "model.safetensors": b"w" * 1000}
        )
    size = files("org/a", None, tmp_path, minihub.url).missing(tmp_path)
    ahead = Prefetcher(budget=2 * size + size // 2, cache_dir=tmp_path, endpoint=minihub.url)
    ahead.start([("org/a", None), ("org/b", None), ("org/c", None)])
    assert ahead.settled(60)  # waiting for room: two fit, the third does not
    assert ahead.fetched == ["org/a", "org/b"]
    assert not (tmp_path / "models--org--c" / "snapshots").exists() or not cached(tmp_path, "org/c")
    ahead.done("org/a")  # its test ended: room for the next
    assert ahead.settled(60)
    assert ahead.fetched == ["org/a", "org/b", "org/c"]
    assert "model.safetensors" in cached(tmp_path, "org/c")
    assert ahead.held == {"org/b": size, "org/c": size}


def test_models_done_or_too_large_are_not_fetched_ahead(minihub: MiniHub, tmp_path: Path) -> None:
    minihub.add_model("org/big", files={"config.json": CONFIG, "model.safetensors": b"w" * 5000})
    minihub.add_model("org/done", files={"config.json": CONFIG, "model.safetensors": b"w" * 10})
    minihub.add_model("org/next", files={"config.json": CONFIG, "model.safetensors": b"w" * 10})
    ahead = Prefetcher(budget=1000, cache_dir=tmp_path, endpoint=minihub.url)
    ahead.done("org/done")
    ahead.start([("org/big", None), ("org/done", None), ("org/missing", None), ("org/next", None)])
    assert ahead.settled(60)
    assert ahead.fetched == ["org/next"]  # too large: fetched before its own lease


def test_upcoming_is_hub_entries_to_run_in_start_order() -> None:
    def spec(model_id: str, **kw: object) -> ModelSpec:
        return ModelSpec(id=model_id, source=Path("m.toml"), line=1, **kw)  # type: ignore[arg-type]

    specs = [
        spec("org/b"),
        spec("zoo:llama"),
        spec("org/local", path="/models/x"),
        spec("org/excluded", exclusion="quantized"),
        spec("org/recorded"),
        spec("org/a"),
    ]
    recorded: dict[str, object] = {"org/recorded": {}}
    recorded_row = recorded.get
    assert [s.id for s in prefetch.upcoming(specs, recorded_row, False, None)] == ["org/b", "org/a"]
    assert [s.id for s in prefetch.upcoming(specs, recorded_row, True, 2)] == [
        "org/b",
        "org/recorded",
    ]


def test_a_download_failure_is_the_models_load_or_the_hubs_fault(
    minihub: MiniHub, tmp_path: Path
) -> None:
    url = minihub.url
    missing = prefetch.before_lease("org/missing", None, True, tmp_path, url)
    assert missing.fault is None and missing.download_s is not None
    assert missing.error is not None and "RepositoryNotFoundError" in missing.error
    minihub.add_model("org/ok", files={"config.json": CONFIG, "model.safetensors": b"w"})
    minihub.fail_with(503)
    failing = prefetch.before_lease("org/ok", None, True, tmp_path, url)
    assert failing.error is None and failing.fault is not None and "503" in failing.fault
    minihub.heal()
    ok = prefetch.before_lease("org/ok", None, True, tmp_path, url)
    assert (ok.error, ok.fault) == (None, None) and ok.columns == {"download_s": ok.download_s}
    assert prefetch.before_lease("/a/folder", None, False, tmp_path) == prefetch.Fetched()


@pytest.mark.slow
def test_a_sweep_fetches_the_next_model_while_one_runs_and_its_runs_ask_the_hub_nothing(
    sweep: SweepRunner, minihub: MiniHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the sweep fixture set it
    gpt2 = zoo.ensure_built("gpt2", sweep.cache)
    for repo_id in ("org/first", "org/second"):
        minihub.add_model(repo_id, gpt2, pipeline_tag="text-generation")
    without = {p.name: p.read_bytes() for p in gpt2.iterdir() if p.suffix != ".safetensors"}
    minihub.add_model("org/noweights", files=without, pipeline_tag="text-generation")
    second = Path(constants.HF_HUB_CACHE) / "models--org--second" / "snapshots" / "*"
    saw = sweep.path / "saw.txt"
    # the first model's run waits, holding its core, until the second's weights are cached
    monkeypatch.setenv("NEURONSUPPORT_TEST_WAIT_FOR", str(second / "model.safetensors"))
    monkeypatch.setenv("NEURONSUPPORT_TEST_SAW", str(saw))
    done = sweep.run(
        "org/first",
        "org/second",
        "org/noweights",
        {"id": "org/gone", "runner": "run_dense"},
        backend="backends_for_tests:waits_for_prefetch_backend_for_tests",
        args=["--neuron-judge", "none"],
    )
    first, second_row = done.row("org/first"), done.row("org/second")
    assert (first["result"], second_row["result"]) == ("PASS", "PASS"), first["error"]
    assert saw.read_text().split() and set(saw.read_text().split()) == {"present"}
    assert first["download_s"] is not None and second_row["download_s"] is not None
    assert "'checkpoint': 'org/first'" in first["run_py"]  # the Hub id, as before
    # no weights: the run meets it, offline, as from_pretrained says it
    noweights = done.row("org/noweights")
    assert noweights["result"] == "FAIL(load)" and noweights["run_py"]
    gone = done.row("org/gone")  # its config unread (the runner is given): its download fails
    assert gone["result"] == "FAIL(load)" and "RepositoryNotFoundError" in gone["error"]
    # the runs (transformers' requests) asked the Hub nothing: the sweep fetched before them
    agents = [h.get("user-agent", "") for h in minihub.request_headers]
    assert agents and not [a for a in agents if "transformers/" in a or "file_type/" in a]
