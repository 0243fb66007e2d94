"""The real Hub path under test: ``neuronsupport select`` and sweeps of Hub ids, through the
real ``huggingface_hub`` and ``transformers`` clients, against the loopback mini-hub
(:mod:`pytest_neuronsupport.minihub`) that ``HF_ENDPOINT`` names.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import zoo
from pytest_neuronsupport.minihub import MiniHub
from pytest_neuronsupport.options import DEFAULT_JUDGE
from tests.judges_for_tests import judge_double
from tests.sweeping import SweepRunner

EXE = Path(sys.executable).parent / "neuronsupport"


def select(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``neuronsupport select`` as a user runs it (the environment names the endpoint)."""
    return subprocess.run(
        [str(EXE), "select", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def list_entries(path: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = tomllib.loads(path.read_text(encoding="utf-8"))["model"]
    return entries


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_select_ranks_excludes_and_pins_from_the_hubs_listing(
    minihub: MiniHub, tmp_path: Path
) -> None:
    hub = minihub
    hub.page_size = 2  # every ranking spans several pages
    small = 10**6
    shas = {
        "org/chat-a": hub.add_model(
            "org/chat-a",
            files={"config.json": b"{}"},
            pipeline_tag="text-generation",
            downloads=1000,
            trending_score=5,
            safetensors_parameters=small,
        ),
        "org/chat-b": hub.add_model(
            "org/chat-b",
            files={"config.json": b"{}"},
            pipeline_tag="image-text-to-text",
            downloads=10,
            trending_score=100,
            safetensors_parameters=small,
        ),
        "org/chat-c": hub.add_model(
            "org/chat-c",
            files={"config.json": b"{}"},
            pipeline_tag="text-generation",
            downloads=500,
            trending_score=50,
            safetensors_parameters=small,
        ),
        "org/quant": hub.add_model(
            "org/quant",
            pipeline_tag="text-generation",
            downloads=300,
            files={
                "config.json": json.dumps(
                    {"quantization_config": {"quant_method": "gptq"}}
                ).encode()
            },
        ),
        "org/remote": hub.add_model(
            "org/remote",
            files={"config.json": b"{}"},
            pipeline_tag="text-generation",
            downloads=200,
            tags=["custom_code"],
        ),
        "org/huge": hub.add_model(
            "org/huge",
            files={"config.json": b"{}"},
            pipeline_tag="text-generation",
            downloads=100,
            safetensors_parameters=10**12,
        ),
        "org/bert": hub.add_model(
            "org/bert",
            files={"config.json": b"{}"},
            pipeline_tag="fill-mask",
            downloads=800,
        ),
        "org/gated": hub.add_model(
            "org/gated",
            files={"config.json": b"{}"},
            pipeline_tag="fill-mask",
            gated="manual",
        ),
    }
    hub.add_model("org/speech", files={"config.json": b"{}"}, pipeline_tag="audio-classification")
    hub.add_model(
        "org/diffusion",
        files={"config.json": b"{}"},
        pipeline_tag="text-generation",
        library_name="diffusers",
        downloads=10**6,
    )
    done = select(
        "--out",
        "models.toml",
        "--top",
        "2",
        "--depth",
        "10",
        "--device",
        "cpu",
        "--core-memory",
        "24",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"models of {hub.url}: 2 selected, 4 excluded" in done.stdout
    text = (tmp_path / "models.toml").read_text(encoding="utf-8")
    assert f"# endpoint: {hub.url}\n" in text and "--top 2 --depth 10" in text
    entries = list_entries(tmp_path / "models.toml")
    got = [(e["id"], e.get("selection_rank"), e.get("exclusion")) for e in entries]
    assert got == [
        ("org/chat-a", 1, None),  # position 1 (downloads), 1000 downloads
        ("org/chat-c", 2, None),  # position 1 (trending), 500 downloads
        ("org/bert", None, None),  # position 1, not a task of the selection
        ("org/chat-b", None, None),  # position 1, 10 downloads: past --top 2
        ("org/gated", None, "gated"),
        ("org/quant", None, "quantized"),
        ("org/huge", None, "too-large"),
        ("org/remote", None, "trust-remote-code"),
    ]
    assert all(e["revision"] == shas[e["id"]] for e in entries)
    assert {e["id"]: e["task"] for e in entries}["org/chat-b"] == "image-text-to-text"
    assert "gptq" in entries[5]["notes"] and "16 cores of 24 GB" in entries[6]["notes"]
    # the listing was paged (page_size 2), with the client's own parameters
    listings = [p for m, p in hub.requests if p.startswith("/api/models?")]
    assert any("cursor" in p or "page" in p for p in listings[1:]), listings[:3]
    assert all("filter=transformers" in p for p in listings if "sort=" in p)


def test_an_unreachable_hub_is_one_clear_error_naming_it(
    minihub: MiniHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("HF_ENDPOINT", closed)
    done = select("--out", "models.toml", cwd=tmp_path)
    assert done.returncode == 2
    assert f"the Hub at {closed} is unreachable: ConnectError" in done.stderr
    assert not (tmp_path / "models.toml").exists()


def serve_zoo(hub: MiniHub, cache: Path, name: str, repo_id: str, task: str, **kw: Any) -> str:
    return hub.add_model(repo_id, zoo.ensure_built(name, cache), pipeline_tag=task, **kw)


@pytest.mark.slow
def test_a_sweep_of_a_selection_downloads_and_records_the_pinned_revisions(
    sweep: SweepRunner, minihub: MiniHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the sweep fixture set it
    hub, cache = minihub, sweep.cache
    llama = serve_zoo(hub, cache, "llama", "org/llama", "text-generation", downloads=10)
    bert = serve_zoo(hub, cache, "bert-mlm", "org/bert", "fill-mask", downloads=5)
    quantized = {"quantization_config": {"quant_method": "awq"}}
    hub.add_model(
        "org/quant",
        files={"config.json": json.dumps(quantized).encode()},
        pipeline_tag="text-generation",
        downloads=1,
    )
    # the first download of the weights is cut mid-file: the client's retry must mend it
    hub.interrupt("org/llama", "model.safetensors", after_bytes=1000)
    listed = select("--out", "models.toml", "--top", "5", cwd=sweep.path)
    assert listed.returncode == 0, listed.stderr
    path = sweep.path / "models.toml"
    bounded = ["--neuron-hub-cache-max", "0.0005"]  # 0.5 MB: every checkpoint done goes
    args = ["--neuron-limit", "2", "--neuron-judge", "none", *bounded]
    done = sweep.run(*list_entries(path), args=args)
    # --neuron-limit 2 runs two; the excluded entry costs nothing and is recorded all the same
    done.result.assert_outcomes(passed=2, skipped=1)
    done.result.stdout.fnmatch_lines(
        [
            "hub cache: evicted 2 checkpoints, * --neuron-hub-cache-max 0.0005 GB: "
            "org/llama, org/bert"
        ]
    )
    from huggingface_hub import constants, scan_cache_dir

    # the sweep's cache, the minihub fixture's (scan_cache_dir's default is the one at import)
    kept = {r.repo_id for r in scan_cache_dir(constants.HF_HUB_CACHE).repos}
    assert not kept & {"org/llama", "org/bert"}
    llama_row, bert_row = done.row("org/llama"), done.row("org/bert")
    assert (llama_row["result"], llama_row["revision"], llama_row["selection_rank"]) == (
        "PASS",
        llama,
        1,
    )
    assert (bert_row["result"], bert_row["revision"]) == ("PASS", bert)
    assert f"'revision': '{llama}'" in llama_row["run_py"]
    quant = done.row("org/quant")
    assert (quant["result"], quant["exclusion"]) == ("EXCLUDED", "quantized")
    assert "awq" in quant["notes"]
    weights = [p for m, p in hub.requests if m == "GET" and p.endswith("/model.safetensors")]
    assert len([p for p in weights if "org/llama" in p]) >= 2  # cut once, fetched again
    # nothing was fetched of the excluded repo but its listing
    assert not [p for m, p in hub.requests if "/org/quant/resolve/" in p]

    # a new selection: bert leaves it; its row keeps its result, without a rank
    entries = [e for e in list_entries(path) if e["id"] != "org/bert"]
    again = sweep.run(*entries)
    assert again.row("org/bert")["result"] == "PASS"
    assert again.row("org/bert")["selection_rank"] is None
    assert again.row("org/llama")["selection_rank"] == 1


@pytest.mark.slow
def test_hub_failures_are_fail_load_with_the_reason(
    sweep: SweepRunner, minihub: MiniHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub = minihub
    serve_zoo(hub, sweep.cache, "gpt2", "org/gpt2", "text-generation")
    serve_zoo(hub, sweep.cache, "gpt2", "org/gated", "text-generation", gated="manual")
    done = sweep.run(
        "org/missing",
        {"id": "org/gpt2", "revision": "0" * 40},
        "org/gated",
        args=["--neuron-judge", "none"],
    )
    rows = {m: (r["result"], r["error"]) for m, r in done.rows.items()}
    assert (
        rows["org/missing"][0] == "FAIL(load)"
        and "RepositoryNotFoundError" in rows["org/missing"][1]
    )
    assert rows["org/gpt2"][0] == "FAIL(load)" and "RevisionNotFoundError" in rows["org/gpt2"][1]
    assert rows["org/gated"][0] == "FAIL(load)" and "GatedRepoError" in rows["org/gated"][1]

    # the Hub failing is the environment's fault, not the model's: no row, the test an error
    hub.fail_with(503)
    failing = sweep.run("org/gpt2", args=["--neuron-rerun"])
    assert failing.result.ret == 1
    failing.result.stdout.fnmatch_lines(
        [
            f"org/gpt2: not tested, no row recorded: the Hub at {hub.url} answered 503 for *",
            "*1 error*",
        ]
    )
    hub.heal()
    monkeypatch.setenv("HF_ENDPOINT", closed := f"http://127.0.0.1:{free_port()}")
    down = sweep.run("org/gpt2", args=["--neuron-rerun"])
    assert down.result.ret == 1 and down.outcome("org/gpt2") == "failed"  # junit: a failure
    down.result.stdout.fnmatch_lines(
        [f"org/gpt2: not tested, no row recorded: the Hub at {closed} is unreachable: *"]
    )
    for after in (failing, down):  # the row recorded before stays as it was
        kept = after.row("org/gpt2")
        assert kept["tested_at"] == done.row("org/gpt2")["tested_at"]
        assert "RevisionNotFoundError" in kept["error"]


@pytest.mark.slow
def test_the_default_judge_comes_from_the_hub_pinned(
    sweep: SweepRunner, minihub: MiniHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    repo_id, revision = DEFAULT_JUDGE.split("@")
    judge = judge_double(zoo.ensure_built("gpt2", sweep.cache), sweep.path, "Yes")
    assert minihub.add_model(repo_id, judge, pipeline_tag="text-generation", sha=revision)
    minihub.add_commit(repo_id, files={"README.md": b"a later commit the sweep must not use"})
    # one core, its CPU run failing (a test double): run again with the judge, which decides
    done = sweep.run("zoo:llama", backend="backends_for_tests:cpu_run_fails_backend_for_tests")
    row = done.row("zoo:llama")
    decision = json.loads(row["check"])["judge"]
    assert (row["result"], row["english"]) == ("PASS", "Y")
    assert (decision["model"], decision["revision"]) == (repo_id, revision)
    judged = [p for m, p in minihub.requests if f"/{repo_id}/resolve/" in p]
    assert judged and all(f"/resolve/{revision}/" in p for p in judged)
