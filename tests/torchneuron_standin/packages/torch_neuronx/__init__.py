"""A stand-in for TorchNeuron (``torch-neuronx`` 2.13.3+), for the plugin's tests only.

It is not TorchNeuron and runs nothing on Trainium: importing it registers a ``neuron`` device
that is real to PyTorch (PrivateUse1 through torch's Python backend, its memory the CPU's:
:mod:`._device`) and a dynamo backend ``neuron`` that compiles as ``aot_eager`` does, so that
the runners' Neuron code (``.to("neuron")``, ``torch.neuron.*``, ``backend="neuron"``) runs
unmodified on a CPU-only machine. It has the functions of TorchNeuron's API that the runs call,
with the meaning its documentation and source give them:

* ``get_fallback_ops()`` / ``get_executed_ops()`` / ``clear_op_tracking()``: the names
  (``aten::add.Tensor``) of the operators that ran on the CPU, and on the device, since the last
  clear. Which operators "fall back" is what the test says (``NEURON_STANDIN_CPU_OPS``, comma
  separated names, with or without their overload): any of them that runs, eagerly or in a
  compiled graph, is a CPU fallback;
* ``get_dynamo_metrics()`` / ``reset_dynamo_metrics()``: one entry per graph compiled or found
  in the persistent cache, with its node count and compile time in µs (0 when found);
* the persistent compile cache (:mod:`._neff_cache`): a graph's NEFF-like file kept in
  ``TORCH_NEURONX_NEFF_CACHE_DIR`` as ``ab/cd/<key>.neff`` (written by rename) and read back by
  the next compile of the same graph, which compiles nothing; ``torch_neuronx.metrics`` counts
  its hits and compilations (``get_counter_value("CompilationCache.PersistentHits")``);
* a compile it is told to fail (``NEURON_STANDIN_FAIL_COMPILE``: operator names; a graph with one
  of them fails to compile, the error naming it) raises, or, with fallback execution on
  (``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0``, or the compile option
  ``fallback_execution=True``, which wins), runs the graph eagerly and lists no metrics for it,
  as TorchNeuron documents; ``NEURON_STANDIN_FALLBACK_ALWAYS`` names operators whose graph
  fails and runs eagerly whatever the setting (a runtime that falls back silently: what the
  plugin must still not count as a compiler PASS);
* at import it prints the cores it was given (``NEURON_RT_VISIBLE_CORES``) to stderr, so that a
  test reads in a run's log where it was pinned;
* a ``neuron`` process group for several-core runs (:mod:`._distributed`).

The tests install it with :mod:`tests.torchneuron_standin` (a folder of packages with its
``torch-neuronx`` and ``neuronx-cc`` metadata, versions ending ``+standin``, a fake
``neuron-ls`` and a device folder).
"""

# mypy: disable-error-code="no-untyped-def,no-untyped-call,attr-defined"

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from torch_neuronx import _device

__version__ = "2.13.3.0+standin"

#: What ran where since the last clear (operator names), and the graphs compiled.
_FALLBACK: set[str] = set()
_EXECUTED: set[str] = set()


@dataclass
class NeuronCompilationMetrics:
    """One compiled graph, with the fields TorchNeuron's ``metrics.py`` gives it."""

    graph_id: str
    graph_name: str
    model_name: str
    has_collectives: bool
    graph_node_count: int
    timestamp: float
    torch_neuronx_fx_passes_us: int | None = None
    torch_neuronx_lower_us: int | None = None
    torch_neuronx_compile_us: int | None = None


_METRICS: list[NeuronCompilationMetrics] = []


def _names(variable: str) -> frozenset[str]:
    return frozenset(n.strip() for n in os.environ.get(variable, "").split(",") if n.strip())


def op_name(op: Any) -> str:
    """``aten::add.Tensor``: an operator's name as TorchNeuron's tracking spells it."""
    schema = op._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _listed(name: str, listed: frozenset[str]) -> bool:
    return name in listed or name.split(".")[0] in listed


def _record(name: str) -> None:
    (_FALLBACK if _listed(name, _names("NEURON_STANDIN_CPU_OPS")) else _EXECUTED).add(name)


def get_fallback_ops() -> list[str]:
    """Operators that ran on the CPU instead of the device (unique names, no order)."""
    return list(_FALLBACK)


def get_executed_ops() -> list[str]:
    """Operators that ran on the device (unique names, no order)."""
    return list(_EXECUTED)


def clear_op_tracking() -> None:
    _FALLBACK.clear()
    _EXECUTED.clear()


def get_dynamo_metrics() -> list[NeuronCompilationMetrics]:
    """One entry per graph the ``neuron`` backend compiled (synchronizes first)."""
    synchronize()
    return list(_METRICS)


def reset_dynamo_metrics() -> None:
    _METRICS.clear()


def synchronize(device: Any = None) -> None:
    """The device runs on the CPU, synchronously: nothing to wait for."""


def device_count() -> int:
    """Logical cores visible to the process (``NEURON_RT_VISIBLE_CORES``; 1 unless set)."""
    from torch_neuronx._distributed import visible_cores

    return max(1, len(visible_cores()))


class CompileFailure(RuntimeError):
    """The stand-in's compiler refused a graph (it was told to); ``args[1]``: it falls back
    whatever the setting."""

    def __str__(self) -> str:
        return str(self.args[0])


def _fallback_execution(options: dict[str, Any]) -> bool:
    """Whether a graph that fails to compile runs eagerly: the compile option wins over
    ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION`` (1 by default: off)."""
    if "fallback_execution" in options:
        return bool(options["fallback_execution"])
    return os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1").strip() == "0"


def _inference_compiler(name: str) -> Any:
    """AOT autograd's compiler of one ATen graph: refuse it where told, else run it as it is
    (on CPU aliases of its inputs, :func:`._backend.cpu_graph`), its operators recorded."""
    from torch_neuronx._backend import cpu_graph

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        from torch_neuronx import _neff_cache

        started = time.perf_counter()
        ops = [
            op_name(n.target)
            for n in gm.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
        ]
        code = gm.code  # the graph as dynamo handed it over (cpu_graph retargets it)
        key = _neff_cache.key(code, example_inputs)
        cached = _neff_cache.load(key)  # its NEFF in the persistent cache: nothing to compile
        refused = _names("NEURON_STANDIN_FAIL_COMPILE") | _names("NEURON_STANDIN_FALLBACK_ALWAYS")
        for op in [] if cached else ops:
            if _listed(op, refused):
                raise CompileFailure(
                    f"neuronx-cc (stand-in) cannot compile graph {name}: no lowering for {op}",
                    _listed(op, _names("NEURON_STANDIN_FALLBACK_ALWAYS")),
                )
        compiled = cpu_graph(gm, example_inputs)
        for op in ops:
            _record(op)
        if not cached:
            _neff_cache.store(key, code)
        took = 0 if cached else int((time.perf_counter() - started) * 1e6)
        _METRICS.append(
            NeuronCompilationMetrics(
                graph_id=f"standin-{len(_METRICS)}",
                graph_name=name,
                model_name="model",
                has_collectives=any("c10d" in op for op in ops),
                graph_node_count=len(gm.graph.nodes),
                timestamp=time.time(),
                torch_neuronx_compile_us=took,
            )
        )
        return compiled

    return compile_graph


def neuron_backend(
    gm: torch.fx.GraphModule, example_inputs: Any, *, options: Any = None, mode: str = "default"
) -> Any:
    """``torch.compile(backend="neuron")``: AOT autograd with the stand-in's compiler; a graph
    that fails to compile raises, or runs eagerly with fallback execution on."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop

    options = dict(options or {})
    name = f"model_{len(_METRICS)}_inference"
    compiler = _inference_compiler(name)
    try:
        return aot_autograd(
            fw_compiler=compiler, bw_compiler=boxed_nop, inference_compiler=compiler
        )(gm, example_inputs)
    except CompileFailure as exc:
        if not (_fallback_execution(options) or exc.args[1]):
            raise
        print(f"[torch_neuronx stand-in] fallback execution: {exc}", file=sys.stderr)
        return gm.forward


def _register_backend() -> None:
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "neuron" not in _COMPILER_FNS:
        register_backend(neuron_backend, name="neuron")


print(
    f"[torch_neuronx stand-in] NEURON_RT_VISIBLE_CORES={os.environ.get('NEURON_RT_VISIBLE_CORES')}",
    file=sys.stderr,
)
_device.install()
_device.RECORD.append(lambda op: _record(op_name(op)))
torch.neuron.get_dynamo_metrics = get_dynamo_metrics
torch.neuron.reset_dynamo_metrics = reset_dynamo_metrics
torch.neuron.device_count = device_count
_register_backend()
from torch_neuronx import _distributed  # noqa: E402  (the "neuron" process group)

_distributed.register()
