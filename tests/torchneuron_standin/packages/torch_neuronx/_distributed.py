"""The stand-in's ``neuron`` process group: ``init_process_group(backend="neuron")``.

Each rank's collectives run through gloo on CPU aliases of its neuron tensors (the same
memory), so that a several-core run's ranks agree as TorchNeuron's would.
"""

from __future__ import annotations

import os


def visible_cores() -> list[int]:
    """``NEURON_RT_VISIBLE_CORES`` (``0-3``, ``1,3``) as ids."""
    cores: list[int] = []
    for part in filter(None, os.environ.get("NEURON_RT_VISIBLE_CORES", "").split(",")):
        first, _, last = part.partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    return cores


def register() -> None:
    """Register the ``neuron`` backend of ``torch.distributed`` (once)."""
