"""Sweeps that meet crashes, kills and limits: no recorded row is ever lost or doubled.

The sweep meeting every kind of crash is one of ``timeouts`` (tests/shared_sweeps.py), started
in the background with the ``support`` group's first sweep and read last: its hang's wait for
the timeout overlaps the suite's work."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pytest_neuronsupport.dataset.files import read_dataset
from pytest_neuronsupport.runners.lib.protocol import PHASE_MARK
from tests.shared_sweeps import (
    CRASHES,
    CRASHES_TIMEOUT_S,
    TWO_CORE_LLAMA,
    WAITING,
    copy_of_llama,
)
from tests.sweeping import SharedSweep, Sweep, SweepRunner

#: Real sweeps of real (tiny) models in subprocesses: seconds to minutes each.
pytestmark = pytest.mark.slow

MISBEHAVING = "backends_for_tests:misbehaving_by_model_backend_for_tests"


def test_limit_runs_at_most_n_models_in_list_order(sweep: SweepRunner) -> None:
    done = sweep.run("zoo:llama", "zoo:bert", "zoo:gpt2", args=["--neuron-limit", "2"])
    done.result.assert_outcomes(passed=2, skipped=1)
    assert sorted(done.rows) == ["zoo:bert", "zoo:llama"]
    done.result.stdout.fnmatch_lines(["SKIPPED *models.toml::zoo:gpt2: --neuron-limit 2 reached"])
    # unchanged models do not count: the next sweep runs the one left
    again = sweep.run("zoo:llama", "zoo:bert", "zoo:gpt2", args=["--neuron-limit", "2"])
    again.result.assert_outcomes(passed=1, skipped=2)
    assert sorted(again.rows) == ["zoo:bert", "zoo:gpt2", "zoo:llama"]


def test_limit_holds_across_xdist_workers(sweep: SweepRunner) -> None:
    models = ["zoo:llama", "zoo:bert", "zoo:gpt2", "zoo:bert-mlm"]
    done = sweep.run(*models, args=["--neuron-limit", "2", "-n", "2"])
    done.result.assert_outcomes(passed=2, skipped=2)
    assert len(done.rows) == 2
    skips = [case.find("skipped") for case in done.testcases.values()]
    texts = sorted(skip.text or "" for skip in skips if skip is not None)  # the controller's
    assert [t.split(": ", 1)[1] for t in texts] == ["--neuron-limit 2 reached"] * 2
    assert all(t.startswith("models.toml::zoo:") and ":None:" not in t for t in texts)


@TWO_CORE_LLAMA
def test_a_model_is_sized_by_its_weights_and_excluded_above_the_cap(
    sweep: SweepRunner, two_core_llama: tuple[Sweep, Sweep]
) -> None:
    # zoo:llama-2core holds 8.9 MB of bf16 weights: with 5 MB a core it needs 2 cores (the
    # sweep test_runners reads too)
    done, _ = two_core_llama
    assert done.outcome("zoo:llama-2core") == "passed"
    row = done.row("zoo:llama-2core")
    assert row["neuron_cores"] == 2
    assert row["hbm_capacity_gb"] == pytest.approx(0.01)
    capped = sweep.run(
        "zoo:gpt2",
        "zoo:bert",
        args=["--neuron-core-memory", "0.0001", "--neuron-max-cores", "1"],
    )
    capped.result.assert_outcomes(skipped=2)
    gpt2 = capped.row("zoo:gpt2")
    assert gpt2["result"] == "EXCLUDED" and gpt2["exclusion"] == "too-large"
    assert "at most 1 (--neuron-max-cores 1" in gpt2["notes"]
    assert gpt2["neuron_cores"] is None and gpt2["runner"] is None
    # an encoder runs on one core: too large for one, it is excluded, not sharded
    bert = capped.row("zoo:bert")
    assert bert["exclusion"] == "too-large" and "runs on one core" in bert["notes"]


def journal_lines(results_dir: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (results_dir / "journal").glob("*.jsonl"))


def descendants(pid: int) -> set[int]:
    """The processes ``pid`` started, and theirs (from /proc: each process's parent)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    """Running (not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigkill_of_the_controller_leaves_no_process_and_loses_no_recorded_row(
    sweep: SweepRunner, tmp_path: Path
) -> None:
    """SIGKILL of the controller alone, under xdist, while one worker's run hangs: its
    workers, their fork servers and runs stop (each dies with its parent) at once, not when the
    hang times out, and the rows journaled before the kill are kept."""
    models = ["zoo:qwen3", "zoo:llama", "zoo:bert", "zoo:gpt2", "zoo:bert-mlm"]
    path = sweep.write_list([{"id": m} for m in models])
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--neuron-sweep",
        "--neuron-models",
        str(path),
        "--neuron-backend",
        MISBEHAVING,
        "-p",
        "no:cacheprovider",
        "-q",
        "-n",
        "2",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NEURONSUPPORT_TEST_MISBEHAVIOUR": "zoo:qwen3=hang"}
    proc = subprocess.Popen(
        command,
        cwd=sweep.path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def hanging() -> bool:
        logs = sweep.results.glob("runs/*/*/zoo--qwen3/output.log")
        return any(f"{PHASE_MARK} gen" in log.read_text() for log in logs)

    deadline = time.monotonic() + 240
    while not (journal_lines(sweep.results) >= 2 and hanging()) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = descendants(proc.pid)  # workers, fork servers, the runs going on
    assert len(started) >= 5 and hanging(), started
    os.kill(proc.pid, signal.SIGKILL)  # the controller only
    proc.wait()
    deadline = time.monotonic() + 30  # at once when idle; wide, for a loaded machine
    while any(map(alive, started)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in started if alive(pid)]
    for pid in left:  # not to outlive the test
        os.kill(pid, signal.SIGKILL)
    assert not left, "processes outlived the controller"
    recorded = [
        json.loads(line)["row"]
        for p in (sweep.results / "journal").glob("*.jsonl")
        for line in p.read_text().splitlines()
    ]
    assert len(recorded) >= 2
    assert not list((sweep.results / "data").glob("*/*.parquet"))  # killed before any merge

    again = sweep.run(*models, backend=MISBEHAVING)  # no hang now
    rows = again.rows
    assert sorted(rows) == sorted(models)  # every model exactly once (read_rows checks)
    for row in recorded:  # rows journaled before the kill are intact, and not run again
        assert rows[row["model_id"]]["tested_at"].isoformat() == row["tested_at"]
        assert rows[row["model_id"]]["run_py_sha256"] == row["run_py_sha256"]
    again.result.assert_outcomes(passed=len(models) - len(recorded), skipped=len(recorded))
    assert not list((sweep.results / "journal").glob("*.jsonl"))


def test_a_killed_xdist_worker_costs_its_model_only(
    sweep: SweepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURONSUPPORT_TEST_MISBEHAVIOUR", "zoo:gpt2=kill-worker")
    models = ["zoo:llama", "zoo:gpt2", "zoo:bert", "zoo:bert-mlm"]
    done = sweep.run(*models, backend=MISBEHAVING, args=["-n", "2"])
    gpt2 = done.row("zoo:gpt2")
    assert gpt2["result"] == "FAIL(other)"
    assert "xdist worker running it died" in gpt2["notes"]
    for model in ("zoo:llama", "zoo:bert", "zoo:bert-mlm"):
        assert done.row(model)["result"] == "PASS"
    table = read_dataset(sweep.results)
    assert sorted(table.column("model_id").to_pylist()) == sorted(models)
    assert pq.read_table(next((sweep.results / "data").glob("*/*.parquet"))).num_rows == 4


def test_an_unreadable_dataset_file_is_reported_and_left_untouched(sweep: SweepRunner) -> None:
    """The sweeps before and after bert's record a checkpoint excluded before it runs (its
    config says quantized): a row in the dataset, without a run."""
    quantized = {"quantization_config": {"quant_method": "gptq", "bits": 4}}
    before, after = (
        {"id": f"acme/{name}", "path": str(copy_of_llama(sweep, name, **quantized))}
        for name in ("before", "after")
    )
    sweep.run(before).result.assert_outcomes(skipped=1)
    (parquet,) = (sweep.results / "data").glob("*/*.parquet")
    parquet.write_bytes(b"PAR1 this file was damaged")
    again = sweep.run("zoo:bert")
    again.result.assert_outcomes(passed=1)
    again.result.stdout.fnmatch_lines([f"problem: {parquet} is unreadable and was left untouched*"])
    assert parquet.read_bytes() == b"PAR1 this file was damaged"
    assert list((sweep.results / "journal").glob("*.jsonl"))  # bert's row waits there
    parquet.unlink()
    recovered = sweep.run(after)
    # bert's row, kept in the journal, lands once the damaged file is out of the way
    assert sorted(recovered.rows) == ["acme/after", "zoo:bert"]


@WAITING
def test_every_kind_of_crash_is_fail_other_and_the_sweep_goes_on(
    timeouts: dict[str, SharedSweep],
) -> None:
    done = timeouts["crashes"].wait()  # segfault, abort, hang, memory; bert-mlm runs as it is
    models = [*CRASHES, "zoo:bert-mlm"]
    done.result.assert_outcomes(failed=4, passed=1)
    notes = {m: done.row(m)["notes"] for m in models}
    assert notes["zoo:llama"] == "killed by SIGSEGV during gen"
    assert notes["zoo:gpt2"] == "killed by SIGABRT during gen"
    assert notes["zoo:qwen3"] == f"timed out after {CRASHES_TIMEOUT_S} s during gen"
    assert notes["zoo:bert"].startswith("exceeded the memory limit of 2.5 GB (resident ")
    assert notes["zoo:bert"].endswith("during forward")
    for model in models[:4]:
        row = done.row(model)
        assert row["result"] == "FAIL(other)"
        assert "test-only backend: about to" in row["error"]  # the output's tail is kept
    hung = done.row("zoo:qwen3")["error"].split("\n--- where it hung ---\n")[1]
    assert re.match(r"process \d+, current thread 0x[0-9a-f]+: _misbehave \(backends_", hung)
    assert done.row("zoo:bert-mlm")["result"] == "PASS"
