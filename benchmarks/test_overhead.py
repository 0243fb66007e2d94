"""The project's own benchmarks, under pytest-benchmark.

    pytest benchmarks/ [--benchmark-autosave] [--benchmark-compare] [-k collect]

On the tiny zoo's one-core entries, ``aot_eager`` on the CPU, offline (see ``sweep_overhead.py``
for the bare loop and the list): a whole sweep against a bare in-process loop (a ratio, target
<= 1.2), collecting a 1000-entry list against an empty one (<= 1.5), rendering a ``run.py``,
merging 10,000 rows into a pair file, and the controller's memory growth over 10,000 recorded
rows (<= 50 MB). The sweeps and collections are fresh processes (interpreter start and imports
count on both sides), one round each for the sweeps; the ratios are printed at the end
(``conftest.py``) and kept in each benchmark's ``extra_info``.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from ratios import figure, ratio, target_met
from sweep_overhead import BARE_LOOP, ONE_CORE, one_core_list, timed

from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.merge import merge_journals
from pytest_neuronsupport.modes import ModeOutcome
from pytest_neuronsupport.pipeline.render import RunParams, ScriptPlan, render, sha256
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.session import SweepSession

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
PY = sys.executable
ROWS = 10_000
PAIR = "aot_eager-2.13.0/transformers-5.24.0.parquet"
#: The controller's memory growth over 10,000 rows may be at most this (MB).
MEMORY_TARGET_MB = 50.0


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the zoo built, the one-core list, an empty list and a 1000-entry one."""
    folder = tmp_path_factory.mktemp("bench")
    (folder / "tiny-one-core.toml").write_text(one_core_list())
    (folder / "empty.toml").write_text("# no models\n")
    (folder / "big.toml").write_text(
        "".join(
            f'[[model]]\nid = "acme/model-{i:04d}"\nselection_rank = {i + 1}\n\n'
            for i in range(1000)
        )
    )
    return folder


@pytest.fixture(scope="module")
def cache(work: Path) -> Path:
    folder = work / "cache"
    build = [PY, "-m", "pytest_neuronsupport.cli", "zoo", "build", "--cache", str(folder)]
    subprocess.run(build, check=True, env=ENV, capture_output=True)
    return folder


def pytest_command(work: Path, cache: Path, models: Path, *extra: str) -> list[str]:
    return [
        *(PY, "-m", "pytest", "--neuron-sweep", "--neuron-models", str(models)),
        *("--neuron-backend", "aot_eager", "--neuron-device", "cpu"),
        *("--neuron-cache", str(cache), "--neuron-results", str(work / "results")),
        *("-p", "no:cacheprovider", "-p", "no:benchmark", "-q", *extra),
    ]


def test_bare_loop(benchmark: Any, work: Path, cache: Path) -> None:
    """The same runs as the sweep's, one after the other in one process."""
    command = [PY, "-c", BARE_LOOP, str(cache), str(work / "tiny-one-core.toml")]
    benchmark.pedantic(timed, args=(command, work, ENV), rounds=1, iterations=1)
    figure(benchmark, "bare loop")


def test_sweep(benchmark: Any, work: Path, cache: Path) -> None:
    """A first sweep of the same models: no results, no cached references."""

    def fresh() -> None:
        shutil.rmtree(work / "results", ignore_errors=True)
        shutil.rmtree(cache / "references", ignore_errors=True)

    command = pytest_command(work, cache, work / "tiny-one-core.toml")
    benchmark.pedantic(timed, args=(command, work, ENV), setup=fresh, rounds=1, iterations=1)
    benchmark.extra_info["models"] = len(ONE_CORE)
    figure(benchmark, "sweep")
    ratio(benchmark, "sweep", "bare loop", 1.2)


@pytest.mark.parametrize("listed", ["empty", "big"])
def test_collect(benchmark: Any, work: Path, cache: Path, listed: str) -> None:
    """``--collect-only`` of an empty list, then of a 1000-entry one."""
    command = pytest_command(work, cache, work / f"{listed}.toml", "--collect-only")
    benchmark.pedantic(timed, args=(command, work, ENV), rounds=3, iterations=1)
    figure(benchmark, f"collect {listed}")
    if listed == "big":
        ratio(benchmark, "collect big", "collect empty", 1.5)


def run_py() -> str:
    """The ``run.py`` of a one-core decoder on the CPU."""
    runner = Runners.builtin().get("dense")
    params = RunParams(
        model_id="acme/llama",
        checkpoint="/cache/zoo/llama",
        runner="dense",
        device="cpu",
        backend="aot_eager",
        dtype="float32",
        fullgraph=False,
        prefill_chunk=32,
    )
    plan = ScriptPlan(
        runner_module=runner.module,
        runner_entry=runner.entry_for({}, 1),
        entry="main",
        ops_class="CpuOps",
        runner_column=runner.column,
    )
    return render(params, plan, {"torch": "2.13.0", "transformers": "5.24.0"})


def test_render_run_py(benchmark: Any) -> None:
    text = benchmark(run_py)
    assert "def main(" in text


def support_row(index: int, script: str) -> dict[str, Any]:
    """A support row as a sweep records it, its ``run.py`` included."""
    return {
        "model_id": f"acme/model-{index:05d}",
        "result": "PASS",
        "notes": "32 tokens generated; matches the CPU",
        "runner": "run_dense",
        "tested_at": "2026-12-02T12:00:00+00:00",
        "wall_s": 2.5,
        "graph_breaks": 0,
        "run_py": script,
        "run_py_sha256": sha256(script),
        "device": "cpu",
        "backend": "aot_eager",
    }


def test_merge_10000_rows(benchmark: Any, tmp_path: Path) -> None:
    """10,000 journaled rows merged into one pair file (a new folder each round)."""
    script = run_py()
    rounds = iter(range(1_000_000))

    def journaled() -> tuple[tuple[Path], dict[str, Any]]:
        folder = tmp_path / f"results-{next(rounds)}"
        with Journal(folder) as journal:
            for i in range(ROWS):
                journal.append(PAIR, support_row(i, script), validated=True)
        return (folder,), {}

    report = benchmark.pedantic(merge_journals, setup=journaled, rounds=3, iterations=1)
    assert report.ok and not report.problems


def test_controller_memory_over_10000_rows(
    benchmark: Any, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """What the controller's session keeps of 10,000 recorded rows (Python's allocations,
    ``tracemalloc``), at most 50 MB; the time to record them is the benchmark's."""
    pytester.makefile(".toml", models='[[model]]\nid = "zoo:bert"\n')
    config = pytester.parseconfigure(
        "--neuron-sweep", "--neuron-models", "models.toml", "--neuron-backend", "eager"
    )
    session = config.pluginmanager.get_plugin("neuronsupport-session")
    assert isinstance(session, SweepSession)
    script = run_py()
    grown: list[float] = []

    def record_all() -> None:
        session.rows.clear()
        with Journal(tmp_path / "results") as journal:
            session.journal = journal
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            # each outcome as the controller gets it: rows of its own (a run.py of its own)
            for i in range(ROWS):
                row = support_row(i, f"{script}# model {i}\n")
                session.record([ModeOutcome("support", row["model_id"], [row])])
            gc.collect()
            grown.append((tracemalloc.get_traced_memory()[0] - before) / 2**20)
            tracemalloc.stop()
        session.journal = None

    benchmark.pedantic(record_all, rounds=1, iterations=1)
    assert len(session.rows["support"]) == ROWS
    target_met(benchmark, "controller memory over 10,000 rows", grown[-1], " MB", MEMORY_TARGET_MB)
    assert grown[-1] <= MEMORY_TARGET_MB
