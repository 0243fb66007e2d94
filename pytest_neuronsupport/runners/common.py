"""What every runner shares inside ``run.py``: device operations, loading, compiling, the verdict.

Standalone: imports only the standard library, torch and transformers, because its text is
pasted into every ``run.py`` after :mod:`pytest_neuronsupport.compare`. Lines between
``# script: drop-begin`` and ``# script: drop-end`` exist only for the package form (imports of
sibling modules) and are left out of the script.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

#: Printed before each phase, so a run that dies can be placed: load, gen, forward, reference.
PHASE_MARK = "[neuronsupport] phase:"
#: Printed before the verdict's JSON on the last line of a run's output.
VERDICT_MARK = "[neuronsupport] verdict:"

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class RunFailure(Exception):
    """A classified failure: ``result`` is FAIL(load), FAIL(gen), FAIL(forward)..."""

    def __init__(self, result: str, error: BaseException) -> None:
        self.result = result
        self.error = f"{type(error).__name__}: {error}"
        super().__init__(f"{result} {self.error}")


def phase(name: str) -> None:
    print(f"{PHASE_MARK} {name}", flush=True)


# --- the device interface, run side ------------------------------------------------------


class CpuOps:
    """The CPU as a device: peak memory is the process's peak resident set."""

    name = "cpu"

    def setup(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def reset_peak(self) -> None:
        pass

    def peak_gb(self) -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


class CudaOps(CpuOps):
    name = "cuda"

    def setup(self) -> None:
        torch.cuda.init()  # type: ignore[no-untyped-call]

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats()

    def peak_gb(self) -> float:
        return float(torch.cuda.max_memory_allocated()) / 1e9


class NeuronOps(CpuOps):
    """TorchNeuron: importing torch_neuronx registers the ``neuron`` device and backend."""

    name = "neuron"

    def setup(self) -> None:
        importlib.import_module("torch_neuronx")

    def synchronize(self) -> None:
        torch.neuron.synchronize()  # type: ignore[attr-defined]

    def reset_peak(self) -> None:
        torch.neuron.reset_peak_memory_stats()  # type: ignore[attr-defined]

    def peak_gb(self) -> float:
        return float(torch.neuron.max_memory_allocated()) / 1e9  # type: ignore[attr-defined]


DEVICE_OPS: dict[str, type[CpuOps]] = {"cpu": CpuOps, "cuda": CudaOps, "neuron": NeuronOps}


def device_ops(name: str) -> CpuOps:
    ops = DEVICE_OPS[name]()
    ops.setup()
    return ops


# --- loading and compiling ----------------------------------------------------------------


def resolve_backend(name: str) -> Any:
    """A registered torch.compile backend name, or ``package.module:callable`` imported here."""
    if ":" not in name:
        return name
    module_name, _, attr = name.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def compile_model(model: Any, params: dict[str, Any]) -> Any:
    """Compile the model's forward with the chosen backend, in place, and return the model."""
    backend = resolve_backend(params["backend"])
    model.forward = torch.compile(model.forward, backend=backend, fullgraph=params["fullgraph"])
    return model


def load_pretrained(cls: Any, params: dict[str, Any], dtype: str, device: str) -> Any:
    """``cls.from_pretrained`` of the run's checkpoint (never with remote code), on ``device``."""
    model = cls.from_pretrained(
        params["checkpoint"],
        revision=params.get("revision"),
        dtype=DTYPES[dtype],
        trust_remote_code=False,
    )
    return model.to(device).eval()


def load_tokenizer(params: dict[str, Any]) -> Any:
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        params["checkpoint"], revision=params.get("revision"), trust_remote_code=False
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer


def head_class(config: Any, default: Any) -> Any:
    """The transformers class the checkpoint declares in ``architectures``, else ``default``.

    Only a class that transformers itself defines is used (never remote code).
    """
    names = getattr(config, "architectures", None) or []
    name = names[0] if names else ""
    if name.isidentifier():
        cls = getattr(transformers, name, None)
        if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
            return cls
    return default


def first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --- the CPU reference, cached ---------------------------------------------------------------

#: A folder where CPU references are kept between runs (set by the plugin; unset, every run
#: computes its reference afresh).
REFERENCE_CACHE_ENV = "NEURONSUPPORT_REFERENCE_CACHE"
REFERENCE_FORMAT = 1


def _file_digest(path: Path) -> str:
    """A file's content hash; a Hub cache entry (a link to a blob named by its hash) is free."""
    target = path.resolve()
    if path.is_symlink() and target.parent.name == "blobs":
        return target.name
    digest = hashlib.sha256()
    with target.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checkpoint_fingerprint(params: dict[str, Any]) -> dict[str, str]:
    """Hashes of every file of the checkpoint (a local folder, or the Hub's cached snapshot)."""
    folder = Path(params["checkpoint"])
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        folder = Path(
            snapshot_download(
                params["checkpoint"], revision=params.get("revision"), local_files_only=True
            )
        )
    return {
        str(p.relative_to(folder)): _file_digest(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    }


def reference_key(params: dict[str, Any], inputs: dict[str, Any]) -> str:
    """Everything that changes a CPU reference: checkpoint files, runner, inputs, versions."""
    material = {
        "format": REFERENCE_FORMAT,
        "checkpoint": checkpoint_fingerprint(params),
        "runner": params["runner"],
        "inputs": inputs,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def cached_reference(
    params: dict[str, Any], inputs: dict[str, Any], compute: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """The CPU reference from the cache, else computed (and stored); and whether it was cached."""
    folder = os.environ.get(REFERENCE_CACHE_ENV)
    if not folder:
        return compute(), False
    path = Path(folder) / f"{reference_key(params, inputs)}.pt"
    if path.exists():
        try:
            return torch.load(path, weights_only=True), True
        except Exception:
            path.unlink(missing_ok=True)  # a damaged entry is recomputed
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(value, tmp)
    os.replace(tmp, path)
    return value, False


# --- the verdict ----------------------------------------------------------------------------


def check_fields(check: Any) -> dict[str, Any]:
    """Row fields from a :class:`Check` (compare.py)."""
    return {
        "cpu_match": check.cpu_match,
        "first_divergence": check.first_divergence,
        "divergence_margin": check.margin,
        "near_tie_tolerance": check.tolerance,
        "check": check.details,
    }


def write_verdict(verdict: dict[str, Any], path: str | None) -> None:
    text = json.dumps(verdict, sort_keys=True, default=str)
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    print(f"{VERDICT_MARK} {text}", flush=True)


def result_path(argv: list[str]) -> str | None:
    if "--result" in argv:
        index = argv.index("--result")
        if index + 1 < len(argv):
            return argv[index + 1]
    return os.environ.get("NEURONSUPPORT_RESULT")


def main(params: dict[str, Any], run: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """Run one model and write its verdict (``--result PATH``); exit 0 whenever it was classified.

    An exception that escapes the runner is a crash: the process exits non-zero and the caller
    classifies it FAIL(other) from the exit status and the output's tail.
    """
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    torch.manual_seed(0)
    try:
        verdict = run(params)
    except RunFailure as failure:
        verdict = {"result": failure.result, "error": failure.error}
    verdict.setdefault("notes", first_line(verdict.get("error") or ""))
    verdict.setdefault("runner", params["runner"])
    write_verdict(verdict, result_path(sys.argv[1:]))
    print(f"RESULT: {verdict['result']}  {verdict.get('cpu_match') or ''}", flush=True)
    return 0


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return round(time.perf_counter() - self.start, 3)


def guarded(result: str, fn: Callable[[], Any]) -> Any:
    """Call ``fn``; an exception becomes :class:`RunFailure` with ``result``.

    Running out of memory is a crash of the run (FAIL(other)), not a failure of the phase.
    """
    try:
        return fn()
    except (MemoryError, torch.OutOfMemoryError) as exc:
        raise RunFailure("FAIL(other)", exc) from exc
    except Exception as exc:
        raise RunFailure(result, exc) from exc
