"""The compiler of a run: a backend name, or a dynamo backend given by import path.

A script whose backend is an import path starts with ``main(imported_backend(PARAMS), ...)``;
with a registered name, ``torch.compile`` takes it as it is.

Standard library only: the plugin checks ``--neuron-backend`` with the same function before a
sweep starts (from the folder runs start in), so a typo is one clear error instead of a failure of
every model.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from typing import Any

#: Dynamo's own backends that compile without inductor's compiler: a run under one never imports
#: it, so neither the fork server nor a compiled training trial does (about 1.5 CPU-s each). Any
#: other backend (inductor, ``neuron``, one of your own) may build on inductor: it is imported.
WITHOUT_INDUCTOR = ("eager", "aot_eager")
#: What the first compile under any backend imports: aot_autograd, and the debug module of
#: inductor that dynamo's aot backends import for their logging (about 0.2 s a run otherwise).
ANY_COMPILE = ("torch._functorch.aot_autograd", "torch._inductor.debug")


def compile_imports(backend: str) -> tuple[str, ...]:
    """What compiling under ``backend`` (a name or ``module:callable``) imports on first use."""
    inductor = () if backend in WITHOUT_INDUCTOR else ("torch._inductor.compile_fx",)
    return (*ANY_COMPILE, *inductor)


def resolve_backend(name: str) -> Any:
    """A ``torch.compile`` backend: a registered name as it is, or ``module:callable``."""
    if ":" not in name:
        return name
    sys.path.insert(0, os.getcwd())  # a backend of your own is found beside the run
    module, _, attr = name.partition(":")
    return functools.reduce(getattr, attr.split("."), importlib.import_module(module))


def imported_backend(params: dict[str, Any]) -> dict[str, Any]:
    """The run's parameters with its backend, given as ``module:callable``, imported (and its
    spelling kept, for a repro.py)."""
    return {
        **params,
        "backend": resolve_backend(params["backend"]),
        "backend_name": params["backend"],
    }
