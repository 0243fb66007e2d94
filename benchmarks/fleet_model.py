"""The fleet of ``fleet.py``: its models' sizes and each one's phases on a trn2.48xlarge.

A thousand models (by default) whose sizes follow those of popular Hub text-generation and
encoder models (:data:`BUCKETS`, with their source), and the phase model that turns a size
into a download, a compile, a device run and a CPU reference (:func:`phases`; stated, not
measured). ``fleet.py`` replays them through the real sweep; ``fleet_schedule.py`` through a
model of its policy.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

GB = 1e9

# --- the fleet --------------------------------------------------------------------------------

#: The fleet's sizes: ``(share of the list, smallest, largest parameters, kind)``, log-uniform
#: within each bucket. The kinds follow the sweep's list (SPEC.md: the top text-generation and
#: image-text-to-text models, then translation and summarization, then the eight text-encoder
#: tasks, down to rank 1000 of each): 45% decoders, 10% encoder-decoders, 45% encoders. The
#: buckets are derived from the sizes of the popular models named beside them (their model
#: cards), no public table of the Hub's parameter counts by rank being reachable from here;
#: the download-weighted shares of lbourdois, "Which models are downloaded most on the Hugging
#: Face Hub?" (Hugging Face community blog, October 2025: among the 50 most downloaded
#: entities, 40.2% of downloads are of models under 100M parameters, 69.8% under 200M, 86.3%
#: under 500M, 92.5% under 1B) are printed beside the fleet's own (counted by model, so it has
#: more large models than downloads do).
BUCKETS: tuple[tuple[float, float, float, str], ...] = (
    # all-MiniLM-L6-v2 22.7M, e5-small 33M, DistilBERT 66M
    (0.45 * 0.35, 15e6, 70e6, "encoder"),
    # BERT-base 110M, RoBERTa-base 125M, all-mpnet-base-v2 109M, DeBERTa-v3-base 184M
    (0.45 * 0.40, 70e6, 150e6, "encoder"),
    # RoBERTa-large 355M, bge-large 335M, DeBERTa-v3-large 435M, XLM-R-large 560M, bge-m3 568M
    (0.45 * 0.22, 150e6, 600e6, "encoder"),
    # Qwen3-Embedding-0.6B/4B/8B, gte-Qwen2-7B, e5-mistral-7b
    (0.45 * 0.03, 0.6e9, 8e9, "encoder"),
    # t5-small 60M, opus-mt 75M, bart-base 140M, t5-base 220M
    (0.10 * 0.60, 60e6, 250e6, "seq2seq"),
    # bart-large 406M, mbart-large 610M, nllb-200-distilled-600M, flan-t5-large 783M
    (0.10 * 0.32, 250e6, 1.2e9, "seq2seq"),
    # flan-t5-xl 2.85B, nllb-200-3.3B, flan-t5-xxl 11.3B
    (0.10 * 0.08, 1.2e9, 11.5e9, "seq2seq"),
    # gpt2 124M, SmolLM2-135M/360M, Qwen2.5-0.5B, Qwen3-0.6B
    (0.45 * 0.25, 0.1e9, 1e9, "decoder"),
    # Llama-3.2-1B/3B, Qwen2.5-1.5B/3B, Qwen3-1.7B/4B, gemma-3-1b, Phi-3-mini 3.8B
    (0.45 * 0.30, 1e9, 4e9, "decoder"),
    # Mistral-7B, Qwen2.5-7B, Llama-3.1-8B, Qwen3-8B, gemma-2-9b, Qwen2.5-VL-7B
    (0.45 * 0.27, 4e9, 10e9, "decoder"),
    # gemma-3-12b/27b, Qwen3-14B/32B, gpt-oss-20b, Mistral-Small-24B, Qwen3-30B-A3B
    (0.45 * 0.13, 10e9, 40e9, "decoder"),
    # Llama-3.3-70B, Qwen2.5-72B, Llama-4-Scout 109B, gpt-oss-120b, Mixtral-8x22B 141B
    (0.45 * 0.04, 40e9, 200e9, "decoder"),
    # Qwen3-235B-A22B, Llama-4-Maverick 400B, DeepSeek-V3 671B: more than 16 cores, excluded
    (0.45 * 0.01, 200e9, 700e9, "decoder"),
)
#: lbourdois (see :data:`BUCKETS`): the share of downloads under each size.
DOWNLOADED_UNDER = ((100e6, 0.402), (200e6, 0.698), (500e6, 0.863), (1e9, 0.925))

# --- the phase model: a trn2.48xlarge (stated, not measured) ----------------------------------

#: The cores' memory and the most a model gets (the plugin's sizing: the smallest power of two
#: of 24 GB cores that holds the bf16 weights; encoders and encoder-decoders on one core).
CORE_GB = 24.0
MAX_CORES = 16
#: Bytes a parameter in the files downloaded: decoders ship bf16, most encoders fp32.
FILE_BYTES = {"decoder": 2, "seq2seq": 4, "encoder": 4}
#: Compile (neuronx-cc through torch.compile; it holds the cores): a fixed part, and seconds
#: per GB of bf16 weights on one core (the graph each rank compiles).
COMPILE_S = {"decoder": 60.0, "seq2seq": 60.0, "encoder": 30.0}
COMPILE_S_PER_GB_A_CORE = 20.0
#: The device's run: loading the weights onto the cores (1 GB/s a core), then 32 tokens or one
#: forward pass.
LOAD_GB_PER_S_A_CORE = 1.0
RUN_S = {"decoder": 7.0, "seq2seq": 7.0, "encoder": 2.0}
#: The CPU reference (fp32 twice, fp64, eager in the run's dtype): measured in issue 38 on a
#: 2-core machine at 7.0 s and 11.0 s for 0.27 and 0.54 GB of bf16 weights (3 s + 14.8 s a GB);
#: a trn2.48xlarge's host (192 vCPUs) taken as 5 times faster a GB. An encoder's is one
#: forward pass in each dtype.
REFERENCE_S = {"decoder": (3.0, 3.0), "seq2seq": (3.0, 3.0), "encoder": (2.0, 2.0)}
#: Host memory: a run holds its bf16 weights and 4 GB a core (runtime, compiler); a reference
#: its fp32 and fp64 copies, six times the bf16 weights (the plugin's own estimate,
#: ``sizing.host_holds_fp64``), and 2 GB.
RUN_HOST_GB_A_CORE = 4.0
REFERENCE_HOST_GB = 2.0
#: The compiler version the stand-in device says (a night's of ``fleet.py --nights``; unset: the
#: CPU device's own).
COMPILER_ENV = "FLEET_COMPILER_FOR_BENCHMARK"


@dataclass(frozen=True)
class Model:
    id: str
    kind: str
    parameters: int
    #: Cores the plugin's sizing gives it, or None: more than :data:`MAX_CORES` (excluded).
    cores: int | None
    download_s: float = 0.0
    compile_s: float = 0.0
    device_s: float = 0.0
    reference_s: float = 0.0
    run_host_bytes: int = 0
    reference_host_bytes: int = 0

    @property
    def bf16_gb(self) -> float:
        return 2 * self.parameters / GB

    @property
    def busy_s(self) -> float:
        """Device work: the compile and the device's run."""
        return self.compile_s + self.device_s


def cores_for(parameters: int, kind: str) -> int | None:
    """The plugin's sizing rule, for the lower bound (the sweep sizes each model itself)."""
    cores = 1
    while cores * CORE_GB * GB < 2 * parameters:
        cores *= 2
    if cores > (MAX_CORES if kind == "decoder" else 1):
        return None
    return cores


def phases(model_id: str, kind: str, parameters: int, bandwidth_gbs: float) -> Model:
    """A model's phases on a trn2.48xlarge (the constants above)."""
    cores = cores_for(parameters, kind)
    if cores is None:
        return Model(model_id, kind, parameters, None)
    gb = 2 * parameters / GB
    fixed, per_gb = REFERENCE_S[kind]
    return Model(
        model_id,
        kind,
        parameters,
        cores,
        download_s=FILE_BYTES[kind] * parameters / GB / bandwidth_gbs,
        compile_s=COMPILE_S[kind] + COMPILE_S_PER_GB_A_CORE * gb / cores,
        device_s=gb / cores / LOAD_GB_PER_S_A_CORE + RUN_S[kind],
        reference_s=fixed + per_gb * gb,
        run_host_bytes=int((gb + RUN_HOST_GB_A_CORE * cores) * GB),
        reference_host_bytes=int((6 * gb + REFERENCE_HOST_GB) * GB),
    )


def fleet(count: int, bandwidth_gbs: float, seed: int) -> list[Model]:
    """``count`` models drawn from :data:`BUCKETS`, in the order of the list."""
    rng = random.Random(seed)
    weights = [share for share, *_ in BUCKETS]
    models = []
    for i in range(count):
        _, low, high, kind = rng.choices(BUCKETS, weights)[0]
        parameters = int(math.exp(rng.uniform(math.log(low), math.log(high))))
        name = f"fleet/m{i:04d}-{kind}-{size_label(parameters)}"
        models.append(phases(name, kind, parameters, bandwidth_gbs))
    return models


def size_label(parameters: int) -> str:
    return f"{parameters / 1e9:.1f}b" if parameters >= 1e9 else f"{parameters / 1e6:.0f}m"
