"""The sweep's own overhead, as ratios measured in one run on this machine.

    python benchmarks/sweep_overhead.py [--repeat N] [--keep DIR]

On the tiny zoo (the one-core entries of ``model_lists/tiny.toml``: a bare loop in one process
cannot run the 2-core ones as ranks) with the ``aot_eager`` backend on the CPU, offline:

1. a whole sweep / a bare in-process loop running the same runs (target <= 1.2)
2. a second sweep with nothing changed / the first (target <= 0.05)
3. a ``--neuron-rerun`` sweep, references cached / the first (target <= 0.6)
4. ``-n 2`` / ``-n 0`` (target <= 0.6); also on a list three times as long (each zoo model
   three times, under other ids), to show how the workers' fixed start-up cost amortizes
5. collecting a 1000-entry list / collecting an empty list (target <= 1.5)

Every figure is the wall time of a fresh process (``python -m pytest ...`` or ``python -c``),
so interpreter start and imports count on both sides. The zoo is built once beforehand; each
"first" sweep starts with no results and no cached references. With ``--repeat N`` each
measurement is taken N times and the median is used.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pytest_neuronsupport.modellist import parse

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "model_lists" / "tiny.toml"

# The same runs in one process: each model planned, compiled and checked by the runner's code.
# torch._dynamo.reset() before each, as a fresh process has: otherwise dynamo's per-code-object
# cache (shared by every model's transformers wrappers) hits its recompile limit after a few
# models and silently runs the rest eagerly, uncompiled.
BARE_LOOP = """
import sys, importlib
from pathlib import Path
import torch._dynamo
from pytest_neuronsupport.modellist import parse
from pytest_neuronsupport.pipeline.plan import plan
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.runners.lib.device_ops import CpuOps
runners = Runners.builtin()
cache = Path(sys.argv[1])
for spec in parse(Path(sys.argv[2])):
    torch._dynamo.reset()
    planned = plan(spec, cache, runners)
    module = importlib.import_module(planned.runner.module)
    run = getattr(module, planned.runner.entry_for(planned.config, 1))
    params = {"model_id": spec.id, "checkpoint": planned.checkpoint,
              "runner": planned.runner.name, "device": "cpu", "backend": "aot_eager",
              "dtype": "float32", "fullgraph": False, "cores": 1, "revision": None,
              "prefill_chunk": 32, "judge": None}
    verdict = run(params, CpuOps())
    assert verdict["result"] == "PASS", (spec.id, verdict)
"""


ONE_CORE = [spec for spec in parse(BUNDLED) if spec.cores is None]


def one_core_list() -> str:
    """The bundled tiny list without its entries that ask for several cores."""
    return "".join(
        f'[[model]]\nid = "{spec.id}"\n'
        + (f'runner = "{spec.runner}"\n' if spec.runner else "")
        + "\n"
        for spec in ONE_CORE
    )


def zoo_dirs(cache: Path) -> dict[str, Path]:
    """The built checkpoint folder of each one-core model of the tiny list."""
    from pytest_neuronsupport import zoo

    return {
        s.id.removeprefix("zoo:"): zoo.ensure_built(s.id.removeprefix("zoo:"), cache)
        for s in ONE_CORE
    }


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 5):  # 5: no tests collected (the empty list)
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


def median_of(repeat: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--keep", type=Path, default=None, help="work folder to keep")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="neuronsupport-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "cache"
    tiny = work / "tiny-one-core.toml"
    tiny.write_text(one_core_list())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    py = sys.executable
    subprocess.run(
        [py, "-m", "pytest_neuronsupport.cli", "zoo", "build", "--cache", str(cache)],
        check=True,
        env=env,
        capture_output=True,
    )

    def sweep(results: str, *extra: str) -> float:
        command = [
            py,
            "-m",
            "pytest",
            "--neuron-sweep",
            "--neuron-models",
            str(tiny),
            "--neuron-backend",
            "aot_eager",
            "--neuron-device",
            "cpu",
            "--neuron-cache",
            str(cache),
            "--neuron-results",
            str(work / results),
            "-p",
            "no:cacheprovider",
            "-q",
            *extra,
        ]
        return timed(command, work, env)

    def fresh(results: str) -> None:
        shutil.rmtree(work / results, ignore_errors=True)
        shutil.rmtree(cache / "references", ignore_errors=True)

    def first_sweep(results: str = "results", *extra: str) -> float:
        fresh(results)
        return sweep(results, *extra)

    def bare() -> float:
        return timed([py, "-c", BARE_LOOP, str(cache), str(tiny)], work, env)

    figures: dict[str, float] = {}
    figures["bare loop"] = median_of(args.repeat, bare)
    figures["first sweep (-n 0)"] = median_of(args.repeat, first_sweep)
    figures["unchanged sweep"] = median_of(args.repeat, lambda: sweep("results"))
    figures["--neuron-rerun sweep"] = median_of(
        args.repeat, lambda: sweep("results", "--neuron-rerun")
    )
    figures["first sweep -n 2"] = median_of(
        args.repeat, lambda: first_sweep("results-n2", "-n", "2")
    )

    long_list = work / "tiny-x3.toml"
    long_list.write_text(
        "".join(
            f'[[model]]\nid = "acme/{name}-{copy}"\npath = "{folder}"\n\n'
            for copy in range(3)
            for name, folder in zoo_dirs(cache).items()
        )
    )
    figures["x3 list, -n 0"] = median_of(
        args.repeat, lambda: first_sweep("results-x3", "--neuron-models", str(long_list))
    )
    figures["x3 list, -n 2"] = median_of(
        args.repeat,
        lambda: first_sweep("results-x3n2", "--neuron-models", str(long_list), "-n", "2"),
    )

    lists = work / "lists"
    lists.mkdir(exist_ok=True)
    (lists / "empty.toml").write_text("# no models\n")
    (lists / "big.toml").write_text(
        "".join(
            f'[[model]]\nid = "acme/model-{i:04d}"\nselection_rank = {i + 1}\n\n'
            for i in range(1000)
        )
    )

    def collect(name: str) -> float:
        command = [
            py,
            "-m",
            "pytest",
            "--neuron-sweep",
            "--neuron-models",
            str(lists / name),
            "--neuron-cache",
            str(cache),
            "--neuron-results",
            str(work / "collect"),
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
        ]
        return timed(command, work, env)

    figures["collect empty list"] = median_of(max(3, args.repeat), lambda: collect("empty.toml"))
    figures["collect 1000 entries"] = median_of(max(3, args.repeat), lambda: collect("big.toml"))

    first = figures["first sweep (-n 0)"]
    ratios = [
        ("sweep / bare in-process loop", first / figures["bare loop"], 1.2),
        ("unchanged sweep / first", figures["unchanged sweep"] / first, 0.05),
        (
            "--neuron-rerun (cached references) / first",
            figures["--neuron-rerun sweep"] / first,
            0.6,
        ),
        ("-n 2 / -n 0", figures["first sweep -n 2"] / first, 0.6),
        (
            f"-n 2 / -n 0, list x3 ({3 * len(ONE_CORE)} runs)",
            figures["x3 list, -n 2"] / figures["x3 list, -n 0"],
            0.6,
        ),
        (
            "collect 1000 entries / collect empty",
            figures["collect 1000 entries"] / figures["collect empty list"],
            1.5,
        ),
    ]
    print(
        f"machine: {os.cpu_count()} cores; {len(ONE_CORE)} "
        f"tiny models; aot_eager on cpu; median of {args.repeat}"
    )
    for name, seconds in figures.items():
        print(f"  {name:<28} {seconds:8.2f} s")
    print(f"{'ratio':<46} {'measured':>8} {'target':>8}")
    for name, value, target in ratios:
        mark = "ok" if value <= target else "MISSED"
        print(f"{name:<46} {value:8.3f} {'<= ' + str(target):>8}  {mark}")
    print(json.dumps({"seconds": figures, "ratios": {n: round(v, 4) for n, v, _ in ratios}}))
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
