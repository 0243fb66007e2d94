"""The stand-in's metrics arena: counters by name, read as TorchNeuron's ``torch_neuronx.metrics``
reads its own (``get_counter_value``: None until a counter's first increment). The compile
cache counts ``CompilationCache.PersistentHits``, ``CompilationCache.PersistentMisses`` and
``CompilationCache.TotalCompilations`` (:mod:`torch_neuronx._neff_cache`)."""

from __future__ import annotations

_COUNTERS: dict[str, int] = {}


def count(name: str, by: int = 1) -> None:
    _COUNTERS[name] = _COUNTERS.get(name, 0) + by


def get_counter_names() -> list[str]:
    """The counters that have data."""
    return sorted(_COUNTERS)


def get_counter_value(name: str) -> int | None:
    """A counter's value (None: never counted)."""
    return _COUNTERS.get(name)


def clear_counters() -> None:
    _COUNTERS.clear()
