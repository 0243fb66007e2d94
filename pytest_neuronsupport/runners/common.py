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
    """Announce a phase (rank 0 only, on several cores)."""
    if os.environ.get("RANK", "0") == "0":
        print(f"{PHASE_MARK} {name}", flush=True)


# --- the device interface, run side ------------------------------------------------------


class CpuOps:
    """The CPU as a device: peak memory is the process's peak resident set; a rank of a
    several-core run is pinned to its share of the run's CPUs."""

    name = "cpu"
    #: torch.distributed backend of the ranks of a several-core run.
    dist_backend = "gloo"

    def setup(self) -> None:
        pass

    def rank_env(self, rank: int, world: int) -> dict[str, str]:
        """Environment of rank ``rank`` before it starts (its runtime reads it at start)."""
        return {}

    def setup_rank(self, rank: int, world: int) -> None:
        if world == 1:
            return
        allowed = sorted(os.sched_getaffinity(0))
        share = max(1, len(allowed) // world)
        mine = allowed[rank * share : (rank + 1) * share] or allowed
        os.sched_setaffinity(0, mine)
        torch.set_num_threads(len(mine))
        init_process_group(self.dist_backend)

    def rank_device(self, rank: int, world: int) -> str:
        """Where a rank's inputs go."""
        return self.name

    def synchronize(self) -> None:
        pass

    def reset_peak(self) -> None:
        pass

    def peak_gb(self) -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


class CudaOps(CpuOps):
    name = "cuda"

    dist_backend = "nccl"

    def setup(self) -> None:
        torch.cuda.init()  # type: ignore[no-untyped-call]

    def setup_rank(self, rank: int, world: int) -> None:
        if world > 1:
            torch.cuda.set_device(rank)
            init_process_group(self.dist_backend)

    def rank_device(self, rank: int, world: int) -> str:
        return f"cuda:{rank}" if world > 1 else "cuda"

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats()

    def peak_gb(self) -> float:
        return float(torch.cuda.max_memory_allocated()) / 1e9


class NeuronOps(CpuOps):
    """TorchNeuron: importing torch_neuronx registers the ``neuron`` device and backend."""

    name = "neuron"
    dist_backend = "neuron"

    def setup(self) -> None:
        importlib.import_module("torch_neuronx")

    def rank_env(self, rank: int, world: int) -> dict[str, str]:
        """One logical core a rank: the rank-th of the run's ``NEURON_RT_VISIBLE_CORES``."""
        cores = expand_ranges(os.environ.get("NEURON_RT_VISIBLE_CORES", ""))
        return {"NEURON_RT_VISIBLE_CORES": str(cores[rank])} if len(cores) >= world else {}

    def setup_rank(self, rank: int, world: int) -> None:
        if world > 1:
            init_process_group(self.dist_backend)

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


def expand_ranges(text: str) -> list[int]:
    """``"0-3"`` → ``[0, 1, 2, 3]``; ``"1,3"`` → ``[1, 3]``."""
    cores: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    return cores


def init_process_group(backend: str) -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend=backend)


# --- several cores: one rank per core -------------------------------------------------------

#: How long the other ranks may take to finish once one rank has failed.
RANK_GRACE_S = 5.0
#: Where a rank other than 0 writes the phase it failed (for the launcher to report).
RANK_VERDICT_ENV = "NEURONSUPPORT_RANK_VERDICT"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no orphan ranks)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def describe_exit(returncode: int) -> str:
    import signal

    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def launch_ranks(params: dict[str, Any], argv: list[str]) -> int:
    """Run this script once per core as ``torch.distributed`` ranks, and wait for them.

    Rank 0 writes the verdict. If another rank fails first (a crash, an error), the others get
    a few seconds, then are killed, and the verdict is FAIL(other) naming the rank.
    """
    import subprocess

    world = int(params["cores"])
    ops = DEVICE_OPS[params["device"]]()
    script = os.path.abspath(sys.argv[0])
    base = {k: v for k, v in os.environ.items() if k != "NEURONSUPPORT_RESULT"}
    path = result_path(argv)
    rank_verdicts = [f"{path or script}.rank{rank}.json" for rank in range(world)]
    base.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
    )
    ranks = []
    for rank in range(world):
        env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank), **ops.rank_env(rank, world)}
        env[RANK_VERDICT_ENV] = rank_verdicts[rank]
        args = [sys.executable, script, *(argv if rank == 0 else [])]
        ranks.append(subprocess.Popen(args, env=env, preexec_fn=die_with_parent))
    first_failure: tuple[int, int] | None = None
    deadline = None
    while any(p.poll() is None for p in ranks):
        for rank, proc in enumerate(ranks):
            if first_failure is None and proc.returncode not in (None, 0):
                first_failure = (rank, proc.returncode)
                deadline = time.monotonic() + RANK_GRACE_S
        if deadline is not None and time.monotonic() > deadline:
            for proc in ranks:
                if proc.poll() is None:
                    proc.kill()
        time.sleep(0.05)
    for proc in ranks:
        proc.wait()
    if first_failure is None:
        first_failure = next(
            ((r, p.returncode) for r, p in enumerate(ranks) if p.returncode != 0), None
        )
    if first_failure is not None and (
        first_failure[0] != 0 or not path or not os.path.exists(path)
    ):
        rank, code = first_failure
        verdict = {
            "result": "FAIL(other)",
            "error": f"rank {rank} of {world} {describe_exit(code)}",
        }
        try:  # a rank that failed a phase (load, gen) said which
            with open(rank_verdicts[rank], encoding="utf-8") as f:
                said = json.load(f)
            verdict = {
                "result": said["result"],
                "error": f"rank {rank} of {world}: {said['error']}",
            }
        except (OSError, ValueError, KeyError):
            pass
        verdict.update(notes=first_line(verdict["error"]), runner=params["runner"])
        write_verdict(verdict, path)
    for name in rank_verdicts:
        if os.path.exists(name):
            os.unlink(name)
    return 0


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


def user_message(tokenizer: Any, text: str, without_template: str = "") -> dict[str, Any]:
    """``text`` as a user message through the tokenizer's chat template, if it has one (else
    the plain text followed by ``without_template``): input ids and attention mask."""
    if getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}],
            add_generation_prompt=True,
            return_dict=True,
            return_tensors="pt",
        )
    else:
        encoded = tokenizer(text + without_template, return_tensors="pt")
    return {k: encoded[k] for k in ("input_ids", "attention_mask") if k in encoded}


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


def main(params: dict[str, Any], run: Callable[[dict[str, Any]], dict[str, Any] | None]) -> int:
    """Run one model and write its verdict (``--result PATH``); exit 0 whenever it was classified.

    On several cores this process launches the ranks (:func:`launch_ranks`), each of which
    comes back here with ``RANK`` set; rank 0 writes the verdict. An exception that escapes
    the runner is a crash: the process exits non-zero and the caller classifies it FAIL(other)
    from the exit status and the output's tail.
    """
    argv = sys.argv[1:]
    if int(params.get("cores", 1)) > 1 and "RANK" not in os.environ:
        return launch_ranks(params, argv)
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    torch.manual_seed(0)
    rank = os.environ.get("RANK", "0")
    try:
        verdict = run(params)
    except RunFailure as failure:
        if rank != "0":  # a rank's failure is its launcher's to report
            with open(os.environ[RANK_VERDICT_ENV], "w", encoding="utf-8") as f:
                json.dump({"result": failure.result, "error": failure.error}, f)
            return 3
        verdict = {"result": failure.result, "error": failure.error}
    if verdict is None:  # a rank other than 0: rank 0 reports
        return 0
    verdict.setdefault("notes", first_line(verdict.get("error") or ""))
    verdict.setdefault("runner", params["runner"])
    write_verdict(verdict, result_path(argv))
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
