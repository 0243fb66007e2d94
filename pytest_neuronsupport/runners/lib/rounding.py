"""The eager run in a half dtype as a defined rounding: the same numbers on every host.

A CPU computes bf16 its own way: oneDNN takes AMX, AVX512-BF16 or plain AVX-512 and AVX2
(``ONEDNN_MAX_CPU_ISA`` caps it), ATen's attention follows, and the eager bf16 run moved from
float64 by 0.0151 to 0.0161 of its scores on SmolLM2-135M with the ISA (more with AMX). The noise
a device is held to came from the host, and so did the verdict. Here the eager run in a half
dtype (bf16, fp16) is computed as that dtype defines it instead (:class:`Rounded`): every
operation of the model in float64 (its inputs widened), its result rounded to the dtype the
operation gives (bf16 out of a bf16 matmul, fp32 out of a model's cast to fp32), as a device's
kernels do that accumulate wider than they store. Its numbers are the same on every host (bit
for bit under every oneDNN and ATen ISA of one machine), and its noise is the dtype's rounding
at each operation's output, nothing of the host.

fp32 stays the host's own eager run: its noise is mostly its sums' rounding (fp32 accumulates
in fp32, as every fp32 device does: rounding each operation's output alone is 2.3 times less
noisy on SmolLM2), and oneDNN's ISA does not change it (fp32 matmuls go through MKL).

What runs on the host's kernels as they are: operations that write into their inputs (a cache
update), that return a view (exact), that hold no floating-point tensor, and those whose output
cannot be worked out on the meta device or that have no float64 kernel (:attr:`Rounded.native`
counts them, by name, for the reference's ``info``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

#: The dtypes whose eager run is rounded rather than run on the host's kernels.
ROUNDED = ("bfloat16", "float16")
#: What each floating-point dtype is widened to, to compute an operation exactly enough.
WIDE = {torch.bfloat16: torch.float64, torch.float16: torch.float64, torch.float32: torch.float64}
WIDE.update({torch.complex32: torch.complex128, torch.complex64: torch.complex128})


def eager_outputs(outputs: Callable[[Any], Any], model: Any, dtype: str) -> tuple[Any, Any]:
    """``outputs(model)``, the model in ``dtype``: rounded (:class:`Rounded`) for a half dtype,
    else on the host's kernels; and the operations that ran on the host's kernels anyway."""
    if dtype not in ROUNDED:
        return outputs(model), {}
    with Rounded(model) as mode:
        return outputs(model), mode.native


class Rounded(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """While it is on, each operation on floating-point tensors is computed in float64 and its
    outputs rounded to the dtypes (and laid out in the strides) the operation gives; the
    model's parameters are widened once (``model``), what else comes in at each use."""

    def __init__(self, model: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.native: dict[str, int] = {}  # operation → times it ran on the host's kernels
        self.layouts: dict[Any, Any] = {}  # an operation's inputs → its outputs on meta
        self.kept: dict[int, torch.Tensor] = {}  # a parameter's storage → it, widened
        for tensor in (*model.parameters(), *model.buffers()):
            storage = tensor.untyped_storage()
            if tensor.dtype in WIDE and storage.data_ptr() not in self.kept:
                whole = torch.empty(0, dtype=tensor.dtype).set_(storage)
                self.kept[storage.data_ptr()] = whole.to(WIDE[tensor.dtype])

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        inputs, schema = (args, kwargs or {}), func._schema
        leaves = tree_flatten(inputs)[0]
        aliases = schema.is_mutable or any(r.alias_info is not None for r in schema.returns)
        if aliases or not any(isinstance(x, torch.Tensor) and x.dtype in WIDE for x in leaves):
            return func(*args, **inputs[1])  # it writes into an input or views one; no floats
        like = self.layout(func, inputs, leaves)
        if like is not None:
            try:
                wide = tree_map(self.widen, inputs)
                return narrowed(func(*wide[0], **wide[1]), like)
            except Exception:  # no float64 kernel: the host's, counted
                pass
        self.native[str(func)] = self.native.get(str(func), 0) + 1
        return func(*args, **inputs[1])

    def layout(self, func: Any, inputs: Any, leaves: list[Any]) -> Any:
        """The outputs ``func`` gives on the meta device (their dtypes and strides), worked out
        once for each kind of inputs; None where the meta device cannot tell."""
        kinds = (
            (x.dtype, x.shape, x.stride()) if isinstance(x, torch.Tensor) else x for x in leaves
        )
        key = (func, *kinds)
        try:
            if key not in self.layouts:
                self.layouts[key] = on_meta(func, inputs)
            return self.layouts[key]
        except TypeError:  # an input that cannot be a key: worked out each time
            return on_meta(func, inputs)

    def widen(self, value: Any) -> Any:
        """A floating-point tensor in float64 (a parameter's from :attr:`kept`, as the view of
        it that came in); anything else as it is."""
        if not isinstance(value, torch.Tensor) or value.dtype not in WIDE:
            return value
        whole = self.kept.get(value.untyped_storage().data_ptr())
        if whole is not None:
            return whole.as_strided(value.shape, value.stride(), value.storage_offset())
        return value.to(WIDE[value.dtype])


def on_meta(func: Any, inputs: Any) -> Any:
    """``func`` on meta copies of its inputs, or None where it cannot run there."""
    args, kwargs = tree_map(to_meta, inputs)
    try:
        return func(*args, **kwargs)
    except Exception:
        return None


def to_meta(value: Any) -> Any:
    """A tensor's copy on the meta device; a device, the meta device; anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    return torch.device("meta") if isinstance(value, torch.device) else value


def narrowed(wide: Any, like: Any) -> Any:
    """The float64 outputs ``wide`` rounded to ``like``'s dtypes, in its strides."""
    if isinstance(like, torch.Tensor) and isinstance(wide, torch.Tensor):
        out = torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device=wide.device)
        return out.copy_(wide)
    if isinstance(like, (list, tuple)) and isinstance(wide, (list, tuple)):
        return type(like)(narrowed(w, n) for w, n in zip(wide, like, strict=True))
    return wide
