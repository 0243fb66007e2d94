"""The host-memory gate (``pipeline.leases.HostMemoryGate``): runs wait for the host memory
they need instead of being killed for it, across processes; holds of dead processes are
reclaimed; a run larger than the machine runs alone. The host's "available" reading is given
to each gate, so that what is free is known exactly; processes and threads are real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_neuronsupport.pipeline.leases import (
    Hold,
    HostMemoryGate,
    HostMemoryWarning,
    host_bytes,
    living,
    resident_bytes,
    with_descendants,
)
from pytest_neuronsupport.pipeline.stopping import Stopped
from pytest_neuronsupport.units import GIB


def gate(
    tmp_path: Path, available_gib: float = 10, total_gib: float = 16, patience_s: float = 60.0
) -> HostMemoryGate:
    return HostMemoryGate(
        tmp_path / "host-memory.json",
        available=lambda: int(available_gib * GIB),
        total=lambda: int(total_gib * GIB),
        poll_s=0.01,
        patience_s=patience_s,
    )


def test_the_estimate_is_the_weights_copies_with_its_margin() -> None:
    bf16 = 2 * 10**9  # a 1B model
    assert host_bytes(bf16, "bfloat16") == int(1.25 * 2e9) + GIB  # the device's run alone
    # a reference's pass: fp32 and fp64, 1.25 x 1e9 x 12 + 1 GiB
    assert host_bytes(bf16, None, "fp64") == int(1.25 * 12e9) + GIB
    # an fp32 run that computes its fp32 reference too: 1.25 x 1e9 x (4 + 4) + 1 GiB
    assert host_bytes(bf16, "float32", "fp32") == int(1.25 * 8e9) + GIB
    assert host_bytes(None, "bfloat16") is None  # size unknown: not gated


def test_a_reference_is_estimated_in_the_dtypes_its_script_was_rendered_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a reference holds float64 is decided once, when its script is rendered; the
    gate's estimate follows it, whatever the host's memory says when the pass waits (other
    runs holding it then made the estimate fp32's while the script computed fp64)."""
    from pytest_neuronsupport.pipeline import sizing
    from pytest_neuronsupport.pipeline.modelrun import ScriptRun, reference_dtype

    run = ScriptRun("", tmp_path / "run.py", 1, reference=tmp_path / "ref.pt")
    monkeypatch.setattr(sizing, "available_memory_bytes", lambda: 0)  # a busy host, now
    assert reference_dtype(run) == "fp64"
    assert reference_dtype(replace(run, reference_fp64=False)) == "fp32"
    (tmp_path / "ref.pt").touch()
    assert reference_dtype(run) is None  # kept already: nothing computed
    assert reference_dtype(replace(run, reference=None)) is None


def test_a_run_waits_until_the_memory_it_needs_is_free(tmp_path: Path) -> None:
    first = gate(tmp_path).try_hold(6 * GIB)
    assert first is not None and not first.alone
    assert gate(tmp_path).try_hold(6 * GIB) is None  # 4 GiB free
    small = gate(tmp_path).try_hold(3 * GIB)
    assert small is not None  # 3 fit beside it
    got: list[object] = []
    waiting = threading.Thread(target=lambda: got.append(gate(tmp_path).acquire(6 * GIB)))
    waiting.start()
    gate(tmp_path).release(first)
    waiting.join()
    assert len(got) == 1
    assert {h.bytes for h in gate(tmp_path).holds()} == {6 * GIB, 3 * GIB}


def waiter(g: HostMemoryGate, need: int, got: list[object]) -> threading.Thread:
    """A run waiting for ``need`` bytes in a thread, until it is in line."""
    waiting = threading.Thread(target=lambda: got.append(g.acquire(need)), daemon=True)
    waiting.start()
    while not g.waiting() and waiting.is_alive():
        time.sleep(0.01)
    return waiting


def test_a_run_that_waited_past_the_patience_is_not_passed_by_smaller_ones(
    tmp_path: Path,
) -> None:
    """6 GiB of 10 held, a run waits for 6: a 3 GiB run, which fits, passes it while it is
    patient, and not once it has waited its patience (its 6 are kept: 4 free less 6); when
    the first is released the waiting run goes in, and the 3 then fit beside it."""
    patient = gate(tmp_path, patience_s=3600)
    first = patient.try_hold(6 * GIB)
    assert first is not None
    got: list[object] = []
    waiting = waiter(patient, 6 * GIB, got)
    assert [h.bytes for h in patient.waiting()] == [6 * GIB]
    assert patient.holds() == [first]  # in line, not held
    small = patient.try_hold(3 * GIB)
    assert small is not None  # before the patience: free memory is used
    patient.release(small)
    impatient = gate(tmp_path, patience_s=0)  # the same line, judged past the patience
    assert impatient.try_hold(3 * GIB) is None
    assert impatient.try_hold(3 * GIB) is None  # asked again: still behind it
    impatient.release(first)
    waiting.join(timeout=60)
    assert len(got) == 1 and impatient.waiting() == []
    assert impatient.try_hold(3 * GIB) is not None  # 10 less its 6
    assert sorted(h.bytes for h in impatient.holds()) == [3 * GIB, 6 * GIB]


def test_a_run_that_stops_waiting_leaves_the_line(tmp_path: Path) -> None:
    g = gate(tmp_path, patience_s=0)
    first = g.try_hold(8 * GIB)
    assert first is not None
    with pytest.raises(TimeoutError, match=r"no 6\.0 GiB of host memory free"):
        g.acquire(6 * GIB, timeout_s=0.1)
    assert g.waiting() == [] and g.try_hold(2 * GIB) is not None  # nothing kept for it


def test_a_hold_in_use_counts_as_used_only_once(tmp_path: Path) -> None:
    """Memory a run already uses is out of "available" already: only what it reserved and does
    not use yet is taken off again."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; b = bytearray(300 * 2**20); sys.stdin.read()"],
        stdin=subprocess.PIPE,
    )
    try:
        while resident_bytes(child.pid) < 300 * 2**20:
            assert child.poll() is None  # until its memory is resident
        g = gate(tmp_path)
        held = g.try_hold(1 * GIB)
        assert held is not None
        assert g.free(g.holds()) == 9 * GIB  # nothing used yet: all of it reserved
        g.add_pid(held, child.pid)
        assert g.free(g.holds()) >= 9 * GIB + 300 * 2**20
    finally:
        child.communicate(b"")


def test_holds_of_dead_processes_are_reclaimed(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = int(done.stdout)
    g = gate(tmp_path)
    assert g.try_hold(8 * GIB, pid=dead) is not None
    assert g.holds() == []  # its process is gone
    assert g.try_hold(8 * GIB) is not None


def test_a_run_larger_than_the_machine_runs_alone_and_says_so(tmp_path: Path) -> None:
    g = gate(tmp_path, available_gib=10, total_gib=16)
    other = g.try_hold(1 * GIB)
    assert other is not None
    assert g.try_hold(32 * GIB) is None  # it waits for the others
    g.release(other)
    with pytest.warns(HostMemoryWarning, match="runs alone"), g.hold(32 * GIB) as held:
        assert held is not None and held.alone
        assert g.try_hold(1 * GIB) is None  # nothing beside it
    assert g.holds() == []
    with g.hold(None) as nothing:
        assert nothing is None  # size unknown: not gated


HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pytest_neuronsupport.pipeline.leases import HostMemoryGate
    from pytest_neuronsupport.units import GIB

    g = HostMemoryGate(Path(sys.argv[1]), available=lambda: 10 * GIB, total=lambda: 16 * GIB)
    with g.hold(6 * GIB):
        print("held", flush=True)
        sys.stdin.read()  # until told to end
    """
)


def test_the_gate_is_shared_by_processes(tmp_path: Path) -> None:
    path = tmp_path / "host-memory.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        g = gate(tmp_path)
        assert [h.pids for h in g.holds()] == [(child.pid,)]
        assert g.try_hold(6 * GIB) is None
    finally:
        child.communicate("")
    assert gate(tmp_path).try_hold(6 * GIB) is not None  # released as it ended


def test_a_runs_processes_include_those_below_it() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        assert {os.getpid(), child.pid} <= with_descendants([os.getpid()])
    finally:
        child.communicate(b"")


def test_a_run_waiting_for_host_memory_says_so_until_it_is_free(tmp_path: Path) -> None:
    """The status says "waiting for N GiB of host memory" (not "waiting for cores") while a
    run waits at the gate; the run goes in once another hold is released."""
    from pytest_neuronsupport.dataset import layout
    from tests.test_modes import a_sweep

    sweep = a_sweep(tmp_path, tmp_path / "cache")
    sweep.__dict__["host_memory"] = held_gate = gate(tmp_path, available_gib=10)
    other = held_gate.acquire(8 * GIB)  # another run's, alive (this process)
    status = layout.phase_file(sweep.settings.results, sweep.sweep_id, "zoo:bert")
    entered = threading.Event()

    def run() -> None:
        with sweep.phases.running("zoo:bert"), sweep.memory_held(4 * GIB, "reference"):
            entered.set()

    thread = threading.Thread(target=run)
    thread.start()
    for _ in range(500):  # until the run waits
        if status.is_file() and "waiting" in status.read_text():
            break
        thread.join(0.01)
    step = json.loads(status.read_text())["step"]
    assert step == "reference waiting for 4.0 GiB of host memory"
    assert not entered.is_set()
    held_gate.release(other)
    thread.join(30)
    assert entered.is_set()


class CountingGate(HostMemoryGate):
    """The gate, counting its reads of the holds' file (what its waiting threads cost)."""

    reads = 0

    def _read(self) -> list[Hold]:
        CountingGate.reads += 1
        return super()._read()


def test_threads_that_cannot_fit_wait_without_reading_the_file_each_poll(tmp_path: Path) -> None:
    """16 threads of one process (16 lanes) wait for more than is free: one look a poll serves
    them all, not one each (256 lanes read the file under its lock a thousand times a second)."""
    g = CountingGate(
        tmp_path / "host-memory.json",
        available=lambda: 10 * GIB,
        total=lambda: 16 * GIB,
        poll_s=0.05,
        stop=threading.Event(),
    )
    first = g.try_hold(8 * GIB)
    assert first is not None
    waiting = [
        threading.Thread(target=lambda: suppress_stopped(g, 9 * GIB), daemon=True)
        for _ in range(16)
    ]
    for thread in waiting:
        thread.start()
    while len(g.waiting()) < 16:
        time.sleep(0.01)
    CountingGate.reads = 0
    time.sleep(1.0)  # 20 polls: 320 reads were each thread to look each time
    reads = CountingGate.reads
    assert g.stop is not None
    g.stop.set()
    for thread in waiting:
        thread.join(timeout=30)
    assert reads <= 80, reads
    g.release(first)
    assert g.try_hold(9 * GIB) is not None  # what it saw is forgotten at a release


def suppress_stopped(g: HostMemoryGate, need: int) -> None:
    try:
        g.acquire(need)
    except Stopped:
        pass


def test_holds_and_leases_of_a_dead_process_are_not_living() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine, gone, either = (
        Hold(1, pids, str(k))
        for k, pids in enumerate([(os.getpid(),), (dead.pid,), (dead.pid, os.getpid())])
    )
    assert living([mine, gone, either]) == [mine, either]
