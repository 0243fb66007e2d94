"""Why a run compiled the way it did: dynamo's own accounting of graphs and graph breaks, and
where a failure was raised.

Every run compiles through a :class:`GraphCount`, a backend that counts the graphs dynamo hands
over and keeps the reason dynamo gives for each graph ended by a break (its
``compile_subgraph_reason``, with the user frames: what ``torch._dynamo.explain`` reports), before
compiling each with the run's backend. Under ``fullgraph=True`` a break is the failure itself
(dynamo raises ``Unsupported``): it is counted, and its reason becomes the row's ``notes``.
:func:`error_site` names the frame a failure was raised in, inside the compiler.
"""

from __future__ import annotations

import re
import traceback
from typing import Any

from torch._dynamo.backends.registry import lookup_backend

#: The code the harness puts around a model (its sharding's hooks, under site-packages): a graph
#: break raised there is the harness's own failure, never the model's (FSDP2's disabled hooks).
HARNESS = ("torch/distributed/", "transformers/distributed/", "accelerate/")
#: Modules whose frames are not the compiler's: the run itself, the model's code, dynamo's
#: tracing and the standard wrappers a compile goes through.
NOT_COMPILER = tuple("__main__ transformers torch.nn torch._dynamo torch.utils contextlib".split())


class GraphCount:
    """A ``torch.compile`` backend that counts graphs and graph breaks, then compiles with
    ``backend`` (a registered name or a callable), given ``options`` where there are any."""

    def __init__(self, backend: Any, options: dict[str, Any] | None = None) -> None:
        self.backend, self.compiler = backend, lookup_backend(backend)
        self.__name__ = backend if isinstance(backend, str) else self.compiler.__name__
        self.graphs, self.breaks = 0, list[str]()
        self.options = {"options": options} if options else {}  # the backend's own options

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        self.graphs += 1
        if (reason := getattr(gm, "compile_subgraph_reason", None)) and reason.graph_break:
            self.breaks.append(break_reason(reason.reason, reason.user_stack))
        return self.compiler(gm, example_inputs, **self.options)

    def fields(self, failure: BaseException | None) -> dict[str, Any]:
        """The row's ``graph_count``, ``graph_breaks``, ``graph_break_reasons`` (and ``notes``
        when a break under ``fullgraph=True`` is the failure; ``harness``: where, if it was the
        harness's own code); nothing if nothing compiled."""
        breaks, notes = list(self.breaks), {}
        while failure is not None and type(failure).__name__ != "Unsupported":
            failure = failure.__cause__
        if failure is not None:
            breaks.append(break_reason(str(failure), stack := getattr(failure, "real_stack", [])))
            notes = {"notes": f"graph break under fullgraph=True: {breaks[-1]}"[:300]}
            at = stack[-1].filename.rpartition("site-packages/")[2] if stack else ""
            if at.startswith(HARNESS):  # raised in the harness's code: not the model's break
                notes["harness"] = f"{at}:{stack[-1].lineno} in {stack[-1].name}"
        counts = {"graph_count": self.graphs, "graph_breaks": len(breaks), **notes}
        reasons = {"graph_break_reasons": list(dict.fromkeys(breaks))}
        return {**counts, **reasons} if self.graphs or breaks else {}


def break_reason(reason: str, user_stack: Any) -> str:
    """A break's reason in one line (dynamo's first line, and its explanation), and the user
    frame it happened in."""
    lines = [line.strip().removeprefix("Explanation: ") for line in reason.strip().splitlines()]
    text = ": ".join(lines[:2]) if lines[1:2] and lines[1] else lines[0]
    text = re.sub(r"[^\s`'\"]*site-packages/", "", text)  # the same on every machine
    if not user_stack:
        return text
    where, frame = user_stack[-1].filename.rpartition("site-packages/")[2], user_stack[-1]
    return f"{text} ({where}:{frame.lineno} in {frame.name})"


def failure_fields(failure: BaseException) -> dict[str, Any]:
    """Where a failure was raised (``error_site``), and, when it wraps another (dynamo wraps a
    backend's error), ``notes`` naming the error it wraps."""
    chain = [failure]  # dynamo's BackendCompilerFailed keeps the backend's as inner_exception
    while len(chain) < 9 and (chain[-1].__cause__ or getattr(chain[-1], "inner_exception", None)):
        chain.append(chain[-1].__cause__ or chain[-1].inner_exception)  # type: ignore[attr-defined]
    fields = {"error_site": error_site(root := chain[-1])}
    if len(chain) > 2:  # RunFailure, a wrapper, the error it wraps
        fields["notes"] = f"{type(root).__name__}: {root}".split("\n")[0][:300]
    return fields


def error_site(error: BaseException) -> str | None:
    """``module:function`` where ``error`` was raised inside the compiler: the innermost frame
    of the package of the first frame outside :data:`NOT_COMPILER` (the backend's own code,
    ``torch._inductor``, TorchNeuron...); else the innermost frame."""
    frames = [
        (str(f.f_globals.get("__name__")), f.f_code.co_qualname)
        for f, _ in traceback.walk_tb(error.__traceback__)
        if f.f_globals is not globals()  # without this module's own (GraphCount), wherever it is
    ]
    inside = [f for f in frames if f[0] != "torch" and not f[0].startswith(NOT_COMPILER)]
    inside = inside or frames[-1:]
    first = inside[0][0].split(".") if inside else [""]
    package = ".".join(first[: 2 if first[0] == "torch" else 1]) + "."
    return ":".join([f for f in inside if f"{f[0]}.".startswith(package)][-1]) if inside else None
