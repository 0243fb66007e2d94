"""Test-only torch.compile backends that misbehave on purpose, one way each.

They stand in for a broken compiler, which we cannot have for real here. The plugin tests copy
this file into each pytester folder and sweep with ``--neuron-backend
backends_for_tests:<name>``; run.py imports it from its working directory, exactly as it would a
compiler team's own backend.
"""

from __future__ import annotations

import copy
import operator
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def refusing_to_compile_backend_for_tests(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    """Raises at compile time, as a compiler that rejects the graph."""
    raise RuntimeError("test-only backend: refused to compile this graph")


def disk_full_backend_for_tests(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    """Raises the ``OSError`` of a full disk at compile time, as a compiler writing its cache
    would (no test can fill the machine's disk)."""
    import errno

    raise OSError(errno.ENOSPC, "No space left on device", "/cache/compiler/graph.neff")


def raising_at_run_time_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Compiles, then raises when the compiled graph runs, as a runtime error on a device."""

    def run(*args: Any) -> Any:
        raise RuntimeError("test-only backend: the compiled graph failed at run time")

    return run


def perturbing_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Runs the graph, then adds large deterministic noise to every floating-point output, as
    a compiler that miscompiles: the run returns, but its numbers are wrong."""

    def perturb(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            generator = torch.Generator().manual_seed(1234)
            noise = torch.randn(value.shape, generator=generator, dtype=torch.float32)
            return value + (100.0 * noise).to(value.device, value.dtype)
        if isinstance(value, (list, tuple)):
            return type(value)(perturb(v) for v in value)
        return value

    def run(*args: Any) -> Any:
        return perturb(gm.forward(*args))

    return run


def crashing_backend_for_tests(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    """The compiled graph takes the process down with SIGSEGV, as a runtime crash."""

    def run(*args: Any) -> Any:
        os.kill(os.getpid(), signal.SIGSEGV)

    return run


def hanging_backend_for_tests(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    """The compiled graph never returns, as a hung device."""

    def run(*args: Any) -> Any:
        while True:
            time.sleep(60)

    return run


def _misbehave(how: str) -> None:
    if how == "raise":
        raise RuntimeError("test-only backend: refuses this model")
    if how == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif how == "abort":
        os.abort()
    elif how == "hang":
        while True:
            time.sleep(60)
    elif how == "memory":
        hog = bytearray(4 * 10**9)  # touched, so resident
        for i in range(0, len(hog), 4096):
            hog[i] = 1
        time.sleep(60)
    elif how == "cpu-run-fails":  # the run goes on; its CPU reference will not load
        _fail_the_cpu_reference()
    elif how == "meet":
        _meet()
    elif how == "meet-in-worker":  # only a run of the same xdist worker counts
        _meet(os.environ.get("PYTEST_XDIST_WORKER", "no worker"))
    elif how == "kill-worker":
        # the run's parent is the fork server, whose parent is the xdist worker
        with open(f"/proc/{os.getppid()}/stat", encoding="ascii") as f:
            worker = int(f.read().rsplit(")", 1)[1].split()[1])
        os.kill(worker, signal.SIGKILL)
        time.sleep(60)


#: ``meet``: the folder the runs that are to meet touch a file in, and how long each waits.
MEET_ENV, MEET_WITHIN_ENV = "NEURONSUPPORT_TEST_MEET", "NEURONSUPPORT_TEST_MEET_WITHIN_S"


def _meet(apart: str = "") -> None:
    """Go on only once another run has come here too (both at once: two lanes, or two
    workers), else raise: a run alone waits ``$NEURONSUPPORT_TEST_MEET_WITHIN_S`` (300 s).
    ``apart``: runs meet only those that came with the same (the same xdist worker's)."""
    folder = Path(os.environ[MEET_ENV]) / apart
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(os.getpid())).touch()
    deadline = time.monotonic() + float(os.environ.get(MEET_WITHIN_ENV, "300"))
    while len(list(folder.iterdir())) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("test-only backend: no other run came while this one waited")
        time.sleep(0.05)


def misbehaving_by_model_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Misbehaves as ``NEURONSUPPORT_TEST_MISBEHAVIOUR`` says for the model being run
    (``zoo:llama=segfault,zoo:gpt2=abort,...``: raise, segfault, abort, hang, memory, meet
    (:func:`_meet`), meet-in-worker (the same, with runs of one xdist worker), kill-worker,
    cpu-run-fails (:func:`cpu_run_fails_backend_for_tests`); ``zoo:x@1=segfault`` for rank 1
    of a several-core run only), and runs the graph faithfully for every other model. One
    sweep can then meet every kind of crash. The model is read from run.py's PARAMS (the
    script is ``__main__``)."""
    import sys

    plan = dict(
        item.split("=", 1)
        for item in os.environ.get("NEURONSUPPORT_TEST_MISBEHAVIOUR", "").split(",")
        if item
    )
    model = getattr(sys.modules["__main__"], "PARAMS", {}).get("model_id", "")
    how = plan.get(f"{model}@{os.environ['RANK']}" if "RANK" in os.environ else model)
    if how:
        print(f"test-only backend: about to {how}", flush=True)
        _misbehave(how)
    return gm.forward


def needs_package_backend_for_tests(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    """Needs the package ``nsdemo`` (which tests build as a wheel and list as a model's
    ``packages``): raises when the run cannot import it, else runs the graph faithfully."""
    try:
        import nsdemo  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"test-only backend: the run cannot import nsdemo ({exc})") from exc
    return gm.forward


def _aot_backend(backward: Callable[..., Any]) -> Any:
    """A backend compiling forward faithfully and backward with ``backward(gm)``."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def forward_compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return make_boxed_func(gm.forward)

    def backward_compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return make_boxed_func(backward(gm))

    return aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)


def _raising_backward(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        raise RuntimeError("test-only backend: the backward graph failed at run time")

    return run


def _scaled_backward(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        outputs = gm.forward(*args)
        return [
            out * 1.01 if isinstance(out, torch.Tensor) and out.is_floating_point() else out
            for out in outputs
        ]

    return run


#: Runs forward faithfully; the backward raises, as a compiler whose backward breaks.
backward_breaking_backend_for_tests = _aot_backend(_raising_backward)
#: Runs forward faithfully; every gradient comes out 1% too large, as a miscompiled backward.
gradient_perturbing_backend_for_tests = _aot_backend(_scaled_backward)


def _has_linear(gm: torch.fx.GraphModule) -> bool:
    linear = (torch._C._nn.linear, torch.nn.functional.linear, torch.ops.aten.linear.default)
    return any(node.op == "call_function" and node.target in linear for node in gm.graph.nodes)


def fails_on_linear_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Rejects every graph that holds a linear op at compile time (every zoo model has one), as
    a compiler without a lowering for one op; runs any other graph faithfully."""
    if _has_linear(gm):
        raise NotImplementedError("test backend: no lowering for linear")
    return gm.forward


def corrupts_silu_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Computes silu as sigmoid (a copy of the graph, rewritten), as a compiler that miscompiles
    one op: llama-like models run, with wrong numbers. Any other graph runs faithfully."""
    silu = (torch.nn.functional.silu, torch.ops.aten.silu.default)
    copied = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    for node in copied.graph.nodes:
        if node.op == "call_function" and node.target in silu:
            node.target, node.args, node.kwargs = torch.sigmoid, node.args[:1], {}
    copied.recompile()
    return copied.forward


def failing_under_a_memory_cap_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Raises an error that does not say "memory" while the process runs under an
    address-space limit (RLIMIT_AS), as a library that cannot map its scratch space under the
    cap (oneDNN's "could not create a primitive"); runs the graph faithfully without one."""
    import resource

    if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
        raise RuntimeError("test-only backend: could not create a primitive")
    return gm.forward


def raising_on_batches_in_benchmark_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Runs the graph as it is, except in a benchmark script (``perf.py``) on a batch of more
    than one sequence, where it raises at compile time: a model that crashes in the benchmark
    only, and only in some of its configurations."""
    import sys

    batched = any(  # token ids of several sequences (weights are graph inputs too: float)
        isinstance(x, torch.Tensor) and x.dtype == torch.long and x.dim() == 2 and x.shape[0] > 1
        for x in example_inputs
    )
    if os.path.basename(sys.argv[0]) == "perf.py" and batched:
        raise RuntimeError("test-only backend: refused a batched graph in the benchmark")
    return gm.forward


def cpu_run_fails_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Runs the graph as it is; but the next causal LM the process loads after this compile
    (the CPU fp32 reference's) raises ``MemoryError``, as when the host cannot hold a model
    that fits the device. The load after it (the English judge's) works."""
    _fail_the_cpu_reference()
    return gm.forward


def _fail_the_cpu_reference() -> None:
    """In the device's run, where its reference's own pass did not fail already (the plugin
    computes it before the lease: :func:`_in_a_reference_pass_the_cpu_run_fails`), or where
    a reference file kept by another test was there and no pass ran."""
    if not os.environ.get("NEURONSUPPORT_REFERENCE_FAILED"):
        _fail_the_next_causal_lm_load()


def _in_a_reference_pass_the_cpu_run_fails() -> None:
    """The plugin computes a run's CPU reference in a pass of its own before the device's run
    (``$NEURONSUPPORT_REFERENCE_ONLY``), which imports the run's backend but never compiles:
    where this module's backend makes the CPU run fail for the model, it fails there, at the
    import (the script's ``PARAMS`` say which backend and model)."""
    import sys

    if not os.environ.get("NEURONSUPPORT_REFERENCE_ONLY"):
        return
    params = getattr(sys.modules["__main__"], "PARAMS", {})
    plan = os.environ.get("NEURONSUPPORT_TEST_MISBEHAVIOUR", "")
    backend, model = str(params.get("backend", "")), str(params.get("model_id", ""))
    if backend.endswith(":cpu_run_fails_backend_for_tests") or f"{model}=cpu-run-fails" in plan:
        _fail_the_next_causal_lm_load()


def _fail_the_next_causal_lm_load() -> None:
    import transformers

    # no CPU reference kept by an earlier run (the tests' folders share them): the CPU runs
    os.environ.pop("NEURONSUPPORT_REFERENCE", None)

    auto = transformers.AutoModelForCausalLM
    if not getattr(auto, "cpu_run_fails_for_tests", False):
        setattr(auto, "cpu_run_fails_for_tests", True)  # noqa: B010  (once per process)
        loads = auto.from_pretrained

        def fails_once(*args: Any, **kwargs: Any) -> Any:
            setattr(auto, "from_pretrained", loads)  # noqa: B010
            raise MemoryError("test-only backend: the host cannot hold the CPU reference")

        setattr(auto, "from_pretrained", fails_once)  # noqa: B010


# Backends of the verdict-rate benchmark (benchmarks/verdict_rates.py): two numerically
# correct ones that reorder or round differently, and wrong ones.


def _float_outputs(value: Any, change: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with ``change`` applied to each floating-point tensor in it."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return change(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_float_outputs(v, change) for v in value)
    return value


def _signs(value: torch.Tensor) -> torch.Tensor:
    """A fixed pattern of +1 and -1 of ``value``'s shape (the same on every call)."""
    generator = torch.Generator().manual_seed(1234)
    return torch.randint(0, 2, value.shape, generator=generator).to(value.device) * 2 - 1


def one_ulp_backend_for_tests(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
    """Correct but not bitwise: every floating-point output of the graph moves by one unit in
    the last place of its dtype, up or down in a fixed pattern, as a compiler whose
    reductions round differently."""

    def one_ulp(value: torch.Tensor) -> torch.Tensor:
        away = torch.where(_signs(value) > 0, torch.inf, -torch.inf).to(value.dtype)
        return torch.nextafter(value, away)

    def run(*args: Any) -> Any:
        return _float_outputs(gm.forward(*args), one_ulp)

    return run


def two_ulp_backend_for_tests(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
    """Correct but not bitwise: every floating-point output of the graph moves by two units in
    the last place of its dtype, up or down in a fixed pattern (as a compiler whose reductions
    round differently, twice over)."""

    def two_ulp(value: torch.Tensor) -> torch.Tensor:
        away = torch.where(_signs(value) > 0, torch.inf, -torch.inf).to(value.dtype)
        return torch.nextafter(torch.nextafter(value, away), away)

    def run(*args: Any) -> Any:
        return _float_outputs(gm.forward(*args), two_ulp)

    return run


def _one_percent_off(value: torch.Tensor) -> torch.Tensor:
    return value * (1 + 0.01 * _signs(value).to(value.dtype))


def _one_percent_of_magnitude_off(value: torch.Tensor) -> torch.Tensor:
    """``value`` plus 1% of its own magnitude (root mean square), with a fixed sign pattern:
    not a scale, so no normalization after it can take it back."""
    magnitude = value.float().pow(2).mean().sqrt().to(value.dtype)
    return value + 0.01 * magnitude * _signs(value).to(value.dtype)


#: The ops the wrong backends below miscompile: every spelling of a linear or a matmul.
_MATMULS = (
    torch._C._nn.linear,
    torch.nn.functional.linear,
    torch.matmul,
    operator.matmul,
    torch.ops.aten.linear.default,
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.bmm.default,
)


def _rewritten(
    gm: torch.fx.GraphModule, change: Callable[[torch.Tensor], torch.Tensor], which: slice
) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose matmuls ``which`` (of them all, in graph order: ``slice(1)`` the
    first, ``slice(-1, None)`` the last) have their output go through ``change`` before their
    users see it."""
    copied = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    found = [n for n in copied.graph.nodes if n.op == "call_function" and n.target in _MATMULS]
    for node in found[which]:
        with copied.graph.inserting_after(node):
            off = copied.graph.call_function(change, (node,))
        node.replace_all_uses_with(off, delete_user_cb=lambda user, off=off: user is not off)
    copied.recompile()
    return copied


def one_op_off_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Wrong: the graph's first linear (or matmul) comes out 1% off, each element up or down
    in a fixed pattern (a copy of the graph, rewritten), as a miscompiled op. A graph without
    one runs faithfully. In a transformer that first linear is usually the attention's query
    projection, whose error a softmax over near-equal scores all but removes (the tiny zoo's
    random weights): a weak wrong compiler, kept for comparison."""
    return _rewritten(gm, _one_percent_off, slice(1)).forward


def last_op_off_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Wrong: the graph's last linear (or matmul) comes out 1% off, each element up or down in
    a fixed pattern, as :func:`one_op_off_backend_for_tests` does to the first. The last one is
    the op nearest the output (the head's projection, the LM head, a layer's output dense),
    whose error no softmax takes back: a single miscompiled op that matters."""
    return _rewritten(gm, _one_percent_off, slice(-1, None)).forward


def every_linear_off_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Wrong: every linear (or matmul) of the graph comes out off by 1% of its output's
    magnitude, added with a fixed sign pattern, as a compiler whose lowering of that one op is
    wrong wherever the op appears. A graph without one runs faithfully."""
    return _rewritten(gm, _one_percent_of_magnitude_off, slice(None)).forward


def _ten_percent_of_magnitude_off(value: torch.Tensor) -> torch.Tensor:
    magnitude = value.float().pow(2).mean().sqrt().to(value.dtype)
    return value + 0.1 * magnitude * _signs(value).to(value.dtype)


def large_noise_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Wrong, and far beyond any dtype's noise: every linear (or matmul) of the graph comes out
    off by 10% of its output's magnitude, with a fixed sign pattern."""
    return _rewritten(gm, _ten_percent_of_magnitude_off, slice(None)).forward


def _swap_top_two(scores: torch.Tensor) -> torch.Tensor:
    """``scores`` with its two largest entries at the last position swapped."""
    if scores.dim() < 2 or scores.shape[-1] < 2:
        return scores
    swapped = scores.clone()
    last = swapped[..., -1, :]
    top = last.topk(2, dim=-1).indices
    first, second = last.gather(-1, top[..., :1]), last.gather(-1, top[..., 1:])
    last.scatter_(-1, top[..., :1], second)
    last.scatter_(-1, top[..., 1:], first)
    return swapped


def swapped_top_two_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Callable[..., Any]:
    """Wrong: in the graph's float output with the widest last dimension (the logits, where
    the graph computes them), the two largest scores at the last position trade places, as a
    miscompiled argmax or gather. Every other output is left as it is."""

    def run(*args: Any) -> Any:
        outputs = gm.forward(*args)
        flat = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        scores = [o for o in flat if isinstance(o, torch.Tensor) and o.is_floating_point()]
        scores = [o for o in scores if o.dim() >= 2]
        if not scores:
            return outputs
        widest = max(scores, key=lambda o: o.shape[-1])
        changed = [_swap_top_two(o) if o is widest else o for o in flat]
        return type(outputs)(changed) if isinstance(outputs, (list, tuple)) else changed[0]

    return run


def waits_for_prefetch_backend_for_tests(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    """Compiles as eager, after waiting (60 s at most) inside the run, holding its cores, for a
    file that ``NEURONSUPPORT_TEST_WAIT_FOR`` names (a glob) to appear: the next model's weights,
    which the sweep must download while this one runs. Appends ``present`` or ``absent`` to the
    file ``NEURONSUPPORT_TEST_SAW`` names."""
    import glob

    pattern, deadline = os.environ["NEURONSUPPORT_TEST_WAIT_FOR"], time.monotonic() + 60
    while not glob.glob(pattern) and time.monotonic() < deadline:
        time.sleep(0.1)
    with open(os.environ["NEURONSUPPORT_TEST_SAW"], "a", encoding="utf-8") as saw:
        saw.write("present\n" if glob.glob(pattern) else "absent\n")
    return gm.forward


_in_a_reference_pass_the_cpu_run_fails()


def breaking_a_pass_inductor_backend_for_tests(
    gm: torch.fx.GraphModule, example_inputs: Any
) -> Any:
    """Inductor with one post-grad pass of its own that raises, as an inductor whose pass
    broke: ``neuronsupport bisect --compiler`` names inductor's ``post_grad_passes`` and this
    one among them (``post_grad_custom_pre_pass``)."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    def breaking_pass(graph: torch.fx.Graph) -> None:
        raise NotImplementedError("test-only inductor pass: it broke the graph")

    with config.patch(post_grad_custom_pre_pass=breaking_pass):
        return compile_fx(gm, example_inputs)
