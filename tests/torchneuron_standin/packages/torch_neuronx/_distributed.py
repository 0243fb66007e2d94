"""The stand-in's ``neuron`` process group: ``init_process_group(backend="neuron")``.

A Python process group whose collectives run through gloo on CPU aliases of the neuron tensors
(the same memory: an all-reduce of the aliases is the neuron tensors' all-reduce), for neuron
and CPU tensors alike (a compiled graph runs on CPU aliases, :mod:`._backend`). Functional
collectives (DTensor, tensor parallelism) reach it by its group name, which its gloo backend
carries.

Every collective goes through this group's Python methods, and each one's tensors stay
referenced from Python until many later collectives have been issued (:data:`KEPT`). Gloo's
worker thread, were it to drop the last reference of a tensor that has a Python object, would
free that object: it takes the GIL while it holds gloo's queue lock. A rank whose main thread
waits for that lock, or for that worker, holding the GIL (torch's trampoline for a Python
process group holds it through its own fallback of the coalesced all-gather and
reduce-scatter, which functional collectives call) would wait forever: the deadlock class of
pytorch/pytorch#56017. Here the last reference is always Python's own, and gloo's methods are
called through their bindings, which release the GIL.
"""

# mypy: disable-error-code="no-untyped-def,no-untyped-call,attr-defined,no-any-return"
# mypy: disable-error-code="misc,call-arg,override"

from __future__ import annotations

import os
from collections import deque
from typing import Any

import torch
import torch.distributed as dist

from torch_neuronx._device import _cpu_alias


def visible_cores() -> list[int]:
    """``NEURON_RT_VISIBLE_CORES`` (``0-3``, ``1,3``) as ids."""
    cores: list[int] = []
    for part in filter(None, os.environ.get("NEURON_RT_VISIBLE_CORES", "").split(",")):
        first, _, last = part.partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    return cores


#: How many collectives' tensors are kept referenced: gloo's worker threads have long released
#: a work by the time as many later ones were issued.
KEPT = 256


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _cpu_alias(value) if value.device.type == "neuron" else value
    if isinstance(value, list | tuple):
        return [_cpu(v) for v in value]
    return value


class NeuronProcessGroup(dist.ProcessGroup):
    """Collectives on CPU aliases through gloo."""

    def __init__(self, store: Any, rank: int, size: int, timeout: Any) -> None:
        super().__init__(rank, size)
        self.gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self.gloo)
        self.kept: deque[tuple[Any, ...]] = deque(maxlen=KEPT)

    def _kept(self, *tensors: Any) -> Any:
        """The CPU aliases of ``tensors``, each argument as given and its alias kept."""
        aliases = [_cpu(t) for t in tensors]
        self.kept.append((*tensors, *aliases))
        return aliases

    def getBackendName(self) -> str:
        return "neuron"

    def allreduce(self, tensors, opts=None):
        (tensors,) = self._kept(tensors)
        return self.gloo.allreduce(tensors, *([opts] if opts is not None else []))

    def allgather(self, outputs, inputs, opts=None):
        return self.gloo.allgather(*self._kept(outputs, inputs))

    def _allgather_base(self, output, input, opts=None):
        return self.gloo._allgather_base(*self._kept(output, input))

    def broadcast(self, tensors, opts=None):
        (tensors,) = self._kept(tensors)
        return self.gloo.broadcast(tensors, *([opts] if opts is not None else []))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """Functional collectives' all-gather (DTensor's): one gather per pair, the last's work."""
        pairs = list(zip(*self._kept(outputs, inputs), strict=True))
        works = [self.gloo._allgather_base(output, input) for output, input in pairs]
        for work in works[:-1]:
            work.wait()
        return works[-1]

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        """Functional collectives' reduce-scatter: one per pair, the last's work."""
        pairs = list(zip(*self._kept(outputs, inputs), strict=True))
        works = [self.gloo._reduce_scatter_base(output, input, opts) for output, input in pairs]
        for work in works[:-1]:
            work.wait()
        return works[-1]

    def barrier(self, opts=None):
        return self.gloo.barrier()

    def reduce_scatter(self, outputs, inputs, opts=None):
        return self.gloo.reduce_scatter(*self._kept(outputs, inputs), opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self.gloo._reduce_scatter_base(*self._kept(output, input), opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        splits = (output_split_sizes, input_split_sizes)
        return self.gloo.alltoall_base(*self._kept(output, input), *splits)


def _create(store: Any, rank: int, size: int, timeout: Any) -> NeuronProcessGroup:
    return NeuronProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Register the ``neuron`` backend of ``torch.distributed`` (once)."""
    if "NEURON" not in dist.Backend._plugins:
        dist.Backend.register_backend("neuron", _create, devices=["neuron", "cpu"])
