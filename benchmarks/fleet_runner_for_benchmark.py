"""A stand-in runner for ``benchmarks/fleet.py``: no model runs, its phases are sleeps.

Each checkpoint of the fleet's Hub (served by ``fleet.py``) carries, in its ``config.json``
under ``fleet_for_benchmark``, the phase durations of the fleet's stated model (seconds on a
trn2.48xlarge), the factor they are scaled down by, and the host memory each phase holds. A run
replays them where a real run spends them today: the weights downloaded inside the run
(``hf_hub_download``, as ``from_pretrained`` does; the Hub's answer is what takes the download's
time), then the compile and the device's run (sleeps), then the CPU reference through the run-
side library's cache (``cached_reference``: computed once, kept in the file the plugin names);
in the plugin's reference-only pass before the lease (``reference_pass``), the reference alone,
as the real runners do. Each phase is appended to the events file ``fleet.py`` reads
(``$FLEET_EVENTS_FOR_BENCHMARK``): when it began and ended, the cores the run has, the host
memory it holds. Built on the real run side (phases, verdict, reference file), so a change of
where the plugin runs a phase (prefetch, a reference off the lease) moves this one too.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from huggingface_hub import hf_hub_download

from pytest_neuronsupport.runners.lib.protocol import Result, phase
from pytest_neuronsupport.runners.lib.reference import (
    cached_reference,
    reference_only,
    reference_pass,
)

#: The folder of the events files and of the warm-up barrier (set by ``fleet.py``).
EVENTS_ENV = "FLEET_EVENTS_FOR_BENCHMARK"
#: The key of a checkpoint's ``config.json`` that holds its fleet plan.
PLAN_KEY = "fleet_for_benchmark"
#: The file of the simulated host memory in use (bytes), in the events folder; and the folder
#: of what each process holds (a file a pid), which the stand-in host reads as its resident memory.
HOST_IN_USE = "host_in_use"
HOST_BY_PID = "host_by_pid"
#: The checkpoint's weights, which ``from_pretrained`` would download.
WEIGHTS = "model.safetensors"


def run(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    """One model's phases, replayed (see the module's docstring)."""
    plan = fleet_plan(params)
    if plan["kind"] == "warmup":  # in its reference's pass, nothing to do
        skipped = {"result": Result.PASS, "reference_only": True}
        return skipped if reference_only() else warm_up(plan)
    phase("load")
    with held(params, "download", 0):  # the files stream to disk
        if not os.path.isdir(params["checkpoint"]):
            hf_hub_download(params["checkpoint"], WEIGHTS, revision=params.get("revision"))
    if reference_only():  # the plugin's pass before the lease: the CPU reference alone
        return reference_pass(params, lambda: reference(params, plan))
    phase("forward")
    with held(params, "compile", plan["run_host_bytes"]):
        time.sleep(plan["compile_s"] / plan["scale"])
    with held(params, "device", plan["run_host_bytes"]):
        time.sleep(plan["device_s"] / plan["scale"])
    verdict: dict[str, Any] = {"result": Result.PASS, "notes": "stand-in: phases slept"}
    phase("reference")
    kept, verdict["reference_cached"] = cached_reference(params, lambda: reference(params, plan))
    return {**verdict, "notes": f"stand-in: phases slept; reference {kept['what']}"}


def run_ranks(params: dict[str, Any], ops: Any) -> Any:
    """Several cores: rank 0 replays the model, the other ranks have nothing to do."""
    return run(params, ops) if os.environ.get("RANK", "0") == "0" else None


def reference(params: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """The CPU reference: fp32 and fp64 where the host holds both (the plugin says so in
    ``fp64_reference``), else fp32 alone, in half the time and a third of the memory."""
    fp64 = params.get("fp64_reference") is not False
    seconds = plan["reference_s"] if fp64 else plan["reference_s"] / 2
    memory = plan["reference_host_bytes"] if fp64 else plan["reference_host_bytes"] // 3
    with held(params, "reference", memory):
        time.sleep(seconds / plan["scale"])
    return {"what": "fp32 and fp64" if fp64 else "fp32"}


def fleet_plan(params: dict[str, Any]) -> dict[str, Any]:
    """The model's phases, from its ``config.json`` (in the Hub's cache since the plan read it)."""
    checkpoint = params["checkpoint"]
    if os.path.isdir(checkpoint):
        path = os.path.join(checkpoint, "config.json")
    else:
        path = hf_hub_download(checkpoint, "config.json", revision=params.get("revision"))
    with open(path, encoding="utf-8") as f:
        return dict(json.load(f)[PLAN_KEY])


@contextmanager
def held(params: dict[str, Any], name: str, host: int) -> Iterator[None]:
    """A phase of the replay: the host memory it holds (bytes) counted in use while it runs,
    and the phase appended to the events file when it ends (its model, cores, memory, when it
    began and ended: ``time.time()``)."""
    event = {"model": params["model_id"], "phase": name, "cores": params["cores"]}
    event.update(host_bytes=int(host), pid=os.getpid(), ppid=os.getppid(), start=time.time())
    in_use(int(host))
    try:
        yield
    finally:
        in_use(-int(host))
    event["end"] = time.time()
    line = (json.dumps(event) + "\n").encode()
    path = os.path.join(os.environ[EVENTS_ENV], "events.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one short write in append mode: never interleaved with another
    finally:
        os.close(fd)


def in_use(change: int) -> None:
    """Add ``change`` bytes to the simulated host memory in use (``HOST_IN_USE``, replaced
    whole under a lock: a reader never sees half of it), which the stand-in host answers from,
    and to this process's own (``HOST_BY_PID/<pid>``: its resident memory, simulated)."""
    if not change:
        return
    folder = os.environ[EVENTS_ENV]
    path = os.path.join(folder, HOST_IN_USE)
    fd = os.open(path + ".lock", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            with open(path, encoding="ascii") as f:
                held_now = int(f.read() or 0)
        except FileNotFoundError:
            held_now = 0
        part = f"{path}.{os.getpid()}"
        with open(part, "w", encoding="ascii") as f:
            f.write(str(held_now + change))
        os.replace(part, path)
        mine = os.path.join(folder, HOST_BY_PID, str(os.getpid()))
        os.makedirs(os.path.dirname(mine), exist_ok=True)
        with open(part, "w", encoding="ascii") as f:
            f.write(str(max(0, held_by(mine) + change)))
        os.replace(part, mine)
    finally:
        os.close(fd)  # and the lock with it


def held_by(path: str) -> int:
    """The simulated host memory one process holds (its file; 0: none)."""
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def warm_up(plan: dict[str, Any]) -> dict[str, Any]:
    """A warm-up entry (one a worker, first in its queue): the worker's imports and its fork
    server are ready; wait until every worker's are, so that the clock starts with them all."""
    folder = Path(os.environ[EVENTS_ENV]) / "warm"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(os.getpid())).touch()
    deadline = time.monotonic() + plan["wait_s"]
    while len(list(folder.iterdir())) < plan["workers"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"result": Result.PASS, "notes": "stand-in: warm-up"}
