"""Where a training test's time goes: the check, and each trial of both batch searches.

    python benchmarks/train_search.py [--cap GB] [--seq-len N] [--models a,b] [--keep DIR]

Runs ``pytest --neuron-sweep --neuron-train`` on zoo models (default: the bundled train list's
three) with ``aot_eager`` on the CPU, offline, under ``--neuron-core-memory`` (default 0.3 GB),
in a fresh folder, then prints per model: the whole test's seconds, the check's, and for each
search its trials, their seconds (the isolated run as the sweep saw it) split into what the
trial measured inside (loading the model, the first step with compiling, the timed steps) and
the rest (the forked process: start, imports left, tokenizer, exit), and how many trials
doubling from 1 would have taken for the same answer. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset.files import read_dataset
from pytest_neuronsupport.dataset.train import TRAIN
from pytest_neuronsupport.modes.train import find_batch

MODELS = "zoo:gpt2,zoo:bert-mlm,zoo:distilbert-sst"


def sweep(folder: Path, models: list[str], cap: float, seq_len: int) -> None:
    entries = "".join(
        f'[[model]]\nid = "{m}"\nmode = "train"\nseq_len = {seq_len}\n\n' for m in models
    )
    (folder / "models.toml").write_text(entries, encoding="utf-8")
    (folder / "pytest.ini").write_text(
        f"[pytest]\nneuron_cache = {folder / 'cache'}\nneuron_leases = {folder / 'leases'}\n",
        encoding="utf-8",
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--neuron-sweep",
        "--neuron-models",
        "models.toml",
        "--neuron-backend",
        "aot_eager",
        "--neuron-core-memory",
        str(cap),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(command, cwd=folder, env=env, check=False, stdout=subprocess.DEVNULL)


def trial_inside(folder: Path, mode: str, batch: int) -> dict[str, Any]:
    """What a trial measured inside its run (its verdict: load_s, first_step_s, steps_s)."""
    path = folder / f"{mode}-{batch}" / "verdict.json"
    return json.loads(path.read_text()) if path.exists() else {}


def report(results: Path, seq_len: int) -> None:
    for row in read_dataset(results, table=TRAIN).to_pylist():
        details = json.loads(row["check"] or "{}")
        model = str(row["model_id"])
        print(
            f"{model}: {row['result']}, {row['wall_s']:.1f} s in all, "
            f"check {details.get('check_s', 0):.1f} s"
        )
        [folder] = results.glob(f"runs/*/*/{model.replace(':', '--')}/train-{seq_len}")
        for mode in ("native", "compiled"):
            search = details.get(f"search_{mode}")
            if not search:
                continue
            walls = [wall or 0.0 for _, _, wall in search["trials"]]
            inside = {"load_s": 0.0, "first_step_s": 0.0, "steps_s": 0.0}
            for batch, _, _ in search["trials"]:
                measured = trial_inside(folder, mode, batch)
                for key in inside:
                    inside[key] += float(measured.get(key) or 0.0)
            found = row[f"batch_{mode}"]
            doubling = find_batch(int(found or 0).__ge__, int(row["max_batch"]))
            print(
                f"  {mode}: batch {found} in {len(walls)} trials from {search.get('start', 1)} "
                f"(doubling from 1: {len(doubling.trials)}), {sum(walls):.1f} s: "
                f"load {inside['load_s']:.1f}, first step (compiling) "
                f"{inside['first_step_s']:.1f}, timed steps {inside['steps_s']:.1f}, "
                f"process and the rest {sum(walls) - sum(inside.values()):.1f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cap", type=float, default=0.3)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it")
    args = parser.parse_args()
    models = args.models.split(",")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        sweep(args.keep, models, args.cap, args.seq_len)
        report(args.keep / "results", args.seq_len)
        return
    with tempfile.TemporaryDirectory() as tmp:
        sweep(Path(tmp), models, args.cap, args.seq_len)
        report(Path(tmp) / "results", args.seq_len)


if __name__ == "__main__":
    main()
