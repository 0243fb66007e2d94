"""The stand-in's compiled graphs: an ATen graph run as it is on CPU aliases of its neuron
inputs (one unwrap and wrap per graph instead of per operator), its outputs adopted as neuron
tensors. Adapted from the PrivateUse1 prototype, as :mod:`._device` is."""

# mypy: disable-error-code="no-untyped-def,no-untyped-call,attr-defined,no-any-return,union-attr"

from __future__ import annotations

from typing import Any

import torch

from torch_neuronx._device import (
    _CPU,
    CPU_SUBSTITUTES,
    NAME,
    _cpu_alias,
    _is_neuron,
    _make_neuron,
    _neuron_storage_for,
)

_Tensor = torch.Tensor


def _retarget_to_cpu(gm) -> None:
    """Rewrite device=neuron arguments in an aten FX graph to device=cpu."""

    def fix(a):
        if isinstance(a, torch.device) and a.type == NAME:
            return _CPU
        if isinstance(a, (list, tuple)):
            return type(a)(fix(x) for x in a)
        return a

    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.target = CPU_SUBSTITUTES.get(node.target, node.target)
            node.args = fix(node.args)
            node.kwargs = {k: fix(v) for k, v in node.kwargs.items()}
    keep = []
    for node in gm.graph.nodes:
        if node.op != "get_attr":  # tensor constants (e.g. from torch.tensor(...) in the model)
            continue
        *path, leaf = node.target.split(".")
        owner = gm
        for p in path:
            owner = getattr(owner, p)
        val = getattr(owner, leaf, None)
        if _is_neuron(val):
            keep.append(val)  # the CPU alias does not own the bytes
            from torch._subclasses.fake_tensor import unset_fake_temporarily

            with unset_fake_temporarily():  # the backend runs under FakeTensorMode
                cpu = _cpu_alias(val)
            if leaf in getattr(owner, "_buffers", {}):
                owner._buffers[leaf] = cpu
            elif leaf in getattr(owner, "_parameters", {}):
                owner._parameters[leaf] = torch.nn.Parameter(cpu, requires_grad=val.requires_grad)
            else:
                object.__setattr__(owner, leaf, cpu)
    gm._neuron_consts = keep
    gm.recompile()


def cpu_graph(gm, example_inputs):
    """Forward compiler: run the whole (functionalized, aten) graph on CPU aliases of
    the neuron inputs, then adopt the outputs as neuron tensors (zero-copy)."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    vals = out_node.args[0]
    out_neuron = []
    for v in vals if isinstance(vals, (list, tuple)) else [vals]:
        mv = v.meta.get("val") if hasattr(v, "meta") else None
        out_neuron.append(isinstance(mv, torch.Tensor) and mv.device.type == NAME)
    _retarget_to_cpu(gm)

    def run(args):
        by_ptr = {}
        by_alias = {}
        cargs = []
        for a in args:
            if isinstance(a, _Tensor) and a.device.type == NAME:
                c = _cpu_alias(a)
                by_ptr[a.untyped_storage().data_ptr()] = a
                by_alias[id(c)] = a
                cargs.append(c)
            else:
                cargs.append(a)
        args.clear()
        outs = gm(*cargs)
        res = []
        fresh: dict[int, Any] = {}
        for y, is_n in zip(outs, out_neuron, strict=True):
            if is_n and isinstance(y, _Tensor) and y.device.type == "cpu":
                orig = by_alias.get(id(y))
                if orig is not None:
                    y = orig
                else:
                    p = y.untyped_storage().data_ptr()
                    src = by_ptr.get(p)
                    if src is not None and y.untyped_storage().nbytes():
                        y = _make_neuron(
                            src.untyped_storage(), y.dtype, y.size(), y.stride(), y.storage_offset()
                        )
                    else:
                        nst = fresh.get(p)
                        if nst is None:
                            nst = fresh[p] = _neuron_storage_for(y)
                        y = _make_neuron(nst, y.dtype, y.size(), y.stride(), y.storage_offset())
            res.append(y)
        return res

    run._boxed_call = True
    return run
