"""Why a run compiled the way it did: graphs and graph breaks by dynamo's own accounting, and
where a failure was raised (runners/lib/graphs.py), on small functions compiled for real."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_neuronsupport.runners.lib.device_ops import CpuOps
from pytest_neuronsupport.runners.lib.entry import attempt
from pytest_neuronsupport.runners.lib.graphs import (
    GraphCount,
    break_reason,
    error_site,
    failure_fields,
)
from pytest_neuronsupport.runners.lib.models import RunFailure, step
from pytest_neuronsupport.runners.lib.protocol import Result
from tests.backends_for_tests import fails_on_linear_backend_for_tests


def breaks_twice(x: torch.Tensor) -> torch.Tensor:
    x = x + 1
    print("a graph break")  # dynamo cannot trace print: the graph ends here
    x = x * 2
    print("another")
    return x - 1


def no_break(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.relu(x) + 1


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Any:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_graphs_and_breaks_are_counted_with_the_user_frame_of_each_break() -> None:
    count = GraphCount("eager")
    out = torch.compile(breaks_twice, backend=count)(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 3.0))  # the backend still compiled each graph
    fields = count.fields(None)
    assert fields["graph_count"] == 3 and fields["graph_breaks"] == 2
    reasons = fields["graph_break_reasons"]
    assert len(reasons) == 2  # two different lines of the same function: two reasons
    assert all(r.startswith("Failed to trace builtin operator") for r in reasons)
    assert "print" in reasons[0]
    line = breaks_twice.__code__.co_firstlineno
    assert reasons[0].endswith(f"test_graphs.py:{line + 2} in breaks_twice)")
    assert reasons[1].endswith(f"test_graphs.py:{line + 4} in breaks_twice)")
    assert "notes" not in fields


def test_the_same_break_taken_again_is_counted_but_its_reason_kept_once() -> None:
    count = GraphCount("eager")
    compiled = torch.compile(breaks_twice, backend=count, dynamic=False)
    compiled(torch.ones(3))
    compiled(torch.ones(5))  # another shape: recompiled, the same breaks again
    fields = count.fields(None)
    assert fields["graph_count"] == 6 and fields["graph_breaks"] == 4
    assert len(fields["graph_break_reasons"]) == 2


def test_a_model_without_breaks_has_one_graph_and_nothing_compiled_gives_no_fields() -> None:
    count = GraphCount("aot_eager")
    torch.compile(no_break, backend=count)(torch.ones(3))
    assert count.fields(None) == {"graph_count": 1, "graph_breaks": 0, "graph_break_reasons": []}
    assert GraphCount("eager").fields(None) == {}


def test_under_fullgraph_the_break_is_the_failure_and_notes_name_its_reason() -> None:
    count = GraphCount("eager")
    with pytest.raises(RunFailure) as raised, step("gen", Result.FAIL_GEN):
        torch.compile(breaks_twice, backend=count, fullgraph=True)(torch.ones(3))
    fields = count.fields(raised.value)
    assert fields["graph_count"] == 0 and fields["graph_breaks"] == 1
    line = breaks_twice.__code__.co_firstlineno + 2
    assert fields["graph_break_reasons"][0].endswith(f"test_graphs.py:{line} in breaks_twice)")
    assert fields["notes"].startswith("graph break under fullgraph=True: Failed to trace builtin")


def test_dynamo_names_the_backend_as_the_run_gave_it() -> None:
    count = GraphCount(fails_on_linear_backend_for_tests)
    linear = torch.nn.Linear(2, 2)
    with pytest.raises(Exception, match="backend='fails_on_linear_backend_for_tests' raised"):
        torch.compile(linear, backend=count)(torch.ones(2))
    assert GraphCount("inductor").__name__ == "inductor"


def test_a_backend_failure_is_placed_in_the_backend_and_notes_name_the_wrapped_error() -> None:
    linear = torch.nn.Linear(2, 2)
    with pytest.raises(RunFailure) as raised, step("gen", Result.FAIL_GEN):
        torch.compile(linear, backend=GraphCount(fails_on_linear_backend_for_tests))(torch.ones(2))
    fields = failure_fields(raised.value)
    assert fields == {
        "error_site": "tests.backends_for_tests:fails_on_linear_backend_for_tests",
        "notes": "NotImplementedError: test backend: no lowering for linear",
    }
    assert raised.value.error.startswith("BackendCompilerFailed")  # the row's error is whole


def test_the_site_is_the_innermost_frame_of_the_compilers_own_package() -> None:
    def lowering() -> None:
        raise ValueError("no lowering")

    def compile_graph() -> None:
        lowering()

    with pytest.raises(ValueError) as raised:
        compile_graph()
    # this test module is the "compiler" here: its innermost frame is the lowering
    assert error_site(raised.value) == f"{__name__}:{lowering.__qualname__}"


def test_an_error_outside_any_compiler_is_placed_at_its_innermost_frame() -> None:
    with pytest.raises(RuntimeError) as raised:
        torch.nn.functional.linear(torch.ones(2, 3), torch.ones(2, 2))
    site = error_site(raised.value)
    assert site is not None and site.endswith(
        ":test_an_error_outside_any_compiler_is_placed_at_its_innermost_frame"
    )
    plain = failure_fields(RunFailure(Result.FAIL_GEN, ValueError("x")))
    assert "notes" not in plain  # nothing wrapped: the error's first line is the note already


def test_a_break_reason_is_one_line_without_machine_paths() -> None:
    reason = (
        "Attempted to call function marked as skipped\n"
        "  Explanation: the function `disable` in file "
        "`/home/me/.venv/lib/python3.11/site-packages/torch/_dynamo/decorators.py` is skipped\n"
        "  Hint: do not\n"
    )
    frame = type("Frame", (), {"filename": "/x/site-packages/transformers/m.py", "lineno": 7})
    frame.name = "forward"  # type: ignore[attr-defined]
    text = break_reason(reason, [frame])
    assert text == (
        "Attempted to call function marked as skipped: the function `disable` in file "
        "`torch/_dynamo/decorators.py` is skipped (transformers/m.py:7 in forward)"
    )
    assert break_reason("just one line", None) == "just one line"


def test_a_run_that_compiled_no_graph_says_so_whatever_the_device() -> None:
    """``compiled``: whether dynamo handed the backend a graph (and, where the runtime counts
    its own, whether it compiled one)."""
    from pytest_neuronsupport.runners.lib.device_ops import CpuOps
    from pytest_neuronsupport.runners.lib.entry import attempt

    def compiling(params: dict[str, Any], ops: Any) -> dict[str, Any]:
        torch.compile(lambda x: x + 1, backend=params["backend"])(torch.ones(2))
        return {"result": Result.PASS}

    params = {"backend": "eager"}
    assert attempt(params, lambda params, ops: {"result": Result.PASS}, CpuOps)["compiled"] is False
    assert attempt(params, compiling, CpuOps)["compiled"] is True


def test_a_break_in_the_harness_sharding_is_the_harness_failure_not_the_models(
    tmp_path: Path,
) -> None:
    """A model sharded with FSDP2 (what the expert-parallel runner once did: ``fully_shard``,
    whose hooks are ``torch._dynamo.disable``d), compiled with ``fullgraph=True`` as on
    Neuron: the break is raised from the harness's code, and the run's verdict says so
    (FAIL(other), never the model's FAIL(gen)), while a break of the model's own code stays
    the model's."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    def run(params: dict[str, Any], ops: Any, model: Any) -> dict[str, Any]:
        with step("gen", Result.FAIL_GEN):
            compiled: Callable[[torch.Tensor], Any] = torch.compile(
                model, backend=params["backend"], fullgraph=True
            )
            compiled(torch.ones(2, 4))
        return {"result": Result.PASS}

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 's'}", rank=0, world_size=1)
    try:
        sharded = fully_shard(torch.nn.Sequential(torch.nn.Linear(4, 4)))
        verdict = attempt({"backend": "eager"}, partial(run, model=sharded), CpuOps)
        count = GraphCount("eager")
        with pytest.raises(RunFailure) as raised:
            run({"backend": count}, None, sharded)
    finally:
        dist.destroy_process_group()
    where = count.fields(raised.value)["harness"]
    assert where.startswith("torch/distributed/fsdp/_fully_shard/"), where
    assert verdict["result"] == Result.FAIL_OTHER
    assert verdict["notes"] == f"the harness's own graph break under fullgraph=True, at {where}"
    assert verdict["error"].startswith(verdict["notes"]) and "Unsupported" in verdict["error"]
    own = attempt({"backend": "eager"}, partial(run, model=breaks_twice), CpuOps)
    assert own["result"] == Result.FAIL_GEN and own["notes"].startswith("graph break under")
    assert "harness" not in own
