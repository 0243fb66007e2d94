"""The stand-in's autocast for ``neuron``: ``torch.autocast(device_type="neuron")`` casts as a
PrivateUse1 backend registers it (kernels at the ``AutocastPrivateUse1`` dispatch key, as
``TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m)`` does in C++, and as
``torch.library.register_autocast`` does for one custom op), with CUDA's rules: matrix products
and convolutions in the autocast dtype, the operators that lose precision in float32, the
binary ones of mixed inputs in the widest type (PyTorch's ``autocast_mode.cpp``).

Without it, autocast on ``neuron`` is available (the device module names its dtypes) and does
nothing: every operator of a "bf16 autocast" step computes in float32. TorchNeuron's own list
is not documented on the pages read; CUDA's is the one PyTorch documents.
"""

# mypy: disable-error-code="no-untyped-def,no-untyped-call,attr-defined"

from __future__ import annotations

from typing import Any

import torch

_KEY = "AutocastPrivateUse1"
_EXCLUDED = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
#: CUDA's lists (``autocast_mode.cpp``, PyTorch 2.13): operators cast to the autocast dtype...
LOWER = (
    "_convolution",
    "_convolution.deprecated",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_tbc",
    "conv_transpose1d",
    "conv_transpose2d.input",
    "conv_transpose3d.input",
    "convolution",
    "prelu",
    "addmm",
    "addmv",
    "addr",
    "matmul",
    "einsum",
    "mm",
    "mv",
    "linalg_vecdot",
    "linear",
    "addbmm",
    "baddbmm",
    "bmm",
    "chain_matmul",
    "linalg_multi_dot",
    "scaled_dot_product_attention",
)
#: ...to float32...
FLOAT32 = (
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow.Tensor_Scalar",
    "pow.Tensor_Tensor",
    "pow.Scalar",
    "softplus",
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "rms_norm",
    "cosine_similarity",
    "nll_loss",
    "nll_loss2d",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "binary_cross_entropy_with_logits",
    "logsumexp",
    "softmax.int",
    "log_softmax.int",
    "cumsum",
    "cumprod",
    "prod",
    "prod.dim_int",
    "sum",
    "sum.dim_IntList",
    "linalg_vector_norm",
)
#: ...and to the widest floating type among their inputs.
WIDEST = (
    "addcdiv",
    "addcmul",
    "atan2",
    "bilinear",
    "cross",
    "dot",
    "vdot",
    "index_put",
    "tensordot",
    "scatter_add",
)

_lib: Any = None
_fallthrough: Any = None


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
        return value.to(dtype)
    if isinstance(value, list | tuple):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _widest(values: Any) -> torch.dtype | None:
    found: list[torch.dtype] = []
    for value in values:
        if isinstance(value, list | tuple):
            inner = _widest(value)
            found += [inner] if inner is not None else []
        elif isinstance(value, torch.Tensor) and value.is_floating_point():
            found.append(value.dtype)
    return max(found, key=lambda d: torch.finfo(d).bits) if found else None


def _kernel(op: Any, policy: str) -> Any:
    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        dtype: torch.dtype | None
        if policy == "lower":
            dtype = torch.get_autocast_dtype("neuron")
        elif policy == "float32":
            dtype = torch.float32
        else:
            dtype = _widest([*args, *kwargs.values()])
        if dtype is not None:
            args, kwargs = _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDED):
            return op(*args, **kwargs)

    return kernel


def register() -> None:
    """Register the kernels (once)."""
    global _lib, _fallthrough
    if _lib is not None:
        return
    # every other operator passes through the key (PyTorch registers this for CUDA and CPU)
    _fallthrough = torch.library.Library("_", "IMPL")
    _fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
    _lib = torch.library.Library("aten", "IMPL")
    for policy, names in (("lower", LOWER), ("float32", FLOAT32), ("widest", WIDEST)):
        for name in names:
            base, _, overload = name.partition(".")
            op = getattr(getattr(torch.ops.aten, base), overload or "default")
            _lib.impl(name, _kernel(op, policy), _KEY, with_keyset=True)
