"""False failures and misses of the output check, as rates measured in one run.

    python benchmarks/verdict_rates.py [--keep DIR] [--backends NAME,...] [--models ID,...]

Sweeps the one-core entries of the bundled tiny list (``model_lists/tiny.toml``) on the CPU,
offline, once under each backend, and counts the rows whose verdict is ``FAIL(output)``:

- correct backends, which reorder or round but compute the right numbers: ``inductor`` (fused
  fp32 kernels) and ``one_ulp`` (every float output of each compiled graph one unit in the
  last place off). Each FAIL(output) is a false failure; target 0.
- wrong backends: ``one_op_off`` (each graph's first linear or matmul 1% off, element by
  element), ``last_op_off`` (its last one, the nearest the output, likewise),
  ``every_linear_off`` (every linear or matmul off by 1% of its output's magnitude, with a
  fixed sign pattern) and ``swapped_top_two`` (the two largest logits at the last position
  trade places). Each row without FAIL(output) is a miss; target: every model caught.

The wrong and noisy backends are in ``tests/backends_for_tests.py``; the sweep runs from a work
folder holding a copy, as the plugin's tests do. The CPU references are cached once and shared
by every sweep (they do not depend on the backend).
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
BUNDLED = ROOT / "model_lists" / "tiny.toml"
ONE_CORE = [spec for spec in parse(BUNDLED) if spec.cores is None]

#: name, ``--neuron-backend``, whether its numbers are right
BACKENDS = [
    ("inductor", "inductor", True),
    ("one_ulp", "backends_for_tests:one_ulp_backend_for_tests", True),
    ("one_op_off", "backends_for_tests:one_op_off_backend_for_tests", False),
    ("last_op_off", "backends_for_tests:last_op_off_backend_for_tests", False),
    ("every_linear_off", "backends_for_tests:every_linear_off_backend_for_tests", False),
    ("swapped_top_two", "backends_for_tests:swapped_top_two_backend_for_tests", False),
]


def one_core_list(models: list[str] | None = None) -> str:
    """The bundled tiny list without its entries that ask for several cores (those of
    ``models`` alone, when given)."""
    chosen = [spec.id for spec in ONE_CORE if models is None or spec.id in models]
    return "".join(f'[[model]]\nid = "{model}"\n\n' for model in chosen)


def sweep(work: Path, backend: str, results: Path) -> list[dict[str, object]]:
    """The rows of one sweep of the one-core list under ``backend``."""
    shutil.rmtree(results, ignore_errors=True)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "PYTHONPATH": os.pathsep.join([str(work), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--neuron-sweep",
        "--neuron-models",
        str(work / "tiny-one-core.toml"),
        "--neuron-backend",
        backend,
        "--neuron-device",
        "cpu",
        "--neuron-cache",
        str(work / "cache"),
        "--neuron-results",
        str(results),
        "-p",
        "no:cacheprovider",
        "-q",
    ]
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: some model failed, which is what is measured
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    (table,) = (results / "data").glob("*/*.parquet")
    rows: list[dict[str, object]] = pq.read_table(table).to_pylist()
    return rows


def noise_ratio(row: dict[str, object]) -> float | None:
    """The row's ``error_device / tolerance`` from its ``check.fp64`` (above 1: failed on it);
    None where float64 did not decide."""
    numbers = json.loads(str(row.get("check") or "{}")).get("fp64")
    if not isinstance(numbers, dict):
        return None
    return float(numbers["error_device"]) / float(numbers["tolerance"])


def format_ratios(ratios: dict[str, float | None]) -> str:
    """``model ratio`` pairs, the largest first."""
    known = sorted(((v, k) for k, v in ratios.items() if v is not None), reverse=True)
    unknown = [k for k, v in ratios.items() if v is None]
    text = ", ".join(f"{k.removeprefix('zoo:')} {v:.3g}" for v, k in known)
    return text + (f"; no float64: {', '.join(unknown)}" if unknown else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, default=None, help="work folder to keep")
    parser.add_argument("--backends", default=",".join(name for name, _, _ in BACKENDS))
    parser.add_argument("--models", default=None, help="model ids, comma-separated (a subset)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="neuronsupport-verdicts-"))
    work.mkdir(parents=True, exist_ok=True)
    models = args.models.split(",") if args.models else None
    (work / "tiny-one-core.toml").write_text(one_core_list(models))
    shutil.copy(ROOT / "tests" / "backends_for_tests.py", work / "backends_for_tests.py")
    chosen = args.backends.split(",")
    count = len(models) if models else len(ONE_CORE)
    print(f"{count} one-core tiny models on cpu; {os.cpu_count()} cores", flush=True)
    print(f"{'backend':<16} {'numbers':<8} {'FAIL(output)':>12} {'other':>6} {'rate':>6} target")
    figures: dict[str, dict[str, object]] = {}
    for name, backend, correct in sorted(
        (b for b in BACKENDS if b[0] in chosen), key=lambda b: chosen.index(b[0])
    ):
        started = time.perf_counter()
        rows = sweep(work, backend, work / f"results-{name}")
        failed = [str(r["model_id"]) for r in rows if r["result"] == "FAIL(output)"]
        other = {
            str(r["model_id"]): str(r["result"])
            for r in rows
            if r["result"] not in ("PASS", "FAIL(output)")
        }
        rate = len(failed) / len(rows)
        target = "0 (false failures)" if correct else "1 (every wrong model caught)"
        met = (not failed) if correct else len(failed) == len(rows)
        print(
            f"{name:<16} {'right' if correct else 'wrong':<8} "
            f"{f'{len(failed)}/{len(rows)}':>12} {len(other):>6} {rate:6.2f} {target}"
            f"  {'met' if met else 'MISSED'}  ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        missed = (
            failed if correct else [str(r["model_id"]) for r in rows if r["model_id"] not in failed]
        )
        for row in rows:
            if str(row["model_id"]) in missed:
                print(f"    {row['model_id']}: {row['result']} {str(row['cpu_match'])[:110]}")
        ratios = {str(r["model_id"]): noise_ratio(r) for r in rows}
        print("    error_device / tolerance against float64:", format_ratios(ratios), flush=True)
        figures[name] = {"fail_output": failed, "other": other, "models": len(rows), "rate": rate}
        figures[name]["noise_ratio"] = ratios
    print(json.dumps(figures))
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
