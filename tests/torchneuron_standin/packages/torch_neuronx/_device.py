"""The stand-in's ``neuron`` device: PrivateUse1 through torch's Python backend, CPU memory.

A test double (adapted from a prototype of PrivateUse1's Python backend on torch 2.13): tensors
on ``neuron`` are real PrivateUse1 tensors (``device.type == "neuron"``) whose storage points into
CPU memory. Every ATen operator that reaches PrivateUse1 goes through one Python kernel that
aliases the neuron inputs as CPU tensors (same memory), runs the CPU kernel, and adopts the
outputs as neuron tensors, as TorchNeuron's own CPU fallback does (with a copy). Each
operator so run is recorded (:data:`RECORD`): the stand-in's op tracking.

Not TorchNeuron: nothing here says anything about Trainium.
"""

# mypy: disable-error-code="no-untyped-def,no-untyped-call,type-arg,attr-defined,no-any-return"

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import torch

NAME = "neuron"
_CPU = torch.device("cpu")
_CPU_KS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_installed = False
_lib: Any = None
_lock = threading.Lock()
#: Called with each operator's name as it runs on the device (the op tracking).
RECORD: list[Callable[[Any], None]] = []

# --------------------------------------------------------------------------- memory stats
_stats = {"allocated": 0, "peak": 0, "n_alloc": 0}


def _check_room(nbytes: int) -> None:
    """The core's memory, where the test gives one (``NEURON_STANDIN_CORE_MEMORY_GB``): an
    allocation past it fails as the Neuron runtime's does (its out-of-memory report's first
    line, AWS Neuron docs "Neuron Device Memory")."""
    limit = float(os.environ.get("NEURON_STANDIN_CORE_MEMORY_GB") or 0) * 1e9
    if limit and _stats["allocated"] + nbytes > limit:
        core = (os.environ.get("NEURON_RT_VISIBLE_CORES") or "0").split(",")[0].split("-")[0]
        raise RuntimeError(
            f"Failed to allocate {nbytes / 2**30:.3f}GB (alignment: none, usage: tensors) on "
            f"ND 0:NC {core}"
        )


class _Keep:
    """Owns the CPU bytes behind one neuron StorageImpl (stored as nst._keep)."""

    __slots__ = ("bases", "cst", "nbytes", "safe")

    def __init__(self, cst):
        self.cst = cst  # owning CPU UntypedStorage
        self.nbytes = nb = cst.nbytes()
        self.bases = {}
        self.safe = None  # non-resizable CPU alias storage (for out= ops)
        _stats["allocated"] += nb
        _stats["n_alloc"] += 1
        if _stats["allocated"] > _stats["peak"]:
            _stats["peak"] = _stats["allocated"]

    def __del__(self):
        _stats["allocated"] -= self.nbytes

    def base(self, dtype):
        b = self.bases.get(dtype)
        if b is None:
            if self.safe is None:
                self.safe = _mkst(self.cst.data_ptr(), _CPU, self.nbytes)
            # base over a NON-resizable alias storage: a CPU kernel that tries to grow an
            # out= alias raises instead of reallocating memory the neuron storage points at
            b = torch.empty(0, dtype=dtype)
            b.set_(self.safe)
            self.bases[dtype] = b
        return b


# --------------------------------------------------------------------------- wrapping helpers
_NDEV: Any = None
_set_op = torch.ops.aten.set_.source_Storage_storage_offset
_create: Any = torch._C._acc.create_empty_tensor
_mkst = torch._C._construct_storage_from_data_pointer
_as_strided = torch.as_strided


def _neuron_storage_for(cpu_t: torch.Tensor):
    """Neuron storage sharing the memory of cpu_t's storage (keeps that storage alive)."""
    cst = cpu_t.untyped_storage()
    _check_room(cst.nbytes())
    nst = _mkst(cst.data_ptr(), _NDEV, cst.nbytes())
    # StorageImpl PyObjects are preserved, so this attribute lives exactly as long as
    # the neuron StorageImpl (i.e. as long as any neuron tensor/view uses it).
    nst._keep = _Keep(cst)
    return nst


def _make_neuron(nst, dtype, size, stride, offset) -> torch.Tensor:
    t = _create([0], dtype)
    _set_op.redispatch(_CPU_KS, t, nst, offset, size, stride)
    return t


def _cpu_alias(t: torch.Tensor) -> torch.Tensor:
    """CPU tensor aliasing neuron tensor t (same bytes, sizes, strides, offset)."""
    k = t.untyped_storage()._keep
    b = k.bases.get(t.dtype)
    if b is None:
        b = k.base(t.dtype)
    return _as_strided(b, t.size(), t.stride(), t.storage_offset())


_cpu_alias_safe = _cpu_alias


def from_cpu(cpu_t: torch.Tensor) -> torch.Tensor:
    """Zero-copy adopt a CPU tensor as a neuron tensor (shares its storage)."""
    return _make_neuron(
        _neuron_storage_for(cpu_t),
        cpu_t.dtype,
        cpu_t.size(),
        cpu_t.stride(),
        cpu_t.storage_offset(),
    )


def _is_neuron(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == NAME


# --------------------------------------------------------------------------- the fallback
_SPECIAL: dict[str, Any] = {}  # schema name or overload name -> fn(op, *args, **kwargs)
_op_info: dict[Any, Any] = {}  # op -> (special fn or None, has_out)
_Tensor = torch.Tensor


def _special(name):
    def deco(fn):
        _SPECIAL[name] = fn
        return fn

    return deco


def _fallback(op, *args, **kwargs):
    for record in RECORD:  # as the operator the model called (not its backend's overrideable)
        record(_OVERRIDEABLE.get(op.name(), op))
    inf = _op_info.get(op)
    if inf is None:
        sch = op._schema
        fn = _SPECIAL.get(op.name()) or _SPECIAL.get(sch.name)
        has_out = any(
            a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
            for a in sch.arguments
        )
        inf = _op_info[op] = (fn, has_out)
    fn, has_out = inf
    if fn is not None:
        return fn(op, *args, **kwargs)
    return _generic(op, args, kwargs, has_out)


def _generic(op, args, kwargs, has_out=False):
    by_alias = {}  # id(cpu alias) -> original neuron tensor
    by_ptr = {}  # storage data_ptr -> neuron tensor
    alias = _cpu_alias_safe if has_out else _cpu_alias

    def unwrap(x):
        if isinstance(x, _Tensor):
            if x.device.type == NAME:
                a = alias(x)
                by_alias[id(a)] = x
                by_ptr[a.untyped_storage().data_ptr()] = x
                return a
            return x
        if isinstance(x, (list, tuple)):
            return type(x)(unwrap(e) for e in x)
        if isinstance(x, torch.device) and x.type == NAME:
            return _CPU
        return x

    uargs = [unwrap(a) for a in args]
    ukw = {}
    for k, v in kwargs.items():
        if k == "device" and v is not None and v.type == NAME:
            v = _CPU
        elif k == "pin_memory":
            v = False
        else:
            v = unwrap(v)
        ukw[k] = v
    try:
        out = op(*uargs, **ukw)
    except RuntimeError as e:
        if has_out and "not resizable" in str(e):
            return _out_op_resize(op, args, kwargs)
        raise

    def wrap(y):
        if isinstance(y, _Tensor):
            orig = by_alias.get(id(y))
            if orig is not None:  # in-place / out= : hand back the original neuron tensor
                return orig
            if y.device.type != "cpu":
                return y
            src = by_ptr.get(y.untyped_storage().data_ptr())
            if src is not None and y.untyped_storage().nbytes():  # a view of an input
                return _make_neuron(
                    src.untyped_storage(), y.dtype, y.size(), y.stride(), y.storage_offset()
                )
            if isinstance(out, _Tensor):
                return from_cpu(y)
            # several fresh outputs may share one new buffer: keep them aliased
            p = y.untyped_storage().data_ptr()
            nst = fresh.get(p)
            if nst is None:
                nst = fresh[p] = _neuron_storage_for(y)
            return _make_neuron(nst, y.dtype, y.size(), y.stride(), y.storage_offset())
        if isinstance(y, (list, tuple)):
            return type(y)(wrap(e) for e in y)
        return y

    fresh = {}
    return wrap(out)


def _out_op_resize(op, args, kwargs):
    # out= tensors had the wrong size: compute into fresh CPU outs, then resize+copy
    kw = dict(kwargs)
    outs = {}
    for a in op._schema.arguments:
        if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write and a.name in kw:
            o = kw[a.name]
            outs[a.name] = o
            if isinstance(o, (list, tuple)):
                kw[a.name] = [torch.empty(0, dtype=t.dtype) for t in o]
            else:
                kw[a.name] = torch.empty(0, dtype=o.dtype)
    fresh = {n: kw[n] for n in outs}
    op(*[_cpu_alias(a) if _is_neuron(a) else a for a in args], **kw)
    for n, o in outs.items():
        srcs = fresh[n] if isinstance(fresh[n], (list, tuple)) else [fresh[n]]
        dsts = o if isinstance(o, (list, tuple)) else [o]
        for s, d in zip(srcs, dsts, strict=True):
            d.resize_(s.shape)
            d.copy_(s)
    vals = list(outs.values())
    return vals[0] if len(vals) == 1 else tuple(vals)


@_special("aten::empty.memory_format")
def _empty(op, size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    t = torch.empty(size, dtype=dtype, memory_format=memory_format or torch.contiguous_format)
    return from_cpu(t)


@_special("aten::empty_strided")
def _empty_strided(op, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return from_cpu(torch.empty_strided(size, stride, dtype=dtype))


@_special("aten::_copy_from")
def _copy_from(op, src, dst, non_blocking=False):
    s = _cpu_alias(src) if _is_neuron(src) else src
    d = _cpu_alias(dst) if _is_neuron(dst) else dst
    d.copy_(s)
    return dst


@_special("aten::_copy_from_and_resize")
def _copy_from_and_resize(op, src, dst):
    if dst.shape != src.shape:
        dst.resize_(src.shape)
    return _copy_from(op, src, dst)


@_special("aten::resize_")
def _resize_(op, self, size, *, memory_format=None):
    size = list(size)
    numel = 1
    for s in size:
        numel *= s
    need = (self.storage_offset() + numel) * self.element_size()
    if need <= self.untyped_storage().nbytes() and memory_format in (None, torch.contiguous_format):
        stride, acc = [0] * len(size), 1
        for i in range(len(size) - 1, -1, -1):
            stride[i] = acc
            acc *= max(size[i], 1)
        torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
            _CPU_KS, self, self.untyped_storage(), self.storage_offset(), size, stride
        )
        return self
    old = _cpu_alias(self)
    new = torch.empty(
        size, dtype=self.dtype, memory_format=memory_format or torch.contiguous_format
    )
    n = min(old.numel(), new.numel())
    if n:
        new.view(-1)[:n].copy_(old.reshape(-1)[:n])
    nst = _neuron_storage_for(new)
    torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _CPU_KS, self, nst, 0, list(new.size()), list(new.stride())
    )
    return self


@_special("aten::set_.source_Storage_storage_offset")
def _set_storage(op, self, source, storage_offset, size, stride=()):
    if source.device.type != NAME:
        raise RuntimeError("neuron tensor .set_() with a non-neuron storage")
    return op.redispatch(_CPU_KS, self, source, storage_offset, size, stride)


@_special("aten::set_.source_Storage")
def _set_storage2(op, self, source):
    return _set_storage(None, self, source, 0, [source.nbytes() // self.element_size()], [1])


@_special("aten::set_.source_Tensor")
def _set_tensor(op, self, source):
    return _set_storage(
        None,
        self,
        source.untyped_storage(),
        source.storage_offset(),
        source.size(),
        source.stride(),
    )


#: The operators PyTorch leaves to an out-of-tree backend (``*_overrideable``:
#: ``aten::_convolution`` picks ``convolution_overrideable`` for a PrivateUse1 tensor, whose
#: default raises "not implemented"), each run as the CPU operator it stands for: the stand-in's
#: CPU fallback of a convolution (a vision tower's patch embedding) and of its backward.
_OVERRIDEABLE = {
    "aten::convolution_overrideable": torch.ops.aten.convolution.default,
    "aten::convolution_backward_overrideable": torch.ops.aten.convolution_backward.default,
}


def _overrideable(cpu_op):
    def run(op, *args, **kwargs):
        if cpu_op is torch.ops.aten.convolution_backward.default:
            # the overrideable's schema has no bias sizes: the CPU's takes them (the bias has
            # one number a channel of the output, whose gradient is ``grad``)
            grad, *rest = args
            args = (grad, rest[0], rest[1], [grad.shape[1]], *rest[2:])
        return _generic(cpu_op, args, kwargs)

    return run


for _n, _cpu_op in _OVERRIDEABLE.items():
    _SPECIAL[_n] = _overrideable(_cpu_op)


def _histc(x, bins=100, min=0, max=0):
    """``aten::histc`` of any dtype: the CPU's takes floating point only, a GPU's integers too
    (transformers' experts count their tokens with an integer ``histc`` off the CPU)."""
    if x.is_floating_point():
        return torch.ops.aten.histc.default(x, bins, min, max)
    return torch.ops.aten.histc.default(x.double(), bins, min, max).to(x.dtype)


#: Operators whose CPU kernel refuses what a device's accepts, each run by a function that
#: accepts it, eagerly and in a compiled graph (:func:`._backend.cpu_graph`).
CPU_SUBSTITUTES = {torch.ops.aten.histc.default: _histc}
for _op, _substitute in CPU_SUBSTITUTES.items():
    _SPECIAL[_op.name()] = lambda op, *a, _f=_substitute, **k: _generic(_f, a, k)

# view ops whose CPU kernels are device-agnostic: run them directly on the neuron tensor
for _n in ("aten::view", "aten::as_strided", "aten::_reshape_alias", "aten::unfold", "aten::alias"):
    _SPECIAL[_n] = lambda op, *a, **k: op.redispatch(_CPU_KS, *a, **k)


# ---------------------------------------------------------------- device module: torch.neuron
class _NeuronModule:
    """Mimics the parts of torch.neuron / torch.cuda that code typically calls."""

    __name__ = "torch.neuron"

    class Stream:
        def __init__(self, *a, **k):
            pass

        def synchronize(self):
            pass

        def wait_stream(self, s):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    class Event:
        def __init__(self, enable_timing=False, *a, **k):
            import time

            self._t = None
            self._time = time

        def record(self, stream=None):
            self._t = self._time.perf_counter()

        def synchronize(self):
            pass

        def query(self):
            return True

        def elapsed_time(self, other):
            return (other._t - self._t) * 1000.0

    _current = 0

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def _is_in_bad_fork():
        return False

    @staticmethod
    def device_count():
        return int(os.environ.get("NEURON_STANDIN_DEVICES", "1"))

    @classmethod
    def current_device(cls):
        return cls._current

    @classmethod
    def set_device(cls, d):
        d = torch.device(d) if not isinstance(d, int) else torch.device(NAME, d)
        cls._current = d.index or 0

    @staticmethod
    def synchronize(device=None):
        pass

    @staticmethod
    def current_stream(device=None):
        return _NeuronModule.Stream()

    @staticmethod
    def default_stream(device=None):
        return _NeuronModule.Stream()

    @staticmethod
    def stream(s=None):
        return _NeuronModule.Stream()

    # neuron ops run on CPU kernels, so they draw from the CPU default generator.
    # (torch.manual_seed() calls manual_seed_all here: must not call back into it.)
    @staticmethod
    def manual_seed(seed):
        torch.default_generator.manual_seed(int(seed))

    manual_seed_all = manual_seed

    @staticmethod
    def seed():
        torch.default_generator.seed()

    seed_all = seed

    @staticmethod
    def initial_seed():
        return torch.initial_seed()

    @staticmethod
    def get_rng_state(device=NAME):
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, device=NAME):
        torch.set_rng_state(state)

    @staticmethod
    def get_rng_state_all():
        return [torch.get_rng_state()]

    @staticmethod
    def set_rng_state_all(states):
        torch.set_rng_state(states[0])

    @staticmethod
    def get_amp_supported_dtype():
        return [torch.float16, torch.bfloat16, torch.float32]

    @staticmethod
    def is_bf16_supported(*a, **k):
        return True

    @staticmethod
    def get_device_name(device=None):
        return "neuron-standin (CPU)"

    @staticmethod
    def get_device_properties(device=None):
        import types

        return types.SimpleNamespace(name="neuron-standin (CPU)", total_memory=16 * 2**30)

    @staticmethod
    def get_device_capability(device=None):
        return (0, 0)

    # memory (tracked by the stand-in allocator)
    @staticmethod
    def memory_allocated(device=None):
        return _stats["allocated"]

    @staticmethod
    def max_memory_allocated(device=None):
        return _stats["peak"]

    @staticmethod
    def memory_reserved(device=None):
        return _stats["allocated"]

    max_memory_reserved = max_memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device=None):
        _stats["peak"] = _stats["allocated"]

    reset_max_memory_allocated = reset_peak_memory_stats

    @staticmethod
    def memory_stats(device=None):
        return {
            "allocated_bytes.all.current": _stats["allocated"],
            "allocated_bytes.all.peak": _stats["peak"],
            "num_alloc_retries": 0,
            "num_allocs": _stats["n_alloc"],
        }

    @staticmethod
    def mem_get_info(device=None):
        total = 16 * 2**30
        return (total - _stats["allocated"], total)

    @staticmethod
    def empty_cache():
        pass


def _register_per_op_kernels() -> None:
    """The same Python kernel registered *per op* for every aten op with a CPU kernel: a
    Python fallback cannot be reached under a TorchDispatchMode (FakeTensorMode, which
    torch.compile uses), and a direct kernel skips the composite detour."""
    global _kernel_lib
    _kernel_lib = torch.library.Library("aten", "IMPL")
    m = _kernel_lib.m
    names = set(torch._C._dispatch_get_registrations_for_dispatch_key("CPU")) | set(_EXTRA_OPS)
    have = set(torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"))
    for full in sorted(names):
        if not full.startswith("aten::") or full in have:
            continue
        base, _, overload = full[len("aten::") :].partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, base), overload or "default")
        except AttributeError:
            continue

        def kernel(*args, _op=op, **kwargs):
            return _fallback(_op, *args, **kwargs)

        m.impl(full[len("aten::") :], "PrivateUse1", kernel, False)


_EXTRA_OPS = ("aten::_copy_from", "aten::_copy_from_and_resize", *_OVERRIDEABLE)
_kernel_lib: Any = None


def install() -> None:
    """Rename PrivateUse1 to ``neuron``, register its kernels and ``torch.neuron`` (once)."""
    global _installed, _lib, _NDEV
    with _lock:
        if _installed:
            return
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", NAME):
            raise RuntimeError(f"PrivateUse1 is {current!r} already")
        if current == "privateuseone":
            from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

            _setup_privateuseone_for_python_backend(NAME, backend_module=_NeuronModule())
        _NDEV = torch.device(NAME, 0)
        _lib = torch.library.Library("_", "IMPL")
        _lib.fallback(_fallback, "PrivateUse1")
        _register_per_op_kernels()
        from torch_neuronx import _autocast

        _autocast.register()
        _installed = True
