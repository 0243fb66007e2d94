"""A results dataset on S3 shared by the shards of a sweep, against moto's S3 server on the
loopback (the real boto3 client, real conditional writes)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pytest_neuronsupport.dataset.files import read_dataset
from pytest_neuronsupport.dataset.stores.s3 import SharedResults
from pytest_neuronsupport.modellist import default_lists, parse
from tests.results_for_tests import pair_of, result_row
from tests.shared_sweeps import SUPPORT, TINY
from tests.sweeping import Sweep, SweepRunner, toml_list

BUCKET = "sweep-results"
PAIR = "inductor-2.13.0/transformers-5.24.0.parquet"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's S3 server on 127.0.0.1, a bucket, and the environment every AWS client reads."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for name, value in {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    yield client
    server.stop()


def shared_rows(client: Any, prefix: str, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """The shared dataset's rows (a pull into a fresh folder), by model id."""
    local = tmp_path / f"pulled-{time.monotonic_ns()}"
    SharedResults(f"s3://{BUCKET}/{prefix}", client).pull(local)
    return {row["model_id"]: row for row in read_dataset(local).to_pylist()}


def test_published_rows_merge_once_and_the_merge_may_be_repeated(s3: Any, tmp_path: Path) -> None:
    shared = SharedResults(f"s3://{BUCKET}/run1", s3)
    for n, model in enumerate(["org/a", "org/b"]):
        shared.publish("shard-1", n, PAIR, result_row(model))
    shared.publish("shard-2", 0, PAIR, result_row("org/c", "FAIL(gen)"))
    # not merged yet: a pull still sees them (the skip-unchanged rule reads the shared rows)
    assert sorted(shared_rows(s3, "run1", tmp_path)) == ["org/a", "org/b", "org/c"]
    summary = shared.merge()
    assert summary.written == {f"data/{PAIR}": 3} and not summary.problems
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="run1/")["Contents"]
    assert [o["Key"] for o in listed] == [f"run1/data/{PAIR}"]  # published rows deleted
    # a later row of a model replaces its row; an older one (a late retry) does not
    shared.publish("shard-3", 0, PAIR, result_row("org/a", "FAIL(load)", minutes=5))
    shared.publish("shard-3", 1, PAIR, result_row("org/b", "FAIL(load)", minutes=-5))
    shared.merge()
    assert shared.merge().written == {}  # nothing left: nothing written
    rows = shared_rows(s3, "run1", tmp_path)
    assert {m: r["result"] for m, r in rows.items()} == {
        "org/a": "FAIL(load)",
        "org/b": "PASS",
        "org/c": "FAIL(gen)",
    }


def test_two_merges_at_once_lose_no_row(s3: Any, tmp_path: Path) -> None:
    shared = SharedResults(f"s3://{BUCKET}/race", s3)
    models = [f"org/m{i}" for i in range(40)]
    for n, model in enumerate(models):
        shared.publish(f"shard-{n % 3}", n, PAIR, result_row(model))
    retried: list[int] = []

    def merge() -> None:
        retried.append(SharedResults(f"s3://{BUCKET}/race").merge().retried)

    threads = [threading.Thread(target=merge) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(shared_rows(s3, "race", tmp_path)) == sorted(models)
    body = s3.get_object(Bucket=BUCKET, Key=f"race/data/{PAIR}")["Body"].read()
    assert pq.read_table(io.BytesIO(body)).num_rows == len(models)


class DeleteFailsClientForTests:
    """The real client, except that deleting objects dies: a merge killed after its write."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def delete_objects(self, **kwargs: Any) -> Any:
        raise KeyboardInterrupt("killed between the write and the delete")


def test_a_merge_killed_after_writing_leaves_its_rows_to_the_next(s3: Any, tmp_path: Path) -> None:
    SharedResults(f"s3://{BUCKET}/killed", s3).publish("s", 0, PAIR, result_row("org/a"))
    with pytest.raises(KeyboardInterrupt):
        SharedResults(f"s3://{BUCKET}/killed", DeleteFailsClientForTests(s3)).merge()
    assert list(shared_rows(s3, "killed", tmp_path)) == ["org/a"]
    again = SharedResults(f"s3://{BUCKET}/killed", s3).merge()
    assert again.written == {f"data/{PAIR}": 1}  # applied again, harmlessly
    assert list(shared_rows(s3, "killed", tmp_path)) == ["org/a"]


def test_a_split_written_once_is_what_every_machine_reads(s3: Any) -> None:
    shared = SharedResults(f"s3://{BUCKET}/split", s3)
    first = shared.put_if_absent("shards/k.json", '{"first": true}')
    second = shared.put_if_absent("shards/k.json", '{"second": true}')
    assert first == second == '{"first": true}'


#: Row for row, timings aside (and run.py's text, which names each machine's checkpoint path;
#: and the compiler: the one machine's is the README's inductor, the fleet's aot_eager).
COMPARED = ("result", "runner", "neuron_cores", "cpu_match", "exclusion", "task", "device")


@pytest.mark.slow
@SUPPORT
def test_three_shards_into_s3_with_one_killed_and_retried_equal_one_machine(
    sweep: SweepRunner, tiny_sweep: Sweep, s3: Any, tmp_path: Path
) -> None:
    """The fleet's rows are those of one machine: the tiny list's sweep (the fleet's list has
    these models' entries as the tiny list writes them: an id and a task)."""
    models = ["zoo:bert", "zoo:bert-reranker", "zoo:distilbert-sst", "zoo:bert-mlm", "zoo:gpt2"]
    alone = tiny_sweep
    assert all(entry == {"id": entry["id"]} for entry in TINY if entry["id"] in models)
    assert set(alone.rows) >= set(models)
    tasks = {spec.id: spec.task for spec in parse(default_lists()[0])}
    path = sweep.path / "shards.toml"
    path.write_text(toml_list({"id": m, "task": tasks[m]} for m in models), encoding="utf-8")
    uri = f"s3://{BUCKET}/fleet"

    def shard(index: int) -> subprocess.Popen[bytes]:
        """One machine: its own cache (and so its own local copy), the shared zoo."""
        cache = tmp_path / f"machine-{index}"
        cache.mkdir(exist_ok=True)
        if not (cache / "zoo").exists():
            (cache / "zoo").symlink_to(sweep.cache / "zoo", target_is_directory=True)
        args = [sys.executable, "-m", "pytest", "--neuron-sweep", "--neuron-models", str(path)]
        args += ["--neuron-backend", "aot_eager", "--neuron-results", uri]
        args += ["--neuron-cache", str(cache), "--neuron-leases", str(cache / "leases")]
        args += ["--neuron-shard", f"{index}/3", "-p", "no:cacheprovider", "-q"]
        return subprocess.Popen(
            args,
            cwd=sweep.path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    machines = {index: shard(index) for index in (1, 2, 3)}
    # machine 1 dies (kill -9) once it has published a row: mid-way through its part
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and machines[1].poll() is None:
        published = s3.list_objects_v2(Bucket=BUCKET, Prefix="fleet/published/")
        if published.get("KeyCount", 0) >= 1:
            break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):  # unless it was done already
        os.killpg(machines[1].pid, signal.SIGKILL)
    machines[1].wait()
    machines[1] = shard(1)  # the engine starts it again
    for machine in machines.values():
        assert machine.wait(timeout=900) == 0
    # two merges at once, as two shards' ends (or an operator's) may run them
    merges = [
        subprocess.Popen(
            [str(Path(sys.executable).parent / "neuronsupport"), "merge", "--results", uri]
        )
        for _ in range(2)
    ]
    assert all(m.wait(timeout=300) == 0 for m in merges)
    fleet = shared_rows(s3, "fleet", tmp_path)
    assert set(fleet) == set(models)
    for model in models:
        assert {c: fleet[model][c] for c in COMPARED} == {c: alone.row(model)[c] for c in COMPARED}
        assert fleet[model]["compiler"] == "aot_eager"
    assert not s3.list_objects_v2(Bucket=BUCKET, Prefix="fleet/published/").get("Contents")
    pair = pair_of(fleet[models[0]])
    assert s3.head_object(Bucket=BUCKET, Key=f"fleet/data/{pair}")["ContentLength"] > 0


def test_a_store_down_is_a_usage_error_at_the_start_and_keeps_the_rows_it_could_not_take(
    s3: Any, tmp_path: Path
) -> None:
    """moto's server stopped mid-sweep: the rows it could not take are kept in the local copy's
    ``unpublished`` folder, one problem line says where, and the next sweep publishes them."""
    import boto3
    from botocore.config import Config
    from moto.server import ThreadedMotoServer

    from pytest_neuronsupport.dataset.layout import unpublished_dir
    from pytest_neuronsupport.dataset.stores import ObjectStoreResults, ResultsError
    from pytest_neuronsupport.dataset.support import SUPPORT as SUPPORT_TABLE
    from pytest_neuronsupport.dataset.table import row_to_json

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    quick = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1)
    client = boto3.client("s3", endpoint_url=endpoint, config=quick)
    client.create_bucket(Bucket=BUCKET)
    uri, copy = f"s3://{BUCKET}/down", tmp_path / "copy"
    store = ObjectStoreResults(uri, copy, client)
    store.pull()
    server.stop()  # the store goes down mid-sweep
    row = row_to_json(result_row("org/a"), SUPPORT_TABLE)
    store.publish("sweep-1", PAIR, SUPPORT_TABLE, row)
    problem, merging = store.finish()
    assert merging.startswith(f"merging into {uri}: ")
    kept = unpublished_dir(copy) / "sweep-1.jsonl"
    assert problem.startswith(f"1 row(s) not published to {uri}, the object store at {endpoint}")
    assert f"kept in {kept} (org/a)" in problem
    assert kept.is_file()
    with pytest.raises(
        ResultsError, match=rf"cannot read {uri} \(the object store at {endpoint}\)"
    ):
        ObjectStoreResults(uri, copy, client).pull()  # down at the start: said before any test
    assert kept.is_file()

    again = ObjectStoreResults(uri, copy, s3)  # the next sweep, the store up (moto's other one)
    again.pull()
    assert not kept.exists() and again.finish() == []
    assert list(shared_rows(s3, "down", tmp_path)) == ["org/a"]
