"""Stand-ins for ``benchmarks/fleet.py``, loaded into every pytest process of its sweep
(``-p fleet_plugin_for_benchmark``): a simulated trn2.48xlarge, and the fleet's runners.

Only the device and the models are simulated; the sweep (collection, xdist workers, plan,
sizing, the core allocator, isolation, classification, journal) is the plugin's own.

* **The device** (:class:`Trn2ForBenchmark`): the CPU device as the plugin knows it (its run
  side is ``CpuOps``: a stand-in run touches no accelerator), with the cores of a trn2.48xlarge
  (64 logical cores at LNC=2, ``$FLEET_CORES_FOR_BENCHMARK``) of 24 GB each. Its runs are not
  pinned to CPUs: the allocator leases core ids 0-63, which name no CPU of this machine (the CPU
  device maps lease index k to the k-th allowed CPU, and this machine has two); the stand-in
  runs sleep, so they share the machine's CPUs unpinned. It replaces the CPU device in the
  plugin's device table (``devices.DEVICES["cpu"]``), in this process only.
* **The host**: the plugin asks how much memory the host has when it decides whether a
  several-core run's CPU reference fits in fp32, and whether fp64 fits
  (``sizing.total_memory_bytes``): here it answers the simulated host's, 2 TiB
  (``$FLEET_HOST_BYTES_FOR_BENCHMARK``), not this machine's. The host-memory gate
  (``leases.HostMemoryGate``) asks the same, and how much is available
  (``sizing.available_memory_bytes``: the simulated host's less what the stand-in runs' phases
  in progress hold, the fleet's memory model) and each run's resident memory
  (``leases.resident_bytes``: what the stand-in runs' phases hold, by pid).
* **The runners**: ``standin_decoder`` (shards, like ``dense``) and ``standin_encoder`` (one
  core, like ``encoder`` and ``seq2seq``), both the run code of
  ``fleet_runner_for_benchmark`` (on the path: ``fleet.py`` puts ``benchmarks/`` on
  ``PYTHONPATH``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet_model import COMPILER_ENV

from pytest_neuronsupport import devices
from pytest_neuronsupport.pipeline import leases, sizing
from pytest_neuronsupport.runners import Runner

CORES_ENV = "FLEET_CORES_FOR_BENCHMARK"
HOST_ENV = "FLEET_HOST_BYTES_FOR_BENCHMARK"
EVENTS_ENV = "FLEET_EVENTS_FOR_BENCHMARK"
#: A trn2.48xlarge: 64 logical NeuronCores at LNC=2, ~24 GB of HBM each, 2 TiB of host memory.
TRN2_CORES = 64
TRN2_CORE_GB = 24.0
TRN2_HOST_BYTES = 2 * 1024**4


@dataclass(frozen=True)
class Trn2ForBenchmark(devices.CpuDevice):
    """The CPU device with a trn2.48xlarge's cores, unpinned (see the module's docstring)."""

    def core_count(self) -> int:
        return int(os.environ.get(CORES_ENV, TRN2_CORES))

    def core_capacity_gb(self) -> float:
        return TRN2_CORE_GB

    def cpus(self, cores: Sequence[int]) -> list[int] | None:
        return None

    def compiler(self, backend: str) -> tuple[str, str]:
        """The compiler, and its version: a night's (``fleet.py --nights``), else its own. A
        new version is a new pair of the dataset: every model runs again."""
        name, version = super().compiler(backend)
        return name, os.environ.get(COMPILER_ENV, version)


def simulated_available_bytes() -> int:
    """The simulated host's memory less what the stand-in runs' phases hold now (their
    ``held``: ``$FLEET_EVENTS_FOR_BENCHMARK/host_in_use``)."""
    capacity = simulated_total_bytes()
    try:
        in_use = int(Path(os.environ[EVENTS_ENV], "host_in_use").read_text(encoding="ascii"))
    except (KeyError, OSError, ValueError):
        in_use = 0
    return capacity - in_use


def simulated_total_bytes() -> int:
    return int(os.environ.get(HOST_ENV, TRN2_HOST_BYTES))


def simulated_resident_bytes(pid: int) -> int:
    """The simulated host memory the stand-in run's process ``pid`` holds now."""
    try:
        path = Path(os.environ[EVENTS_ENV], "host_by_pid", str(pid))
        return int(path.read_text(encoding="ascii") or 0)
    except (KeyError, OSError, ValueError):
        return 0


devices.DEVICES["cpu"] = Trn2ForBenchmark()
sizing.available_memory_bytes = simulated_available_bytes
sizing.total_memory_bytes = simulated_total_bytes
leases.resident_bytes = simulated_resident_bytes


def pytest_neuronsupport_runners(config: Any) -> list[Runner]:
    common = {"module": "fleet_runner_for_benchmark", "generates": False}
    return [
        Runner(name="standin_decoder", load_class="(stand-in)", shards=True, **common),
        Runner(name="standin_encoder", load_class="(stand-in)", **common),
    ]
