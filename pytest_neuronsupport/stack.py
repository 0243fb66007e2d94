"""The software stack a run used, read from package metadata (no imports of the packages)."""

from __future__ import annotations

import platform
from pathlib import Path

from pytest_neuronsupport.devices import package_version

#: The library every runner loads models with (the dataset's ``library`` column).
LIBRARY = "transformers"

#: Row column → distribution name.
_DISTRIBUTIONS = {
    "neuronx_cc": "neuronx-cc",
    "transformers": "transformers",
    "accelerate": "accelerate",
    "torch_neuronx": "torch-neuronx",
    "torch": "torch",
    "nki": "nki",
}


def neuron_driver_version() -> str | None:
    """The loaded Neuron kernel driver's version (what ``modinfo neuron`` reports), or None."""
    try:
        return Path("/sys/module/neuron/version").read_text().strip() or None
    except OSError:
        return None


def installed_stack() -> dict[str, str | None]:
    """The stack columns of a row, null where a package is absent."""
    stack = {column: package_version(dist) for column, dist in _DISTRIBUTIONS.items()}
    stack["library_version"] = stack["transformers"]
    stack["python"] = platform.python_version()
    stack["neuron_driver"] = neuron_driver_version()
    return stack
