"""Is a failure of the architecture sweep the model's, or the harness's?

For each tiny architecture named (``zoo:arch/<class>`` of ``model_lists/architectures.toml``), a
bare transformers script does what its runner does, with nothing of the plugin but the zoo's
checkpoint folder, loaded with the runner's class (``AutoModelForCausalLM``,
``AutoModelForSeq2SeqLM``, an encoder's declared head): a decoder generates 32 greedy tokens
from the prompt with a static cache, a seq2seq model generates from its encoder's pass, an
encoder runs one forward pass of its head on the sentence padded to 128 tokens (only the
inputs its ``forward`` takes), all in fp32 on the CPU under ``torch.no_grad()``. It runs in a
fresh process eager, then, when eager works, in another with ``forward`` compiled by
``torch.compile(backend="aot_eager")``. The verdict:

- ``genuine (eager)``: eager transformers fails already (the model as built, or transformers);
- ``genuine (compile)``: eager works, the compiled run fails (the compiler's);
- ``harness``: both work, so a failed row is the harness's to fix.

Run it on the classes a sweep failed (``--results`` reads them from its dataset)::

    python benchmarks/architecture_check.py FNetForTokenClassification EsmForMaskedLM
    python benchmarks/architecture_check.py --results /tmp/archres
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

RUNNER_SIDE = r"""
import inspect, json, sys
import torch, transformers
transformers.logging.set_verbosity_error()
path, compiled = sys.argv[1], sys.argv[2] == "1"
PROMPT, QUESTION = "The future of AI is", "Where do I live?"
SENTENCE = "My name is Wolfgang and I live in Berlin."
def compile_(module):
    if compiled:
        module.forward = torch.compile(module.forward, backend="aot_eager")
phase = "load"
try:
    config = transformers.AutoConfig.from_pretrained(path)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    tok.pad_token = tok.pad_token or tok.eos_token or tok.unk_token
    kind = sys.argv[3]
    # the runners' classes: the Auto class of a decoder or a seq2seq LM, an encoder's own head
    cls = {"dense": transformers.AutoModelForCausalLM,
           "seq2seq": transformers.AutoModelForSeq2SeqLM}.get(kind)
    cls = cls or getattr(transformers, config.architectures[0])
    model = cls.from_pretrained(path, dtype=torch.float32).eval()
    phase = "run"
    with torch.no_grad():
        if kind in ("dense", "seq2seq"):
            compile_(model)
            if kind == "seq2seq":
                compile_(model.get_encoder())
            out = model.generate(**tok(PROMPT, return_tensors="pt"), max_new_tokens=32,
                                 do_sample=False, cache_implementation="static",
                                 disable_compile=True, pad_token_id=tok.pad_token_id)
        else:
            texts = (SENTENCE,)
            if kind == "question_answering":
                texts = (QUESTION, SENTENCE)
            elif kind == "masked_lm":
                texts = (SENTENCE.replace("Berlin", tok.mask_token),)
            enc = tok(*texts, return_tensors="pt", padding="max_length", max_length=128,
                      truncation=True)
            takes = inspect.signature(type(model).forward).parameters
            compile_(model)
            out = model(**{k: v for k, v in enc.items() if k in takes})
    print(json.dumps({"ok": True}))
except Exception as exc:
    print(json.dumps({"ok": False, "phase": phase, "error": f"{type(exc).__name__}: {exc}"[:300]}))
"""


def kind_of(cls: str) -> str:
    """The runner's way with this class, as the sweep chooses it."""
    from pytest_neuronsupport.runners import Runners
    from pytest_neuronsupport.zoo import architectures

    model_type = next(t for t, c, _ in architectures.mapped() if c == cls)
    config = {"architectures": [cls], "model_type": model_type}
    choice = Runners.builtin().choose(config, None)
    if choice.runner is None:
        return "excluded"
    if choice.runner.name in ("dense", "dense_ep", "multimodal"):
        return "dense"
    if choice.runner.name == "seq2seq":
        return "seq2seq"
    return choice.kind


def check(cls: str, cache: Path) -> dict[str, object]:
    from pytest_neuronsupport import zoo

    kind = kind_of(cls)
    if kind == "excluded":
        return {"class": cls, "kind": kind, "verdict": "excluded"}
    try:
        path = zoo.checkpoint(f"{zoo.ARCHITECTURE_PREFIX}{cls}", cache)
    except Exception as exc:  # the sweep's FAIL(load) too
        return {"class": cls, "kind": kind, "verdict": "not buildable", "error": repr(exc)[:300]}
    runs: dict[str, dict[str, object]] = {"1": {"ok": False, "error": "not run"}}
    for compiled in ("0", "1"):
        if compiled == "1" and not runs["0"]["ok"]:
            break  # eager fails already: nothing of the compiler's to tell
        try:
            done = subprocess.run(
                [sys.executable, "-c", RUNNER_SIDE, str(path), compiled, kind],
                capture_output=True,
                text=True,
                timeout=300,
            )
            lines = done.stdout.strip().splitlines()
            runs[compiled] = (
                json.loads(lines[-1]) if lines else {"ok": False, "error": done.stderr[-300:]}
            )
        except subprocess.TimeoutExpired:
            runs[compiled] = {"ok": False, "error": "timed out after 300 s"}
    eager, compiled_run = runs["0"], runs["1"]
    if not eager["ok"]:
        verdict = "genuine (eager)"
    elif not compiled_run["ok"]:
        verdict = "genuine (compile)"
    else:
        verdict = "harness"
    error = eager.get("error") or ("" if compiled_run["ok"] else compiled_run.get("error")) or ""
    return {"class": cls, "kind": kind, "verdict": verdict, "error": str(error)}


def failed_classes(results: Path) -> list[str]:
    import pandas as pd

    rows = pd.read_parquet(results / "data")
    failed = rows[rows.model_id.str.startswith("zoo:arch/") & (rows.result != "PASS")]
    failed = failed[failed.result != "EXCLUDED"]
    return sorted(m.removeprefix("zoo:arch/") for m in failed.model_id)


def main() -> int:
    from pytest_neuronsupport.options import default_cache

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("classes", nargs="*", help="tiny architectures (class names)")
    parser.add_argument("--results", type=Path, help="check the failed rows of this dataset")
    parser.add_argument("--cache", type=Path, default=default_cache(), help="the zoo's cache")
    parser.add_argument("--json", type=Path, help="also write the verdicts here")
    args = parser.parse_args()
    classes = list(args.classes) + (failed_classes(args.results) if args.results else [])
    found = []
    for cls in classes:
        verdict = check(cls, args.cache)
        found.append(verdict)
        error = str(verdict.get("error", ""))[:150]
        print(f"{cls:<48} {verdict['kind']:<24} {verdict['verdict']:<18} {error}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
