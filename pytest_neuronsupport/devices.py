"""The device interface, plugin side: which device, which compiler, how many cores, how to pin.

Three implementations: ``neuron`` (TorchNeuron on Trainium), ``cuda`` and ``cpu``. The run side
(setting the device up, reading peak memory, one core per rank inside ``run.py``) is the pair of
classes each device names in ``ops`` and ``rank_ops``, in
:mod:`pytest_neuronsupport.runners.lib.device_ops` (they import torch, which the plugin side does
not). Nothing else in the package asks which device it is. What a run's compile cache did
(:meth:`Device.graphs`) is read here too, from inductor's FX graph cache counters (on Neuron, the
run reports its graphs itself, from TorchNeuron's ``get_dynamo_metrics()`` and its compile
cache's counters), and which compile cache a sweep may share (:meth:`Device.shared_cache`).

A Neuron machine's cores are what ``neuron-ls -j`` says (:func:`neuron_cores`): each chip's
logical cores, their ids (what ``NEURON_RT_VISIBLE_CORES`` takes), the logical core
configuration (LNC) and the chip's memory; :meth:`Device.check` says, before a sweep starts,
why the device cannot be used (:mod:`pytest_neuronsupport.torchneuron`).

Detection is cheap: no torch import unless a CUDA driver is present.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pytest_neuronsupport import torchneuron
from pytest_neuronsupport.runners.lib.processes import COMPILE_THREADS_ENV


def package_version(distribution: str) -> str | None:
    """Installed version of a distribution, or None."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def public_version(text: str) -> str:
    """``2.13.0+cpu`` → ``2.13.0``: the local part names a build, not a release."""
    return text.split("+", 1)[0]


def core_ranges(cores: Sequence[int]) -> str:
    """``[0, 1, 2, 3]`` → ``"0-3"``; ``[4]`` → ``"4"`` (NEURON_RT_VISIBLE_CORES syntax)."""
    if not cores:
        raise ValueError("no cores")
    ordered = sorted(cores)
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return str(ordered[0]) if len(ordered) == 1 else f"{ordered[0]}-{ordered[-1]}"
    return ",".join(str(c) for c in ordered)


@dataclass(frozen=True)
class Device:
    """What the plugin needs to know of a device before any run starts."""

    name: str
    default_backend: str
    #: dtype of the device run: bf16 on accelerators, fp32 on the CPU.
    default_dtype: str
    #: torch.compile(fullgraph=...) for the device run.
    fullgraph: bool
    #: The run side: its class for a run on one core, and for a rank of a several-core run.
    ops: str
    rank_ops: str
    #: Whether a training trial is held to the core's memory by the device's training ops
    #: (``limit_memory``), or runs out of the device's own.
    caps_training_memory: bool = True

    @property
    def train_ops(self) -> str:
        """The run side of a training script: the one-core class, with ``limit_memory``."""
        return self.ops.removesuffix("Ops") + "TrainOps"

    #: Environment variables (name, value, why) with which a sweep on the device is refused:
    #: its runs would pass what the compiler never compiled (``backends.compile_turned_off``).
    refused_env: tuple[tuple[str, str, str], ...] = ()

    def available(self) -> bool:
        raise NotImplementedError

    def check(self, environ: Mapping[str, str]) -> str | None:
        """Why the device cannot run a sweep in ``environ`` (the runs' environment), or None."""
        return None

    def compiler(self, backend: str) -> tuple[str, str]:
        """(compiler, version) naming the dataset folder ``data/<compiler>-<version>/``."""
        torch_version = public_version(package_version("torch") or "unknown")
        return backend_label(backend), torch_version

    def core_count(self) -> int:
        raise NotImplementedError

    def lnc(self) -> int | None:
        """The logical core configuration the cores are counted at (None: not a Neuron
        device, or ``neuron-ls`` does not say)."""
        return None

    def pin_env(self, cores: Sequence[int]) -> dict[str, str]:
        """Environment that restricts a run to ``cores`` before any runtime starts."""
        raise NotImplementedError

    def core_capacity_gb(self) -> float:
        """Memory one core provides to a model (the unit of core sizing); the option
        ``--neuron-core-memory`` overrides it."""
        raise NotImplementedError

    def cpus(self, cores: Sequence[int]) -> list[int] | None:
        """CPU ids a run on ``cores`` is pinned to (its affinity), or None for no pinning."""
        return None

    def run_env(self, cache_dir: Path) -> dict[str, str]:
        """Environment of every run: the compiler's cache kept warm under ``cache_dir``."""
        return {"TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor")}

    def shared_cache(self, cache_dir: Path, backend: str) -> tuple[Path, str] | None:
        """The compile cache a sweep may share with other machines (``--neuron-compile-cache``):
        the folder its runs keep it in, and the name of the folder it is shared under, its
        compiler's (as the dataset's pair folders: ``neuronxcc-<version>``); None: the device
        keeps none that another machine could use with this backend."""
        return None

    def reference_env(self, cores: int, workers: int = 1) -> dict[str, str]:
        """Environment of a CPU reference's pass for a run of ``cores`` cores: it holds none of
        the device's (an accelerator's runtime is not started: the pass never touches it), and
        its share of the host's CPUs beside the sweep's other ``workers``
        (:func:`host_threads`)."""
        return host_threads(workers)

    def lease_env(self, cores: Sequence[int], workers: int = 1) -> dict[str, str]:
        """Environment of a run leased ``cores``: restricted to them (:meth:`pin_env`), each of
        its processes (a rank a core) with its share of the host's CPUs (:func:`host_threads`)
        for what it computes there (tokenizing, the operators that fall back to the CPU)."""
        return {**host_threads(workers, len(cores)), **self.pin_env(cores)}

    def graphs(self, inductor: Mapping[str, Any]) -> dict[str, int | None]:
        """A run's ``graphs_cached`` and ``graphs_compiled``: the hits of inductor's FX graph
        cache, and its misses and bypasses (``inductor``: the run's
        ``torch._dynamo.utils.counters["inductor"]``); null when no graph went through that
        cache (a backend without one, ``aot_eager``, or nothing compiled)."""
        cached = int(inductor.get("fxgraph_cache_hit", 0))
        fresh = int(inductor.get("fxgraph_cache_miss", 0)) + int(
            inductor.get("fxgraph_cache_bypass", 0)
        )
        if not cached and not fresh:
            return {"graphs_cached": None, "graphs_compiled": None}
        return {"graphs_cached": cached, "graphs_compiled": fresh}


#: Where TorchNeuron keeps its persistent compile cache (a folder; ``/tmp/neff_cache`` unset).
NEFF_CACHE_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"


def backend_label(backend: str) -> str:
    """A backend as a folder-safe label: ``tests.backends:perturb`` → ``tests.backends.perturb``."""
    return re.sub(r"[^A-Za-z0-9._+-]+", ".", backend).strip(".") or "backend"


@dataclass(frozen=True)
class NeuronDevice(Device):
    """TorchNeuron on Trn2 and Trn3: the cores ``neuron-ls -j`` reports
    (:func:`~pytest_neuronsupport.torchneuron.neuron_cores`), pinned by their ids; fallback
    execution off in every run."""

    name: str = "neuron"
    default_backend: str = "neuron"
    default_dtype: str = "bfloat16"
    fullgraph: bool = True
    ops: str = "NeuronOps"
    rank_ops: str = "NeuronRankOps"
    refused_env: tuple[tuple[str, str, str], ...] = (
        (
            torchneuron.FALLBACK_ENV,
            "0",
            "runs a graph that fails to compile eagerly (TorchNeuron's fallback execution): "
            "a model the compiler cannot compile would PASS",
        ),
    )

    def available(self) -> bool:
        return importlib.util.find_spec("torch_neuronx") is not None and bool(
            torchneuron.device_files(os.environ)
        )

    def check(self, environ: Mapping[str, str]) -> str | None:
        """``neuron-ls`` lists cores, and the stack is TorchNeuron for the installed torch."""
        try:
            torchneuron.neuron_cores(environ)
        except torchneuron.NeuronError as exc:
            return str(exc)
        neuronx, torch_version = package_version("torch-neuronx"), package_version("torch")
        return torchneuron.stack_problem(environ, neuronx, torch_version)

    def compiler(self, backend: str) -> tuple[str, str]:
        if backend == "neuron":
            return "neuronxcc", package_version("neuronx-cc") or "unknown"
        return super().compiler(backend)

    def cores(self) -> torchneuron.Cores:
        """The machine's logical cores (``neuron-ls -j``, in this process's environment)."""
        return torchneuron.neuron_cores(os.environ)

    def core_count(self) -> int:
        return len(self.cores().ids)

    def lnc(self) -> int | None:
        return self.cores().lnc

    def pin_env(self, cores: Sequence[int]) -> dict[str, str]:
        """Lease indices → the cores' ids (the lease's k-th core is the machine's k-th)."""
        ids = self.cores().ids
        return {"NEURON_RT_VISIBLE_CORES": core_ranges([ids[c] for c in cores])}

    def core_capacity_gb(self) -> float:
        """A chip's memory over its logical cores (24 GiB on Trn2 at LNC=2)."""
        return round(self.cores().core_memory_gb, 3)

    def neff_cache(self, cache_dir: Path) -> Path:
        """TorchNeuron's persistent compile cache for the runs: ``TORCH_NEURONX_NEFF_CACHE_DIR``
        where the sweep's environment sets it, else a folder per compiler under ``cache_dir``,
        ``neff/neuronxcc-<version>`` (TorchNeuron's cache has no compiler folder of its own)."""
        compiler, version = self.compiler("neuron")
        default = cache_dir / "neff" / f"{compiler}-{version}"
        return Path(os.environ.get(NEFF_CACHE_ENV) or default)

    def shared_cache(self, cache_dir: Path, backend: str) -> tuple[Path, str] | None:
        """The NEFF cache (:meth:`neff_cache`), shared as ``neuronxcc-<version>``."""
        if backend != "neuron":
            return None
        compiler, version = self.compiler(backend)
        return self.neff_cache(cache_dir), f"{compiler}-{version}"

    def run_env(self, cache_dir: Path) -> dict[str, str]:
        """The NEFF cache kept warm under ``cache_dir`` (a user's own setting wins), fallback
        execution off, and the LNC the cores were counted at (unless set)."""
        env = super().run_env(cache_dir)
        env[NEFF_CACHE_ENV] = str(self.neff_cache(cache_dir))
        env[torchneuron.FALLBACK_ENV] = "1"
        lnc = self.cores().lnc
        if lnc is not None and "NEURON_LOGICAL_NC_CONFIG" not in os.environ:
            env["NEURON_LOGICAL_NC_CONFIG"] = str(lnc)
        return env


@dataclass(frozen=True)
class CudaDevice(Device):
    name: str = "cuda"
    default_backend: str = "inductor"
    default_dtype: str = "bfloat16"
    fullgraph: bool = False
    ops: str = "CudaOps"
    rank_ops: str = "CudaRankOps"
    caps_training_memory: bool = False

    def available(self) -> bool:
        if not (Path("/proc/driver/nvidia").exists() or glob.glob("/dev/nvidia[0-9]*")):
            return False
        import torch

        return bool(torch.cuda.is_available())

    def core_count(self) -> int:
        import torch

        return max(1, int(torch.cuda.device_count()))

    def pin_env(self, cores: Sequence[int]) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(c) for c in sorted(cores))}

    def reference_env(self, cores: int, workers: int = 1) -> dict[str, str]:
        """No GPU is visible to a CPU reference's pass; its share of the host's CPUs."""
        return {**host_threads(workers), "CUDA_VISIBLE_DEVICES": ""}

    def core_capacity_gb(self) -> float:
        import torch

        return float(torch.cuda.get_device_properties(0).total_memory) / 1e9


@dataclass(frozen=True)
class CpuDevice(Device):
    name: str = "cpu"
    default_backend: str = "inductor"
    default_dtype: str = "float32"
    fullgraph: bool = False
    ops: str = "CpuOps"
    rank_ops: str = "CpuRankOps"

    def available(self) -> bool:
        return True

    def core_count(self) -> int:
        return len(os.sched_getaffinity(0))

    def pin_env(self, cores: Sequence[int]) -> dict[str, str]:
        """A run's compute threads, and inductor's compile workers, are its cores: left to
        itself inductor starts a pool of a worker per CPU of the host in every run (up to 32),
        which the other runs' cores pay for. A ``TORCHINDUCTOR_COMPILE_THREADS`` the sweep's
        own environment sets is the user's choice, kept."""
        pinned = dict.fromkeys(THREADS_ENV, str(len(cores)))
        if COMPILE_THREADS_ENV not in os.environ:
            pinned[COMPILE_THREADS_ENV] = str(len(cores))
        return pinned

    def reference_env(self, cores: int, workers: int = 1) -> dict[str, str]:
        """The CPU is the device here: a reference's pass uses as many threads as its run's
        cores, as the run itself would (unpinned: it holds no lease)."""
        return self.pin_env(range(cores))

    def lease_env(self, cores: Sequence[int], workers: int = 1) -> dict[str, str]:
        """The CPU is the device here: a run's threads are its leased cores."""
        return self.pin_env(cores)

    def core_capacity_gb(self) -> float:
        """The machine's memory shared evenly among its cores."""
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
        return round(total / self.core_count(), 3)

    def cpus(self, cores: Sequence[int]) -> list[int]:
        """Lease indices → this process's allowed CPU ids (the lease's k-th core is the k-th)."""
        allowed = sorted(os.sched_getaffinity(0))
        return [allowed[c] for c in cores]


#: The environment variables that size a process's compute threads (torch's intra-op pool,
#: OpenMP's, MKL's).
THREADS_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def host_threads(workers: int, processes: int = 1) -> dict[str, str]:
    """Threads of each of ``processes`` processes that compute on the host for one of a
    sweep's ``workers`` (xdist's, on this machine): the host's CPUs shared evenly, at least one
    each; none set where the sweep's own environment sets them (the user's choice). Left to
    themselves, torch's and OpenMP's pools take every CPU in every process: the CPU references
    of 64 workers on a 192-vCPU host would start 12,288 threads on 192 CPUs."""
    if any(name in os.environ for name in THREADS_ENV):
        return {}
    each = max(1, len(os.sched_getaffinity(0)) // max(1, workers) // max(1, processes))
    return dict.fromkeys(THREADS_ENV, str(each))


DEVICES: dict[str, Device] = {d.name: d for d in (NeuronDevice(), CudaDevice(), CpuDevice())}
CHOICES = ("auto", *DEVICES)


def resolve(name: str) -> Device:
    """The device named (``auto``: neuron if present, else cuda, else cpu)."""
    if name == "auto":
        return next(d for d in DEVICES.values() if d.available())
    try:
        return DEVICES[name]
    except KeyError:
        raise ValueError(f"unknown device {name!r} (choose from {', '.join(CHOICES)})") from None
