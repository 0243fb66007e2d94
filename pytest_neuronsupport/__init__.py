"""pytest-neuronsupport: which Hugging Face models run unmodified on this accelerator.

The pytest hooks live in :mod:`pytest_neuronsupport.plugin`; everything they call is a plain
module of this package (see docs/layout.md for the map).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pytest-neuronsupport")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["__version__"]
