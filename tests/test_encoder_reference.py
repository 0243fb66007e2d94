"""An encoder never loses its check to its auxiliary run: the CPU bf16 pass is optional."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import zoo
from pytest_neuronsupport.pipeline import classify
from pytest_neuronsupport.runners.lib.device_ops import CpuOps
from pytest_neuronsupport.runners.lib.protocol import REFERENCE_ENV, Result


def test_a_failed_cpu_bf16_run_leaves_the_fp32_check_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_neuronsupport.runners import encoder
    from pytest_neuronsupport.runners.lib.models import load_pretrained as load

    monkeypatch.delenv(REFERENCE_ENV, raising=False)

    def no_cpu_bf16(cls: Any, params: dict[str, Any], dtype: str, device: str) -> Any:
        if (dtype, device) == ("bfloat16", "cpu"):  # as a DeBERTa (v1) does on the CPU
            raise RuntimeError("expected m1 and m2 to have the same dtype")
        return load(cls, params, dtype, device)

    monkeypatch.setattr(encoder, "load_pretrained", no_cpu_bf16)
    params: dict[str, Any] = {"checkpoint": str(zoo.ensure_built("distilbert-sst", tmp_path))}
    params.update(dtype="float32", device="cpu", backend="eager", fullgraph=False)
    verdict = encoder.run_sequence_classification(params, CpuOps())
    assert verdict["result"] == Result.PASS and verdict["cpu_match"] == "Y"
    check = json.loads(classify.verdict_fields(verdict)["check"])  # as the row holds it
    assert check["rule"] == "predictions" and check["cpu_bf16"] == check["fp32"]
    assert "held to fp32 alone" in check["cpu_bf16_failed"]
    assert "m1 and m2" in check["cpu_bf16_failed"]
