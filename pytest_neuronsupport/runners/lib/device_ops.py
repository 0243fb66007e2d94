"""The device seen from inside a run: set up when its class is made, peak memory, one core a rank.

Two classes per device: ``<Device>Ops`` for a run on one core, and ``<Device>RankOps`` for a rank
of a several-core run. The plugin side of each device (how to pin a run, how many cores there
are) is :mod:`pytest_neuronsupport.devices`, whose ``Device.ops`` and ``Device.rank_ops`` name the
classes here; a script holds the class its run uses, and nothing of the other devices.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import platform
import resource
import sys

import torch

#: TorchNeuron's switch of fallback execution (1: a graph that fails to compile raises).
FALLBACK = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"


class CpuOps:
    """The CPU: nothing to set up, reset or wait for; peak memory is the peak resident set."""

    def reset_peak(self) -> None: ...
    def synchronize(self) -> None: ...
    def peak_gb(self) -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


class CpuRankOps(CpuOps):
    """A rank of a several-core CPU run: pinned to its share of the run's CPUs; gloo."""

    @staticmethod
    def rank_env(rank: int, world: int) -> dict[str, str]:
        """Environment of rank ``rank`` before it starts (its runtime reads it at start)."""
        return {}

    def setup_rank(self, rank: int, world: int) -> None:
        allowed = sorted(os.sched_getaffinity(0))
        share = max(1, len(allowed) // world)
        mine = allowed[rank * share : (rank + 1) * share] or allowed
        os.sched_setaffinity(0, mine)
        torch.set_num_threads(len(mine))
        init_process_group("gloo")

    def rank_device(self, rank: int) -> str:
        """Where a rank's inputs go."""
        return "cpu"


class CudaOps:
    """A CUDA GPU: peak memory is the most torch allocated on it."""

    def __init__(self) -> None:
        torch.cuda.init()  # type: ignore[no-untyped-call]

    reset_peak = staticmethod(lambda: torch.cuda.reset_peak_memory_stats())
    synchronize = staticmethod(lambda: torch.cuda.synchronize())
    peak_gb = staticmethod(lambda: float(torch.cuda.max_memory_allocated()) / 1e9)


class CudaRankOps(CudaOps):
    """A rank of a several-GPU run: one GPU a rank (the rank-th visible one); nccl."""

    @staticmethod
    def rank_env(rank: int, world: int) -> dict[str, str]:
        return {}

    def setup_rank(self, rank: int, world: int) -> None:
        torch.cuda.set_device(rank)
        init_process_group("nccl")

    def rank_device(self, rank: int) -> str:
        return f"cuda:{rank}"


class NeuronOps:
    """TorchNeuron: fallback execution off, its memory, op tracking and compile cache counters.

    A failed compile raises; peak memory comes from ``torch.neuron``; what ran on the CPU from
    its op tracking; what its compile cache did from its metrics arena's counters."""

    def __init__(self) -> None:
        os.environ[FALLBACK] = "1"
        self.neuronx = importlib.import_module("torch_neuronx")
        getattr(self.neuronx, "clear_op_tracking", dict)()
        try:  # its metrics arena: the compile cache's counters, cleared as the op tracking is
            self.metrics: object = importlib.import_module("torch_neuronx.metrics")
        except ImportError:
            self.metrics = None
        getattr(self.metrics, "clear_counters", dict)()

    reset_peak = staticmethod(lambda: torch.neuron.reset_peak_memory_stats())  # type: ignore[attr-defined]
    synchronize = staticmethod(lambda: torch.neuron.synchronize())  # type: ignore[attr-defined]
    peak_gb = staticmethod(lambda: float(torch.neuron.max_memory_allocated()) / 1e9)  # type: ignore[attr-defined]
    compile_options = staticmethod(lambda b: {"fallback_execution": False} if b == "neuron" else {})

    def report(self) -> dict[str, object]:
        """The row's CPU operators, fallback setting, graphs run, cached and compiled.

        ``cpu_ops`` and ``fallback_execution``; from the dynamo metrics (one entry per graph
        compiled or found in the cache, never one that fell back) ``graphs_run`` and
        ``backend_compile_s``; from the compile cache's counters, cleared when the device was
        set up, ``graphs_cached`` (``PersistentHits``) and ``graphs_compiled``
        (``TotalCompilations``). Without the counters every graph counts as compiled, and
        ``graphs_cached`` is null."""
        n, done = self.neuronx, dict[str, object](fallback_execution=os.environ[FALLBACK] == "0")
        done["cpu_ops"] = sorted(n.get_fallback_ops()) if hasattr(n, "get_fallback_ops") else None
        if hasattr(n, "get_dynamo_metrics"):
            u = [getattr(m, "torch_neuronx_compile_us", None) or 0 for m in n.get_dynamo_metrics()]
            done.update(graphs_run=len(u), graphs_compiled=len(u), backend_compile_s=sum(u) / 1e6)
        read = getattr(self.metrics, "get_counter_value", None)  # the metrics synchronized
        if read is not None:
            done.update(graphs_cached=int(read("CompilationCache.PersistentHits") or 0))
            done.update(graphs_compiled=int(read("CompilationCache.TotalCompilations") or 0))
        return done


class NeuronRankOps(NeuronOps):
    """A rank of a several-core Neuron run: one logical NeuronCore a rank; the neuron backend."""

    @staticmethod
    def rank_env(rank: int, world: int) -> dict[str, str]:
        """The rank-th core of the run's ``NEURON_RT_VISIBLE_CORES``."""
        cores = expand_ranges(os.environ.get("NEURON_RT_VISIBLE_CORES", ""))
        return {"NEURON_RT_VISIBLE_CORES": str(cores[rank])} if len(cores) >= world else {}

    def setup_rank(self, rank: int, world: int) -> None:
        init_process_group("neuron")

    def rank_device(self, rank: int) -> str:
        return "neuron"


class CpuTrainOps(CpuOps):
    """The CPU for a training script: its memory cap is an address-space limit, and its peak
    memory the address space mapped beyond what the process had when the cap was set (what the
    cap counts)."""

    base = 0

    def held_to_cap(self) -> None:
        """Past the cap the allocator raised already (the limit is the kernel's)."""

    def limit_memory(self, gb: float | None) -> None:
        """Let the process map at most ``gb`` more (RLIMIT_AS; None: no limit): past it
        torch's allocator raises instead of the kernel killing the process. Before the cap,
        malloc is made to map what the trial allocates (:func:`map_what_is_allocated`), so that
        the cap counts the same memory whatever process the trial was forked from."""
        if gb is not None:
            map_what_is_allocated()
            self.base = status_bytes("VmSize")
        limit = resource.RLIM_INFINITY if gb is None else self.base + int(gb * 1e9)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))

    def peak_gb(self) -> float:
        """The most address space mapped beyond the cap's base (GB); without a cap, the peak
        resident set."""
        if not self.base:
            return super().peak_gb()
        return max(0, status_bytes("VmPeak") - self.base) / 1e9


#: glibc's ``mallopt`` parameters (``malloc.h``), and the size from which an allocation is
#: mapped on its own (glibc's initial threshold, fixed: every tensor that matters is above it).
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 128 * 1024


def map_what_is_allocated() -> None:
    """Make glibc's malloc count under RLIMIT_AS what it allocates from now on.

    An address-space limit counts mappings, and glibc hands out memory it mapped long before:
    its mmap threshold is dynamic (it rises up to 32 MB once a large mapped block is freed, and
    larger allocations then come from the heap, whose free space a forked process inherits
    from its parent's history), and each thread may get an arena of its own, whose 64 MB of
    reserved address space is counted when made and used later for free. So the largest batch
    that fit depended on which process the trial was forked from. Fixed here: the threshold
    at 128 KiB (which also stops its adjustment), one arena, and the heap's free top given
    back. A C library that is not glibc is left as it is (a note in the run's log)."""
    if platform.libc_ver()[0] != "glibc":
        print("[neuronsupport] not glibc: malloc left as it is under the cap", file=sys.stderr)
        return
    libc = ctypes.CDLL(None)
    libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    libc.mallopt(M_ARENA_MAX, 1)
    libc.malloc_trim(0)


def status_bytes(name: str) -> int:
    """A size of ``/proc/self/status`` (``VmSize``, ``VmPeak``...), in bytes."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(f"{name}:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"no {name} in /proc/self/status")


class CudaTrainOps(CudaOps):
    """A GPU for a training script: its own memory is the cap."""

    def limit_memory(self, gb: float | None) -> None: ...
    def held_to_cap(self) -> None: ...


class NeuronTrainOps(NeuronOps):
    """A NeuronCore for a training script: the cap is held to TorchNeuron's own counter of the
    memory its allocator handed out (``torch.neuron.max_memory_allocated()``, synchronized
    first), the peak since the cap was set: TorchNeuron documents no per-process limit of its
    allocator (as ``torch.cuda.set_per_process_memory_fraction``), so past the cap the trial
    raises ``torch.OutOfMemoryError`` when its steps end (:meth:`held_to_cap`); past the core's
    own memory the runtime raises first ("Failed to allocate ...")."""

    cap_gb: float | None = None

    def limit_memory(self, gb: float | None) -> None:
        self.cap_gb = gb
        if gb is not None:
            self.synchronize()
            self.reset_peak()

    def held_to_cap(self) -> None:
        """Raise ``torch.OutOfMemoryError`` if the peak since the cap was set is past it."""
        if self.cap_gb is not None and (peak := self.peak_gb()) > self.cap_gb:
            raise torch.OutOfMemoryError(
                f"out of memory under the cap: {peak:.3f} GB allocated on the NeuronCore "
                f"(torch.neuron.max_memory_allocated), over {self.cap_gb:g} GB"
            )


def init_process_group(backend: str) -> None:
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend=backend)


def expand_ranges(text: str) -> list[int]:
    """``"0-3"`` → ``[0, 1, 2, 3]``; ``"1,3"`` → ``[1, 3]`` (NEURON_RT_VISIBLE_CORES syntax)."""
    cores: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    return cores
