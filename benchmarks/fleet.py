"""A fleet on a simulated trn2.48xlarge: how well a sweep uses the device's cores.

    python benchmarks/fleet.py [--models 1000] [--cores 64] [--workers 0] [--lanes 64]
                               [--nights 2] [--scale 20] [--bandwidth 0.5] [--keep DIR]
                               [-- PYTEST ARGS...]

N models (default 1000) whose sizes follow those of popular Hub text-generation and encoder
models (``fleet_model.BUCKETS``, with their source) go through the real sweep: the real
collection of a generated list, one process with lanes (``--neuron-lanes``) or real xdist
workers (``-n``), the real plan and sizing (each
checkpoint's config is built on the meta device), the real core allocator over its lock file, real
isolation (each run forked from the workers' fork servers, several-core runs launching their
ranks). What is simulated is the device and the models:

* a loopback Hub (the project's MiniHub) serves each model's ``config.json`` and a
  ``model.safetensors`` that holds only a header; a GET of the weights answers after the time
  the checkpoint takes to download at ``--bandwidth`` (scaled down), so a download is wherever
  the plugin makes it happen (today: inside the run, on the lease);
* a stand-in runner (``fleet_runner_for_benchmark.py``) sleeps the compile, the device's run
  and the CPU reference of the fleet's phase model (``fleet_model.phases``), each divided by
  ``--scale``, and appends each phase to an events file with the simulated host memory it holds;
* a stand-in device (``fleet_plugin_for_benchmark.py``): the CPU device with 64 cores of 24 GB
  and a host of 2 TiB, which the plugin's host-memory gate reads (its available and total
  memory, each run's resident memory: what the stand-in runs' phases hold).

The list says each entry's parameter count, as ``neuronsupport select`` writes the Hub's, so
the plugin's order by cost (``--neuron-order cost``, its default) starts the largest first;
``--neuron order=list`` keeps the list's order.

It prints, in simulated seconds (real seconds x ``--scale``), the makespan against its lower
bound (device work: the core-seconds of compiles and device runs / the cores, or the longest
model's device work if larger), the fraction of the leased core time in which the model did
no device work (downloads, references and the sweep's own work between a lease and its run),
and the peak host memory the phases in progress hold against the host's 2 TiB.

The clock starts when every worker has run a warm-up entry (the first of each worker's queue:
its imports, its fork server), so that the workers' start on this 2-core machine (minutes of
imports, which at ``--scale 20`` would be hours simulated) is not in the figure; on the real
host it takes seconds of a sweep of hours. Leases are read from the allocator's file every
``--poll-ms``. Arguments after ``--`` go to pytest (options of features that not every version
of the plugin has: ``-- --neuron-order list``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from fleet_figures import figures, print_schedule, report
from fleet_model import (
    COMPILER_ENV,
    MAX_CORES,
    Model,
    fleet,
    phases,
)

from pytest_neuronsupport.minihub import MiniHub

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
TIB = 1024**4

# --- the checkpoints and the Hub ----------------------------------------------------------------

#: A stand-in checkpoint's config: a one-layer Llama whose embedding holds the rest of the
#: parameters, so that the plugin's sizing (the config built on the meta device) counts them.
HIDDEN = 64
LAYER_PARAMETERS = 4 * HIDDEN * HIDDEN + 3 * HIDDEN * HIDDEN + 2 * HIDDEN + HIDDEN


def config(model: Model, scale: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``config.json`` of a stand-in checkpoint: its size, and its fleet plan for the runner."""
    vocab = max(1, (model.parameters - LAYER_PARAMETERS) // HIDDEN)
    plan = {
        "kind": model.kind,
        "scale": scale,
        "compile_s": model.compile_s,
        "device_s": model.device_s,
        "reference_s": model.reference_s,
        "run_host_bytes": model.run_host_bytes,
        "reference_host_bytes": model.reference_host_bytes,
        **(extra or {}),
    }
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": vocab,
        "tie_word_embeddings": True,
        "fleet_for_benchmark": plan,
    }


def safetensors_header(parameters: int) -> bytes:
    """A ``.safetensors`` file of one bf16 tensor of ``parameters`` elements, header only: its
    size on the Hub is a few bytes; its header says the model's size."""
    header = {
        "weight": {"dtype": "BF16", "shape": [parameters], "data_offsets": [0, 2 * parameters]}
    }
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text


class ThrottledHub(MiniHub):
    """The MiniHub, whose GET of a checkpoint's weights answers after the time the model's
    files take to download (``waits``: real seconds by repo id)."""

    def __init__(self, waits: dict[str, float]) -> None:
        super().__init__()
        self.waits = waits

    def _record(self, method: str, path: str, headers: dict[str, str]) -> None:
        super()._record(method, path, headers)
        if method == "GET" and "/resolve/" in path and path.endswith(".safetensors"):
            time.sleep(self.waits.get(path.split("/resolve/")[0].strip("/"), 0.0))


# --- the leases, read while the sweep runs ------------------------------------------------------


class LeaseWatch(threading.Thread):
    """Reads the allocator's file every ``poll_s``: each lease's cores, holders, and when it was
    first seen and first missing (each late by up to ``poll_s``; a lease's duration is not)."""

    def __init__(self, path: Path, poll_s: float) -> None:
        super().__init__(daemon=True)
        self.path, self.poll_s = path, poll_s
        self.seen: dict[str, dict[str, Any]] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            now = time.time()
            try:
                live = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                live = None  # not yet written, or replaced under us: the next read
            if live is not None:
                tokens = set()
                for lease in live:
                    tokens.add(lease["token"])
                    known = self.seen.setdefault(lease["token"], {"start": now, "end": None})
                    known.update(
                        count=lease["count"], pids=set(lease["pids"]) | known.get("pids", set())
                    )
                for token, known in self.seen.items():
                    if known["end"] is None and token not in tokens:
                        known["end"] = now
            time.sleep(self.poll_s)

    def stop(self) -> None:
        self.stopping.set()
        self.join()
        now = time.time()
        for known in self.seen.values():
            known["end"] = known["end"] or now


# --- the sweep ----------------------------------------------------------------------------------


def warmup_places(total: int, workers: int) -> list[int]:
    """Where in a list of ``total`` entries the warm-ups go so that each worker's queue starts
    with one: pytest-xdist's ``load`` scheduling (3.x) hands each worker, in turn, a chunk of
    consecutive entries (a quarter of its share, at least 2), or the entries one by one round
    the workers when there are fewer than two a worker."""
    if workers <= 1:
        return [0]
    if total < 2 * workers:
        return list(range(workers))
    chunk = max(total // workers // 4, 2)
    return [k * chunk for k in range(workers)]


#: A warm-up entry's declared size: larger than any model's, so that an order by cost starts
#: the warm-ups first too (each worker's first); its checkpoint is 20M parameters.
WARMUP_PARAMETERS = 10**13


def model_list(models: list[Model], warmups: list[str]) -> str:
    """The list: the fleet's models in order, each worker's warm-up first in its queue (in list
    order: at :func:`warmup_places`; by cost: the largest declared size). Each entry says its
    parameter count, as ``neuronsupport select`` writes the Hub's."""
    places = set(warmup_places(len(models) + len(warmups), len(warmups)))
    pending, spare = iter(models), iter(warmups)
    lines = []
    for place in range(len(models) + len(warmups)):
        if place in places:
            lines.append(
                f'[[model]]\nid = "{next(spare)}"\nrunner = "standin_encoder"\n'
                f"parameters = {WARMUP_PARAMETERS}\n"
            )
            continue
        m = next(pending)
        runner = "standin_decoder" if m.kind == "decoder" else "standin_encoder"
        lines.append(
            f'[[model]]\nid = "{m.id}"\nrunner = "{runner}"\nparameters = {m.parameters}\n'
        )
    return "\n".join(lines)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--cores", type=int, default=64, help="the simulated device's cores")
    parser.add_argument("--workers", type=int, default=0, help="xdist workers (-n)")
    parser.add_argument(
        "--lanes",
        type=int,
        default=64,
        help="models a pytest process runs at once (--neuron-lanes; 1: without)",
    )
    parser.add_argument(
        "--nights",
        type=int,
        default=2,
        help="sweeps in turn, each with a new compiler version (every model runs again; its "
        "files and its CPU reference are cached since the first): figures of each",
    )
    parser.add_argument("--scale", type=float, default=20.0, help="simulated s per real s")
    parser.add_argument("--bandwidth", type=float, default=0.5, help="GB/s of a download")
    parser.add_argument("--host-tib", type=float, default=2.0, help="the host's memory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--poll-ms", type=float, default=5.0, help="how often leases are read")
    parser.add_argument("--keep", type=Path, default=None, help="work folder to keep")
    parser.add_argument(
        "--again", type=Path, default=None, help="the figures of a kept work folder, no sweep"
    )
    parser.add_argument(
        "--schedule",
        action="store_true",
        help="no sweep: the makespan the sweep's policy would reach at each -n (modelled: "
        "fleet_schedule.py)",
    )
    parser.add_argument(
        "--neuron",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="--neuron-NAME [VALUE] for the sweep where the plugin has that option (a feature "
        "of a later version: order=list), else skipped, saying so; repeatable",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    return parser.parse_args(argv)


def plugin_options(wanted: list[str]) -> list[str]:
    """``--neuron-NAME VALUE`` of each ``NAME=VALUE`` the plugin has an option for."""
    from pytest_neuronsupport.options import BY_NAME

    given = []
    for item in wanted:
        name, _, value = item.partition("=")
        option = BY_NAME.get(name)
        if option is None:
            print(f"fleet: this plugin has no --neuron-{name}: not passed", file=sys.stderr)
            continue
        given += [f"--neuron-{name}", *([] if option.kind == "flag" else [value])]
    return given


def main() -> None:
    args = arguments()
    if args.schedule:
        models, at_once = (
            fleet(args.models, args.bandwidth, args.seed),
            args.lanes * max(1, args.workers),
        )
        print_schedule(models, args.cores, 0.0, at_once)
        return
    if args.again is not None:  # each night's figures, the first's first
        kept_files = [args.again / "measured.json"]
        kept_files += sorted(
            args.again.glob("measured-night-*.json"), key=lambda p: p.stat().st_mtime
        )
        for path in kept_files:
            measured = json.loads(path.read_text())
            kept = arguments([])
            vars(kept).update(measured["args"], keep=args.again)
            if len(kept_files) > 1:
                print(f"night {measured.get('night', 1)} of {len(kept_files)}")
            analyse(kept, measured)
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="neuronsupport-fleet-"))
    warn_of_slow_imports()
    for measured in sweep(args, work):
        k = measured["night"]
        name = "measured.json" if k == 1 else f"measured-night-{k}.json"
        (work / name).write_text(json.dumps(measured, default=sorted))
        if args.nights > 1:
            print(f"night {measured['night']} of {args.nights}")
        analyse(args, measured)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


def warn_of_slow_imports() -> None:
    """A venv installed without bytecode, under ``PYTHONDONTWRITEBYTECODE``, compiles torch's
    sources in every process that imports it (~20 s of CPU here, each worker and fork server)."""
    import importlib.util

    found = importlib.util.find_spec("torch")
    origin = found.origin if found else None
    if origin and not Path(importlib.util.cache_from_source(origin)).exists():
        print(
            "warning: torch has no bytecode; every worker compiles its sources (run "
            "`python -m compileall -q <venv>/lib/python3.*/site-packages` once)",
            file=sys.stderr,
        )


def sweep(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Serve the fleet, sweep it ``args.nights`` times, and return what was measured each time
    (the leases, the clock)."""
    workers = max(1, args.workers)
    shutil.rmtree(work, ignore_errors=True)
    (work / "events").mkdir(parents=True)
    models = fleet(args.models, args.bandwidth, args.seed)
    warmups = [f"fleet/warmup-{k:02d}" for k in range(workers)]
    hub = ThrottledHub({m.id: m.download_s / args.scale for m in models})
    for m in [*models, *(phases(w, "encoder", 20_000_000, args.bandwidth) for w in warmups)]:
        extra = {"kind": "warmup", "workers": workers, "wait_s": 3600} if m.id in warmups else None
        files = {
            "config.json": json.dumps(config(m, args.scale, extra)).encode(),
            "model.safetensors": safetensors_header(m.parameters),
        }
        hub.add_model(m.id, files=files, pipeline_tag="text-generation")
    (work / "fleet.toml").write_text(model_list(models, warmups))
    offline = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in offline}
    with hub:
        env.update(
            HF_ENDPOINT=hub.url,
            HF_HOME=str(work / "hf"),
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_XET="1",
            # the Hub answers a download after its time: a 140 GB model's is minutes
            HF_HUB_DOWNLOAD_TIMEOUT="3600",
            PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
            FLEET_EVENTS_FOR_BENCHMARK=str(work / "events"),
            FLEET_CORES_FOR_BENCHMARK=str(args.cores),
            FLEET_HOST_BYTES_FOR_BENCHMARK=str(int(args.host_tib * TIB)),
        )
        command = [
            *(sys.executable, "-m", "pytest", "--neuron-sweep"),
            *("--neuron-models", str(work / "fleet.toml")),
            *("--neuron-device", "cpu", "--neuron-backend", "aot_eager", "--neuron-dtype"),
            "bfloat16",  # as on the device: the host-memory gate's estimate counts bf16 weights
            *("--neuron-judge", "none", "--neuron-max-cores", str(MAX_CORES)),
            *("--neuron-timeout", "3600", "--neuron-cache", str(work / "cache")),
            *("--neuron-results", str(work / "results"), "--neuron-leases", str(work / "leases")),
            *("-p", "fleet_plugin_for_benchmark", "-p", "no:cacheprovider", "-q"),
            *(["-n", str(args.workers)] if args.workers else []),
            *plugin_options([f"lanes={args.lanes}"] if args.lanes > 1 else []),
            *plugin_options(args.neuron),
            *args.pytest_args,
        ]
        return [night(args, work, command, env, k) for k in range(1, args.nights + 1)]


def night(
    args: argparse.Namespace, work: Path, command: list[str], env: dict[str, str], k: int
) -> dict[str, Any]:
    """The ``k``-th sweep of the fleet, with the ``k``-th compiler version (every model's pair
    is new: all run again; their files and CPU references are in the caches since the
    first): what was measured."""
    events = work / "events"
    if k > 1:  # the last night's events apart, the warm-ups again
        (events / "events.jsonl").rename(events / f"events-night-{k - 1}.jsonl")
        shutil.rmtree(events / "warm", ignore_errors=True)
    env = {**env, COMPILER_ENV: f"night-{k}"}
    watch = LeaseWatch(work / "leases" / "cpu.json", args.poll_ms / 1000)
    watch.start()
    started = time.time()
    log_path = work / ("pytest.log" if k == 1 else f"pytest-night-{k}.log")
    with log_path.open("w") as log:
        done = subprocess.run(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    wall = time.time() - started
    watch.stop()
    tail = log_path.read_text().strip().splitlines()[-3:]
    if done.returncode not in (0, 1):
        why = f"the sweep failed ({done.returncode}); see {log_path}:\n"
        sys.exit(why + "\n".join(tail))
    warm_dir = events / "warm"
    warm = [p.stat().st_mtime for p in warm_dir.iterdir()] if warm_dir.is_dir() else []
    return {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "night": k,
        "summary": tail[-1],
        "started": started,
        "wall_s": wall,
        "t0": max(warm, default=started),
        "warm": len(warm),
        "workers": max(1, args.workers),
        "leases": watch.seen,
        "events": (events / "events.jsonl").read_text(),
    }


def analyse(args: argparse.Namespace, measured: dict[str, Any]) -> None:
    models = fleet(args.models, args.bandwidth, args.seed)
    events = [json.loads(line) for line in measured["events"].splitlines()]
    found = figures(models, events, measured["leases"], measured["t0"], args)
    report(models, found, args, {**measured, "warm_s": measured["t0"] - measured["started"]})


if __name__ == "__main__":
    main()
