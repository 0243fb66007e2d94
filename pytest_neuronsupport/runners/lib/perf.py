"""Benchmark: how fast the compiled model runs one configuration, against eager on the same device.

``PARAMS`` names the configuration: ``kind`` (``encoder``, ``decoder``, ``encoder-decoder``),
``batch``, ``seq_len`` (encoders) or ``input_len``/``output_len`` (generation), and ``warmup``
untimed rounds; timed rounds run until both ``rounds`` of them and ``min_seconds`` of them are
done, at most ``max_rounds`` (:func:`more_rounds`). The model is loaded in the run's dtype and
its forward compiled; the first round (compilation) and the warm-up rounds are timed apart
(``compile_s``, ``warmup_s``); then each timed round is one ``generate`` of exactly
``output_len`` new tokens (greedy, static cache, ``min_new_tokens = max_new_tokens``), each
step's token time-stamped by a streamer as it leaves ``generate``, or one forward pass of
``batch`` sequences of ``seq_len`` tokens. The eager model (forward no longer compiled) is then
timed the same way. On an accelerator each side's peak memory over its timed rounds is kept
(``peak_gb``; None on the CPU, whose resident set is the whole process's).

With ``replicas`` > 1 the script launches itself once per core, each copy pinned to one core;
the copies wait for each other after their warm-up so that their timed rounds run at the same
time (data parallel). The verdict holds every replica's raw per-round timings.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import torch
import transformers
from transformers.generation.streamers import BaseStreamer

from pytest_neuronsupport.runners.lib.entry import attempt
from pytest_neuronsupport.runners.lib.models import (
    compile_forward,
    load_pretrained,
    load_tokenizer,
    step,
)
from pytest_neuronsupport.runners.lib.processes import die_with_parent, exit_description
from pytest_neuronsupport.runners.lib.protocol import Result, phase, write_verdict

#: The text whose tokens, repeated, fill every input to its length.
TEXT = "My name is Wolfgang and I live in Berlin. The future of AI is a question people ask. "
#: Set in a replica's environment: ``<index>/<count>``, and the folder its barrier and
#: verdict files go to.
REPLICA_ENV = "NEURONSUPPORT_REPLICA"
REPLICA_DIR_ENV = "NEURONSUPPORT_REPLICA_DIR"
#: How long a replica waits for the others at the barrier.
BARRIER_TIMEOUT_S = 600.0
#: Peak measurement: a copy of this many bytes, a square matmul of this size.
COPY_BYTES = 64 * 2**20
MATMUL_SIZE = 1024


def perf(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    """Load, compile, time the configuration compiled then eager: the raw timings."""
    kind, device = params["kind"], params["device"]
    failure = Result.FAIL_FORWARD if kind == "encoder" else Result.FAIL_GEN
    with step("load", Result.FAIL_LOAD):
        tokenizer = load_tokenizer(params)
        config = transformers.AutoConfig.from_pretrained(
            params["checkpoint"], revision=params.get("revision"), trust_remote_code=False
        )
        model = load_pretrained(model_class(kind, config), params, params["dtype"], device)
        inputs = make_inputs(kind, tokenizer, model, params)
    modules = [model, model.get_encoder()] if kind == "encoder-decoder" else [model]
    with step("perf", failure):
        compiled = time_rounds(params, ops, model, inputs, tokenizer, compile_first=modules)
        for module in modules:  # back to the eager forward
            del module.forward
        eager = time_rounds(params, ops, model, inputs, tokenizer)
    verdict = {
        "result": Result.PASS,
        "notes": f"{len(compiled['rounds'])} timed rounds compiled, {len(eager['rounds'])} eager",
        "compile_s": compiled["compile_s"],
        "warmup_s": compiled["warmup_s"],
        "rounds_compiled": compiled["rounds"],
        "rounds_eager": eager["rounds"],
        "peak_gb": compiled["peak_gb"],
        "eager_peak_gb": eager["peak_gb"],
        "model": model_facts(model, config),
        # what the timings ran on: a comparison must run with the same
        "threads": torch.get_num_threads(),
        "cpus": sorted(os.sched_getaffinity(0)),
    }
    if params.get("peaks") is None and os.environ.get(REPLICA_ENV, "0/1").startswith("0/"):
        phase("peaks")
        verdict["peaks"] = measure_peaks(device, params["dtype"], ops)
    return verdict


def model_class(kind: str, config: Any) -> Any:
    """The class that loads the checkpoint: the LM classes for generation; for an encoder, the
    head class its checkpoint declares, or ``AutoModel``."""
    if kind == "decoder":
        return transformers.AutoModelForCausalLM
    if kind == "encoder-decoder":
        return transformers.AutoModelForSeq2SeqLM
    for architecture in config.architectures or ():
        if hasattr(transformers, architecture):
            return getattr(transformers, architecture)
    return transformers.AutoModel


def make_inputs(kind: str, tokenizer: Any, model: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``batch`` rows of :data:`TEXT`'s tokens repeated to the input length (no padding)."""
    length = params["seq_len"] if kind == "encoder" else params["input_len"]
    tokens = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    row = [tokens[i % len(tokens)] for i in range(length)]
    input_ids = torch.tensor([row] * params["batch"], dtype=torch.long)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    accepted = inspect.signature(type(model).forward).parameters
    if kind == "encoder" and "token_type_ids" in accepted:
        inputs["token_type_ids"] = torch.zeros_like(input_ids)
    return {k: v.to(params["device"]) for k, v in inputs.items()}


def time_rounds(
    params: dict[str, Any],
    ops: Any,
    model: Any,
    inputs: dict[str, Any],
    tokenizer: Any,
    compile_first: list[Any] | None = None,
) -> dict[str, Any]:
    """The first round (compiling ``compile_first``'s forwards, if given), the warm-up rounds,
    the barrier of data-parallel replicas, then the timed rounds."""
    started = time.perf_counter()
    if compile_first:
        compile_forward(params, *compile_first)
    one_round(params, ops, model, inputs, tokenizer)
    compile_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(params["warmup"]):
        one_round(params, ops, model, inputs, tokenizer)
    warmup_s = time.perf_counter() - started
    barrier("compiled" if compile_first else "eager")
    accelerator = params["device"] != "cpu"
    if accelerator:
        ops.reset_peak()
    rounds: list[dict[str, Any]] = []
    started = time.perf_counter()
    while more_rounds(len(rounds), time.perf_counter() - started, params):
        rounds.append(one_round(params, ops, model, inputs, tokenizer))
    peak = ops.peak_gb() if accelerator else None
    return {"compile_s": compile_s, "warmup_s": warmup_s, "rounds": rounds, "peak_gb": peak}


def more_rounds(done: int, elapsed_s: float, params: dict[str, Any]) -> bool:
    """Whether to time another round: until both ``rounds`` rounds and ``min_seconds`` seconds
    of them are done (as optimum-benchmark and MLPerf require), never past ``max_rounds``."""
    if done >= params["max_rounds"]:
        return False
    return bool(done < params["rounds"] or elapsed_s < params["min_seconds"])


class StepClock(BaseStreamer):
    """Time-stamps every ``put`` of ``generate``: the prompt first, then each new token."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def put(self, value: Any) -> None:
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass


def one_round(
    params: dict[str, Any], ops: Any, model: Any, inputs: dict[str, Any], tokenizer: Any
) -> dict[str, Any]:
    """One round: a forward pass (encoder), or a ``generate`` of exactly ``output_len`` tokens
    with its time to the first token and its token count."""
    ops.synchronize()
    started = time.perf_counter()
    with torch.no_grad():  # not inference_mode: dynamo trips a guard (BigBird, FACTS.md)
        if params["kind"] == "encoder":
            model(**inputs)
            ops.synchronize()
            return {"latency_s": time.perf_counter() - started}
        clock = StepClock()
        model.generate(
            **inputs,
            max_new_tokens=params["output_len"],
            min_new_tokens=params["output_len"],
            do_sample=False,
            cache_implementation="static",
            disable_compile=True,  # forward is compiled with the run's backend
            pad_token_id=tokenizer.pad_token_id,
            streamer=clock,
        )
    ops.synchronize()
    latency = time.perf_counter() - started
    tokens = clock.stamps[1:]  # the first put is the prompt (or the decoder's start token)
    return {"latency_s": latency, "ttft_s": tokens[0] - started, "tokens": len(tokens)}


def model_facts(model: Any, config: Any) -> dict[str, Any]:
    """What the roofline needs: parameter and weight bytes, layers, hidden size, the KV cache's
    bytes per token."""
    text = config.get_text_config(decoder=True)
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    element = next(model.parameters()).element_size()
    layers = int(getattr(text, "num_hidden_layers", 0) or 0)
    heads = int(getattr(text, "num_attention_heads", 0) or 0)
    hidden = int(getattr(text, "hidden_size", 0) or 0)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or (hidden // heads if heads else 0))
    return {
        "params": params,
        "non_embedding_params": params - embedding,
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "layers": layers,
        "hidden": hidden,
        "kv_bytes_per_token": 2 * layers * kv_heads * head_dim * element,
    }


def measure_peaks(device: str, dtype: str, ops: Any) -> dict[str, Any]:
    """This core's memory bandwidth (a copy: bytes read plus written) and matmul FLOP/s in
    ``dtype``, each the best of 5."""
    source = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    n = MATMUL_SIZE
    a = torch.randn(n, n, device=device).to(getattr(torch, dtype))
    b = torch.randn(n, n, device=device).to(getattr(torch, dtype))
    copy = best_time(lambda: target.copy_(source), ops)
    matmul = best_time(lambda: torch.mm(a, b), ops)
    when = datetime.now(UTC).date().isoformat()
    return {
        "bandwidth_gbs": 2 * COPY_BYTES / copy / 1e9,
        "gflops": 2 * n**3 / matmul / 1e9,
        "source": f"measured on {device}, {when}: copy of {COPY_BYTES >> 20} MiB, "
        f"{n}x{n} matmul in {dtype}, best of 5, one core",
    }


def best_time(work: Any, ops: Any) -> float:
    work()
    times = []
    for _ in range(5):
        ops.synchronize()
        started = time.perf_counter()
        work()
        ops.synchronize()
        times.append(time.perf_counter() - started)
    return min(times)


def barrier(name: str) -> None:
    """Data parallel: wait until every replica has reached ``name`` (no-op for one replica)."""
    mark = os.environ.get(REPLICA_ENV)
    if mark is None:
        return
    index, count = (int(x) for x in mark.split("/"))
    folder = os.environ[REPLICA_DIR_ENV]
    open(os.path.join(folder, f"{name}.{index}"), "w").close()
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while sum(f.startswith(f"{name}.") for f in os.listdir(folder)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"replica {index}: the others never reached {name!r}")
        time.sleep(0.001)


def main_perf(params: dict[str, Any], run: Any, ops_class: type) -> int:
    """One replica: run it and write its verdict; several: launch them and gather theirs."""
    mark = os.environ.get(REPLICA_ENV)
    if params["replicas"] > 1 and mark is None:
        write_verdict(launch_replicas(params, ops_class), sys.argv[1:])
        return 0
    verdict = attempt(params, run, ops_class)
    if mark is None:
        verdict["replicas"] = [verdict.pop("rounds_compiled", [])]
        write_verdict(verdict, sys.argv[1:])
        return 0
    with open(os.path.join(os.environ[REPLICA_DIR_ENV], f"verdict.{mark.split('/')[0]}"), "w") as f:
        json.dump(verdict, f, default=str)
    return 0


def launch_replicas(params: dict[str, Any], ops_class: Any) -> dict[str, Any]:
    """Run this script once per allowed core at the same time, each pinned to its core (and
    to its device core, by the device's ``rank_env``); their timings, or the first failure."""
    count, script = params["replicas"], os.path.abspath(sys.argv[0])
    cores = sorted(os.sched_getaffinity(0))
    folder = tempfile.mkdtemp(prefix="replicas-")
    processes = []
    for index in range(count):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.update(getattr(ops_class, "rank_env", lambda rank, world: {})(index, count))
        env.update({REPLICA_ENV: f"{index}/{count}", REPLICA_DIR_ENV: folder})
        core = {cores[index % len(cores)]}

        def pinned(core: set[int] = core) -> None:
            die_with_parent()
            os.sched_setaffinity(0, core)

        processes.append(subprocess.Popen([sys.executable, script], env=env, preexec_fn=pinned))
    while any(p.poll() is None for p in processes):
        if any(p.returncode not in (None, 0) for p in processes):
            for p in processes:
                p.kill()
        time.sleep(0.05)
    verdicts: list[dict[str, Any]] = []
    for index, process in enumerate(processes):
        path = os.path.join(folder, f"verdict.{index}")
        if not os.path.exists(path):
            error = f"replica {index} of {count} {exit_description(process.returncode)}"
            return {"result": Result.FAIL_OTHER, "error": error}
        with open(path, encoding="utf-8") as f:
            verdicts.append(json.load(f))
    failed = next((v for v in verdicts if v["result"] != Result.PASS), None)
    if failed is not None:
        return failed
    first = verdicts[0]
    first["replicas"] = [v["rounds_compiled"] for v in verdicts]
    del first["rounds_compiled"]
    return first
