"""A sweep's progress: lines per model, counts, the estimate of the time left, what runs now
(phase files) and the status that ticks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_neuronsupport.dataset.layout import phase_file, phases_dir, sweeps_dir
from pytest_neuronsupport.progress import (
    CLEAR_LINE,
    UNCHANGED,
    PhaseMarks,
    Progress,
    Running,
    Ticker,
    duration,
    last_phase,
    read_running,
    recorded_costs,
    row_line,
)
from pytest_neuronsupport.runners.lib.protocol import PHASE_MARK
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


def test_a_row_line_names_result_model_cores_and_time() -> None:
    row = {"model_id": "zoo:llama", "result": "FAIL(gen)", "neuron_cores": 2, "wall_s": 3.14}
    assert row_line(row) == "FAIL(gen)     zoo:llama  (2 cores, 3.1s)"
    assert row_line({"model_id": "m", "result": "EXCLUDED"}) == "EXCLUDED      m"


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


def test_a_running_model_counts_with_what_its_cost_has_left_and_never_less_than_it_took() -> None:
    clock = FakeClockForTests()
    progress = Progress(["a", "b", "c"], {"a": 10.0, "b": 30.0, "c": 20.0}, clock=clock)
    # nothing finished, two models running: their costs left, two at a time (the time their
    # runs took counts, not the whole test's: the cost is the run's)
    progress.running = [Running("a", "gen", 9.0, 4.0), Running("b", "load", 3.0, 1.0)]
    assert progress.seconds_left() == pytest.approx((6 + 29 + 20) / 2)
    clock.now += 20
    progress.finished("a", "PASS", wall_s=10.0)  # 20 s of sweep for 10 of cost
    progress.running = [Running("a", "gen", 20.0, 20.0), Running("b", "forward", 99.0, 90.0)]
    # b ran past its 30 s: nothing of its cost is left, but it may run as long again
    assert progress.seconds_left() == pytest.approx(90.0)
    progress.running = [Running("b", "forward", 15.0, 12.0)]  # a's file is gone; a is done
    assert progress.seconds_left() == pytest.approx(2 * (18 + 20))


def test_the_status_names_each_model_running_its_phase_and_time() -> None:
    clock = FakeClockForTests()
    progress = Progress(["zoo:llama", "zoo:bert", "zoo:gpt2"], clock=clock)
    progress.running = [Running("zoo:llama", "compile", 12.2), Running("zoo:bert", "forward", 3)]
    clock.now += 15
    assert progress.status_line() == (
        "[0/3] starting | 15s elapsed | running: zoo:llama compile 12s, zoo:bert forward 3s"
    )
    progress.finished("zoo:bert", "PASS", wall_s=3.0)
    assert progress.status_line().endswith("| running: zoo:llama compile 12s")


def test_phase_files_say_what_each_model_runs_and_the_runs_last_phase(tmp_path: Path) -> None:
    now = [500.0]
    folder = phases_dir(tmp_path, "sweep1")
    marks = PhaseMarks(lambda m: phase_file(tmp_path, "sweep1", m), clock=lambda: now[0])
    log = tmp_path / "output.log"
    with marks.running("zoo:llama"):
        assert read_running(folder, now=501.0) == [Running("zoo:llama", "starting", 1.0)]
        marks.mark("plan")
        assert read_running(folder, now=502.0) == [Running("zoo:llama", "plan", 2.0)]
        marks.mark("run", log=log)  # the support run: its phases are the run's own marks
        assert read_running(folder, now=503.0)[0].phase == "starting"  # no mark yet
        log.write_text(f"noise\n{PHASE_MARK} load\nmore\n{PHASE_MARK} gen\nout\n")
        assert read_running(folder, now=510.0) == [Running("zoo:llama", "gen", 10.0, 10.0)]
        now[0] = 505.0
        marks.mark("bench b1-s128", log=log)  # another step: named before the run's phase
        assert read_running(folder, now=511.0) == [
            Running("zoo:llama", "bench b1-s128 gen", 11.0, 6.0)
        ]
        (folder / "not-ours").write_text("{")
        assert [r.model_id for r in read_running(folder, now=511.0)] == ["zoo:llama"]
    assert [r.model_id for r in read_running(folder)] == []  # gone once the model ends
    assert read_running(tmp_path / "nowhere") == []
    assert last_phase(tmp_path / "nowhere.log") is None
    marks.mark("plan")  # no model running: nothing written
    assert sorted(p.name for p in folder.iterdir()) == ["not-ours"]


def test_phase_files_are_named_by_the_model_under_the_sweeps_folder(tmp_path: Path) -> None:
    assert phase_file(tmp_path, "abc", "org/model") == tmp_path / ".sweeps" / "abc" / "org--model"
    marks = PhaseMarks(lambda m: phase_file(tmp_path, "abc", m), clock=lambda: 7.0)
    with marks.running("org/model"):
        data = json.loads(phase_file(tmp_path, "abc", "org/model").read_text())
    assert data == {
        "model_id": "org/model",
        "since": 7.0,
        "step": "starting",
        "log": None,
        "run_since": None,
    }


class RunningForTests:
    """What the phase files would say, set by the test."""

    def __init__(self) -> None:
        self.now: list[Running] = []

    def __call__(self) -> list[Running]:
        return list(self.now)


def ticker_for_tests(tty: bool, width: int = 200) -> tuple[Ticker, list[str], RunningForTests]:
    clock, running, written = FakeClockForTests(), RunningForTests(), list[str]()
    progress = Progress(["zoo:llama", "zoo:bert"], {"zoo:llama": 10.0}, clock=clock)
    ticker = Ticker(progress, running, written.append, tty, width=width, clock=clock)
    return ticker, written, running


def test_on_a_terminal_the_status_is_written_again_on_its_line_each_tick() -> None:
    ticker, written, running = ticker_for_tests(tty=True)
    ticker.tick()
    assert written == [CLEAR_LINE + "[0/2] starting | 0s elapsed"]
    running.now = [Running("zoo:llama", "plan", 1.0)]
    ticker.progress.clock.now += 1  # type: ignore[attr-defined]
    ticker.tick()
    assert written[-1] == CLEAR_LINE + (
        "[0/2] starting | 1s elapsed | ~20s left | running: zoo:llama plan 1s"
    )
    running.now = [Running("zoo:bert", "load", 0.0)]
    ticker.progress.finished("zoo:llama", "PASS", wall_s=1.0)
    ticker.finished("PASS          zoo:llama  (1 core, 1.0s)")
    line, status = written[-1].removeprefix(CLEAR_LINE).split("\n")
    assert line == "PASS          zoo:llama  (1 core, 1.0s)"
    assert status.startswith("[1/2] 1 PASS | 1s elapsed | ~") and "zoo:bert load 0s" in status
    narrow, written, _ = ticker_for_tests(tty=True, width=20)
    narrow.tick()
    assert written == [CLEAR_LINE + "[0/2] starting |..."]  # never wider than the terminal


def test_in_a_log_the_status_is_plain_lines_now_and_then() -> None:
    ticker, written, running = ticker_for_tests(tty=False)
    ticker.tick()
    assert written == []  # nothing runs yet: nothing to say
    running.now = [Running("zoo:llama", "plan", 0.0)]
    ticker.tick()
    ticker.tick()
    assert written == ["running       zoo:llama  (plan)\n"]  # once per model
    ticker.progress.clock.now += ticker.plain_every  # type: ignore[attr-defined]
    ticker.tick()
    assert written[-1].startswith("[0/2] starting | 1m00s elapsed") and "\r" not in written[-1]
    ticker.progress.finished("zoo:llama", "PASS", wall_s=1.0)
    ticker.finished("PASS          zoo:llama")
    # llama took 1 s of cost in 60 s of sweep: bert, at that mean cost, 60 s more
    assert written[-1] == "PASS          zoo:llama\n[1/2] 1 PASS | 1m00s elapsed | ~1m00s left\n"
    assert not any(CLEAR_LINE in text for text in written)


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
    # under xdist too, a line as each model starts, naming what it does; nothing written again
    out.fnmatch_lines_random(["running       zoo:llama  (*)", "running       zoo:bert  (*)"])
    assert "\r" not in out.str() and "%]" not in out.str()  # nor pytest's own [ 50%]
    assert done.runner is not None
    left = sweeps_dir(done.runner.results)
    assert not left.exists() or not [p for p in left.iterdir() if p.is_dir()]  # phases gone
    quiet = reruns["quiet"]
    quiet.result.assert_outcomes(skipped=2)
    assert "unchanged" not in quiet.result.stdout.str().split("neuronsupport:")[0]
    again = reruns["unchanged"]
    again.result.stdout.fnmatch_lines(
        ["unchanged     zoo:llama  (run.py as recorded)", "[[]2/2[]] 2 unchanged | *"]
    )
    verbose = reruns["rerun"]
    verbose.result.stdout.fnmatch_lines(["models.toml::zoo:llama PASS*"])


def test_a_models_line_says_what_the_modes_after_the_first_recorded() -> None:
    from pytest_neuronsupport.modes import ModeOutcome
    from pytest_neuronsupport.report import model_line as line_of

    perf = [
        {"model_id": "zoo:gpt2", "result": "PASS", "wall_s": 20.0},
        {"model_id": "zoo:gpt2", "result": "PASS", "wall_s": 34.0},
    ]
    outcomes = [
        ModeOutcome("support", "zoo:gpt2", unchanged=True, reason="unchanged since ..."),
        ModeOutcome("perf", "zoo:gpt2", perf),
    ]
    line, result, wall_s = line_of("zoo:gpt2", outcomes)
    assert line == "unchanged     zoo:gpt2  (run.py as recorded; perf: 2 PASS)"
    assert (result, wall_s) == (UNCHANGED, 54.0)  # the benchmarks' time
    ran = {"model_id": "zoo:gpt2", "result": "PASS", "neuron_cores": 1, "wall_s": 6.0}
    outcomes[0] = ModeOutcome("support", "zoo:gpt2", [ran])
    assert line_of("zoo:gpt2", outcomes) == (
        "PASS          zoo:gpt2  (1 core, 6.0s, perf: 2 PASS)",
        "PASS",
        60.0,
    )


def test_a_summary_names_only_the_files_it_wrote(tmp_path: Path) -> None:
    from pytest_neuronsupport.report import TableFacts, table_lines

    perf_row = {"model_id": "zoo:gpt2", "result": "PASS"}
    only_unchanged = TableFacts("support", [], unchanged=2, path=tmp_path / "data.parquet")
    assert table_lines(only_unchanged) == ["2 unchanged (not run again)"]  # no dataset: line
    perf = TableFacts("perf", [perf_row], 0, tmp_path / "perf.parquet")
    assert table_lines(perf) == ["perf: 1 PASS", f"perf: {tmp_path / 'perf.parquet'}"]
    unwritten = TableFacts("train", [perf_row], 0, tmp_path / "train.parquet", written=False)
    assert table_lines(unwritten) == ["train: 1 PASS"]


def test_the_status_is_written_through_a_descriptor_of_its_own(tmp_path: Path) -> None:
    import io
    import os

    from pytest_neuronsupport.progress import terminal_writer

    read, write = os.pipe()
    with os.fdopen(write, "w") as file:
        writer = terminal_writer(file)
    writer("[0/2] starting\n")  # the file is closed: its copy of the descriptor still writes
    assert os.read(read, 100) == b"[0/2] starting\n"
    in_memory = io.StringIO()  # pytest run in-process: no descriptor
    terminal_writer(in_memory)("running\n")
    assert in_memory.getvalue() == "running\n"


def test_the_ticker_ticks_in_a_thread_of_its_own_until_stopped() -> None:
    ticker, written, _ = ticker_for_tests(tty=True)
    ticker.every = 3600.0  # one tick at the start, none after it in this test
    ticker.start()
    ticker.stop()
    assert written == [CLEAR_LINE + "[0/2] starting | 0s elapsed", "\n"]  # the line ends
