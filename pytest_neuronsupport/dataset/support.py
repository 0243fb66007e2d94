"""The support table: does a model load, compile and run unmodified, and match the CPU.

``<results>/data/<compiler>-<version>/<library>-<version>.parquet``, one row per model
(:data:`SUPPORT`): its schema, the meaning of each column (the dataset card's column table is
made of :data:`COLUMN_DOCS`) and of each result. The generic machinery (rows validated against
a schema, as JSON lines and arrow tables) is :mod:`~pytest_neuronsupport.dataset.table`'s; the
other tables are :mod:`~pytest_neuronsupport.dataset.train`'s and
:mod:`~pytest_neuronsupport.dataset.perf`'s.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from pytest_neuronsupport.dataset.layout import DATA
from pytest_neuronsupport.dataset.table import (
    DEVICE_FIELDS,
    POLICY_FIELDS,
    RUN_FIELDS,
    RUNTIME_FIELDS,
    STACK_DOCS,
    Table,
)
from pytest_neuronsupport.runners.lib.protocol import Result

__all__ = [
    "COLUMNS",
    "COLUMN_DOCS",
    "DEVICE_DOCS",
    "FP64_COLUMNS",
    "HOST_KIND",
    "PHASE_COLUMNS",
    "REFERENCE_HOST_COLUMNS",
    "RESULT_MEANINGS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SUPPORT",
]

SCHEMA_VERSION: Final = "1"
"""Value of the ``neuronsupport_schema`` key of the schema metadata."""

#: The phase times of a support row, in seconds: they add up to ``wall_s`` but for a remainder.
PHASE_COLUMNS: Final = ("load_s", "compile_s", "generate_s", "forward_s", "reference_s")

#: The output check's numbers against float64: the device's error, the CPU eager run's in the
#: same dtype (the measured noise), and the largest error that passes (``check.fp64``).
FP64_COLUMNS: Final = ("fp64_error_device", "fp64_error_eager", "fp64_tolerance")

#: What computed the CPU reference (the reference file's ``info``): the CPU's model, oneDNN's
#: ISA on it, torch's threads, torch's and oneDNN's versions. Two references come from the same
#: kind of host when their :data:`HOST_KIND` columns agree.
REFERENCE_HOST_COLUMNS: Final = (
    "reference_cpu",
    "reference_isa",
    "reference_threads",
    "reference_torch",
    "reference_onednn",
)
HOST_KIND: Final = ("reference_cpu", "reference_isa")

SCHEMA: Final[pa.Schema] = pa.schema(
    [
        # identity
        pa.field("model_id", pa.string()),
        pa.field("library", pa.string()),
        pa.field("neuron_cores", pa.int32()),
        pa.field("runner", pa.string()),
        pa.field("selection_rank", pa.int32()),
        pa.field("task", pa.string()),
        pa.field("revision", pa.string()),
        # verdict
        pa.field("result", pa.string()),
        pa.field("notes", pa.string()),
        pa.field("exclusion", pa.string()),
        pa.field("error", pa.string()),
        pa.field("cpu_match", pa.string()),
        pa.field("english", pa.string()),
        # measures
        pa.field("wall_s", pa.float64()),
        pa.field("hbm_peak_gb", pa.float64()),
        pa.field("hbm_capacity_gb", pa.float64()),
        *RUN_FIELDS,
        pa.field("dtype", pa.string()),
        pa.field("run_py_sha256", pa.string()),
        pa.field("reference_reproducible", pa.bool_()),
        pa.field("first_divergence", pa.int32()),
        pa.field("divergence_margin", pa.float64()),
        pa.field("near_tie_tolerance", pa.float64()),
        pa.field("check", pa.string()),
        # why it fails: dynamo's accounting and the minifier's repro
        pa.field("error_site", pa.string()),
        pa.field("graph_count", pa.int32()),
        pa.field("graph_breaks", pa.int32()),
        pa.field("graph_break_reasons", pa.list_(pa.field("element", pa.string()))),
        pa.field("repro_py", pa.string()),
        pa.field("repro_ops_before", pa.int32()),
        pa.field("repro_ops_after", pa.int32()),
        pa.field("repro_ops", pa.list_(pa.field("element", pa.string()))),
        # what the output was checked against (appended: older files load with it null)
        pa.field("checked_by", pa.string()),
        # what the checkpoint is, from its config (appended: older files load them null)
        pa.field("architecture", pa.string()),
        pa.field("model_type", pa.string()),
        # where the time went, and the compile cache's part in it (appended: older files load
        # them null)
        *(pa.field(name, pa.float64()) for name in PHASE_COLUMNS),
        # the compile cache's counts (graphs_cached, graphs_compiled), what the compiler did
        # and did not do (compiled, cpu_ops, fallback_execution, backend_compile_s; appended:
        # older files load them null)
        *RUNTIME_FIELDS,
        # the output check's numbers against float64 (appended: older files load them null)
        *(pa.field(name, pa.float64()) for name in FP64_COLUMNS),
        # the device's cores held, times the seconds (appended: older files load it null)
        pa.field("core_s", pa.float64()),
        # the download of its files before its lease (appended: older files load it null)
        pa.field("download_s", pa.float64()),
        # the bucket its compile cache was shared through (appended: older files load it null)
        pa.field("compile_cache", pa.string()),
        # the device's policy and configuration (appended: older files load them null)
        *POLICY_FIELDS,
        # what computed the CPU reference (appended: older files load them null)
        *(
            pa.field(name, pa.int32() if name == "reference_threads" else pa.string())
            for name in REFERENCE_HOST_COLUMNS
        ),
    ],
    metadata={"neuronsupport_schema": SCHEMA_VERSION},
)
"""The one schema of every results parquet file (all columns nullable)."""

COLUMNS: Final[tuple[str, ...]] = tuple(SCHEMA.names)
"""Column names of :data:`SCHEMA`, in order."""

COLUMN_DOCS: Final[dict[str, str]] = {
    "model_id": (
        "The model tested: a Hugging Face Hub repo id, or `zoo:<name>` for a tiny model "
        "bundled with the plugin; at most one row per model in a file."
    ),
    "library": "The library the model was loaded with (`transformers`).",
    "neuron_cores": (
        "Cores the run used (NeuronCores, GPUs or CPU shares): the smallest power of two whose "
        "memory holds the bf16 weights, or the model list's `cores`; null if it never ran."
    ),
    "runner": (
        "The runner that ran the model (`run_dense`, `run_dense_ep`, `run_seq2seq`, "
        "`run_multimodal`, `run_encoder`...); null if it never ran."
    ),
    "selection_rank": "The model's rank in the sweep's selection, from its model list entry.",
    "task": "The task given by the model list entry (e.g. `text-generation`), if any.",
    "revision": "The Hub revision given by the model list entry; null: the default branch.",
    "result": "The outcome: one of the results listed in this card.",
    "notes": (
        "One line on what happened: the start of the generated text or the encoder's "
        "predictions, the reason of an exclusion, or the first line of the error."
    ),
    "exclusion": (
        "Why the model was not run (`quantized`, `trust-remote-code`, `too-large`, "
        "`no-runner`); null unless the result is EXCLUDED."
    ),
    "error": (
        "What went wrong: the exception and its traceback, or how the run ended (signal, "
        "timeout, memory) with the tail of its output; null on PASS."
    ),
    "cpu_match": (
        "The output against the CPU fp32 reference: `Y`, `Y (CPU bf16)`, `~ near-tie ...` "
        "(passes) or `N ...` (FAIL(output)); null when the comparison did not run."
    ),
    "english": (
        "The English judge's answer on the generated text, `Y` or `N` (FAIL(output)); null "
        "when the judge did not run."
    ),
    "wall_s": (
        "Seconds of the device's run (on its leased cores), from its first phase to its "
        "verdict: loading, compiling, generating or the forward pass, and the check against "
        "the CPU reference (the phase times add up to it but for a remainder: the judge, the "
        "moments between phases; and `reference_s` where the reference was computed before "
        "the run, off its lease); for a run without a verdict, the run's wall time. Files "
        "written before the phase times counted from loading the model to the end of "
        "generation or of the forward pass."
    ),
    "hbm_peak_gb": (
        "Peak device memory of the run in GB (torch's counters; on the CPU the peak resident set)."
    ),
    "hbm_capacity_gb": "Device memory available to the run in GB: one core's times `neuron_cores`.",
    **{name: f"{doc}; null where absent." for name, doc in STACK_DOCS.items()},
    "tested_at": "When the model's test started (UTC).",
    "run_py": (
        "The standalone script that is the model's test (standard library, torch and "
        "transformers only): save it and run `python run.py` on the same stack to reproduce "
        "the verdict; null if the model never ran."
    ),
    "device": "The device the model ran on: `neuron`, `cuda` or `cpu`.",
    "backend": "The `torch.compile` backend (`neuron`, `inductor`, `aot_eager` or an import path).",
    "compiler": (
        "The pair's compiler, the first part of its folder name: `neuronxcc` on Neuron, "
        "else the backend."
    ),
    "compiler_version": "The compiler's version: neuronx-cc's on Neuron, else torch's.",
    "dtype": "The dtype of the device run (bf16 on accelerators and fp32 on the CPU by default).",
    "run_py_sha256": (
        "SHA-256 of `run_py`: a model whose script is unchanged in its pair is not run again."
    ),
    "reference_reproducible": (
        "Whether two CPU fp32 reference runs agreed; false: the output check could not run "
        "and the model passes on having run. Null when no reference ran."
    ),
    "first_divergence": (
        "The first token (or prediction) where the device and the CPU fp32 reference differ; "
        "null when they agree or were not compared."
    ),
    "divergence_margin": (
        "At the first divergence, the CPU fp32 score of the CPU's choice minus that of the "
        "device's (`z[a] - z[b]`)."
    ),
    "near_tie_tolerance": (
        "The numerical noise of the device's dtype, `4 * eps(dtype) * max(1, max |z|)`: a "
        "margin at most this is a near-tie, which passes."
    ),
    "check": (
        "A JSON object with everything that decided the verdict: the rule, both sides' tokens "
        "or predictions, distances, cosines, the judge's prompt and logits, or why the check "
        "was skipped."
    ),
    "error_site": (
        "Where a failure was raised: the first frame of its traceback inside the compiler "
        "(`module:function`: the backend's own code, inductor, TorchNeuron...), else its "
        "innermost frame; null on PASS."
    ),
    "graph_count": (
        "How many graphs dynamo compiled in the device run (recompilations included), "
        "counted by dynamo itself; null if compilation never started."
    ),
    "graph_breaks": (
        "How many graph breaks dynamo took in the device run; under `fullgraph=True` (the "
        "Neuron default) a break is the failure itself and `notes` names its reason."
    ),
    "graph_break_reasons": (
        "The distinct graph-break reasons, each with the user frame that caused it "
        "(`reason (file:line in function)`), deduplicated."
    ),
    "repro_py": (
        "With `--neuron-minify`, on a failure: a standalone script holding the failing graph "
        "shrunk by PyTorch's minifier, its inputs and the backend call; `python repro.py` "
        "raises the same error (or shows the same mismatch)."
    ),
    "repro_ops_before": "Ops of the failing graph before the minifier shrank it.",
    "repro_ops_after": "Ops left in `repro_py`'s graph.",
    "repro_ops": "The ops left in `repro_py`'s graph, by name (e.g. `torch._C._nn.linear`).",
    "checked_by": (
        "What the output was held against, for PASS and FAIL(output): `cpu` (the CPU fp32 "
        "reference, equal), `near-tie` (the CPU reference, differing only at a near-tie), "
        "`judge` (the English judge) or `none` (nothing was compared: a PASS on having run, "
        "with the reason at the end of `notes`); null for other results and in files written "
        "before the column existed."
    ),
    "architecture": (
        "The checkpoint's class, its config's `architectures[0]` (the head class, e.g. "
        "`LlamaForCausalLM`); null when its config was not read, or names none, and in files "
        "written before the column existed."
    ),
    "model_type": (
        "The checkpoint's config's `model_type` (e.g. `llama`); null when its config was not "
        "read, and in files written before the column existed."
    ),
    "load_s": (
        "Seconds of the load phase: tokenizer, config and weights onto the device; null when "
        "the run gave no verdict, and in files written before the phase times existed (so "
        "for every phase time)."
    ),
    "compile_s": (
        "Seconds dynamo spent compiling, by its own accounting (every frame it compiled, "
        "recompilations included: tracing, lowering and the backend's compile), taken out "
        "of the phase it happened in; 0 when nothing compiled."
    ),
    "generate_s": (
        "Seconds of generating the 32 tokens (decoders), without `compile_s`: the first "
        "execution of a compiled graph is counted here; null for an encoder."
    ),
    "forward_s": (
        "Seconds of the forward pass (encoders), without `compile_s`; null for a decoder."
    ),
    "reference_s": (
        "Seconds of the CPU reference: computed before the device's run, in a process that "
        "holds none of the device's cores (not in `wall_s` nor `core_s`); near 0 when it was "
        "read from the cache (`reference_cached` in `check`); for a runner that computes it "
        "in its device run, that phase's seconds (then within `wall_s`); null when none ran."
    ),
    "graphs_cached": (
        "Graphs the compile cache served (inductor's FX graph cache hits on the CPU and "
        "CUDA; on Neuron, TorchNeuron's persistent NEFF cache's hits, its "
        "`CompilationCache.PersistentHits` counter: seeded from a bucket or compiled by an "
        "earlier run); null where the backend has no cache (`aot_eager`) or the runtime "
        "does not say."
    ),
    "graphs_compiled": (
        "Graphs compiled fresh: inductor's FX graph cache misses and bypasses; on Neuron "
        "TorchNeuron's `CompilationCache.TotalCompilations` counter (where it has none, the "
        "graphs its `get_dynamo_metrics()` lists); 0 with `graphs_cached` above 0: a warm "
        "compile; null where the backend has no cache and the runtime does not say."
    ),
    "compiled": (
        "Whether the device run compiled at least one graph (dynamo handed the backend a "
        "graph, and on Neuron TorchNeuron's metrics list one): false on a PASS means it is not "
        "a compiler PASS (the model ran as it is), counted apart everywhere rows are counted; "
        "null where the run gave no verdict, and in files written before the column existed."
    ),
    "cpu_ops": (
        "The ATen operators that ran on the CPU instead of the device during the run "
        "(TorchNeuron's `get_fallback_ops()`: operators without a Neuron kernel, `CPU_FALLBACK` "
        "in its operator table), sorted; empty when none did; null where the runtime cannot "
        "tell (the CPU, CUDA, a TorchNeuron without the function), and in files written before "
        "the column existed."
    ),
    "fallback_execution": (
        "Whether TorchNeuron's fallback execution (a graph that fails to compile run eagerly "
        "instead of raising) was on in the run: false on every Neuron run "
        "(`TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1` and the `fallback_execution` compile "
        "option off); null off Neuron."
    ),
    "backend_compile_s": (
        "Seconds the backend's compiler spent on the run's graphs, as the runtime reports "
        "them (TorchNeuron's `get_dynamo_metrics()`: each graph's neuronx-cc compile time, "
        "which happens at the graph's first execution, inside `generate_s` or `forward_s`); "
        "null where the runtime does not say."
    ),
    "fp64_error_device": (
        "The device's error against the CPU float64 run, `|y - y64| / max(1, |y64|)` (norms "
        "over what the check compared: a decoder's scores at its `positions`, an encoder's "
        "whole output); null where float64 did not decide (`check.fp64` says why)."
    ),
    "fp64_error_eager": (
        "The same error of the CPU eager run in the device's dtype: the noise the dtype "
        "itself makes, which the device is held to."
    ),
    "fp64_tolerance": (
        "The largest `fp64_error_device` that passes: `3 * fp64_error_eager` plus a floor of "
        "the dtype's epsilon (see the output check in the runners' documentation)."
    ),
    "core_s": (
        "Core-seconds the run held: its cores (`neuron_cores`) times the seconds of its "
        "leased run (the CPU reference, computed before it in a process holding no core, is "
        "not in it); null in files written before the column existed, and for EXCLUDED rows."
    ),
    "download_s": (
        "Seconds of fetching a Hub checkpoint's files into the local cache before the run "
        "leased its cores (not in `wall_s`: no core waited for it); near 0 when they were "
        "there already (downloaded ahead while other models ran); null for a local checkpoint "
        "or offline."
    ),
    "compile_cache": (
        "The Hub Storage Bucket folder the sweep shared its compile cache through "
        "(`--neuron-compile-cache`), one per compiler version, "
        "`hf://buckets/NS/NAME/neuronxcc-<version>`: seeded from before the run, what it "
        "compiled published there after the sweep; `hf buckets sync <it> /tmp/neff_cache` "
        "copies the graphs; null: not shared."
    ),
    "fullgraph": (
        "Whether the device run compiled with `torch.compile(fullgraph=True)`, the device's "
        "policy: true on Neuron (TorchNeuron's recommendation: a graph break is then the "
        "failure itself, FAIL(gen) or FAIL(forward)), false on CUDA and the CPU (dynamo breaks "
        "the graph and runs the rest eagerly); compare two pairs that differ in it knowing that "
        "a model with a graph break passes under false and fails under true; null in files "
        "written before the column existed."
    ),
    "lnc": (
        "The logical NeuronCore configuration the cores were counted at (physical cores per "
        "logical core, 1 or 2, as `neuron-ls -j` reports it; `NEURON_LOGICAL_NC_CONFIG`): what "
        "`neuron_cores` and `hbm_capacity_gb` mean on Neuron; null off Neuron."
    ),
    "reference_cpu": (
        "The CPU that computed the run's CPU reference (its model name, `/proc/cpuinfo`), which "
        "may be another host's when the reference was cached: with `reference_isa`, the kind of "
        "host; `diff`, the dashboard and the page say when two pairs' references came from "
        "different kinds; null where no reference ran, and in files written before the column."
    ),
    "reference_isa": (
        "The instruction set oneDNN used on that CPU, in oneDNN's words (`Intel AVX2`, `Intel "
        "AVX-512 with Intel DL Boost and bfloat16 support`...; `ONEDNN_MAX_CPU_ISA` caps it). "
        "The verdict does not depend on it (a half dtype's eager run is rounded in float64)."
    ),
    "reference_threads": "The threads torch used for the CPU reference.",
    "reference_torch": "The torch version that computed the CPU reference.",
    "reference_onednn": "The oneDNN version inside that torch.",
}
"""One sentence (or two) per column of :data:`SCHEMA`, in its order: the meaning of each."""

DEVICE_DOCS: Final[dict[str, str]] = {f.name: COLUMN_DOCS[f.name] for f in DEVICE_FIELDS}
"""The meaning of each of :data:`~pytest_neuronsupport.dataset.table.DEVICE_FIELDS`, as the
support table says it (the training and performance tables say it alike)."""

RESULT_MEANINGS: Final[dict[Result, str]] = {
    Result.PASS: (
        "The model loaded, compiled and ran on the device, and its output matched the CPU fp32 "
        "reference (or differed only at near-ties), or the check could not run. In pytest: "
        "passed."
    ),
    Result.FAIL_LOAD: (
        "The checkpoint could not be found or loaded (config, tokenizer or weights). In "
        "pytest: failed."
    ),
    Result.FAIL_GEN: (
        "Compiling the model or generating with it raised (generating runners). In pytest: failed."
    ),
    Result.FAIL_FORWARD: (
        "Compiling the model or its forward pass raised (encoder runners). In pytest: failed."
    ),
    Result.FAIL_TRAIN: (
        "A training step (forward, loss, backward, optimizer step) raised, other than for lack "
        "of memory (training rows). In pytest: failed."
    ),
    Result.FAIL_OUTPUT: (
        "The model ran, but its output differs from the CPU fp32 reference beyond a near-tie, "
        "or the English judge found its text not fluent English; in a training row, the "
        "compiled step differs from the eager CPU fp32 step beyond the tolerance. In pytest: "
        "failed."
    ),
    Result.FAIL_OTHER: (
        "The run ended without a verdict: a crash, a hang past the timeout, memory past the "
        "limit, a rank or xdist worker that died, or a failure of the plugin; `notes` says how "
        "and in which phase. In pytest: failed."
    ),
    Result.EXCLUDED: (
        "Not run: a quantized checkpoint, remote code, too large for the cores allowed, or no "
        "runner for it; `exclusion` says which. In pytest: skipped."
    ),
}
"""The meaning of each value of the ``result`` column."""


SUPPORT: Final = Table("support", DATA, SCHEMA, ("model_id",), COLUMN_DOCS)
"""The model support dataset: ``<results>/data``, one row per model in a pair."""
