"""Training: does the model train, and does a batch of this size fit in the device's memory?

One training step is forward, loss, backward and an optimizer step (AdamW), in the run's
precision (autocast in bf16 or fp16 over fp32 weights on accelerators, fp32 on the CPU), on a
fixed batch of language-modelling data: a short text shipped in this script, tokenized by the
model's own tokenizer and cut into samples of ``seq_len`` tokens. The loss is the causal LM
loss for decoders, the masked-LM loss for encoders with an MLM head, the head's own loss for
classification heads.

``PARAMS["trial"]`` says what this run is:

* ``"check"``: the same step three times: on the CPU in float64 (the exact reference, with the
  model's casts to float32 kept in float64: :class:`Float64Kept`), eagerly
  on the CPU in the run's precision (what that precision alone costs), compiled on the device.
  The loss, the gradient norm and the parameter update are each held to float64 by the output
  check's rule (``compare.held``, PyTorch's accuracy checker's, ``torch._dynamo.utils.same``:
  ``res_error <= multiplier * ref_error + tol / 10``): the device's error ``|x - x64| / max(1,
  |x64|)`` (norms for the update) at most ``ACCURACY_MULTIPLE`` times eager's plus the floor
  (16 eps of the dtype for the loss and the norm, one number each; one eps for the update),
  for all three (PASS), else FAIL(output); a step that raises is FAIL(train). A tolerance from
  measured noise, not from the dtype alone. The first AdamW step is close to
  ``lr * sign(grad)``, so a near-zero gradient that flips sign under any reordering moves its
  parameter by ``2 * lr``: eager's own update error is large, and so is the allowed one. An
  eager step that is not finite where float64's is measures no noise: not checked (PASS, the
  notes say so), as an output check that cannot run.
* ``"search"``: a few steps at ``PARAMS["batch"]``, eager (``mode`` native) or compiled, under
  the memory cap: ``fits`` is true, or false with ``out_of_memory`` when the device (or the
  CPU's address-space limit) ran out of memory; any other error is FAIL(train).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import importlib
import time
from typing import Any

import torch
import torch._dynamo
import transformers
from torch.overrides import TorchFunctionMode
from transformers.loss.loss_utils import LOSS_MAPPING

from pytest_neuronsupport.runners.lib.backend import compile_imports
from pytest_neuronsupport.runners.lib.compare import ACCURACY_FLOOR_EPS, ACCURACY_MULTIPLE, held
from pytest_neuronsupport.runners.lib.models import (
    RunFailure,
    compile_forward,
    load_tokenizer,
    step,
    torch_dtype,
)
from pytest_neuronsupport.runners.lib.protocol import Result, first_line, phase

#: The training text: plain English, cycled to fill every sample.
TEXT = (
    "The future of AI is a question that people ask at dinner tables and in classrooms. "
    "My name is Wolfgang and I live in Berlin, a large city with many parks and museums. "
    "A language model reads a sequence of tokens and predicts the next token, one step at a "
    "time. A classifier reads a sentence and decides whether it is positive or negative. "
    "In the spring the trees in the park turn green again and people sit outside in the cafes. "
    "A good test is small, fast and honest: it checks one thing and fails for one reason."
)
#: Loss heads by the suffix of the checkpoint's architecture: (objective, auto class).
OBJECTIVES = (
    ("ForCausalLM", "causal-lm", "AutoModelForCausalLM"),
    ("LMHeadModel", "causal-lm", "AutoModelForCausalLM"),
    ("ForMaskedLM", "masked-lm", "AutoModelForMaskedLM"),
    ("ForSequenceClassification", "classification", "AutoModelForSequenceClassification"),
)
#: What an out-of-memory says, whoever raises it (torch's CPU allocator, CUDA, the runtime):
#: the Neuron runtime's ``Failed to allocate 4.000GB (alignment: none, usage: tensors) on ND
#: 0:NC 4`` (AWS Neuron docs, "Neuron Device Memory", neuron-runtime/explore/device-memory.rst,
#: its out-of-memory section) and neuronx-cc's NCC_EOOM001/NCC_EOOM002 "The combined memory
#: needed for the model tensors exceeds the high-bandwidth memory limit" (compiler/error-codes/
#: EOOM001.rst, EOOM002.rst: a graph that cannot fit the core's HBM does not compile).
OUT_OF_MEMORY = (
    "out of memory",
    "defaultcpuallocator",
    "can't allocate memory",
    "bad_alloc",
    "resource_exhausted",
    "memoryerror",
    "failed to allocate",
    "high-bandwidth memory limit",
    "ncc_eoom",
)
LEARNING_RATE = 1e-3
#: What a compiled trial imports before its cap, beside what compiling under its backend does
#: (``backend.compile_imports``): the fork server has imported them (``pipeline.isolate``), and
#: ``python3 train.py`` in a fresh interpreter must not count them under its cap when a forked
#: run does not.
COMPILE_IMPORTS = ("transformers.generation.utils", "transformers.processing_utils")


def train(params: dict[str, Any], ops: Any) -> dict[str, Any]:
    """The trial ``PARAMS`` asks for: the correctness check, or one batch of the search."""
    # no progress bars: a forked run inherits its parent's choice, and a bar starts tqdm's
    # monitor thread, whose stack is address space the cap would count in one run, not another
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    with step("load", Result.FAIL_LOAD):
        tokenizer = load_tokenizer(params)
        config = transformers.AutoConfig.from_pretrained(
            params["checkpoint"], revision=params.get("revision"), trust_remote_code=False
        )
        objective, auto_class = objective_of(config)
        # what loading and compiling import, imported before the memory cap counts
        auto_class._model_mapping[type(config)]
        if params["trial"] == "search" and params["mode"] == "compiled":
            backend = str(params.get("backend_name", params["backend"]))
            for module in (*compile_imports(backend), *COMPILE_IMPORTS):
                importlib.import_module(module)
            torch._dynamo.lookup_backend(params["backend"])
    if params["trial"] == "check":
        return check(params, ops, tokenizer, auto_class, objective)
    return search_trial(params, ops, tokenizer, auto_class, objective)


def objective_of(config: Any) -> tuple[str, Any]:
    """The loss the checkpoint trains with, and the auto class that loads it with its head."""
    for architecture in config.architectures or ():
        for suffix, objective, auto_class in OBJECTIVES:
            if architecture.endswith(suffix):
                return objective, getattr(transformers, auto_class)
    raise ValueError(f"no training objective for the architectures {config.architectures}")


def check(
    params: dict[str, Any], ops: Any, tokenizer: Any, auto_class: Any, objective: str
) -> dict[str, Any]:
    """The same step in float64 and eagerly in the run's precision on the CPU, and compiled on
    the device: the device's errors against float64 held to eager's (see the module)."""
    batch = make_batch(tokenizer, objective, params["check_batch"], params["seq_len"])
    amp = autocast_dtype(params)
    sides = {}
    for side, dtype, device in (
        ("fp64", torch.float64, "cpu"),
        ("eager", torch.float32, "cpu"),
        ("device", torch.float32, params["device"]),
    ):
        with step("reference" if device == "cpu" else "load", Result.FAIL_LOAD):
            model = load_model(auto_class, params, device, dtype=dtype)
        with step("train", Result.FAIL_TRAIN):
            if side == "device":
                compile_forward(params, model)
            with Float64Kept() if side == "fp64" else contextlib.nullcontext():
                sides[side] = one_step(model, batch, device, None if side == "fp64" else amp)
        model = None
        gc.collect()
    exact, eager, got = sides["fp64"], sides["eager"], sides["device"]
    as64 = functools.partial(torch.as_tensor, dtype=torch.float64)  # a float: not through fp32
    judged = {
        name: held(params["dtype"], as64(got[key]), as64(exact[key]), as64(eager[key]), False)
        for name, key in (("loss", "loss"), ("grad_norm", "grad_norm"), ("params", "delta"))
    }
    if unmeasured := [name for name, (ok, _) in judged.items() if ok is None]:
        notes = f"not checked: the eager CPU {params['dtype']} step's {', '.join(unmeasured)}"
        return {"result": Result.PASS, "notes": f"{notes} is not finite where float64's is"}
    errors = {name: found["error_device"] for name, (_, found) in judged.items()}
    eager_errors = {name: found["error_eager"] for name, (_, found) in judged.items()}
    tolerances = {name: found["tolerance"] for name, (_, found) in judged.items()}
    failed = [name for name, (ok, _) in judged.items() if not ok]
    numbers = {
        "objective": objective,
        "loss_ref": exact["loss"],
        "loss_eager": eager["loss"],
        "loss": got["loss"],
        "grad_norm_ref": exact["grad_norm"],
        "grad_norm_eager": eager["grad_norm"],
        "grad_norm": got["grad_norm"],
        "param_error": errors["params"],
        "tolerance": tolerances["params"],
        "errors": errors,
        "eager_errors": eager_errors,
        "tolerances": tolerances,
        "rule": f"each error |x - x64| / max(1, |x64|) (norms for the update) <= "
        f"{ACCURACY_MULTIPLE:g} x the eager CPU {params['dtype']} step's + eps x max(1, "
        f"{ACCURACY_FLOOR_EPS:g} / sqrt(n)) over its n numbers",
    }
    if failed:
        beyond = ", ".join(f"{n} {errors[n]:.3g} > {tolerances[n]:.3g}" for n in failed)
        notes = f"differs from the CPU float64 step beyond eager {params['dtype']}'s: {beyond}"
        return {"result": Result.FAIL_OUTPUT, "notes": notes, **numbers}
    notes = f"within the noise of the eager CPU {params['dtype']} step against float64"
    return {"result": Result.PASS, "notes": notes, **numbers}


def search_trial(
    params: dict[str, Any], ops: Any, tokenizer: Any, auto_class: Any, objective: str
) -> dict[str, Any]:
    """A few training steps at ``batch`` under the memory cap: do they fit?

    An error that says it is out of memory means they do not. Another error under a cap is
    told apart by running the same steps again in this process with the cap lifted: if they
    then pass, the cap caused it (address space a library could not map: oneDNN's "could not
    create a primitive", a thread that could not start) and the batch does not fit; if they
    fail again, the error is real: FAIL(train)."""
    batch = make_batch(tokenizer, objective, params["batch"], params["seq_len"])
    trial = {"objective": objective, "batch": params["batch"], "mode": params["mode"]}
    ops.limit_memory(params["memory_gb"])
    phase("train")
    try:
        timings = train_steps(params, ops, auto_class, batch)
    except Exception as exc:
        ops.limit_memory(None)
        why = first_line(f"{type(exc).__name__}: {exc}")
        if not out_of_memory(exc):
            if params["memory_gb"] is None:
                raise RunFailure(Result.FAIL_TRAIN, exc) from exc
            try:
                train_steps(params, ops, auto_class, batch)
            except Exception:
                raise RunFailure(Result.FAIL_TRAIN, exc) from exc
            why = f"{why} (under the cap only: the same steps pass without it)"
        return {"result": Result.PASS, "fits": False, "out_of_memory": why, **trial}
    peak_gb = ops.peak_gb()
    ops.limit_memory(None)
    samples = params["batch"] * params["steps"]
    return {
        "result": Result.PASS,
        "fits": True,
        "samples_per_s": samples / max(timings["steps_s"], 1e-9),
        "peak_gb": peak_gb,
        **timings,
        **trial,
    }


def train_steps(params: dict[str, Any], ops: Any, auto_class: Any, batch: Any) -> dict[str, float]:
    """Load, compile (mode ``compiled``), one warm-up step, ``steps`` timed steps: the seconds
    of loading, of the first step (with compiling) and of the timed steps."""
    started = time.perf_counter()
    model = load_model(auto_class, params, params["device"], train_mode=True)
    if params["mode"] == "compiled":
        compile_forward(params, model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    ops.reset_peak()
    loaded = time.perf_counter()
    one_step(model, batch, params["device"], autocast_dtype(params), optimizer)
    ops.synchronize()
    warm = time.perf_counter()
    for _ in range(params["steps"]):
        one_step(model, batch, params["device"], autocast_dtype(params), optimizer)
    ops.synchronize()
    done = time.perf_counter()
    ops.held_to_cap()  # where the cap is not the allocator's own, its peak against it
    return {"load_s": loaded - started, "first_step_s": warm - loaded, "steps_s": done - warm}


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from, says the device (or the CPU's memory
    limit) ran out of memory (dynamo wraps a ``MemoryError`` met while tracing in its own)."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
            return True
        if isinstance(error, OSError) and error.errno == errno.ENOMEM:
            return True
        text = str(error).lower()
        if any(mark in text for mark in OUT_OF_MEMORY):
            return True
        error = error.__cause__ or error.__context__
    return False


def autocast_dtype(params: dict[str, Any]) -> Any:
    """Mixed precision's dtype (None: fp32, no autocast)."""
    return None if params["dtype"] == "float32" else torch_dtype(params["dtype"])


def load_model(
    auto_class: Any,
    params: dict[str, Any],
    device: str,
    train_mode: bool = False,
    dtype: Any = torch.float32,
) -> Any:
    """The model in ``dtype`` (fp32; the check's reference: float64) on ``device``; in eval mode
    unless asked (no dropout: the check's steps compute the same function).

    Its loss named after the auto class that loads it (``ForCausalLM``...) where transformers
    cannot tell it from the class's name (``GPT2LMHeadModel``): it would fall back to that same
    loss, but warn from inside every compiled step, a graph break of the harness's choice of
    objective (under ``fullgraph=True``, the step's failure), not of the compiler."""
    model = auto_class.from_pretrained(
        params["checkpoint"],
        revision=params.get("revision"),
        dtype=dtype,
        trust_remote_code=False,
    ).to(device)
    if getattr(model, "loss_type", None) not in LOSS_MAPPING:
        model.loss_type = auto_class.__name__.removeprefix("AutoModel")
    return model.train() if train_mode else model.eval()


def make_batch(tokenizer: Any, objective: str, size: int, seq_len: int) -> dict[str, Any]:
    """``size`` samples of ``seq_len`` tokens of :data:`TEXT`, each starting further on, with
    the labels of ``objective`` (the LM's own tokens; every 7th token masked for masked-LM; the
    sample's index modulo 2 for a classifier)."""
    tokens = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    rows = [[tokens[(7 * i + j) % len(tokens)] for j in range(seq_len)] for i in range(size)]
    input_ids = torch.tensor(rows, dtype=torch.long)
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    if objective == "causal-lm":
        batch["labels"] = input_ids.clone()
    elif objective == "masked-lm":
        masked = (torch.arange(seq_len) % 7 == 3).expand(size, seq_len)
        batch["labels"] = torch.where(masked, input_ids, torch.full_like(input_ids, -100))
        batch["input_ids"] = torch.where(
            masked, torch.full_like(input_ids, tokenizer.mask_token_id), input_ids
        )
    else:
        batch["labels"] = torch.arange(size) % 2
    return batch


def one_step(
    model: Any, batch: dict[str, Any], device: str, amp: Any, optimizer: Any = None
) -> dict[str, Any]:
    """Forward, loss, backward, optimizer step: the loss, the gradient norm and (without an
    ``optimizer`` given: a fresh AdamW) the parameters' update."""
    before = None
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
        before = flat_parameters(model)
    inputs = {k: v.to(device) for k, v in batch.items()}
    with torch.autocast(device_type=device, dtype=amp or torch.float32, enabled=amp is not None):
        loss = model(**inputs).loss
    loss.backward()
    grads = [p.grad.detach().double().norm() for p in model.parameters() if p.grad is not None]
    grad_norm = torch.stack(grads).norm()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    done = {"loss": float(loss.detach().double()), "grad_norm": float(grad_norm)}
    if before is not None:
        done["delta"] = flat_parameters(model) - before
    return done


class Float64Kept(TorchFunctionMode):
    """float64 stays float64: a model's casts to float32 (transformers' losses upcast the
    logits with ``logits.float()``, norms cast with ``.to(torch.float32)``) would otherwise
    round the float64 reference step to float32 where it matters most."""

    def __torch_function__(
        self, func: Any, types: Any, args: Any = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and first.dtype == torch.float64:
            if func is torch.Tensor.float:
                return first
            if func in (torch.Tensor.to, torch.Tensor.type):  # float32 given: float64 kept
                kept = {torch.float32: torch.float64}.get
                args = [first, *(kept(a, a) for a in args[1:])]
                kwargs = {k: kept(v, v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def flat_parameters(model: Any) -> Any:
    """Every parameter, on the CPU in float64, as one vector."""
    return torch.cat([p.detach().cpu().double().reshape(-1) for p in model.parameters()])
