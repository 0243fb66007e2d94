"""Where a run's time went: the phase times of a support row, and what its compile cache did.

Unit tests of the pieces: the plugin's columns made of what a run reports, and the devices'
reading of the compile cache (Neuron's with a NEFF cache folder made here, standing in for
TorchNeuron's). What runs report is held in the sweeps that make their rows: every runner's in
the tiny list's sweep, and the compile cache cold then warm in
``test_a_warm_compile_cache_serves_the_graphs`` (test_sweep.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_neuronsupport.dataset.support import COLUMN_DOCS, PHASE_COLUMNS
from pytest_neuronsupport.devices import DEVICES
from pytest_neuronsupport.pipeline.isolate import Outcome
from pytest_neuronsupport.pipeline.modelrun import timed, told
from pytest_neuronsupport.runners.lib.protocol import (
    REFERENCE_ENV,
    REFERENCE_FAILED_ENV,
    phase_times,
)
from pytest_neuronsupport.runners.lib.reference import (
    ReferenceFailed,
    cached_reference,
    reference_host,
)
from tests.shared_sweeps import SUPPORT
from tests.sweeping import Sweep

#: A decoder's marks: the tokenizer's load, the model's, generation, the reference, the end.
DECODER = [["load", 10.0], ["load", 10.5], ["gen", 12.0], ["reference", 20.0], ["", 21.0]]


def test_the_phase_times_add_up_to_the_whole_run() -> None:
    times = phase_times(DECODER, compile_s=6.0)
    assert times == {
        "load_s": 2.0,  # both loads
        "compile_s": 6.0,
        "generate_s": 2.0,  # the gen phase (8 s) less the compiling done in it
        "forward_s": None,
        "reference_s": 1.0,
        "wall_s": 11.0,
    }
    parts = sum(times[k] or 0.0 for k in PHASE_COLUMNS)
    assert parts == pytest.approx(times["wall_s"])


def test_an_encoder_has_a_forward_time_and_a_judge_is_the_remainder() -> None:
    marks = [["load", 0.0], ["forward", 1.0], ["reference", 4.0], ["judge", 4.5], ["", 7.0]]
    times = phase_times(marks, compile_s=2.5)
    assert times["forward_s"] == 0.5 and times["generate_s"] is None
    assert times["wall_s"] == 7.0 and times["reference_s"] == 0.5
    assert times["wall_s"] - sum(times[k] or 0.0 for k in PHASE_COLUMNS) == pytest.approx(2.5)


def test_a_run_that_failed_loading_has_its_load_time_alone() -> None:
    times = phase_times([["load", 3.0], ["", 3.25]], compile_s=0.0)
    assert times["load_s"] == 0.25 and times["wall_s"] == 0.25
    assert times["generate_s"] is None and times["reference_s"] is None
    assert phase_times([["", 1.0]], 0.0) == {}  # no phase began: nothing to say


def test_the_plugin_makes_columns_of_what_a_run_reported() -> None:
    counters = {"inductor": {"fxgraph_cache_hit": 3, "fxgraph_cache_miss": 1, "other": 9}}
    verdict = {"result": "PASS", "phases": DECODER, "dynamo": {"_compile.compile_inner": [4, 2]}}
    fields = timed({**verdict, "counters": counters}, DEVICES["cpu"])
    assert fields == {
        "result": "PASS",
        **phase_times(DECODER, 6.0),
        "graphs_cached": 3,
        "graphs_compiled": 1,
    }
    assert timed(None, DEVICES["cpu"]) is None  # no verdict: the run's wall time only
    assert timed({"result": "FAIL(other)"}, DEVICES["cpu"]) == {"result": "FAIL(other)"}
    # graphs the runtime counted itself (TorchNeuron's metrics) stand over inductor's counters
    reported = {**verdict, "counters": {}, "graphs_compiled": 2}
    fields = timed(reported, DEVICES["neuron"])
    assert fields is not None
    assert (fields["graphs_compiled"], fields["graphs_cached"]) == (2, None)


@pytest.mark.parametrize("name", ["cpu", "cuda", "neuron"])
def test_inductors_fx_graph_cache_says_what_was_cached_and_compiled(name: str) -> None:
    device = DEVICES[name]
    assert device.graphs({"fxgraph_cache_miss": 2, "fxgraph_cache_bypass": 1}) == {
        "graphs_cached": 0,
        "graphs_compiled": 3,
    }
    assert device.graphs({"fxgraph_cache_hit": 2}) == {"graphs_cached": 2, "graphs_compiled": 0}
    # no graph went through the cache (aot_eager, or nothing compiled): not known
    assert device.graphs({}) == {"graphs_cached": None, "graphs_compiled": None}


def test_every_phase_column_is_documented() -> None:
    for name in (*PHASE_COLUMNS, "graphs_cached", "graphs_compiled", "wall_s"):
        assert name in COLUMN_DOCS


def test_lookup_says_where_a_rows_time_went() -> None:
    from pytest_neuronsupport.views.lookup import phases_line

    row = {"load_s": 0.3, "compile_s": 9.19, "generate_s": 0.27, "forward_s": None}
    row.update(reference_s=0.008, graphs_cached=2, graphs_compiled=0)
    assert phases_line(row) == (
        "time: load 0.3s, compile 9.2s, generate 0.3s, reference 0.0s, graphs: 2 cached, 0 compiled"
    )
    assert phases_line({"load_s": 1.0, "graphs_cached": None}) == "time: load 1.0s"
    assert phases_line({"wall_s": 3.0}) is None  # a row of a file before the phase times


# --- the CPU reference, off the lease: its own pass before the device's run --------------------


@pytest.mark.slow
@SUPPORT
def test_the_reference_is_computed_before_the_lease_and_the_device_run_only_reads_it(
    tiny_sweep: Sweep,
) -> None:
    """Every model held to a CPU reference computed it in a pass of its own script that held no
    core (``run-reference.json``: reference only), whose time is the row's ``reference_s``; the
    device's run read it from its file; ``core_s`` is its cores times its run's seconds."""
    assert tiny_sweep.runner is not None
    checked = 0
    for model_id, row in tiny_sweep.rows.items():
        if row["result"] == "EXCLUDED":
            assert row["core_s"] is None, model_id
            continue
        assert row["core_s"] >= row["neuron_cores"] * row["wall_s"] - 0.01 > 0, model_id
        before, leased = tiny_sweep.lease_files(model_id)
        if before is None:
            continue  # its output is not held to the CPU's (several cores, the host too small)
        assert before["reference_only"] is True and "reference_error" not in before, model_id
        assert json.loads(row["check"])["reference_cached"] is False, model_id  # made for it
        # the device's run only read it (else its verdict says why not)
        assert leased["reference_cached"] is True, (model_id, leased.get("reference_miss"))
        spent = phase_times(before["phases"], 0.0)["reference_s"]
        assert spent is not None and row["reference_s"] == spent > 0, model_id
        checked += 1
    assert checked >= len(tiny_sweep.rows) // 2  # decoders, encoders, seq2seq, two cores


def test_a_failed_reference_pass_is_told_to_the_device_run_which_computes_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pass's error reaches the device's run as it was raised there; the run does not
    compute the reference again (its computation is never called)."""
    error = "RuntimeError('the CPU ran out of patience')"
    failed = Outcome(0, False, 1.0, {"reference_only": True, "reference_error": error}, "")
    monkeypatch.setenv(REFERENCE_FAILED_ENV, told(failed)[REFERENCE_FAILED_ENV])

    def never() -> dict[str, Any]:
        raise AssertionError("computed again")

    with pytest.raises(ReferenceFailed) as raised:
        cached_reference({"dtype": "float32"}, never)
    assert f"{raised.value!r}" == error
    assert told(Outcome(0, False, 1.0, {"reference_only": True}, "")) == {}
    assert told(Outcome(1, False, 1.0, None, "Traceback")) == {}  # a runner that ignored it


def test_a_reference_file_not_read_says_why_in_the_verdict(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The run that computes a reference its file was named for says why it did not read it:
    none yet, made for other parameters, or damaged; the file then holds the new one, with
    what computed it (this host)."""
    path = tmp_path / "reference.pt"
    monkeypatch.setenv(REFERENCE_ENV, str(path))
    made = iter(range(10))
    host = reference_host()
    assert host["reference_torch"] == torch.__version__ and host["reference_threads"] >= 1

    def compute() -> dict[str, Any]:
        return {"info": {"made": next(made)}}

    ref, cached = cached_reference({"dtype": "float32"}, compute)
    assert (cached, ref["info"]) == (False, {"made": 0, **host, "reference_miss": "no file yet"})
    ref, cached = cached_reference({"dtype": "float32"}, compute)
    assert (cached, ref["info"]) == (True, {"made": 0, **host})  # read as it was kept
    ref, cached = cached_reference({"dtype": "bfloat16"}, compute)
    miss = ref["info"]["reference_miss"]
    assert (cached, miss) == (False, "the file was made for other parameters")
    path.write_bytes(b"not a torch file")
    ref, cached = cached_reference({"dtype": "bfloat16"}, compute)
    assert not cached and ref["info"]["reference_miss"].startswith("the file could not be read: ")
    assert torch.load(path, weights_only=True)["info"] == {"made": 2, **host}
