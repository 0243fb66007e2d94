"""Compiled graphs shared through a Hub Storage Bucket (``--neuron-compile-cache``), on the
loopback Hub (``minihub``, buckets through the real ``huggingface_hub`` and ``hf_xet``) and the
stand-in TorchNeuron, whose persistent cache keeps a NEFF-like file per graph in
``TORCH_NEURONX_NEFF_CACHE_DIR`` and reads it back: two "instances" (two folders, two caches)
share one bucket; four shards publish at once; a read-only token seeds and says why it does
not publish; a bucket that does not exist, with such a token, stops the sweep at its start."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from pytest_neuronsupport import compilecache
from pytest_neuronsupport.minihub import MiniHub
from pytest_neuronsupport.views.dashboard import dashboard
from pytest_neuronsupport.views.lookup import lookup
from tests.sweeping import Sweep, SweepRunner
from tests.torchneuron_standin import NEURONX_CC, standin_env

pytest_plugins = ["pytest_neuronsupport.minihub"]

BUCKET = "hf://buckets/team/neff"
FOLDER = f"neuronxcc-{NEURONX_CC}"
REMOTE = f"{BUCKET}/{FOLDER}"


@pytest.fixture
def hub(minihub: MiniHub) -> MiniHub:
    minihub.add_user("alice", "hf_alice", orgs=("team",))
    minihub.add_user("reader", "hf_reader", write=False, orgs=("team",))
    return minihub


def neffs(folder: Path) -> dict[str, bytes]:
    """The NEFF files of a local cache, by path in it."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*.neff")}


def instance(tmp_path: Path, name: str, zoo_cache: Path) -> SweepRunner:
    """A machine of its own: a folder, its own cache (the zoo shared), the stand-in."""
    folder = tmp_path / name
    folder.mkdir()
    return SweepRunner(folder, zoo_cache, env=standin_env(folder / "standin"))


def hub_env(hub: MiniHub, token: str) -> dict[str, str]:
    """A sweep's environment for the loopback Hub, with ``token``."""
    return {"HF_ENDPOINT": hub.url, "HF_TOKEN": token, "HF_HUB_OFFLINE": ""}


def swept(runner: SweepRunner, hub: MiniHub, token: str, *models: str) -> Sweep:
    args = ["--neuron-device", "neuron", "--neuron-judge", "none"]
    args += ["--neuron-compile-cache", BUCKET]
    return runner.run(*models, backend="neuron", args=args, env=hub_env(hub, token))


@pytest.mark.slow
def test_two_instances_share_one_bucket(hub: MiniHub, zoo_cache: Path, tmp_path: Path) -> None:
    """The first instance compiles, makes the bucket and publishes; the second seeds, compiles
    nothing the first had compiled (its rows say where its graphs came from), and, with a
    read-only token, says why it does not publish the graph only it compiled."""
    first = instance(tmp_path, "first", zoo_cache)
    one = swept(first, hub, "hf_alice", "zoo:bert")
    row = one.row("zoo:bert")
    assert row["result"] == "PASS", row["error"]
    assert row["graphs_cached"] == 0 and row["graphs_compiled"] >= 1 and row["compiled"]
    assert row["compile_cache"] == REMOTE
    local = first.cache / "neff" / FOLDER
    compiled = neffs(local)
    assert len(compiled) == row["graphs_compiled"]
    published = {p.removeprefix(f"{FOLDER}/"): f for p, f in hub.bucket_files("team/neff").items()}
    assert set(published) == set(compiled)
    out = one.result.stdout.str()
    assert f"compile cache: seeded 0 graph(s) (0.0 MB) from {REMOTE}" in out
    assert "(the bucket was created)" in out
    assert f"compile cache: published {len(compiled)} graph(s)" in out

    second = instance(tmp_path, "second", zoo_cache)
    two = swept(second, hub, "hf_reader", "zoo:bert", "zoo:roberta-qa")
    bert, roberta = two.row("zoo:bert"), two.row("zoo:roberta-qa")
    assert bert["result"] == "PASS" and roberta["result"] == "PASS", two.result.stdout.str()
    # bert's graphs came from the bucket: none compiled, and still a compiler PASS
    assert (bert["graphs_cached"], bert["graphs_compiled"]) == (row["graphs_compiled"], 0)
    assert bert["compiled"] is True and bert["backend_compile_s"] == 0
    assert roberta["graphs_cached"] == 0 and roberta["graphs_compiled"] >= 1
    seeded = neffs(second.cache / "neff" / FOLDER)
    assert {k: seeded[k] for k in compiled} == compiled  # the same bytes, whole
    assert len(seeded) == len(compiled) + roberta["graphs_compiled"]
    out = two.result.stdout.str()
    assert f"compile cache: seeded {len(compiled)} graph(s)" in out
    said = f"compile cache: this sweep will not publish to {REMOTE}: this token may not write"
    assert out.count(said) == 2  # at its start, and in its summary
    assert "read-only" in out
    assert set(hub.bucket_files("team/neff")) == {f"{FOLDER}/{p}" for p in published}
    assert not list(second.cache.glob("neff/.*"))  # no staging folder left
    # the dashboard's cache hits of the Neuron pair, and the model's lookup line
    column = dashboard(second.results).columns[0]
    needed = len(compiled) + roberta["graphs_compiled"]
    assert column.pair.startswith(FOLDER)
    assert column.metrics["cache_hits"] == pytest.approx(len(compiled) / needed)
    shown = "\n".join(lookup(second.results, "zoo:bert"))
    assert f"graphs: {len(compiled)} cached, 0 compiled" in shown


@pytest.mark.slow
def test_four_shards_publish_at_once_and_lose_no_file(hub: MiniHub, tmp_path: Path) -> None:
    """Four processes publish their local caches into one folder at once, as four shards do
    at their ends (:func:`compilecache.finish`, the session's own call): some graphs compiled
    by several of them (the same key, the same bytes), some by one; every file lands whole."""
    expected: dict[str, bytes] = {}
    locals_ = []
    for shard in range(4):
        local = tmp_path / f"shard{shard}" / "neff"
        for n in range(shard * 3, shard * 3 + 5):  # overlapping keys
            data = hashlib.sha256(str(n).encode()).digest() * (50 + n)
            key = hashlib.sha256(data).hexdigest()
            path = local / key[:2] / key[2:4] / f"{key}.neff"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            expected[path.relative_to(local).as_posix()] = data
        (local / "ab").mkdir(exist_ok=True)
        (local / "ab" / "tmpx1y2.tmp").write_bytes(b"half a NEFF")  # being written
        locals_.append(local)
    code = (
        "import sys; from pathlib import Path; from pytest_neuronsupport import compilecache; "
        "cache = compilecache.open_cache(sys.argv[1], sys.argv[2], Path(sys.argv[3])); "
        "line, went = compilecache.finish(cache); print(line); sys.exit(0 if went else 1)"
    )
    env = {**os.environ, **hub_env(hub, "hf_alice")}
    shards = [
        subprocess.Popen(
            [sys.executable, "-c", code, BUCKET, FOLDER, str(local)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for local in locals_
    ]
    outs = [shard.communicate(timeout=600)[0] for shard in shards]
    assert [shard.returncode for shard in shards] == [0] * 4, outs
    assert all("compile cache: published" in out for out in outs), outs
    held = hub.bucket_files("team/neff")
    assert set(held) == {f"{FOLDER}/{p}" for p in expected}  # none lost, no .tmp
    back = tmp_path / "back"
    HfApi(endpoint=hub.url, token="hf_reader").sync_bucket(REMOTE, str(back))
    assert neffs(back) == expected  # every file whole


@pytest.mark.slow
def test_an_unknown_bucket_with_a_read_only_token_stops_the_sweep_at_its_start(
    hub: MiniHub, zoo_cache: Path, tmp_path: Path
) -> None:
    """Not a failure of every model: a usage error before any test, naming the bucket and
    what to do; the bucket is not made."""
    runner = instance(tmp_path, "reader", zoo_cache)
    args = ["--neuron-device", "neuron", "--neuron-compile-cache", "hf://buckets/team/none"]
    done = runner.run("zoo:bert", backend="neuron", args=args, env=hub_env(hub, "hf_reader"))
    result = done.result
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--neuron-compile-cache hf://buckets/team/none does not exist" in err
    assert "this token may not create it" in err and "hf buckets create team/none" in err
    assert not (runner.results / "data").exists()
    with pytest.raises(KeyError):
        hub.bucket_files("team/none")


def test_a_bucket_uri_is_checked_when_the_options_are_read() -> None:
    assert compilecache.bucket_uri("hf://buckets/org/neff/") == "hf://buckets/org/neff"
    assert compilecache.bucket_uri("hf://buckets/org/neff/v2") == "hf://buckets/org/neff/v2"
    for bad in ("hf://datasets/org/neff", "hf://buckets/org", "s3://bucket/neff", "org/neff"):
        with pytest.raises(ValueError, match="expected a Hub Storage Bucket"):
            compilecache.bucket_uri(bad)
    cache = compilecache.SharedCache.of("hf://buckets/org/neff/v2", FOLDER, Path("/tmp/x"))
    assert (cache.bucket_id, cache.folder) == ("org/neff", f"v2/{FOLDER}")
    assert cache.remote == f"hf://buckets/org/neff/v2/{FOLDER}"
