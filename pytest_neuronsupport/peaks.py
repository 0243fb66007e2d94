"""Documented peaks of one NeuronCore, per instance family: used instead of measured ones.

The roofline's peaks (:func:`~pytest_neuronsupport.runners.lib.measures.roofline`) are measured
once per machine by default; where the instance type is known (``--neuron-instance``) and its
chip is in this table, the vendor's figures are used, per core, with their source in the row.

Trainium (trn1, trn1n; two NeuronCore-v2 a chip), from the AWS Neuron documentation:
"Trainium Architecture" (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/
neuron-hardware/trainium.html): 190 FP16/BF16/cFP8/TF32 TFLOPS and 47.5 FP32 TFLOPS a chip,
820 GiB/s of device memory bandwidth a chip; the "Trainium/Inferentia2 Architecture Guide for
NKI" gives the same bandwidth as 820 GB/s, the smaller of the two readings, used here.
"""

from __future__ import annotations

from typing import Any, Final

TRAINIUM_SOURCE: Final = (
    "AWS Neuron docs, Trainium Architecture (trn1: 2 NeuronCore-v2 a chip, 190 BF16/FP16 "
    "TFLOPS, 47.5 FP32 TFLOPS, 820 GB/s a chip), halved per core"
)
#: Per NeuronCore: memory bandwidth (GB/s) and dense matmul GFLOP/s by dtype.
TABLE: Final[dict[str, dict[str, Any]]] = {
    family: {
        "bandwidth_gbs": 820.0 / 2,
        "gflops": {"bfloat16": 190e3 / 2, "float16": 190e3 / 2, "float32": 47.5e3 / 2},
        "source": TRAINIUM_SOURCE,
    }
    for family in ("trn1", "trn1n")
}


def documented(instance: str | None, dtype: str) -> dict[str, Any] | None:
    """One core's documented peaks for ``instance`` (``trn1.2xlarge``...) in ``dtype``, in the
    form of measured ones, or None when the table has no figures for it."""
    entry = TABLE.get((instance or "").split(".")[0])
    if entry is None or dtype not in entry["gflops"]:
        return None
    return {
        "bandwidth_gbs": entry["bandwidth_gbs"],
        "gflops": entry["gflops"][dtype],
        "source": f"{entry['source']} ({instance}, {dtype})",
    }
