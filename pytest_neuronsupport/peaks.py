"""Documented peaks of one NeuronCore, per instance family: used instead of measured ones.

The roofline's peaks (:func:`~pytest_neuronsupport.runners.lib.measures.roofline`) are measured
once per machine by default; where the instance type is known (``--neuron-instance``) and its
chip is in this table, the vendor's figures are used, per logical core (the unit a run leases),
with their source in the row. A chip's figures are dense (not sparse) and shared evenly by its
logical cores: on Trn2 and Trn3 eight physical cores grouped by the logical core configuration
(LNC, 2 unless ``neuron-ls`` says otherwise: 4 logical cores a chip; LNC=1: 8).

From the AWS Neuron documentation's architecture pages:

* Trainium (trn1, trn1n; "Trainium Architecture"): two NeuronCore-v2 a chip, 190
  FP16/BF16/cFP8/TF32 TFLOPS and 47.5 FP32 TFLOPS, 820 GiB/s of device memory bandwidth a chip
  (the "Trainium/Inferentia2 Architecture Guide for NKI" gives 820 GB/s, the smaller reading,
  used here); one logical core is one physical core.
* Trainium2 (trn2, trn2u; "Trainium2 Architecture"): eight NeuronCore-v3 a chip delivering
  1,299 FP8, 667 BF16/FP16/TF32 and 181 FP32 dense TFLOPS, 96 GiB of device memory at 2.9 TB/s.
* Trainium3 (trn3; "Trainium3 Architecture"): eight NeuronCore-v4 a chip delivering 2,517
  MXFP8/MXFP4, 671 BF16/FP16/TF32 and 183 FP32 dense TFLOPS, 144 GiB at 4.9 TB/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True)
class Chip:
    """One chip's documented peaks: dense TFLOPS by dtype, memory bandwidth, its cores."""

    name: str
    physical_cores: int
    tflops: dict[str, float]
    bandwidth_gbs: float
    #: Whether physical cores group into logical ones (LNC: Trn2, Trn3).
    lnc: bool
    source: str

    def logical_cores(self, lnc: int | None) -> int:
        """Logical cores a chip at ``lnc`` (None: the default, 2, where LNC applies)."""
        return self.physical_cores // (lnc or 2) if self.lnc else self.physical_cores


TRAINIUM: Final = Chip(
    "Trainium",
    2,
    {"bfloat16": 190.0, "float16": 190.0, "float32": 47.5},
    820.0,
    lnc=False,
    source="AWS Neuron docs, Trainium Architecture (trn1: 2 NeuronCore-v2 a chip, 190 BF16/FP16 "
    "TFLOPS, 47.5 FP32 TFLOPS, 820 GB/s a chip)",
)
TRAINIUM2: Final = Chip(
    "Trainium2",
    8,
    {"bfloat16": 667.0, "float16": 667.0, "float32": 181.0, "float8": 1299.0},
    2900.0,
    lnc=True,
    source="AWS Neuron docs, Trainium2 Architecture (8 NeuronCore-v3 a chip, dense 667 BF16/FP16 "
    "TFLOPS, 181 FP32, 1,299 FP8, 96 GiB at 2.9 TB/s a chip)",
)
TRAINIUM3: Final = Chip(
    "Trainium3",
    8,
    {"bfloat16": 671.0, "float16": 671.0, "float32": 183.0, "float8": 2517.0},
    4900.0,
    lnc=True,
    source="AWS Neuron docs, Trainium3 Architecture (8 NeuronCore-v4 a chip, dense 671 BF16/FP16 "
    "TFLOPS, 183 FP32, 2,517 MXFP8, 144 GiB at 4.9 TB/s a chip)",
)
#: The chip of each instance family (the part of an instance type before its size).
FAMILIES: Final[dict[str, Chip]] = {
    "trn1": TRAINIUM,
    "trn1n": TRAINIUM,
    "trn2": TRAINIUM2,
    "trn2u": TRAINIUM2,
    "trn3": TRAINIUM3,
}


def chip_of(instance: str | None) -> Chip | None:
    """The chip of ``instance`` (``trn2.48xlarge`` → Trainium2), or None."""
    return FAMILIES.get((instance or "").split(".")[0])


def documented(instance: str | None, dtype: str, lnc: int | None = None) -> dict[str, Any] | None:
    """One logical core's documented peaks for ``instance`` (``trn2.48xlarge``...) in ``dtype``
    at ``lnc`` (None: the default, 2), in the form of measured ones, or None when the table has
    no figures for it."""
    chip = chip_of(instance)
    if chip is None or dtype not in chip.tflops:
        return None
    cores = chip.logical_cores(lnc)
    per = f"over {cores} logical cores" + (f" at LNC={lnc or 2}" if chip.lnc else "")
    return {
        "bandwidth_gbs": chip.bandwidth_gbs / cores,
        "gflops": chip.tflops[dtype] * 1e3 / cores,
        "source": f"{chip.source}, {per} ({instance}, {dtype})",
    }
