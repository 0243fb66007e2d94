"""``neuronsupport push``: the results into a Hub dataset repo and the page into a static
Space, against the loopback Hub through the real ``huggingface_hub`` client; concurrent pushes;
reading the repo back with the commands and with pandas' ``hf://`` reader."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import threading
from contextlib import redirect_stdout
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytest_neuronsupport import cli
from pytest_neuronsupport.dataset.stores import local_copy
from pytest_neuronsupport.dataset.stores.hub import HubDataset, HubError
from pytest_neuronsupport.minihub import MiniHub
from tests.results_for_tests import result_row, write_results
from tests.sweeping import SweepRunner

pytest_plugins = ["pytest_neuronsupport.minihub"]

REPO = "team/support"
PAIR = "data/inductor-2.13.0/transformers-5.24.0.parquet"


@pytest.fixture
def hub(minihub: MiniHub, monkeypatch: pytest.MonkeyPatch) -> MiniHub:
    minihub.add_user("alice", "hf_alice", orgs=("team",))
    minihub.add_user("reader", "hf_reader", write=False, orgs=("team",))
    monkeypatch.setenv("HF_TOKEN", "hf_alice")
    return minihub


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


def _repo_rows(hub: MiniHub, path: str = PAIR) -> list[dict[str, object]]:
    data = hub.files(REPO, "dataset")[path]
    rows: list[dict[str, object]] = pq.read_table(pa.BufferReader(data)).to_pylist()
    return rows


def test_push_merges_and_skips_nothing_new(hub: MiniHub, tmp_path: Path) -> None:
    first = tmp_path / "first"
    write_results(first, [result_row("org/a"), result_row("org/b", "FAIL(gen)")])
    (first / "runs").mkdir(exist_ok=True)
    (first / "runs" / "x.txt").write_text("not pushed")
    code, out = _run("push", "--repo", REPO, "--results", str(first))
    assert code == 0, out
    assert "2 new, 0 replaced" in out
    files = hub.files(REPO, "dataset")
    assert set(files) == {".gitattributes", "README.md", PAIR}
    assert b"config_name: all" in files["README.md"]
    title = hub.commits(REPO, "dataset")[-1][1]
    assert "inductor-2.13.0/transformers-5.24.0 (+2 ~0)" in title

    commits = len(hub.commits(REPO, "dataset"))
    code, out = _run("push", "--repo", REPO, "--results", str(first))
    assert code == 0 and "nothing new to push" in out
    assert len(hub.commits(REPO, "dataset")) == commits

    # another machine's results: a newer row of org/b, an older one of org/a, a new model
    second = tmp_path / "second"
    write_results(
        second,
        [
            result_row("org/a", "FAIL(load)", minutes=-5),
            result_row("org/b", minutes=5),
            result_row("org/c"),
        ],
    )
    hub.requests.clear()
    code, out = _run("push", "--repo", REPO, "--results", str(second))
    assert code == 0, out
    assert "1 new, 1 replaced" in out
    rows = {r["model_id"]: r["result"] for r in _repo_rows(hub)}
    assert rows == {"org/a": "PASS", "org/b": "PASS", "org/c": "PASS"}
    lfs = [p for method, p in hub.requests if method == "PUT" and p.startswith("/__lfs/")]
    assert len(lfs) == 1  # the pair file; the card is a regular file


def test_concurrent_pushes_lose_nothing(hub: MiniHub, tmp_path: Path) -> None:
    folders = []
    for shard in range(4):
        folder = tmp_path / f"shard{shard}"
        write_results(folder, [result_row(f"org/m{shard}-{i}") for i in range(3)])
        folders.append(folder)
    HubDataset(f"hf://datasets/{REPO}").create()
    barrier = threading.Barrier(len(folders))
    summaries = []
    errors: list[BaseException] = []

    def push(folder: Path) -> None:
        dataset = HubDataset(f"hf://datasets/{REPO}")
        barrier.wait()
        try:
            summaries.append(dataset.push(folder))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=push, args=(f,)) for f in folders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    ids = [str(r["model_id"]) for r in _repo_rows(hub)]
    assert sorted(ids) == sorted(f"org/m{s}-{i}" for s in range(4) for i in range(3))
    assert sum(s.retried for s in summaries) >= 1  # they did collide
    assert len(hub.commits(REPO, "dataset")) == 1 + len(folders)


def test_refusals_name_the_repo_and_write_nothing(
    hub: MiniHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_results(tmp_path / "r", [result_row("org/a")])
    hub.add_repo(REPO, "dataset")
    monkeypatch.setenv("HF_TOKEN", "hf_reader")
    assert cli.main(["push", "--repo", REPO, "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert f"hf://datasets/{REPO}" in err and "may not write" in err
    assert set(hub.files(REPO, "dataset")) == {".gitattributes"}
    assert hub._lfs == {}

    monkeypatch.setenv("HF_TOKEN", "hf_alice")
    assert cli.main(["push", "--repo", "ghost/support", "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "hf://datasets/ghost/support" in err and "ghost not found" in err

    hub.add_repo("team/page", "space", sdk="gradio")
    assert cli.main(["push", "--space", "team/page", "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "hf://spaces/team/page is a gradio Space" in err
    assert set(hub.files("team/page", "space")) == {".gitattributes"}

    with pytest.raises(ValueError, match="dataset repo"):
        HubDataset("hf://team/support")
    with pytest.raises(HubError, match="nothing to push"):
        HubDataset(f"hf://datasets/{REPO}").push(tmp_path / "empty")


def test_space_and_reading_back(hub: MiniHub, tmp_path: Path) -> None:
    write_results(tmp_path / "r", [result_row("org/a"), result_row("org/b", "FAIL(gen)")])
    code, out = _run(
        "push", "--repo", REPO, "--space", "team/page", "--results", str(tmp_path / "r")
    )
    assert code == 0, out
    space = hub.files("team/page", "space")
    assert b"sdk: static" in space["README.md"]
    assert b"org/b" in space["index.html"]
    uri = f"hf://datasets/{REPO}"
    code, out = _run("lookup", "org/b", "--results", uri)
    assert code == 0 and "FAIL(gen)" in out
    code, out = _run("failures", "--results", uri)
    assert code == 0 and "org/b" in out
    code, out = _run("baseline", "update", "--out", str(tmp_path / "b.toml"), "--results", uri)
    assert code == 0, out
    hub.add_commit(
        REPO, files={"ci/b.toml": (tmp_path / "b.toml").read_bytes()}, repo_type="dataset"
    )
    code, out = _run("check", "--baseline", f"{uri}/ci/b.toml", "--results", uri)
    assert code == 0, out
    code, out = _run("check", "--baseline", f"{uri}/ci/none.toml", "--results", uri)
    assert code == 2

    # the card's own query, in a fresh interpreter that finds the hub through HF_ENDPOINT
    query = (
        "import pandas as pd\n"
        f"df = pd.read_parquet('hf://datasets/{REPO}/data')\n"
        "print(sorted(df[df.model_id == 'org/b'].result))\n"
    )
    env = {**os.environ, "HF_ENDPOINT": hub.url}
    done = subprocess.run(
        [sys.executable, "-c", query], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['FAIL(gen)']"


@pytest.mark.slow
def test_a_sweep_into_the_hub(
    hub: MiniHub, sweep: SweepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the zoo loads from the cache anyway
    uri = "hf://datasets/team/sweep"
    done = sweep.run("zoo:llama", args=["--neuron-results", uri])
    assert done.result.ret == 0, done.result.stdout.str()
    rows = _repo_rows_of(hub, "team/sweep")
    assert [(r["model_id"], r["result"]) for r in rows] == [("zoo:llama", "PASS")]
    assert "README.md" in hub.files("team/sweep", "dataset")
    assert not any(p.startswith(("runs/", "journal/")) for p in hub.files("team/sweep", "dataset"))
    commits = len(hub.commits("team/sweep", "dataset"))

    # another machine: no local copy; the pull at the start makes the model unchanged
    shutil.rmtree(sweep.cache / "shared")
    assert (
        cli.main(["baseline", "update", "--out", str(sweep.cache / "b.toml"), "--results", uri])
        == 0
    )
    hub.add_commit(
        "team/sweep", files={"b.toml": (sweep.cache / "b.toml").read_bytes()}, repo_type="dataset"
    )
    commits = len(hub.commits("team/sweep", "dataset"))
    baseline = f"{uri}/b.toml"
    again = sweep.run("zoo:llama", args=["--neuron-results", uri, "--neuron-baseline", baseline])
    assert again.result.ret == 0, again.result.stdout.str()
    again.result.stdout.fnmatch_lines(
        [f"*held against the baseline {baseline}*", "*unchanged since *(PASS)*"]
    )
    assert len(hub.commits("team/sweep", "dataset")) == commits  # nothing new: no commit


def _repo_rows_of(hub: MiniHub, repo: str) -> list[dict[str, object]]:
    data = hub.files(repo, "dataset")
    [path] = [p for p in data if p.startswith("data/")]
    rows: list[dict[str, object]] = pq.read_table(pa.BufferReader(data[path])).to_pylist()
    return rows


def test_merge_pushes_what_a_dead_sweep_into_the_hub_left_in_its_local_copy(
    hub: MiniHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep into ``hf://`` killed before its end leaves its rows in the local copy's
    journal: ``neuronsupport merge --results hf://...`` merges them there, then pushes them."""
    from pytest_neuronsupport import options
    from pytest_neuronsupport.dataset.journal import Journal
    from tests.results_for_tests import pair_of

    uri = f"hf://datasets/{REPO}"
    monkeypatch.setenv("NEURONSUPPORT_CACHE", str(tmp_path / "cache"))
    code, out = _run("merge", "--results", uri)
    assert code == 0 and "no local copy" in out, out  # nothing swept here yet

    copy = local_copy(options.default_cache(), uri)
    journal = Journal(copy)  # left open, as a killed sweep leaves it (its lock released)
    for row in (result_row("org/a"), result_row("org/b", "FAIL(gen)")):
        journal.append(pair_of(row), row)
    journal.close()
    code, out = _run("merge", "--results", uri)
    assert code == 0, out
    assert "2 row(s) merged" in out and "2 new, 0 replaced" in out, out
    assert sorted(str(r["model_id"]) for r in _repo_rows(hub)) == ["org/a", "org/b"]
    code, again = _run("merge", "--results", uri)
    assert code == 0 and "nothing new to push" in again, again
