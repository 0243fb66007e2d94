"""Running scripts isolated and classifying how they ended: real processes, real signals."""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
from pathlib import Path
from typing import Protocol

import pytest

from pytest_neuronsupport.pipeline.classify import ran as classify
from pytest_neuronsupport.pipeline.isolate import (
    ISOLATIONS,
    Executor,
    ForkServerExecutor,
    Outcome,
    RunRequest,
    SubprocessExecutor,
)
from pytest_neuronsupport.runners.lib.processes import COMPILE_THREADS_ENV

PHASE = "[neuronsupport] phase:"


@pytest.fixture(scope="module", params=sorted(ISOLATIONS))
def executor(request: pytest.FixtureRequest) -> Executor:
    """Every test runs under both isolations: forked from the warm server, and fresh."""
    return ISOLATIONS[request.param]()


class Runner(Protocol):
    def __call__(
        self,
        body: str,
        timeout_s: float = 300.0,  # wide: a loaded machine starts the fork server slowly
        max_memory_gb: float | None = None,
        cpus: list[int] | None = None,
    ) -> Outcome: ...


@pytest.fixture
def run(executor: Executor, tmp_path: Path) -> Runner:
    """Run a script's text (dedented) as run.py in tmp_path, with the executor under test."""

    def run_body(
        body: str,
        timeout_s: float = 300.0,  # wide: a loaded machine starts the fork server slowly
        max_memory_gb: float | None = None,
        cpus: list[int] | None = None,
    ) -> Outcome:
        script = tmp_path / "run.py"
        script.write_text(textwrap.dedent(body))
        request = RunRequest(
            script=script,
            cwd=tmp_path,
            env=dict(os.environ),
            verdict_path=tmp_path / "verdict.json",
            log_path=tmp_path / "output.log",
            timeout_s=timeout_s,
            max_memory_gb=max_memory_gb,
            cpus=cpus,
        )
        return executor.run(request)

    return run_body


VERDICT = """
    import json, sys
    print("{phase} load", flush=True)
    path = sys.argv[sys.argv.index("--result") + 1]
    verdict = {{"result": "FAIL(output)", "cpu_match": "N at token 3", "runner": "dense",
               "first_divergence": 3, "tokens": [1, 2], "check": {{"rule": "tokens"}}}}
    open(path, "w").write(json.dumps(verdict))
"""


def test_a_verdict_becomes_row_fields_and_extra_numbers_go_to_check(
    run: Runner, tmp_path: Path
) -> None:
    outcome = run(VERDICT.format(phase=PHASE))
    assert outcome.returncode == 0 and outcome.phase == "load"
    fields = classify(outcome)
    assert fields["result"] == "FAIL(output)"
    assert fields["first_divergence"] == 3 and fields["cpu_match"] == "N at token 3"
    assert json.loads(fields["check"]) == {"rule": "tokens", "tokens": [1, 2]}
    assert "tokens" not in fields


def test_a_verdict_followed_by_a_crash_at_exit_stands(run: Runner, tmp_path: Path) -> None:
    body = VERDICT.format(phase=PHASE) + "\n    import os; os.abort()\n"
    fields = classify(run(body))
    assert fields["result"] == "FAIL(output)"
    assert json.loads(fields["check"])["exit_after_verdict"] == "killed by SIGABRT during load"


def test_an_uncaught_exception_is_fail_other_with_its_last_line(
    run: Runner, tmp_path: Path
) -> None:
    body = f"""
        print("{PHASE} gen", flush=True)
        raise ValueError("boom in the runner")
    """
    fields = classify(run(body))
    assert fields["result"] == "FAIL(other)"
    assert fields["notes"] == "exited with status 1 during gen: ValueError: boom in the runner"
    assert "Traceback (most recent call last)" in fields["error"]


def test_a_segfault_is_fail_other_naming_the_signal_and_phase(run: Runner, tmp_path: Path) -> None:
    body = f"""
        import os, signal
        print("{PHASE} forward", flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    """
    fields = classify(run(body))
    assert fields["notes"] == "killed by SIGSEGV during forward"


def test_a_sigkill_is_reported_as_a_likely_out_of_memory(run: Runner, tmp_path: Path) -> None:
    body = """
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
    """
    assert classify(run(body))["notes"] == "killed by SIGKILL (out of memory?)"


@pytest.mark.slow  # waits for a 4 s timeout, twice
def test_a_hang_is_stopped_with_everything_it_started(run: Runner, tmp_path: Path) -> None:
    body = f"""
        import subprocess, sys, time
        print("{PHASE} gen", flush=True)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open("child.pid", "w").write(str(child.pid))
        time.sleep(600)
    """
    # the fork server's start (its imports, seconds on a busy machine) is not the run's: before
    # the clock, so that the 4 s are the hang's alone (it prints its phase within milliseconds
    # of its start, a fresh interpreter's included), however busy the machine
    assert run("pass\n", timeout_s=600).returncode == 0
    started = time.monotonic()
    outcome = run(body, timeout_s=4)
    assert time.monotonic() - started < 300  # stopped, not waited for (600 s)
    fields = classify(outcome)
    assert fields["result"] == "FAIL(other)"
    assert fields["notes"] == "timed out after 4 s during gen"
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists():
        time.sleep(0.05)  # reaped by init once killed
    status = Path(f"/proc/{child}/status")
    assert not status.exists() or "zombie" in status.read_text()


@pytest.mark.slow  # waits for an 8 s timeout, twice
def test_a_hang_says_where_each_of_its_processes_hung(run: Runner) -> None:
    """The run's entry asks for stacks on request (as run.py's does); the process it forked
    inherits that. The row's error: the output's tail, then a line a thread, the run's first."""
    body = f"""
        import multiprocessing, time
        from pytest_neuronsupport.runners.lib.processes import stacks_on_request

        def stuck_in_the_child(ready):
            ready.set()
            time.sleep(600)

        def stuck_in_the_run():
            time.sleep(600)

        stacks_on_request()
        print("{PHASE} gen", flush=True)
        fork = multiprocessing.get_context("fork")
        ready = fork.Event()
        fork.Process(target=stuck_in_the_child, args=(ready,)).start()
        ready.wait()
        stuck_in_the_run()
    """
    assert run("pass\n", timeout_s=600).returncode == 0  # the fork server's start: not timed
    fields = classify(run(body, timeout_s=8))
    assert fields["result"] == "FAIL(other)"
    assert fields["notes"] == "timed out after 8 s during gen"
    tail, hung = fields["error"].split("\n--- where it hung ---\n")
    assert tail.endswith(f"--- output tail ---\n{PHASE} gen\n")  # its output, not its stacks
    lines = hung.splitlines()
    assert len(lines) == 2, hung  # a thread each (the child's, forked, shows as current)
    run_line, child_line = lines
    thread = r"process \d+, current thread 0x[0-9a-f]+: "
    assert re.match(thread + r"stuck_in_the_run \(run\.py:\d+\) < <module> \(run\.py:", run_line)
    assert re.match(thread + r"stuck_in_the_child \(run\.py:\d+\) < run \(process\.py:", child_line)
    assert run_line.split(",")[0] != child_line.split(",")[0]


def test_a_stale_verdict_from_an_earlier_run_is_not_reused(run: Runner, tmp_path: Path) -> None:
    (tmp_path / "verdict.json").write_text(json.dumps({"result": "PASS"}))
    fields = classify(run("raise SystemExit(3)\n"))
    assert fields["result"] == "FAIL(other)"
    assert fields["notes"] == "exited with status 3"


def test_a_run_past_its_memory_limit_is_stopped(run: Runner, tmp_path: Path) -> None:
    body = f"""
        import time
        print("{PHASE} load", flush=True)
        hog = bytearray(1_500_000_000)
        for i in range(0, len(hog), 4096):
            hog[i] = 1
        time.sleep(600)
    """
    outcome = run(body, max_memory_gb=0.8, timeout_s=900)
    fields = classify(outcome)
    assert fields["result"] == "FAIL(other)"
    assert fields["notes"].startswith("exceeded the memory limit of 0.8 GB (resident ")
    assert fields["notes"].endswith(" GB) during load")
    assert outcome.wall_s < 300  # stopped, not waited for (600 s)
    assert (outcome.peak_rss_gb or 0) >= 0.8


def test_a_run_is_pinned_to_its_cpus(run: Runner, tmp_path: Path) -> None:
    first = sorted(os.sched_getaffinity(0))[:1]
    body = """
        import os, torch
        print(sorted(os.sched_getaffinity(0)), torch.get_num_threads(), flush=True)
    """
    outcome = run(body, cpus=first)
    assert outcome.returncode == 0, outcome.log_tail
    assert outcome.log_tail.split() == [str(first), "1"]


def test_an_unpinned_run_computes_with_the_threads_its_environment_gives(
    executor: Executor, tmp_path: Path
) -> None:
    """A reference's pass holds no core: its threads are its share of the host
    (``OMP_NUM_THREADS``), forked from a server whose torch took every CPU or started fresh;
    so are inductor's compile workers (``TORCHINDUCTOR_COMPILE_THREADS``), which the server's
    inductor sized by the host's CPUs when it was imported."""
    script = tmp_path / "run.py"
    script.write_text(
        "import torch, torch._inductor.config as inductor\n"
        "print(torch.get_num_threads(), inductor.compile_threads, flush=True)\n"
    )
    one = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", COMPILE_THREADS_ENV: "1"}
    request = RunRequest(
        script=script,
        cwd=tmp_path,
        env={**os.environ, **one},
        verdict_path=tmp_path / "verdict.json",
        log_path=tmp_path / "output.log",
        timeout_s=300.0,  # wide: a loaded machine starts the fork server slowly
    )
    outcome = executor.run(request)
    assert outcome.returncode == 0, outcome.log_tail
    assert outcome.log_tail.split() == ["1", "1"]


def test_a_forked_run_starts_with_torch_imported_and_no_device_runtime(
    run: Runner, executor: Executor
) -> None:
    """A run forked from the warm server pays no import of torch or transformers, and finds
    no device runtime started (it pins its cores first)."""
    if not isinstance(executor, ForkServerExecutor):
        pytest.skip("the fork server's property")
    body = """
        import sys
        import torch
        print(*(name in sys.modules for name in ("torch", "transformers", "torch_neuronx")))
        print(torch.cuda.is_initialized())
    """
    assert run(body).log_tail.split() == ["True", "True", "False", "False"]


def test_ready_returns_once_the_fork_server_has_imported_torch() -> None:
    """Before a lease the sweep waits for its executor (``ready``): the fork server is then up
    with torch loaded, so a run's cores never wait for its start; a fresh interpreter has
    nothing to start."""
    from multiprocessing import forkserver

    SubprocessExecutor().ready()
    ForkServerExecutor().ready()
    pid = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    assert pid is not None
    assert "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def test_the_isolation_option_offers_every_isolation() -> None:
    """The option's choices are the executors' names (the options module does not import the
    executors: they are imported only for a sweep)."""
    from pytest_neuronsupport import options

    assert set(options.BY_NAME["isolation"].choices or ()) == set(ISOLATIONS)
