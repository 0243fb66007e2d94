"""A sweep's progress: lines per model, counts, and the estimate of the time left."""

from __future__ import annotations

import pytest

from pytest_neuronsupport.progress import (
    UNCHANGED,
    Progress,
    duration,
    model_line,
    recorded_costs,
)
from tests.shared_sweeps import RERUNS
from tests.sweeping import Sweep


class FakeClockForTests:
    """A clock the test moves by hand (the estimate depends only on it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0s"), (42, "42s"), (185, "3m05s"), (7620, "2h07m")]
)
def test_durations(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_a_model_line_names_result_model_cores_and_time() -> None:
    row = {"model_id": "zoo:llama", "result": "FAIL(gen)", "neuron_cores": 2, "wall_s": 3.14}
    assert model_line(row) == "FAIL(gen)     zoo:llama  (2 cores, 3.1s)"
    assert model_line({"model_id": "m", "result": "EXCLUDED"}) == "EXCLUDED      m"


def test_the_estimate_scales_the_costs_left_by_the_time_per_cost_so_far() -> None:
    clock = FakeClockForTests()
    # a and b were recorded at 10 s and 30 s; c and d never ran on this pair
    progress = Progress(["a", "b", "c", "d"], {"a": 10.0, "b": 30.0}, clock=clock)
    assert progress.seconds_left() is None  # nothing done yet
    assert progress.status_line() == "[0/4] starting | 0s elapsed"
    clock.now += 20  # a took 20 s of sweep time for 10 s of cost: 2 s per unit
    progress.finished("a", "PASS", wall_s=10.0)
    # left: b (30) + c and d at the mean cost known (a 10, b 30: 20 each)
    assert progress.seconds_left() == pytest.approx(2 * (30 + 20 + 20))
    clock.now += 60
    progress.finished("b", "FAIL(gen)", wall_s=30.0)
    progress.finished("c", UNCHANGED)  # not run again: costs nothing
    assert progress.seconds_left() == pytest.approx(80 / 40 * 20)
    assert (
        progress.status_line()
        == "[3/4] 1 PASS, 1 FAIL(gen), 1 unchanged | 1m20s elapsed | ~40s left"
    )
    progress.finished("d", "EXCLUDED")
    assert progress.status_line().endswith("| 1m20s elapsed")  # no estimate once done


def test_milestones_mark_each_tenth_and_the_end() -> None:
    progress = Progress([f"m{i}" for i in range(25)], clock=FakeClockForTests())
    marks = []
    for i in range(25):
        progress.finished(f"m{i}", "PASS")
        if progress.milestone():
            marks.append(i + 1)
    assert marks == [3, 5, 8, 10, 13, 15, 18, 20, 23, 25]


def test_recorded_costs_leave_out_excluded_and_unknown_models() -> None:
    rows = {
        "a": {"result": "PASS", "wall_s": 4.0},
        "b": {"result": "EXCLUDED", "wall_s": 0.0},
        "c": {"result": "FAIL(load)", "wall_s": None},
    }
    assert recorded_costs(["a", "b", "c", "d"], rows.get) == {"a": 4.0}


@pytest.mark.slow
@RERUNS
def test_a_sweep_shows_a_line_per_model_and_its_status(reruns: dict[str, Sweep]) -> None:
    """The sweeps of one folder, in order (tests/shared_sweeps.py): llama and bert under
    xdist; with gpt2 (not read here); the two again, quiet, then not; llama again, verbose."""
    done = reruns["first"]
    done.result.assert_outcomes(passed=2)
    out = done.result.stdout
    out.fnmatch_lines_random(
        ["PASS          zoo:llama  (1 core, *s)", "PASS          zoo:bert  (1 core, *s)"]
    )
    out.fnmatch_lines(["[[]2/2[]] 2 PASS | *s elapsed"])  # in a log the status is a line
    assert "models.toml .." not in out.str()  # no letters: each model has its line
    quiet = reruns["quiet"]
    quiet.result.assert_outcomes(skipped=2)
    assert "unchanged" not in quiet.result.stdout.str().split("neuronsupport:")[0]
    again = reruns["unchanged"]
    again.result.stdout.fnmatch_lines(
        ["unchanged     zoo:llama  (run.py as recorded)", "[[]2/2[]] 2 unchanged | *"]
    )
    verbose = reruns["rerun"]
    verbose.result.stdout.fnmatch_lines(["models.toml::zoo:llama PASS*"])
