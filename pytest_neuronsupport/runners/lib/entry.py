"""The script's entry: run the model, turn a classified failure into its verdict, write it.

``main`` runs one model in this process; ``main_ranks`` is the entry of a several-core run. The
script exits 0 whenever the run was classified; an exception that escapes the runner is a crash:
the process exits non-zero and the plugin classifies it FAIL(other) from the exit status and the
tail of the output.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from pytest_neuronsupport.runners.lib.graphs import GraphCount, failure_fields
from pytest_neuronsupport.runners.lib.models import RunFailure
from pytest_neuronsupport.runners.lib.processes import stacks_on_request
from pytest_neuronsupport.runners.lib.protocol import (
    PHASES,
    REFERENCE_ONLY_ENV,
    Result,
    write_verdict,
)
from pytest_neuronsupport.runners.lib.ranks import RANK_VERDICT_ENV, launch_ranks
from pytest_neuronsupport.runners.lib.warned import shown_not_raised


def main(params: dict[str, Any], run: Callable[..., Any], ops_class: type) -> int:
    """Run one model and write its verdict (``--result PATH``); or only its CPU reference
    (``$NEURONSUPPORT_REFERENCE_ONLY``: :func:`reference_attempt`). A library's warning
    is shown, never raised (``PYTHONWARNINGS=error``): it is not the model's failure."""
    shown_not_raised()
    own_thread_pool()
    stacks_on_request()  # a run that times out says where it hung
    if os.environ.get(REFERENCE_ONLY_ENV):
        write_verdict(reference_attempt(params, run), sys.argv[1:])
    else:
        write_verdict(attempt(params, run, ops_class), sys.argv[1:])
    return 0


def own_thread_pool() -> None:
    """Torch's CPU thread pool made anew, in the process's one thread, before the run starts
    any other. A run is forked (from the fork server, a rank from its launcher): torch marks
    the parent's pool leaked in the child and replaces it on its first use, a replacement
    that is not thread-safe. Two threads using it first at once (transformers loads weights
    on a thread pool) can find no pool: ``RuntimeError: ... Invalid thread pool!``, a
    rank's FAIL(load) that was not the model's."""
    torch.set_num_threads(torch.get_num_threads())


def main_ranks(params: dict[str, Any], run: Callable[..., Any], ops_class: type) -> int:
    """Several cores: launch one rank per core, or be one (``RANK`` set). Rank 0 reports; another
    rank that fails writes its failure for the launcher, and exits non-zero."""
    shown_not_raised()  # as in main
    own_thread_pool()  # a rank is forked from the launcher
    stacks_on_request()
    rank = os.environ.get("RANK")
    if os.environ.get(REFERENCE_ONLY_ENV):  # the CPU reference: one process, no rank
        return main(params, run, ops_class)
    if rank is None:
        return launch_ranks(params, ops_class, lambda: main_ranks(params, run, ops_class))
    if rank == "0":
        return main(params, run, ops_class)
    failure = attempt(params, run, ops_class)
    if failure is None:
        return 0
    with open(os.environ[RANK_VERDICT_ENV], "w", encoding="utf-8") as f:
        json.dump(failure, f)
    return 3


def reference_attempt(params: dict[str, Any], run: Callable[..., Any]) -> dict[str, Any]:
    """Run the model's runner for its CPU reference only, with no device set up (no ops: a
    runner that does not know the reference-only pass fails here, and the device's run computes
    its reference itself); when each phase began, for the row's ``reference_s``."""
    torch.manual_seed(0)
    try:
        verdict = run(params, None)
    except RunFailure as exc:  # its load failed: the device's run will say so itself
        verdict = {"result": exc.result, "error": exc.error, "reference_only": False}
    return {**verdict, "phases": [*PHASES, ("", time.perf_counter())]}


def attempt(params: dict[str, Any], run: Callable[..., Any], ops_class: type) -> Any:
    """Set the device up and run the model, its graphs and graph breaks counted; a classified
    failure becomes the verdict, with where it was raised. With it, what the device's runtime
    says of the run (``ops.report()``: TorchNeuron's operators on the CPU...), whether a graph
    was compiled at all, and what the row's phase times are made of
    (:func:`~pytest_neuronsupport.runners.lib.protocol.phase_times`): when each phase began,
    and the end; dynamo's own accounting of its compile times (the seconds of each frame it
    compiled, ``_compile.compile_inner``: tracing, lowering, the backend's compile) and its
    counters (inductor's FX graph cache's hits and misses)."""
    torch.manual_seed(0)
    ops = ops_class()  # sets the device up
    options: dict[str, Any] = getattr(ops, "compile_options", lambda b: {})(params["backend"])
    count = GraphCount(params["backend"], options)
    try:
        verdict, failure = run({**params, "backend": count}, ops), None
    except RunFailure as exc:
        verdict, failure = {"result": exc.result, "error": exc.error, **failure_fields(exc)}, exc
    said: dict[str, Any] = {**count.fields(failure), **getattr(ops, "report", dict)()}
    said["compiled"] = count.graphs > 0 and said.pop("graphs_run", None) != 0
    if where := said.pop("harness", None):  # not the model's failure: the harness's own
        said["notes"] = f"the harness's own graph break under fullgraph=True, at {where}"
        said.update(result=Result.FAIL_OTHER, error=f"{said['notes']}\n{verdict['error']}")
    marks, utils = [*PHASES, ("", time.perf_counter())], torch._dynamo.utils
    times = dict(phases=marks, dynamo=utils.compilation_time_metrics, counters=utils.counters)
    return None if verdict is None else {**verdict, **said, **times}
