"""A minimal reproducer of a compiled run's failure: PyTorch's own minifier, on a recorded graph.

With ``--neuron-minify`` the script's entry runs ``minified(run)``: the run's backend is wrapped
in a :class:`GraphRecorder`, which keeps each graph dynamo hands it with a copy of its inputs.
When the run fails while compiling or running (FAIL(gen), FAIL(forward)) or its output is wrong
(FAIL(output)), :func:`minify` finds the first recorded graph that fails the same way alone,
compiled with the same backend, shrinks it with ``torch._functorch.fx_minifier.minifier`` (the
machinery behind dynamo's ``repro_after``), and writes a standalone ``repro.py`` as text: the
shrunken graph as an ``nn.Module``, its inputs embedded, compiled with the backend. Minifying
adds fields to the verdict (``repro_py``, ``repro_ops_before``, ``repro_ops_after``,
``repro_ops``, ``repro_note``); it never changes the result.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import inspect
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx
from torch._dynamo.backends.registry import lookup_backend
from torch._dynamo.debug_utils import NNModuleToString
from torch._functorch.fx_minifier import minifier

from pytest_neuronsupport.runners.lib.backend import resolve_backend
from pytest_neuronsupport.runners.lib.models import RunFailure
from pytest_neuronsupport.runners.lib.protocol import Result, first_line, phase

#: The failures of a run that a recorded graph may reproduce: compiling or running it raised.
MINIFIED_RESULTS = (Result.FAIL_GEN, Result.FAIL_FORWARD)
#: An input tensor larger than this (bytes) is not embedded in repro.py: it is made up there
#: (seeded normal values, zeros for integers), and the header says so.
REPRO_EMBED_BYTES = 1 << 20
#: The names fx's generated code uses that repro.py defines itself.
REPRO_KNOWN_GLOBALS = frozenset(
    {"inf", "nan", "NoneType", "torch", "device", "fx_pytree", "pytree", "tensor"}
)
REPRO_TEMPLATE = '''\
#!/usr/bin/env python3
# pytest-neuronsupport minimal reproducer: `python3 repro.py` {purpose}
# model: {model}  backend: {backend}  dtype: {dtype}
# reproduces: {error}
# {note}
from __future__ import annotations

import base64
import functools
import importlib
import io
import os
import sys
from math import inf, nan

import torch
import torch.fx._pytree as fx_pytree
import torch.utils._pytree as pytree
from torch import device, tensor

NoneType = type(None)
BACKEND = {backend_literal}
FAILURE = {failure_literal}
DTYPE = {dtype_literal}
GRAD_ENABLED = {grad_literal}
DEVICES = {devices_literal}
INPUTS = (
{inputs_literal}
)
{globals_text}
{module_text}

{resolve_text}


{mismatch_text}


def repro_inputs():
    """Fresh copies of the graph's inputs, on their devices (made-up values where noted)."""
    loaded = torch.load(io.BytesIO(base64.b64decode("".join(INPUTS))), weights_only=True)
    generator = torch.Generator().manual_seed(0)
    fresh = []
    for value, where in zip(loaded, DEVICES):
        if isinstance(value, tuple) and value[:1] == ("made up",):
            dtype = getattr(torch, value[2])
            if dtype.is_floating_point:
                value = torch.randn(value[1], generator=generator).to(dtype)
            else:
                value = torch.zeros(value[1], dtype=dtype)
        fresh.append(value.to(where, copy=True) if isinstance(value, torch.Tensor) else value)
    return fresh


def main():
    torch.set_grad_enabled(GRAD_ENABLED)
    if BACKEND is None:
        raise SystemExit("set BACKEND: the run's backend has no name this script can import")
    mod = Repro()
    compiled = torch.compile(mod, backend=resolve_backend(BACKEND), fullgraph=True)
    if FAILURE == "error":
        compiled(*repro_inputs())
        print("not reproduced: the compiled graph ran without error")
        return
    problem = output_mismatch(mod(*repro_inputs()), compiled(*repro_inputs()), DTYPE)
    if problem:
        raise AssertionError(problem)
    print("not reproduced: the compiled outputs match eager")


if __name__ == "__main__":
    main()
'''


def minified(run: Callable[..., Any]) -> Callable[..., Any]:
    """The run with its graphs recorded; on a failure, a minimal reproducer in the verdict.

    repro.py names the backend by ``params["backend_name"]`` when set, else by
    :func:`backend_spelling` of ``params["backend"]``. A failure of another phase (FAIL(load),
    FAIL(other)) is raised as it was, a run that passes is returned untouched."""

    def run_and_minify(params: dict[str, Any], ops: Any) -> Any:
        given = getattr(params["backend"], "backend", params["backend"])  # under a GraphCount
        name = params.get("backend_name") or backend_spelling(given)
        recorder = GraphRecorder(params["backend"], name)
        try:
            verdict = run({**params, "backend": recorder}, ops)
            failure, error = "output", None
        except RunFailure as exc:
            if exc.result not in MINIFIED_RESULTS:
                raise
            verdict = {"result": exc.result, "error": exc.error}
            failure, error = "error", exc.error
        if failure == "output" and (verdict or {}).get("result") != Result.FAIL_OUTPUT:
            return verdict
        phase("minify")
        try:
            found = minify(
                recorder, failure, params["dtype"], error=error, model=params.get("model_id", "")
            )
        except Exception as exc:
            found = {"repro_note": f"the minifier failed: {exc!r}"[:500]}
        return {**verdict, **found}

    return run_and_minify


class GraphRecorder:
    """A ``torch.compile`` backend that records each graph and a copy of its inputs (tensors
    cloned, as later calls change a static cache in place; parameters kept by reference), then
    compiles it with ``backend``, a registered name or a callable. It remembers which graph
    raised, compiling or running."""

    def __init__(self, backend: Any, name: str | None = None) -> None:
        self.backend = backend
        self.name = name if name is not None else backend_spelling(backend)
        resolved = resolve_backend(backend) if isinstance(backend, str) else backend
        self.compiler: Callable[..., Any] = lookup_backend(resolved)
        self.__name__ = getattr(self.compiler, "__name__", "?")  # dynamo's errors name it
        self.graphs: list[tuple[torch.fx.GraphModule, list[Any], bool]] = []
        self.failed: tuple[int, BaseException] | None = None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        index = len(self.graphs)
        kept = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))  # the backend may change gm
        self.graphs.append((kept, fresh_inputs(example_inputs), torch.is_grad_enabled()))
        try:
            compiled = self.compiler(gm, example_inputs)
        except Exception as exc:
            self.failed = (index, exc)
            raise

        def run_recorded(*args: Any) -> Any:
            try:
                return compiled(*args)
            except Exception as exc:
                self.failed = (index, exc)
                raise

        return functools.update_wrapper(run_recorded, compiled, updated=())


def fresh_inputs(inputs: Sequence[Any]) -> list[Any]:
    """Tensors cloned (a graph may change its inputs in place), parameters as they are, and a
    dynamic size (a graph dynamo made dynamic is given a symbol) as the number it stood for."""
    fresh = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and not isinstance(x, torch.nn.Parameter):
            x = x.detach().clone()
        elif isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            x = x.node.hint if x.node.hint is not None else x.node.pytype(x)
        fresh.append(x)
    return fresh


def backend_spelling(backend: Any) -> str | None:
    """How repro.py names the backend: a registered name as it is, an importable callable as
    ``module:qualname``; None when it has no such name."""
    if isinstance(backend, str):
        return backend
    module, qualname = getattr(backend, "__module__", None), getattr(backend, "__qualname__", "")
    if not module or module == "__main__" or module not in sys.modules:
        return None
    try:
        found = functools.reduce(getattr, qualname.split("."), sys.modules[module])
    except AttributeError:
        return None
    return f"{module}:{qualname}" if found is backend else None


def minify(
    recorder: GraphRecorder,
    failure: str,
    dtype: str,
    *,
    error: str | None = None,
    model: str = "",
) -> dict[str, Any]:
    """Shrink the first recorded graph that fails alone, compiled with the recorder's backend.

    ``failure="error"``: it raises the run's exception type: the type the recorder saw raised,
    else the type ``error`` (the run's ``"Type: message"``) starts with; an exception matches
    when that type is in its chain of causes, and the note and repro.py's header quote that
    exception's first line. ``failure="output"``: its outputs differ from the
    graph's own eager outputs by the rule of :func:`output_mismatch`. The graph the run failed
    in is tried first. Returns the verdict's fields: ``repro_py``, ``repro_ops_before``,
    ``repro_ops_after``, ``repro_ops``, ``repro_note``; only ``repro_note`` when no recorded
    graph fails alone."""
    expected, what = "AssertionError", ""  # an output mismatch: repro.py raises AssertionError
    if failure == "error":
        raised = recorder.failed[1] if recorder.failed else None  # unwrapped by dynamo
        what = first_line(f"{type(raised).__name__}: {raised}" if raised else error)
        expected = what.split(":")[0].strip() or "Exception"
    count, order = len(recorder.graphs), list(range(len(recorder.graphs)))
    if recorder.failed:
        order.insert(0, order.pop(recorder.failed[0]))
    for index in order:
        gm, inputs, grad = recorder.graphs[index]
        gm, inputs = graph_with_inputs(gm, inputs)
        with torch.set_grad_enabled(grad), quiet_minifier():
            if failure == "error":
                fails = functools.partial(raises, recorder.compiler, expected)
            else:
                fails = functools.partial(mismatches, recorder.compiler, dtype)
            if not fails(gm, inputs):
                continue
            small, small_inputs = minifier(
                gm, fresh_inputs(inputs), fails, dump_state=ignore_dump, skip_sanity=True
            )
            if failure == "output":
                what = compiled_mismatch(recorder.compiler, dtype, small, small_inputs) or ""

        before, after = graph_ops(gm), graph_ops(small)
        note = f"graph {index + 1} of {count} minified from {len(before)} ops to {len(after)}"
        text = repro_script(small, small_inputs, recorder.name, failure, dtype, grad, model, what)
        checked = repro_reproduces(text, expected)
        note += "" if checked else " (repro.py did not reproduce it when checked)"
        return {
            "repro_py": text,
            "repro_ops_before": len(before),
            "repro_ops_after": len(after),
            "repro_ops": after,
            "repro_note": first_line(f"{note}: {what}", 500),
        }
    kind = f"raises {expected}" if failure == "error" else "differs from eager"
    return {"repro_note": f"no repro: none of the {count} recorded graphs {kind} alone"}


@contextlib.contextmanager
def quiet_minifier() -> Iterator[None]:
    """The minifier's progress (and a checked repro's output) dropped, and its HLO dump
    (``XLA_HLO_DEBUG``, into the current folder) off."""
    hlo = os.environ.pop("XLA_HLO_DEBUG", None)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        if hlo is not None:
            os.environ["XLA_HLO_DEBUG"] = hlo


def ignore_dump(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> None:
    """The minifier's ``dump_state``: nothing is written; the result is returned."""


def graph_with_inputs(
    gm: torch.fx.GraphModule, inputs: list[Any]
) -> tuple[torch.fx.GraphModule, list[Any]]:
    """A copy of the graph whose tensor attributes are inputs, so that repro.py embeds their
    values (PyTorch's module printer would make them up)."""
    graph = copy.deepcopy(gm.graph)
    inputs = list(inputs)
    first = next(n for n in graph.nodes if n.op != "placeholder")
    for node in [n for n in graph.nodes if n.op == "get_attr"]:
        value = functools.reduce(getattr, str(node.target).split("."), gm)
        if isinstance(value, torch.Tensor):
            with graph.inserting_before(first):
                node.replace_all_uses_with(graph.placeholder(node.name + "_input"))
            graph.erase_node(node)
            inputs.append(value)
    return torch.fx.GraphModule(gm, graph), inputs


def raises(
    compiler: Callable[..., Any], expected: str, gm: torch.fx.GraphModule, inputs: Sequence[Any]
) -> bool:
    """Whether compiling ``gm`` with ``compiler`` and running it raises ``expected`` (by type
    name, anywhere in the exception's chain of causes)."""
    try:
        compiler(gm, fresh_inputs(inputs))(*fresh_inputs(inputs))
    except Exception as exc:
        return expected in error_types(exc)
    return False


def error_types(exc: BaseException | None) -> set[str]:
    """The type names of an exception and of its causes (dynamo wraps a backend's error)."""
    names: set[str] = set()
    while exc is not None and type(exc).__name__ not in names:
        names.add(type(exc).__name__)
        exc = exc.__cause__ or getattr(exc, "inner_exception", None) or exc.__context__
    return names


def mismatches(
    compiler: Callable[..., Any], dtype: str, gm: torch.fx.GraphModule, inputs: Sequence[Any]
) -> bool:
    """Whether ``gm`` compiled with ``compiler`` gives other outputs than ``gm`` run eagerly."""
    return compiled_mismatch(compiler, dtype, gm, inputs) is not None


def compiled_mismatch(
    compiler: Callable[..., Any], dtype: str, gm: torch.fx.GraphModule, inputs: Sequence[Any]
) -> str | None:
    """How ``gm`` compiled with ``compiler`` differs from ``gm`` run eagerly
    (:func:`output_mismatch`), or None; a graph that raises does not mismatch."""
    try:
        expected = gm(*fresh_inputs(inputs))
        actual = compiler(gm, fresh_inputs(inputs))(*fresh_inputs(inputs))
    except Exception:
        return None
    return output_mismatch(expected, actual, dtype)


# A fixed rule, not the measured noise of the output check (ACCURACY_MULTIPLE x eager's error
# to float64), on purpose: the verdict is decided before the minifier runs, by the measured
# rule, and the minifier never changes it; this rule only chooses which graph to shrink and what
# repro.py asserts. It is evaluated for every candidate the minifier tries (hundreds a graph),
# and repro.py carries it inlined (its source), standalone, with no float64 run of its own. What
# it can cost is a repro, never a verdict: a wrong op whose error stays under 32 ulps at every
# graph's outputs leaves "no recorded graph fails alone".
def output_mismatch(expected: Any, actual: Any, dtype: str, ulps: int = 32) -> str | None:
    """How a compiled graph's outputs differ from eager's, or None when they match. The rule:
    every tensor output has eager's shape and NaN/inf positions; a floating-point output is
    within ``ulps * eps * max|eager|`` of eager (eps: that of the run's dtype, or of the
    output's own when coarser; 32 ulps is 3.8e-6 of the largest eager value in float32,
    0.031 in float16, 0.25 in bfloat16); any other output is equal."""

    def leaves(value: Any) -> list[Any]:
        if isinstance(value, (list, tuple)):
            return [leaf for item in value for leaf in leaves(item)]
        return [value]

    want, got = leaves(expected), leaves(actual)
    if len(want) != len(got):
        return f"the compiled graph gives {len(got)} outputs, eager {len(want)}"
    for i, (a, b) in enumerate(zip(want, got, strict=True)):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            if a != b:
                return f"output {i}: compiled {b!r}, eager {a!r}"
            continue
        a, b = a.detach().cpu(), b.detach().cpu()
        if a.shape != b.shape:
            return f"output {i}: compiled shape {list(b.shape)}, eager {list(a.shape)}"
        if not a.is_floating_point():
            if not torch.equal(a, b.to(a.dtype)):
                return f"output {i}: compiled integers differ from eager"
            continue
        eps = max(torch.finfo(getattr(torch, dtype)).eps, torch.finfo(a.dtype).eps)
        a, b = a.double(), b.double()
        if not torch.equal(a.isfinite(), b.isfinite()) or not torch.equal(a.isnan(), b.isnan()):
            return f"output {i}: compiled NaN/inf where eager has none, or the reverse"
        finite = a.isfinite()
        if not finite.any():
            continue
        scale = float(a[finite].abs().max())
        tolerance = ulps * eps * scale
        difference = float((a[finite] - b[finite]).abs().max())
        if difference > tolerance:
            return (
                f"output {i}: compiled differs from eager by {difference:.3g} > tolerance "
                f"{tolerance:.3g} ({ulps} eps of {dtype} x max|eager| {scale:.3g})"
            )
    return None


def graph_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The graph's ops, by name: ``torch._C._nn.linear``, ``Tensor.relu``, a module's type."""
    names = []
    for node in gm.graph.nodes:
        if node.op == "call_function":
            names.append(torch.fx.node._get_qualified_name(node.target))
        elif node.op == "call_method":
            names.append(f"Tensor.{node.target}")
        elif node.op == "call_module":
            names.append(type(gm.get_submodule(str(node.target))).__qualname__)
    return names


def repro_script(
    gm: torch.fx.GraphModule,
    inputs: Sequence[Any],
    backend: str | None,
    failure: str,
    dtype: str,
    grad: bool,
    model: str,
    what: str,
) -> str:
    """The text of repro.py: the graph as a module (PyTorch's own printer), its inputs embedded
    (``torch.save``, base64), compiled with ``backend`` (``fullgraph=True``) and run. Untrusted
    text (model, backend, error) is JSON in comments and ``repr`` in literals, never code."""
    saved, devices = [], []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            devices.append(str(x.device))
            x = x.detach().cpu()
            if x.numel() * x.element_size() > REPRO_EMBED_BYTES:
                x = ("made up", list(x.shape), str(x.dtype).removeprefix("torch."))
        else:
            devices.append("cpu")
        saved.append(x)
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    blob = base64.b64encode(buffer.getvalue()).decode("ascii")
    made_up = sum(isinstance(x, tuple) for x in saved)
    defined = []
    for name, value in gm.graph.python_code("self").globals.items():
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if name in REPRO_KNOWN_GLOBALS or not name.isidentifier() or not module or not qualname:
            continue
        defined.append(
            f"{name} = functools.reduce(getattr, {qualname!r}.split('.'), "
            f"importlib.import_module({module!r}))"
        )
    purpose = {
        "error": "raises what the compiled graph raised",
        "output": "raises AssertionError: the compiled outputs differ from eager",
    }[failure]
    return REPRO_TEMPLATE.format(
        purpose=purpose,
        model=json.dumps(model),
        backend=json.dumps(backend),
        dtype=json.dumps(dtype),
        error=json.dumps(first_line(what)),
        note=f"{made_up} input(s) too large to embed are made up" if made_up else "inputs embedded",
        backend_literal=repr(backend),
        failure_literal=repr(failure),
        dtype_literal=repr(dtype),
        grad_literal=repr(grad),
        devices_literal=repr(devices),
        inputs_literal="\n".join(f"    {blob[i : i + 96]!r}" for i in range(0, len(blob), 96)),
        globals_text="\n".join(defined),
        module_text=NNModuleToString.convert(gm).strip(),
        resolve_text=inspect.getsource(resolve_backend).strip(),
        mismatch_text=inspect.getsource(output_mismatch).strip(),
    )


def repro_reproduces(text: str, expected: str) -> bool:
    """Whether repro.py, run here (not as ``__main__``), raises ``expected`` (in the chain of
    causes): the run's error, or AssertionError for an output mismatch."""
    namespace: dict[str, Any] = {"__name__": "repro"}
    try:
        with torch.set_grad_enabled(torch.is_grad_enabled()), quiet_minifier():
            exec(compile(text, "repro.py", "exec", dont_inherit=True), namespace)
            namespace["main"]()  # sets the grad mode: restored after
    except Exception as exc:
        return expected in error_types(exc)
    return False
