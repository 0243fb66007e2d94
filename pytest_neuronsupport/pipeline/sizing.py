"""Step 2, size: how many cores a model gets, or why it is too large.

A model needs the smallest power of two of cores whose memory holds its weights in bf16 (2 bytes
a parameter). The parameter count comes from the safetensors headers (no weights are read) or,
failing that, from the config through ``transformers`` on the meta device. Only runners that
shard use several cores; the others run on one, so a model of theirs too large for one core is
excluded (``too-large``), as is a model needing more cores than ``--neuron-max-cores`` or the
device has. A list entry's ``cores = N`` forces the count of a runner that shards.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_neuronsupport.pipeline.plan import Exclusion, Plan

BF16_BYTES = 2
_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}


def safetensors_parameters(path: Path) -> int:
    """Number of parameters in one ``.safetensors`` file, from its header alone."""
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > 100_000_000:
            raise ValueError(f"{path}: implausible safetensors header length {length}")
        header = json.loads(f.read(length))
    count = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        numel = 1
        for dim in entry["shape"]:
            numel *= int(dim)
        count += numel
    return count


def checkpoint_parameters(checkpoint: Path) -> int | None:
    """Parameters of a local checkpoint from its safetensors headers, or None if it has none."""
    files = sorted(checkpoint.glob("*.safetensors"))
    if not files:
        return None
    return sum(safetensors_parameters(f) for f in files)


def config_parameters(config: dict[str, Any]) -> int:
    """Parameters of the model ``config`` declares (its ``architectures``, else ``AutoModel``),
    built on the meta device: no memory, no weights."""
    import torch
    import transformers

    cfg = transformers.AutoConfig.for_model(**config)
    names = config.get("architectures") or []
    cls = getattr(transformers, names[0], None) if names and str(names[0]).isidentifier() else None
    with torch.device("meta"):
        if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
            model = cls._from_config(cfg)  # type: ignore[no-untyped-call]
        else:
            model = transformers.AutoModel.from_config(cfg)  # type: ignore[no-untyped-call]
    return sum(p.numel() for p in model.parameters())


def weight_bytes(checkpoint: str, config: dict[str, Any] | None) -> int | None:
    """bf16 bytes of a checkpoint's weights, or None when neither source can tell."""
    local = Path(checkpoint)
    count = None
    if local.is_dir():
        try:
            count = checkpoint_parameters(local)
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            count = None  # a damaged file: from_pretrained will say so, as FAIL(load)
    if count is None and config is not None:
        try:
            count = config_parameters(config)
        except Exception:
            return None
    return None if count is None else count * BF16_BYTES


def cores_needed(weight_bytes: int, core_capacity_gb: float) -> int:
    """The smallest power of two of cores whose memory holds ``weight_bytes``."""
    if core_capacity_gb <= 0:
        raise ValueError("core capacity must be positive")
    cores = 1
    while cores * core_capacity_gb * 1e9 < weight_bytes:
        cores *= 2
    return cores


def size(planned: Plan, *, max_cores: int, device_cores: int, core_capacity_gb: float) -> Plan:
    """The plan with the cores its run gets, or excluded as ``too-large``."""
    if planned.exclusion is not None or planned.load_error is not None or not planned.runner:
        return planned
    weights = weight_bytes(planned.checkpoint, planned.config)
    needed = 1 if weights is None else cores_needed(weights, core_capacity_gb)
    shards = planned.runner.shards
    if shards and planned.spec.cores is not None:
        needed = planned.spec.cores
    limit = min(max_cores, device_cores) if shards else 1
    if needed <= limit:
        return replace(planned, cores=needed, weight_bytes=weights)
    size = f"{weights / 1e9:.2f} GB of bf16 weights, " if weights is not None else ""
    where = (
        f"at most {limit} (--neuron-max-cores {max_cores}, the device has {device_cores})"
        if shards
        else f"runner {planned.runner.name} runs on one core"
    )
    why = f"needs {needed} cores ({size}{core_capacity_gb:g} GB a core); {where}"
    return replace(planned, exclusion=Exclusion("too-large", why))


#: The share of the host's memory a model's CPU reference may take: a several-core run's fp32
#: weights (twice their bf16 bytes), or fp32 and fp64 (six times). Judged against the host's
#: whole memory, not what is free now: the decision is the same at every sweep (the run's
#: script, and so its "unchanged" skip, does not depend on what else runs), and the
#: host-memory gate makes the reference wait until what it needs is free.
HOST_SHARE = 0.5


def host_holds_fp32(weight_bytes: int | None) -> bool:
    """Whether the host's memory holds a model in fp32, for the CPU reference of a several-core
    run: its fp32 weights at most :data:`HOST_SHARE` of it. A model of unknown size is tried
    (a reference that cannot run leaves it to the judge)."""
    if weight_bytes is None:
        return True
    return 2 * weight_bytes <= HOST_SHARE * total_memory_bytes()


def host_holds_fp64(weight_bytes: int | None) -> bool:
    """Whether the host's memory holds a model in float64 beside its fp32 copy (six times its
    bf16 weights, at most :data:`HOST_SHARE` of it), for the exact CPU reference the output
    checks measure noise against (a decoder's fp32 reference model is still loaded)."""
    return weight_bytes is None or 6 * weight_bytes <= HOST_SHARE * total_memory_bytes()


def total_memory_bytes() -> int:
    """The host's memory: ``MemTotal`` in /proc/meminfo, else the physical pages."""
    return meminfo_bytes("MemTotal", "SC_PHYS_PAGES")


def available_memory_bytes() -> int:
    """The host's available memory: ``MemAvailable`` in /proc/meminfo, else the free pages."""
    return meminfo_bytes("MemAvailable", "SC_AVPHYS_PAGES")


def meminfo_bytes(key: str, pages: str) -> int:
    """A line of /proc/meminfo in bytes, else ``sysconf(pages)`` pages (not Linux)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith(f"{key}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
