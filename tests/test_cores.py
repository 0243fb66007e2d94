"""Core sizing from real checkpoints, and leases shared by real processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_neuronsupport import zoo
from pytest_neuronsupport.pipeline.leases import CoreAllocator
from pytest_neuronsupport.pipeline.sizing import (
    HOST_SHARE,
    checkpoint_parameters,
    config_parameters,
    cores_needed,
    host_holds_fp32,
    total_memory_bytes,
    weight_bytes,
)


def test_weights_are_counted_from_safetensors_headers(zoo_cache: Path) -> None:
    import torch
    import transformers

    folder = zoo.ensure_built("llama", zoo_cache)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    expected = sum(p.numel() for p in model.parameters())
    assert checkpoint_parameters(folder) == expected
    assert weight_bytes(str(folder), None) == 2 * expected


def test_without_weights_the_config_is_built_on_the_meta_device(zoo_cache: Path) -> None:
    folder = zoo.ensure_built("bert", zoo_cache)
    config = json.loads((folder / "config.json").read_text())
    assert config_parameters(config) == checkpoint_parameters(folder)
    assert weight_bytes("acme/not-a-folder", config) == 2 * config_parameters(config)
    assert weight_bytes("acme/not-a-folder", None) is None


def test_a_damaged_weights_file_is_sized_from_its_config(zoo_cache: Path, tmp_path: Path) -> None:
    folder = zoo.ensure_built("bert", zoo_cache)
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 64)
    config = json.loads((folder / "config.json").read_text())
    parameters = checkpoint_parameters(folder)
    assert parameters is not None
    assert weight_bytes(str(tmp_path), config) == 2 * parameters


@pytest.mark.parametrize(
    ("gb", "capacity", "cores"),
    [(0.5, 24, 1), (24, 24, 1), (24.1, 24, 2), (48, 24, 2), (60, 24, 4), (200, 24, 16)],
)
def test_the_smallest_power_of_two_that_holds_the_weights(
    gb: float, capacity: float, cores: int
) -> None:
    assert cores_needed(int(gb * 1e9), capacity) == cores


def test_leases_are_contiguous_aligned_and_exclusive(tmp_path: Path) -> None:
    allocator = CoreAllocator(tmp_path / "cores.json", total=8)
    one = allocator.try_acquire(1)
    two = allocator.try_acquire(2)
    four = allocator.try_acquire(4)
    assert one and two and four
    assert one.cores == [0]
    assert two.cores == [2, 3]  # aligned: never 1-2
    assert four.cores == [4, 5, 6, 7]
    assert allocator.try_acquire(2) is None  # only core 1 is free
    assert allocator.try_acquire(1).cores == [1]  # type: ignore[union-attr]
    allocator.release(two)
    assert allocator.try_acquire(2).cores == [2, 3]  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="cannot lease 3"):
        allocator.try_acquire(3)
    with pytest.raises(ValueError, match="cannot lease 16"):
        allocator.try_acquire(16)


HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pytest_neuronsupport.pipeline.leases import CoreAllocator
    lease = CoreAllocator(Path(sys.argv[1]), total=2).acquire(int(sys.argv[2]))
    print(" ".join(map(str, lease.cores)), flush=True)
    time.sleep(600)
    """
)


def test_a_killed_holders_lease_is_reclaimed(tmp_path: Path) -> None:
    path = tmp_path / "cores.json"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), "2"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["0", "1"]
        allocator = CoreAllocator(path, total=2)
        assert allocator.try_acquire(1) is None  # all held by a live process
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate()
    assert allocator.try_acquire(2) is not None


def _lease_and_record(path: str, log: str, count: int) -> None:
    allocator = CoreAllocator(Path(path), total=4, poll_s=0.01)
    for _ in range(5):
        with allocator.lease(count) as lease:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} start {time.monotonic()} {lease.cores}\n")
            time.sleep(0.02)
            with open(log, "a") as f:
                f.write(f"{os.getpid()} end {time.monotonic()} {lease.cores}\n")


def test_processes_never_share_a_core(tmp_path: Path) -> None:
    path, log = tmp_path / "cores.json", tmp_path / "log"
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_lease_and_record, args=(str(path), str(log), n)) for n in (1, 2, 2, 4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    held: dict[int, str] = {}
    for line in log.read_text().splitlines():
        pid, what, _, cores = line.split(" ", 3)
        for core in json.loads(cores):
            if what == "start":
                assert core not in held, f"core {core} held by {held.get(core)} and {pid}"
                held[core] = pid
            else:
                assert held.pop(core) == pid


def test_a_several_core_reference_runs_where_the_host_holds_the_model_in_fp32() -> None:
    """fp32 weights (twice the bf16 bytes) within HOST_SHARE of the host's memory, whatever is
    free now (the gate waits for that); a model of unknown size is tried."""
    total = total_memory_bytes()
    with open("/proc/meminfo", encoding="ascii") as f:
        said = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    assert total == said
    fits = int(HOST_SHARE * total / 2 * 0.9)
    assert host_holds_fp32(fits) and not host_holds_fp32(fits * 2)
    assert host_holds_fp32(None)
