"""``--neuron-lanes``: several models at once in one pytest process (pytest_neuronsupport/lanes.py).

The sweeps here are real sweeps of tiny zoo models whose runs meet: each waits at its compile
until another run has come too (``meet``, tests/backends_for_tests.py), which only models
running at once can do, whatever the machine's load."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport.dataset.layout import phase_file, phases_dir
from pytest_neuronsupport.progress import PhaseMarks, read_running
from pytest_neuronsupport.runners.lib.warned import FILTERS, SharedFilters, library_warnings
from tests.backends_for_tests import MEET_ENV, MEET_WITHIN_ENV
from tests.sweeping import SweepRunner

MISBEHAVING = "backends_for_tests:misbehaving_by_model_backend_for_tests"


def meeting(tmp_path: Path, how: dict[str, str], within_s: float = 300) -> dict[str, str]:
    """The environment of a sweep whose models misbehave as ``how`` says (meet, hang...)."""
    return {
        "NEURONSUPPORT_TEST_MISBEHAVIOUR": ",".join(f"{m}={h}" for m, h in how.items()),
        MEET_ENV: str(tmp_path / "met"),
        MEET_WITHIN_ENV: str(within_s),
    }


@pytest.mark.slow
def test_two_lanes_run_two_models_at_once_and_report_each_as_it_ends(
    sweep: SweepRunner, tmp_path: Path
) -> None:
    """zoo:bert and zoo:gpt2 each go on only once the other is running too; zoo:llama, listed
    first and larger, starts first and ends while they wait for each other."""
    env = meeting(tmp_path, {"zoo:bert": "meet", "zoo:gpt2": "meet"})
    entries = [
        {"id": "zoo:bert", "parameters": 10**6},
        {"id": "zoo:llama", "parameters": 10**8},
        {"id": "zoo:gpt2", "parameters": 10**6},
    ]
    done = sweep.run(*entries, backend=MISBEHAVING, args=["--neuron-lanes", "2"], env=env)
    done.result.assert_outcomes(passed=3)
    assert {m: r["result"] for m, r in done.rows.items()} == dict.fromkeys(
        ["zoo:bert", "zoo:gpt2", "zoo:llama"], "PASS"
    )
    assert len(list((tmp_path / "met").iterdir())) == 2  # both runs came to the meeting
    assert list(done.testcases) == ["zoo:bert", "zoo:llama", "zoo:gpt2"]  # junit: list order


@pytest.mark.slow
def test_one_lane_runs_one_model_at_a_time(sweep: SweepRunner, tmp_path: Path) -> None:
    """The same meeting without lanes: the first to come waits alone and fails, and the
    second, alone too, fails: what the test above passes is its lanes."""
    env = meeting(tmp_path, {"zoo:bert": "meet", "zoo:gpt2": "meet"}, within_s=2)
    done = sweep.run("zoo:bert", "zoo:gpt2", backend=MISBEHAVING, env=env)
    bert = done.row("zoo:bert")
    assert bert["result"] == "FAIL(forward)"
    assert "no other run came" in bert["error"]


@pytest.mark.slow
def test_a_sweep_that_stops_stops_its_lanes_and_records_no_row_of_theirs(
    sweep: SweepRunner, tmp_path: Path
) -> None:
    """``-x``: zoo:gpt2 fails at once while zoo:llama hangs in the other lane, with a timeout
    of an hour: the sweep stops, and stops the hanging run at once, without a row."""
    env = meeting(tmp_path, {"zoo:gpt2": "raise", "zoo:llama": "hang"})
    entries = [{"id": "zoo:llama", "parameters": 10**8}, {"id": "zoo:gpt2", "parameters": 10**6}]
    args = ["--neuron-lanes", "2", "-x", "--neuron-timeout", "3600"]
    done = sweep.start(*entries, backend=MISBEHAVING, args=args, env=env).wait(timeout=600)
    assert done.result.ret == pytest.ExitCode.TESTS_FAILED
    assert done.row("zoo:gpt2")["result"].startswith("FAIL")
    assert "zoo:llama" not in done.rows  # stopped, not a verdict: no row
    assert "zoo:llama" not in done.testcases
    done.result.stdout.fnmatch_lines(["*stopping after 1 failures*"])


#: A conftest: zoo:gpt2's report goes on only once zoo:bert's lane has ended. zoo:bert waits at
#: its meeting (``meet``) for a second comer: the file touched here, as zoo:gpt2 is reported, is
#: it. Then the sweep stops, zoo:bert finished and not yet reported: by the -x that zoo:gpt2's
#: failure sets, or by a Ctrl-C here (``NEURONSUPPORT_TEST_CTRL_C``), which interrupts
#: zoo:gpt2's report.
WAITS_FOR_BERT = """
import os
import signal
from pathlib import Path

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.name == "zoo:gpt2":
        meeting = Path(os.environ["NEURONSUPPORT_TEST_MEET"])
        meeting.mkdir(parents=True, exist_ok=True)
        (meeting / "zoo:gpt2 reported").touch()
        bert = next(other for other in item.session.items if other.name == "zoo:bert")
        bert.ahead.exception(timeout=600)
        if os.environ.get("NEURONSUPPORT_TEST_CTRL_C"):
            os.kill(os.getpid(), signal.SIGINT)
"""


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["-x", "ctrl-c"])
def test_a_sweep_that_stops_records_each_model_whose_lane_had_ended(
    sweep: SweepRunner, tmp_path: Path, stop: str
) -> None:
    """zoo:gpt2 fails at once; zoo:bert's lane ends while zoo:gpt2 is reported
    (:data:`WAITS_FOR_BERT`); the sweep stops (``-x``, or a Ctrl-C during zoo:gpt2's report):
    zoo:bert, finished, has its row and its junit case all the same."""
    sweep.makeconftest(WAITS_FOR_BERT)
    env = meeting(tmp_path, {"zoo:gpt2": "raise", "zoo:bert": "meet"})
    args = ["--neuron-lanes", "2", "-x"]
    if stop == "ctrl-c":  # in a process of its own: the interrupt is the sweep's alone
        env["NEURONSUPPORT_TEST_CTRL_C"] = "1"
        done = sweep.start("zoo:gpt2", "zoo:bert", backend=MISBEHAVING, args=args, env=env).wait()
    else:
        done = sweep.run("zoo:gpt2", "zoo:bert", backend=MISBEHAVING, args=args, env=env)
    assert done.row("zoo:bert")["result"] == "PASS"
    assert done.outcome("zoo:bert") == "passed"
    if stop == "ctrl-c":  # zoo:gpt2 was being reported: interrupted, as without lanes
        assert done.result.ret == pytest.ExitCode.INTERRUPTED
        assert list(done.rows) == list(done.testcases) == ["zoo:bert"]
        return
    assert done.result.ret == pytest.ExitCode.TESTS_FAILED
    assert done.row("zoo:gpt2")["result"].startswith("FAIL")
    assert done.outcome("zoo:gpt2") == "failed"
    done.result.stdout.fnmatch_lines(["*stopping after 1 failures*"])


@pytest.mark.slow
def test_each_xdist_worker_runs_its_models_in_lanes(sweep: SweepRunner, tmp_path: Path) -> None:
    """``-n 2 --neuron-lanes 2``: xdist's ``load`` sends each worker two models in a row (the
    lists' order here); zoo:bert and zoo:bert-mlm go on only once a run of their own worker is
    at their meeting too (``meet-in-worker``), which only a worker with lanes can have."""
    env = meeting(tmp_path, {"zoo:bert": "meet-in-worker", "zoo:bert-mlm": "meet-in-worker"})
    models = ["zoo:bert", "zoo:bert-mlm", "zoo:distilbert-sst", "zoo:roberta-qa"]
    args = ["-n", "2", "--neuron-lanes", "2", "--neuron-order", "list"]
    done = sweep.run(*models, backend=MISBEHAVING, args=args, env=env)
    done.result.assert_outcomes(passed=4)
    assert {m: r["result"] for m, r in done.rows.items()} == dict.fromkeys(models, "PASS")
    (worker,) = (tmp_path / "met").iterdir()  # one worker's meeting, where both runs came
    assert len(list(worker.iterdir())) == 2
    assert list(done.testcases) == models  # junit: list order


def test_lanes_under_xdist_worksteal_are_refused(pytester: pytest.Pytester) -> None:
    args = ["--neuron-sweep", "--neuron-lanes", "2", "-n", "2", "--dist", "worksteal"]
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: neuronsupport: --neuron-lanes 2 with --dist worksteal: an idle xdist worker *"]
    )
    result = pytester.runpytest("--neuron-sweep", "--neuron-lanes", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--neuron-lanes must be positive, not 0*"])


def test_lanes_start_the_largest_first(sweep: SweepRunner) -> None:
    entries = [{"id": f"zoo:{m}", "parameters": p} for m, p in [("bert", 1), ("gpt2", 9)]]
    listed = sweep.run(*entries, args=["--collect-only", "-q"])
    laned = sweep.run(*entries, args=["--collect-only", "-q", "--neuron-lanes", "2"])
    assert next(ln for ln in listed.result.outlines if "::" in ln).endswith("zoo:bert")
    assert next(ln for ln in laned.result.outlines if "::" in ln).endswith("zoo:gpt2")


def test_each_lane_marks_the_phases_of_its_own_model(tmp_path: Path) -> None:
    marks = PhaseMarks(lambda m: phase_file(tmp_path, "s", m), clock=lambda: 1.0)
    in_b, marked = threading.Event(), threading.Event()

    def lane_b() -> None:
        with marks.running("zoo:b"):
            in_b.set()
            marked.wait(30)
            marks.mark("gen")

    other = threading.Thread(target=lane_b)
    other.start()
    in_b.wait(30)
    with marks.running("zoo:a"):
        marks.mark("plan")
        marked.set()
        other.join(30)
        steps = {r.model_id: r.phase for r in read_running(phases_dir(tmp_path, "s"), 2.0)}
    assert steps == {"zoo:a": "plan"}  # zoo:b ended: its file went; its mark was its own
    assert marks.current is None


def test_a_lanes_library_warning_is_shown_under_an_error_filter() -> None:
    filters = SharedFilters()
    seen: list[Any] = []

    def lane() -> None:
        try:
            warnings.warn("a library's warning", UserWarning, stacklevel=1)
            seen.append("shown")
        except UserWarning:
            seen.append("raised")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error")
        with filters.among_threads():
            warnings.simplefilter("always", UserWarning)  # recorded, each time
            thread = threading.Thread(target=lane)
            thread.start()
            thread.join(30)
        with pytest.raises(UserWarning):  # the user's filter, as it was
            warnings.warn("the user's own", UserWarning, stacklevel=1)
    assert seen == ["shown"] and [str(w.message) for w in caught] == ["a library's warning"]


def test_a_lane_leaves_the_filters_to_the_main_thread() -> None:
    """In a lane, library_warnings swaps nothing: a swap there would undo the main thread's."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with FILTERS.among_threads():
            before = warnings.filters
            thread = threading.Thread(target=lambda: library_warnings().__enter__())
            thread.start()
            thread.join(30)
            assert warnings.filters is before


@pytest.mark.slow
def test_a_model_reported_while_lanes_run_shows_every_warning(sweep: SweepRunner) -> None:
    """The mark on each model of a sweep in lanes: pytest's filters for its report, applied
    while lanes run library code, show warnings, whatever ``-W`` says."""
    sweep.makeconftest(WARNS_AT_REPORT)
    done = sweep.run("zoo:bert", args=["--neuron-lanes", "2", "-W", "error::UserWarning"])
    done.result.assert_outcomes(passed=1)
    done.result.stdout.fnmatch_lines(["*UserWarning: warned while zoo:bert was reported*"])


#: A conftest that warns while each model is reported (as a lane's library call may then).
WARNS_AT_REPORT = """
import warnings
import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    warnings.warn(f"warned while {item.name} was reported", UserWarning)
    return (yield)
"""


def test_library_warnings_outside_lanes_swap_the_filters_as_before() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error")
        with library_warnings():
            warnings.warn("shown", UserWarning, stacklevel=1)
        with pytest.raises(UserWarning):
            warnings.warn("raised", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["shown"]
