"""Do the sweep's performance figures agree with a bare loop? Both measured in one run, interleaved.

    python benchmarks/bench_agreement.py [--model zoo:llama] [--io 32/16] [--rounds 10]
                                         [--repeat 4]

On a shared machine the load changes from one minute to the next by more than any difference
between the two sides, so a sweep timed first and a bare loop timed after it compare the load,
not the code. This script takes ``--repeat`` pairs, alternating the order (sweep then bare,
bare then sweep, ...), and compares the medians of all the rounds of each side:

1. *sweep*: a bench sweep (``pytest --neuron-sweep --neuron-perf``) of one model and
   configuration, ``aot_eager`` on the CPU, offline; the row's raw per-round timings
   (``timings``), compiled and eager, and the threads and CPUs its run timed with (``check``).
   The first sweep runs the support run too; later ones find ``run.py`` unchanged and run only
   the benchmark again (its row replaces the previous one);
2. *bare*: a fresh ``python`` process pinned to the same CPU, with the same thread count, that
   loads the same checkpoint in the same dtype, compiles the forward with the same backend and
   ``fullgraph``, runs one compiling round and the same warm-up rounds, then the same number of
   timed ``generate`` calls (or forward passes) with ``perf_counter`` around each call; then the
   same for eager. No streamer, no verdict, nothing of ``perf.py``'s code;
3. the ratio sweep / bare of the medians, the spread of each side (P25-P75 of its rounds, and
   the ratio of each pair's medians), and whether the difference is within the noise (at most
   the larger of the two sides' P25-P75 ranges).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: The text whose tokens, repeated, fill the input (as ``perf.py``'s).
TEXT = "My name is Wolfgang and I live in Berlin. The future of AI is a question people ask. "
BACKEND = "aot_eager"


def bare_loop(args: argparse.Namespace) -> dict[str, Any]:
    """Round latencies (s) of the configuration in a plain loop in this process, compiled then
    eager, and the thread count it ran with."""
    import torch
    import transformers

    from pytest_neuronsupport.devices import DEVICES
    from pytest_neuronsupport.options import default_cache
    from pytest_neuronsupport.pipeline.plan import resolve_checkpoint

    torch.set_num_threads(len(os.sched_getaffinity(0)))  # as the sweep's run does
    checkpoint = resolve_checkpoint(args.model, None, default_cache())[0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    auto: Any = transformers.AutoModelForCausalLM
    if args.kind == "encoder":
        config = transformers.AutoConfig.from_pretrained(checkpoint)
        names = [a for a in config.architectures or () if hasattr(transformers, a)]
        auto = getattr(transformers, names[0]) if names else transformers.AutoModel
    model: Any = auto.from_pretrained(checkpoint, dtype=torch.float32)
    model.eval()
    length, new = (args.seq_len, 0) if args.kind == "encoder" else io(args.io)
    tokens = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([[tokens[i % len(tokens)] for i in range(length)]] * args.batch)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if args.kind == "encoder" and "token_type_ids" in tokenizer.model_input_names:
        inputs["token_type_ids"] = torch.zeros_like(ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def once() -> None:
        with torch.inference_mode():
            if args.kind == "encoder":
                model(**inputs)
                return
            model.generate(
                **inputs,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                cache_implementation="static",
                disable_compile=True,
                pad_token_id=pad,
            )

    def timed() -> list[dict[str, float]]:
        for _ in range(1 + args.warmup):
            once()
        times = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            once()
            times.append({"latency_s": time.perf_counter() - started})
        return times

    fullgraph = DEVICES["cpu"].fullgraph
    model.forward = torch.compile(model.forward, backend=BACKEND, fullgraph=fullgraph)
    compiled = timed()
    del model.forward  # back to the eager forward
    eager = timed()
    cpus = sorted(os.sched_getaffinity(0))
    return {"compiled": compiled, "eager": eager, "threads": torch.get_num_threads(), "cpus": cpus}


def io(text: str) -> tuple[int, int]:
    first, second = (int(x) for x in text.split("/"))
    return first, second


def run_bare(args: argparse.Namespace, cpu: int) -> dict[str, Any]:
    """:func:`bare_loop` in a fresh process pinned to ``cpu``, one OpenMP thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    command = [sys.executable, __file__, "--bare", *sys.argv[1:]]
    done = subprocess.run(
        command,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_sweep(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """One bench sweep in ``folder``: its row's raw timings and what they ran with."""
    import pyarrow.parquet as pq

    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "0",
        "--neuron-sweep", f"--neuron-models={folder / 'models.toml'}",
        f"--neuron-backend={BACKEND}", f"--neuron-results={folder / 'results'}",
        "--neuron-perf", f"--neuron-perf-batch={args.batch}", f"--neuron-perf-io={args.io}",
        f"--neuron-perf-seq-len={args.seq_len}", f"--neuron-perf-rounds={args.rounds}",
        f"--neuron-perf-warmup={args.warmup}",
    ]  # fmt: skip
    subprocess.run(command, cwd=folder, check=True, capture_output=True)
    (path,) = Path(folder, "results", "perf").glob("*/*.parquet")
    row = pq.read_table(path).to_pylist()[0]
    if row["result"] != "PASS":
        raise SystemExit(f"the sweep's benchmark did not pass: {row['result']} {row['notes']}")
    timings, check = json.loads(row["timings"]), json.loads(row["check"])
    return {
        "compiled": timings["replicas"][0],
        "eager": timings["eager"],
        "threads": check.get("threads"),
        "cpus": check.get("cpus"),
        "configuration": row["configuration"],
    }


def latencies(side: dict[str, Any], mode: str) -> list[float]:
    """A side's round latencies (ms), ``compiled`` or ``eager``."""
    return [1e3 * r["latency_s"] for r in side[mode]]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[1], q[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="zoo:llama")
    parser.add_argument("--kind", default="decoder", choices=("decoder", "encoder"))
    parser.add_argument("--io", default="32/16", help="decoders: input/output tokens")
    parser.add_argument("--seq-len", type=int, default=128, help="encoders")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=4, help="pairs (sweep, bare), interleaved")
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        print(json.dumps(bare_loop(args)))
        return 0
    cpu = sorted(os.sched_getaffinity(0))[0]  # the sweep's one-core lease: the first CPU
    sides: dict[str, list[dict[str, Any]]] = {"sweep": [], "bare": []}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        listed = f'[[model]]\nid = "{args.model}"\n'
        (folder / "models.toml").write_text(listed, encoding="utf-8")
        for pair in range(args.repeat):
            order = ("sweep", "bare") if pair % 2 == 0 else ("bare", "sweep")
            for side in order:
                got = run_sweep(args, folder) if side == "sweep" else run_bare(args, cpu)
                sides[side].append(got)
                median = statistics.median(latencies(got, "compiled"))
                print(f"pair {pair} {side:5s}: compiled median {median:7.2f} ms", flush=True)
    sweep, bare = sides["sweep"], sides["bare"]
    print(f"model {args.model} ({args.kind}), configuration {sweep[0]['configuration']}, ", end="")
    print(f"{BACKEND}, cpu, float32, {args.repeat} pairs x {args.rounds} rounds, interleaved")
    ran = {(s["threads"], tuple(s["cpus"])) for s in (*sweep, *bare)}
    print(f"threads and CPUs, both sides: {sorted(ran)}")
    if len(ran) != 1:
        print("NOT the same threads and CPUs on both sides: the comparison is not valid")
        return 1
    agree_all = True
    for mode in ("compiled", "eager"):
        rounds = {side: [t for s in sides[side] for t in latencies(s, mode)] for side in sides}
        q = {side: quartiles(values) for side, values in rounds.items()}
        for side in ("sweep", "bare"):
            low, mid, high = q[side]
            print(f"{mode:8s} {side:5s}: median {mid:7.2f} ms, P25-P75 {low:.2f}-{high:.2f}")
        pairs = [
            statistics.median(latencies(s, mode)) / statistics.median(latencies(b, mode))
            for s, b in zip(sweep, bare, strict=True)
        ]
        noise = max(q["sweep"][2] - q["sweep"][0], q["bare"][2] - q["bare"][0])
        difference = q["sweep"][1] - q["bare"][1]
        agree = abs(difference) <= noise
        agree_all &= agree
        ratios = ", ".join(f"{r:.2f}" for r in pairs)
        ratio = q["sweep"][1] / q["bare"][1]
        print(
            f"{mode:8s} ratio sweep / bare of the medians {ratio:.3f} (pairs: {ratios}); ", end=""
        )
        print(f"difference {difference:+.2f} ms; within the noise (larger P25-P75, ", end="")
        print(f"{noise:.2f} ms): {agree}")
    return 0 if agree_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
