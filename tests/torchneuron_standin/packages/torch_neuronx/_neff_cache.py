"""The stand-in's persistent compile cache, kept as TorchNeuron's source keeps its own
(``PersistentCacheBackend``): a compiled graph's NEFF in ``TORCH_NEURONX_NEFF_CACHE_DIR``
(``/tmp/neff_cache`` unless set) as ``ab/cd/<key>.neff``, written into a temporary ``.tmp`` file
of the same folder and renamed, so that a reader finds a whole file or none; read back by the
next compile of the same graph, which then compiles nothing. ``TORCH_NEURONX_NEFF_DISABLE_CACHE``
(``1``, ``true``, ``yes``) turns it off. Each lookup counts in the metrics arena under
TorchNeuron's names (:mod:`torch_neuronx.metrics`).

The stand-in's "NEFF" is the graph's code with a header naming its key and the digest of what
follows: a damaged file (cut short, or not the graph's) fails the compile that reads it, as a
NEFF the runtime cannot load would.
"""

# mypy: disable-error-code="no-untyped-def"

from __future__ import annotations

import hashlib
import os
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from torch_neuronx import metrics

MAGIC = b"NEFF-standin 1\n"


def _folder() -> Path | None:
    disabled = os.environ.get("TORCH_NEURONX_NEFF_DISABLE_CACHE", "").lower()
    if disabled in ("1", "true", "yes"):
        return None
    return Path(os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR") or "/tmp/neff_cache")


def _compiler() -> str:
    try:
        return version("neuronx-cc")
    except PackageNotFoundError:
        return "unknown"


def key(code: str, example_inputs: Any) -> str:
    """The graph's key: what its NEFF depends on (the compiler, the graph, its inputs' shapes,
    strides and dtypes), hashed."""
    digest = hashlib.sha256(f"neuronx-cc {_compiler()}\n{code}\n".encode())
    for value in example_inputs:  # tensors, symbolic sizes, a process group's opaque object
        if isinstance(value, torch.Tensor):
            digest.update(f"{tuple(value.shape)} {tuple(value.stride())} {value.dtype}\n".encode())
        else:
            digest.update(f"{type(value).__name__}\n".encode())
    return digest.hexdigest()


def _path(folder: Path, key: str) -> Path:
    return folder / key[:2] / key[2:4] / f"{key}.neff"


def load(key: str) -> bool:
    """Whether the graph's NEFF is in the cache (read and checked); a damaged one raises."""
    folder = _folder()
    if folder is None:
        return False
    path = _path(folder, key)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        metrics.count("CompilationCache.PersistentMisses")
        return False
    head, _, body = data.partition(b"\n\n")
    expected = MAGIC + f"{key} {hashlib.sha256(body).hexdigest()}".encode()
    if head != expected:
        raise RuntimeError(f"NEFF {path} is damaged: its header does not match its content")
    metrics.count("CompilationCache.PersistentHits")
    return True


def store(key: str, code: str) -> None:
    """Keep the graph's NEFF in the cache: a temporary file of the same folder, renamed."""
    metrics.count("CompilationCache.TotalCompilations")
    folder = _folder()
    if folder is None:
        return
    path = _path(folder, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = code.encode()
    head = MAGIC + f"{key} {hashlib.sha256(body).hexdigest()}".encode()
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
        tmp.write(head + b"\n\n" + body)
    os.replace(tmp.name, path)
