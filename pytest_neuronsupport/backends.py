"""Checking a ``--neuron-backend`` before the sweep starts, so a typo is one clear error
instead of a FAIL(gen) for every model.

A backend is a name registered with ``torch.compile`` (``inductor``, ``aot_eager``, ``neuron``
once TorchNeuron is imported...) or an import path ``package.module:callable`` of a custom
dynamo backend, imported with the folder pytest was invoked from on ``sys.path``, as ``run.py``
does (that folder is its working directory), by the same function.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pytest_neuronsupport.devices import Device
from pytest_neuronsupport.runners.lib.backend import resolve_backend

#: Backends every torch release registers: accepted without importing torch (seconds).
BUILTIN = frozenset({"inductor", "aot_eager", "eager", "cudagraphs"})

#: The variables with which torch turns ``torch.compile`` off (``=1``): each model would run
#: eager, compared with itself, and PASS having compiled nothing.
COMPILE_OFF = ("TORCHDYNAMO_DISABLE", "TORCH_COMPILE_DISABLE")


def compile_turned_off(environ: Mapping[str, str], device: Device | None = None) -> str | None:
    """Why nothing would be compiled in ``environ``'s runs (they inherit it), or why ``device``
    would pass what its compiler did not compile (:attr:`Device.refused_env`: on Neuron,
    fallback execution turned on), or None."""
    name = next((name for name in COMPILE_OFF if environ.get(name) == "1"), None)
    if name:
        return f"{name}=1 turns torch.compile off: no model would be compiled"
    refused = device.refused_env if device is not None else ()
    said = (f"{n}={v} {why}" for n, v, why in refused if environ.get(n, "").strip() == v)
    return next(said, None)


def check_backend(name: str, device: Device, workdir: Path) -> str | None:
    """Why ``name`` cannot be used on ``device`` (or at all in this environment, which the
    runs inherit), or None when it can."""
    if off := compile_turned_off(os.environ, device):
        return f"{off}; unset it to sweep"
    if ":" in name:
        return _check_import_path(name, workdir)
    if name == device.default_backend or name in BUILTIN:
        return None  # the device's own backend is registered by its runtime (torch_neuronx)
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if name not in known:
        return f"unknown backend {name!r} (registered: {', '.join(sorted(known))})"
    return None


def _check_import_path(name: str, workdir: Path) -> str | None:
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        return f"{name!r}: an import path is written package.module:callable"
    saved, cwd = list(sys.path), os.getcwd()
    try:
        os.chdir(workdir)
        backend = resolve_backend(name)
    except Exception as exc:
        return f"cannot import {name!r}: {type(exc).__name__}: {exc}"
    finally:
        os.chdir(cwd)
        sys.path[:] = saved
    if not callable(backend):
        return f"{name!r} is not callable"
    return None
