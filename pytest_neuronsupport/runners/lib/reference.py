"""The CPU reference, computed once: kept in the file the plugin names for it.

The plugin names the file in ``$NEURONSUPPORT_REFERENCE``, keyed by everything that changes a
reference (the checkpoint, the run code, the torch and transformers versions: see
:mod:`pytest_neuronsupport.pipeline.reference`), so a second sweep of the same models pays only
for the device. Unset (``python3 run.py`` by hand), every run computes its reference afresh.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from pytest_neuronsupport.runners.lib.protocol import REFERENCE_ENV


def cached_reference(compute: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """The CPU reference, from its file if there is one; and whether it came from there."""
    path = os.environ.get(REFERENCE_ENV)
    if path and os.path.exists(path):
        try:
            return torch.load(path, weights_only=True), True
        except Exception:
            os.unlink(path)  # a damaged file: computed again
    value = compute()
    if path:
        torch.save(value, f"{path}.{os.getpid()}.tmp")
        os.replace(f"{path}.{os.getpid()}.tmp", path)
    return value, False
