"""The whole architecture sweep: its wall time and what it came to.

    python benchmarks/architectures.py [--workers 2] [--cache DIR] [--keep DIR] [-k EXPR]

Sweeps the bundled ``model_lists/architectures.toml`` (a tiny random model of every class
transformers maps for the card's text tasks that builds) on the CPU with ``aot_eager``, offline,
in a fresh results folder, held against its expected results
(``model_lists/architectures-expected.toml``). Prints the wall time of the whole sweep (a fresh
``python -m pytest`` process: start-up and collection count), the count of each result, the
models per runner, the baseline's verdict, and the non-PASS rows. With a fresh ``--cache`` the
time includes building every checkpoint (about 1-3 s each) as the sweep meets them; with the
default cache, built ones are reused. Exits with the sweep's status (1 when the baseline fails).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = ROOT / "model_lists" / "architectures-expected.toml"


def main() -> int:
    from pytest_neuronsupport.options import default_cache

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="xdist workers (-n)")
    parser.add_argument("--cache", type=Path, default=default_cache(), help="--neuron-cache")
    parser.add_argument("--keep", type=Path, help="the results folder (default: a temporary one)")
    parser.add_argument("-k", dest="select", help="only the models pytest's -k selects")
    args = parser.parse_args()
    results = args.keep or Path(tempfile.mkdtemp(prefix="architectures-"))
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--neuron-sweep",
        "--neuron-models",
        "architectures",
        "--neuron-backend",
        "aot_eager",
        "--neuron-results",
        str(results),
        "--neuron-cache",
        str(args.cache),
        "--neuron-baseline",
        str(EXPECTED),
        "-n",
        str(args.workers),
        "-p",
        "no:randomly",
        "-q",
        *(["-k", args.select] if args.select else []),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    import pandas as pd

    rows = pd.read_parquet(results / "data")
    rows = rows[rows.model_id.str.startswith("zoo:arch/")]
    print(
        f"{len(rows)} architectures in {wall:.0f} s ({wall / 60:.1f} min), {args.workers} workers"
    )
    for result, count in sorted(Counter(rows.result).items()):
        print(f"  {result:<14} {count}")
    runners = Counter(rows.runner.fillna("(none: excluded)"))
    print("runners: " + ", ".join(f"{r} {n}" for r, n in sorted(runners.items())))
    verdict = [line for line in done.stdout.splitlines() if line.startswith("baseline ")]
    print(verdict[-1] if verdict else "(no baseline verdict: see the sweep's output)")
    for row in rows[rows.result != "PASS"].sort_values("model_id").itertuples():
        text = next((t for t in (row.error, row.notes) if isinstance(t, str) and t), "")
        why = text.splitlines()[0][:110] if text else ""
        print(f"  {row.model_id.removeprefix('zoo:arch/'):<46} {row.result:<14} {why}")
    print(f"results: {results}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
