"""What ``fleet.py`` takes for granted, checked in a second: ``pytest benchmarks/test_fleet.py``.

* every xdist worker's queue starts with its warm-up (the clock waits for them all), under
  pytest-xdist's own ``load`` scheduler;
* the plugin's sizing reads a stand-in checkpoint as the fleet's model says: its config, built
  on the meta device, has the model's parameters, and so its cores;
* peak host memory counts the phases in progress at once;
* the schedule model (``fleet_schedule.py``) replays the sweep's policy: each reference in its
  worker's path, aligned leases, the largest first.
"""

from __future__ import annotations

from typing import Any

import fleet
import fleet_figures
import fleet_model
import fleet_schedule
import pytest

from pytest_neuronsupport.pipeline.sizing import config_parameters, cores_needed
from tests.xdist_scheduling_for_tests import scheduled


@pytest.mark.parametrize(("models", "workers"), [(1000, 16), (1000, 64), (40, 4), (5, 4), (30, 1)])
def test_each_worker_starts_with_its_warm_up(models: int, workers: int) -> None:
    some = fleet_model.fleet(models, 0.5, seed=0)
    warmups = [f"fleet/warmup-{k:02d}" for k in range(workers)]
    text = fleet.model_list(some, warmups)
    ids = [line.split('"')[1] for line in text.splitlines() if line.startswith("id = ")]
    nodes = scheduled(ids, workers)
    firsts = [ids[node.sent[0]] for node in nodes]
    assert sorted(firsts) == warmups


@pytest.mark.parametrize("parameters", [15_000_000, 135_000_000, 8_030_000_000, 141_000_000_000])
def test_sizing_counts_a_stand_in_checkpoint_as_the_fleet_does(parameters: int) -> None:
    model = fleet_model.phases("fleet/m", "decoder", parameters, 0.5)
    counted = config_parameters(fleet.config(model, 20.0))
    assert abs(counted - parameters) < fleet.HIDDEN
    assert cores_needed(2 * counted, fleet_model.CORE_GB) == model.cores


def test_peak_host_memory_counts_the_phases_in_progress() -> None:
    events = [
        {"start": 0.0, "end": 2.0, "host_bytes": 5},
        {"start": 1.0, "end": 3.0, "host_bytes": 7},
        {"start": 2.0, "end": 4.0, "host_bytes": 6},  # starts as the first ends
    ]
    assert fleet_figures.peak_host(events) == (13, 2.0)


@pytest.mark.parametrize(("models", "workers"), [(1000, 16), (100, 4)])
def test_by_cost_too_each_worker_starts_with_its_warm_up(
    models: int, workers: int, tmp_path: Any
) -> None:
    """``--neuron-order cost`` orders the list by its entries' ``parameters``: the warm-ups
    declare the largest, so they still start first, one a worker."""
    from pytest_neuronsupport import order
    from pytest_neuronsupport.modellist import parse

    some = fleet_model.fleet(models, 0.5, seed=0)
    warmups = [f"fleet/warmup-{k:02d}" for k in range(workers)]
    path = tmp_path / "fleet.toml"
    path.write_text(fleet.model_list(some, warmups))
    text = path.read_text().replace("standin_decoder", "dense").replace("standin_", "")
    specs = parse(path, text=text)  # the built-in runners for the stand-ins: same order
    ids = order.start_order(
        specs, lambda m: None, cache=tmp_path, core_gb=24.0, max_cores=16, workers=workers
    )
    nodes = scheduled(ids, workers)
    assert sorted(ids[node.sent[0]] for node in nodes) == warmups
    sizes = {m.id: m.parameters for m in some}
    second = [sizes[ids[node.sent[1]]] for node in nodes]
    assert min(second) >= sorted(sizes.values())[-workers]  # then the largest models


def model(cores: int, busy_s: float, reference_s: float = 0.0) -> fleet_model.Model:
    return fleet_model.Model("m", "decoder", 1, cores, compile_s=busy_s, reference_s=reference_s)


def test_the_schedule_model_holds_each_reference_in_its_workers_path() -> None:
    four = [model(1, 10.0, reference_s=5.0) for _ in range(4)]
    assert fleet_schedule.makespan(four, workers=2, cores=2) == 30.0  # 5 + 10, twice
    assert fleet_schedule.makespan(four, workers=2, cores=2, reference_in_path=False) == 20.0
    assert fleet_schedule.makespan(four, workers=4, cores=2) == 25.0  # the others' wait
    assert fleet_schedule.makespan(four, workers=2, cores=2, between_s=1.0) == 32.0
    assert fleet_schedule.lower_bound(four, cores=2) == 20.0


def test_the_schedule_model_leases_aligned_blocks_largest_first() -> None:
    assert fleet_schedule.aligned_block([False, True, True, False], 2) is None
    assert fleet_schedule.aligned_block([True, True, False, True], 2) == 0
    assert fleet_schedule.aligned_block([False, False, True, True], 2) == 2
    # the 2-core model starts first (the largest); the 1-core ones fill the other two cores
    mixed = [model(1, 10.0), model(1, 10.0), model(2, 15.0)]
    assert fleet_schedule.makespan(mixed, workers=3, cores=4) == 15.0
    assert fleet_schedule.lower_bound(mixed, cores=4) == 15.0
