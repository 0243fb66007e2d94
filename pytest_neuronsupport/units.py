"""Units of memory the plugin side counts in, named once. A leaf: it imports nothing.

Sizes people give and read (``--neuron-hub-cache-max GB``, ``--neuron-core-memory``, weights
in GB) are decimal gigabytes; the host memory a run needs is counted in binary gibibytes, as the
kernel reports it."""

from __future__ import annotations

from typing import Final

GB: Final = 10**9
"""Bytes in a gigabyte (decimal)."""
GIB: Final = 1024**3
"""Bytes in a gibibyte (binary)."""
