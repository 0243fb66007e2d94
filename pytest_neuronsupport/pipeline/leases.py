"""Step 4, lease: the device's cores and the host's memory, shared by every run on this
machine.

The cores are one shared resource between the workers of a sweep (and the sweeps of a machine
that share a cache). A :class:`CoreAllocator` keeps the leases in a small JSON file guarded by a
``filelock``: each lease is a contiguous range aligned to its size (a 2-core model gets 0-1 or
2-3, never 1-2), and names the processes holding it. A lease whose processes are all dead is
reclaimed, so a killed worker or run never keeps its cores.

Beside the cores, a :class:`HostMemoryGate` holds the host memory each run is estimated to need
(:func:`host_bytes`: from its checkpoint's size and dtype, with a stated margin): a run that
needs more than is free waits for it, instead of being killed by the OOM killer. A run takes
its memory first, then its cores, so that no core is leased while its run waits for memory. A
run waits in line: one that has waited :data:`PATIENCE_S` has its memory kept for it from then
on, so that smaller runs, which keep fitting, cannot pass it for ever.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, TypeVar

import filelock

from pytest_neuronsupport.pipeline import stopping
from pytest_neuronsupport.units import GIB


class Held(Protocol):
    """A lease or a hold: the processes that hold it."""

    @property
    def pids(self) -> tuple[int, ...]: ...


HeldT = TypeVar("HeldT", bound=Held)


def living(entries: Iterable[HeldT]) -> list[HeldT]:
    """The ``entries`` one of whose holders is alive, each process looked at once (the holds of
    one sweep's lanes all name its process)."""
    seen: dict[int, bool] = {}

    def alive(pid: int) -> bool:
        if pid not in seen:
            seen[pid] = pid_alive(pid)
        return seen[pid]

    return [entry for entry in entries if any(alive(pid) for pid in entry.pids)]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped) holds nothing
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


@dataclass(frozen=True)
class Lease:
    start: int
    count: int
    pids: tuple[int, ...]
    token: str

    @property
    def cores(self) -> list[int]:
        return list(range(self.start, self.start + self.count))


class Seen:
    """What the last look at a shared file of leases or holds found free (cores, or bytes), for
    the threads of this process that wait there: one that needs more than that, seen less than a
    poll ago, waits without looking again. A process of 256 lanes would otherwise read the file,
    under its lock, a thousand times a second; one look a poll serves them all. A release by
    this process forgets what was seen."""

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s
        self._at, self._free = float("-inf"), 0.0
        self._lock = threading.Lock()

    def saw(self, free: float) -> None:
        with self._lock:
            self._at, self._free = time.monotonic(), free

    def forget(self) -> None:
        with self._lock:
            self._at = float("-inf")

    def hopeless(self, need: float) -> bool:
        """Whether ``need`` exceeds what was free a moment ago (no need to look again yet)."""
        with self._lock:
            return time.monotonic() - self._at < self.poll_s and need > self._free


class CoreAllocator:
    """Leases of a device's cores, shared by every process that uses the same ``path``."""

    def __init__(
        self, path: Path, total: int, poll_s: float = 0.2, stop: threading.Event | None = None
    ) -> None:
        if total < 1:
            raise ValueError("a device has at least one core")
        self.path = path
        self.total = total
        self.poll_s = poll_s
        #: Set when the sweep stops: a wait for cores ends (:mod:`.stopping`).
        self.stop = stop
        self.seen = Seen(poll_s)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = filelock.FileLock(str(path) + ".lock")

    def _read(self) -> list[Lease]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [Lease(d["start"], d["count"], tuple(d["pids"]), d["token"]) for d in data]

    def _write(self, leases: Iterable[Lease]) -> None:
        tmp = self.path.with_suffix(".tmp")
        data = [
            {"start": x.start, "count": x.count, "pids": list(x.pids), "token": x.token}
            for x in leases
        ]
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, self.path)

    def leases(self) -> list[Lease]:
        """The live leases (reclaiming dead ones)."""
        with self._lock:
            live = living(self._read())
            self._write(live)
            return live

    def try_acquire(self, count: int, pid: int | None = None) -> Lease | None:
        """A free aligned range of ``count`` cores, or None if none is free now."""
        if count > self.total or count < 1 or count & (count - 1):
            raise ValueError(f"cannot lease {count} of {self.total} cores")
        with self._lock:
            live = living(self._read())
            taken = {c for x in live for c in x.cores}
            self.seen.saw(self.total - len(taken))
            for start in range(0, self.total - count + 1, count):
                if taken.isdisjoint(range(start, start + count)):
                    lease = Lease(start, count, (pid or os.getpid(),), os.urandom(8).hex())
                    self._write([*live, lease])
                    return lease
            self._write(live)
            return None

    def acquire(self, count: int, timeout_s: float | None = None) -> Lease:
        """Wait for an aligned range of ``count`` cores."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            lease = None if self.seen.hopeless(count) else self.try_acquire(count)
            if lease is not None:
                return lease
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no {count} free cores of {self.total} in {timeout_s} s")
            stopping.pause(self.stop, self.poll_s, f"it waited for {count} cores")

    def add_pid(self, lease: Lease, pid: int) -> Lease:
        """Name one more process (the run itself) as a holder of ``lease``."""
        with self._lock:
            leases = self._read()
            updated = Lease(lease.start, lease.count, (*lease.pids, pid), lease.token)
            self._write([updated if x.token == lease.token else x for x in leases])
            return updated

    def release(self, lease: Lease) -> None:
        with self._lock:
            self._write([x for x in self._read() if x.token != lease.token])
        self.seen.forget()

    @contextmanager
    def lease(self, count: int) -> Iterator[Lease]:
        held = self.acquire(count)
        try:
            yield held
        finally:
            self.release(held)


# --- the host's memory -------------------------------------------------------------------------

#: The margin of a run's host-memory estimate (:func:`host_bytes`): a quarter over the weights'
#: copies, and 1 GiB for the interpreter, torch, transformers, the tokenizer and activations.
HOST_MARGIN = 1.25
HOST_FIXED_BYTES = 1 * GIB
#: Bytes a parameter in each dtype a run loads its weights in.
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


#: Bytes a parameter of a CPU reference: fp32, or with float64 (its passes one after the other:
#: fp32, 4; the eager run in a half dtype, its weights and their float64 copy, 10; float64, 8;
#: counted as fp32 beside float64).
REFERENCE_BYTES = {"fp32": 4, "fp64": 12}


def host_bytes(
    weight_bytes: int | None, dtype: str | None, reference: str | None = None
) -> int | None:
    """A run's host memory, estimated from its checkpoint's size (``weight_bytes``: its bf16
    bytes, as :mod:`.sizing` counts them) and dtype; None when its size is unknown.

    ``need = 1.25 x P x (d + r) + 1 GiB``: P parameters, d bytes a parameter in the run's
    ``dtype`` (the weights as ``from_pretrained`` loads them on the host; None: a reference's
    pass, which loads none in it), r those of its CPU ``reference`` computed in the same
    process (``fp32``: 4; ``fp64``: 12, the float64 copy beside the fp32 one; None: 0). The
    margin: a quarter over the copies, and 1 GiB for the interpreter, torch, transformers, the
    tokenizer and the activations. Not counted: the compiler's own memory (neuronx-cc).
    """
    if weight_bytes is None:
        return None
    parameters = weight_bytes / 2
    per_parameter = (DTYPE_BYTES.get(dtype, 4) if dtype else 0) + REFERENCE_BYTES.get(
        reference or "", 0
    )
    return int(HOST_MARGIN * parameters * per_parameter) + HOST_FIXED_BYTES


def available_bytes() -> int:
    """The host's available memory (:func:`.sizing.available_memory_bytes`, looked up at each
    call: a stand-in host replaces it there)."""
    from pytest_neuronsupport.pipeline import sizing

    return sizing.available_memory_bytes()


def total_memory_bytes() -> int:
    """The host's memory (:func:`.sizing.total_memory_bytes`, looked up at each call: a
    stand-in host replaces it there)."""
    from pytest_neuronsupport.pipeline import sizing

    return sizing.total_memory_bytes()


def resident_bytes(pid: int) -> int:
    """The resident memory of one process (``VmRSS``; 0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def process_children() -> dict[int, list[int]]:
    """Each process's children, by its pid (one scan of ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def with_descendants(
    pids: Iterable[int], children: Mapping[int, Sequence[int]] | None = None
) -> set[int]:
    """``pids`` and every process below them (a run's ranks, its reference's process);
    ``children``: :func:`process_children`, scanned now unless given."""
    children = process_children() if children is None else children
    found, todo = set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


class HostMemoryWarning(UserWarning):
    """A run needs more host memory than is free with nothing else holding any: it runs
    alone, and may be killed for memory."""


@dataclass(frozen=True)
class Hold:
    """Host memory held for a run: ``bytes``, by ``pids`` (its holder, alive or reclaimed);
    ``runs``: the processes whose memory is the hold's use (the run, and all below it)."""

    bytes: int
    pids: tuple[int, ...]
    token: str
    runs: tuple[int, ...] = ()
    #: It was let in alone: more than was free, with nothing else holding.
    alone: bool = False
    #: Not held yet: its run has waited in line since then (``time.time()``).
    waiting_since: float | None = None


#: How long a run waits for host memory while smaller ones that fit pass it; from then on what
#: it needs is kept for it (those behind it take only what is left beside it), so that a large
#: reference is not passed for ever. Before then, memory that is free is used.
PATIENCE_S = 60.0


class HostMemoryGate:
    """Host memory held by the runs of every process that uses the same ``path``, beside the
    cores (a JSON file of holds under a ``filelock``, the holds of dead processes reclaimed).

    A run that needs ``need`` bytes waits until ``need`` is free: the host's available memory
    (``available``: ``MemAvailable``) less what the holds reserved and do not use yet (each
    hold's bytes less the resident memory of its run's processes, never below 0). With nothing
    else holding, a run goes in whatever it needs (alone, saying so if it needs more than is
    free, the machine's whole memory (``total``) included): waiting would be for ever.
    A run that waits lines up (:meth:`acquire`); once it has waited ``patience_s``, what it
    needs is kept for it: a run behind it goes in only beside that, and none goes in alone
    before it.
    ``available``, ``total`` and ``resident`` (bytes of one process) stand for the host's own
    readings; by default they are looked up at each call (a stand-in host replaces them).
    """

    def __init__(
        self,
        path: Path,
        available: Callable[[], int] | None = None,
        total: Callable[[], int] | None = None,
        resident: Callable[[int], int] | None = None,
        poll_s: float = 0.2,
        patience_s: float = PATIENCE_S,
        stop: threading.Event | None = None,
    ) -> None:
        self.path = path
        #: Set when the sweep stops: a wait for memory ends (:mod:`.stopping`).
        self.stop = stop
        self.seen = Seen(poll_s)
        self._scanned: tuple[float, Mapping[int, Sequence[int]]] = (float("-inf"), {})
        self._scanned_lock = threading.Lock()
        self.patience_s = patience_s
        self.available = available or (lambda: available_bytes())
        self.total = total or (lambda: total_memory_bytes())
        self.resident = resident or (lambda pid: resident_bytes(pid))
        self.poll_s = poll_s
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = filelock.FileLock(str(path) + ".lock")

    def _read(self) -> list[Hold]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return [
                Hold(
                    d["bytes"],
                    tuple(d["pids"]),
                    d["token"],
                    tuple(d["runs"]),
                    d["alone"],
                    d.get("waiting_since"),
                )
                for d in data
            ]
        except (OSError, ValueError, KeyError, TypeError):
            return []

    def _write(self, holds: Iterable[Hold]) -> None:
        tmp = self.path.with_suffix(".tmp")
        data = [
            {
                "bytes": h.bytes,
                "pids": h.pids,
                "token": h.token,
                "runs": h.runs,
                "alone": h.alone,
                "waiting_since": h.waiting_since,
            }
            for h in holds
        ]
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, self.path)

    def holds(self) -> list[Hold]:
        """The live holds (reclaiming those of dead processes), not the runs waiting in line."""
        return [h for h in self._live() if h.waiting_since is None]

    def waiting(self) -> list[Hold]:
        """The runs waiting in line, the longest waiting first."""
        live = [h for h in self._live() if h.waiting_since is not None]
        return sorted(live, key=lambda h: h.waiting_since or 0.0)

    def _live(self) -> list[Hold]:
        with self._lock:
            live = living(self._read())
            self._write(live)
            return live

    def free(
        self, holds: Iterable[Hold], children: Mapping[int, Sequence[int]] | None = None
    ) -> int:
        """Available memory less what ``holds`` reserved and do not use yet (``children``:
        :func:`process_children`, scanned now unless given)."""
        holds = list(holds)
        if children is None and any(h.runs for h in holds):
            children = process_children()
        runs = {h.token: with_descendants(h.runs, children) if h.runs else set() for h in holds}
        unused = sum(max(0, h.bytes - sum(map(self.resident, runs[h.token]))) for h in holds)
        return self.available() - unused

    def try_hold(self, need: int, pid: int | None = None, place: Hold | None = None) -> Hold | None:
        """Hold ``need`` bytes if they are free now beside what is kept for the runs in line
        before ``place`` (its place in line; None: behind all) that have waited past the
        patience, or if nothing holds any and none of those waits; else None."""
        children = self._children()  # the scan of /proc, outside the lock: a run newer than
        # it counts as using nothing of its hold yet, which errs on the safe side
        with self._lock:
            live = living(self._read())
            held = [h for h in live if h.waiting_since is None]
            kept = sum(h.bytes for h in self._patient(live, place))
            free = self.free(held, children)
            self.seen.saw(free if held or kept else float("inf"))  # nothing held: any goes in
            free -= kept
            if (held or kept) and need > free:
                self._write(live)
                return None
            alone = need > free or need > self.total()
            hold = Hold(need, (pid or os.getpid(),), os.urandom(8).hex(), alone=alone)
            self._write([*(h for h in live if place is None or h.token != place.token), hold])
            return hold

    def _children(self) -> Mapping[int, Sequence[int]]:
        """:func:`process_children`, scanned at most once a ``poll_s`` for every thread of
        this process that waits here (a process of 64 lanes would otherwise scan ``/proc``
        hundreds of times a second)."""
        with self._scanned_lock:
            at, children = self._scanned
            if time.monotonic() - at >= self.poll_s:
                children = process_children()
                self._scanned = (time.monotonic(), children)
            return children

    def _patient(self, live: list[Hold], place: Hold | None) -> list[Hold]:
        """The runs in line before ``place`` (None: all of them) that waited past the patience."""
        since = float("inf") if place is None else (place.waiting_since or 0.0)
        now = time.time()
        return [
            h
            for h in live
            if h.waiting_since is not None
            and h.waiting_since < since
            and now - h.waiting_since >= self.patience_s
        ]

    def acquire(self, need: int, timeout_s: float | None = None) -> Hold:
        """Wait in line for ``need`` bytes of host memory (see the class)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        place = None
        try:
            while True:
                hopeless = place is not None and self.seen.hopeless(need)  # first: in line
                hold = None if hopeless else self.try_hold(need, place=place)
                if hold is not None:
                    place = None  # taken out of the line with the hold
                    return hold
                if place is None:
                    place = self._line_up(need)
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"no {need / GIB:.1f} GiB of host memory free in {timeout_s} s"
                    )
                stopping.pause(self.stop, self.poll_s, "it waited for host memory")
        finally:
            if place is not None:
                self.release(place)

    def _line_up(self, need: int) -> Hold:
        place = Hold(need, (os.getpid(),), os.urandom(8).hex(), waiting_since=time.time())
        with self._lock:
            self._write([*living(self._read()), place])
        return place

    def add_pid(self, hold: Hold, pid: int) -> Hold:
        """Name the run's process: its memory (and its children's) is the hold's use."""
        with self._lock:
            updated = replace(hold, runs=(*hold.runs, pid))
            self._write([updated if h.token == hold.token else h for h in self._read()])
            return updated

    def release(self, hold: Hold) -> None:
        with self._lock:
            self._write([h for h in self._read() if h.token != hold.token])
        self.seen.forget()

    @contextmanager
    def hold(self, need: int | None) -> Iterator[Hold | None]:
        """Hold ``need`` bytes while the block runs (None: nothing to hold, at once). A run let
        in alone says so (:class:`HostMemoryWarning`)."""
        if not need:
            yield None
            return
        held = self.acquire(need)
        if held.alone:
            warnings.warn(
                HostMemoryWarning(
                    f"a run needs {need / GIB:.1f} GiB of host memory, more than is free "
                    f"({self.available() / GIB:.1f} GiB of {self.total() / GIB:.1f} GiB): "
                    "it runs alone, nothing else holding host memory"
                ),
                stacklevel=3,
            )
        try:
            yield held
        finally:
            self.release(held)
