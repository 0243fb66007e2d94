"""Shards of one sweep over several machines, and core leases shared by every sweep on one."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from pytest_neuronsupport import shards
from pytest_neuronsupport.shards import Shard, ShardError
from tests.sweeping import SweepRunner


def test_a_shard_is_given_as_i_of_n() -> None:
    assert shards.parse("2/3") == Shard(2, 3)
    for bad in ("0/3", "4/3", "2", "a/b", "1/0"):
        with pytest.raises(ShardError):
            shards.parse(bad)


@pytest.mark.parametrize(
    ("env", "count", "expected"),
    [
        ({"JOB_COMPLETION_INDEX": "0"}, 3, Shard(1, 3)),  # Kubernetes Indexed Job: 0-based
        ({"AWS_BATCH_JOB_ARRAY_INDEX": "4", "AWS_BATCH_JOB_ARRAY_SIZE": "5"}, None, Shard(5, 5)),
        ({"AWS_BATCH_JOB_ARRAY_INDEX": "1"}, 2, Shard(2, 2)),
        ({}, 3, None),
    ],
)
def test_the_engines_variables_name_the_shard(
    env: dict[str, str], count: int | None, expected: Shard | None
) -> None:
    assert shards.from_environment(env, count) == expected


@pytest.mark.parametrize(
    ("env", "count", "message"),
    [
        ({"JOB_COMPLETION_INDEX": "1"}, None, "--neuron-shards N must say how many"),
        ({"AWS_BATCH_JOB_ARRAY_INDEX": "1"}, None, "without AWS_BATCH_JOB_ARRAY_SIZE"),
        ({"JOB_COMPLETION_INDEX": "x"}, 3, "is not a number"),
        ({"JOB_COMPLETION_INDEX": "3"}, 3, "shard 4/3: expected 1 <= I <= N"),
    ],
)
def test_an_incomplete_engine_setting_is_refused(
    env: dict[str, str], count: int | None, message: str
) -> None:
    with pytest.raises(ShardError, match=message):
        shards.from_environment(env, count)


def test_very_unequal_models_split_into_shards_of_close_expected_time() -> None:
    costs = {f"m{i}": c for i, c in enumerate([600, 310, 300, 290, 120, 60, 30, 20, 10, 5, 5])}
    models = list(costs)
    parts = shards.partition(models, costs, 3)
    assert sorted(m for part in parts for m in part) == sorted(models)  # each model once
    totals = [sum(costs[m] for m in part) for part in parts]
    best = max(sum(costs.values()) / 3, max(costs.values()))  # no split can do better
    assert max(totals) <= best * 4 / 3
    assert max(totals) - min(totals) <= 60  # 1750 s of work in 3 shards of 560-600 s
    assert all(part == sorted(part, key=models.index) for part in parts)  # list order kept


def test_models_without_a_recorded_cost_count_as_the_mean() -> None:
    parts = shards.partition(["a", "b", "c", "d"], {"a": 10.0, "b": 10.0}, 2)
    assert sorted(map(len, parts)) == [2, 2]
    assert shards.partition(["x", "y", "z"], {}, 2) == [["x", "z"], ["y"]]


def test_every_machine_reads_the_split_the_first_one_wrote(tmp_path: Path) -> None:
    models = [f"org/m{i}" for i in range(20)]
    found: list[list[list[str]]] = []

    def machine(seed: int) -> None:  # each sees other costs (rows merged in between)
        costs = {m: float((i * seed) % 7 + 1) for i, m in enumerate(models)}
        found.append(shards.load_or_write(tmp_path, models, costs, 4))

    threads = [threading.Thread(target=machine, args=(seed,)) for seed in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(split == found[0] for split in found)
    written = list(tmp_path.glob("*.json"))
    assert len(written) == 1 and not list(tmp_path.glob(".*.tmp"))
    assert json.loads(written[0].read_text())["parts"] == found[0]
    # a retried machine, later, with other costs: the same split
    assert shards.load_or_write(tmp_path, models, {models[0]: 1e6}, 4) == found[0]


@pytest.mark.slow
def test_shards_of_a_sweep_run_disjoint_parts_whose_union_is_the_list(
    sweep: SweepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = ["zoo:bert", "zoo:distilbert-sst", "zoo:bert-reranker"]
    first = sweep.run(*models, args=["--neuron-shard", "1/2"])
    ran_first = set(first.rows)
    first.result.stdout.fnmatch_lines(["shard 1/2 (the split: *shards)"])
    # the second machine is an Indexed Job's pod: its index from the engine, 0-based
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    second = sweep.run(*models, args=["--neuron-shards", "2"])
    ran_second = set(second.rows) - ran_first
    assert ran_first and ran_second and ran_first | ran_second == set(models)
    assert all(row["result"] == "PASS" for row in second.rows.values())
    outcomes = first.result.parseoutcomes()
    assert outcomes["passed"] == len(ran_first) and outcomes["deselected"] == 3 - len(ran_first)


def test_every_sweep_on_a_machine_leases_from_one_place(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from pytest_neuronsupport.options import default_leases
    from pytest_neuronsupport.settings import settings_from

    monkeypatch.delenv("NEURONSUPPORT_LEASES", raising=False)
    one = settings_from(pytester.parseconfig("--neuron-sweep", "--neuron-cache", "a"))
    two = settings_from(pytester.parseconfig("--neuron-sweep", "--neuron-cache", "b"))
    assert one.cache != two.cache and one.leases == two.leases == default_leases().resolve()
    monkeypatch.setenv("NEURONSUPPORT_LEASES", str(tmp_path / "machine"))
    assert settings_from(pytester.parseconfig("--neuron-sweep")).leases == tmp_path / "machine"
    chosen = settings_from(pytester.parseconfig("--neuron-sweep", "--neuron-leases", "here"))
    assert chosen.leases == (pytester.path / "here").resolve()
