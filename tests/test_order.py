"""Cost-ordered starts (``pytest_neuronsupport.order``): the costs, the order, the deal to
xdist's own ``load`` scheduler, the order written once for every worker."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import order
from pytest_neuronsupport.modellist import ModelSpec
from tests.xdist_scheduling_for_tests import scheduled


def spec(model_id: str, **fields: Any) -> ModelSpec:
    return ModelSpec(id=model_id, source=Path("models.toml"), line=1, **fields)


def test_a_rows_cost_is_its_wall_time_times_its_cores() -> None:
    assert order.recorded_core_s({"wall_s": 10.0, "neuron_cores": 4, "result": "PASS"}) == 40.0
    assert order.recorded_core_s({"wall_s": 3.0, "neuron_cores": None, "result": "FAIL(load)"})
    excluded = {"wall_s": 0.1, "neuron_cores": None, "result": "EXCLUDED"}
    assert order.recorded_core_s(excluded) is None
    assert order.recorded_core_s({"wall_s": None, "result": "PASS"}) is None
    assert order.recorded_core_s(None) is None


def test_largest_first_unknowns_at_the_mean_ties_in_list_order() -> None:
    models = ["a", "b", "c", "d", "e"]
    costs = {"a": 1.0, "b": 9.0, "d": 9.0, "e": 2.0}  # mean 5.25: c goes after b and d
    assert order.by_cost(models, costs) == ["b", "d", "c", "e", "a"]
    assert order.by_cost(models, {}) == models  # nothing known: the lists' order


def test_estimates_are_scaled_to_the_recorded_costs() -> None:
    models = ["seen", "new", "unknown"]
    recorded = {"seen": 30.0}
    estimated = {"seen": 10.0, "new": 5.0}
    costs = order.predicted(models, recorded, estimated)
    assert costs == {"seen": 30.0, "new": 15.0}  # new: its estimate, three times


def test_the_size_estimate_grows_with_the_cores_and_the_bytes() -> None:
    one = order.estimate_core_s(int(1e9), 24.0, 16)
    two = order.estimate_core_s(int(30e9), 24.0, 16)  # two cores
    assert one == 60.0 + 20.0
    assert two == 2 * 60.0 + 20.0 * 30
    assert order.estimate_core_s(int(1e12), 24.0, 4) == 4 * 60.0 + 20.0 * 1000  # capped


def safetensors(path: Path, elements: int) -> None:
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [elements], "data_offsets": [0, 2 * elements]}}
    ).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def test_a_size_is_known_from_the_list_or_a_local_checkpoint_never_downloaded(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    safetensors(folder / "model.safetensors", 1000)
    cache = tmp_path / "cache"
    assert order.weight_bytes(spec("org/listed", parameters=500), cache) == 1000
    assert order.weight_bytes(spec("org/local", path=str(folder)), cache) == 2000
    assert order.weight_bytes(spec("org/hub"), cache) is None  # not fetched to know it
    assert order.weight_bytes(spec("zoo:llama"), cache) is None  # not built to know it


def test_the_start_order_from_rows_and_sizes(tmp_path: Path) -> None:
    specs = [
        spec("org/small", parameters=10**8),
        spec("org/seen"),
        spec("org/huge", parameters=10**11),
        spec("org/unknown"),
    ]
    rows = {"org/seen": {"wall_s": 100.0, "neuron_cores": 2, "result": "PASS"}}
    found = order.start_order(
        specs, rows.get, cache=tmp_path, core_gb=24.0, max_cores=16, workers=1
    )
    # huge: 8 cores x 60 + 20 x 200 = 4480; seen: 200; small: 64; unknown: their mean
    assert found == ["org/huge", "org/unknown", "org/seen", "org/small"]


@pytest.mark.parametrize(
    ("models", "workers", "most"),
    [(1000, 16, None), (1000, 64, None), (40, 4, None), (6, 2, None), (5, 4, None), (100, 4, 3)],
)
def test_dealt_so_that_xdist_starts_the_largest_first(
    models: int, workers: int, most: int | None
) -> None:
    ranked = [f"m{r:04d}" for r in range(models)]  # largest first
    ids = order.dealt(ranked, workers, most)
    assert sorted(ids) == ranked
    nodes = scheduled(ids, workers, most)
    firsts = sorted(ids[node.sent[0]] for node in nodes if node.sent)
    assert firsts == ranked[: min(workers, models)]  # the n largest start at once
    for node in nodes:  # each worker runs its own in order of size
        queue = [ids[i] for i in node.sent]
        assert queue == sorted(queue)


@pytest.mark.parametrize(("models", "workers"), [(1000, 16), (1000, 64), (40, 4), (6, 4), (5, 4)])
def test_dealt_evenly_so_that_xdist_worksteal_starts_the_largest_first(
    models: int, workers: int
) -> None:
    """``--dist worksteal``: each worker's part of the items starts with one of the n largest
    and runs largest first, so that the back half an idle worker steals is the smallest."""
    ranked = [f"m{r:04d}" for r in range(models)]  # largest first
    ids = order.dealt_evenly(ranked, workers)
    assert sorted(ids) == ranked
    nodes = scheduled(ids, workers, dist="worksteal")
    assert [len(node.sent) for node in nodes] == order.even_parts(models, workers)
    firsts = sorted(ids[node.sent[0]] for node in nodes if node.sent)
    assert firsts == ranked[: min(workers, models)]
    for node in nodes:
        queue = [ids[i] for i in node.sent]
        assert queue == sorted(queue)


def test_the_order_is_written_once_for_every_worker(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    kept: list[list[str]] = []
    orders = [["a", "b", "c"], ["c", "b", "a"], ["b", "a", "c"], ["a", "c", "b"]]

    def worker(mine: list[str]) -> None:
        kept.append(order.shared_order(folder, mine))

    threads = [threading.Thread(target=worker, args=(o,)) for o in orders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({tuple(k) for k in kept}) == 1  # whoever wrote first, all agree
    assert order.shared_order(None, ["x"]) == ["x"]  # alone: its own
    assert order.shared_order(folder, ["x", "y"]) == ["x", "y"]  # other models: its own


def test_items_are_put_in_the_order_others_stay_at_the_end() -> None:
    items: list[Any] = ["a", "x", "b", "c"]
    order.reorder(items, ["c", "a", "b"], lambda i: None if i == "x" else i)
    assert items == ["c", "a", "b", "x"]


#: Records, in each xdist worker, the models it starts, in the order it starts them.
#: Each model's start, in the worker that runs it (the runtest protocol runs only there; the
#: controller's logstart would see every start, and it inherits an outer xdist worker's id).
STARTS_CONFTEST = """
def pytest_runtest_protocol(item, nextitem):
    worker = getattr(item.config, "workerinput", {}).get("workerid", "main")
    with open(f"starts-{worker}.txt", "a", encoding="utf-8") as f:
        f.write(item.nodeid.rsplit("::", 1)[-1] + "\\n")
"""


@pytest.mark.slow
def test_under_two_workers_the_largest_start_first_and_the_reports_keep_list_order(
    sweep: Any,
) -> None:
    """Four zoo models whose list entries say they grow down the list: under ``-n 2`` the two
    largest start first, one on each worker, and each worker goes down by size; the dataset's
    rows (sorted by model), junit and the summary keep the lists' order."""
    sweep.makeconftest(STARTS_CONFTEST)
    listed = ["zoo:bert", "zoo:distilbert-sst", "zoo:roberta-qa", "zoo:bert-mlm"]
    entries = [{"id": m, "parameters": 10**6 * (k + 1)} for k, m in enumerate(listed)]
    done = sweep.run(*entries, args=["-n", "2", "-v"])
    done.result.assert_outcomes(passed=4)
    by_size = listed[::-1]
    starts = [
        path.read_text(encoding="utf-8").split()
        for path in sorted(sweep.path.glob("starts-gw*.txt"))
    ]
    assert sorted(s[0] for s in starts) == sorted(by_size[:2])  # the two largest at once
    for started in starts:
        assert started == sorted(started, key=by_size.index)  # each worker down by size
    assert sorted(m for s in starts for m in s) == sorted(listed)
    assert list(done.testcases) == listed  # junit: the lists' order
    assert list(done.rows) == sorted(listed)  # the dataset: by model, whatever ran first
