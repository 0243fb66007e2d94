"""The stand-in's ``neuron`` process group: ``init_process_group(backend="neuron")``.

A Python process group whose collectives run through gloo on CPU aliases of the neuron tensors
(the same memory: an all-reduce of the aliases is the neuron tensors' all-reduce), for neuron
and CPU tensors alike (a compiled graph runs on CPU aliases, :mod:`._backend`). Functional
collectives (DTensor, tensor parallelism) reach it by its group name, which its gloo backend
carries.
"""

# mypy: disable-error-code="no-untyped-def,no-untyped-call,attr-defined,no-any-return"
# mypy: disable-error-code="misc,call-arg,override"

from __future__ import annotations

import os
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

    def getBackendName(self) -> str:
        return "neuron"

    def allreduce(self, tensors, opts=None):
        return self.gloo.allreduce(_cpu(tensors), *([opts] if opts is not None else []))

    def allgather(self, outputs, inputs, opts=None):
        return self.gloo.allgather(_cpu(outputs), _cpu(inputs))

    def _allgather_base(self, output, input, opts=None):
        return self.gloo._allgather_base(_cpu(output), _cpu(input))

    def broadcast(self, tensors, opts=None):
        return self.gloo.broadcast(_cpu(tensors), *([opts] if opts is not None else []))

    def barrier(self, opts=None):
        return self.gloo.barrier()

    def reduce_scatter(self, outputs, inputs, opts=None):
        return self.gloo.reduce_scatter(_cpu(outputs), _cpu(inputs), opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self.gloo._reduce_scatter_base(_cpu(output), _cpu(input), opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        splits = (output_split_sizes, input_split_sizes)
        return self.gloo.alltoall_base(_cpu(output), _cpu(input), *splits)


def _create(store: Any, rank: int, size: int, timeout: Any) -> NeuronProcessGroup:
    return NeuronProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Register the ``neuron`` backend of ``torch.distributed`` (once)."""
    if "NEURON" not in dist.Backend._plugins:
        dist.Backend.register_backend("neuron", _create, devices=["neuron", "cpu"])
